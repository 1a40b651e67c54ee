"""Manual claims: read the pool and class from the cluster, check the offering, create the
NodeClaim object, start the workflow."""

from __future__ import annotations

import asyncio
import secrets
import string
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError

from activities.claim_authority import ClaimNotAuthorised, create_nodeclaim
from activities.credentials import read_secret_value
from activities.providers.base import ProviderError
from activities.providers.fake import FakeProvider
from api import NodeClaim, NodeClass, NodePool, Offering
from api import search_attributes as sa
from api.claims import claim_details, claim_summary, new_claim
from api.messages import ClaimTimings, NodeClaimInput, claim_task_queue, claim_workflow_id
from api.nodeclaim import NodeClaimPhase, NodeClaimStatus
from api.nodepool import PROVIDERS, NodePoolSpec
from cluster.tenancy import Tenancy
from planner.catalog import Catalog
from workflows.nodeclaim import NodeClaimWorkflow

GROUP, VERSION = "cloudburst.io", "v1alpha1"
_Model = TypeVar("_Model", NodePool, NodeClass)


class ClaimError(Exception):
    """Bad input for a claim: the message says what to fix."""


@dataclass
class PoolContext:
    pool: NodePool
    node_class_name: str
    node_class: NodeClass
    # The pool's spec as its nodes are built (`Tenancy.node_spec`: a tenant's pool's marks).
    node_spec: NodePoolSpec


def load_pool(
    api_client: k8s.ApiClient, namespace: str, pool_name: str, tenancy: Tenancy | None = None
) -> PoolContext:
    """The pool, its class and the spec its nodes are built from; `tenancy`: the operator's
    (which namespace holds shared pools), the default install's when None."""
    custom = k8s.CustomObjectsApi(api_client)
    try:
        raw_pool = custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, "nodepools", pool_name
        )
    except ApiException as err:
        if err.status == 404:
            raise ClaimError(f"NodePool {namespace}/{pool_name} not found") from None
        raise
    pool = _parse(NodePool, raw_pool, f"NodePool {namespace}/{pool_name}")
    tenancy = tenancy or Tenancy()
    refusal = tenancy.pool_refusal(namespace, pool.spec)
    if refusal is not None:
        raise ClaimError(f"NodePool {namespace}/{pool_name} is not served: {refusal.message}")
    class_name = pool.spec.node_class_ref
    if class_name is None:
        classes: dict[str, Any] = custom.list_namespaced_custom_object(  # type: ignore[assignment]
            GROUP, VERSION, namespace, "nodeclasses"
        )
        names = [item["metadata"]["name"] for item in classes.get("items", [])]
        if len(names) != 1:
            raise ClaimError(
                f"NodePool {namespace}/{pool_name} has no spec.nodeClassRef and namespace "
                f"{namespace} has {len(names)} NodeClasses ({', '.join(names) or 'none'}): "
                "set spec.nodeClassRef"
            )
        class_name = names[0]
    try:
        raw_class = custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, "nodeclasses", class_name
        )
    except ApiException as err:
        if err.status == 404:
            raise ClaimError(f"NodeClass {namespace}/{class_name} not found") from None
        raise
    node_class = _parse(NodeClass, raw_class, f"NodeClass {namespace}/{class_name}")
    return PoolContext(pool, class_name, node_class, tenancy.node_spec(namespace, pool.spec))


def parse_offering(text: str) -> Offering:
    parts = text.split("/")
    if len(parts) != 3 or not all(parts):
        raise ClaimError(
            f"offering {text!r} must be PROVIDER/REGION/INSTANCE-TYPE, e.g. fake/sim-1/fk-small"
        )
    provider, region, instance_type = parts
    if provider not in PROVIDERS:
        raise ClaimError(f"unknown provider {provider!r} in offering; use one of {list(PROVIDERS)}")
    return Offering(provider=provider, region=region, instance_type=instance_type)


def price_offering(
    api_client: k8s.ApiClient, context: PoolContext, offering: Offering
) -> tuple[Offering, str | None]:
    """The offering with its shape and price, from where the planner takes them for the
    pool's own claims: the fake cloud's list of instance types (through the NodeClass's
    endpoint, with its token), the catalog for the real clouds. The claim shows that price
    and its capacity, and the pool's maxPriceEurPerHour is checked against it.

    Returns a note instead of a price when none is found (the claim can still be made);
    raises ClaimError when the fake cloud says it has no such instance type or region.
    """
    if offering.provider == "fake":
        return _fake_price(api_client, context, offering)
    for known in Catalog.load().all_offerings():
        if known.key == offering.key:
            return known, None
    return offering, f"{offering.key} is not in the catalog: its price and shape are unknown"


def _fake_price(
    api_client: k8s.ApiClient, context: PoolContext, offering: Offering
) -> tuple[Offering, str | None]:
    block = context.node_class.spec.fake
    if block is None:  # check_offering says what to fix
        return offering, None
    namespace = context.node_class.metadata.namespace or "default"
    unknown = f"the price of {offering.key} is unknown"
    # The user's own access: the Secret read with their kubeconfig, sent to the endpoint the
    # NodeClass beside it names, as they could do with kubectl and curl.
    try:
        ref = block.credential_ref()
        token = read_secret_value(k8s.CoreV1Api(api_client), namespace, ref) if ref else None
        provider = FakeProvider(block, token)
    except ApplicationError as err:  # a missing Secret or key
        return offering, f"{unknown}: {err.message}"
    except ApiException as err:  # e.g. not allowed to read Secrets there
        return offering, f"{unknown}: reading its Secret: {err.status} {err.reason}"
    except ProviderError as err:
        return offering, f"{unknown}: {err}"
    try:
        types = provider.instance_types()
    except ProviderError as err:
        return offering, f"{unknown}: {err}"
    finally:
        provider.close()
    for t in types:
        if t.name != offering.instance_type:
            continue
        if offering.region not in t.regions:
            raise ClaimError(
                f"the fake cloud offers {t.name} in {', '.join(t.regions) or 'no region'}, "
                f"not {offering.region}"
            )
        priced = offering.model_copy(
            update={
                "vcpu": t.vcpu,
                "memory_gib": t.memory_gib,
                "arch": t.arch,
                "price_eur_per_hour": t.price_eur_per_hour,
            }
        )
        return priced, None
    names = ", ".join(sorted(t.name for t in types)) or "none"
    raise ClaimError(f"the fake cloud has no instance type {offering.instance_type!r} ({names})")


def check_offering(context: PoolContext, offering: Offering) -> None:
    """Refuse an offering the pool or class could never launch, before any workflow starts."""
    pool = context.pool
    allowed = pool.spec.requirements.allowed_providers
    if allowed and offering.provider not in allowed:
        raise ClaimError(
            f"NodePool {pool.metadata.name} allows providers {allowed}, not {offering.provider!r}"
        )
    if offering.provider not in context.node_class.spec.configured_providers():
        raise ClaimError(
            f"NodeClass {context.node_class_name} has no `{offering.provider}` block; "
            f"it configures {context.node_class.spec.configured_providers()}"
        )
    max_price = pool.spec.requirements.max_price_eur_per_hour
    if max_price is not None and (offering.price_eur_per_hour or 0) > max_price:
        raise ClaimError(
            f"offering costs {offering.price_eur_per_hour} EUR/h, above the pool's "
            f"maxPriceEurPerHour {max_price}"
        )


def new_claim_name(pool_name: str) -> str:
    alphabet = string.ascii_lowercase + string.digits
    return f"{pool_name}-{''.join(secrets.choice(alphabet) for _ in range(5))}"


def build_claim(context: PoolContext, offerings: list[Offering], name: str) -> NodeClaim:
    return new_claim(
        name=name,
        namespace=context.pool.metadata.namespace,
        pool_name=context.pool.metadata.name,
        pool=context.node_spec,
        node_class_name=context.node_class_name,
        offerings=offerings,
        pool_uid=context.pool.metadata.uid,
    )


async def start_claim(
    client: Client,
    api_client: k8s.ApiClient,
    context: PoolContext,
    claim: NodeClaim,
    *,
    task_queue: str,
    cluster_id: str,
    timings: ClaimTimings | None = None,
    task_timeout: timedelta | None = None,
) -> WorkflowHandle[NodeClaimWorkflow, NodeClaimStatus]:
    """Create the claim's NodeClaim object with `api_client`'s rights (what authorises the
    claim: activities/claim_authority.py; tenants may not create NodeClaims), then start its
    workflow (`start_workflow_for`). Raises `ClaimError` for an object of that name another
    pool owns or a pool without a uid; Kubernetes' refusal (403) as `ApiException`."""
    try:
        uid, _ = await asyncio.to_thread(create_nodeclaim, k8s.CustomObjectsApi(api_client), claim)
    except ClaimNotAuthorised as refusal:
        raise ClaimError(str(refusal)) from None
    owned = claim.model_copy(update={"metadata": claim.metadata.model_copy(update={"uid": uid})})
    return await start_workflow_for(
        client,
        context,
        owned,
        task_queue=task_queue,
        cluster_id=cluster_id,
        timings=timings,
        task_timeout=task_timeout,
    )


async def start_workflow_for(
    client: Client,
    context: PoolContext,
    claim: NodeClaim,
    *,
    task_queue: str,
    cluster_id: str,
    timings: ClaimTimings | None = None,
    task_timeout: timedelta | None = None,
) -> WorkflowHandle[NodeClaimWorkflow, NodeClaimStatus]:
    """The claim's workflow alone, as `start_claim` starts it once its NodeClaim exists.
    `task_timeout`: the claim's workflow task timeout (the operator's
    CLOUDBURST_CLAIM_TASK_TIMEOUT_S, as for a pool's claims); None: Temporal's default."""
    join = context.node_class.spec.join
    timings = timings or ClaimTimings(registration_timeout_s=join.registration_timeout_seconds)
    return await client.start_workflow(
        NodeClaimWorkflow.run,
        NodeClaimInput(
            claim=claim,
            node_class_name=context.node_class_name,
            node_class=context.node_class.spec,
            cluster_id=cluster_id,
            timings=timings,
        ),
        id=claim_workflow_id(claim.metadata.namespace, claim.metadata.name),
        # `task_queue` is the worker's; claims have their own beside it.
        task_queue=claim_task_queue(task_queue),
        # A claim name is used once: never start a second life under a finished claim's ID.
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(sa.NODE_POOL, claim.spec.node_pool),
                SearchAttributePair(sa.PHASE, NodeClaimPhase.PENDING.value),
            ]
        ),
        static_summary=claim_summary(claim),
        static_details=claim_details(claim),
        execution_timeout=None,
        task_timeout=task_timeout,
    )


def _parse(model: type[_Model], raw: object, what: str) -> _Model:
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        path = ".".join(str(p) for p in first["loc"])
        raise ClaimError(f"{what} is invalid at {path}: {first['msg']}") from None
