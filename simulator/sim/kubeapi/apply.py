"""Field management: `metadata.managedFields` on every write, and server-side apply.

What sigs.k8s.io/structured-merge-diff does for the API server, at the scale of the emulator:

- every write through the API records who set which fields. A create, update or non-apply
  patch is an `Update` by its field manager (`?fieldManager=`, else the User-Agent up to its
  first `/`, as the server does): the fields it added or changed become its own and leave the
  other managers; fields it removed leave everyone.
- `application/apply-patch+yaml` is an `Apply`: the sent configuration is merged into the live
  object (associative lists by their keys, sets by value, atomic lists and scalars replaced);
  fields the manager applied before and no longer sends are removed unless another manager
  owns them; a field another manager owns with a different value is a conflict (409, listed as
  the server lists them) unless `force=true`, which takes it over.

Field sets are FieldsV1 tries (`{"f:spec": {"f:replicas": {}}}`); paths are tuples of their
keys. Lists follow the kind's schema: `x-kubernetes-list-type` map (by
`x-kubernetes-list-map-keys`), set, or atomic; maps may be atomic (`x-kubernetes-map-type`).
"""

from __future__ import annotations

import json
from typing import Any

from sim.kubeapi.builtin_schema import Node
from sim.kubeapi.errors import ApiError

Obj = dict[str, Any]
Path = tuple[str, ...]
APPLY, UPDATE = "Apply", "Update"

# Never managed (the server strips them before comparing: stripmeta.go).
_META_SKIP = frozenset(
    [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "generation",
        "managedFields",
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ]
)
_TOP_SKIP = frozenset(["apiVersion", "kind"])


def manager_from_user_agent(user_agent: str) -> str:
    return (user_agent or "").split("/")[0]


# ---- field sets ------------------------------------------------------------------------------


def _key_of(item: Any, keys: list[str]) -> str:
    if not isinstance(item, dict):
        return "v:" + _dumps(item)
    return "k:" + _dumps({k: item[k] for k in keys if k in item})


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _child(node: Node | None, key: str) -> Node | None:
    if node is None:
        return None
    if node.is_object_with_fields:
        return node.field(key)
    return node.values()


def _skip(path: Path, key: str) -> bool:
    if not path:
        return key in _TOP_SKIP
    return path == ("f:metadata",) and key in _META_SKIP


def field_set(value: Any, node: Node | None, prefix: Path, out: set[Path], section: str) -> None:
    """Every path of `value` that a manager can own, into `out`.

    `section`: "" for everything, "status" for the status only, "main" for all but status.
    """
    if isinstance(value, dict):
        if prefix and (not value or (node is not None and node.map_type == "atomic")):
            out.add(prefix)
            return
        for key, child in value.items():
            if _skip(prefix, key):
                continue
            if not prefix and section and (key == "status") != (section == "status"):
                continue
            field_set(child, _child(node, key), (*prefix, "f:" + key), out, "")
    elif isinstance(value, list):
        list_type = node.list_type if node is not None else "atomic"
        if list_type == "atomic" or not value:
            out.add(prefix)
            return
        items = node.items() if node is not None else None
        keys = node.list_map_keys if node is not None else []
        for item in value:
            path = (*prefix, _key_of(item, keys) if list_type == "map" else "v:" + _dumps(item))
            out.add(path)
            if list_type == "map" and isinstance(item, dict):
                for key, child in item.items():
                    field_set(child, _child(items, key), (*path, "f:" + key), out, "")
    else:
        out.add(prefix)


def paths_of(obj: Obj, node: Node | None, section: str = "") -> set[Path]:
    out: set[Path] = set()
    field_set(obj, node, (), out, section)
    return out


def to_fields_v1(paths: set[Path]) -> Obj:
    root: Obj = {}
    for path in sorted(paths):
        cursor = root
        for part in path:
            cursor = cursor.setdefault(part, {})
    # A path that is both a member and a parent carries ".".
    for path in paths:
        cursor = root
        for part in path:
            cursor = cursor[part]
        if cursor:
            cursor["."] = {}
    return root


def from_fields_v1(tree: Any, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    if not isinstance(tree, dict):
        return out
    for key, child in tree.items():
        if key == ".":
            out.add(prefix)
            continue
        path = (*prefix, key)
        if not child:
            out.add(path)
        else:
            out |= from_fields_v1(child, path)
    return out


def _under(path: Path, roots: set[Path]) -> bool:
    return any(path[: len(r)] == r for r in roots)


def path_string(path: Path) -> str:
    """A path as structured-merge-diff prints it: `.spec.containers[name="c"].image`."""
    out = []
    for part in path:
        kind, text = part[:2], part[2:]
        if kind == "f:":
            out.append("." + text)
        elif kind == "k:":
            keys = json.loads(text)
            out.append("[" + ",".join(f"{k}={_dumps(v)}" for k, v in keys.items()) + "]")
        elif kind == "v:":
            out.append(f"[={text}]")
        else:
            out.append(f"[{text}]")
    return "".join(out)


# ---- values at paths -------------------------------------------------------------------------

_MISSING = object()


def value_at(obj: Any, path: Path) -> Any:
    cursor = obj
    for part in path:
        kind, text = part[:2], part[2:]
        if kind == "f:":
            if not isinstance(cursor, dict) or text not in cursor:
                return _MISSING
            cursor = cursor[text]
        elif kind in ("k:", "v:"):
            if not isinstance(cursor, list):
                return _MISSING
            if kind == "v:":
                wanted = json.loads(text)
                return wanted if wanted in cursor else _MISSING
            keys = json.loads(text)
            cursor = next(
                (
                    i
                    for i in cursor
                    if isinstance(i, dict) and all(i.get(k) == v for k, v in keys.items())
                ),
                _MISSING,
            )
            if cursor is _MISSING:
                return _MISSING
        else:
            return _MISSING
    return cursor


def _remove_path(obj: Any, path: Path) -> None:
    """Remove the value at `path` from a (freshly copied) object, in place."""
    if not path:
        return
    parent = value_at(obj, path[:-1])
    last = path[-1]
    kind, text = last[:2], last[2:]
    if kind == "f:" and isinstance(parent, dict):
        parent.pop(text, None)
    elif kind == "k:" and isinstance(parent, list):
        keys = json.loads(text)
        parent[:] = [
            i
            for i in parent
            if not (isinstance(i, dict) and all(i.get(k) == v for k, v in keys.items()))
        ]
    elif kind == "v:" and isinstance(parent, list):
        wanted = json.loads(text)
        parent[:] = [i for i in parent if i != wanted]


# ---- managedFields -------------------------------------------------------------------------


def _entries(obj: Obj) -> list[Obj]:
    md = obj.get("metadata")
    entries = md.get("managedFields") if isinstance(md, dict) else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def _identity(e: Obj) -> tuple[str, str, str]:
    return (str(e.get("manager", "")), str(e.get("operation", "")), str(e.get("subresource", "")))


def _sorted(entries: list[Obj]) -> list[Obj]:
    return sorted(
        entries,
        key=lambda e: (e.get("operation", ""), e.get("time") or "", e.get("manager", "")),
    )


def _entry(
    manager: str, operation: str, api_version: str, now: str, paths: set[Path], sub: str
) -> Obj:
    entry: Obj = {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": to_fields_v1(paths),
    }
    if sub:
        entry["subresource"] = sub
    return entry


def record_update(
    old: Obj | None,
    new: Obj,
    node: Node | None,
    manager: str,
    api_version: str,
    now: str,
    subresource: str = "",
    section: str = "",
) -> None:
    """Set `new.metadata.managedFields` for an Update (create, replace, non-apply patch).

    Only what changed is walked: unchanged subtrees (equal, usually the very same dicts)
    cost one comparison, so a status patch of a big pod stays cheap.
    """
    md = new.get("metadata")
    if not isinstance(md, dict):
        return
    old_md = (old.get("metadata") or {}) if old is not None else {}
    sent = md.get("managedFields")
    base = _entries(old) if old is not None else []
    if isinstance(sent, list) and old is not None and sent != old_md.get("managedFields"):
        # The request sets managedFields itself: that is the new starting point ([{}] clears).
        base = [e for e in sent if isinstance(e, dict) and e.get("manager")]
    changed: set[Path] = set()
    removed: set[Path] = set()
    if old is None:
        field_set(new, node, (), changed, section)
    else:
        _diff(old, new, node, (), changed, removed, section)
    manager = manager or "unknown"
    entries: list[Obj] = []
    mine: Obj | None = None
    for e in base:
        fields = e.get("fieldsV1")
        tree: Obj = fields if isinstance(fields, dict) else {}
        if _identity(e) == (manager, UPDATE, subresource):
            mine = tree
            continue
        if not changed and not removed:
            entries.append(e)
            continue
        kept = _trie_without(tree, changed | removed)
        if kept is tree:
            entries.append(e)
        elif kept:
            entries.append({**e, "fieldsV1": kept})
    if changed or removed or mine is not None:
        tree = _trie_without(mine or {}, removed)
        tree = _trie_with(tree, changed)
        if tree:
            entries.append(
                {
                    "manager": manager,
                    "operation": UPDATE,
                    "apiVersion": api_version,
                    "time": now,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": tree,
                    **({"subresource": subresource} if subresource else {}),
                }
            )
    if entries:
        md["managedFields"] = _sorted(entries)
    else:
        md.pop("managedFields", None)


def _diff(
    old: Any,
    new: Any,
    node: Node | None,
    prefix: Path,
    changed: set[Path],
    removed: set[Path],
    section: str = "",
) -> None:
    """Paths added or modified (into `changed`) and gone (into `removed`) from old to new."""
    if old is new or old == new:
        return
    if (
        isinstance(old, dict)
        and isinstance(new, dict)
        and (not prefix or (old and new and not (node is not None and node.map_type == "atomic")))
    ):
        for key, value in new.items():
            if _skip(prefix, key):
                continue
            if not prefix and section and (key == "status") != (section == "status"):
                continue
            child = _child(node, key)
            path = (*prefix, "f:" + key)
            if key in old:
                _diff(old[key], value, child, path, changed, removed)
            else:
                field_set(value, child, path, changed, "")
        for key, value in old.items():
            if key not in new and not _skip(prefix, key):
                if not prefix and section and (key == "status") != (section == "status"):
                    continue
                field_set(value, _child(node, key), (*prefix, "f:" + key), removed, "")
        return
    list_type = node.list_type if node is not None else "atomic"
    if isinstance(old, list) and isinstance(new, list) and old and new and list_type != "atomic":
        items = node.items() if node is not None else None
        keys = node.list_map_keys if node is not None else []

        def ident(item: Any) -> str:
            return _key_of(item, keys) if list_type == "map" else "v:" + _dumps(item)

        old_items = {ident(i): i for i in old}
        new_items = {ident(i): i for i in new}
        for k, item in new_items.items():
            path = (*prefix, k)
            if k not in old_items:
                field_set([item], node, prefix, changed, "")
            elif list_type == "map" and isinstance(item, dict):
                _diff(old_items[k], item, items, path, changed, removed)
        for k, item in old_items.items():
            if k not in new_items:
                field_set([item], node, prefix, removed, "")
        return
    # A scalar, an atomic list or map, or a change of shape: the field itself.
    removed_here: set[Path] = set()
    field_set(old, node, prefix, removed_here, "")
    added_here: set[Path] = set()
    field_set(new, node, prefix, added_here, "")
    changed |= added_here
    removed |= removed_here - added_here


def _trie_with(tree: Obj, paths: set[Path]) -> Obj:
    if not paths:
        return tree
    return to_fields_v1(from_fields_v1(tree) | paths)


def _trie_without(tree: Obj, paths: set[Path]) -> Obj:
    """`tree` less `paths` (and what lies under them); the same dict when nothing is owned."""
    if not paths or not any(_trie_has_prefix(tree, p) for p in paths):
        return tree
    owned = from_fields_v1(tree)
    kept = {p for p in owned if not any(p[: len(r)] == r for r in paths)}
    return to_fields_v1(kept) if kept else {}


def _trie_has_prefix(tree: Obj, path: Path) -> bool:
    cursor: Any = tree
    for part in path:
        if not isinstance(cursor, dict) or part not in cursor:
            return False
        cursor = cursor[part]
    return True


# ---- apply -----------------------------------------------------------------------------------


def merge_applied(live: Any, applied: Any, node: Node | None) -> Any:
    """The live object with the applied configuration merged in (no removals)."""
    if isinstance(applied, dict) and isinstance(live, dict):
        if node is not None and node.map_type == "atomic":
            return applied
        out = dict(live)
        for key, value in applied.items():
            out[key] = merge_applied(live.get(key), value, _child(node, key))
        return out
    if isinstance(applied, list) and isinstance(live, list) and node is not None:
        list_type = node.list_type
        if list_type == "set":
            return list(live) + [v for v in applied if v not in live]
        if list_type == "map":
            keys, items = node.list_map_keys, node.items()
            out_list = list(live)
            for item in applied:
                ident = _key_of(item, keys)
                index = next((i for i, v in enumerate(out_list) if _key_of(v, keys) == ident), None)
                if index is None:
                    out_list.append(item)
                else:
                    out_list[index] = merge_applied(out_list[index], item, items)
            return out_list
    return applied


def apply(
    live: Obj | None,
    applied: Obj,
    node: Node | None,
    manager: str,
    api_version: str,
    now: str,
    force: bool,
    subresource: str = "",
) -> Obj:
    """The object after `manager` applies `applied`; 409 on conflicts unless `force`."""
    section = "status" if subresource == "status" else ("main" if subresource == "" else "")
    applied_paths = paths_of(applied, node, section if live is not None else "")
    if live is None:
        result = dict(applied)
        md = dict(result.get("metadata") or {})
        md["managedFields"] = [_entry(manager, APPLY, api_version, now, applied_paths, subresource)]
        result["metadata"] = md
        return result
    entries = _entries(live)
    previous: set[Path] = set()
    others: list[tuple[Obj, set[Path]]] = []
    for e in entries:
        paths = from_fields_v1(e.get("fieldsV1"))
        if _identity(e) == (manager, APPLY, subresource):
            previous = paths
        else:
            others.append((e, paths))
    conflicts: list[tuple[Obj, Path]] = []
    for e, paths in others:
        for p in sorted(paths & applied_paths):
            if p and p[-1][:2] in ("k:", "v:"):
                continue  # list items themselves are shared; their fields may conflict
            if value_at(live, p) != value_at(applied, p):
                conflicts.append((e, p))
    if conflicts and not force:
        raise _conflict_error(conflicts)
    result = merge_applied(_copy(live), applied, node)
    owned_by_others: set[Path] = set()
    for _, paths in others:
        owned_by_others |= paths
    if force:
        taken = {p for _, p in conflicts}
        owned_by_others -= taken
    for p in sorted(previous - applied_paths, key=len, reverse=True):
        if p not in owned_by_others and not any(o[: len(p)] == p for o in owned_by_others):
            _remove_path(result, p)
    new_entries: list[Obj] = []
    taken_paths = {p for _, p in conflicts} if force else set()
    for e, paths in others:
        kept = paths - taken_paths
        if kept:
            new_entries.append(e if kept == paths else {**e, "fieldsV1": to_fields_v1(kept)})
    if applied_paths:
        new_entries.append(_entry(manager, APPLY, api_version, now, applied_paths, subresource))
    md = dict(result.get("metadata") or {})
    md["managedFields"] = _sorted(new_entries)
    result["metadata"] = md
    return result


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _print_manager(e: Obj) -> str:
    text = json.dumps(e.get("manager", ""))
    if e.get("subresource"):
        text = f"{text} with subresource {json.dumps(e['subresource'])}"
    if e.get("operation") == UPDATE:
        if e.get("time"):
            return f"{text} using {e.get('apiVersion')} at {e['time']}"
        return f"{text} using {e.get('apiVersion')}"
    return text


class ApplyConflict(ApiError):
    """409 for an apply that would overrule other managers; `paths` are the fields."""

    def __init__(self, message: str, details: Obj, paths: set[Path]) -> None:
        super().__init__(409, "Conflict", message, details)
        self.paths = paths


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def allowed_by_last_applied(live: Obj, node: Node | None) -> set[Path]:
    """The fields `kubectl` may take over from client-side apply without a conflict: those of
    the last-applied annotation whose value the live object still has (what the server's
    lastAppliedManager allows when kubectl moves an object to server-side apply)."""
    text = ((live.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
    if not text:
        return set()
    try:
        last = json.loads(text)
    except ValueError:
        return set()
    if not isinstance(last, dict):
        return set()
    return {p for p in paths_of(last, node) if value_at(last, p) == value_at(live, p)}


def _conflict_error(conflicts: list[tuple[Obj, Path]]) -> ApiError:
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f"conflict with {_print_manager(e)}",
            "field": path_string(p),
        }
        for e, p in conflicts
    ]
    if len(conflicts) == 1:
        e, p = conflicts[0]
        message = (
            f"Apply failed with 1 conflict: conflict with {_print_manager(e)}: {path_string(p)}"
        )
    else:
        by_manager: dict[str, list[Path]] = {}
        for e, p in conflicts:
            by_manager.setdefault(_print_manager(e), []).append(p)
        lines = []
        for printed in sorted(by_manager):
            lines.append(f"conflicts with {printed}:")
            lines.extend(f"- {path_string(p)}" for p in by_manager[printed])
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApplyConflict(message, {"causes": causes}, {p for _, p in conflicts})
