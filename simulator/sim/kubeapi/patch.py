"""JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch.

All functions return a new document and never mutate their inputs: stored objects are shared
with readers and the watch log, so they must stay immutable.
"""

from __future__ import annotations

from typing import Any

from sim.kubeapi.builtin_schema import Node
from sim.kubeapi.errors import ApiError, bad_request

# Lists merged by key under strategic merge when a kind has no schema, by field name.
# A tuple key means the items are identified by several fields together.
MERGE_KEYS: dict[str, tuple[str, ...]] = {
    "conditions": ("type",),
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "addresses": ("type",),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "env": ("name",),
    "ports": ("containerPort",),
    "imagePullSecrets": ("name",),
    "ownerReferences": ("uid",),
}
# Lists of scalars merged as sets.
SET_LISTS = {"finalizers"}

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


def clone(value: Any) -> Any:
    """Deep copy of JSON data; much faster than copy.deepcopy."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


def apply_patch(
    content_type: str, doc: dict[str, Any], patch: Any, schema: Node | None = None
) -> dict[str, Any]:
    kind = content_type.split(";")[0].strip().lower()
    if kind == JSON_PATCH:
        if not isinstance(patch, list):
            raise bad_request("json patch must be a list of operations")
        result = json_patch(doc, patch)
    elif kind == MERGE_PATCH:
        result = merge_patch(doc, patch)
    elif kind == STRATEGIC_PATCH:
        if not isinstance(patch, dict):
            raise bad_request("strategic merge patch must be an object")
        result = strategic_merge(doc, patch, schema)
    else:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: {JSON_PATCH}, {MERGE_PATCH}, {STRATEGIC_PATCH}",
        )
    if not isinstance(result, dict):
        raise bad_request("patch result is not an object")
    return result


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return clone(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def strategic_merge(target: Any, patch: dict[str, Any], schema: Node | None = None) -> Any:
    """Merge maps recursively; lists as the kind's schema says (`x-kubernetes-patch-strategy`
    merge with `x-kubernetes-patch-merge-key`: by key, or as a set for scalars), else replace.

    Without a schema (a kind the emulator has none for) the merge keys are guessed from the
    field name (MERGE_KEYS). Supports `$patch: replace|delete` on maps and list items,
    `$deleteFromPrimitiveList/<f>` and `$retainKeys`; `$setElementOrder/<f>` is accepted and
    ignored.
    """
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: clone(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    out = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            drop = set(map(str, value or []))
            out[field] = [v for v in out.get(field) or [] if str(v) not in drop]
        elif key.startswith("$"):
            continue
        elif value is None:
            out.pop(key, None)
        else:
            child = _child_schema(schema, key)
            if isinstance(value, dict):
                merged = strategic_merge(out.get(key), value, child)
                if merged is None:
                    out.pop(key, None)
                else:
                    out[key] = merged
            elif isinstance(value, list) and isinstance(out.get(key), list):
                out[key] = _merge_list(key, out[key], value, child, schema is not None)
            else:
                out[key] = _strip_directives(value)
    if isinstance(retain, list):
        keep = set(map(str, retain))
        out = {k: v for k, v in out.items() if k in keep}
    return out


def _child_schema(schema: Node | None, key: str) -> Node | None:
    if schema is None:
        return None
    if schema.is_object_with_fields:
        return schema.field(key)
    return schema.values()


def _merge_list(
    field: str, current: list[Any], patch: list[Any], schema: Node | None, typed: bool
) -> list[Any]:
    if typed:
        merging = schema is not None and "merge" in schema.patch_strategy.split(",")
        key = schema.merge_key if schema is not None else None
        keys: tuple[str, ...] | None = (key,) if merging and key else None
        as_set = merging and not key
    else:  # no schema for this kind: guess from the field name
        keys = MERGE_KEYS.get(field)
        as_set = field in SET_LISTS
    if as_set:
        return list(current) + [v for v in patch if v not in current]
    if not keys or not all(isinstance(v, dict) for v in patch + current):
        if any(isinstance(v, dict) and v.get("$patch") == "replace" for v in patch):
            return [
                _strip_directives(v) for v in patch if not (isinstance(v, dict) and v.get("$patch"))
            ]
        return list(_strip_directives(patch))

    def ident(item: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(item.get(k) for k in keys)

    items_schema = schema.items() if schema is not None else None
    out = list(current)
    for item in patch:
        if item.get("$patch") == "replace":
            return [_strip_directives(v) for v in patch if v.get("$patch") != "replace"]
        index = next((i for i, v in enumerate(out) if ident(v) == ident(item)), None)
        if item.get("$patch") == "delete":
            if index is not None:
                out.pop(index)
        elif index is None:
            out.append(_strip_directives(item))
        else:
            out[index] = strategic_merge(out[index], item, items_schema)
    return out


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def json_patch(doc: dict[str, Any], ops: list[Any]) -> Any:
    result: Any = clone(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request(f"invalid json patch operation: {op!r}")
        name, path = op["op"], _pointer(op["path"])
        if name == "add":
            result = _add(result, path, clone(op.get("value")))
        elif name == "remove":
            result = _remove(result, path)[0]
        elif name == "replace":
            result = _add(_remove(result, path)[0], path, clone(op.get("value")))
        elif name in ("move", "copy"):
            source = _pointer(op.get("from", ""))
            value = clone(_get(result, source))
            if name == "move":
                result = _remove(result, source)[0]
            result = _add(result, path, value)
        elif name == "test":
            if _get(result, path) != op.get("value"):
                raise ApiError(422, "Invalid", f"json patch test failed at {op['path']}")
        else:
            raise bad_request(f"unknown json patch operation: {name}")
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid json pointer: {path}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, path: list[str]) -> Any:
    node = doc
    for part in path[:-1]:
        node = _child(node, part)
    return node


def _child(node: Any, part: str) -> Any:
    try:
        if isinstance(node, list):
            return node[int(part)]
        if isinstance(node, dict):
            return node[part]
    except (KeyError, IndexError, ValueError):
        pass
    raise ApiError(422, "Invalid", f"json patch: path element {part!r} does not exist")


def _get(doc: Any, path: list[str]) -> Any:
    node = doc
    for part in path:
        node = _child(node, part)
    return node


def _add(doc: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    parent, last = _parent(doc, path), path[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if not 0 <= index <= len(parent):
            raise ApiError(422, "Invalid", f"json patch: index {last} out of range")
        parent.insert(index, value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise ApiError(422, "Invalid", f"json patch: cannot add at {'/'.join(path)}")
    return doc


def _remove(doc: Any, path: list[str]) -> tuple[Any, Any]:
    if not path:
        return None, doc
    parent, last = _parent(doc, path), path[-1]
    removed = _child(parent, last)
    if isinstance(parent, list):
        parent.pop(int(last))
    else:
        del parent[last]
    return doc, removed
