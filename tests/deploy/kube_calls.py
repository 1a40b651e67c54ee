"""Which Kubernetes API calls does the product make? Read from the source, not from a list.

An AST scan finds every method of `CoreV1Api`, `AppsV1Api`, `PolicyV1Api`,
`CoordinationV1Api`, `CertificatesV1Api` and `CustomObjectsApi` the code calls or hands to a
watch, and turns each into the RBAC (apiGroup, resource, verb) it needs. Per process: the
worker runs everything under `activities/`, `observability/` and `worker/`; the trigger runs
`trigger/` and only the functions it imports from `activities/`, `observability/` and `cluster/`
(followed to the helpers they call in their own module); the CSR approver runs `approver/`
and what it imports from `observability/` and `cluster/` likewise.
"""

from __future__ import annotations

import ast
import functools
import inspect
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client as k8s

ROOT = Path(__file__).resolve().parents[2]
API_CLASSES = {
    "CoreV1Api": "",
    "AppsV1Api": "apps",
    "PolicyV1Api": "policy",
    "CustomObjectsApi": "cloudburst.io",
    "CoordinationV1Api": "coordination.k8s.io",
    "CertificatesV1Api": "certificates.k8s.io",
}
# Typed-client method stems -> RBAC resource.
RESOURCES = {
    "pod": "pods",
    "pod_eviction": "pods/eviction",
    "pod_status": "pods/status",
    "secret": "secrets",
    "config_map": "configmaps",
    "node": "nodes",
    "node_status": "nodes/status",
    "namespace": "namespaces",
    "event": "events",
    "daemon_set": "daemonsets",
    "pod_disruption_budget": "poddisruptionbudgets",
    "lease": "leases",
    "certificate_signing_request": "certificatesigningrequests",
    "certificate_signing_request_approval": "certificatesigningrequests/approval",
    "custom_object": "<plural>",
    "custom_object_status": "<plural>/status",
}
VERBS = (
    ("delete_collection_", "deletecollection"),
    ("list_", "list"),
    ("read_", "get"),
    ("get_", "get"),
    ("create_", "create"),
    ("patch_", "patch"),
    ("replace_", "update"),
    ("delete_", "delete"),
)


@dataclass(frozen=True, order=True)
class Need:
    group: str
    resource: str
    verb: str
    where: str  # file:line, for the failure message
    # file:[Class.]function around the call: where a namespace-scoped grant is decided.
    function: str = ""

    @property
    def rule(self) -> tuple[str, str, str]:
        return (self.group, self.resource, self.verb)


@functools.cache
def _methods() -> dict[str, str]:
    """method name -> API group, for the API classes we scan for."""
    found: dict[str, str] = {}
    for cls_name, group in API_CLASSES.items():
        for name, _ in inspect.getmembers(getattr(k8s, cls_name), inspect.isfunction):
            if any(name.startswith(p) for p, _ in VERBS) and not name.endswith("_with_http_info"):
                found[name] = group
    return found


def needs_of(process: str) -> set[Need]:
    if process == "worker":
        files = [
            *sorted((ROOT / "activities").rglob("*.py")),
            *sorted((ROOT / "observability").glob("*.py")),
            *sorted((ROOT / "worker").glob("*.py")),
        ]
        return {need for path in files for need in _scan(path).all()}
    if process == "trigger":
        found: set[Need] = set()
        for path in sorted((ROOT / "trigger").glob("*.py")):
            scan = _scan(path)
            found |= scan.all()
            for package in ("activities", "observability", "cluster"):
                for module, names in scan.imports_from(package).items():
                    imported = _scan(ROOT / (module.replace(".", "/") + ".py"))
                    found |= imported.of_functions(names)
        return found
    if process == "csr-approver":
        approver: set[Need] = set()
        for path in sorted((ROOT / "approver").glob("*.py")):
            scan = _scan(path)
            approver |= scan.all()
            for package in ("observability", "cluster"):
                for module, names in scan.imports_from(package).items():
                    imported = _scan(ROOT / (module.replace(".", "/") + ".py"))
                    approver |= imported.of_functions(names)
        return approver
    raise ValueError(process)


class _Scan:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.tree = ast.parse(path.read_text())
        self.constants = _constants(self.tree)
        self.by_function: dict[str, set[Need]] = {}
        self.calls_in: dict[str, set[str]] = {}
        for top in self.tree.body:
            name = getattr(top, "name", "<module>")
            self.by_function.setdefault(name, set()).update(self._needs(top))
            self.calls_in[name] = {
                n.func.id
                for n in ast.walk(top)
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            }

    def all(self) -> set[Need]:
        return set().union(*self.by_function.values()) if self.by_function else set()

    def of_functions(self, names: set[str]) -> set[Need]:
        seen: set[str] = set()
        todo = list(names)
        while todo:
            name = todo.pop()
            if name in seen or name not in self.by_function:
                continue
            seen.add(name)
            todo.extend(self.calls_in.get(name, ()))
        return set().union(*(self.by_function[n] for n in seen)) if seen else set()

    def imports_from(self, package: str) -> dict[str, set[str]]:
        imports: dict[str, set[str]] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package + "."):
                imports.setdefault(node.module or "", set()).update(a.name for a in node.names)
        return imports

    def _needs(self, top: ast.AST) -> set[Need]:
        found: set[Need] = set()
        parents = {
            child: parent for parent in ast.walk(top) for child in ast.iter_child_nodes(parent)
        }
        for node in ast.walk(top):
            if not isinstance(node, ast.Attribute) or node.attr not in _methods():
                continue
            method, group = node.attr, _methods()[node.attr]
            verb, stem = _verb(method)
            parent = parents.get(node)
            called = isinstance(parent, ast.Call) and parent.func is node
            resource = RESOURCES.get(stem)
            if resource is None:
                raise AssertionError(f"{self.path}:{node.lineno}: teach RESOURCES about {method}")
            if "<plural>" in resource:
                plural = self._plural(method, parent if called else None, node, parents)
                resource = resource.replace("<plural>", plural)
            where = f"{self.path.relative_to(ROOT)}:{node.lineno}"
            function = f"{self.path.relative_to(ROOT)}:{_enclosing(node, parents)}"
            found.add(Need(group, resource, verb, where, function))
            if not called and verb == "list":
                # A list function handed to a watch loop: list, then watch from its version.
                found.add(Need(group, resource, "watch", where, function))
        return found

    def _plural(
        self,
        method: str,
        call: ast.AST | None,
        node: ast.AST,
        parents: dict[ast.AST, ast.AST],
    ) -> str:
        if isinstance(call, ast.Call):
            for keyword in call.keywords:
                if keyword.arg == "plural":
                    return self._string(keyword.value)
            index = 3 if "namespaced" in method else 2
            return self._string(call.args[index])
        # Not called: passed with its kwargs, e.g. (kind, fn, {"plural": ...}) or _crd("...").
        container = parents.get(node)
        for sibling in ast.iter_child_nodes(container) if container else ():
            if isinstance(sibling, ast.Dict):
                for key, value in zip(sibling.keys, sibling.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "plural":
                        return self._string(value)
            if isinstance(sibling, ast.Call) and sibling.args:
                return self._string(sibling.args[0])
        raise AssertionError(f"{self.path}:{getattr(node, 'lineno', '?')}: no plural for {method}")

    def _string(self, node: ast.AST) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name) and node.id in self.constants:
            return self.constants[node.id]
        raise AssertionError(f"{self.path}:{getattr(node, 'lineno', '?')}: not a known string")


def _enclosing(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str:
    """`Class.method` or `function` around a node (within one top-level statement)."""
    names: list[str] = []
    current: ast.AST | None = node
    while current is not None:
        if isinstance(current, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(current.name)
        current = parents.get(current)
    return ".".join(reversed(names)) or "<module>"


@functools.cache
def _scan(path: Path) -> _Scan:
    return _Scan(path)


def _verb(method: str) -> tuple[str, str]:
    for prefix, verb in VERBS:
        if method.startswith(prefix):
            stem = method.removeprefix(prefix)
            stem = stem.removeprefix("namespaced_").removeprefix("cluster_")
            stem = stem.removesuffix("_for_all_namespaces")
            return verb, stem
    raise AssertionError(f"no verb for {method}")


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level string constants, including `GROUP, VERSION, PLURAL = "a", "b", "c"`."""
    found: dict[str, str] = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs: list[tuple[ast.expr, ast.expr]] = []
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                pairs = list(zip(target.elts, node.value.elts, strict=True))
            else:
                pairs = [(target, node.value)]
            for name, value in pairs:
                if (
                    isinstance(name, ast.Name)
                    and isinstance(value, ast.Constant)
                    and isinstance(value.value, str)
                ):
                    found[name.id] = value.value
    return found
