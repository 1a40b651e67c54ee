"""What the API server checks on a write before it stores anything.

Three steps, in the server's order and with its answers:

- `decode` (create and replace bodies) and `decode_patched` (the result of a patch): a custom
  resource's unknown fields are pruned, or refused under `?fieldValidation=Strict`
  (`strict decoding error: unknown field "spec.x"`), or reported in a `Warning` header under
  Warn, the default; a built-in's quantities must parse. Failing, a body is a 400 BadRequest
  and a patch result a 422 on the field `patch`.
- `admit` (creates and updates of pods): kube-apiserver's PodNodeSelector and
  PodTolerationRestriction admission plugins (sim/kubeapi/pod_admission.py), which may change
  the pod or refuse it; on a create, DefaultTolerationSeconds ran before them with the
  server's defaults (sim/kubeapi/builtins.py).
- `validate` (every write): the CRD's structural schema and CEL rules (sim/kubeapi/schema.py),
  or the built-in kinds' quantity checks (sim/kubeapi/quantities.py) and apps/v1 workloads'
  selectors (sim/kubeapi/workloads.py); 422 Invalid, each cause with its field path.

Writes the store makes for itself (seeding, bindings, evictions) skip all three, and so do
objects put in with `Store.create(...)` without options: that is how tests plant an object a
real server would refuse, to see that controllers survive it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sim.kubeapi import builtin_schema, errors, objectmeta, quantities, workloads
from sim.kubeapi.builtin_schema import Node
from sim.kubeapi.crds import CrdSchemas
from sim.kubeapi.patch import STRATEGIC_PATCH
from sim.kubeapi.pod_admission import PodAdmission
from sim.kubeapi.resources import PODS, ResourceType

if TYPE_CHECKING:
    from sim.kubeapi.store import Store

log = logging.getLogger(__name__)

STRICT, WARN, IGNORE = "Strict", "Warn", "Ignore"
_QUANTITY_KINDS = frozenset(["Pod", "Node", "Deployment", "DaemonSet"])


@dataclass
class WriteOptions:
    """One write request's options, and the warnings its answer carries."""

    field_validation: str = WARN  # the server's default when the request names none
    warnings: list[str] = field(default_factory=list)
    manager: str = ""  # the field manager: `?fieldManager=`, else from the User-Agent
    dry_run: bool = False  # `?dryRun=All`: judged and answered, never stored
    applied: bool = False  # a server-side apply: managedFields are already computed
    subresource: str = ""  # the subresource managedFields name (`scale` writes the parent)


class Admission:
    """Decoding, admission and validation of writes; schemas are read on the first
    custom-resource write. `pods` holds the pod admission plugins (all on by default)."""

    def __init__(self, crds: CrdSchemas | None = None, pods: PodAdmission | None = None) -> None:
        self.crds = crds or CrdSchemas()
        self.pods = pods or PodAdmission()
        self._crd_nodes: dict[str, Node | None] = {}

    def crd_node(self, rt: ResourceType) -> Node | None:
        """A custom resource's schema as a navigable node (its metadata is ObjectMeta's)."""
        if rt.key not in self._crd_nodes:
            schema = self.crds.get(rt.group, rt.version, rt.plural)
            node = None
            if schema is not None:
                raw = dict(schema.raw)
                props = dict(raw.get("properties") or {})
                props["metadata"] = {
                    "$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
                }
                raw["properties"] = props
                node = Node(raw)
            self._crd_nodes[rt.key] = node
        return self._crd_nodes[rt.key]

    def decode(self, rt: ResourceType, obj: dict[str, Any], opts: WriteOptions) -> None:
        """A create or replace body, in place; 400 BadRequest when it cannot be decoded."""
        problem = self._decode(rt, obj, opts)
        if problem:
            raise errors.cannot_decode(rt, problem)

    def decode_patched(
        self,
        rt: ResourceType,
        obj: dict[str, Any],
        opts: WriteOptions,
        content_type: str,
        patch: Any,
    ) -> dict[str, Any]:
        """A patch's result, in place; 422 on `patch` when it cannot be decoded."""
        before = json.dumps(obj, sort_keys=True, separators=(",", ":")) if rt.custom else None
        problem = self._decode(rt, obj, opts, patch)
        if problem:
            if content_type.split(";")[0].strip() == STRATEGIC_PATCH:
                shown = _go_map(patch)  # strategicPatchObject prints the patch with %+v
            else:
                shown = before or json.dumps(obj, sort_keys=True, separators=(",", ":"))
            raise errors.invalid_patch(shown, problem)
        return obj

    def admit(
        self,
        store: Store,
        rt: ResourceType,
        namespace: str,
        name: str,
        new: dict[str, Any],
        old: dict[str, Any] | None,
    ) -> None:
        """The admission plugins, on `new` in place; a refusal raises their answer. `name` is
        the one the request gave (empty on a create by `generateName`)."""
        if rt is not PODS:
            return
        if old is None:
            self.pods.admit_create(store, namespace, name, new)
        else:
            self.pods.admit_update(store, namespace, new)

    def validate(
        self, rt: ResourceType, name: str, new: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        """422 Invalid with every field error of `new` (an update is judged against `old`)."""
        found = objectmeta.object_meta_errors(new.get("metadata"))
        if rt.custom:
            schema = self.crds.get(rt.group, rt.version, rt.plural)
            found += schema.validate(new, old) if schema is not None else []
        else:
            found += workloads.selector_errors(rt.kind, new, old) if rt.group == "apps" else []
            if rt.kind in _QUANTITY_KINDS:
                found += quantities.validation_errors(rt.kind, new)
        if found:
            raise errors.invalid_fields(rt.kind, rt.group, name, found)

    def _decode(
        self, rt: ResourceType, obj: dict[str, Any], opts: WriteOptions, patch: Any = None
    ) -> str | None:
        if rt.custom:
            schema = self.crds.get(rt.group, rt.version, rt.plural)
            if schema is None:
                return None
            unknown = schema.decode(obj)
            if not unknown:
                return None
            log.debug("%s: unknown fields pruned: %s", rt.key, ", ".join(unknown))
            if opts.field_validation == IGNORE:
                return None
            reported = [f"unknown field {errors.go_quote(path)}" for path in unknown]
            if opts.field_validation == STRICT:
                return "strict decoding error: " + ", ".join(reported)
            opts.warnings.extend(reported)
            return None
        node = builtin_schema.type_of(rt)
        if node is not None:
            # A merge or strategic patch brings in only what it holds: when the patch knows
            # every field it names, so does the result (the stored object was decoded when
            # it was written). Anything else is walked whole.
            if isinstance(patch, dict) and not node.unknown_in_patch(patch):
                dropped: list[str] = []
            else:
                dropped = node.prune_unknown(obj)
            if dropped and opts.field_validation != IGNORE:
                reported = [f"unknown field {errors.go_quote(path)}" for path in dropped]
                if opts.field_validation == STRICT:
                    return "strict decoding error: " + ", ".join(reported)
                opts.warnings.extend(reported)
        if rt.kind in _QUANTITY_KINDS:
            return quantities.decode_error(rt.kind, obj)
        return None


def _go_map(value: Any) -> str:
    """Go's %+v of decoded JSON: `map[spec:map[replicas:3]]`, keys sorted."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go_map(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go_map(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return errors.go_float(value)
    return str(value)
