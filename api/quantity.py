"""Kubernetes resource quantities ("1500m", "2Gi", "0.5") as integers we can add up.

The grammar is Kubernetes' own (k8s.io/apimachinery `resource.Quantity`): a signed decimal
number, then a binary suffix (Ki..Ei), a decimal one (n, u, m, k..E) or an exponent. The
exponent is at most 3 digits, so "1e999999999999" is refused before any Decimal arithmetic
(where it would raise `decimal.Overflow`, which pydantic does not turn into a validation
error). Whatever the input, the only error raised is ValueError.
"""

from __future__ import annotations

import functools
import math
import re
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal, DecimalException, localcontext

from api.limits import MAX_CPU_CORES, MAX_MEMORY_BYTES, MAX_QUANTITY_LENGTH

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]{1,3}))?$",
    re.ASCII,
)
# Room for every digit of a MAX_QUANTITY_LENGTH mantissa times 2**60 (exact), and exponents
# far beyond any int that fits in memory (so a huge int never overflows).
_EXACT = Context(prec=2 * MAX_QUANTITY_LENGTH + 20, Emax=MAX_EMAX, Emin=MIN_EMIN)


def parse_quantity(value: str | int | float) -> Decimal:
    """The quantity as a plain number: "1500m" -> 1.5, "2Gi" -> 2147483648."""
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a Kubernetes quantity (not a finite number)")
        return Decimal(str(value))
    if not isinstance(value, str):
        raise ValueError(f"a quantity is a string or a number, not {type(value).__name__}")
    return _parse_text(value)


# A burst's pods ask for a handful of distinct quantities ("500m", "1Gi"), read for each pod
# and container by the trigger and the planner: each text is worked out once (a Decimal is
# immutable; a refused text is not kept, it raises again).
@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Decimal:
    text = value.strip()
    match = _QUANTITY.match(text) if len(text) <= MAX_QUANTITY_LENGTH else None
    if match is None:
        shown = value if len(value) <= 40 else f"{value[:40]}..."
        raise ValueError(f"{shown!r} is not a Kubernetes quantity (e.g. '500m', '2', '4Gi')")
    try:
        with localcontext(_EXACT):
            number = Decimal(match["number"])
            if match["exponent"] is not None:
                return number.scaleb(int(match["exponent"]))
            return number * _SUFFIXES[match["suffix"] or ""]
    except DecimalException as exc:  # unreachable with the grammar above; never escapes
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from exc


def cpu_millis(value: str | int | float) -> int:
    """CPU in millicores, rounded up as the scheduler does."""
    return _ceiling(parse_quantity(value) * 1000)


def memory_bytes(value: str | int | float) -> int:
    return _ceiling(parse_quantity(value))


def _ceiling(number: Decimal) -> int:
    with localcontext(_EXACT):
        return int(number.to_integral_value(rounding="ROUND_CEILING"))


def format_cpu(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def format_memory(num_bytes: int) -> str:
    for suffix, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if num_bytes % size == 0 and num_bytes >= size:
            return f"{num_bytes // size}{suffix}"
    return str(num_bytes)


def cpu_within_bounds(value: str | None) -> str | None:
    """A `cpu` field's validation: the value, unless it is more than MAX_CPU_CORES cores."""
    if value is not None and parse_quantity(value) > MAX_CPU_CORES:
        raise ValueError(f"cpu {value!r} is more than {MAX_CPU_CORES} cores")
    return value


def memory_within_bounds(value: str | None) -> str | None:
    """A `memory` field's validation: the value, unless it is more than 1Ei."""
    if value is not None and parse_quantity(value) > MAX_MEMORY_BYTES:
        raise ValueError(f"memory {value!r} is more than 1Ei")
    return value
