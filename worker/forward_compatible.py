"""Payloads a newer release wrote, read by an older one: the fields it does not know are dropped.

Every model refuses unknown fields (`api/_base.py`: a typo in a manifest must be an error, not
a setting silently ignored). A payload is not a manifest. A newer release adds a field to an
activity's result or to a pool's continue-as-new state; a worker rolled back to the older
release must still read the histories the newer one advanced, or every task of those workflows
fails and is retried without end (docs/upgrades.md, "Rolling back"). Protocol buffers settle
this by skipping unknown fields; this converter does the same for our JSON.

Decoding validates as pydantic always does. Only when every error is an unknown field does it
drop exactly those fields and validate again, so a wrong type or a missing field still fails
the task, and the objects that keep unknown fields by design (`ObjectMeta`) keep them.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)

logger = logging.getLogger(__name__)

# Each unknown field is reported once a process (a replay reads the same payloads again).
_reported: set[str] = set()


def without_unknown_fields(data: bytes, error: ValidationError) -> bytes | None:
    """`data` without the fields `error` names as unknown, or None when the error is anything
    else too (or a field's place cannot be found in `data`)."""
    errors = error.errors(include_url=False, include_input=False)
    if not errors or any(e["type"] != "extra_forbidden" for e in errors):
        return None
    document = json.loads(data)
    for e in errors:
        if not _drop(document, e["loc"]):
            return None
    return json.dumps(document, separators=(",", ":")).encode()


def _drop(document: Any, loc: tuple[int | str, ...]) -> bool:
    *path, last = loc
    node = document
    for step in path:
        if not _holds(node, step):  # a step pydantic adds (a union member's tag)
            return False
        node = node[step]
    if isinstance(node, dict) and _holds(node, last):
        del node[last]
        return True
    return False


def _holds(node: Any, step: int | str) -> bool:
    if isinstance(node, dict):
        return isinstance(step, str) and step in node
    return isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node)


def _field_names(error: ValidationError) -> list[str]:
    return sorted(
        {".".join(str(s) for s in e["loc"] if not isinstance(s, int)) for e in error.errors()}
    )


class ForwardCompatibleJSONConverter(PydanticJSONPlainPayloadConverter):
    """The SDK's pydantic JSON converter, reading fields it does not know as absent."""

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        try:
            return super().from_payload(payload, type_hint)
        except ValidationError as error:
            trimmed = without_unknown_fields(payload.data, error)
            if trimmed is None:
                raise
            fields = _field_names(error)
        read = super().from_payload(Payload(metadata=payload.metadata, data=trimmed), type_hint)
        new = [f for f in fields if f"{type_hint}:{f}" not in _reported]
        if new:
            _reported.update(f"{type_hint}:{f}" for f in new)
            logger.warning(
                "read a %s without the fields this release does not know: %s "
                "(written by a newer release; ignored)",
                getattr(type_hint, "__name__", type_hint),
                ", ".join(new),
            )
        return read


class ForwardCompatiblePayloadConverter(CompositePayloadConverter):
    """The SDK's default converters, with `ForwardCompatibleJSONConverter` for JSON."""

    def __init__(self) -> None:
        json_converter = ForwardCompatibleJSONConverter()
        super().__init__(
            *(
                json_converter if isinstance(c, JSONPlainPayloadConverter) else c
                for c in DefaultPayloadConverter.default_encoding_payload_converters
            )
        )
