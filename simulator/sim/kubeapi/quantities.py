"""Resource quantities in the built-in kinds the scheduler and kubelets read, judged as the
API server judges them.

A quantity the server cannot parse fails *decoding* (k8s.io/apimachinery `resource.Quantity`
UnmarshalJSON): a create or replace is answered 400 BadRequest, `Pod in version "v1" cannot be
handled as a Pod: quantities must match the regular expression ...`; a patch whose result
holds one, 422 Invalid on the field `patch`. A quantity that parses but is negative fails
*validation*: 422 on its own field (`spec.containers[0].resources.requests[cpu]`).

`parse_error` is a port of `resource.ParseQuantity`'s grammar, so the emulator accepts what
the server accepts (`1.`, `+5`, `1e999`) and refuses what it refuses, with its messages.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from typing import Any

from api.quantity import parse_quantity
from sim.kubeapi.errors import FieldError

_SPLIT_RE = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
ERR_FORMAT = f"quantities must match the regular expression '{_SPLIT_RE}'"
ERR_SUFFIX = "unable to parse quantity's suffix"
ERR_NUMERIC = "unable to parse numeric part of quantity"

_DIGITS = frozenset("0123456789")
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_KNOWN_SUFFIXES = frozenset(
    ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
)
_INT64 = 2**63
# Resources counted in whole units (k8s.io/kubernetes pkg/apis/core/helper IsIntegerResourceName).
_INTEGER_RESOURCES = frozenset(["pods"])


def parse_error(value: Any) -> str | None:
    """Why `Quantity.UnmarshalJSON` refuses this JSON value, or None when it accepts it."""
    if value is None:
        return None  # null decodes to the zero quantity
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return ERR_FORMAT  # the raw JSON (`true`, `{...}`) goes through ParseQuantity
    text = value.strip() if isinstance(value, str) else json.dumps(value)
    return _parse_quantity_error(text)


def _parse_quantity_error(text: str) -> str | None:
    """resource.ParseQuantity's errors (parseQuantityString, then the suffix lookup)."""
    if not text:
        return ERR_FORMAT
    end = len(text)
    pos = 1 if text[0] in "+-" else 0
    while pos < end and text[pos] == "0":  # leading zeros
        pos += 1
    if pos >= end:
        return None
    while pos < end and text[pos] in _DIGITS:  # numerator
        pos += 1
    if pos >= end:
        return None
    if text[pos] == ".":  # denominator (Go accepts "1." and even ".")
        pos += 1
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        if pos >= end:
            return None
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end:
        if text[pos] in "+-":
            pos += 1
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        if pos < end:
            return ERR_FORMAT  # a character no part of the grammar takes
    suffix = text[suffix_start:]
    if suffix in _KNOWN_SUFFIXES:
        return None
    if len(suffix) > 1 and suffix[0] in "eE" and _go_parse_int64(suffix[1:]):
        return None
    return ERR_SUFFIX


def _go_parse_int64(text: str) -> bool:
    """strconv.ParseInt(text, 10, 64) succeeds."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not all(c in _DIGITS for c in digits):
        return False
    return -_INT64 <= int(text) < _INT64


def is_negative(value: Any) -> bool:
    """A quantity that parses (see parse_error) and is below zero."""
    text = value.strip() if isinstance(value, str) else json.dumps(value)
    if not text.startswith("-"):
        return False
    number = text[1:]
    end = 0
    while end < len(number) and (number[end] in _DIGITS or number[end] == "."):
        end += 1
    try:
        return Decimal(number[:end] or "0") != 0
    except InvalidOperation:  # "-." is zero to Go
        return False


# ---- where the built-in kinds hold quantities ------------------------------------------


def _containers(spec: dict[str, Any], base: str) -> Iterator[tuple[str, str, Any]]:
    """(field path, Go struct path for messages, ResourceList) of every container's resources."""
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        containers = spec.get(kind)
        if not isinstance(containers, list):
            continue
        for i, container in enumerate(containers):
            resources = container.get("resources") if isinstance(container, dict) else None
            if not isinstance(resources, dict):
                continue
            for part in ("limits", "requests"):
                if part in resources:
                    yield (
                        f"{base}.{kind}[{i}].resources.{part}",
                        f"ResourceRequirements.{base}.{kind}.resources.{part}",
                        resources[part],
                    )


def _pod_spec_lists(spec: Any, base: str) -> Iterator[tuple[str, str, Any]]:
    if not isinstance(spec, dict):
        return
    yield from _containers(spec, base)
    if "overhead" in spec:
        yield f"{base}.overhead", f"PodSpec.{base}.overhead", spec["overhead"]
    pod_resources = spec.get("resources")
    if isinstance(pod_resources, dict):
        for part in ("limits", "requests"):
            if part in pod_resources:
                yield (
                    f"{base}.resources.{part}",
                    f"ResourceRequirements.{base}.resources.{part}",
                    pod_resources[part],
                )


def resource_lists(kind: str, obj: dict[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """Every ResourceList a Pod, Node, Deployment or DaemonSet carries."""
    if kind == "Pod":
        yield from _pod_spec_lists(obj.get("spec"), "spec")
    elif kind == "Node":
        status = obj.get("status")
        if isinstance(status, dict):
            for part in ("capacity", "allocatable"):
                if part in status:
                    yield f"status.{part}", f"NodeStatus.status.{part}", status[part]
    elif kind in ("Deployment", "DaemonSet"):
        spec = obj.get("spec")
        template = spec.get("template") if isinstance(spec, dict) else None
        if isinstance(template, dict):
            yield from _pod_spec_lists(template.get("spec"), "spec.template.spec")


def decode_error(kind: str, obj: dict[str, Any]) -> str | None:
    """Why decoding this object into its Go type fails, as the JSON decoder words it."""
    for _path, go_path, resource_list in resource_lists(kind, obj):
        if resource_list is None:
            continue
        if not isinstance(resource_list, dict):
            return (
                f"json: cannot unmarshal {_json_kind(resource_list)} into Go struct field "
                f"{go_path} of type v1.ResourceList"
            )
        for value in resource_list.values():
            problem = parse_error(value)
            if problem:
                return problem
    return None


def validation_errors(kind: str, obj: dict[str, Any]) -> list[FieldError]:
    """Quantities that decode but that validation refuses (negative; fractional pod counts)."""
    errors: list[FieldError] = []
    for path, _go_path, resource_list in resource_lists(kind, obj):
        if not isinstance(resource_list, dict):
            continue
        for name, value in resource_list.items():
            if value is None or parse_error(value):
                continue
            # Pods key their lists (`requests[cpu]`); a Node's path names the resource.
            field = f"{path}.{name}" if kind == "Node" else f"{path}[{name}]"
            shown = value.strip() if isinstance(value, str) else json.dumps(value)
            if is_negative(value):
                errors.append(
                    FieldError.invalid(field, shown, "must be greater than or equal to 0")
                )
            elif name in _INTEGER_RESOURCES and not _is_integer(shown):
                errors.append(FieldError.invalid(field, shown, "must be an integer"))
    return errors


def _is_integer(text: str) -> bool:
    try:
        return parse_quantity(text) == parse_quantity(text).to_integral_value()
    except ValueError:
        return True  # beyond what we can compute: leave it to the server's other checks


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "string"
    if isinstance(value, int | float):
        return "number"
    return "array" if isinstance(value, list) else "object"
