"""Bare-metal machines through their BMCs' Redfish services, with `sushy` (OpenStack's client).

The inventory is the NodeClass's `spec.redfish.machines`; a claim holds one machine from its
create to its delete:

- Which claim holds a machine is recorded on the operator's seed server (`seedUrl`, the
  contract in docs/providers.md): `<seedUrl>/<machine>/meta-data` names the claim (its
  namespace, name and uid), its pool and cluster and the shape, and holds no secret. Redfish
  has no tags: the one writable free-text field, `AssetTag`, is not a compare-and-set, many
  BMCs cap its length well below a claim's labels, and sushy-tools' emulator neither shows
  nor accepts it; the record, though, must be written for the machine to join at all, and
  goes when the machine is returned. It is created with `If-None-Match: *` (RFC 9110): on a
  server that honours it two workers cannot take the same machine (412 to the second).
- The first-boot script (it carries the join token) is a one-time NoCloud seed at an
  unguessable per-claim address, `<seedUrl>/<machine>/<key>/{meta-data,user-data}`: the key
  is 256 bits derived from the script itself (HMAC-SHA256 keyed by the script, which holds
  the claim's secret token: nobody without the script can compute it, and a retried create
  derives the same one). The seed server answers the `user-data` once and forgets it as it
  answers; nothing at any other address is a script. The worker removes what is left with
  `DELETE <seedUrl>/<machine>/seed` when the machine is returned.
- A free machine is one without a record that is powered off. Create takes one of the
  requested shape, writes its seed, sets a one-time boot from the network (`boot: Pxe`, the
  operator's PXE/iPXE hands the machine `ds=nocloud;s=<seedUrl>/<machine>/<key>/`, the
  address the seed server was given for it) or inserts
  `imageUrl` as virtual media and boots it once (`boot: Cd`), and powers it on. A create
  that finds the claim's record resumes it (boot override, power) and makes nothing twice.
- Delete forces the power off, ejects the virtual media and removes the one-time seed, the
  record last: the machine is free again once it is off.
- The instance id is `redfish/<site>/<claim uid>/<machine>` (the claim's name in place of
  its uid for a holding recorded before records carried uids): a machine serves claim after
  claim, and an id names one holding, so a late delete of an earlier claim, or of another
  namespace's claim of the same name, never powers off a later claim's node.
- Listing what a cluster holds reads the records; a BMC that does not answer leaves its
  machine listed (power unknown, pending), never dropped: a missing machine would look
  returned to the orphan GC. Its last segment, the machine, is what the node's providerID ends in
  (`redfish:///<site>/<machine>`, from the seed's `cloudburst-machine`).
- A shape is named by its size, `metal-<cpu>c<memory>g` (`-arm64` for arm64), from the BMC's
  `ProcessorSummary.Count` and `MemorySummary.TotalSystemMemoryGiB`, or the inventory's `cpu`
  and `memoryGiB` where the BMC reports none; `available` is its free machines.
- Errors: a BMC that refuses the login (401/403) → fatal, naming the machine's Secret; a BMC
  or seed server that cannot be reached or answers 5xx → the machine is skipped when creating
  (no free machine reachable: capacity), retryable otherwise; 429 → retryable; no free
  machine of the shape → capacity. No credential is in any message.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, NoReturn
from urllib.parse import urlsplit

import httpx
import sushy
import yaml
from sushy import exceptions as sushy_errors

from activities.providers.base import (
    CapacityError,
    FatalError,
    Instance,
    InstanceSpec,
    InstanceState,
    InstanceType,
    Provider,
    RetryableError,
    SharedMachines,
    instance_id,
    split_instance_id,
)
from api import labels as L
from api.nodeclass import RedfishClass, RedfishMachine
from cluster import machine_hygiene as hygiene
from cluster.machine_hygiene import MachineRecord, WipeStep
from cluster.tenancy import inventory_key

log = logging.getLogger(__name__)

# What a BMC's error becomes: fatal (fix something) or retryable (a machine to skip now).
ProviderError_ = FatalError | RetryableError
TIMEOUT_S = 15.0
MACHINE_KEY = "cloudburst-machine"
# Under `<seedUrl>/<machine>/`: the one-time seed's name in the contract's DELETE.
ONE_TIME_SEED = "seed"
_STATES = {
    "On": InstanceState.RUNNING,
    "PoweringOn": InstanceState.PENDING,
    "PoweringOff": InstanceState.STOPPING,
    # Held but off: its power-on is still to land (BMCs take seconds), or someone turned it
    # off; the node's own state tells which.
    "Off": InstanceState.PENDING,
}


class RedfishProvider(Provider):
    """`credential` is a JSON object of machine name to that BMC's `username:password`."""

    name: ClassVar[str] = "redfish"
    shares_machines: ClassVar[bool] = True
    block: RedfishClass

    def __init__(
        self,
        block: RedfishClass,
        credential: str | None,
        namespace: str | None = None,
        *,
        shared: SharedMachines | None = None,
    ) -> None:
        super().__init__(block, credential, namespace, shared=shared)
        try:
            logins = json.loads(credential or "{}")
        except ValueError:
            logins = None
        if not isinstance(logins, dict):
            raise FatalError(
                self.name,
                "the BMC logins are not a JSON object of machine name to username:password",
                "the worker reads each spec.redfish.machines[].credentialsSecretRef itself",
            )
        self.machines: dict[str, RedfishMachine] = {m.name: m for m in block.machines}
        self._logins: dict[str, tuple[str, str]] = {}
        for index, machine in enumerate(block.machines):
            user, sep, password = str(logins.get(machine.name) or "").partition(":")
            if not (user and sep):
                raise FatalError(
                    self.name,
                    f"no BMC login for machine {machine.name}",
                    f"the Secret key named by spec.redfish.machines[{index}].credentialsSecretRef "
                    "must hold username:password",
                )
            self._logins[machine.name] = (user, password)
        self.seed_url = block.seed_url.rstrip("/")
        self._http = httpx.Client(timeout=TIMEOUT_S, verify=block.verify_tls)
        self._bmcs: dict[tuple[str, str], sushy.Sushy] = {}
        self._keys: dict[str, str] = {}  # machine -> its key in the ledger

    def close(self) -> None:
        self._http.close()

    # ---- errors ----------------------------------------------------------------------------

    def _login_fix(self, machine: str) -> str:
        index = next(i for i, m in enumerate(self.block.machines) if m.name == machine)
        return (
            f"check the BMC login in the Secret named by "
            f"spec.redfish.machines[{index}].credentialsSecretRef (an account with the "
            "Operator role: power control, boot override, virtual media)"
        )

    def _bmc_error(self, machine: str, exc: Exception, what: str) -> ProviderError_:
        """A sushy error as a typed error (returned, not raised: creating skips a machine
        whose BMC is down)."""
        detail = f"{what}: machine {machine}: {type(exc).__name__}: {exc}"
        if isinstance(exc, sushy_errors.AccessError):
            return FatalError(self.name, detail, self._login_fix(machine))
        if isinstance(exc, sushy_errors.ResourceNotFoundError):
            return FatalError(self.name, detail, f"check the bmc and systemId of machine {machine}")
        if isinstance(exc, sushy_errors.HTTPError) and exc.status_code == 429:
            return RetryableError(self.name, detail, retry_after_s=5.0)
        if isinstance(exc, sushy_errors.ConnectionError | sushy_errors.ServerSideError):
            return RetryableError(self.name, detail)
        return FatalError(self.name, detail, f"check machine {machine} in spec.redfish.machines")

    def _seed_error(self, exc: Exception, what: str, *, creating: bool = False) -> NoReturn:
        if isinstance(exc, httpx.TimeoutException | httpx.TransportError):
            detail = f"{what}: cannot reach the seed server {self.seed_url}"
            if creating:
                raise CapacityError(self.name, detail) from None
            raise RetryableError(self.name, detail) from None
        if isinstance(exc, httpx.HTTPStatusError):
            status = exc.response.status_code
            detail = f"{what}: the seed server answered HTTP {status}"
            if status == 429:
                raise RetryableError(self.name, detail) from None
            if status >= 500:
                if creating:
                    raise CapacityError(self.name, detail) from None
                raise RetryableError(self.name, detail) from None
            raise FatalError(
                self.name,
                detail,
                "check NodeClass spec.redfish.seedUrl: the worker must be allowed to PUT, "
                "GET and DELETE under it",
            ) from None
        raise exc

    # ---- the BMCs --------------------------------------------------------------------------

    def _system(self, machine: str) -> Any:
        """The machine's ComputerSystem (sushy), through a connection per BMC and login."""
        entry = self.machines[machine]
        root = urlsplit(entry.bmc)
        user, password = self._logins[machine]
        key = (entry.bmc, user)
        conn = self._bmcs.get(key)
        if conn is None:
            conn = sushy.Sushy(
                f"{root.scheme}://{root.netloc}",
                username=user,
                password=password,
                root_prefix=(root.path.rstrip("/") or "/redfish/v1") + "/",
                verify=self.block.verify_tls,
                server_side_retries=1,
                server_side_retries_delay=1,
                read_timeout=int(TIMEOUT_S),
                connect_timeout=5,
            )
            self._bmcs[key] = conn
        identity = None
        if entry.system_id:
            identity = f"{root.path.rstrip('/') or '/redfish/v1'}/Systems/{entry.system_id}"
        return conn.get_system(identity)

    def _look(self, machine: str, what: str) -> _Machine:
        """Power state and shape of a machine (sushy errors raised as typed errors)."""
        try:
            system = self._system(machine)
            raw = system.json or {}
        except sushy_errors.SushyError as exc:
            raise self._bmc_error(machine, exc, what) from None
        self._key(machine, system)
        entry = self.machines[machine]
        cpu = (raw.get("ProcessorSummary") or {}).get("Count") or entry.cpu
        memory = (raw.get("MemorySummary") or {}).get("TotalSystemMemoryGiB") or entry.memory_gib
        shape = None
        if cpu and memory:
            shape = f"metal-{int(cpu)}c{int(memory)}g" + ("-arm64" if entry.arch == "arm64" else "")
        return _Machine(
            name=machine,
            power=str(raw.get("PowerState") or ""),
            shape=shape,
            cpu=int(cpu or 0),
            memory_gib=float(memory or 0),
            arch=entry.arch,
            system=system,
        )

    # ---- the seed server -------------------------------------------------------------------

    def _record(self, machine: str, what: str, *, creating: bool = False) -> dict[str, str] | None:
        """The claim holding `machine` (its seed's meta-data), or None when it is free."""
        try:
            response = self._http.get(f"{self.seed_url}/{machine}/meta-data")
            if response.status_code == 404:
                return None
            response.raise_for_status()
        except httpx.HTTPError as exc:
            self._seed_error(exc, f"{what}: read the seed of {machine}", creating=creating)
        try:
            doc = yaml.safe_load(response.text)
        except yaml.YAMLError:
            doc = None
        if not isinstance(doc, dict):
            return {}  # a seed that is not ours: the machine is taken, by whom is unknown
        return {str(k): str(v) for k, v in doc.items()}

    def _claim(self, machine: str, spec: InstanceSpec, what: str) -> bool:
        """Write the record (create-only); False when another claim took the machine first."""
        labels = {**spec.holder_labels(), L.INSTANCE_TYPE: spec.instance_type}
        lines = [
            f"instance-id: {json.dumps(f'cloudburst-{machine}-{spec.name}')}",
            f"local-hostname: {json.dumps(spec.name)}",
            f"{MACHINE_KEY}: {json.dumps(machine)}",
            *(f"{key}: {json.dumps(value)}" for key, value in sorted(labels.items())),
        ]
        try:
            response = self._http.put(
                f"{self.seed_url}/{machine}/meta-data",
                content="\n".join(lines) + "\n",
                headers={"If-None-Match": "*", "Content-Type": "text/yaml"},
            )
            if response.status_code == 412:
                return False
            response.raise_for_status()
        except httpx.HTTPError as exc:
            self._seed_error(exc, f"{what}: record the claim on {machine}", creating=True)
        mine = self._record(machine, what, creating=True) or {}
        # A server that ignores If-None-Match lets the last writer win: read back who did.
        return _holds(mine, spec)

    def _write_seed(self, machine: str, spec: InstanceSpec, what: str) -> None:
        """Write the claim's one-time NoCloud seed at its per-claim address (a retry writes the
        same address again: the key is derived, not drawn)."""
        base = f"{self.seed_url}/{machine}/{seed_key(spec.user_data, machine, spec.name)}"
        meta = (
            f"instance-id: {json.dumps(f'cloudburst-{machine}-{spec.name}')}\n"
            f"local-hostname: {json.dumps(spec.name)}\n"
        )
        try:
            for name, body in (("meta-data", meta), ("user-data", spec.user_data)):
                self._http.put(
                    f"{base}/{name}",
                    content=body.encode(),
                    headers={"Content-Type": "text/plain; charset=utf-8"},
                ).raise_for_status()
        except httpx.HTTPError as exc:
            self._seed_error(
                exc, f"{what}: write the first-boot script of {machine}", creating=True
            )

    def _release(
        self,
        machine: str,
        what: str,
        names: tuple[str, ...] = (ONE_TIME_SEED, "user-data", "meta-data"),
    ) -> None:
        """Remove the one-time seed (it holds a join token) and the script at the address of
        the contract before it (a holding from an earlier release), then the record."""
        for name in names:
            try:
                response = self._http.delete(f"{self.seed_url}/{machine}/{name}")
                if response.status_code != 404:
                    response.raise_for_status()
            except httpx.HTTPError as exc:
                self._seed_error(exc, f"{what}: remove the seed of {machine}")

    # ---- the worker's ledger of machines (cluster/machine_hygiene.py) ----------------------

    def _key(self, machine: str, system: Any = None) -> str:
        """The machine's key in the ledger: its BMC's host and the system's identity as the
        BMC reports it (its UUID), never the NodeClass's words for it — a machine named
        otherwise, or listed without its `systemId`, is the same machine."""
        key = self._keys.get(machine)
        if key is None:
            if system is None:
                try:
                    system = self._system(machine)
                except sushy_errors.SushyError as exc:
                    raise self._bmc_error(machine, exc, "identify the machine") from None
            identity = str(getattr(system, "uuid", None) or system.path)
            bmc = inventory_key(self.machines[machine].bmc)
            key = self._keys[machine] = hygiene.machine_key(bmc, identity)
        return key

    def _ledger(self) -> dict[str, MachineRecord | None]:
        """Each machine's record in the ledger (all None without one)."""
        if self.shared is None:
            return dict.fromkeys(self.machines)
        stored = self.shared.ledger.read_all()
        records: dict[str, MachineRecord | None] = {}
        for machine in self.machines:
            try:
                records[machine] = stored.get(self._key(machine))
            except RetryableError:
                records[machine] = _UNIDENTIFIED  # its BMC did not answer: taken by nobody
        return records

    def _refusal(self, record: MachineRecord | None, claim_uid: str) -> str | None:
        """Why the ledger keeps this provider's namespace (a claim of it: `claim_uid`) from
        the machine, if it does."""
        if self.shared is None:
            return None
        return hygiene.may_take(record, self.namespace or "", claim_uid)

    def _change(
        self, machine: str, step: Callable[[MachineRecord | None], MachineRecord | None]
    ) -> MachineRecord | None:
        if self.shared is None:
            return None
        return self.shared.ledger.change(self._key(machine), step)

    def _take(self, machine: str, spec: InstanceSpec) -> tuple[bool, MachineRecord | None]:
        """Enter the claim as the machine's holder in the ledger, where it may take it;
        whether it did, and the record before (to put back if the create goes no further)."""
        if self.shared is None:
            return True, None
        namespace, uid = spec.namespace or self.namespace or "", spec.claim_uid or spec.name
        before: list[MachineRecord | None] = []

        def step(record: MachineRecord | None) -> MachineRecord | None:
            before[:] = [record]
            if hygiene.may_take(record, namespace, uid) is not None:
                return None
            return hygiene.taken(machine, namespace, uid)

        after = self._change(machine, step)
        mine = after is not None and after.state == hygiene.HELD and after.claim_uid == uid
        return mine, (before[0] if before else None)

    def _untake(self, machine: str, spec: InstanceSpec, before: MachineRecord | None) -> None:
        """Put the record back as it was before `_take`, if the claim still holds it there:
        nothing of the claim ran on the machine."""
        uid = spec.claim_uid or spec.name

        def step(record: MachineRecord | None) -> MachineRecord | None:
            if record is None or record.state != hygiene.HELD or record.claim_uid != uid:
                return None
            return before or hygiene.cleaned(machine)

        self._change(machine, step)

    # ---- the wipe between tenants ----------------------------------------------------------

    def _start_wipe(self, machine: str, seen: _Machine, what: str) -> None:
        """Boot the operator's wipe image once (virtual media): the machine is off, its
        one-time seed gone, so nothing but the wipe image runs on it."""
        image = self.shared.wipe_image_url if self.shared else None
        if not image:
            raise FatalError(self.name, f"{what}: no wipe image configured")
        self._release(machine, what, (ONE_TIME_SEED,))
        system = seen.system
        try:
            self._insert_media(
                system,
                f"{what}: the wipe image of machine {machine}",
                image,
                "the wipe between tenants boots CLOUDBURST_MACHINE_WIPE_IMAGE_URL as virtual "
                "media; remove the machine from the inventory, or the setting",
            )
            system.set_system_boot_options(
                target=sushy.BootSource.CD, enabled=sushy.BootSourceOverrideEnabled.ONCE
            )
            system.reset_system(sushy.ResetType.ON)
        except sushy_errors.SushyError as exc:
            raise self._bmc_error(machine, exc, f"{what}: boot the wipe image") from None
        log.info("machine %s booting the wipe image %s", machine, image)

    def _advance_wipe(self, machine: str, record: MachineRecord, what: str) -> bool:
        """One look at a machine being wiped: whether its wipe is done (the machine then
        returned: media ejected, seed record removed, the ledger's record clean)."""
        seen = self._look(machine, what)
        step = hygiene.wipe_step(record, seen.power, time.time())
        if step is WipeStep.SEEN_RUNNING:
            self._change(
                machine,
                lambda r: (
                    hygiene.seen_running(r) if r is not None and r.state == hygiene.WIPING else None
                ),
            )
        elif step is WipeStep.START_AGAIN:
            if record.wipe_started_at is not None:
                log.warning("machine %s: its wipe never ran; starting it again", machine)
            self._change(machine, lambda r: hygiene.wiping(r, time.time()) if r else None)
            self._start_wipe(machine, seen, what)
        elif step is WipeStep.DONE:
            try:
                for media in seen.system.virtual_media.get_members():
                    if media.inserted:
                        media.eject_media()
            except sushy_errors.SushyError as exc:
                raise self._bmc_error(machine, exc, f"{what}: eject the wipe image") from None
            # The ledger first: a crash before the record goes leaves the record, and the
            # retried delete wipes the machine once more rather than never freeing it.
            self._change(machine, lambda r: hygiene.cleaned(machine))
            self._release(machine, what)
            log.info("machine %s wiped and returned", machine)
            return True
        return False

    # ---- Provider --------------------------------------------------------------------------

    def create(self, spec: InstanceSpec) -> Instance:
        site = self.block.site
        what = f"create machine for {spec.name!r} ({spec.instance_type} at {site})"
        if spec.region and spec.region != site:
            raise FatalError(
                self.name,
                f"{what}: the offering's region {spec.region!r} is not this site",
                "the region of a redfish offering is NodeClass spec.redfish.site",
            )
        records = {m: self._record(m, what, creating=True) for m in self.machines}
        for machine, record in records.items():
            if _holds(record, spec):
                if not self._take(machine, spec)[0]:
                    # Its record written, the ledger then gave the machine to another claim
                    # (through another seed server): the record is all it had.
                    self._release_quietly(machine, what)
                    continue
                log.info("machine %s already holds %s; resuming", machine, spec.name)
                seen = self._look(machine, what)
                if seen.power in ("Off", "PoweringOff"):
                    # Not booted yet (a create interrupted before its seed was written, or
                    # before power-on): once booted, its seed is never written again.
                    self._write_seed(machine, spec, what)
                # The record's holder: a record written before records carried uids keeps
                # naming the claim by name, and so does its id.
                return self._boot(machine, spec, what, seen, holder=_holder(record or {}))
        unreachable: list[str] = []
        ledger = self._ledger()
        kept: list[str] = []
        for machine, record in records.items():
            if record is not None:
                continue
            try:
                seen = self._look(machine, what)
            except (RetryableError, CapacityError) as exc:
                log.warning("skipping machine %s: %s", machine, exc)
                unreachable.append(machine)
                continue
            if seen.shape != spec.instance_type or seen.power != "Off":
                continue
            why = self._refusal(ledger[machine], spec.claim_uid or spec.name)
            if why is not None:
                kept.append(f"{machine} ({why})")
                continue
            # The seed record first, then the ledger: whatever line a crash stops at, what
            # is entered in the ledger has its record, which a retried create resumes and a
            # delete finds by its labels (a ledger entry alone would hold the machine for
            # good).
            if not self._claim(machine, spec, what):
                log.info("machine %s was taken meanwhile", machine)
                continue
            mine, before = self._take(machine, spec)
            if not mine:
                log.info("machine %s was taken meanwhile (the ledger)", machine)
                self._release_quietly(machine, what)
                continue
            try:
                self._write_seed(machine, spec, what)
                return self._boot(machine, spec, what, seen)
            except (FatalError, CapacityError):
                self._untake(machine, spec, before)
                self._release_quietly(machine, what)
                raise
        if kept:
            log.info("%s: machines not offered to namespace %s: %s", what, spec.namespace, kept)
        also = (
            f" ({len(unreachable)} did not answer: {', '.join(unreachable)})" if unreachable else ""
        )
        raise CapacityError(
            self.name, f"{what}: no free machine of shape {spec.instance_type}{also}"
        )

    def _boot(
        self,
        machine: str,
        spec: InstanceSpec,
        what: str,
        seen: _Machine | None = None,
        holder: str | None = None,
    ) -> Instance:
        """Boot override and power on (both idempotent); the holding as an Instance."""
        seen = seen or self._look(machine, what)
        system = seen.system
        try:
            if seen.power in ("Off", "PoweringOff"):
                if self.block.boot == "Cd":
                    self._insert_media(system, what)
                    target = sushy.BootSource.CD
                else:
                    target = sushy.BootSource.PXE
                system.set_system_boot_options(
                    target=target, enabled=sushy.BootSourceOverrideEnabled.ONCE
                )
                system.reset_system(sushy.ResetType.ON)
                seen.power = "PoweringOn"
        except sushy_errors.SushyError as exc:
            error = self._bmc_error(machine, exc, f"{what}: power on")
            if isinstance(error, RetryableError):
                raise CapacityError(self.name, error.message) from None
            raise error from None
        log.info("machine %s powering on for %s", machine, spec.name)
        labels = spec.holder_labels()
        holder = holder or spec.claim_uid or spec.name
        return self._instance(machine, holder, spec.name, labels, spec.instance_type, seen.power)

    def _insert_media(
        self,
        system: Any,
        what: str,
        image: str | None = None,
        fix: str = "use boot: Pxe for this inventory",
    ) -> None:
        """Insert `image` (the NodeClass's `imageUrl` by default) as the BMC's virtual CD,
        ejecting what is in it first; FatalError with `fix` where the BMC offers none."""
        for media in system.virtual_media.get_members():
            types = {str(getattr(t, "value", t)) for t in media.media_types or []}
            if types & {"CD", "DVD"}:
                if media.inserted:
                    media.eject_media()
                media.insert_media(
                    image or self.block.image_url, inserted=True, write_protected=True
                )
                return
        raise FatalError(self.name, f"{what}: the BMC offers no CD virtual media", fix)

    def _release_quietly(self, machine: str, what: str) -> None:
        try:
            self._release(machine, what)
        except (RetryableError, CapacityError, FatalError) as exc:
            log.warning("could not return machine %s after a failed create: %s", machine, exc)

    def _instance(
        self,
        machine: str,
        holder: str,
        claim: str,
        labels: dict[str, str],
        shape: str,
        power: str,
    ) -> Instance:
        """`holder` is the claim's uid (its name for a holding recorded without one): an id
        names one holding, never a later claim's of the same name."""
        return Instance(
            id=instance_id(self.name, self.block.site, f"{holder}/{machine}"),
            name=claim,
            provider=self.name,
            region=self.block.site,
            instance_type=shape,
            state=_STATES.get(power, InstanceState.PENDING),
            labels=labels,
        )

    def _holding(self, value: str) -> tuple[str, str]:
        try:
            provider, _site, native = split_instance_id(value)
            claim, machine = native.split("/")
            if provider != self.name or machine not in self.machines:
                raise ValueError(value)
        except ValueError as exc:
            raise FatalError(
                self.name,
                f"{value!r} is not a machine of this inventory",
                "a machine removed from spec.redfish.machines is no longer managed",
            ) from exc
        return claim, machine

    def _from_record(
        self, machine: str, record: dict[str, str], what: str, *, listing: bool = False
    ) -> Instance:
        labels = {k: v for k, v in record.items() if k.startswith(f"{L.GROUP}/")}
        shape = labels.pop(L.INSTANCE_TYPE, "")
        try:
            power = self._look(machine, what).power
        except RetryableError as exc:
            if not listing:
                raise
            log.warning("machine %s listed with its power unknown: %s", machine, exc)
            power = ""
        holder = _holder(record)
        return self._instance(machine, holder, record.get(L.NODECLAIM, ""), labels, shape, power)

    def get(self, instance_id: str) -> Instance | None:
        """The holding, or None once returned. A machine being wiped is still the claim's
        (stopping) until its wipe is done: each look advances the wipe, so the delete that
        waits on it sees the wipe image running and then done."""
        holder, machine = self._holding(instance_id)
        what = f"get {instance_id}"
        record = self._record(machine, what)
        if record is None or not _is_holder(record, holder):
            return None  # returned, perhaps held by a later claim now
        wipe = self._ledger_record(machine)
        if _held_by_another(wipe, holder):
            return None  # its record lost the machine to a claim the ledger gave it to
        if wipe is not None and wipe.state == hygiene.WIPING:
            if self._advance_wipe(machine, wipe, what):
                return None
            instance = self._from_record(machine, record, what)
            return instance.model_copy(update={"state": InstanceState.STOPPING})
        return self._from_record(machine, record, what)

    def _ledger_record(self, machine: str) -> MachineRecord | None:
        return self.shared.ledger.read(self._key(machine)) if self.shared else None

    def list_owned(self, cluster_id: str) -> list[Instance]:
        what = f"list machines of cluster {cluster_id!r}"
        found: list[Instance] = []
        for machine in self.machines:
            record = self._record(machine, what)
            if record and record.get(L.CLUSTER) == cluster_id and record.get(L.NODECLAIM):
                found.append(self._from_record(machine, record, what, listing=True))
        return found

    def delete(self, instance_id: str) -> None:
        """Power the machine off and return it: wiped first where the operator configured a
        wipe (the machine stays the claim's, stopping, until the wipe is done: `get`), else
        released to the claim's namespace alone."""
        holder, machine = self._holding(instance_id)
        what = f"delete {instance_id}"
        record = self._record(machine, what)
        if record is None or not _is_holder(record, holder):
            log.info("%s already returned", instance_id)
            return
        entry = self._ledger_record(machine)
        if _held_by_another(entry, holder):
            # The ledger gave the machine to another claim (through another seed server):
            # this claim never ran on it, and its power is not this claim's to touch.
            self._release(machine, what)
            log.info("%s: machine %s is another claim's; its record removed", what, machine)
            return
        if entry is not None and entry.state == hygiene.WIPING:
            self._advance_wipe(machine, entry, what)
            return
        seen = self._look(machine, what)
        try:
            if seen.power not in ("Off", "PoweringOff"):
                seen.system.reset_system(sushy.ResetType.FORCE_OFF)
            if self.block.boot == "Cd":
                for media in seen.system.virtual_media.get_members():
                    if media.inserted:
                        media.eject_media()
        except sushy_errors.SushyError as exc:
            raise self._bmc_error(machine, exc, f"{what}: power off") from None
        if self.shared is not None and self.shared.wipe_image_url:
            # Nobody takes it from here on; the wipe image boots at the first look that
            # finds it off (`get`, or this delete asked again).
            self._change(machine, lambda r: _to_wipe(machine, r, record))
            self._release(machine, what, (ONE_TIME_SEED,))
            log.info("machine %s powering off to be wiped (was %s)", machine, holder)
            return
        # The ledger first: a crash before the record goes leaves the record, which the
        # retried delete finds again.
        self._change(machine, lambda r: _to_released(machine, r, record))
        self._release(machine, what)
        log.info("machine %s powered off and returned (was %s)", machine, holder)

    def instance_types(self) -> list[InstanceType]:
        what = "list machine shapes"
        shapes: dict[str, InstanceType] = {}
        ledger = self._ledger()
        for machine in self.machines:
            try:
                seen = self._look(machine, what)
            except RetryableError as exc:
                log.warning("machine %s not counted: %s", machine, exc)
                continue
            if seen.shape is None:
                log.warning("machine %s: its BMC reports no size and the inventory none", machine)
                continue
            free = (
                seen.power == "Off"
                and self._record(machine, what) is None
                and self._refusal(ledger[machine], "") is None
            )
            entry = shapes.setdefault(
                seen.shape,
                InstanceType(
                    provider=self.name,
                    name=seen.shape,
                    vcpu=float(seen.cpu),
                    memory_gib=seen.memory_gib,
                    arch=seen.arch,
                    regions=[self.block.site],
                    price_eur_per_hour=self.block.price_eur_per_hour,
                    available=0,
                ),
            )
            entry.available = (entry.available or 0) + int(free)
        return list(shapes.values())


@dataclass
class _Machine:
    """A machine as its BMC reports it."""

    name: str
    power: str
    shape: str | None
    cpu: int
    memory_gib: float
    arch: str
    system: Any


def seed_key(user_data: str, machine: str, claim: str) -> str:
    """The one-time seed's address segment: HMAC-SHA256 keyed by the first-boot script (it
    holds the claim's secret join token), so only who has the script can compute it."""
    message = f"cloudburst-seed/{machine}/{claim}".encode()
    return hmac.new(user_data.encode(), message, hashlib.sha256).hexdigest()


def _holds(record: dict[str, str] | None, spec: InstanceSpec) -> bool:
    """Whether `record` is this claim's: its cluster and name, and its uid where it has one
    (a same-named claim made later is another claim)."""
    if not record or record.get(L.CLUSTER) != spec.cluster_id:
        return False
    if record.get(L.NODECLAIM) != spec.name:
        return False
    return not spec.claim_uid or record.get(L.NODECLAIM_UID, spec.claim_uid) == spec.claim_uid


def _ledger_holder(machine: str, seed_record: dict[str, str]) -> MachineRecord:
    """The holder a seed record names, as the ledger records one (a holding taken before the
    ledger kept machines)."""
    return hygiene.taken(machine, seed_record.get(L.NODEPOOL_NAMESPACE, ""), _holder(seed_record))


# A machine whose BMC did not answer when its ledger key was wanted: nobody takes it now.
_UNIDENTIFIED = MachineRecord(machine="", state=hygiene.HELD)


def _held_by_another(entry: MachineRecord | None, holder: str) -> bool:
    """Whether the ledger says another claim than the holding `holder` holds the machine."""
    return (
        entry is not None
        and entry.state == hygiene.HELD
        and bool(entry.claim_uid)
        and entry.claim_uid != holder
    )


def _to_wipe(
    machine: str, record: MachineRecord | None, seed_record: dict[str, str]
) -> MachineRecord | None:
    if record is not None and record.state == hygiene.WIPING:
        return None
    return hygiene.wiping(record or _ledger_holder(machine, seed_record), None)


def _to_released(
    machine: str, record: MachineRecord | None, seed_record: dict[str, str]
) -> MachineRecord | None:
    if record is not None and record.state in (hygiene.RELEASED, hygiene.CLEAN):
        return None
    return hygiene.released(record or _ledger_holder(machine, seed_record))


def _holder(record: dict[str, str]) -> str:
    """The instance id's claim segment: the claim's uid, or its name in a record without one
    (written before records carried uids)."""
    return record.get(L.NODECLAIM_UID) or record.get(L.NODECLAIM, "")


def _is_holder(record: dict[str, str] | None, holder: str) -> bool:
    """Whether the holding named by an instance id's claim segment is still `record`."""
    if not record:
        return False
    if L.NODECLAIM_UID in record:
        return record[L.NODECLAIM_UID] == holder
    return record.get(L.NODECLAIM) == holder
