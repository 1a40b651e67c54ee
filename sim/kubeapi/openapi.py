"""`/openapi/v3`: just enough of the API server's OpenAPI v3 documents for kubectl.

kubectl (≥1.27, `--validate=strict` by default) sends `?fieldValidation=Strict` only to a
server whose OpenAPI v3 document lists that parameter on the resource's PATCH operation;
without the document it validates on the client, which needs a full OpenAPI schema and fails
here (`failed to download openapi`). So each group-version's document lists every resource's
paths with the query parameters of a real server, and the custom resources' schemas.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sim.kubeapi import resources
from sim.kubeapi.crds import CrdSchemas
from sim.kubeapi.errors import ApiError
from sim.kubeapi.resources import ResourceType

_WRITE_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation")


def document(parts: list[str], crds: CrdSchemas, version: str) -> dict[str, Any]:
    """The answer to GET /openapi/<parts>: the v3 index, or one group-version's document."""
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


def _group_version(group: str, version: str, crds: CrdSchemas, server: str) -> dict[str, Any]:
    found = resources.resources_in(group, version)
    if not found:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for rt in found:
        paths.update(_paths(rt))
        schema = crds.get(rt.group, rt.version, rt.plural) if rt.custom else None
        if schema is not None:
            schemas[_schema_name(rt)] = dict(schema.raw) | {
                "x-kubernetes-group-version-kind": [_gvk(rt)]
            }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": server},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def _paths(rt: ResourceType) -> dict[str, Any]:
    prefix = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
    where = (
        f"{prefix}/namespaces/{{namespace}}/{rt.plural}"
        if rt.namespaced
        else f"{prefix}/{rt.plural}"
    )
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
        operation["parameters"] = [
            {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
            for name in _WRITE_PARAMETERS
        ]
    if verb == "patch":
        types = ["application/json-patch+json", "application/merge-patch+json"]
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
