"""The CSR loop: list and watch CertificateSigningRequests, judge each one not yet approved or
denied (`cluster.certificates.judge`), approve it, or leave it pending with a Warning Event
saying why. A request is judged again at each re-list (every `resync_s`), since what it waits
for may come (a NodeClaim's VM recorded, its Node registered)."""

from __future__ import annotations

import base64
import binascii
import logging
import threading
from typing import Any, cast

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from api.events import KubeEvent, ObjectRef
from api.nodeclaim import NodeClaimPhase
from approver.watching import Obj, json_body, list_and_watch
from cluster.certificates import (
    CertificateVerdict,
    ClaimFacts,
    claim_token_group,
    judge,
    read_request,
)
from cluster.node_guard import claim_ended
from cluster.responses import discard
from observability.events import record_event

log = logging.getLogger(__name__)

GROUP, VERSION, NODECLAIMS = "cloudburst.io", "v1alpha1", "nodeclaims"
# A claim's join is under way in these phases: its kubelet asks for its first certificate.
LAUNCHING = frozenset({NodeClaimPhase.PENDING, NodeClaimPhase.PROVISIONING, NodeClaimPhase.JOINING})
APPROVAL_REASON = "CloudburstClaimVerified"
PENDING_REASON = "CertificateNotApproved"
# Events are recorded in this namespace for cluster-scoped objects, where kubectl finds them.
EVENTS_NAMESPACE = "default"


class CsrApprover:
    def __init__(
        self, api_client: k8s.ApiClient, *, max_expiration_seconds: int, resync_s: float = 30.0
    ) -> None:
        self._certificates = k8s.CertificatesV1Api(api_client)
        self._custom = k8s.CustomObjectsApi(api_client)
        self._core = k8s.CoreV1Api(api_client)
        self._max_expiration_seconds = max_expiration_seconds
        self._resync_s = resync_s

    def run(self, stop: threading.Event) -> None:
        list_and_watch(
            self._certificates.list_certificate_signing_request,
            self.consider,
            stop,
            resync_s=self._resync_s,
            what="CSR",
        )

    def consider(self, csr: Obj) -> CertificateVerdict | None:
        """Judge one request, unless it is decided already; approve it or say why not."""
        conditions = (csr.get("status") or {}).get("conditions") or []
        if any(c.get("type") in ("Approved", "Denied", "Failed") for c in conditions):
            return None
        verdict = self._judge(csr)
        metadata = csr.get("metadata") or {}
        name = str(metadata.get("name", ""))
        if verdict.approve:
            self._approve(csr, verdict)
            log.info("approved CSR %s: %s", name, verdict.message)
        else:
            log.info("left CSR %s pending (%s): %s", name, verdict.reason, verdict.message)
            record_event(
                self._core,
                KubeEvent(
                    regarding=ObjectRef(
                        kind="CertificateSigningRequest",
                        name=name,
                        api_version="certificates.k8s.io/v1",
                        uid=metadata.get("uid"),
                    ),
                    reason=PENDING_REASON,
                    message=f"{verdict.reason}: {verdict.message}",
                    type="Warning",
                ),
            )
        return verdict

    def _judge(self, csr: Obj) -> CertificateVerdict:
        spec = csr.get("spec") or {}
        try:
            pem = base64.b64decode(spec.get("request") or "")
        except (binascii.Error, TypeError):
            pem = b""
        read = read_request(str((csr.get("metadata") or {}).get("name", "")), spec, pem)
        if isinstance(read, CertificateVerdict):
            return read
        node = read.node_name
        claims = self._claims_named(node) if node else []
        return judge(read, claims, self._provider_id(node), self._max_expiration_seconds)

    def _claims_named(self, name: str) -> list[ClaimFacts]:
        found = json_body(
            self._custom.list_cluster_custom_object(
                GROUP,
                VERSION,
                NODECLAIMS,
                field_selector=f"metadata.name={name}",
                _preload_content=False,
            )
        )
        return [_claim_facts(item) for item in found.get("items", [])]

    def _provider_id(self, node: str | None) -> str | None:
        if not node:
            return None
        try:
            found = json_body(self._core.read_node(node, _preload_content=False))
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        provider_id = (found.get("spec") or {}).get("providerID")
        return str(provider_id) if provider_id else None

    def _approve(self, csr: Obj, verdict: CertificateVerdict) -> None:
        status = csr.setdefault("status", {})
        status["conditions"] = [
            *(status.get("conditions") or []),
            {
                "type": "Approved",
                "status": "True",
                "reason": APPROVAL_REASON,
                "message": verdict.message,
            },
        ]
        try:
            discard(
                self._certificates.replace_certificate_signing_request_approval(
                    csr["metadata"]["name"], cast(Any, csr), _preload_content=False
                )
            )
        except ApiException as err:
            # Changed meanwhile (another replica approved it): the next event judges it again.
            if err.status not in (404, 409):
                raise


def _claim_facts(item: dict[str, Any]) -> ClaimFacts:
    metadata = item.get("metadata") or {}
    status = item.get("status") or {}
    namespace, name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
    phase = status.get("phase") or NodeClaimPhase.PENDING
    return ClaimFacts(
        namespace=namespace,
        name=name,
        token_group=claim_token_group(namespace, name),
        deleting=bool(metadata.get("deletionTimestamp")),
        launching=phase in LAUNCHING,
        ended=claim_ended(phase),
        instance_id=status.get("instanceID"),
    )
