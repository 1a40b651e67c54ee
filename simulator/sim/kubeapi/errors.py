"""API errors rendered as `v1 Status` objects, with the reasons and messages of a real server."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sim.kubeapi.resources import ResourceType


class ApiError(Exception):
    """An error answer: HTTP code plus the Status body's reason, message and details."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        return status_body(self.code, self.reason, self.message, self.details, failure=True)


def status_body(
    code: int,
    reason: str,
    message: str,
    details: dict[str, Any] | None = None,
    failure: bool = False,
) -> dict[str, Any]:
    # Field order of metav1.Status as the server serialises it.
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure" if failure else "Success",
    }
    if message:
        body["message"] = message
    if reason:
        body["reason"] = reason
    if details:
        body["details"] = details
    body["code"] = code
    return body


def _details(rt: ResourceType, name: str) -> dict[str, Any]:
    """StatusDetails as the server writes them: `group` is omitted for the core group."""
    details = {"name": name, "group": rt.group, "kind": rt.plural}
    if not rt.group:
        del details["group"]
    return details


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.key} "{name}" not found', _details(rt, name))


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{rt.key} "{name}" already exists', _details(rt, name))


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    msg = f'Operation cannot be fulfilled on {rt.key} "{name}": {why}'
    return ApiError(409, "Conflict", msg, _details(rt, name))


STALE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def invalid(rt: ResourceType, name: str, field: str, problem: str) -> ApiError:
    details = _details(rt, name) | {
        "kind": rt.kind,
        "causes": [{"reason": "FieldValueInvalid", "message": problem, "field": field}],
    }
    return ApiError(
        422, "Invalid", f'{qualified_kind(rt)} "{name}" is invalid: {field}: {problem}', details
    )


def qualified_kind(rt: ResourceType) -> str:
    """`Pod`, `NodePool.cloudburst.io`: how apimachinery's GroupKind prints in messages."""
    return f"{rt.kind}.{rt.group}" if rt.group else rt.kind


def invalid_fields(kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    """422 Invalid for a list of field errors, laid out as `apierrors.NewInvalid` does."""
    causes = [{"reason": e.type, "message": e.body(), "field": e.field} for e in errors]
    details: dict[str, Any] = {"name": name, "group": group, "kind": kind, "causes": causes}
    details = {k: v for k, v in details.items() if v}  # Go's omitempty
    # ErrorList.ToAggregate drops repeated messages; one error is shown bare, several in [].
    messages = list(dict.fromkeys(str(e) for e in errors))
    shown = messages[0] if len(messages) == 1 else f"[{', '.join(messages)}]"
    qualified = f"{kind}.{group}" if group else kind
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {shown}', details)


def cannot_decode(rt: ResourceType, problem: str) -> ApiError:
    """400 for a body the server cannot decode into its kind (a bad quantity, Strict fields)."""
    kind, version = rt.kind, rt.version
    return bad_request(f'{kind} in version "{version}" cannot be handled as a {kind}: {problem}')


def invalid_patch(patched: str, problem: str) -> ApiError:
    """422 for a patch whose result does not decode: the server names neither kind nor object."""
    return invalid_fields("", "", "", [FieldError.invalid("patch", patched, problem)])


# ---- field errors (k8s.io/apimachinery/pkg/util/validation/field) ----------------------

_OMIT = object()  # field.OmitValueType: the error shows no value
# ErrorType -> what ErrorBody prints before the value.
_TYPE_TEXT = {
    "FieldValueNotFound": "Not found",
    "FieldValueRequired": "Required value",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueInvalid": "Invalid value",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueTooLong": "Too long",
    "FieldValueTooMany": "Too many",
    "FieldValueTooShort": "Too short",
    "InternalError": "Internal error",
    "FieldValueTypeInvalid": "Invalid value",
}
# Types whose body never shows the value.
_NO_VALUE = {
    "FieldValueRequired",
    "FieldValueForbidden",
    "FieldValueTooLong",
    "FieldValueTooShort",
    "InternalError",
}


@dataclass(frozen=True)
class FieldError:
    """One `field.Error`: `str()` is its Error(), `body()` its ErrorBody() (a cause's message)."""

    type: str  # the cause's reason: FieldValueInvalid, FieldValueRequired, ...
    field: str  # "spec.limits.maxNodes"; "<nil>" for a nil path, as Go prints it
    value: Any = _OMIT
    detail: str = ""

    def body(self) -> str:
        text = _TYPE_TEXT.get(self.type, f"<unknown error {go_quote(self.type)}>")
        if self.type not in _NO_VALUE and self.value is not _OMIT:
            text = f"{text}: {go_value(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"

    @staticmethod
    def invalid(field: str, value: Any, detail: str) -> FieldError:
        return FieldError("FieldValueInvalid", field, value, detail)

    @staticmethod
    def type_invalid(field: str, value: Any, detail: str) -> FieldError:
        return FieldError("FieldValueTypeInvalid", field, value, detail)

    @staticmethod
    def required(field: str, detail: str = "") -> FieldError:
        return FieldError("FieldValueRequired", field, "", detail)

    @staticmethod
    def forbidden(field: str, detail: str) -> FieldError:
        return FieldError("FieldValueForbidden", field, "", detail)

    @staticmethod
    def not_supported(field: str, value: Any, supported: list[str]) -> FieldError:
        listed = ", ".join(go_quote(v) for v in supported)
        return FieldError(
            "FieldValueNotSupported", field, value, f"supported values: {listed}" if listed else ""
        )

    @staticmethod
    def too_long(field: str, max_length: int) -> FieldError:
        unit = "byte" if max_length == 1 else "bytes"
        return FieldError(
            "FieldValueTooLong", field, _OMIT, f"may not be more than {max_length} {unit}"
        )

    @staticmethod
    def too_many(field: str, actual: int, maximum: int) -> FieldError:
        unit = "item" if maximum == 1 else "items"
        return FieldError("FieldValueTooMany", field, actual, f"must have at most {maximum} {unit}")

    @staticmethod
    def duplicate(field: str, value: Any) -> FieldError:
        return FieldError("FieldValueDuplicate", field, value)


class GoSyntax(str):
    """A bad value already as Go's `%#v` prints it (a `map[string]string`, a struct), which
    ErrorBody uses for what is neither a number, a bool, a string nor a Stringer."""


def go_value(value: Any) -> str:
    """A bad value as ErrorBody prints it: simple types with %v, strings %q, the rest as JSON."""
    if isinstance(value, GoSyntax):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return go_quote(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def go_float(value: float) -> str:
    """Go's `%v` of a float64: shortest digits, exponent form below 1e-4 and from 1e6 on."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1, value) < 0 else "0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    point = len(text) + exponent  # digits before the decimal point
    x = point - 1
    prefix = "-" if sign else ""
    if x < -4 or x >= 6:  # strconv 'g' with the shortest precision uses 6 for this choice
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{prefix}{mantissa}e{'-' if x < 0 else '+'}{abs(x):02d}"
    if point <= 0:
        return f"{prefix}0.{'0' * -point}{text}"
    if point >= len(text):
        return prefix + text + "0" * (point - len(text))
    return f"{prefix}{text[:point]}.{text[point:]}"


def go_quote(text: str) -> str:
    """Go's strconv.Quote: a double-quoted string with Go escapes."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


_SHORT_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def expired(requested: int, oldest: int) -> ApiError:
    return ApiError(410, "Expired", f"too old resource version: {requested} ({oldest})")


def unsupported_media_type(accepted: list[str]) -> ApiError:
    """415, listing exactly what this endpoint reads (negotiation.NewUnsupportedMediaTypeError)."""
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )
