"""A pydantic validation error as field paths and messages a user can act on.

Shared by `cloudburst validate` and the trigger (the condition and Event it puts on an
invalid NodePool or NodeClass): the same words wherever a user looks.
"""

from __future__ import annotations

import math
import re
import reprlib
from typing import Any

from pydantic import ValidationError

from api.limits import PATTERN_MEANINGS


def field_errors(err: ValidationError) -> list[tuple[str, str]]:
    """(field path, message) for each error; "" is the whole document."""
    found: list[tuple[str, str]] = []
    for error in err.errors():
        parts = [printable(str(part)) for part in error["loc"] if not _is_union_tag(part)]
        path = ".".join(parts)
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown field (check the spelling; fields are camelCase)"
        elif error["type"] == "missing":
            message = "required field is missing"
        elif error["type"] == "string_pattern_mismatch":
            pattern = (error.get("ctx") or {}).get("pattern", "")
            meaning = PATTERN_MEANINGS.get(pattern)
            message = f"must be {meaning}" if meaning else message
        # A validator's own message already says what it got.
        if "input" in error and error["type"] not in _INPUT_NOT_SHOWN:
            message = f"{message} (got {shown(error['input'])})"
        if found and found[-1][0] == path:
            # One value failing every member of a union: one line, all the options.
            found[-1] = (path, f"{found[-1][1]}; or {message}")
            continue
        found.append((path, message))
    return found


def summary(err: ValidationError, limit: int = 5) -> str:
    """The errors on one line: `spec.weight: ...; spec.limits.cpu: ...` (at most `limit`)."""
    errors = field_errors(err)
    text = "; ".join(f"{path or '(document)'}: {message}" for path, message in errors[:limit])
    more = len(errors) - limit
    return f"{text}; and {more} more" if more > 0 else text


def shown(value: Any) -> str:
    """A short, printable picture of a user's value: never a megabyte, never a traceback."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of about {_digits(value)} digits"
    try:
        return _SHORT.repr(value)
    except Exception:  # a value whose repr fails is still a value the user wrote
        return f"a {type(value).__name__}"


def printable(text: str, limit: int = 80) -> str:
    """User text as one short line: control characters escaped (no terminal escapes, no line
    breaks), long text cut."""
    short = text if len(text) <= limit else f"{text[:limit]}..."
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in short)


_INPUT_NOT_SHOWN = ("model_type", "dict_type", "missing", "value_error", "extra_forbidden")

# pydantic names union members in the location ("str", "list[constrained-str]"); users never
# see those.
_UNION_TAG = re.compile(
    r"^(str|int|float|bool|constrained-\w+|"
    r"(list|dict|tuple|set|frozenset|nullable|function-\w+)\[.*\])$"
)


def _is_union_tag(part: Any) -> bool:
    return isinstance(part, str) and bool(_UNION_TAG.match(part))


def _digits(value: int) -> int:
    return math.floor(value.bit_length() * math.log10(2)) + 1


_SHORT = reprlib.Repr()
_SHORT.maxstring = 80
_SHORT.maxother = 80
_SHORT.maxlevel = 3
_SHORT.maxlist = _SHORT.maxdict = 6
