"""Create, look up and delete VMs through a provider — the only activities that spend money.

Each is idempotent: the claim name is the VM name and idempotency key, so a retry after a
worker crash finds the VM the first attempt made instead of making a second one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from kubernetes import client as k8s
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.bootstrap import ScriptHandoff, read_user_data
from activities.claim_authority import ClaimAuthority
from activities.claim_provider import claim_provider
from activities.heartbeat import heartbeating, heartbeats_itself
from activities.providers.base import (
    CapacityError,
    FatalError,
    Instance,
    InstanceSpec,
    NoIdentityError,
    Provider,
    ProviderError,
    RetryableError,
)
from api import labels
from api.errors import (
    CAPACITY_ERROR,
    INVALID_CONFIGURATION,
    PROVIDER_ERROR,
    PROVIDER_FATAL,
    PROVIDER_RETRYABLE,
)
from api.messages import CreateInstanceInput, InstanceInfo, InstanceRef
from api.nodeclass import NodeClassSpec
from cluster.tenancy import Tenancy
from observability import metrics

log = logging.getLogger(__name__)

_DELETE_POLL_S = 0.5
_DELETE_REREQUEST_S = 30.0


class ComputeActivities:
    def __init__(
        self,
        api_client: k8s.ApiClient,
        tenancy: Tenancy | None = None,
        handoff: ScriptHandoff | None = None,
    ) -> None:
        self._core = k8s.CoreV1Api(api_client)
        self._tenancy = tenancy or Tenancy()
        self._handoff = handoff
        self._authority = ClaimAuthority(api_client, self._tenancy)

    def activities(self) -> list[Callable[..., Any]]:
        return [self.create_instance, self.get_instance, self.delete_instance]

    @activity.defn(name="create_instance")
    @heartbeats_itself
    def create_instance(self, input: CreateInstanceInput) -> InstanceInfo:
        """Launch the claim's VM, as the cluster authorises it: the NodeClaim's pool and
        offerings, the NodeClass (its credential and endpoint) read from the cluster."""
        offering = input.offering
        warrant = self._authority.warrant(input.namespace, input.claim_name, input.claim_uid)
        warrant.require_offering(offering)
        node_class = warrant.node_class
        with _classified():
            provider = self._provider(offering.provider, input.namespace, node_class)
        block = node_class.provider_block(offering.provider)
        spec = InstanceSpec(
            name=input.claim_name,
            cluster_id=input.cluster_id,
            node_pool=warrant.node_pool,
            region=offering.region,
            zone=offering.zone,
            instance_type=offering.instance_type,
            image=block.image,
            user_data=read_user_data(self._core, input.bootstrap, self._handoff),
            labels=labels.ownership_labels(
                input.claim_name, node_pool=warrant.node_pool, cluster_id=input.cluster_id
            ),
            capacity_type=offering.capacity_type,
            namespace=warrant.namespace,
            claim_uid=warrant.uid,
        )
        with metrics.offering_attempt(input.namespace, warrant.node_pool, offering):
            if offering.spot and not provider.supports_spot:
                # As good as out of spot capacity: the claim goes on to its next offering.
                with _classified():
                    raise CapacityError(
                        offering.provider, f"{offering.key}: {offering.provider} sells no spot VMs"
                    )
            with (
                heartbeating(details=lambda: f"creating {offering.key}"),
                _classified(),
                metrics.cloud_call(offering.provider, "create"),
            ):
                instance = provider.create(spec)
        log.info("instance %s ready for claim %s", instance.id, input.claim_name)
        # Counted once the activity has its VM: a retry that finds it again after a crash
        # between create and completion is the only double count, and it is rare.
        metrics.record_claim_created(input.namespace, warrant.node_pool, offering.provider)
        return _info(instance)

    @activity.defn(name="get_instance")
    def get_instance(self, ref: InstanceRef) -> InstanceInfo | None:
        self._authority.require_own_workflow(ref.namespace, ref.claim_name)
        with _classified():
            provider = self._provider(ref.provider, ref.namespace, ref.node_class)
            instance = self._find(provider, ref)
        return _info(instance) if instance else None

    @activity.defn(name="delete_instance")
    @heartbeats_itself
    def delete_instance(self, ref: InstanceRef) -> None:
        """Delete the claim's VM and return only once the provider says it is gone.

        Every failure is retryable here, a fatal one included (see `_classified`): giving up
        would leave a VM that costs money to the orphan GC, while an operator can fix the
        credential or the NodeClass during the retries.
        """
        self._authority.require_own_workflow(ref.namespace, ref.claim_name)
        with (
            heartbeating(details=lambda: f"deleting VM of {ref.claim_name}"),
            _classified(retry_everything=True),
        ):
            provider = self._provider(ref.provider, ref.namespace, ref.node_class)
            instance = found = self._find(provider, ref)
            last_request = 0.0
            first_request: float | None = None
            while instance is not None:
                # Deletion is asynchronous at every cloud; re-ask now and then in case the
                # first request was lost, and return only when the VM is really gone.
                if time.monotonic() - last_request > _DELETE_REREQUEST_S:
                    with metrics.cloud_call(ref.provider, "delete"):
                        provider.delete(instance.id)
                    last_request = time.monotonic()
                    if first_request is None:
                        first_request = last_request
                time.sleep(_DELETE_POLL_S)
                with metrics.cloud_call(ref.provider, "get"):
                    instance = provider.get(instance.id)
        if found is not None:
            waited = None if first_request is None else time.monotonic() - first_request
            _record_terminated(ref, found, waited)

    def _provider(self, name: str, namespace: str, node_class: NodeClassSpec) -> Provider:
        return claim_provider(self._core, self._tenancy, name, namespace, node_class)

    @staticmethod
    def _find(provider: Provider, ref: InstanceRef) -> Instance | None:
        if ref.instance_id:
            with metrics.cloud_call(ref.provider, "get"):
                return provider.get(ref.instance_id)
        # The id is unknown when a create was interrupted: find the VM by the claim's labels.
        with metrics.cloud_call(ref.provider, "list"):
            owned = provider.list_owned(ref.cluster_id)
        return next((i for i in owned if is_claims_instance(i.labels, ref)), None)


def is_claims_instance(vm_labels: Mapping[str, str], ref: InstanceRef) -> bool:
    """Whether a VM labelled `vm_labels` is the claim's: its name, and the namespace and uid
    where the VM records them (shared hardware: Redfish, Proxmox), so that a same-named claim
    of another namespace, or an earlier one of this name, is never taken for this claim."""
    if vm_labels.get(labels.NODECLAIM) != ref.claim_name:
        return False
    if vm_labels.get(labels.NODEPOOL_NAMESPACE, ref.namespace) != ref.namespace:
        return False
    recorded_uid = vm_labels.get(labels.NODECLAIM_UID)
    return recorded_uid is None or ref.claim_uid is None or recorded_uid == ref.claim_uid


def _record_terminated(ref: InstanceRef, instance: Instance, waited_s: float | None) -> None:
    # The pool is on the VM's own labels (of the claim's namespace); the workflow passes why
    # the VM goes. `waited_s`: from this attempt's first delete request to the VM gone.
    nodepool = instance.labels.get(labels.NODEPOOL, "unknown")
    reason = ref.reason or "Deleted"
    metrics.record_claim_terminated(ref.namespace, nodepool, ref.provider, reason)
    if reason in metrics.DISRUPTION_REASONS:
        metrics.record_claim_disrupted(ref.namespace, nodepool, reason)
    if waited_s is not None:
        metrics.observe_instance_termination_duration(
            ref.namespace, nodepool, ref.provider, waited_s
        )


def _info(instance: Instance) -> InstanceInfo:
    return InstanceInfo(
        instance_id=instance.id,
        name=instance.name,
        provider=instance.provider,
        region=instance.region,
        instance_type=instance.instance_type,
        state=instance.state.value,
        created_at=instance.created_at,
        capacity_type=instance.capacity_type,
    )


@contextmanager
def _classified(*, retry_everything: bool = False) -> Iterator[None]:
    """Turns provider errors into Temporal errors the workflow and retry policy understand.

    Capacity and fatal errors are non-retryable: a create moves to the next offering or
    fails the claim. With `retry_everything` (deletion) they, and the non-retryable
    `InvalidConfiguration` of a missing provider block or credential Secret, are retryable:
    a delete that gives up leaves a billed VM behind its claim, while a retry succeeds once
    the operator fixes the Secret or the NodeClass — each attempt's error, with the type
    naming the class of problem and the message what to fix, is the pending activity's last
    failure in the Web UI.
    """
    non_retryable = not retry_everything
    suffix = " (deletion retries until this is fixed)" if retry_everything else ""
    try:
        yield
    except ApplicationError as exc:
        if not (exc.non_retryable and retry_everything):
            raise
        raise ApplicationError(
            f"{exc.message}{suffix}", *exc.details, type=exc.type, non_retryable=False
        ) from exc
    except CapacityError as exc:
        raise ApplicationError(
            exc.message, exc.provider, type=CAPACITY_ERROR, non_retryable=non_retryable
        ) from exc
    except NoIdentityError as exc:
        # Neither a credential Secret nor an ambient identity: the NodeClass or the worker's
        # deployment needs fixing, on every offering of this provider alike.
        raise ApplicationError(
            f"{exc.message}{suffix}",
            exc.provider,
            type=INVALID_CONFIGURATION,
            non_retryable=non_retryable,
        ) from exc
    except FatalError as exc:
        raise ApplicationError(
            f"{exc.message}{suffix}",
            exc.provider,
            type=PROVIDER_FATAL,
            non_retryable=non_retryable,
        ) from exc
    except RetryableError as exc:
        delay = timedelta(seconds=exc.retry_after_s) if exc.retry_after_s else None
        raise ApplicationError(
            exc.message, exc.provider, type=PROVIDER_RETRYABLE, next_retry_delay=delay
        ) from exc
    except ProviderError as exc:
        raise ApplicationError(exc.message, exc.provider, type=PROVIDER_ERROR) from exc
