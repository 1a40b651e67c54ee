"""A claim's provider, built from what the cluster says: the NodeClass block, its credential
read in the claim's own namespace, the endpoints the operator allows. Used by the activities
that reach a claim's VM: create, look up and delete (`activities/compute.py`), and the release
of the first-boot material a provider keeps outside the VM once its node has joined
(`release_first_boot`, from the claim's `label_node`).
"""

from __future__ import annotations

import logging

from kubernetes import client as k8s
from temporalio.exceptions import ApplicationError

from activities.claim_authority import ClaimWarrant
from activities.credentials import read_provider_credential
from activities.machine_ledger import tenant_provider
from activities.providers import provider_class
from activities.providers.base import Provider, ProviderError, split_instance_id
from api import events, labels
from api.errors import INVALID_CONFIGURATION
from api.events import KubeEvent, ObjectRef
from api.nodeclass import NodeClassSpec
from api.nodepool import API_VERSION
from cluster.tenancy import Tenancy
from observability import metrics
from observability.events import record_event

log = logging.getLogger(__name__)


def claim_provider(
    core: k8s.CoreV1Api, tenancy: Tenancy, name: str, namespace: str, node_class: NodeClassSpec
) -> Provider:
    """The provider `name` of the claim's NodeClass, its credential read from the claim's own
    namespace; refused before any read or call when the namespace is not served or the
    block's endpoint is not one the operator allows."""
    tenancy.require(namespace, node_class, services=(name,))
    try:
        block = node_class.provider_block(name)
        cls = provider_class(name)
    except KeyError:
        raise ApplicationError(
            f"NodeClass has no `{name}` block or no module supports it",
            type=INVALID_CONFIGURATION,
            non_retryable=True,
        ) from None
    credential = read_provider_credential(core, namespace, block)
    return tenant_provider(cls, block, credential, namespace, tenancy, core, core)


def release_first_boot(
    core: k8s.CoreV1Api, tenancy: Tenancy, warrant: ClaimWarrant, instance_id: str | None
) -> None:
    """Have the claim's provider remove the first-boot material it keeps outside the VM
    (Proxmox's seed ISO, which holds the join script), now that the VM's node has joined.

    Acts on the claim's own VM only: the provider is one of the NodeClaim's offerings, its
    block and credential the cluster's NodeClass's, and the VM must carry the claim's
    ownership (name, namespace and NodeClaim uid). Best effort: a provider that does not
    answer, or refuses, leaves the material until the VM is deleted (which removes it too),
    said in a Warning Event `FirstBootMaterialKept` on the NodeClaim; a Ready node is not held
    back for it.
    """
    if not instance_id:
        return
    try:
        name = split_instance_id(instance_id)[0]
        if not provider_class(name).keeps_first_boot:
            return
    except (KeyError, ValueError):
        return  # no provider module: nothing of ours keeps material for it
    where = (
        f"the first-boot material of VM {instance_id} (claim {warrant.namespace}/{warrant.name})"
    )
    if not any(o.provider == name for o in warrant.offerings):
        log.warning("%s is left: %s is not among the NodeClaim's offerings", where, name)
        return
    try:
        provider = claim_provider(core, tenancy, name, warrant.namespace, warrant.node_class)
        with metrics.cloud_call(name, "get"):
            instance = provider.get(instance_id)
        if instance is None or not _is_claims(instance.labels, warrant):
            log.warning("%s is left: the VM is gone or not the claim's", where)
            return
        with metrics.cloud_call(name, "release"):
            provider.release_first_boot(instance.id)
    except (ProviderError, ApplicationError) as exc:
        why = exc.message if isinstance(exc, ApplicationError) else str(exc)
        _kept(core, warrant, f"{where} stays until the VM is deleted: {why}")


def _kept(core: k8s.CoreV1Api, warrant: ClaimWarrant, message: str) -> None:
    """Say so in the worker's log and as a Warning Event on the NodeClaim, where its owner
    looks (a token without a privilege is fixed there)."""
    log.warning("%s", message)
    regarding = ObjectRef(
        kind="NodeClaim",
        name=warrant.name,
        namespace=warrant.namespace,
        api_version=API_VERSION,
        uid=warrant.uid,
    )
    event = KubeEvent(
        regarding=regarding, reason=events.FIRST_BOOT_KEPT, message=message, type="Warning"
    )
    try:
        record_event(core, event)
    except k8s.ApiException as err:
        log.warning("could not record the Event on NodeClaim %s: %s", warrant.name, err.status)


def _is_claims(vm_labels: dict[str, str], warrant: ClaimWarrant) -> bool:
    """Whether a VM's ownership labels are the claim's (a label the VM does not carry, from
    before VMs carried it, does not count against it; its name always does)."""
    return (
        vm_labels.get(labels.NODECLAIM) == warrant.name
        and vm_labels.get(labels.NODECLAIM_UID, warrant.uid) == warrant.uid
        and vm_labels.get(labels.NODEPOOL_NAMESPACE, warrant.namespace) == warrant.namespace
    )
