"""Regenerate sim/kubeapi/builtin_schemas.json: `python -m sim.kubeapi.gen_builtin_schemas`.

The OpenAPI schemas of the built-in kinds the emulator serves, as the API server publishes
them, taken from the upstream definitions that `kubernetes-validate` (a dev dependency) ships
for the server version the emulator claims. Only the definitions reachable from those kinds
are kept, turned back from JSON Schema into OpenAPI v3 (`type: [x, "null"]` -> `type: x`,
`$defs` references -> `components/schemas`). The emulator reads the file at run time (it works
offline, without kubernetes-validate): `/openapi/v2` and `/openapi/v3` for kubectl (explain,
apply), strategic-merge keys, server-side apply list types, unknown-field checks.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SERVER_MINOR = "1.34"  # the emulator's VERSION
OUT = Path(__file__).with_name("builtin_schemas.json")
ROOTS = [
    # the kinds served (sim/kubeapi/resources.py), and what their subresources and lists answer
    "io.k8s.api.core.v1.Namespace",
    "io.k8s.api.core.v1.Node",
    "io.k8s.api.core.v1.Pod",
    "io.k8s.api.core.v1.Secret",
    "io.k8s.api.core.v1.ConfigMap",
    "io.k8s.api.core.v1.Event",
    "io.k8s.api.core.v1.ServiceAccount",
    "io.k8s.api.core.v1.Service",
    "io.k8s.api.core.v1.ReplicationController",
    "io.k8s.api.core.v1.Binding",
    "io.k8s.api.events.v1.Event",
    "io.k8s.api.policy.v1.PodDisruptionBudget",
    "io.k8s.api.policy.v1.Eviction",
    "io.k8s.api.apps.v1.DaemonSet",
    "io.k8s.api.apps.v1.Deployment",
    "io.k8s.api.apps.v1.ReplicaSet",
    "io.k8s.api.apps.v1.StatefulSet",
    "io.k8s.api.batch.v1.Job",
    "io.k8s.api.networking.v1.NetworkPolicy",
    "io.k8s.api.batch.v1.CronJob",
    "io.k8s.api.coordination.v1.Lease",
    "io.k8s.api.rbac.v1.Role",
    "io.k8s.api.rbac.v1.RoleBinding",
    "io.k8s.api.rbac.v1.ClusterRole",
    "io.k8s.api.rbac.v1.ClusterRoleBinding",
    "io.k8s.api.authorization.v1.SelfSubjectAccessReview",
    "io.k8s.api.authorization.v1.SelfSubjectRulesReview",
    "io.k8s.api.authentication.v1.SelfSubjectReview",
    "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIService",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
    "io.k8s.api.autoscaling.v1.Scale",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
    "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent",
]
_REF = "#/$defs/"
_KEEP_ENUM_OF_TYPE_META = False  # the generator adds enums to apiVersion/kind; upstream has none


def source() -> Path:
    import kubernetes_validate

    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    found = sorted(base.glob(f"v{SERVER_MINOR}.*-local"))
    if not found:
        raise SystemExit(f"kubernetes-validate has no v{SERVER_MINOR} schemas in {base}")
    return found[-1] / "_definitions.json"


def convert(node: Any, under_type_meta: bool = False) -> Any:
    if isinstance(node, list):
        return [convert(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and value.startswith(_REF):
            out[key] = "#/components/schemas/" + value[len(_REF) :]
        elif key == "type" and isinstance(value, list):
            kinds = [v for v in value if v != "null"]
            out[key] = kinds[0] if len(kinds) == 1 else kinds
        elif key == "enum" and under_type_meta and not _KEEP_ENUM_OF_TYPE_META:
            continue
        elif key == "properties" and isinstance(value, dict):
            out[key] = {
                name: convert(prop, under_type_meta=name in ("apiVersion", "kind"))
                for name, prop in value.items()
            }
        else:
            out[key] = convert(value)
    return out


def closure(defs: dict[str, Any], roots: list[str]) -> list[str]:
    seen: list[str] = []
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        if name not in defs:
            raise SystemExit(f"no definition {name}")
        seen.append(name)
        todo.extend(_refs(defs[name]))
    return sorted(seen)


def _refs(node: Any) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str) and value.startswith(_REF):
                found.append(value[len(_REF) :])
            else:
                found.extend(_refs(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_refs(value))
    return found


def fix_special(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The few types whose JSON Schema form differs from what the server publishes."""
    description = schema.get("description")
    if name.endswith("intstr.IntOrString"):
        schema = {"type": "string", "format": "int-or-string"}
    elif name.endswith("resource.Quantity"):
        schema = {"type": "string"}
    if description and "description" not in schema:
        schema["description"] = description
    return schema


def build() -> dict[str, Any]:
    path = source()
    defs = json.loads(path.read_text())["$defs"]
    names = closure(defs, ROOTS)
    schemas = {name: fix_special(name, convert(defs[name])) for name in names}
    return {"source": f"kubernetes-validate {path.parent.name}", "schemas": schemas}


def main() -> None:
    document = build()
    OUT.write_text(json.dumps(document, separators=(",", ":"), sort_keys=True) + "\n")
    print(f"{OUT}: {len(document['schemas'])} schemas", file=sys.stderr)


if __name__ == "__main__":
    main()
