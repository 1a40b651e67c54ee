"""Orphan garbage collection: list what we own, ask which claims still live, remove the rest.

Three activities, so that the one needing the Temporal client (only `async def` activities
get `activity.client()`) stays small and the sync ones run on the worker's thread pool:

- `collect_orphans` (sync): every provider block of every NodeClass the worker serves →
  `list_owned(cluster_id)`, credentials read from the NodeClass' Secret reference like
  `create_instance` does, under the same confinement (a NodeClass outside the served
  namespaces, naming another namespace's Secret or an endpoint the operator does not allow
  is skipped with a log line: no read, no call); plus every first-boot script Secret in the
  worker's namespace and the bootstrap token each one names (tokens live in kube-system,
  which the worker may write but not read or list). A provider that cannot be listed is
  reported and skipped; the others are still collected. What a failed or partial listing
  leaves unknown is not judged: when any scope of a provider fails to list, none of that
  provider's VMs goes to the workflow (who else holds them is not known). A VM that records
  its claim's namespace (Redfish machines, Proxmox VMs: `cloudburst.io/nodepool-namespace`)
  is judged and removed only through a scope of that namespace, never through another
  tenant's NodeClass that reaches the same hardware.
- `claim_workflow_states` (async, in `activities/claim_workflows.py`, which the pools use
  too): `nodeclaim-<claim>` running, closed or unknown.
- `remove_orphans` (sync): deletes the VMs the workflow chose (idempotent; waits until each
  is confirmed gone, up to a timeout) and the stale Secrets (already gone is fine).

The decision — which VM is an orphan, which Secret is stale — is the workflow's, from these
results, so it is visible in history and deterministic.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.bootstrap import SCRIPT_PURPOSE, TOKEN_NAMESPACE
from activities.credentials import read_provider_credential
from activities.heartbeat import heartbeating, heartbeats_itself
from activities.machine_ledger import tenant_provider
from activities.providers import provider_class
from activities.providers.base import Provider, ProviderError
from api import labels
from api.gc import (
    GcInventory,
    GcScope,
    LabelledSecret,
    OrphanGcInput,
    OrphanVm,
    OwnedVm,
    RemovalResult,
    RemovedSecret,
    RemovedVm,
    RemoveOrphansInput,
    SecretPurpose,
)
from api.nodeclass import NodeClass
from cluster.responses import discard
from cluster.tenancy import Tenancy

log = logging.getLogger(__name__)

GROUP, VERSION = "cloudburst.io", "v1alpha1"
_DELETE_POLL_S = 1.0
_DELETE_REREQUEST_S = 30.0


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _close(provider: Provider) -> None:
    close = getattr(provider, "close", None)
    if callable(close):
        close()


def _message(exc: BaseException) -> str:
    """A short, credential-free description (provider errors are scrubbed at the boundary)."""
    if isinstance(exc, ProviderError):
        return exc.message
    if isinstance(exc, ApplicationError):
        return exc.message
    if isinstance(exc, ApiException):
        return f"Kubernetes API: HTTP {exc.status} {exc.reason or ''}".strip()
    return type(exc).__name__


class GcActivities:
    def __init__(self, api_client: k8s.ApiClient, tenancy: Tenancy | None = None) -> None:
        self._core = k8s.CoreV1Api(api_client)
        self._custom = k8s.CustomObjectsApi(api_client)
        self._tenancy = tenancy or Tenancy()

    def activities(self) -> list[Callable[..., Any]]:
        return [self.collect_orphans, self.remove_orphans]

    # ---- collect -------------------------------------------------------------------------

    @activity.defn(name="collect_orphans")
    @heartbeats_itself
    def collect_orphans(self, input: OrphanGcInput) -> GcInventory:
        errors: list[str] = []
        progress = {"scope": ""}
        with heartbeating(details=lambda: f"listing {progress['scope']}"):
            scopes = self._scopes(errors)
            vms: list[OwnedVm] = []
            seen: dict[str, OwnedVm] = {}
            failed: set[str] = set()  # providers a listing of which failed
            elsewhere: dict[str, str] = {}  # VM id -> its owner namespace, listed by others
            for index, scope in enumerate(scopes):
                where = f"{scope.provider} (NodeClass {scope.namespace}/{scope.node_class_name})"
                progress["scope"] = where
                try:
                    provider = self._provider(scope)
                    try:
                        owned = provider.list_owned(input.cluster_id)
                    finally:
                        _close(provider)
                except (ProviderError, ApplicationError, ApiException, KeyError) as exc:
                    log.warning("orphan GC: cannot list %s: %s", where, _message(exc))
                    errors.append(f"{where}: {_message(exc)}")
                    failed.add(scope.provider)
                    continue
                for inst in owned:
                    owner = inst.labels.get(labels.NODEPOOL_NAMESPACE)
                    if owner and owner != scope.namespace:
                        elsewhere.setdefault(inst.id, owner)  # not this scope's to judge
                        continue
                    known = seen.get(inst.id)
                    if known is not None:  # two NodeClasses reaching the same account
                        if scope.namespace not in known.namespaces:
                            known.namespaces.append(scope.namespace)
                        continue
                    seen[inst.id] = vm = OwnedVm(
                        scope=index,
                        namespaces=[scope.namespace],
                        instance_id=inst.id,
                        provider=inst.provider,
                        claim_name=inst.labels.get(labels.NODECLAIM),
                        node_pool=inst.labels.get(labels.NODEPOOL),
                        state=inst.state.value,
                        created_at=inst.created_at,
                    )
                    vms.append(vm)
            for vm_id, owner in sorted(elsewhere.items()):
                if vm_id not in seen and owner not in {s.namespace for s in scopes}:
                    errors.append(
                        f"{vm_id}: held for namespace {owner}, no scope of which lists it"
                    )
            if failed:
                unjudged = [vm for vm in vms if vm.provider in failed]
                vms = [vm for vm in vms if vm.provider not in failed]
                if unjudged:
                    errors.append(
                        f"{len(unjudged)} VM(s) of {', '.join(sorted(failed))} not judged: "
                        "a listing of that provider failed"
                    )
            progress["scope"] = "bootstrap Secrets"
            secrets = self._secrets()
        log.info(
            "orphan GC: %d owned VM(s) on %d provider scope(s), %d bootstrap Secret(s)",
            len(vms),
            len(scopes),
            len(secrets),
        )
        return GcInventory(
            scopes=scopes, vms=vms, secrets=secrets, errors=errors, listed_at=datetime.now(UTC)
        )

    def _scopes(self, errors: list[str]) -> list[GcScope]:
        """One scope per distinct provider configuration among all NodeClasses."""
        raw = cast(
            dict[str, Any],
            self._custom.list_cluster_custom_object(GROUP, VERSION, "nodeclasses"),
        )
        scopes: list[GcScope] = []
        keys: set[tuple[str, str, str]] = set()
        for item in raw.get("items") or []:
            meta = item.get("metadata") or {}
            where = f"NodeClass {meta.get('namespace', '?')}/{meta.get('name', '?')}"
            try:
                node_class = NodeClass.model_validate(item)
            except ValidationError as exc:
                errors.append(f"{where}: invalid ({exc.error_count()} error(s)); skipped")
                continue
            namespace = node_class.metadata.namespace
            for provider in node_class.spec.configured_providers():
                refusal = self._tenancy.refusal(namespace, node_class.spec, (provider,))
                if refusal is not None:
                    # Not served: its credential is not read and its endpoint not called.
                    log.warning("orphan GC: %s %s skipped: %s", where, provider, refusal.message)
                    errors.append(f"{where} {provider}: {refusal.reason}; skipped")
                    continue
                block = node_class.spec.provider_block(provider)
                key = (provider, namespace, block.model_dump_json())
                if key in keys:
                    continue
                keys.add(key)
                scopes.append(
                    GcScope(
                        provider=provider,
                        namespace=namespace,
                        node_class_name=node_class.metadata.name,
                        node_class=node_class.spec,
                    )
                )
        return scopes

    def _provider(self, scope: GcScope) -> Provider:
        self._tenancy.require(scope.namespace, scope.node_class, (scope.provider,))
        block = scope.node_class.provider_block(scope.provider)
        cls = provider_class(scope.provider)
        credential = read_provider_credential(self._core, scope.namespace, block)
        return tenant_provider(
            cls, block, credential, scope.namespace, self._tenancy, self._core, self._core
        )

    def _secrets(self) -> list[LabelledSecret]:
        """First-boot script Secrets (the worker's namespace) and the token each one names.

        A token lives in kube-system, where the worker may create and delete but not read
        or list: a leftover one is found through the script Secret that records it (the
        claim deletes the token first, so a script outlives its token, never the reverse).
        Tokens of claims from before this (labelled, in kube-system, with no such script)
        expire on their own.
        """
        out: list[LabelledSecret] = []
        listed = self._core.list_namespaced_secret(
            self._tenancy.worker_namespace,
            label_selector=f"{labels.SECRET_PURPOSE}={SCRIPT_PURPOSE}",
        )
        for secret in listed.items or []:
            meta = secret.metadata
            if meta is None or not meta.name or meta.deletion_timestamp:
                continue
            created = meta.creation_timestamp
            created_at = created if isinstance(created, datetime) else None
            claim = (meta.labels or {}).get(labels.NODECLAIM)
            claim_namespace = (meta.labels or {}).get(labels.NODEPOOL_NAMESPACE)
            out.append(
                LabelledSecret(
                    namespace=meta.namespace or self._tenancy.worker_namespace,
                    name=meta.name,
                    purpose=SecretPurpose.BOOTSTRAP_SCRIPT,
                    claim_name=claim,
                    claim_namespace=claim_namespace,
                    created_at=created_at,
                )
            )
            token = (meta.annotations or {}).get(labels.TOKEN_SECRET)
            if token:
                out.append(
                    LabelledSecret(
                        namespace=TOKEN_NAMESPACE,
                        name=token,
                        purpose=SecretPurpose.BOOTSTRAP_TOKEN,
                        claim_name=claim,
                        claim_namespace=claim_namespace,
                        created_at=created_at,
                        expires_at=_parse_time((meta.annotations or {}).get(labels.TOKEN_EXPIRES)),
                    )
                )
        return out

    # ---- remove --------------------------------------------------------------------------

    @activity.defn(name="remove_orphans")
    @heartbeats_itself
    def remove_orphans(self, input: RemoveOrphansInput) -> RemovalResult:
        result = RemovalResult()
        progress = {"doing": "starting"}
        with heartbeating(details=lambda: progress["doing"]):
            by_scope: dict[int, list[int]] = {}
            for i, orphan in enumerate(input.vms):
                by_scope.setdefault(orphan.vm.scope, []).append(i)
            for scope_index, members in by_scope.items():
                scope = input.scopes[scope_index]
                where = f"{scope.provider} (NodeClass {scope.namespace}/{scope.node_class_name})"
                try:
                    provider = self._provider(scope)
                except (ProviderError, ApplicationError, ApiException, KeyError) as exc:
                    result.errors.append(f"{where}: {_message(exc)}")
                    continue
                try:
                    self._remove_vms(
                        provider, [input.vms[i] for i in members], input, result, progress
                    )
                finally:
                    _close(provider)
            for stale in input.secrets:
                s = stale.secret
                progress["doing"] = f"deleting Secret {s.namespace}/{s.name}"
                try:
                    discard(
                        self._core.delete_namespaced_secret(
                            s.name, s.namespace, _preload_content=False
                        )
                    )
                except ApiException as exc:
                    if exc.status != 404:
                        result.errors.append(f"Secret {s.namespace}/{s.name}: {_message(exc)}")
                        continue
                log.info("orphan GC: deleted Secret %s/%s: %s", s.namespace, s.name, stale.reason)
                result.secrets_deleted.append(
                    RemovedSecret(
                        namespace=s.namespace,
                        name=s.name,
                        purpose=s.purpose,
                        claim_name=s.claim_name,
                        reason=stale.reason,
                    )
                )
        return result

    def _remove_vms(
        self,
        provider: Provider,
        orphans: list[OrphanVm],
        input: RemoveOrphansInput,
        result: RemovalResult,
        progress: dict[str, str],
    ) -> None:
        for orphan in orphans:
            progress["doing"] = f"deleting {orphan.vm.instance_id}"
            try:
                gone = self._delete_vm(provider, orphan.vm.instance_id, input)
            except ProviderError as exc:
                result.errors.append(f"{orphan.vm.instance_id}: {_message(exc)}")
                continue
            if not gone:
                result.vms_pending.append(orphan.vm.instance_id)
                continue
            log.info(
                "orphan GC: deleted VM %s (claim %s): %s",
                orphan.vm.instance_id,
                orphan.vm.claim_name,
                orphan.reason,
            )
            result.vms_deleted.append(
                RemovedVm(
                    instance_id=orphan.vm.instance_id,
                    provider=orphan.vm.provider,
                    claim_name=orphan.vm.claim_name,
                    reason=orphan.reason,
                )
            )

    @staticmethod
    def _delete_vm(provider: Provider, instance_id: str, input: RemoveOrphansInput) -> bool:
        """Ask for deletion and wait until the provider says the VM is gone (True)."""
        deadline = time.monotonic() + input.delete_timeout_s
        last_request = float("-inf")
        while True:
            if provider.get(instance_id) is None:
                return True
            if time.monotonic() >= deadline:
                return False
            if time.monotonic() - last_request >= _DELETE_REREQUEST_S:
                provider.delete(instance_id)
                last_request = time.monotonic()
            time.sleep(_DELETE_POLL_S if input.delete_timeout_s > 5 else 0.2)
