"""The built-in kinds' OpenAPI schemas (builtin_schemas.json), read once, navigated lazily.

`type_of(rt)` gives the schema node of a served kind; a node answers what the server's
machinery asks of the Go types: a field's node (`field`), list items (`items`), map values
(`values`), strategic-merge directives (`merge_key`, `patch_strategy`), server-side apply's list
semantics (`list_type`, `list_map_keys`, `map_type`), and which fields are unknown.
"""

from __future__ import annotations

import json
import threading
from functools import cache
from pathlib import Path
from typing import Any

from sim.kubeapi.resources import ResourceType

_FILE = Path(__file__).with_name("builtin_schemas.json")
_REF = "#/components/schemas/"
_lock = threading.Lock()
_loaded: dict[str, Any] | None = None

# Kinds whose schema is published under a name the GVK list does not give directly.
_API_GROUP_PREFIX = {
    "apiregistration.k8s.io": "io.k8s.kube-aggregator.pkg.apis.apiregistration",
    "apiextensions.k8s.io": "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions",
}


def definitions() -> dict[str, Any]:
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                _loaded = json.loads(_FILE.read_text())["schemas"]
    return _loaded


def definition_name(group: str, version: str, kind: str) -> str:
    """The published name: io.k8s.api.apps.v1.Deployment, io.k8s.api.core.v1.Pod..."""
    if group in _API_GROUP_PREFIX:
        return f"{_API_GROUP_PREFIX[group]}.{version}.{kind}"
    short = group.split(".")[0] if group.endswith(".k8s.io") else group
    if short == "":
        short = "core"
    elif group == "rbac.authorization.k8s.io":
        short = "rbac"
    return f"io.k8s.api.{short}.{version}.{kind}"


class Node:
    """One schema node; children are made on first use and kept (the tree is shared)."""

    __slots__ = ("_fields", "_items", "_values", "properties", "raw", "resolved")

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        target = raw
        ref = raw.get("$ref")
        if ref is None and isinstance(raw.get("allOf"), list) and len(raw["allOf"]) == 1:
            ref = raw["allOf"][0].get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF):
            target = definitions().get(ref[len(_REF) :], {})
        self.resolved: dict[str, Any] = target
        props = target.get("properties")
        self.properties: dict[str, Any] | None = props if isinstance(props, dict) else None
        self._fields: dict[str, Node | None] = {}
        self._items: Node | bool | None = False
        self._values: Node | bool | None = False

    # ---- structure -----------------------------------------------------------------------

    @property
    def is_object_with_fields(self) -> bool:
        return self.properties is not None

    @property
    def opaque(self) -> bool:
        """Anything goes below (RawExtension, JSON, FieldsV1, preserve-unknown-fields)."""
        r = self.resolved
        if r.get("x-kubernetes-preserve-unknown-fields") or self.raw.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            return True
        return "type" not in r and "properties" not in r and "items" not in r

    def field(self, name: str) -> Node | None:
        if name in self._fields:
            return self._fields[name]
        props = self.properties
        raw = props.get(name) if props else None
        node = _node(raw) if isinstance(raw, dict) else None
        self._fields[name] = node
        return node

    def items(self) -> Node | None:
        if self._items is False:
            raw = self.resolved.get("items")
            self._items = _node(raw) if isinstance(raw, dict) else None
        return self._items if isinstance(self._items, Node) else None

    def values(self) -> Node | None:
        if self._values is False:
            raw = self.resolved.get("additionalProperties")
            self._values = _node(raw) if isinstance(raw, dict) else None
        return self._values if isinstance(self._values, Node) else None

    @property
    def type(self) -> str | None:
        t = self.resolved.get("type")
        return t if isinstance(t, str) else None

    # ---- merge semantics -------------------------------------------------------------------

    def _ext(self, key: str) -> Any:
        return self.raw.get(key, self.resolved.get(key))

    @property
    def merge_key(self) -> str | None:
        return self._ext("x-kubernetes-patch-merge-key")

    @property
    def patch_strategy(self) -> str:
        return str(self._ext("x-kubernetes-patch-strategy") or "")

    @property
    def list_type(self) -> str:
        return str(self._ext("x-kubernetes-list-type") or "atomic")

    @property
    def list_map_keys(self) -> list[str]:
        keys = self._ext("x-kubernetes-list-map-keys")
        return list(keys) if isinstance(keys, list) else []

    @property
    def map_type(self) -> str:
        return str(self._ext("x-kubernetes-map-type") or "granular")

    def prune_unknown(self, obj: dict[str, Any]) -> list[str]:
        """Drop the fields no schema node knows (what a Go decode drops) and return their
        paths as the server reports them (`spec.template.spec.containers[0].foo`).

        `obj`'s own keys are replaced in place; below it, a container that changes is copied,
        so subtrees shared with a stored object (a patch result's) stay intact.
        """
        found: list[str] = []
        pruned = self._prune(obj, "", found)
        if pruned is not obj:
            obj.clear()
            obj.update(pruned)
        return found

    def unknown_in_patch(self, patch: Any) -> bool:
        """Whether a merge or strategic-merge patch names a field this schema lacks
        (`$` directives aside)."""
        if isinstance(patch, dict):
            if self.properties is not None:
                for key, child in patch.items():
                    if key.startswith("$"):
                        continue
                    node = self.field(key)
                    if node is None:
                        return True
                    if isinstance(child, dict | list) and node.unknown_in_patch(child):
                        return True
                return False
            values = self.values()
            if values is not None and not values.opaque:
                return any(
                    isinstance(c, dict | list) and values.unknown_in_patch(c)
                    for c in patch.values()
                )
            return False
        if isinstance(patch, list):
            items = self.items()
            if items is not None and not items.opaque:
                return any(isinstance(c, dict | list) and items.unknown_in_patch(c) for c in patch)
        return False

    def _prune(self, value: Any, path: str, found: list[str]) -> Any:
        if isinstance(value, dict):
            props = self.properties
            out: dict[str, Any] | None = None
            if props is not None:
                for key, child in value.items():
                    node = self.field(key)
                    where = f"{path}.{key}" if path else key
                    if node is None:
                        found.append(where)
                        if out is None:
                            out = dict(value)
                        del out[key]
                    elif isinstance(child, dict | list):
                        new = node._prune(child, where, found)
                        if new is not child:
                            if out is None:
                                out = dict(value)
                            out[key] = new
                return value if out is None else out
            values = self.values()
            if values is not None and not values.opaque:
                for key, child in value.items():
                    if isinstance(child, dict | list):
                        new = values._prune(child, f"{path}[{key}]", found)
                        if new is not child:
                            if out is None:
                                out = dict(value)
                            out[key] = new
            return value if out is None else out
        if isinstance(value, list):
            items = self.items()
            if items is not None and not items.opaque:
                copied: list[Any] | None = None
                for i, child in enumerate(value):
                    if isinstance(child, dict | list):
                        new = items._prune(child, f"{path}[{i}]", found)
                        if new is not child:
                            if copied is None:
                                copied = list(value)
                            copied[i] = new
                return value if copied is None else copied
        return value


_nodes: dict[int, Node] = {}


def _node(raw: dict[str, Any]) -> Node:
    """One Node per schema dict: the definitions never change, so `id` is a stable key."""
    node = _nodes.get(id(raw))
    if node is None:
        node = _nodes[id(raw)] = Node(raw)
    return node


@cache
def type_of_kind(group: str, version: str, kind: str) -> Node | None:
    name = definition_name(group, version, kind)
    raw = definitions().get(name)
    return _node({"$ref": _REF + name}) if raw is not None else None


def type_of(rt: ResourceType) -> Node | None:
    """The schema of a built-in kind; None for custom resources and unknown kinds."""
    if rt.custom:
        return None
    return type_of_kind(rt.group, rt.version, rt.kind)
