"""What `explain` and `plan` read from the cluster and from Temporal, read-only: NodePools and
NodeClasses judged as the trigger judges them, the settings the deployed trigger runs with,
Events, and the pools' and claims' queries (an unreachable or older worker is an answer too).

The Temporal client is imported by the queries (pools are asked by query name, `PoolQuery`):
`plan` reads only the cluster, and loads neither.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException
from pydantic import TypeAdapter, ValidationError
from urllib3.exceptions import HTTPError

from activities.kube_reads import ConfigMapReader, NamespaceReader
from api import NodeClass, NodePool
from api.explain import PoolPodView
from api.labels import GROUP
from api.messages import claim_workflow_id
from api.nodeclaim import NodeClaimStatus
from api.nodepool.messages import PoolQuery, PoolStatus, pool_workflow_id
from cli.connect import answered, is_unreachable
from cluster.matching import ClusterSpecs
from cluster.tenancy import Tenancy
from worker.settings import (
    CONFIG_MAP,
    Settings,
    checked_allowed_endpoints,
    checked_inventory_owners,
)

if TYPE_CHECKING:
    from temporalio.client import Client
    from temporalio.service import RPCError

VERSION = "v1alpha1"
_QUERY_TIMEOUT_S = 10.0


def deployed_tenancy(core: ConfigMapReader, local: Settings) -> tuple[Tenancy, str]:
    """The tenancy the deployed trigger enforces (its ConfigMap in the worker's namespace,
    read as the worker reads its environment), else this shell's settings; and which it is."""
    where = f"{local.worker_namespace}/{CONFIG_MAP}"
    try:
        found = core.read_namespaced_config_map(CONFIG_MAP, local.worker_namespace)
    except ApiException as err:
        if err.status in (403, 404):
            return local.tenancy(), f"this shell's settings ({where}: {err.status})"
        raise
    data: dict[str, str] = found.data or {}
    # The ConfigMap's word alone: a key it leaves out is unset, never filled from this shell's
    # environment (which `Settings()` reads, merging a dict such as the endpoints into it).
    raw_endpoints = data.get("CLOUDBURST_ALLOWED_ENDPOINTS")
    raw_owners = data.get("CLOUDBURST_INVENTORY_OWNERS")
    try:
        endpoints = checked_allowed_endpoints(
            _ENDPOINTS.validate_python(json.loads(raw_endpoints)) if raw_endpoints else {}
        )
        owners = checked_inventory_owners(
            _ENDPOINTS.validate_python(json.loads(raw_owners)) if raw_owners else {}
        )
        deployed = Settings(
            tenant_namespaces=data.get("CLOUDBURST_TENANT_NAMESPACES"),
            worker_namespace=local.worker_namespace,
        )
    except (ValueError, ValidationError) as err:
        return local.tenancy(), f"this shell's settings ({where} unreadable: {err})"
    tenancy = replace(
        deployed.tenancy(),
        allowed_endpoints={service: tuple(urls) for service, urls in endpoints.items()},
        inventory_owners={namespace: tuple(ms) for namespace, ms in owners.items()},
    )
    return tenancy, f"the deployed settings ({where})"


_ENDPOINTS: TypeAdapter[dict[str, list[str]]] = TypeAdapter(dict[str, list[str]])


def cluster_specs(api_client: k8s.ApiClient, tenancy: Tenancy) -> ClusterSpecs:
    """Every NodePool and NodeClass of the cluster, judged as the trigger judges them."""
    custom = k8s.CustomObjectsApi(api_client)
    specs = ClusterSpecs()
    for plural, model in (("nodeclasses", NodeClass), ("nodepools", NodePool)):
        listing = custom.list_cluster_custom_object(GROUP, VERSION, plural)
        for raw in (listing.get("items") if isinstance(listing, dict) else None) or []:
            if isinstance(raw, dict) and (raw.get("metadata") or {}).get("name"):
                specs.put(raw, model, tenancy)
    return specs


def selected_objects(
    api_client: k8s.ApiClient, plural: str, selector: str, namespace: str | None
) -> set[tuple[str, str]]:
    """(namespace, name) of our objects of `plural` whose labels match `selector` (kubectl's
    -l), in one namespace or all: the API server judges the selector."""
    custom = k8s.CustomObjectsApi(api_client)
    if namespace:
        listing = custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, label_selector=selector
        )
    else:
        listing = custom.list_cluster_custom_object(GROUP, VERSION, plural, label_selector=selector)
    found: set[tuple[str, str]] = set()
    for raw in (listing.get("items") if isinstance(listing, dict) else None) or []:
        metadata = raw.get("metadata") if isinstance(raw, dict) else None
        if isinstance(metadata, dict) and metadata.get("name"):
            found.add((str(metadata.get("namespace") or ""), str(metadata["name"])))
    return found


def listed(
    settings: Settings, plural: str, namespace: str | None, selector: str | None
) -> Callable[[str, str], bool]:
    """Which objects (namespace, name) a list command shows: those of -n's namespace (every
    one without), and of -l's selector, judged by the API server on the objects themselves."""
    from cli.connect import fail
    from worker.kube_client import kube_api_client

    selected: set[tuple[str, str]] | None = None
    if selector:
        try:
            selected = selected_objects(kube_api_client(settings), plural, selector, namespace)
        except ApiException as err:
            raise fail(f"-l {selector!r}: the API server says {err.status} {err.reason}") from None
        except (ConfigException, HTTPError, OSError) as err:
            raise fail(
                f"-l reads the {plural} of the cluster, which cannot be reached: {err}"
            ) from None

    def keep(object_namespace: str, name: str) -> bool:
        if namespace is not None and object_namespace != namespace:
            return False
        return selected is None or (object_namespace, name) in selected

    return keep


def namespace_labels(core: NamespaceReader, namespace: str) -> dict[str, str] | None:
    try:
        found = core.read_namespace(namespace)
    except ApiException as err:
        if err.status in (403, 404):
            return None
        raise
    return dict((found.metadata.labels if found.metadata else None) or {})


def namespace_annotations(core: NamespaceReader, namespace: str) -> dict[str, str]:
    """The Namespace's annotations ({} when it is not there or not readable)."""
    try:
        found = core.read_namespace(namespace)
    except ApiException as err:
        if err.status in (403, 404):
            return {}
        raise
    return dict((found.metadata.annotations if found.metadata else None) or {})


def events_of(
    core: k8s.CoreV1Api, kind: str, name: str, namespace: str, uid: str | None
) -> list[Any]:
    """The Events about one object, as `kubectl describe` finds them."""
    listing = core.list_namespaced_event(
        namespace or "default",
        field_selector=f"involvedObject.kind={kind},involvedObject.name={name}",
    )
    return [
        e
        for e in listing.items
        if uid is None or not e.involved_object.uid or e.involved_object.uid == uid
    ]


async def pool_pod_view(
    client: Client, namespace: str, pool: str, uid: str
) -> tuple[PoolPodView | None, str | None]:
    """The pool's view of the pod, or why there is none. A worker of an older release has no
    `pod` query: its `status` query says the same, for the one pod."""
    from temporalio.client import WorkflowQueryFailedError
    from temporalio.service import RPCError

    handle = client.get_workflow_handle(pool_workflow_id(namespace, pool))
    try:
        return await answered(
            lambda: handle.query(PoolQuery.POD, uid, result_type=PoolPodView), _QUERY_TIMEOUT_S
        ), None
    except WorkflowQueryFailedError as err:
        if "pod" not in str(err) or "unknown" not in str(err).lower():
            return None, str(err)
    except TimeoutError:
        return None, f"no answer within {_QUERY_TIMEOUT_S:.0f}s (is a worker running?)"
    except RPCError as err:
        return None, _rpc_why(err, "the pool's workflow has not started (no pod has asked it yet)")
    status, why = await pool_status(client, namespace, pool)
    if status is None:
        return None, why
    claim = next((c for c in status.claims if uid in c.nominated), None)
    return (
        PoolPodView(
            known=claim is not None or uid in status.blocked,
            nominated_to=claim.name if claim else None,
            claim_phase=claim.phase if claim else None,
            claim_started_at=claim.started_at if claim else None,
            offering=claim.offering if claim else None,
            blocked=status.blocked.get(uid),
            config_error=status.config_error,
        ),
        None,
    )


async def pool_status(
    client: Client, namespace: str, pool: str
) -> tuple[PoolStatus | None, str | None]:
    from temporalio.client import WorkflowQueryFailedError
    from temporalio.service import RPCError

    handle = client.get_workflow_handle(pool_workflow_id(namespace, pool))
    try:
        return await answered(
            lambda: handle.query(PoolQuery.STATUS, result_type=PoolStatus), _QUERY_TIMEOUT_S
        ), None
    except WorkflowQueryFailedError as err:
        return None, str(err)
    except TimeoutError:
        return None, f"no answer within {_QUERY_TIMEOUT_S:.0f}s (is a worker running?)"
    except RPCError as err:
        return None, _rpc_why(err, "the pool's workflow has not started")


async def claim_status(
    client: Client, namespace: str, name: str
) -> tuple[NodeClaimStatus | None, str | None]:
    from temporalio.client import WorkflowQueryFailedError
    from temporalio.service import RPCError

    from workflows.nodeclaim import NodeClaimWorkflow

    handle = client.get_workflow_handle_for(
        NodeClaimWorkflow.run, claim_workflow_id(namespace, name)
    )
    try:
        return await answered(
            lambda: handle.query(NodeClaimWorkflow.status), _QUERY_TIMEOUT_S
        ), None
    except WorkflowQueryFailedError as err:
        return None, str(err)
    except TimeoutError:
        return None, f"no answer within {_QUERY_TIMEOUT_S:.0f}s (is a worker running?)"
    except RPCError as err:
        return None, _rpc_why(err, "no workflow for this claim")


def _rpc_why(err: RPCError, not_found: str) -> str:
    from temporalio.service import RPCStatusCode

    if is_unreachable(err):
        raise err
    if err.status == RPCStatusCode.NOT_FOUND:
        return not_found
    return err.message
