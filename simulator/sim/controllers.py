"""The kube-controller-manager loops the scenarios need: Deployments, ReplicaSets, pod GC.

- Deployment -> ReplicaSet: each template gets its ReplicaSet (`<name>-<pod-template-hash>`,
  owned by the Deployment, `deployment.kubernetes.io/revision` annotated); a changed template
  rolls out as the real controller does (RollingUpdate within maxSurge/maxUnavailable, or
  Recreate), and the Deployment's status (replicas, updated, ready, available, conditions,
  observedGeneration) is what `kubectl rollout status` and `kubectl get deploy` read.
- ReplicaSet (and ReplicationController) -> Pod: `replicas` pods of the template, owned by it;
  status replicas / ready / available (Ready for minReadySeconds).
- `scale` is the API's (the `scale` subresource); these loops only follow `spec.replicas`.
- Garbage collection: pods bound to a node that no longer exists (the pod GC), and what a
  deleted owner leaves (ReplicaSets of a deleted Deployment, pods of a deleted ReplicaSet, the
  kube-node-lease Lease of a deleted Node, the NodeClaims of a deleted NodePool), as the
  garbage collector's background deletion does.

Everything polls on one thread through the API, like any other client of the emulator.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import logging
import math
import threading
import time
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

Obj = dict[str, Any]
HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
_SAFE = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's rand.SafeEncodeString alphabet
_MERGE = "application/merge-patch+json"
MANAGER = "kube-controller-manager"


def template_hash(template: Any) -> str:
    """A pod template's hash: nulls and empty values weigh nothing, as for the Go struct."""
    digest = hashlib.sha256(json.dumps(_pruned(template), sort_keys=True).encode()).digest()
    return "".join(_SAFE[b % len(_SAFE)] for b in digest[:10])


def _pruned(value: Any) -> Any:
    if isinstance(value, dict):
        out = {k: _pruned(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [], "")}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _seconds(stamp: Any) -> float | None:
    if not isinstance(stamp, str):
        return None
    try:
        return float(calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def _md(obj: Obj) -> Obj:
    md = obj.get("metadata")
    return md if isinstance(md, dict) else {}


def _controller_uid(obj: Obj, kinds: tuple[str, ...]) -> str | None:
    for ref in _md(obj).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") in kinds:
            return str(ref.get("uid"))
    return None


def _selected(selector: Any, labels: dict[str, str], plain_map: bool = False) -> bool:
    if not isinstance(selector, dict):
        return False
    wanted = selector if plain_map else (selector.get("matchLabels") or {})
    if any(labels.get(k) != v for k, v in wanted.items()):
        return False
    for expr in [] if plain_map else selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if (op == "In" and labels.get(key) not in values) or (
            op == "NotIn" and labels.get(key) in values
        ):
            return False
        if (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels):
            return False
    return True


def _active(pod: Obj) -> bool:
    return not _md(pod).get("deletionTimestamp") and (pod.get("status") or {}).get("phase") not in (
        "Succeeded",
        "Failed",
    )


def _ready_since(pod: Obj) -> float | None:
    """When the pod became Ready, or None when it is not Ready."""
    if (pod.get("status") or {}).get("phase") != "Running":
        return None
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready" and c.get("status") == "True":
            return _seconds(c.get("lastTransitionTime")) or 0.0
    return None


def _scaled(value: Any, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        exact = int(value[:-1]) * total / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return int(value or 0)


class Controllers:
    """All loops on one thread, polling. The workload loops look every `poll_s`, and list
    pods only when some ReplicaSet or ReplicationController needs them. The garbage
    collection looks at nodes and owners every `collect_s`, and reads every pod only when one
    it saw is gone, or every `sweep_s` for pods that named a node or owner it never saw (the
    real pod GC's period is 20 s). Listing a thousand pods twice a second was a third of the
    simulator's CPU during a burst, and every 2 s still a tenth."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        poll_s: float = 0.5,
        collect_s: float = 2.0,
        sweep_s: float = 20.0,
    ) -> None:
        self.api = api_client
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.poll_s = poll_s
        self.collect_s = collect_s
        self.sweep_s = sweep_s
        self._swept_at: float | None = None
        self._swept_nodes: set[Any] = set()  # nodes and owners at the last look
        self._swept_owners: set[Any] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing: dict[str, Any] = {}  # objects logged as failing -> resourceVersion
        # Owner kind -> the uids of its objects at the last look, and when its dependents
        # were last read (`_collect_owned`).
        self._owners_seen: dict[str, set[Any]] = {}
        self._owned_swept_at: dict[str, float] = {}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="controllers", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        collected_at = 0.0
        while not self._stop.is_set():
            collect = time.monotonic() - collected_at >= self.collect_s
            try:
                self.tick(collect=collect)
            except Exception:
                log.exception("controllers tick failed")
            if collect:
                collected_at = time.monotonic()
            self._stop.wait(self.poll_s)

    # ---- the API, raw (the typed client would validate bodies against its models) ----------

    def _call(self, method: str, path: str, body: Any = None, content_type: str = "") -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        url = f"{self.api.configuration.host}{path}"
        sep = "&" if "?" in url else "?"
        response = self.api.call_api(
            method, f"{url}{sep}fieldManager={MANAGER}", header_params=headers, body=body
        )
        data = response.read()
        if not 200 <= response.status < 300:
            raise ApiException(
                status=response.status, reason=response.reason, body=data.decode(errors="replace")
            )
        return json.loads(data) if data else None

    def _list(self, path: str) -> list[Obj]:
        items: list[Obj] = (self._call("GET", path) or {}).get("items") or []
        return items

    # ---- the loops ---------------------------------------------------------------------------

    def tick(self, collect: bool = True) -> None:
        """One pass of every loop; `collect=False` leaves out the garbage collection."""
        deployments = self._list("/apis/apps/v1/deployments")
        replicasets = self._list("/apis/apps/v1/replicasets")
        rcs = self._list("/api/v1/replicationcontrollers")
        if not (collect or deployments or replicasets or rcs):
            return
        node_objects = self._list("/api/v1/nodes") if collect else []
        nodes = {_md(n).get("name") for n in node_objects}
        sweep = collect and self._sweep_due(nodes, {_md(o).get("uid") for o in replicasets + rcs})
        pods = self._list("/api/v1/pods") if sweep or replicasets or rcs else []
        if sweep:
            self._collect_orphans(pods, nodes)
        for deployment in deployments:
            self._guarded(deployment, lambda d=deployment: self._deployment(d, replicasets))
        if deployments:
            replicasets = self._list("/apis/apps/v1/replicasets")
        alive = {_md(d).get("uid") for d in deployments}
        collected: set[Any] = set()
        for rs in replicasets:
            owner = _controller_uid(rs, ("Deployment",))
            if owner is not None and owner not in alive:
                collected.add(_md(rs).get("uid"))
                self._delete(
                    f"/apis/apps/v1/namespaces/{_md(rs)['namespace']}/replicasets/{_md(rs)['name']}"
                )
                continue
            self._guarded(rs, lambda r=rs: self._replicas(r, pods, "ReplicaSet"))
        for rc in rcs:
            self._guarded(rc, lambda r=rc: self._replicas(r, pods, "ReplicationController"))
        if not collect:
            return
        self._collect_node_leases({_md(n).get("uid") for n in node_objects})
        self._collect_owned(*_NODECLAIMS_OF_NODEPOOLS)
        if not sweep:
            return
        owners = {_md(o).get("uid") for o in replicasets + rcs} - collected
        for pod in pods:
            owner = _controller_uid(pod, ("ReplicaSet", "ReplicationController"))
            if owner is not None and owner not in owners and not _md(pod).get("deletionTimestamp"):
                self._delete_pod(_md(pod)["namespace"], _md(pod)["name"])

    def _sweep_due(self, nodes: set[Any], owners: set[Any]) -> bool:
        """Whether the pods must be read: a node or an owner the last read saw is gone, or
        `sweep_s` passed (a pod may name a node or owner this loop never saw)."""
        now = time.monotonic()
        due = (
            self._swept_at is None
            or now - self._swept_at >= self.sweep_s
            or not self._swept_nodes <= nodes
            or not self._swept_owners <= owners
        )
        if due:
            self._swept_at = now
        self._swept_nodes, self._swept_owners = nodes, owners
        return due

    def _guarded(self, obj: Obj, work: Any) -> None:
        try:
            work()
        except (ApiException, ValueError, TypeError, KeyError, AttributeError) as exc:
            # One object we cannot act on (a template the API server refuses, a field of the
            # wrong type) must not stop the others, nor pod GC.
            md = _md(obj)
            key = f"{obj.get('kind')} {md.get('namespace')}/{md.get('name')}"
            if self._failing.get(key) != md.get("resourceVersion"):  # once a version
                self._failing[key] = md.get("resourceVersion")
                log.warning("%s not reconciled: %s", key, _short(exc))

    def _collect_node_leases(self, alive: set[Any]) -> None:
        """A deleted Node's lease goes too (the kubelet makes it owned by its Node)."""
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        for lease in self._list(path):
            owner = next(
                (
                    r.get("uid")
                    for r in _md(lease).get("ownerReferences") or []
                    if r.get("kind") == "Node"
                ),
                None,
            )
            if owner is not None and owner not in alive:
                self._delete(f"{path}/{_md(lease)['name']}")

    def _collect_owned(self, owner_kind: str, owners_path: str, dependents_path: str) -> None:
        """Dependents none of whose owners of `owner_kind` is there any more (by uid: an owner
        created again under its name owns nothing of the old one's) are deleted; a finalizer
        on one holds it until its controller lets go. The owners are read at every look, the
        dependents only once an owner seen before is gone, or every `sweep_s` (one may name
        an owner deleted before this loop saw it). Kinds not served (their CRD not
        installed) are skipped."""
        try:
            alive = {_md(o).get("uid") for o in self._list(owners_path)}
            seen_before, self._owners_seen[owner_kind] = self._owners_seen.get(owner_kind), alive
            now = time.monotonic()
            swept_at = self._owned_swept_at.get(owner_kind)
            if (
                seen_before is not None
                and seen_before <= alive
                and swept_at is not None
                and now - swept_at < self.sweep_s
            ):
                return
            self._owned_swept_at[owner_kind] = now
            dependents = self._list(dependents_path)
        except ApiException as err:
            if err.status == 404:
                return
            raise
        for dependent in dependents:
            md = _md(dependent)
            owners = {
                r.get("uid") for r in md.get("ownerReferences") or [] if r.get("kind") == owner_kind
            }
            if owners and not md.get("deletionTimestamp") and not owners & alive:
                log.info(
                    "garbage collector: %s %s/%s has no %s left",
                    dependent.get("kind"),
                    md.get("namespace"),
                    md.get("name"),
                    owner_kind,
                )
                path = _namespaced(dependents_path, md.get("namespace"))
                self._delete(f"{path}/{md.get('name')}")

    def _collect_orphans(self, pods: list[Obj], nodes: set[Any]) -> None:
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node and node not in nodes:
                md = _md(pod)
                log.info(
                    "pod GC: %s/%s was bound to deleted node %s", md["namespace"], md["name"], node
                )
                self._delete_pod(md["namespace"], md["name"])

    # ---- Deployment -> ReplicaSets -----------------------------------------------------------

    def _deployment(self, d: Obj, replicasets: list[Obj]) -> None:
        md, spec = _md(d), d.get("spec") or {}
        ns, uid = md["namespace"], md["uid"]
        base = f"/apis/apps/v1/namespaces/{ns}/replicasets"
        template = spec.get("template") or {}
        wanted = int(spec.get("replicas", 1))
        owned = [rs for rs in replicasets if _controller_uid(rs, ("Deployment",)) == uid]
        h = template_hash(template)
        new = next((rs for rs in owned if (_md(rs).get("labels") or {}).get(HASH_LABEL) == h), None)
        old = [rs for rs in owned if rs is not new]
        revisions = [
            int((_md(rs).get("annotations") or {}).get(REVISION, "0") or 0) for rs in owned
        ]
        paused = bool(spec.get("paused"))
        if new is None and not paused:
            new = self._call(
                "POST", base, self._new_replicaset(d, h, max(revisions, default=0) + 1)
            )
            self._event(
                d, "ScalingReplicaSet", f"Scaled up replica set {_md(new)['name']} from 0 to 0"
            )
            owned.append(new)
        if new is not None and not paused:
            self._revisions(d, new, owned, revisions)
        strategy = spec.get("strategy") or {}
        if new is not None and not paused:
            if strategy.get("type") == "Recreate":
                targets = self._recreate(old, new, wanted)
            else:
                targets = self._rolling(old, new, wanted, strategy.get("rollingUpdate") or {})
            for rs, count in targets.items():
                current = next(r for r in owned if _md(r)["name"] == rs)
                before = int((current.get("spec") or {}).get("replicas", 0))
                if before != count:
                    self._call("PATCH", f"{base}/{rs}", {"spec": {"replicas": count}}, _MERGE)
                    (current.setdefault("spec", {}))["replicas"] = count
                    verb = "up" if count > before else "down"
                    self._event(
                        d,
                        "ScalingReplicaSet",
                        f"Scaled {verb} replica set {rs} from {before} to {count}",
                    )
        self._deployment_status(d, owned, new, wanted)

    def _revisions(self, d: Obj, new: Obj, owned: list[Obj], revisions: list[int]) -> None:
        """The new ReplicaSet holds the highest revision (a rollback to an old template
        makes its ReplicaSet the newest again), and the Deployment carries it."""
        md = _md(d)
        current = int((_md(new).get("annotations") or {}).get(REVISION, "0") or 0)
        others = [r for r, rs in zip(revisions, owned, strict=False) if rs is not new]
        if others and current <= max(others):
            current = max(others) + 1
            path = f"/apis/apps/v1/namespaces/{md['namespace']}/replicasets/{_md(new)['name']}"
            body = {"metadata": {"annotations": {REVISION: str(current)}}}
            self._call("PATCH", path, body, _MERGE)
            _md(new).setdefault("annotations", {})[REVISION] = str(current)
        if (md.get("annotations") or {}).get(REVISION) != str(current):
            path = f"/apis/apps/v1/namespaces/{md['namespace']}/deployments/{md['name']}"
            body = {"metadata": {"annotations": {REVISION: str(current)}}}
            self._call("PATCH", path, body, _MERGE)

    def _new_replicaset(self, d: Obj, h: str, revision: int) -> Obj:
        md, spec = _md(d), d.get("spec") or {}
        template = json.loads(json.dumps(spec.get("template") or {}))
        tmd = template.setdefault("metadata", {})
        tmd["labels"] = dict(tmd.get("labels") or {}, **{HASH_LABEL: h})
        selector = json.loads(json.dumps(spec.get("selector") or {}))
        selector["matchLabels"] = dict(selector.get("matchLabels") or {}, **{HASH_LABEL: h})
        return {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{md['name']}-{h}",
                "namespace": md["namespace"],
                "labels": tmd["labels"],
                "annotations": {
                    REVISION: str(revision),
                    "deployment.kubernetes.io/desired-replicas": str(spec.get("replicas", 1)),
                },
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "name": md["name"],
                        "uid": md["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "replicas": 0,
                "minReadySeconds": spec.get("minReadySeconds", 0),
                "selector": selector,
                "template": template,
            },
        }

    @staticmethod
    def _recreate(old: list[Obj], new: Obj, wanted: int) -> dict[str, int]:
        targets = {_md(rs)["name"]: 0 for rs in old}
        old_pods = sum(int((rs.get("status") or {}).get("replicas") or 0) for rs in old)
        old_wanted = sum(int((rs.get("spec") or {}).get("replicas") or 0) for rs in old)
        targets[_md(new)["name"]] = wanted if old_pods == 0 and old_wanted == 0 else 0
        return targets

    @staticmethod
    def _rolling(old: list[Obj], new: Obj, wanted: int, rolling: Obj) -> dict[str, int]:
        surge = _scaled(rolling.get("maxSurge", "25%"), wanted, round_up=True)
        unavailable = _scaled(rolling.get("maxUnavailable", "25%"), wanted, round_up=False)
        if surge == 0 and unavailable == 0:
            unavailable = 1
        spec_of = {
            _md(rs)["name"]: int((rs.get("spec") or {}).get("replicas") or 0) for rs in [*old, new]
        }
        new_name = _md(new)["name"]
        # Scale the new ReplicaSet up, within maxSurge.
        total = sum(spec_of.values())
        if spec_of[new_name] > wanted:
            spec_of[new_name] = wanted
        elif spec_of[new_name] < wanted:
            room = wanted + surge - total
            spec_of[new_name] += max(0, min(room, wanted - spec_of[new_name]))
        # Scale old ones down, keeping wanted - maxUnavailable available.
        available = sum(
            int((rs.get("status") or {}).get("availableReplicas") or 0) for rs in [*old, new]
        )
        new_unavailable = spec_of[new_name] - int(
            (new.get("status") or {}).get("availableReplicas") or 0
        )
        budget = sum(spec_of.values()) - (wanted - unavailable) - max(0, new_unavailable)
        budget = min(
            budget,
            available
            - (wanted - unavailable)
            + sum(
                spec_of[_md(rs)["name"]]
                - int((rs.get("status") or {}).get("availableReplicas") or 0)
                for rs in old
            ),
        )
        for rs in sorted(old, key=lambda r: _md(r).get("creationTimestamp") or ""):
            name = _md(rs)["name"]
            if budget <= 0:
                break
            down = min(spec_of[name], budget)
            spec_of[name] -= down
            budget -= down
        return spec_of

    def _deployment_status(self, d: Obj, owned: list[Obj], new: Obj | None, wanted: int) -> None:
        md, spec = _md(d), d.get("spec") or {}

        def total(key: str, rss: list[Obj]) -> int:
            return sum(int((rs.get("status") or {}).get(key) or 0) for rs in rss)

        rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
        unavailable = 0
        if (spec.get("strategy") or {}).get("type") != "Recreate":
            unavailable = _scaled(rolling.get("maxUnavailable", "25%"), wanted, round_up=False)
        available = total("availableReplicas", owned)
        updated = total("replicas", [new]) if new is not None else 0
        replicas = total("replicas", owned)
        status: Obj = {
            "observedGeneration": md.get("generation", 1),
            "replicas": replicas,
            "updatedReplicas": updated,
            "readyReplicas": total("readyReplicas", owned),
            "availableReplicas": available,
        }
        status = {k: v for k, v in status.items() if v or k == "observedGeneration"}
        if wanted - available > 0:
            status["unavailableReplicas"] = wanted - available
        old_status = d.get("status") or {}
        conditions = {c.get("type"): c for c in old_status.get("conditions") or []}
        now = _now()
        minimum = available >= wanted - unavailable

        def condition(kind: str, value: str, reason: str, message: str) -> Obj:
            prev = conditions.get(kind) or {}
            same = prev.get("status") == value
            return {
                "type": kind,
                "status": value,
                "lastUpdateTime": prev.get("lastUpdateTime")
                if same and prev.get("reason") == reason
                else now,
                "lastTransitionTime": prev.get("lastTransitionTime") if same else now,
                "reason": reason,
                "message": message,
            }

        new_name = _md(new)["name"] if new is not None else ""
        complete = new is not None and updated == wanted == replicas and available >= wanted
        status["conditions"] = [
            condition(
                "Available",
                "True" if minimum else "False",
                "MinimumReplicasAvailable" if minimum else "MinimumReplicasUnavailable",
                "Deployment has minimum availability."
                if minimum
                else "Deployment does not have minimum availability.",
            ),
            condition(
                "Progressing",
                "True",
                "NewReplicaSetAvailable" if complete else "ReplicaSetUpdated",
                f'ReplicaSet "{new_name}" has successfully progressed.'
                if complete
                else f'ReplicaSet "{new_name}" is progressing.',
            ),
        ]
        if spec.get("paused"):
            status["conditions"][1] = condition(
                "Progressing", "Unknown", "DeploymentPaused", "Deployment is paused"
            )
        if _comparable(status) != _comparable(old_status):
            self._call(
                "PATCH",
                f"/apis/apps/v1/namespaces/{md['namespace']}/deployments/{md['name']}/status",
                {"status": _replacing(old_status, status)},
                _MERGE,
            )

    # ---- ReplicaSet / ReplicationController -> Pods ------------------------------------------

    def _replicas(self, rs: Obj, pods: list[Obj], kind: str) -> None:
        md, spec = _md(rs), rs.get("spec") or {}
        ns, uid = md["namespace"], md["uid"]
        wanted = int(spec.get("replicas", 1))
        owned = [
            p
            for p in pods
            if _md(p).get("namespace") == ns and _controller_uid(p, (kind,)) == uid and _active(p)
        ]
        if len(owned) < wanted:
            for _ in range(wanted - len(owned)):
                owned.append(self._create_pod(rs, kind))
        elif len(owned) > wanted:
            # Unscheduled first, then not ready, then the newest.
            def rank(p: Obj) -> tuple[int, int, str]:
                return (
                    0 if not (p.get("spec") or {}).get("nodeName") else 1,
                    0 if _ready_since(p) is None else 1,
                    "~" + str(_md(p).get("creationTimestamp") or ""),
                )

            victims = sorted(owned, key=lambda p: (rank(p)[0], rank(p)[1], _neg(rank(p)[2])))
            for pod in victims[: len(owned) - wanted]:
                self._delete_pod(ns, _md(pod)["name"])
                owned.remove(pod)
        min_ready = int(spec.get("minReadySeconds") or 0)
        now = time.time()
        ready = [p for p in owned if _ready_since(p) is not None]
        available = [p for p in ready if now - (_ready_since(p) or 0) >= min_ready]
        template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        status = {
            "replicas": len(owned),
            "fullyLabeledReplicas": sum(
                1
                for p in owned
                if all((_md(p).get("labels") or {}).get(k) == v for k, v in template_labels.items())
            ),
            "readyReplicas": len(ready),
            "availableReplicas": len(available),
            "observedGeneration": md.get("generation", 1),
        }
        status = {k: v for k, v in status.items() if v or k in ("replicas", "observedGeneration")}
        if _comparable(status) != _comparable(rs.get("status") or {}):
            path = (
                f"/apis/apps/v1/namespaces/{ns}/replicasets/{md['name']}/status"
                if kind == "ReplicaSet"
                else f"/api/v1/namespaces/{ns}/replicationcontrollers/{md['name']}/status"
            )
            self._call(
                "PATCH", path, {"status": _replacing(rs.get("status") or {}, status)}, _MERGE
            )

    def _create_pod(self, rs: Obj, kind: str) -> Obj:
        md = _md(rs)
        template = (rs.get("spec") or {}).get("template") or {}
        tmd = template.get("metadata") or {}
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{md['name']}-",
                "namespace": md["namespace"],
                "labels": tmd.get("labels") or {},
                "annotations": tmd.get("annotations") or {},
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1" if kind == "ReplicaSet" else "v1",
                        "kind": kind,
                        "name": md["name"],
                        "uid": md["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": template.get("spec") or {},
        }
        created: Obj = self._call("POST", f"/api/v1/namespaces/{md['namespace']}/pods", body)
        return created

    # ---- helpers -----------------------------------------------------------------------------

    def _event(self, obj: Obj, reason: str, message: str) -> None:
        md = _md(obj)
        now = _now()
        body = {
            # Named as the event recorder names them: <object>.<unix nanoseconds, hex>.
            "metadata": {"name": f"{md['name']}.{time.time_ns():x}", "namespace": md["namespace"]},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": md["name"],
                "namespace": md["namespace"],
                "uid": md.get("uid"),
                "resourceVersion": md.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": "Normal",
            "source": {"component": "deployment-controller"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": "deployment-controller",
        }
        try:
            self._call("POST", f"/api/v1/namespaces/{md['namespace']}/events", body)
        except ApiException as exc:
            log.debug("event for %s/%s not recorded: %s", md["namespace"], md["name"], exc.status)

    def _delete(self, path: str) -> None:
        try:
            self._call("DELETE", path)
        except ApiException as err:
            if err.status != 404:
                raise

    def _delete_pod(self, namespace: str, name: str) -> None:
        self._delete(f"/api/v1/namespaces/{namespace}/pods/{name}")


# (owner kind, every owner's list path, every dependent's list path): a NodePool owns its
# NodeClaims, as Karpenter's does; `kubectl delete nodepool` takes its nodes with it.
_NODECLAIMS_OF_NODEPOOLS = (
    "NodePool",
    "/apis/cloudburst.io/v1alpha1/nodepools",
    "/apis/cloudburst.io/v1alpha1/nodeclaims",
)


def _namespaced(list_path: str, namespace: Any) -> str:
    """A resource's path in a namespace, from its all-namespaces list path."""
    if not namespace:
        return list_path
    prefix, _, plural = list_path.rpartition("/")
    return f"{prefix}/namespaces/{namespace}/{plural}"


def _neg(text: str) -> str:
    """Sorts newest first when used as a key (inverts each character)."""
    return "".join(chr(0x10FFFF - ord(c)) for c in text)


def _replacing(old: Obj, new: Obj) -> Obj:
    """A merge patch turning `old` into `new` at the top level (absent keys are nulled)."""
    return {k: new.get(k) for k in {*old, *new}}


def _comparable(status: Obj) -> str:
    """A status without its timestamps' churn, to write only when something changed."""
    return json.dumps(status, sort_keys=True)


def _short(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        try:
            return f"{exc.status} {json.loads(exc.body or '{}').get('message', exc.reason)}"
        except ValueError:
            return f"{exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"
