"""Claims the cluster stands behind, for activity tests: the NodeClass, the NodePool and the
NodeClaim object (owned by the pool, as `start_claim_workflows` creates it) in a namespace of
the test's, and an `ActivityEnvironment` whose activity runs for that claim's own workflow
(activities/claim_authority.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from temporalio.testing import ActivityEnvironment

from activities.claim_authority import create_nodeclaim
from api import labels
from api.claims import new_claim
from api.messages import BootstrapInput, claim_workflow_id
from api.nodeclaim import Offering
from api.nodepool import NodePoolSpec, Taint

GROUP, VERSION = "cloudburst.io", "v1alpha1"
OFFERING = Offering(provider="fake", region="sim-1", instance_type="fk-small")
FAKE_CLASS = {"fake": {}, "join": {"hostApiServer": "https://127.0.0.1:6443"}}


@dataclass(frozen=True)
class AuthorisedClaim:
    namespace: str
    name: str
    pool: str
    uid: str  # the NodeClaim object's
    pool_uid: str

    def env(self, **kw: Any) -> ActivityEnvironment:
        """An environment whose activities run for this claim's own workflow."""
        return claims_env(self.namespace, self.name, **kw)


def claims_env(namespace: str, name: str, **kw: Any) -> ActivityEnvironment:
    """An environment whose activities run for claim `namespace/name`'s own workflow."""
    env = ActivityEnvironment(**kw)
    env.info = dataclasses.replace(env.info, workflow_id=claim_workflow_id(namespace, name))
    return env


def authorise_claim(
    api: client.ApiClient,
    namespace: str,
    name: str,
    *,
    pool: str = "burst",
    labels: dict[str, str] | None = None,
    taints: list[Taint] | None = None,
    offerings: list[Offering] | None = None,
    node_class: dict[str, Any] | None = None,
) -> AuthorisedClaim:
    """The NodeClass `default`, the NodePool `pool` (with `labels` and `taints` in its
    template) and NodeClaim `name` of it, in `namespace`, as the worker makes them."""
    custom = client.CustomObjectsApi(api)
    _ensure(
        custom,
        namespace,
        "nodeclasses",
        {"kind": "NodeClass", "metadata": {"name": "default"}, "spec": node_class or FAKE_CLASS},
    )
    template: dict[str, Any] = {"labels": labels or {}}
    if taints:
        template["taints"] = [t.model_dump(mode="json", exclude_none=True) for t in taints]
    pool_object = _ensure(
        custom,
        namespace,
        "nodepools",
        {
            "kind": "NodePool",
            "metadata": {"name": pool},
            "spec": {"nodeClassRef": "default", "template": template},
        },
    )
    pool_uid = pool_object["metadata"]["uid"]
    spec = NodePoolSpec.model_validate(pool_object["spec"])
    claim = new_claim(
        name=name,
        namespace=namespace,
        pool_name=pool,
        pool=spec,
        node_class_name="default",
        offerings=offerings or [OFFERING],
        pool_uid=pool_uid,
    )
    uid, _ = create_nodeclaim(custom, claim)
    return AuthorisedClaim(namespace, name, pool, uid, pool_uid)


def _ensure(
    custom: client.CustomObjectsApi, namespace: str, plural: str, body: dict[str, Any]
) -> dict[str, Any]:
    body = {"apiVersion": f"{GROUP}/{VERSION}", **body}
    name = body["metadata"]["name"]
    try:
        made: dict[str, Any] = custom.create_namespaced_custom_object(  # type: ignore[assignment]
            GROUP, VERSION, namespace, plural, body
        )
        return made
    except client.ApiException as err:
        if err.status != 409:
            raise
    found: dict[str, Any] = custom.get_namespaced_custom_object(  # type: ignore[assignment]
        GROUP, VERSION, namespace, plural, name
    )
    return found


def authorise_bootstrap(
    api: client.ApiClient, asked: BootstrapInput
) -> tuple[AuthorisedClaim, BootstrapInput]:
    """The objects behind a claim whose bootstrap is `asked` (its NodeClass spec, its labels
    but the ownership ones, its taints and offering: the pool's), and `asked` naming that
    NodeClaim's uid."""
    ours = {labels.NODEPOOL, labels.NODECLAIM, labels.NODEPOOL_NAMESPACE}
    claim = authorise_claim(
        api,
        asked.namespace,
        asked.claim_name,
        pool=asked.node_pool,
        labels={k: v for k, v in asked.labels.items() if k not in ours},
        taints=list(asked.taints),
        offerings=[asked.offering] if asked.offering else None,
        node_class=asked.node_class.model_dump(mode="json", by_alias=True, exclude_none=True),
    )
    return claim, asked.model_copy(update={"claim_uid": claim.uid})


def run_bootstrap(api: client.ApiClient, fn: Any, asked: BootstrapInput) -> Any:
    """`fn` (prepare_bootstrap) for a claim the cluster stands behind, as its workflow runs it."""
    claim, authorised = authorise_bootstrap(api, asked)
    return claim.env().run(fn, authorised)
