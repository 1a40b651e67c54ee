"""`/openapi/v3` and `/openapi/v2`: the API server's OpenAPI documents, for kubectl.

kubectl (≥1.27, `--validate=strict` by default) sends `?fieldValidation=Strict` only to a
server whose OpenAPI v3 document lists that parameter on the resource's PATCH operation;
without it, it validates on the client against the schemas. `kubectl explain` reads the
schemas, and `kubectl apply` reads which patch types a resource takes and, for strategic
merge, the kinds' merge keys. So each group-version's document lists every resource's paths
with the query parameters and patch media types of a real server, and the schemas of its kinds:
the built-ins' from builtin_schemas.json, the custom resources' from their CRDs. `/openapi/v2`
(Swagger 2.0, JSON only: kubectl asks it for protobuf first and falls back to v3 when refused)
holds everything in one document.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sim.kubeapi import builtin_schema, resources
from sim.kubeapi.crds import CrdSchemas
from sim.kubeapi.errors import ApiError
from sim.kubeapi.resources import ResourceType

_WRITE_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation")
_PATCH_PARAMETERS = ("force",)


def document(parts: list[str], crds: CrdSchemas, version: str) -> dict[str, Any]:
    """The answer to GET /openapi/<parts>: the v3 index, one group-version's v3 document, or
    the v2 document."""
    if parts == ["v2"]:
        return _v2(crds, version)
    if parts == ["v3"]:
        return _index(crds, version)
    if len(parts) >= 3 and parts[0] == "v3":
        if parts[1] == "api" and len(parts) == 3:
            return _group_version("", parts[2], crds, version)
        if parts[1] == "apis" and len(parts) == 4:
            return _group_version(parts[2], parts[3], crds, version)
    raise ApiError(404, "NotFound", "the server could not find the requested resource")


def _index(crds: CrdSchemas, version: str) -> dict[str, Any]:
    paths = {}
    for group, versions in resources.group_versions().items():
        for gv_version in versions:
            key = f"apis/{group}/{gv_version}" if group else f"api/{gv_version}"
            body = json.dumps(_group_version(group, gv_version, crds, version), sort_keys=True)
            digest = hashlib.sha512(body.encode()).hexdigest()[:128].upper()
            paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return {"paths": paths}


_cache: dict[tuple[int, str, str], dict[str, Any]] = {}


def _group_version(group: str, version: str, crds: CrdSchemas, server: str) -> dict[str, Any]:
    key = (id(crds), group, version)
    if key not in _cache:
        _cache[key] = _build_group_version(group, version, crds, server)
    return _cache[key]


def _build_group_version(group: str, version: str, crds: CrdSchemas, server: str) -> dict[str, Any]:
    found = resources.resources_in(group, version)
    if not found:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    roots = []
    for rt in found:
        paths.update(_paths(rt))
        if rt.custom:
            schema = crds.get(rt.group, rt.version, rt.plural)
            if schema is not None:
                schemas[_schema_name(rt)] = _custom_schema(rt, schema.raw)
                roots.append(_OBJECT_META)
        else:
            roots.append(builtin_schema.definition_name(rt.group, rt.version, rt.kind))
    if any(rt.scale_subresource for rt in found):
        roots.append("io.k8s.api.autoscaling.v1.Scale")
    roots.append("io.k8s.apimachinery.pkg.apis.meta.v1.Status")
    for name in _closure(roots):
        schemas[name] = builtin_schema.definitions()[name]
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": server},
        "paths": paths,
        "components": {"schemas": schemas},
    }


_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def _custom_schema(rt: ResourceType, raw: dict[str, Any]) -> dict[str, Any]:
    """A CRD's schema as the server publishes it: metadata is ObjectMeta, kind and apiVersion
    described, the GVK named."""
    out = dict(raw)
    props = dict(out.get("properties") or {})
    props["metadata"] = {
        "allOf": [{"$ref": f"#/components/schemas/{_OBJECT_META}"}],
        "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
    }
    out["properties"] = props
    out["x-kubernetes-group-version-kind"] = [_gvk(rt)]
    return out


def _closure(roots: list[str]) -> list[str]:
    definitions = builtin_schema.definitions()
    seen: set[str] = set()
    todo = [r for r in roots if r in definitions]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(n for n in _refs(definitions[name]) if n not in seen and n in definitions)
    return sorted(seen)


def _refs(node: Any) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                found.append(value.rsplit("/", 1)[-1])
            else:
                found.extend(_refs(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_refs(value))
    return found


def _v2(crds: CrdSchemas, server: str) -> dict[str, Any]:
    key = (id(crds), "", "swagger")
    if key in _cache:
        return _cache[key]
    paths: dict[str, Any] = {}
    definitions: dict[str, Any] = {}
    for group, versions in resources.group_versions().items():
        for gv_version in versions:
            doc = _group_version(group, gv_version, crds, server)
            for path, operations in doc["paths"].items():
                paths[path] = {
                    verb: {k: v for k, v in op.items() if k != "requestBody"}
                    | (
                        {"consumes": list(op["requestBody"]["content"])}
                        if "requestBody" in op
                        else {}
                    )
                    for verb, op in operations.items()
                }
            definitions.update(doc["components"]["schemas"])
    text = json.dumps(definitions).replace("#/components/schemas/", "#/definitions/")
    _cache[key] = {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": server},
        "paths": paths,
        "definitions": json.loads(text),
    }
    return _cache[key]


def _paths(rt: ResourceType) -> dict[str, Any]:
    prefix = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
    where = (
        f"{prefix}/namespaces/{{namespace}}/{rt.plural}"
        if rt.namespaced
        else f"{prefix}/{rt.plural}"
    )
    if rt.virtual:
        return {where: {"post": _operation(rt, "post")}}
    item = {verb: _operation(rt, verb) for verb in ("get", "put", "patch", "delete")}
    paths = {
        where: {verb: _operation(rt, verb) for verb in ("get", "post")},
        f"{where}/{{name}}": item,
    }
    if rt.status_subresource:
        paths[f"{where}/{{name}}/status"] = {
            verb: _operation(rt, verb) for verb in ("get", "put", "patch")
        }
    return paths


def _operation(rt: ResourceType, verb: str) -> dict[str, Any]:
    action = {"get": "get", "post": "post", "put": "put", "patch": "patch", "delete": "delete"}
    operation: dict[str, Any] = {
        "x-kubernetes-action": action[verb],
        "x-kubernetes-group-version-kind": _gvk(rt),
        "responses": {"200": {"description": "OK"}},
    }
    if verb in ("post", "put", "patch"):
        names = _WRITE_PARAMETERS + (_PATCH_PARAMETERS if verb == "patch" else ())
        operation["parameters"] = [
            {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
            for name in names
        ]
    if verb == "patch":
        types = ["application/json-patch+json", "application/merge-patch+json"]
        if not rt.custom:
            types.append("application/strategic-merge-patch+json")
        types.append("application/apply-patch+yaml")
        operation["requestBody"] = {
            "content": {t: {"schema": {"type": "object"}} for t in types},
            "required": True,
        }
    return operation


def _gvk(rt: ResourceType) -> dict[str, str]:
    return {"group": rt.group, "version": rt.version, "kind": rt.kind}


def _schema_name(rt: ResourceType) -> str:
    reversed_group = ".".join(reversed(rt.group.split("."))) if rt.group else "io.k8s.api.core"
    return f"{reversed_group}.{rt.version}.{rt.kind}"
