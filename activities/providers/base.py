"""The provider interface and the typed errors every cloud module maps its SDK errors to.

The workflow never sees a cloud SDK: it sees these error classes (as Temporal error types)
and decides from them — retry, try the next offering, or fail with a message to fix.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import ClassVar, Protocol

from pydantic import BaseModel

from api import labels as L
from api.nodeclass import ProviderBlock
from cluster.machine_hygiene import MachineRecord


class InstanceState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    TERMINATED = "terminated"


class InstanceSpec(BaseModel):
    """What to create. `name` is the claim name: the VM name and the idempotency key."""

    name: str
    cluster_id: str
    node_pool: str
    region: str
    zone: str | None = None
    instance_type: str
    image: str | None = None
    user_data: str
    labels: dict[str, str] = {}
    # "spot": a VM the provider may reclaim (AWS spot, GCP Spot VM, Azure Spot priority).
    capacity_type: str = "on-demand"
    # The NodeClaim's namespace and uid (from the cluster, `ClaimWarrant`): what the providers
    # of shared hardware (Redfish, Proxmox) record a holding under, see `holder_labels`.
    namespace: str | None = None
    claim_uid: str | None = None

    def vm_labels(self) -> dict[str, str]:
        """What the VM is labelled with: `labels`, then the claim's ownership labels, which
        win (orphan GC and the look-up of an interrupted create select on them)."""
        owned = L.ownership_labels(self.name, node_pool=self.node_pool, cluster_id=self.cluster_id)
        return {**self.labels, **owned}

    def holder_labels(self) -> dict[str, str]:
        """`vm_labels` and the claim's namespace and uid: whose a machine or VM of shared
        hardware is, so that a reused name or VM id is never taken for this claim's."""
        held = self.vm_labels()
        if self.namespace:
            held[L.NODEPOOL_NAMESPACE] = self.namespace
        if self.claim_uid:
            held[L.NODECLAIM_UID] = self.claim_uid
        return held


class Instance(BaseModel):
    id: str  # "provider/region/native-id"
    name: str
    provider: str
    region: str
    instance_type: str
    state: InstanceState
    labels: dict[str, str] = {}
    created_at: datetime | None = None
    private_ip: str | None = None
    public_ip: str | None = None
    capacity_type: str = "on-demand"  # as the provider reports it


class InstanceType(BaseModel):
    provider: str
    name: str
    vcpu: float
    memory_gib: float
    arch: str
    regions: list[str]
    price_eur_per_hour: float | None = None
    # How many more can be made now (free machines, room left on the hosts); None: as many as
    # the provider sells (a public cloud). An on-premises provider's inventory is finite.
    available: int | None = None


def instance_id(provider: str, region: str, native_id: str) -> str:
    return f"{provider}/{region}/{native_id}"


def split_instance_id(value: str) -> tuple[str, str, str]:
    provider, region, native = value.split("/", 2)
    return provider, region, native


class MachineLedger(Protocol):
    """Who holds or last held each shared machine (`activities/machine_ledger.py`)."""

    def read(self, key: str) -> MachineRecord | None: ...

    def read_all(self) -> dict[str, MachineRecord]: ...

    def change(
        self, key: str, step: Callable[[MachineRecord | None], MachineRecord | None]
    ) -> MachineRecord | None: ...


@dataclass(frozen=True)
class SharedMachines:
    """What the operator's configuration says of machines that pass between tenants: the
    worker's ledger of them, and the wipe image a returned machine boots once (None: none;
    a returned machine goes back to its own namespace alone)."""

    ledger: MachineLedger
    wipe_image_url: str | None = None


class Provider(abc.ABC):
    """One cloud. Implementations are synchronous (every SDK is) and run in activity threads."""

    name: ClassVar[str]
    # Whether create() can make spot VMs; the others refuse a spot offering.
    supports_spot: ClassVar[bool] = False
    # Whether a VM's first-boot material (the join script) is kept outside the VM, where it
    # outlives the boot that read it until `release_first_boot` removes it (Proxmox: the seed
    # ISO on a storage). Elsewhere user data is the VM's own, gone with it.
    keeps_first_boot: ClassVar[bool] = False
    # Whether its machines serve claim after claim of different tenants (bare metal): built
    # with `SharedMachines`, which it consults before it hands a machine to a claim.
    shares_machines: ClassVar[bool] = False

    def __init__(
        self,
        block: ProviderBlock,
        credential: str | None,
        namespace: str | None = None,
        *,
        shared: SharedMachines | None = None,
    ) -> None:
        """`credential` is read from `namespace`, the NodeClass's (a claim's, a scope's):
        the tenant this provider acts for, which a provider that serves many tenants is told
        (the plug-in contract's namespace header). None: no tenant (`cloudburst dev`'s look
        at a catalog). `shared`: given to a provider that `shares_machines` (None: it
        keeps no ledger, as when a test builds one alone)."""
        self.block = block
        self.credential = credential
        self.namespace = namespace
        self.shared = shared

    @abc.abstractmethod
    def create(self, spec: InstanceSpec) -> Instance:
        """Create the VM, or return the one already made for `spec.name` (idempotent)."""

    @abc.abstractmethod
    def get(self, instance_id: str) -> Instance | None:
        """The VM, or None when it is gone."""

    @abc.abstractmethod
    def list_owned(self, cluster_id: str) -> list[Instance]:
        """Every VM labelled as ours for this cluster (orphan garbage collection)."""

    @abc.abstractmethod
    def delete(self, instance_id: str) -> None:
        """Ask for deletion; succeeds if the VM is already gone. Callers confirm with get()."""

    def release_first_boot(self, instance_id: str) -> None:
        """Remove the first-boot material kept outside the VM (`keeps_first_boot`), once its
        node has joined: the VM has read it, and it holds the join script. Idempotent; a VM
        that is gone (or no longer the id's) is left to `delete`. By default nothing is kept."""
        return None

    @abc.abstractmethod
    def instance_types(self) -> list[InstanceType]:
        """The provider's catalog, with hourly prices in EUR where the API has them."""


class ProviderError(Exception):
    """Base of the classified errors. The message must never contain a credential."""

    def __init__(self, provider: str, message: str) -> None:
        super().__init__(f"{provider}: {message}")
        self.provider = provider
        self.message = message


class CapacityError(ProviderError):
    """Out of capacity, quota exhausted, or outage: try the next offering, remember this one."""


class RetryableError(ProviderError):
    """Throttled, timed out, transient 5xx: the same call may succeed later."""

    def __init__(self, provider: str, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(provider, message)
        self.retry_after_s = retry_after_s


class FatalError(ProviderError):
    """Auth or invalid request: no retry helps. `fix` says which field or Secret to change."""

    def __init__(self, provider: str, message: str, fix: str = "") -> None:
        super().__init__(provider, f"{message}{f' — {fix}' if fix else ''}")
        self.fix = fix


class NoIdentityError(FatalError):
    """No credential Secret is configured and the worker has no ambient identity for this
    cloud either (AWS default chain, GCP Application Default Credentials, Azure
    DefaultAzureCredential): a configuration error, `fix` says what to configure."""


class InstanceNotFoundError(ProviderError):
    """The VM does not exist (any more)."""
