"""Whether the cluster stands behind a claim: the authority the activities that spend money or
mark a node take from Kubernetes objects and the worker's own settings, never from a message.

A claim's workflow input names its namespace, pool, NodeClass, offerings, labels and taints,
and whoever reaches Temporal can write one (docs/security.md, "Authority from the cluster").
What no such forgery can produce, and what `ClaimAuthority.warrant` requires:

- the **NodeClaim object** `<namespace>/<name>` in the cluster. The worker creates it, in the
  pool's `start_claim_workflows` before the claim's workflow starts (or an operator's
  `cloudburst claims create`, with their own Kubernetes rights); tenants may delete
  NodeClaims (a scale-down) but neither create nor change them (`cloudburst-edit`,
  deploy/base/rbac.yaml), and the claim's own activities never create one;
- its **controller owner**: a NodePool of the same namespace that exists with that uid, the
  pool the NodeClaim's spec names;
- the **NodeClass** the NodeClaim's spec names, read in that namespace: its credential
  reference and endpoints are the ones used, not the message's;
- the **tenancy**, from the worker's settings: a namespace not served is refused, and a
  tenant's marks (`cloudburst.io/tenant` taint, the node-restriction label) are those of the
  claim's own namespace;
- the **workflow** the activity runs for is the claim's own (`nodeclaim/<namespace>/<name>`),
  so a workflow of another id acts on no other claim's VM, node or Secrets.

The NodeClaim's uid is in the claim's input from its start (`metadata.uid`): a NodeClaim of
the same name made later is not the one that authorised it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from pydantic import ValidationError
from temporalio import activity

from api import labels
from api.errors import INVALID_CONFIGURATION, application_error
from api.messages import claim_key_of, claim_workflow_id
from api.nodeclaim import NodeClaim, Offering
from api.nodeclass import NodeClassSpec
from api.nodepool import API_VERSION, Taint
from cluster.tenancy import Tenancy, tenant_taint

log = logging.getLogger(__name__)

_GROUP, _, _VERSION = API_VERSION.partition("/")
# What a refused claim's error starts with: the claim's status and the worker's log say it.
REFUSED = "not authorised by the cluster"
# The labels that say what a node's VM is (the claim's workflow knows it once launched).
VM_LABELS = frozenset(
    {
        labels.PROVIDER,
        labels.REGION,
        labels.INSTANCE_TYPE,
        labels.K8S_REGION,
        labels.K8S_INSTANCE_TYPE,
        labels.CAPACITY_TYPE,
        labels.KARPENTER_CAPACITY_TYPE,
    }
)


class ClaimNotAuthorised(Exception):
    """The cluster does not stand behind the claim; the message says what is missing."""


@dataclass(frozen=True)
class ClaimWarrant:
    """What the cluster says a claim may do: read from its objects, never from a message."""

    namespace: str
    name: str
    uid: str
    node_pool: str
    node_class_name: str
    node_class: NodeClassSpec
    offerings: tuple[Offering, ...]
    labels: Mapping[str, str]  # the node's, from the NodeClaim; a tenant's marks its own
    taints: tuple[Taint, ...]

    def allows_offering(self, offering: Offering) -> bool:
        """Whether `offering` is one the NodeClaim was made for (provider, region, type, zone
        and capacity type; prices and shapes are the planner's, not a grant)."""
        return any(_offering_id(offering) == _offering_id(o) for o in self.offerings)

    def node_marks(
        self, labels_asked: Mapping[str, str], taints_asked: Sequence[Taint]
    ) -> tuple[dict[str, str], list[Taint]]:
        """`node_labels` and `node_taints` together, or the refusal an activity raises."""
        try:
            return self.node_labels(labels_asked), self.node_taints(taints_asked)
        except ClaimNotAuthorised as refusal:
            raise _refused(str(refusal)) from None

    def require_offering(self, offering: Offering) -> None:
        """Refuse (an activity's error) unless `allows_offering`."""
        if not self.allows_offering(offering):
            raise _refused(
                f"{offering.key} is not among NodeClaim {self.namespace}/{self.name}'s offerings"
            )

    def node_labels(self, asked: Mapping[str, str]) -> dict[str, str]:
        """The labels a node of this claim gets: the NodeClaim's, the ownership labels of this
        namespace, pool and claim, and those of `asked` that say what its VM is, when that is
        one of the claim's offerings. Raises `ClaimNotAuthorised` naming any other label
        `asked` wants, or another value of one of these."""
        vm = {k: v for k, v in asked.items() if k in VM_LABELS}
        launched = (vm.get(labels.PROVIDER), vm.get(labels.REGION), vm.get(labels.INSTANCE_TYPE))
        offered = [(o.provider, o.region, o.instance_type) for o in self.offerings]
        if vm and not any(
            all(said is None or said == is_ for said, is_ in zip(launched, o, strict=True))
            for o in offered
        ):
            raise ClaimNotAuthorised(
                f"the node's labels say it is {'/'.join(str(p) for p in launched)}, which is "
                f"not among NodeClaim {self.namespace}/{self.name}'s offerings"
            )
        allowed = {
            **self.labels,
            **labels.ownership_labels(
                self.name, namespace=self.namespace, node_pool=self.node_pool
            ),
            **vm,
        }
        beyond = sorted(f"{k}={v}" for k, v in asked.items() if allowed.get(k) != v)
        if beyond:
            raise ClaimNotAuthorised(
                f"labels {', '.join(beyond)} are not NodeClaim {self.namespace}/{self.name}'s"
            )
        return allowed

    def node_taints(self, asked: Sequence[Taint]) -> list[Taint]:
        """The NodeClaim's taints (a tenant's its own namespace's). Raises `ClaimNotAuthorised`
        naming any taint `asked` wants beyond them."""
        own = {_taint_id(t) for t in self.taints}
        beyond = sorted(
            f"{t.key}={t.value or ''}:{t.effect}" for t in asked if _taint_id(t) not in own
        )
        if beyond:
            raise ClaimNotAuthorised(
                f"taints {', '.join(beyond)} are not NodeClaim {self.namespace}/{self.name}'s"
            )
        return list(self.taints)


def create_nodeclaim(custom: k8s.CustomObjectsApi, claim: NodeClaim) -> tuple[str, bool]:
    """Create the claim's NodeClaim object (no status: that is the mirror's), with its pool's
    controller reference and the termination finalizer: its uid, and whether this call made
    it. One already there of the same pool is the claim's (a retried start). Raises
    `ClaimNotAuthorised` for one of another owner."""
    namespace, name = claim.metadata.namespace, claim.metadata.name
    owners = [
        owner.model_copy(update={"controller": True})
        for owner in claim.metadata.owner_references
        if owner.kind == "NodePool"
    ]
    if not owners:
        raise ClaimNotAuthorised(f"NodeClaim {namespace}/{name} names no NodePool to own it")
    body: dict[str, Any] = claim.model_dump(mode="json", exclude_none=True, exclude={"status"})
    body["metadata"] = {
        "name": name,
        "namespace": namespace,
        "labels": dict(claim.metadata.labels),
        "annotations": dict(claim.metadata.annotations),
        "finalizers": [labels.TERMINATION_FINALIZER],
        "ownerReferences": [owner.model_dump(exclude_none=True) for owner in owners],
    }
    try:
        created: dict[str, Any] = custom.create_namespaced_custom_object(  # type: ignore[assignment]
            _GROUP, _VERSION, namespace, "nodeclaims", body
        )
    except k8s.ApiException as err:
        if err.status != 409:
            raise
        created = custom.get_namespaced_custom_object(  # type: ignore[assignment]
            _GROUP, _VERSION, namespace, "nodeclaims", name
        )
        owner = _pool_owner(created, owners[0].name)
        if owner is None or owner.get("uid") != owners[0].uid:
            raise ClaimNotAuthorised(
                f"NodeClaim {namespace}/{name} already exists and is not NodePool "
                f"{owners[0].name}'s (uid {owners[0].uid})"
            ) from None
        return str(created["metadata"]["uid"]), False
    return str(created["metadata"]["uid"]), True


def delete_nodeclaim(custom: k8s.CustomObjectsApi, namespace: str, name: str) -> None:
    """Remove a NodeClaim object whose workflow never started (finalizer first)."""
    try:
        custom.patch_namespaced_custom_object(
            _GROUP, _VERSION, namespace, "nodeclaims", name, {"metadata": {"finalizers": []}}
        )
        custom.delete_namespaced_custom_object(_GROUP, _VERSION, namespace, "nodeclaims", name)
    except k8s.ApiException as err:
        if err.status != 404:
            raise


def own_claim(claim_name: str | None = None) -> tuple[str, str]:
    """(namespace, name) of the claim whose workflow the activity runs for; refused unless
    it runs for a claim's workflow, of `claim_name` when given. Every activity a claim calls
    acts on its own claim's objects only: its NodeClaim, its Node, its Secrets, its device."""
    running_for = activity.info().workflow_id
    key = claim_key_of(running_for or "")
    if key is None or (claim_name is not None and key[1] != claim_name):
        what = f"claim {claim_name}'s" if claim_name else "a claim's"
        raise _refused(f"the activity runs for workflow {running_for!r}, not {what} own")
    return key


class ClaimAuthority:
    """Reads what authorises a claim; one per worker, thread-safe (the Kubernetes client)."""

    def __init__(self, api_client: k8s.ApiClient, tenancy: Tenancy) -> None:
        self._custom = k8s.CustomObjectsApi(api_client)
        self._tenancy = tenancy

    def require_own_workflow(self, namespace: str, claim_name: str) -> None:
        """Refuse unless the activity runs for the claim's own workflow."""
        own = claim_workflow_id(namespace, claim_name)
        running_for = activity.info().workflow_id
        if running_for != own:
            raise _refused(
                f"the activity runs for workflow {running_for!r}, not claim {namespace}/"
                f"{claim_name}'s own ({own!r})"
            )

    def refused(self, why: str) -> Exception:
        """The error an activity raises for a claim the cluster does not stand behind."""
        return _refused(why)

    def warrant(self, namespace: str, claim_name: str, claim_uid: str | None) -> ClaimWarrant:
        """The claim's warrant, or an `ApplicationError` (`InvalidConfiguration`, not retried)
        saying what is missing. Kubernetes' own errors but 404 propagate (retried)."""
        self.require_own_workflow(namespace, claim_name)
        try:
            return self._warrant(namespace, claim_name, claim_uid)
        except ClaimNotAuthorised as refusal:
            raise _refused(str(refusal)) from None

    def _warrant(self, namespace: str, name: str, claim_uid: str | None) -> ClaimWarrant:
        if not self._tenancy.serves(namespace):
            raise ClaimNotAuthorised(f"namespace {namespace} is not served by this worker")
        custom = self._custom
        raw = self._get(
            lambda: custom.get_namespaced_custom_object(
                _GROUP, _VERSION, namespace, "nodeclaims", name
            )
        )
        if raw is None:
            raise ClaimNotAuthorised(
                f"there is no NodeClaim {namespace}/{name} in the cluster: nothing the worker "
                "or an operator started asked for this claim"
            )
        uid = str(raw.get("metadata", {}).get("uid", ""))
        if claim_uid is not None and uid != claim_uid:
            raise ClaimNotAuthorised(
                f"NodeClaim {namespace}/{name} in the cluster (uid {uid}) is not the one this "
                f"claim was started for (uid {claim_uid})"
            )
        try:
            claim = NodeClaim.model_validate(raw)
        except ValidationError as err:
            raise ClaimNotAuthorised(f"NodeClaim {namespace}/{name} is invalid: {err}") from None
        pool_name = claim.spec.node_pool
        owner = _pool_owner(raw, pool_name)
        if owner is None:
            raise ClaimNotAuthorised(
                f"NodeClaim {namespace}/{name} is not owned by its NodePool {pool_name}"
            )
        pool = self._get(
            lambda: custom.get_namespaced_custom_object(
                _GROUP, _VERSION, namespace, "nodepools", pool_name
            )
        )
        if pool is None or pool.get("metadata", {}).get("uid") != owner.get("uid"):
            raise ClaimNotAuthorised(
                f"NodePool {namespace}/{pool_name} (uid {owner.get('uid')}), which NodeClaim "
                f"{namespace}/{name} belongs to, is not in the cluster"
            )
        class_name = claim.spec.node_class
        raw_class = self._get(
            lambda: custom.get_namespaced_custom_object(
                _GROUP, _VERSION, namespace, "nodeclasses", class_name
            )
        )
        if raw_class is None:
            raise ClaimNotAuthorised(f"NodeClass {namespace}/{class_name} is not in the cluster")
        try:
            node_class = NodeClassSpec.model_validate(raw_class.get("spec") or {})
        except ValidationError as err:
            raise ClaimNotAuthorised(
                f"NodeClass {namespace}/{class_name} is invalid: {err}"
            ) from None
        node_labels, taints = self._marked(namespace, claim.spec.labels, claim.spec.taints)
        return ClaimWarrant(
            namespace=namespace,
            name=name,
            uid=uid,
            node_pool=pool_name,
            node_class_name=class_name,
            node_class=node_class,
            offerings=tuple(claim.spec.offerings),
            labels=node_labels,
            taints=taints,
        )

    def _marked(
        self, namespace: str, node_labels: Mapping[str, str], taints: Sequence[Taint]
    ) -> tuple[dict[str, str], tuple[Taint, ...]]:
        """A tenant's marks are its own namespace's, whatever the NodeClaim says; a namespace
        that is no tenant gets none."""
        unmarked = {k: v for k, v in node_labels.items() if k != labels.TENANT_LABEL}
        kept = tuple(t for t in taints if t.key != labels.TENANT_TAINT)
        if not self._tenancy.is_tenant(namespace):
            return unmarked, kept
        return {**unmarked, labels.TENANT_LABEL: namespace}, (*kept, tenant_taint(namespace))

    def _get(self, read: Callable[[], Any]) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = read()
        except k8s.ApiException as err:
            if err.status == 404:
                return None
            raise
        return found


def _pool_owner(obj: Mapping[str, Any], pool_name: str) -> dict[str, Any] | None:
    """The object's owner reference to NodePool `pool_name` (those the mirror wrote before
    the pool's activity made NodeClaims carry no `controller` flag: the kind and name are
    what count, and who could create the object)."""
    for owner in obj.get("metadata", {}).get("ownerReferences") or []:
        if isinstance(owner, dict) and (owner.get("kind"), owner.get("name")) == (
            "NodePool",
            pool_name,
        ):
            return owner
    return None


def _taint_id(taint: Taint) -> tuple[str, str, str]:
    return (taint.key, taint.value or "", taint.effect)


def _offering_id(offering: Offering) -> tuple[str, str, str, str | None, str]:
    return (
        offering.provider,
        offering.region,
        offering.instance_type,
        offering.zone,
        offering.capacity_type,
    )


def refused(why: str) -> Exception:
    """The error an activity raises for what the cluster does not authorise (logged)."""
    return _refused(why)


def _refused(why: str) -> Exception:
    log.warning("claim refused: %s", why)
    return application_error(f"{REFUSED}: {why}", type=INVALID_CONFIGURATION, non_retryable=True)
