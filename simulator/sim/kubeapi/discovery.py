"""Discovery: `/api`, `/apis`, `/apis/<group>`, `/apis/<group>/<version>`, both forms.

The legacy documents (APIVersions, APIGroupList, APIGroup, APIResourceList) and the aggregated
ones (`Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList`, what
kubectl ≥1.30 asks first: one request for everything instead of one per group version). Both
carry short names, categories, verbs and subresources, so `kubectl get no,po,deploy`,
`kubectl get all` and `kubectl get cloudburst` resolve as on a real cluster.
"""

from __future__ import annotations

from typing import Any

from sim.kubeapi import resources
from sim.kubeapi.errors import ApiError
from sim.kubeapi.resources import ResourceType

Obj = dict[str, Any]
AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
_SUB_VERBS = ["get", "patch", "update"]


def not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def api_versions(server_address: str) -> Obj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def group_list() -> Obj:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [group(g) for g in resources.group_versions() if g],
    }


def group(name: str) -> Obj:
    versions = resources.group_versions().get(name)
    if not versions or not name:
        raise not_found()
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": entries,
        "preferredVersion": entries[0],
    }


def _subresources(rt: ResourceType) -> list[tuple[str, str, str, str, list[str]]]:
    """(name, group, version, kind, verbs) of each subresource."""
    subs = []
    if rt.status_subresource:
        subs.append(("status", rt.group, rt.version, rt.kind, _SUB_VERBS))
    if rt.scale_subresource:
        subs.append(("scale", "autoscaling", "v1", "Scale", _SUB_VERBS))
    if rt.group == "" and rt.plural == "pods":
        subs.append(("eviction", "policy", "v1", "Eviction", ["create"]))
        subs.append(("binding", "", "v1", "Binding", ["create"]))
    return subs


def resource_list(group_name: str, version: str) -> Obj:
    found = resources.resources_in(group_name, version)
    if not found:
        raise not_found()
    listed: list[Obj] = []
    for rt in found:
        entry: Obj = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": list(rt.verbs),
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        listed.append(entry)
        for name, g, v, kind, verbs in _subresources(rt):
            sub: Obj = {
                "name": f"{rt.plural}/{name}",
                "singularName": "",
                "namespaced": rt.namespaced,
            }
            if (g, v) != (rt.group, rt.version):
                sub |= {"group": g, "version": v}
            listed.append(sub | {"kind": kind, "verbs": verbs})
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group_name}/{version}" if group_name else version,
        "resources": listed,
    }


def aggregated(core: bool) -> Obj:
    """The APIGroupDiscoveryList of `/api` (core) or `/apis` (every named group)."""
    items = []
    for name, versions in resources.group_versions().items():
        if (name == "") != core:
            continue
        entries = []
        for version in versions:
            listed = []
            for rt in resources.resources_in(name, version):
                entry: Obj = {
                    "resource": rt.plural,
                    "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
                    "scope": "Namespaced" if rt.namespaced else "Cluster",
                    "singularResource": rt.singular,
                    "verbs": list(rt.verbs),
                }
                if rt.short_names:
                    entry["shortNames"] = list(rt.short_names)
                if rt.categories:
                    entry["categories"] = list(rt.categories)
                subs = [
                    {
                        "subresource": sub,
                        "responseKind": {"group": g, "version": v, "kind": kind},
                        "verbs": verbs,
                    }
                    for sub, g, v, kind, verbs in _subresources(rt)
                ]
                if subs:
                    entry["subresources"] = subs
                listed.append(entry)
            entries.append({"version": version, "resources": listed, "freshness": "Current"})
        items.append({"metadata": {"name": name, "creationTimestamp": None}, "versions": entries})
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }


def wants_aggregated(accept: str) -> bool:
    """Whether the client asked for the aggregated form (it lists it before plain JSON)."""
    for part in accept.split(","):
        params = {
            k.strip(): v.strip() for k, _, v in (p.partition("=") for p in part.split(";")[1:])
        }
        if params.get("as") == "APIGroupDiscoveryList" and params.get("v") == "v2":
            return True
        if part.split(";")[0].strip() in ("application/json", "*/*"):
            return False
    return False
