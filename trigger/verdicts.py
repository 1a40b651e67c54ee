"""Where a user looks when a NodePool or NodeClass is invalid: its status and its Events.

The trigger validates every NodePool and NodeClass it reads with the one model (api/). An
invalid one gets `ValidationSucceeded=False` and `Ready=False`, reason `InvalidSpec`, the
message naming each field, and a Warning Event `InvalidSpec` — once per change of verdict
(read back from the object, so a restarted trigger says nothing twice). A valid one gets
`ValidationSucceeded=True`; a NodeClass (nothing else writes its status) also `Ready=True`.
A NodePool's `Ready` is its workflow's to write (activities/mirror.py keeps the trigger's
conditions when it does).

A valid object this Cloudburst will not serve is refused the same way, with its own reason
(cluster/tenancy.py): `NamespaceNotServed` (its namespace is not one the operator lists)
or `EndpointNotAllowed` (a NodeClass endpoint override the operator does not allow).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from api.events import KubeEvent, ObjectRef
from api.nodepool import API_VERSION, READY, VALIDATION_SUCCEEDED
from cluster.tenancy import (
    ENDPOINT_NOT_ALLOWED,
    INVALID_SPEC,
    NAMESPACE_NOT_SERVED,
    NAMESPACE_SELECTOR_NOT_ALLOWED,
)
from observability.events import record_event

log = logging.getLogger(__name__)

GROUP, VERSION = "cloudburst.io", "v1alpha1"
# Every reason the trigger refuses an object with; a valid, served object clears them.
REFUSALS = frozenset(
    {INVALID_SPEC, NAMESPACE_NOT_SERVED, ENDPOINT_NOT_ALLOWED, NAMESPACE_SELECTOR_NOT_ALLOWED}
)
_KINDS = {"nodepools": "NodePool", "nodeclasses": "NodeClass"}
_CONFLICT_RETRIES = 5


class SpecVerdicts:
    def __init__(self, api_client: k8s.ApiClient) -> None:
        self._core = k8s.CoreV1Api(api_client)
        self._custom = k8s.CustomObjectsApi(api_client)

    def invalid(
        self, plural: str, raw: dict[str, Any], message: str, reason: str = INVALID_SPEC
    ) -> None:
        wanted = {
            VALIDATION_SUCCEEDED: ("False", reason, message),
            READY: ("False", reason, message),
        }
        if self._write(plural, raw, wanted):
            self._event(plural, raw, message, reason)

    def valid(self, plural: str, raw: dict[str, Any]) -> None:
        wanted = {VALIDATION_SUCCEEDED: ("True", "Valid", "")}
        current = _conditions(raw)
        ready = current.get(READY, {})
        if plural == "nodeclasses" or ready.get("reason") in REFUSALS:
            # A pool's workflow writes its own Ready; until then, no stale InvalidSpec.
            wanted[READY] = ("True", "Valid", "")
        self._write(plural, raw, wanted)

    def _write(
        self, plural: str, raw: dict[str, Any], wanted: dict[str, tuple[str, str, str]]
    ) -> bool:
        """Upsert the conditions (guarded by resourceVersion); False when already so."""
        namespace, name = _key(raw)
        obj = raw
        for _ in range(_CONFLICT_RETRIES):
            conditions = _conditions(obj)
            if all(_same(conditions.get(t), v) for t, v in wanted.items()):
                return False
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            merged = dict(conditions)
            for type_, (status, reason, message) in wanted.items():
                old = conditions.get(type_, {})
                changed = old.get("status") != status
                merged[type_] = {
                    "type": type_,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": now if changed else old.get("lastTransitionTime", now),
                }
            body = {
                "metadata": {"resourceVersion": obj["metadata"].get("resourceVersion")},
                "status": {**(obj.get("status") or {}), "conditions": list(merged.values())},
            }
            try:
                self._patch_status(plural, namespace, name, body)
                return True
            except ApiException as err:
                if err.status == 404:
                    return False
                if err.status != 409:
                    raise
            obj = self._read(plural, namespace, name)
        log.warning("%s %s/%s kept changing; its verdict is written later", plural, namespace, name)
        return False

    # One call per kind, with the plural written out: what tests/deploy reads for RBAC.
    def _patch_status(self, plural: str, namespace: str, name: str, body: Any) -> None:
        if plural == "nodepools":
            self._custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, "nodepools", name, body
            )
        else:
            self._custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, "nodeclasses", name, body
            )

    def _read(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        if plural == "nodepools":
            found = self._custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "nodepools", name
            )
        else:
            found = self._custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "nodeclasses", name
            )
        assert isinstance(found, dict)
        return found

    def _event(self, plural: str, raw: dict[str, Any], message: str, reason: str) -> None:
        namespace, name = _key(raw)
        event = KubeEvent(
            regarding=ObjectRef(
                kind=_KINDS[plural],
                name=name,
                namespace=namespace,
                uid=raw["metadata"].get("uid"),
                api_version=API_VERSION,
            ),
            reason=reason,
            message=message,
            type="Warning",
        )
        try:
            record_event(self._core, event)
        except Exception as err:  # an Event is a courtesy; the condition says it too
            log.warning("could not record %s for %s/%s: %s", reason, namespace, name, err)


def _key(raw: dict[str, Any]) -> tuple[str, str]:
    metadata = raw["metadata"]
    return metadata.get("namespace", "default"), metadata["name"]


def _conditions(raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    status = raw.get("status")
    listed = status.get("conditions") if isinstance(status, dict) else None
    return {
        c["type"]: c for c in listed or [] if isinstance(c, dict) and isinstance(c.get("type"), str)
    }


def _same(current: dict[str, Any] | None, wanted: tuple[str, str, str]) -> bool:
    if current is None:
        return False
    status, reason, message = wanted
    return (current.get("status"), current.get("reason"), current.get("message", "")) == (
        status,
        reason,
        message,
    )
