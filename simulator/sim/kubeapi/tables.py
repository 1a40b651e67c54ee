"""Server-side printing: `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`.

kubectl asks every list and get for a Table and prints its cells. The columns of the built-in
kinds are those of the API server's printers (pkg/printers/internalversion), `-o wide` ones at
priority 1; a custom resource's are its CRD's additionalPrinterColumns (JSONPath cells, `date`
columns shown as ages), after a Name column. Ages are printed as the server prints them
(apimachinery's duration.HumanDuration).
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Callable
from typing import Any

from sim.kubeapi import crds
from sim.kubeapi.resources import ResourceType

Obj = dict[str, Any]
Cell = Any
Column = tuple[str, str, str, int]  # name, type, format, priority

_NAME = ("Name", "string", "name", 0)
_AGE = ("Age", "string", "", 0)
_DESCRIPTIONS = {
    "Name": "Name must be unique within a namespace. Is required when creating resources, "
    "although some resources may allow a client to request the generation of an appropriate "
    "name automatically. Name is primarily intended for creation idempotence and "
    "configuration definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    "Age": "CreationTimestamp is a timestamp representing the server time when this object "
    "was created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is "
    "in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
}


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        rest = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if rest == 0 else f"{hours // 24 // 365}y{rest}d"
    return f"{hours // 24 // 365}y"


def _since(stamp: Any) -> str:
    if not isinstance(stamp, str) or not stamp:
        return "<unknown>"
    try:
        then = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return "<unknown>"
    return human_duration(time.time() - then)


def _md(obj: Obj) -> Obj:
    md = obj.get("metadata")
    return md if isinstance(md, dict) else {}


def _get(obj: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _age(obj: Obj) -> str:
    return _since(_md(obj).get("creationTimestamp"))


def _containers(spec: Any) -> tuple[str, str]:
    containers = _get(spec, "template", "spec", "containers") or []
    names = ",".join(str(c.get("name", "")) for c in containers if isinstance(c, dict))
    images = ",".join(str(c.get("image", "")) for c in containers if isinstance(c, dict))
    return names, images


def _selector(selector: Any) -> str:
    from sim.kubeapi.builtins import selector_string

    text = selector_string(selector)
    return text or "<none>"


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


# ---- pods ------------------------------------------------------------------------------------


def _pod_row(pod: Obj) -> list[Cell]:
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or []
    statuses = status.get("containerStatuses") or []
    reason = status.get("reason") or status.get("phase") or ""
    restarts = 0
    ready = 0
    initializing = False
    for i, cs in enumerate(status.get("initContainerStatuses") or []):
        restarts += _int(cs.get("restartCount"))
        state = cs.get("state") or {}
        term = state.get("terminated")
        if term and _int(term.get("exitCode")) == 0:
            continue
        initializing = True
        if term:
            reason = "Init:" + (term.get("reason") or f"ExitCode:{_int(term.get('exitCode'))}")
        elif (state.get("waiting") or {}).get("reason") not in (None, "", "PodInitializing"):
            reason = "Init:" + state["waiting"]["reason"]
        else:
            total = len(spec.get("initContainers") or [])
            reason = f"Init:{i}/{total}"
        break
    if not initializing:
        has_running = False
        for cs in reversed(statuses):
            restarts += _int(cs.get("restartCount"))
            state = cs.get("state") or {}
            if (state.get("waiting") or {}).get("reason"):
                reason = state["waiting"]["reason"]
            elif state.get("terminated"):
                term = state["terminated"]
                reason = term.get("reason") or (
                    f"Signal:{term['signal']}"
                    if term.get("signal")
                    else f"ExitCode:{_int(term.get('exitCode'))}"
                )
            elif state.get("running") and cs.get("ready"):
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            ready_condition = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or []
            )
            reason = "Running" if ready_condition else "NotReady"
    if _md(pod).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    nominated = status.get("nominatedNodeName") or "<none>"
    gates = spec.get("readinessGates") or []
    if gates:
        true = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
        gate_text = f"{sum(1 for g in gates if g.get('conditionType') in true)}/{len(gates)}"
    else:
        gate_text = "<none>"
    return [
        _md(pod).get("name"),
        f"{ready}/{len(containers)}",
        reason,
        restarts,
        _age(pod),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        nominated,
        gate_text,
    ]


_POD_COLUMNS: list[Column] = [
    _NAME,
    ("Ready", "string", "", 0),
    ("Status", "string", "", 0),
    ("Restarts", "string", "", 0),
    _AGE,
    ("IP", "string", "", 1),
    ("Node", "string", "", 1),
    ("Nominated Node", "string", "", 1),
    ("Readiness Gates", "string", "", 1),
]


# ---- nodes -----------------------------------------------------------------------------------


def _node_row(node: Obj) -> list[Cell]:
    status = node.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    state = "Unknown"
    if ready is not None:
        state = {"True": "Ready", "False": "NotReady"}.get(str(ready.get("status")), "Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = _md(node).get("labels") or {}
    roles = sorted(
        k.split("/", 1)[1]
        for k in labels
        if k.startswith("node-role.kubernetes.io/") and k.split("/", 1)[1]
    )
    if labels.get("kubernetes.io/role"):
        roles.append(labels["kubernetes.io/role"])
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    info = status.get("nodeInfo") or {}
    return [
        _md(node).get("name"),
        state,
        ",".join(roles) or "<none>",
        _age(node),
        info.get("kubeletVersion", ""),
        addresses.get("InternalIP") or "<none>",
        addresses.get("ExternalIP") or "<none>",
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


_NODE_COLUMNS: list[Column] = [
    _NAME,
    ("Status", "string", "", 0),
    ("Roles", "string", "", 0),
    _AGE,
    ("Version", "string", "", 0),
    ("Internal-IP", "string", "", 1),
    ("External-IP", "string", "", 1),
    ("OS-Image", "string", "", 1),
    ("Kernel-Version", "string", "", 1),
    ("Container-Runtime", "string", "", 1),
]


# ---- services --------------------------------------------------------------------------------


def _service_row(svc: Obj) -> list[Cell]:
    spec = svc.get("spec") or {}
    kind = spec.get("type") or "ClusterIP"
    external = "<none>"
    if kind == "ExternalName":
        external = spec.get("externalName") or "<none>"
    else:
        ingress = _get(svc, "status", "loadBalancer", "ingress") or []
        ips = [i.get("ip") or i.get("hostname") for i in ingress] + list(
            spec.get("externalIPs") or []
        )
        if ips:
            external = ",".join(str(i) for i in ips if i)
        elif kind == "LoadBalancer":
            external = "<pending>"
    ports = []
    for p in spec.get("ports") or []:
        text = f"{p.get('port')}"
        if p.get("nodePort"):
            text += f":{p['nodePort']}"
        ports.append(f"{text}/{p.get('protocol') or 'TCP'}")
    selector = spec.get("selector") or {}
    return [
        _md(svc).get("name"),
        kind,
        spec.get("clusterIP") or "<none>",
        external,
        ",".join(ports) or "<none>",
        _age(svc),
        ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>",
    ]


_SERVICE_COLUMNS: list[Column] = [
    _NAME,
    ("Type", "string", "", 0),
    ("Cluster-IP", "string", "", 0),
    ("External-IP", "string", "", 0),
    ("Port(s)", "string", "", 0),
    _AGE,
    ("Selector", "string", "", 1),
]

# ---- workloads -------------------------------------------------------------------------------

_WIDE_WORKLOAD: list[Column] = [
    ("Containers", "string", "", 1),
    ("Images", "string", "", 1),
    ("Selector", "string", "", 1),
]


def _deployment_row(d: Obj) -> list[Cell]:
    spec, status = d.get("spec") or {}, d.get("status") or {}
    names, images = _containers(spec)
    return [
        _md(d).get("name"),
        f"{_int(status.get('readyReplicas'))}/{_int(spec.get('replicas', 1))}",
        _int(status.get("updatedReplicas")),
        _int(status.get("availableReplicas")),
        _age(d),
        names,
        images,
        _selector(spec.get("selector")),
    ]


def _replicaset_row(rs: Obj) -> list[Cell]:
    spec, status = rs.get("spec") or {}, rs.get("status") or {}
    names, images = _containers(spec)
    selector = spec.get("selector")
    if rs.get("kind") == "ReplicationController":
        selector = {"matchLabels": selector} if isinstance(selector, dict) else None
    return [
        _md(rs).get("name"),
        _int(spec.get("replicas", 1)),
        _int(status.get("replicas")),
        _int(status.get("readyReplicas")),
        _age(rs),
        names,
        images,
        _selector(selector),
    ]


def _daemonset_row(ds: Obj) -> list[Cell]:
    spec, status = ds.get("spec") or {}, ds.get("status") or {}
    names, images = _containers(spec)
    node_selector = _get(spec, "template", "spec", "nodeSelector") or {}
    return [
        _md(ds).get("name"),
        _int(status.get("desiredNumberScheduled")),
        _int(status.get("currentNumberScheduled")),
        _int(status.get("numberReady")),
        _int(status.get("updatedNumberScheduled")),
        _int(status.get("numberAvailable")),
        ",".join(f"{k}={v}" for k, v in sorted(node_selector.items())) or "<none>",
        _age(ds),
        names,
        images,
        _selector(spec.get("selector")),
    ]


def _statefulset_row(sts: Obj) -> list[Cell]:
    spec, status = sts.get("spec") or {}, sts.get("status") or {}
    names, images = _containers(spec)
    return [
        _md(sts).get("name"),
        f"{_int(status.get('readyReplicas'))}/{_int(spec.get('replicas', 1))}",
        _age(sts),
        names,
        images,
    ]


def _job_row(job: Obj) -> list[Cell]:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    names, images = _containers(spec)
    completions = spec.get("completions")
    succeeded = _int(status.get("succeeded"))
    if completions is not None:
        done = f"{succeeded}/{completions}"
    else:
        done = f"{succeeded}/1 of {spec.get('parallelism', 1)}"
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if conditions.get("Complete") == "True":
        state = "Complete"
    elif conditions.get("Failed") == "True":
        state = "Failed"
    elif conditions.get("FailureTarget") == "True":
        state = "FailureTarget"
    elif conditions.get("SuccessCriteriaMet") == "True":
        state = "SuccessCriteriaMet"
    elif conditions.get("Suspended") == "True" or spec.get("suspend"):
        state = "Suspended"
    else:
        state = "Running"
    duration = ""
    start = status.get("startTime")
    if isinstance(start, str):
        end = status.get("completionTime")
        t0 = calendar.timegm(time.strptime(start[:19], "%Y-%m-%dT%H:%M:%S"))
        t1 = (
            calendar.timegm(time.strptime(end[:19], "%Y-%m-%dT%H:%M:%S"))
            if isinstance(end, str)
            else time.time()
        )
        duration = human_duration(t1 - t0)
    return [
        _md(job).get("name"),
        state,
        done,
        duration,
        _age(job),
        names,
        images,
        _selector(spec.get("selector")),
    ]


def _cronjob_row(cj: Obj) -> list[Cell]:
    spec, status = cj.get("spec") or {}, cj.get("status") or {}
    template = _get(spec, "jobTemplate", "spec") or {}
    names, images = _containers(template)
    last = status.get("lastScheduleTime")
    return [
        _md(cj).get("name"),
        spec.get("schedule", ""),
        spec.get("timeZone") or "<none>",
        "True" if spec.get("suspend") else "False",
        len(status.get("active") or []),
        _since(last) if last else "<none>",
        _age(cj),
        names,
        images,
        _selector(template.get("selector")),
    ]


# ---- the rest --------------------------------------------------------------------------------


def _event_row(ev: Obj) -> list[Cell]:
    # core/v1 shape; events.k8s.io/v1 ones are converted first
    involved = ev.get("involvedObject") or {}
    source = ev.get("source") or {}
    last = ev.get("lastTimestamp") or ev.get("eventTime") or _md(ev).get("creationTimestamp")
    first = ev.get("firstTimestamp") or ev.get("eventTime") or _md(ev).get("creationTimestamp")
    count = _int(ev.get("count")) or _int((ev.get("series") or {}).get("count")) or 1
    kind = str(involved.get("kind") or "").lower()
    source_text = source.get("component") or ev.get("reportingComponent") or ""
    if source.get("host"):
        source_text += f", {source['host']}"
    return [
        _since(last),
        ev.get("type", ""),
        ev.get("reason", ""),
        f"{kind}/{involved.get('name', '')}",
        involved.get("fieldPath", ""),
        source_text,
        str(ev.get("message", "")).strip(),
        _since(first),
        count,
        _md(ev).get("name"),
    ]


# kubectl prints a ReplicationController like a ReplicaSet.
_REPLICA_COLUMNS: list[Column] = [
    _NAME,
    ("Desired", "integer", "", 0),
    ("Current", "integer", "", 0),
    ("Ready", "integer", "", 0),
    _AGE,
    *_WIDE_WORKLOAD,
]

_EVENT_COLUMNS: list[Column] = [
    ("Last Seen", "string", "", 0),
    ("Type", "string", "", 0),
    ("Reason", "string", "", 0),
    ("Object", "string", "", 0),
    ("Subobject", "string", "", 1),
    ("Source", "string", "", 1),
    ("Message", "string", "", 0),
    ("First Seen", "string", "", 1),
    ("Count", "string", "", 1),
    ("Name", "string", "", 1),
]


def _pdb_row(pdb: Obj) -> list[Cell]:
    spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
    min_available = spec.get("minAvailable")
    max_unavailable = spec.get("maxUnavailable")
    return [
        _md(pdb).get("name"),
        "N/A" if min_available is None else str(min_available),
        "N/A" if max_unavailable is None else str(max_unavailable),
        _int(status.get("disruptionsAllowed")),
        _age(pdb),
    ]


def _binding_row(b: Obj) -> list[Cell]:
    ref = b.get("roleRef") or {}
    subjects = b.get("subjects") or []

    def names(kind: str) -> str:
        found = [
            (f"{s.get('namespace')}/{s.get('name')}" if kind == "ServiceAccount" else s.get("name"))
            for s in subjects
            if s.get("kind") == kind
        ]
        return ", ".join(str(n) for n in found)

    return [
        _md(b).get("name"),
        f"{ref.get('kind')}/{ref.get('name')}",
        _age(b),
        names("User"),
        names("Group"),
        names("ServiceAccount"),
    ]


def _apiservice_row(a: Obj) -> list[Cell]:
    spec = a.get("spec") or {}
    service = spec.get("service")
    available = next(
        (c for c in _get(a, "status", "conditions") or [] if c.get("type") == "Available"), None
    )
    if available is None:
        shown = "Unknown"
    elif available.get("status") == "True":
        shown = "True"
    else:
        shown = f"{available.get('status')} ({available.get('reason')})"
    where = f"{service.get('namespace')}/{service.get('name')}" if service else "Local"
    return [_md(a).get("name"), where, shown, _age(a)]


_PRINTERS: dict[tuple[str, str], tuple[list[Column], Callable[[Obj], list[Cell]]]] = {
    ("", "Pod"): (_POD_COLUMNS, _pod_row),
    ("", "Node"): (_NODE_COLUMNS, _node_row),
    ("", "Namespace"): (
        [_NAME, ("Status", "string", "", 0), _AGE],
        lambda o: [_md(o).get("name"), _get(o, "status", "phase") or "", _age(o)],
    ),
    ("", "Service"): (_SERVICE_COLUMNS, _service_row),
    ("", "ConfigMap"): (
        [_NAME, ("Data", "string", "", 0), _AGE],
        lambda o: [
            _md(o).get("name"),
            len(o.get("data") or {}) + len(o.get("binaryData") or {}),
            _age(o),
        ],
    ),
    ("", "Secret"): (
        [_NAME, ("Type", "string", "", 0), ("Data", "string", "", 0), _AGE],
        lambda o: [
            _md(o).get("name"),
            o.get("type") or "Opaque",
            len(o.get("data") or {}),
            _age(o),
        ],
    ),
    ("", "ServiceAccount"): (
        [_NAME, ("Secrets", "string", "", 0), _AGE],
        lambda o: [_md(o).get("name"), len(o.get("secrets") or []), _age(o)],
    ),
    ("", "Event"): (_EVENT_COLUMNS, _event_row),
    ("", "ReplicationController"): (_REPLICA_COLUMNS, _replicaset_row),
    ("apps", "Deployment"): (
        [
            _NAME,
            ("Ready", "string", "", 0),
            ("Up-to-date", "string", "", 0),
            ("Available", "string", "", 0),
            _AGE,
            *_WIDE_WORKLOAD,
        ],
        _deployment_row,
    ),
    ("apps", "ReplicaSet"): (_REPLICA_COLUMNS, _replicaset_row),
    ("apps", "DaemonSet"): (
        [
            _NAME,
            ("Desired", "integer", "", 0),
            ("Current", "integer", "", 0),
            ("Ready", "integer", "", 0),
            ("Up-to-date", "integer", "", 0),
            ("Available", "integer", "", 0),
            ("Node Selector", "string", "", 0),
            _AGE,
            *_WIDE_WORKLOAD,
        ],
        _daemonset_row,
    ),
    ("apps", "StatefulSet"): (
        [
            _NAME,
            ("Ready", "string", "", 0),
            _AGE,
            ("Containers", "string", "", 1),
            ("Images", "string", "", 1),
        ],
        _statefulset_row,
    ),
    ("batch", "Job"): (
        [
            _NAME,
            ("Status", "string", "", 0),
            ("Completions", "string", "", 0),
            ("Duration", "string", "", 0),
            _AGE,
            *_WIDE_WORKLOAD,
        ],
        _job_row,
    ),
    ("batch", "CronJob"): (
        [
            _NAME,
            ("Schedule", "string", "", 0),
            ("Timezone", "string", "", 0),
            ("Suspend", "boolean", "", 0),
            ("Active", "integer", "", 0),
            ("Last Schedule", "string", "", 0),
            _AGE,
            *_WIDE_WORKLOAD,
        ],
        _cronjob_row,
    ),
    ("policy", "PodDisruptionBudget"): (
        [
            _NAME,
            ("Min Available", "string", "", 0),
            ("Max Unavailable", "string", "", 0),
            ("Allowed Disruptions", "integer", "", 0),
            _AGE,
        ],
        _pdb_row,
    ),
    ("coordination.k8s.io", "Lease"): (
        [_NAME, ("Holder", "string", "", 0), _AGE],
        lambda o: [_md(o).get("name"), _get(o, "spec", "holderIdentity") or "", _age(o)],
    ),
    ("rbac.authorization.k8s.io", "RoleBinding"): (
        [
            _NAME,
            ("Role", "string", "", 0),
            _AGE,
            ("Users", "string", "", 1),
            ("Groups", "string", "", 1),
            ("ServiceAccounts", "string", "", 1),
        ],
        _binding_row,
    ),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): (
        [
            _NAME,
            ("Role", "string", "", 0),
            _AGE,
            ("Users", "string", "", 1),
            ("Groups", "string", "", 1),
            ("ServiceAccounts", "string", "", 1),
        ],
        _binding_row,
    ),
    ("apiregistration.k8s.io", "APIService"): (
        [_NAME, ("Service", "string", "", 0), ("Available", "string", "", 0), _AGE],
        _apiservice_row,
    ),
}


def _events_v1_row(ev: Obj) -> list[Cell]:
    from sim.kubeapi.builtins import event_to_core

    return _event_row(event_to_core(ev))


_PRINTERS[("events.k8s.io", "Event")] = (_EVENT_COLUMNS, _events_v1_row)
# Kinds with no printer of their own: the server's default table.
_DEFAULT_COLUMNS: list[Column] = [_NAME, ("Created At", "date", "", 0)]


def _default_row(obj: Obj) -> list[Cell]:
    return [_md(obj).get("name"), _md(obj).get("creationTimestamp")]


# ---- custom resources ------------------------------------------------------------------------


def _jsonpath(obj: Any, path: str) -> Any:
    """The simple JSONPaths CRDs use: `.spec.a.b`, `.status.conditions[0].type`."""
    cursor = obj
    for part in path.strip().lstrip(".").replace("[", ".[").split("."):
        if not part:
            continue
        if part.startswith("[") and part.endswith("]"):
            index = part[1:-1]
            if not isinstance(cursor, list) or not index.lstrip("-").isdigit():
                return None
            i = int(index)
            if not -len(cursor) <= i < len(cursor):
                return None
            cursor = cursor[i]
        elif isinstance(cursor, dict):
            cursor = cursor.get(part)
        else:
            return None
        if cursor is None:
            return None
    return cursor


def _custom(rt: ResourceType) -> tuple[list[Column], Callable[[Obj], list[Cell]], list[str]]:
    columns = crds.printer_columns(rt.group, rt.version, rt.plural)
    if not columns:
        return [_NAME, _AGE], lambda o: [_md(o).get("name"), _age(o)], []
    defs: list[Column] = [_NAME]
    descriptions = [""]
    for c in columns:
        defs.append(
            (c.get("name", ""), c.get("type", "string"), c.get("format", ""), c.get("priority", 0))
        )
        descriptions.append(c.get("description", ""))

    def row(obj: Obj) -> list[Cell]:
        cells: list[Cell] = [_md(obj).get("name")]
        for c in columns:
            value = _jsonpath(obj, str(c.get("jsonPath", "")))
            if c.get("type") == "date":
                value = _since(value) if value else "<unknown>"
            elif isinstance(value, dict | list):
                import json

                value = json.dumps(value, separators=(",", ":"))
            cells.append(value)
        return cells

    return defs, row, descriptions


# ---- the Table -------------------------------------------------------------------------------


def printer(rt: ResourceType) -> tuple[list[Obj], Callable[[Obj], list[Cell]]]:
    """(columnDefinitions, row function) for a resource."""
    descriptions: list[str] = []
    if rt.custom:
        columns, row, descriptions = _custom(rt)
    else:
        columns, row = _PRINTERS.get((rt.group, rt.kind), (_DEFAULT_COLUMNS, _default_row))
    definitions = []
    for i, (name, kind, fmt, priority) in enumerate(columns):
        description = descriptions[i] if i < len(descriptions) and descriptions[i] else ""
        definitions.append(
            {
                "name": name,
                "type": kind,
                "format": fmt,
                "description": description or _DESCRIPTIONS.get(name, ""),
                "priority": priority,
            }
        )
    return definitions, row


def partial_metadata(obj: Obj) -> Obj:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": _md(obj)}


def table(
    rt: ResourceType,
    objects: list[Obj],
    list_meta: Obj,
    include_object: str = "Metadata",
    headers: bool = True,
) -> Obj:
    columns, row = printer(rt)
    rows = []
    for obj in objects:
        entry: Obj = {"cells": row(obj)}
        if include_object == "Object":
            entry["object"] = obj
        elif include_object != "None":
            entry["object"] = partial_metadata(obj)
        rows.append(entry)
    out: Obj = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta}
    if headers:
        out["columnDefinitions"] = columns
    out["rows"] = rows
    return out
