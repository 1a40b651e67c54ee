"""What the API server does for particular built-in kinds, beyond storing them.

- Defaults on create: a Service gets its type, a cluster IP (from 10.96.0.0/12, `None` kept for
  headless ones), IP families, port protocols and target ports, node ports for NodePort and
  LoadBalancer, and an empty load-balancer status; workloads get their strategy defaults.
- A new namespace gets its `default` ServiceAccount (the service-account controller's job).
- `events.k8s.io/v1` Events are core/v1 Events in another shape (`note` is `message`,
  `regarding` is `involvedObject`, ...): both APIs see the same objects.
- The `scale` subresource (autoscaling/v1 Scale) of Deployments, ReplicaSets, StatefulSets and
  ReplicationControllers.
- The reviews a client asks about itself: SelfSubjectAccessReview (allowed, unless the test
  forbade it with `KubeApiServer.forbid`), SelfSubjectRulesReview, SelfSubjectReview.
- What every cluster lists: the `kubernetes` Service, an APIService per served group version,
  and the CustomResourceDefinitions of the custom resources served.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sim.kubeapi import errors, resources
from sim.kubeapi.resources import (
    APISERVICES,
    CRDS,
    EVENTS_V1,
    NAMESPACES,
    PODS,
    SERVICEACCOUNTS,
    SERVICES,
    ResourceType,
)

if TYPE_CHECKING:
    from sim.kubeapi.store import Store

Obj = dict[str, Any]
SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")
KUBERNETES_SERVICE_IP = "10.96.0.1"
NODE_PORTS = range(30000, 32768)
USER = "cloudburst-sim"
GROUPS = ["system:masters", "system:authenticated"]


# ---- create-time defaults ------------------------------------------------------------------


def defaults(store: Store, rt: ResourceType, obj: Obj) -> None:
    if rt is SERVICES:
        _service_defaults(store, obj)
    elif rt is PODS:
        _default_toleration_seconds(obj)
    elif rt.group == "apps" and rt.kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"):
        _workload_defaults(rt, obj)


# The DefaultTolerationSeconds admission plugin's (on by default): how long a pod stays on a
# node that stopped reporting before the taint manager evicts it.
_DEFAULT_TOLERATED = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
_DEFAULT_TOLERATION_SECONDS = 300


def _default_toleration_seconds(pod: Obj) -> None:
    """Every new pod that does not already tolerate them gets a 300 s NoExecute toleration
    of the `not-ready` and `unreachable` taints, as a real API server adds them: they are in
    every pod a watcher sees (and in every pod Cloudburst sends its pools)."""
    spec = pod.get("spec")
    tolerations = spec.get("tolerations") if isinstance(spec, dict) else None
    if not isinstance(spec, dict) or not isinstance(tolerations, list | None):
        return  # validation answers for a body of the wrong shape
    present = [t for t in tolerations or [] if isinstance(t, dict)]

    def tolerated(key: str) -> bool:
        return any(
            t.get("key") in (key, "", None) and t.get("effect") in ("NoExecute", "", None)
            for t in present
        )

    added = [
        {
            "key": key,
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": _DEFAULT_TOLERATION_SECONDS,
        }
        for key in _DEFAULT_TOLERATED
        if not tolerated(key)
    ]
    if added:
        spec["tolerations"] = [*(tolerations or []), *added]


def _service_defaults(store: Store, svc: Obj) -> None:
    spec = svc.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    kind = spec.setdefault("type", "ClusterIP")
    if kind == "ExternalName":
        spec.setdefault("sessionAffinity", "None")
        svc.setdefault("status", {"loadBalancer": {}})
        return
    spec.setdefault("sessionAffinity", "None")
    used = _used(store, SERVICES, lambda s: (s.get("spec") or {}).get("clusterIP"))
    if not spec.get("clusterIP"):
        spec["clusterIP"] = _next_ip(used)
    elif spec["clusterIP"] != "None" and spec["clusterIP"] in used:
        raise errors.invalid(
            SERVICES,
            (svc.get("metadata") or {}).get("name", ""),
            "spec.clusterIPs",
            f'Invalid value: []string{{"{spec["clusterIP"]}"}}: failed to allocate IP '
            f"{spec['clusterIP']}: provided IP is already allocated",
        )
    spec.setdefault("clusterIPs", [spec["clusterIP"]])
    if spec["clusterIP"] != "None" or spec.get("selector"):
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    node_ports = kind in ("NodePort", "LoadBalancer")
    if node_ports:
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if kind == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)
    taken: set[Any] | None = None
    for port in spec.get("ports") or []:
        if not isinstance(port, dict):
            continue
        port.setdefault("protocol", "TCP")
        if "targetPort" not in port and "port" in port:
            port["targetPort"] = port["port"]
        if node_ports and not port.get("nodePort"):
            if taken is None:
                taken = {
                    p.get("nodePort")
                    for s in store.list_objects(SERVICES, None)[0]
                    for p in ((s.get("spec") or {}).get("ports") or [])
                    if isinstance(p, dict)
                }
            port["nodePort"] = next(p for p in NODE_PORTS if p not in taken)
            taken.add(port["nodePort"])
    svc.setdefault("status", {"loadBalancer": {}})


def _used(store: Store, rt: ResourceType, value: Callable[[Obj], Any]) -> set[Any]:
    return {value(o) for o in store.list_objects(rt, None)[0]}


def _next_ip(used: set[Any]) -> str:
    for ip in SERVICE_CIDR.hosts():
        text = str(ip)
        if text != KUBERNETES_SERVICE_IP and text not in used and int(ip) & 0xFF >= 10:
            return text
    raise errors.ApiError(500, "InternalError", "the service IP range is full")


def _workload_defaults(rt: ResourceType, obj: Obj) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if rt.kind != "DaemonSet":
        spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    if rt.kind == "Deployment":
        spec.setdefault("progressDeadlineSeconds", 600)
        strategy = spec.setdefault("strategy", {})
        if isinstance(strategy, dict):
            strategy.setdefault("type", "RollingUpdate")
            if strategy["type"] == "RollingUpdate":
                rolling = strategy.setdefault("rollingUpdate", {})
                if isinstance(rolling, dict):
                    rolling.setdefault("maxUnavailable", "25%")
                    rolling.setdefault("maxSurge", "25%")
    template = spec.get("template")
    pod_spec = template.get("spec") if isinstance(template, dict) else None
    if isinstance(pod_spec, dict):
        pod_spec.setdefault("restartPolicy", "Always")
        pod_spec.setdefault("terminationGracePeriodSeconds", 30)
        pod_spec.setdefault("dnsPolicy", "ClusterFirst")
        pod_spec.setdefault("schedulerName", "default-scheduler")
        pod_spec.setdefault("securityContext", {})
    # The status fields Go always serialises (no omitempty), as a new object shows them.
    status = obj.setdefault("status", {})
    if isinstance(status, dict):
        for key in _ZERO_STATUS.get(rt.kind, ()):
            status.setdefault(key, 0)


_ZERO_STATUS = {
    "DaemonSet": (
        "currentNumberScheduled",
        "numberMisscheduled",
        "desiredNumberScheduled",
        "numberReady",
    ),
    "ReplicaSet": ("replicas",),
    "StatefulSet": ("replicas", "availableReplicas"),
}


def after_create(store: Store, rt: ResourceType, obj: Obj) -> None:
    if rt is NAMESPACES:
        name = obj["metadata"]["name"]
        try:
            store.create(SERVICEACCOUNTS, name, {"metadata": {"name": "default"}})
        except errors.ApiError as e:
            if e.code != 409:
                raise


# ---- events.k8s.io/v1 <-> core/v1 ----------------------------------------------------------

# events.k8s.io/v1 field -> core/v1 field
_EVENT_FIELDS = {
    "regarding": "involvedObject",
    "note": "message",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
    "reportingController": "reportingComponent",
}
_CORE_FIELDS = {v: k for k, v in _EVENT_FIELDS.items()}


def event_to_core(obj: Obj) -> Obj:
    out = {_EVENT_FIELDS.get(k, k): v for k, v in obj.items()}
    out["apiVersion"], out["kind"] = "v1", "Event"
    return out


def event_from_core(obj: Obj) -> Obj:
    out = {_CORE_FIELDS.get(k, k): v for k, v in obj.items()}
    out["apiVersion"], out["kind"] = "events.k8s.io/v1", "Event"
    return out


def present(rt: ResourceType, obj: Obj) -> Obj:
    """An object as `rt` shows it (the same stored object may be two resources' business)."""
    if rt is EVENTS_V1:
        return event_from_core(obj)
    return obj


def to_storage(rt: ResourceType, obj: Obj) -> Obj:
    if rt is EVENTS_V1:
        return event_to_core(obj)
    return obj


# ---- scale ---------------------------------------------------------------------------------


def scale_of(rt: ResourceType, obj: Obj) -> Obj:
    md = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    out: Obj = {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            k: md[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in md
        },
        "spec": {"replicas": int(spec.get("replicas", 1) or 0)},
        "status": {"replicas": int(status.get("replicas") or 0)},
    }
    selector = selector_string(spec.get("selector"), rt.kind == "ReplicationController")
    if selector:
        out["status"]["selector"] = selector
    return out


def selector_string(selector: Any, plain_map: bool = False) -> str:
    """A LabelSelector (or an RC's map) as a label-selector string: `app=x,tier in (a,b)`."""
    if not isinstance(selector, dict):
        return ""
    labels = selector if plain_map else (selector.get("matchLabels") or {})
    terms = [f"{k}={v}" for k, v in sorted(labels.items())]
    for expr in [] if plain_map else selector.get("matchExpressions") or []:
        key, op = expr.get("key", ""), expr.get("operator", "")
        values = ",".join(sorted(expr.get("values") or []))
        if op == "In":
            terms.append(f"{key} in ({values})")
        elif op == "NotIn":
            terms.append(f"{key} notin ({values})")
        elif op == "Exists":
            terms.append(key)
        elif op == "DoesNotExist":
            terms.append(f"!{key}")
    return ",".join(terms)


def apply_scale(rt: ResourceType, obj: Obj, scale: Obj) -> Obj:
    """The object with the replicas a Scale asks for."""
    spec = scale.get("spec")
    replicas = spec.get("replicas") if isinstance(spec, dict) else None
    name = (obj.get("metadata") or {}).get("name", "")
    if replicas is None:
        replicas = 0
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise errors.invalid_fields(
            "Scale",
            "autoscaling",
            name,
            [
                errors.FieldError.invalid(
                    "spec.replicas", replicas, "must be greater than or equal to 0"
                )
            ],
        )
    new = dict(obj)
    new["spec"] = dict(obj.get("spec") or {}, replicas=replicas)
    return new


# ---- reviews ---------------------------------------------------------------------------------


def review(
    rt: ResourceType, body: Obj, refused: Callable[[str, str, str, str | None], bool]
) -> Obj:
    """The answer to a SelfSubject*Review."""
    out = {k: v for k, v in body.items() if k != "status"}
    out["apiVersion"], out["kind"] = rt.api_version, rt.kind
    out.setdefault("metadata", {})
    if rt.kind == "SelfSubjectAccessReview":
        spec = body.get("spec") or {}
        attrs = spec.get("resourceAttributes")
        allowed = True
        if isinstance(attrs, dict):
            resource = str(attrs.get("resource") or "")
            if attrs.get("subresource"):
                resource = f"{resource}/{attrs['subresource']}"
            allowed = not refused(
                str(attrs.get("verb") or ""),
                str(attrs.get("group") or ""),
                resource,
                attrs.get("namespace") or None,
            )
        # RBAC grants with no reason worth printing, and has no opinion when it does not.
        out["status"] = {"allowed": allowed}
    elif rt.kind == "SelfSubjectRulesReview":
        out["status"] = {
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": False,
        }
    else:  # SelfSubjectReview
        out["status"] = {"userInfo": {"username": USER, "groups": GROUPS}}
    return out


# ---- what every cluster has ------------------------------------------------------------------


def seed(store: Store, now: str) -> None:
    store.create(
        SERVICES,
        "default",
        {
            "metadata": {
                "name": "kubernetes",
                "labels": {"component": "apiserver", "provider": "kubernetes"},
            },
            "spec": {
                "clusterIP": KUBERNETES_SERVICE_IP,
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
                "type": "ClusterIP",
            },
        },
    )
    for group, versions in resources.group_versions().items():
        for version in versions:
            name = f"{version}.{group}"
            store.create(
                APISERVICES,
                "",
                {
                    "metadata": {
                        "name": name,
                        "labels": {"kube-aggregator.kubernetes.io/automanaged": "onstart"},
                    },
                    "spec": {
                        "group": group,
                        "version": version,
                        "groupPriorityMinimum": 1000 if group == "" else 17000,
                        "versionPriority": 15,
                    },
                    "status": {
                        "conditions": [
                            {
                                "type": "Available",
                                "status": "True",
                                "lastTransitionTime": now,
                                "reason": "Local",
                                "message": "Local APIServices are always available",
                            }
                        ]
                    },
                },
            )


def seed_crds(store: Store, documents: list[Obj], now: str) -> None:
    for document in documents:
        body = dict(document)
        # As `kubectl apply` installed them: a later apply patches them without a warning.
        applied = json.dumps(document, separators=(",", ":"), sort_keys=True) + "\n"
        md = dict(body.get("metadata") or {})
        md["annotations"] = dict(
            md.get("annotations") or {},
            **{"kubectl.kubernetes.io/last-applied-configuration": applied},
        )
        body["metadata"] = md
        spec = body.get("spec") or {}
        body["status"] = {
            "acceptedNames": spec.get("names") or {},
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "lastTransitionTime": now,
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                },
                {
                    "type": "Established",
                    "status": "True",
                    "lastTransitionTime": now,
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                },
            ],
            "storedVersions": [v["name"] for v in spec.get("versions") or [] if v.get("storage")],
        }
        try:
            store.create(CRDS, "", body)
        except errors.ApiError as e:
            if e.code != 409:
                raise
