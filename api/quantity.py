"""Kubernetes resource quantities ("1500m", "2Gi", "0.5") as integers we can add up."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

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
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def parse_quantity(value: str | int | float) -> Decimal:
    """The quantity as a plain number: "1500m" -> 1.5, "2Gi" -> 2147483648."""
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _QUANTITY.match(value.strip())
    if not match or match.group(2) not in _SUFFIXES:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. '500m', '2', '4Gi')")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation as exc:
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from exc
    return number * _SUFFIXES[match.group(2)]


def cpu_millis(value: str | int | float) -> int:
    """CPU in millicores, rounded up as the scheduler does."""
    return int((parse_quantity(value) * 1000).to_integral_value(rounding="ROUND_CEILING"))


def memory_bytes(value: str | int | float) -> int:
    return int(parse_quantity(value).to_integral_value(rounding="ROUND_CEILING"))


def format_cpu(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def format_memory(num_bytes: int) -> str:
    for suffix, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if num_bytes % size == 0 and num_bytes >= size:
            return f"{num_bytes // size}{suffix}"
    return str(num_bytes)
