"""Fixtures for activity tests that talk to Kubernetes' own API server: the session's control
plane (`kube_control_plane`, tests/conftest.py), one a pytest session (an xdist worker).

Every test works in namespaces and on Nodes of its own (the control plane is shared with the
session's other tests): `namespace` is a fresh one, `unique` a suffix for names, and Nodes a
test makes are deleted after it (`made_nodes`).

- `kube_api_client` / `core`: cluster-admin (the control plane's `kubernetes-admin`).
- `worker_api_client`: the worker as deploy/ installs it, ServiceAccount `cloudburst-worker`
  with deploy/base/rbac.yaml's rights and nothing else; `serve_tenant(ns)` adds what
  `cloudburst tenant-rbac ns` grants it (get Secrets there).
- `audit`: the API server's audit log (who asked what), for the tests that count requests.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, utils
from kubernetes.client.exceptions import ApiException

from cli.commands.tenant_rbac import tenant_objects
from sim.controlplane.cluster import AuditRecord, KubernetesControlPlane
from sim.controlplane.pki import ClientIdentity
from worker.kube_client import kube_api_client as worker_kube_client
from worker.settings import Settings

WORKER_NAMESPACE = "cloudburst-system"
# Who `kube_api_client` is: the client certificate of the control plane's admin.kubeconfig.
ADMIN = "kubernetes-admin"
# The worker's ServiceAccount, as the API server names it (and RBAC subjects match it).
WORKER_USER = f"system:serviceaccount:{WORKER_NAMESPACE}:cloudburst-worker"
WORKER_GROUPS = ("system:serviceaccounts", f"system:serviceaccounts:{WORKER_NAMESPACE}")
RBAC = Path(__file__).resolve().parents[2] / "deploy" / "base" / "rbac.yaml"
# A request sent to find the end of the audit log: a read of a ConfigMap nobody makes.
AUDIT_MARKER = "audit-marker-"
# After the marker shows, what an earlier request's event may still take to be written.
AUDIT_SETTLE_S = 0.2


@pytest.fixture(scope="session")
def cluster(kube_control_plane: KubernetesControlPlane) -> KubernetesControlPlane:
    """The session's control plane, with the worker's namespace (for its script Secrets), as
    deploy/ installs it."""
    kube_control_plane.ensure_namespace(WORKER_NAMESPACE)
    return kube_control_plane


@pytest.fixture(scope="session")
def kube_api_client(cluster: KubernetesControlPlane) -> Iterator[client.ApiClient]:
    api = cluster.api_client()
    yield api
    api.close()


@pytest.fixture
def core(kube_api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube_api_client)


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    """`check()`'s first truthy value, asked every 50 ms until `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


def create_namespace(core: client.CoreV1Api, name: str) -> str:
    """Create a namespace and wait for its `default` ServiceAccount (the ServiceAccount
    admission plugin refuses every pod of a namespace until the controller has made it)."""
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))

    def has_service_account() -> bool:
        try:
            core.read_namespaced_service_account("default", name)
        except ApiException as err:
            if err.status != 404:
                raise
            return False
        return True

    wait_for(f"the default ServiceAccount of {name}", has_service_account)
    return name


@pytest.fixture
def namespace(core: client.CoreV1Api) -> str:
    """A fresh namespace per test, so PDBs and Secrets of one test never meet another's."""
    return create_namespace(core, f"t-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture
def made_nodes(core: client.CoreV1Api) -> Iterator[list[str]]:
    """Names of the Nodes a test made: deleted after it, so that no other test of the session
    finds them (a Node is cluster-wide: the scheduler, DaemonSets and node lists see it)."""
    names: list[str] = []
    yield names
    for name in names:
        try:
            core.delete_node(name)
        except ApiException as err:
            if err.status != 404:
                raise


# ---- the audit log -------------------------------------------------------------------------


class AuditLog:
    """The API server's audit log (`--audit-log-path`), as the tests count requests in it.

    Each event is written just after its response, so `since` first sends a request of its
    own (a marker) and reads until the marker's event shows, then a moment more; with `until`,
    it reads on (up to `timeout_s`) until what it found satisfies that too.
    """

    def __init__(self, plane: KubernetesControlPlane, api: client.ApiClient) -> None:
        self.plane = plane
        self.core = client.CoreV1Api(api)

    def mark(self) -> int:
        return self.plane.audit_mark()

    def since(
        self,
        mark: int,
        *,
        user: str = ADMIN,
        until: Callable[[list[AuditRecord]], bool] | None = None,
        timeout_s: float = 15.0,
    ) -> list[AuditRecord]:
        """The resource requests `user` made since `mark`, oldest first."""
        marker = f"{AUDIT_MARKER}{uuid.uuid4().hex[:12]}"
        try:
            self.core.read_namespaced_config_map(marker, "default")
        except ApiException as err:
            if err.status != 404:
                raise
        deadline = time.monotonic() + timeout_s
        marked_at: float | None = None
        while True:
            records = self.plane.audit(after=mark)
            now = time.monotonic()
            if marked_at is None and any(r.name == marker for r in records):
                marked_at = now
            found = [
                r
                for r in records
                if r.user == user
                and not (r.resource == "configmaps" and r.name.startswith(AUDIT_MARKER))
            ]
            settled = marked_at is not None and now - marked_at >= AUDIT_SETTLE_S
            if settled and (until is None or until(found)):
                return found
            if now > deadline:
                if marked_at is None:
                    raise AssertionError(f"the audit log never showed the marker {marker}")
                return found
            time.sleep(0.05)


@pytest.fixture
def audit(cluster: KubernetesControlPlane, kube_api_client: client.ApiClient) -> AuditLog:
    return AuditLog(cluster, kube_api_client)


# ---- identities and their rights -----------------------------------------------------------


def identity_client(
    plane: KubernetesControlPlane, name: str, user: str, groups: Iterable[str] = ()
) -> client.ApiClient:
    """A client as `user` (a client certificate the cluster CA signed), loaded the way the
    worker loads its kubeconfig."""
    path = plane.write_identity_kubeconfig(name, ClientIdentity(user, tuple(groups)))
    return worker_kube_client(Settings(kubeconfig=path))


def kubectl_apply(plane: KubernetesControlPlane, manifest: Path) -> None:
    done = subprocess.run(
        [
            str(plane.kubectl),
            f"--kubeconfig={plane.admin_kubeconfig}",
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=tests-activities",
            "-f",
            str(manifest),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def allowed(
    api: client.ApiClient,
    user: str,
    groups: Iterable[str],
    verb: str,
    resource: str,
    namespace: str | None,
    *,
    group: str = "",
    subresource: str | None = None,
) -> bool:
    """What the API server's authorizer answers for `user` (a SubjectAccessReview)."""
    review = client.AuthorizationV1Api(api).create_subject_access_review(
        client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=user,
                groups=[*groups, "system:authenticated"],
                resource_attributes=client.V1ResourceAttributes(
                    verb=verb,
                    group=group,
                    resource=resource,
                    subresource=subresource,
                    namespace=namespace,
                ),
            )
        )
    )
    return bool(review.status and review.status.allowed)


def wait_until_allowed(
    api: client.ApiClient,
    user: str,
    groups: Iterable[str],
    verb: str,
    resource: str,
    namespace: str | None,
) -> None:
    """RBAC objects take effect once the authorizer's caches have them: wait for that."""
    groups = tuple(groups)
    wait_for(
        f"{user} may {verb} {resource} in {namespace}",
        lambda: allowed(api, user, groups, verb, resource, namespace),
    )


@pytest.fixture(scope="session")
def worker_rbac(cluster: KubernetesControlPlane, kube_api_client: client.ApiClient) -> None:
    """deploy/base/rbac.yaml, applied as an operator applies it."""
    kubectl_apply(cluster, RBAC)
    for verb, resource, namespace in (
        ("create", "secrets", "kube-system"),
        ("get", "secrets", WORKER_NAMESPACE),
        ("get", "nodes", None),
    ):
        wait_until_allowed(kube_api_client, WORKER_USER, WORKER_GROUPS, verb, resource, namespace)


@pytest.fixture(scope="session")
def worker_api_client(
    cluster: KubernetesControlPlane, worker_rbac: None
) -> Iterator[client.ApiClient]:
    """The worker: ServiceAccount cloudburst-worker, with what deploy/base/rbac.yaml grants it
    (its client certificate names the user and groups its token would)."""
    api = identity_client(cluster, "activities-worker", WORKER_USER, WORKER_GROUPS)
    yield api
    api.close()


@pytest.fixture
def serve_tenant(kube_api_client: client.ApiClient) -> Callable[[str], None]:
    """Grant the worker what `cloudburst tenant-rbac <namespace>` prints for a namespace it
    serves: its Role and RoleBinding (get Secrets there). The Namespace's annotations, for pod
    admission, are left out: no test here runs a tenant's pods."""

    def serve(namespace: str) -> None:
        for obj in tenant_objects([namespace]):
            if obj["kind"] in ("Role", "RoleBinding"):
                utils.create_from_dict(kube_api_client, obj)
        wait_until_allowed(kube_api_client, WORKER_USER, WORKER_GROUPS, "get", "secrets", namespace)

    return serve
