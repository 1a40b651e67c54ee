"""Structural OpenAPI v3 schemas of custom resources, applied as kube-apiserver applies them.

A CRD's `openAPIV3Schema` is compiled once into a tree of `_Node`s. Then, per write:

1. `decode`: what the server does while decoding the body. Unknown fields are pruned (and
   reported, for `fieldValidation` Warn or Strict), so are nulls in fields that are not
   `nullable`; numbers are read as Go reads JSON (an integer beyond int64 is a float; a float
   with an integral value is written back as an integer).
2. `validate`: the OpenAPI checks (k8s.io/kube-openapi `validate`, reported through
   apiextensions' kubeOpenAPIResultToFieldErrors), then, when none of them is a type or enum
   error, the `x-kubernetes-validations` CEL rules. On an update, a value equal to the old one
   is not checked again (CRD validation ratcheting, on since 1.30).

The messages are the server's: `spec.weight: Invalid value: 500: spec.weight in body should be
less than or equal to 100`, `Unsupported value: "x": supported values: "a", "b"`, ...
Only what structural schemas allow is supported: no $ref, no allOf/anyOf/oneOf/not.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from sim.kubeapi import cel
from sim.kubeapi.errors import FieldError, go_float, go_quote

_MISSING: Any = object()
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_JSON_INT_LIMIT = 2**53  # swag.IsFloat64AJSONInteger
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
# ObjectMeta's fields: the rest of a custom resource's `metadata` is pruned.
_OBJECT_META = frozenset(
    [
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    ]
)
_BLOCKING = ("FieldValueNotSupported", "FieldValueTypeInvalid")
_NOT_CHECKED = (
    "some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation"
)
_DATE = re.compile(r"^([0-9]{4})-([0-9]{2})-([0-9]{2})$")
_TIME = re.compile(r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$")


@dataclass(eq=False)
class _Node:
    """One compiled schema node."""

    where: str
    type: str | None = None
    nullable: bool = False
    format: str = ""
    enum: list[Any] | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    multiple_of: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str = ""
    regex: re.Pattern[str] | None = None
    min_items: int | None = None
    max_items: int | None = None
    unique_items: bool = False
    min_properties: int | None = None
    max_properties: int | None = None
    required: tuple[str, ...] = ()
    properties: dict[str, _Node] | None = None
    additional: _Node | None = None
    items: _Node | None = None
    preserve_unknown: bool = False
    int_or_string: bool = False
    rules: list[cel.Rule] = field(default_factory=list)


def _compile(raw: dict[str, Any], where: str) -> _Node:
    node = _Node(where=where)
    node.type = raw.get("type")
    node.int_or_string = bool(raw.get("x-kubernetes-int-or-string"))
    node.nullable = bool(raw.get("nullable"))
    node.format = str(raw.get("format") or "")
    node.enum = list(raw["enum"]) if raw.get("enum") is not None else None
    node.minimum = raw.get("minimum")
    node.maximum = raw.get("maximum")
    node.exclusive_minimum = bool(raw.get("exclusiveMinimum"))
    node.exclusive_maximum = bool(raw.get("exclusiveMaximum"))
    node.multiple_of = raw.get("multipleOf")
    node.min_length = raw.get("minLength")
    node.max_length = raw.get("maxLength")
    node.pattern = str(raw.get("pattern") or "")
    if node.pattern:
        # RE2's `$` ends the text; Python's also matches before a final newline.
        node.regex = re.compile(
            node.pattern[:-1] + r"\Z" if node.pattern.endswith("$") else node.pattern
        )
    node.min_items = raw.get("minItems")
    node.max_items = raw.get("maxItems")
    node.unique_items = bool(raw.get("uniqueItems"))
    node.min_properties = raw.get("minProperties")
    node.max_properties = raw.get("maxProperties")
    node.required = tuple(raw.get("required") or ())
    node.preserve_unknown = bool(raw.get("x-kubernetes-preserve-unknown-fields"))
    if isinstance(raw.get("properties"), dict):
        node.properties = {
            name: _compile(child, f"{where}.{name}" if where else name)
            for name, child in raw["properties"].items()
        }
    if isinstance(raw.get("additionalProperties"), dict):
        node.additional = _compile(raw["additionalProperties"], f"{where}[*]")
    if isinstance(raw.get("items"), dict):
        node.items = _compile(raw["items"], f"{where}[*]")
    node.rules = cel.compile_rules(raw.get("x-kubernetes-validations") or [], where)
    return node


class StructuralSchema:
    """A CRD version's openAPIV3Schema, compiled once; `decode` then `validate` per write."""

    def __init__(self, openapi_v3_schema: dict[str, Any]) -> None:
        self.raw = openapi_v3_schema
        self.root = _compile(openapi_v3_schema, "")

    # ---- decoding --------------------------------------------------------------------

    def decode(self, obj: dict[str, Any]) -> list[str]:
        """Prune `obj` as the server's decoder does; return the unknown fields' paths.

        `obj`'s own keys are replaced in place; below it, a container that changes is copied
        (copy-on-write), so subtrees a patch result shares with the stored object stay intact.
        """
        unknown: list[str] = []
        metadata = obj.get("metadata")
        if isinstance(metadata, dict) and not metadata.keys() <= _OBJECT_META:
            unknown.extend(f"metadata.{k}" for k in metadata if k not in _OBJECT_META)
            obj["metadata"] = {k: v for k, v in metadata.items() if k in _OBJECT_META}
        for key in [k for k in obj if k not in ("apiVersion", "kind", "metadata")]:
            child = self._child(self.root, key)
            if child is None and not self.root.preserve_unknown:
                del obj[key]
                unknown.append(key)
            elif obj[key] is None and child is not None and not child.nullable:
                del obj[key]
            else:
                obj[key] = self._decode(obj[key], child, key, unknown)
        return sorted(unknown)

    @staticmethod
    def _child(node: _Node | None, key: str) -> _Node | None:
        if node is None:
            return None
        if node.properties is not None and key in node.properties:
            return node.properties[key]
        return node.additional

    def _decode(self, value: Any, node: _Node | None, path: str, unknown: list[str]) -> Any:
        """The decoded value: `value` itself when nothing changes, else a changed copy."""
        if isinstance(value, bool) or value is None or isinstance(value, str):
            return value
        if isinstance(value, int):
            # Go decodes an integer beyond int64 as a float64.
            return value if _INT64_MIN <= value <= _INT64_MAX else float(value)
        if isinstance(value, float):
            # ... and encodes a float64 without a fraction as an integer.
            return int(value) if value.is_integer() and abs(value) < 1e21 else value
        if isinstance(value, list):
            items = node.items if node is not None else None
            copied: list[Any] | None = None
            for i, item in enumerate(value):
                decoded = self._decode(item, items, f"{path}[{i}]", unknown)
                if decoded is not item:
                    copied = copied if copied is not None else list(value)
                    copied[i] = decoded
            return value if copied is None else copied
        if not isinstance(value, dict):
            return value
        keep_unknown = node is None or node.preserve_unknown or node.type is None
        out: dict[str, Any] | None = None
        for name, item in value.items():
            child = self._child(node, name)
            unknown_field = child is None and not keep_unknown
            if unknown_field:
                unknown.append(f"{path}.{name}")
            if unknown_field or (item is None and child is not None and not child.nullable):
                # Unknown, or null where null is not allowed (PruneNonNullableNulls...).
                out = out if out is not None else dict(value)
                del out[name]
                continue
            decoded = self._decode(item, child, f"{path}.{name}", unknown)
            if decoded is not item:
                out = out if out is not None else dict(value)
                out[name] = decoded
        return value if out is None else out

    # ---- validation ------------------------------------------------------------------

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
        """Field errors of `obj` (empty: valid); values equal to `old`'s are not checked."""
        errors: list[FieldError] = []
        self._check(obj, self.root, "", errors, _MISSING if old is None else old)
        if any(e.type in _BLOCKING for e in errors):
            errors.append(FieldError.invalid("<nil>", None, _NOT_CHECKED))
            return errors
        self._rules(obj, self.root, None, errors, _MISSING if old is None else old, root=True)
        return errors

    def _check(
        self, value: Any, node: _Node, path: str, errors: list[FieldError], old: Any
    ) -> None:
        """kube-openapi's SchemaValidator for one value: type, then by the value's kind."""
        if old is not _MISSING and _same(value, old):
            return  # ratcheting: an unchanged value is not judged again
        name = path or "."
        if value is None:
            if node.type and not node.nullable:
                errors.append(_type_error(path, node, "null"))
            if node.enum is not None and None not in node.enum:
                errors.append(_enum_error(path, value, node.enum))
            return
        kind = _json_type(value)
        if node.int_or_string:
            if kind not in ("integer", "string") and not _float_int(value):
                errors.append(_type_error(path, node, kind, "integer,string"))
        elif node.type and not (
            node.type == kind
            or (node.type == "integer" and kind == "number" and _float_int(value))
            or (node.type == "number" and kind == "integer")
        ):
            errors.append(_type_error(path, node, kind))
        if kind == "string":
            self._check_string(value, node, path, name, errors)
        elif kind in ("integer", "number"):
            self._check_number(value, node, path, name, errors)
        elif kind == "array":
            self._check_array(value, node, path, name, errors, old)
        if node.enum is not None and not any(_enum_equal(value, e) for e in node.enum):
            errors.append(_enum_error(path, value, node.enum))
        if kind == "object":
            self._check_object(value, node, path, name, errors, old)

    def _check_string(
        self, value: str, node: _Node, path: str, name: str, errors: list[FieldError]
    ) -> None:
        if node.max_length is not None and len(value) > node.max_length:
            errors.append(FieldError.too_long(path or "<nil>", node.max_length))
        if node.min_length is not None and len(value) < node.min_length:
            errors.append(
                FieldError.invalid(
                    path, value, f"{name} in body should be at least {node.min_length} chars long"
                )
            )
        if node.regex is not None and not node.regex.search(value):
            errors.append(
                FieldError.invalid(path, value, f"{name} in body should match '{node.pattern}'")
            )
        if node.format in ("date-time", "datetime") and not _is_date_time(value):
            errors.append(
                FieldError.type_invalid(
                    path, value, f"{name} in body must be of type {node.format}: {go_quote(value)}"
                )
            )
        elif node.format == "date" and not _is_date(value):
            errors.append(
                FieldError.type_invalid(
                    path, value, f"{name} in body must be of type date: {go_quote(value)}"
                )
            )

    def _check_number(
        self, value: float, node: _Node, path: str, name: str, errors: list[FieldError]
    ) -> None:
        if (
            node.format == "int32"
            and isinstance(value, int)
            and not _INT32_MIN <= value <= _INT32_MAX
        ):
            errors.append(
                FieldError.invalid(
                    "<nil>",
                    "",
                    f"Checked value must be in range of type int32: strconv.ParseInt: "
                    f'parsing "{value}": value out of range',
                )
            )
        if node.multiple_of and value % node.multiple_of:
            errors.append(
                FieldError.invalid(
                    path,
                    value,
                    f"{name} in body should be a multiple of {_bound(node.multiple_of, value)}",
                )
            )
        if node.maximum is not None:
            bound = int(node.maximum) if isinstance(value, int) else node.maximum
            if value > bound or (node.exclusive_maximum and value == bound):
                relation = "less than" if node.exclusive_maximum else "less than or equal to"
                errors.append(
                    FieldError.invalid(
                        path, value, f"{name} in body should be {relation} {_bound(bound, value)}"
                    )
                )
        if node.minimum is not None:
            bound = int(node.minimum) if isinstance(value, int) else node.minimum
            if value < bound or (node.exclusive_minimum and value == bound):
                relation = "greater than" if node.exclusive_minimum else "greater than or equal to"
                errors.append(
                    FieldError.invalid(
                        path, value, f"{name} in body should be {relation} {_bound(bound, value)}"
                    )
                )

    def _check_array(
        self,
        value: list[Any],
        node: _Node,
        path: str,
        name: str,
        errors: list[FieldError],
        old: Any,
    ) -> None:
        size = len(value)
        if node.min_items is not None and size < node.min_items:
            errors.append(
                FieldError.invalid(
                    path, size, f"{name} in body should have at least {node.min_items} items"
                )
            )
        if node.max_items is not None and size > node.max_items:
            errors.append(FieldError.too_many(path or "<nil>", size, node.max_items))
        if node.unique_items and len({_canonical(v) for v in value}) < size:
            errors.append(
                FieldError.invalid(path, "", f"{name} in body shouldn't contain duplicates")
            )
        if node.items is not None:
            # Items of an atomic list are not correlated with the old list's.
            for i, item in enumerate(value):
                self._check(item, node.items, f"{path}[{i}]", errors, _MISSING)

    def _check_object(
        self,
        value: dict[str, Any],
        node: _Node,
        path: str,
        name: str,
        errors: list[FieldError],
        old: Any,
    ) -> None:
        size = len(value)
        if node.max_properties is not None and size > node.max_properties:
            errors.append(FieldError.too_many(path or "<nil>", size, node.max_properties))
        if node.min_properties is not None and size < node.min_properties:
            errors.append(
                FieldError.invalid(
                    path,
                    size,
                    f"{name} in body should have at least {node.min_properties} properties",
                )
            )
        for key in node.required:
            if key not in value:
                errors.append(FieldError.required(f"{path}.{key}" if path else key))
        old_map = old if isinstance(old, dict) else {}
        if node.properties is not None:
            for key, child in node.properties.items():
                if key in value:
                    self._check(
                        value[key],
                        child,
                        f"{path}.{key}" if path else key,
                        errors,
                        old_map.get(key, _MISSING),
                    )
        if node.additional is not None:
            for key, item in value.items():
                if node.properties is None or key not in node.properties:
                    self._check(
                        item,
                        node.additional,
                        f"{path}.{key}" if path else key,
                        errors,
                        old_map.get(key, _MISSING),
                    )

    # ---- CEL -------------------------------------------------------------------------

    def _rules(
        self,
        value: Any,
        node: _Node,
        path: str | None,
        errors: list[FieldError],
        old: Any,
        root: bool = False,
    ) -> None:
        """The x-kubernetes-validations of this node and its descendants (null: not judged).

        `path` is a field.Path rendering; None is the nil path of the object's root.
        """
        if value is None or (old is not _MISSING and _same(value, old)):
            return
        if node.rules:
            self._evaluate(value, node, path, errors, root)
        old_map = old if isinstance(old, dict) else {}
        if isinstance(value, dict):
            for key, item in value.items():
                if node.properties is not None and key in node.properties:
                    child, child_path = node.properties[key], _child_path(path, key)
                elif node.additional is not None:
                    child, child_path = node.additional, f"{path or ''}[{key}]"
                else:
                    continue
                self._rules(item, child, child_path, errors, old_map.get(key, _MISSING))
        elif isinstance(value, list) and node.items is not None:
            for i, item in enumerate(value):
                self._rules(item, node.items, f"{path or ''}[{i}]", errors, _MISSING)

    def _evaluate(
        self, value: Any, node: _Node, path: str | None, errors: list[FieldError], root: bool
    ) -> None:
        if root and isinstance(value, dict):
            # The root's rules see apiVersion, kind and only name/generateName of metadata.
            metadata = value.get("metadata")
            metadata = metadata if isinstance(metadata, dict) else {}
            value = dict(value)
            value["metadata"] = {k: metadata[k] for k in ("name", "generateName") if k in metadata}
        self_value = cel.to_cel(value, node)
        shown = node.type or ""  # 1.34 shows the schema's type where the value would be
        for rule in node.rules:
            at = path if path is not None else "<nil>"
            try:
                if rule.holds(self_value):
                    continue
            except cel.RuleError as exc:
                errors.append(FieldError.invalid(at, shown, cel.error_detail(rule, str(exc))))
                continue
            if rule.field_path:
                at = _child_path(path, rule.field_path)
            detail = rule.failure_message(self_value)
            errors.append(_rule_error(rule.reason, at, shown, detail))


def _rule_error(reason: str, path: str, value: str, detail: str) -> FieldError:
    """fieldErrorForReason."""
    if reason == "FieldValueForbidden":
        return FieldError.forbidden(path, detail)
    if reason == "FieldValueRequired":
        return FieldError.required(path, detail)
    if reason == "FieldValueDuplicate":
        return FieldError.duplicate(path, value)
    return FieldError.invalid(path, value, detail)


def _child_path(path: str | None, name: str) -> str:
    return f"{path}.{name}" if path else name


def _type_error(path: str, node: _Node, actual: str, expected: str = "") -> FieldError:
    wanted = expected or str(node.type)
    return FieldError.type_invalid(
        path or "<nil>", actual, f"{path} in body must be of type {wanted}: {go_quote(actual)}"
    )


def _enum_error(path: str, value: Any, enum: list[Any]) -> FieldError:
    supported = [v if isinstance(v, str) else json.dumps(v) for v in enum]
    return FieldError.not_supported(path or "<nil>", value, supported)


def _bound(bound: float, value: Any) -> str:
    """A bound as kube-openapi prints it: int64 beside an integer value, else Go's %v."""
    return str(int(bound)) if isinstance(value, int) else go_float(float(bound))


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _float_int(value: Any) -> bool:
    return (
        isinstance(value, float)
        and value.is_integer()
        and -_JSON_INT_LIMIT <= value <= _JSON_INT_LIMIT
    )


def _enum_equal(value: Any, allowed: Any) -> bool:
    if isinstance(value, bool) or isinstance(allowed, bool):
        return isinstance(value, bool) and isinstance(allowed, bool) and value == allowed
    if isinstance(value, int | float) and isinstance(allowed, int | float):
        return value == allowed
    return _same(value, allowed)


def _same(a: Any, b: Any) -> bool:
    """reflect.DeepEqual on decoded JSON: like ==, but true is not 1."""
    return a == b and _strictly_same(a, b)


def _strictly_same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return all(_strictly_same(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return all(map(_strictly_same, a, b))
    return True


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _is_date(text: str) -> bool:
    m = _DATE.match(text)
    if m is None:
        return False
    try:
        date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        return False
    return True


def _is_date_time(text: str) -> bool:
    """strfmt.IsDateTime: `<date>T<hh:mm:ss>[.frac](Z|±hh:mm)`, case-insensitive."""
    if len(text) < 4:
        return False
    parts = text.lower().split("t")
    if len(parts) < 2 or not _is_date(parts[0]):
        return False
    m = _TIME.match(parts[1])
    return m is not None and m[1] <= "23" and m[2] <= "59" and m[3] <= "59"
