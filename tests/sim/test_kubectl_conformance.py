"""kubectl against the emulator: what a user types, what they see (exit code and output).

Each test runs real kubectl binaries (the one in the venv, and the system's when there is one:
two client versions) against an emulator this module starts, with the simulated
controller-manager (sim/controllers.py) and a stand-in kubelet that runs every pod at once
(Running and Ready). Every command is one a user of `cloudburst dev` would type.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from sim.controllers import Controllers
from sim.kubeapi import KubeApiServer

REPO = Path(__file__).resolve().parents[2]
DR_EXAMPLE = Path("/work/shared/examples/dr-example.yaml")
VENV_KUBECTL = Path(sys.executable).with_name("kubectl")
GROUP, VERSION = "cloudburst.io", "v1alpha1"


def _binaries() -> list[Any]:
    found: list[Any] = []
    if VENV_KUBECTL.exists():
        found.append(pytest.param(str(VENV_KUBECTL), id="venv-kubectl"))
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(directory) / "kubectl"
        if candidate.exists() and candidate.resolve() != VENV_KUBECTL.resolve():
            found.append(pytest.param(str(candidate), id="system-kubectl"))
            break
    return found or [pytest.param("", marks=pytest.mark.skip(reason="no kubectl"))]


class Kubectl:
    """One kubectl binary pointed at the emulator, with its own HOME (discovery cache)."""

    def __init__(self, binary: str, kubeconfig: Path, home: Path) -> None:
        self.binary = binary
        self.env = dict(os.environ, KUBECONFIG=str(kubeconfig), HOME=str(home))
        self.env.pop("KUBECTL_EXTERNAL_DIFF", None)

    def __call__(
        self, *args: str, stdin: str | None = None, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binary, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            cwd=REPO,
        )

    def ok(self, *args: str, stdin: str | None = None, timeout: float = 30) -> str:
        done = self(*args, stdin=stdin, timeout=timeout)
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}{done.stdout}"
        return done.stdout

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [self.binary, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=REPO,
        )


class _Kubelet:
    """The node agent of a one-node cluster: every pod runs at once, Ready."""

    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            # A failed tick is retried by the next; the tests assert on kubectl only.
            with contextlib.suppress(Exception):
                self.tick()
            self.stop.wait(0.1)

    def tick(self) -> None:
        raw: Any = self.core.list_pod_for_all_namespaces(
            field_selector="status.phase=Pending", _preload_content=False
        )
        for pod in json.loads(raw.data)["items"]:
            md = pod["metadata"]
            if md.get("deletionTimestamp"):
                continue
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            containers = [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                }
                for c in pod["spec"].get("containers") or []
            ]
            status = {
                "phase": "Running",
                "podIP": "10.244.0.9",
                "conditions": [
                    {"type": t, "status": "True", "lastTransitionTime": now}
                    for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
                ],
                "containerStatuses": containers,
            }
            self.core.patch_namespaced_pod_status(
                md["name"],
                md["namespace"],
                {"status": status},
                _content_type="application/merge-patch+json",
            )


@pytest.fixture(scope="module", params=_binaries())
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[KubeApiServer, Kubectl, client.ApiClient]]:
    tmp = tmp_path_factory.mktemp("kubectl")
    server = KubeApiServer()
    server.start()
    api = server.api_client()
    controllers = Controllers(server.api_client(), poll_s=0.1)
    controllers.start()
    kubelet = _Kubelet(server.api_client())
    kubelet.thread.start()
    kubectl = Kubectl(request.param, server.write_kubeconfig(tmp / "kubeconfig"), tmp)
    yield server, kubectl, api
    kubelet.stop.set()
    controllers.stop()
    server.stop()


@pytest.fixture
def kubectl(cluster: tuple[KubeApiServer, Kubectl, client.ApiClient]) -> Kubectl:
    return cluster[1]


@pytest.fixture
def server(cluster: tuple[KubeApiServer, Kubectl, client.ApiClient]) -> KubeApiServer:
    return cluster[0]


@pytest.fixture
def api(cluster: tuple[KubeApiServer, Kubectl, client.ApiClient]) -> client.ApiClient:
    return cluster[2]


def _rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


def _nodeclaim(name: str, finalizers: list[str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeClaim",
        "metadata": {"name": name, "namespace": "default", "finalizers": finalizers or []},
        "spec": {
            "nodePool": "dr-nodepool",
            "nodeClass": "dr-nodeclass",
            "offerings": [{"provider": "hetzner", "region": "fsn1", "instanceType": "cx22"}],
        },
    }


# ---- apply / create without flags -----------------------------------------------------------


def test_apply_the_disaster_recovery_example(kubectl: Kubectl) -> None:
    if not DR_EXAMPLE.exists():
        pytest.skip(f"{DR_EXAMPLE} is absent")
    out = kubectl.ok("apply", "-f", str(DR_EXAMPLE))
    assert out.splitlines() == [
        "nodepool.cloudburst.io/dr-nodepool created",
        "nodeclass.cloudburst.io/dr-nodeclass created",
        "deployment.apps/dr-workload created",
    ]
    again = kubectl.ok("apply", "-f", str(DR_EXAMPLE))
    assert "nodepool.cloudburst.io/dr-nodepool unchanged" in again
    assert "deployment.apps/dr-workload unchanged" in again
    rows = _rows(kubectl.ok("get", "-f", str(DR_EXAMPLE)))
    assert rows[0] == ["NAME", "NODES", "READY", "CPU", "MEMORY", "LIMIT", "AGE"]
    assert rows[1][0] == "nodepool.cloudburst.io/dr-nodepool" and rows[1][1] == "2"
    assert rows[3] == ["NAME", "API", "SERVER", "AGE"]  # the column is "API Server"
    assert rows[4][:2] == ["nodeclass.cloudburst.io/dr-nodeclass", "https://100.64.0.1:6443"]


_FILES = """
apiVersion: v1
kind: Service
metadata: {name: files, namespace: default}
spec:
  selector: {app: files}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: files, namespace: default}
data: {a: "1"}
"""
_TYPO = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: typo, namespace: default}
spec:
  replica: 2
  selector: {matchLabels: {app: typo}}
  template:
    metadata: {labels: {app: typo}}
    spec: {containers: [{name: app, image: nginx}]}
"""


def test_create_and_apply_files_are_checked_like_a_real_server(kubectl: Kubectl) -> None:
    out = kubectl.ok("create", "-f", "-", stdin=_FILES)
    assert out.splitlines() == ["service/files created", "configmap/files created"]
    rows = _rows(kubectl.ok("get", "svc", "files"))
    assert rows[1][1] == "ClusterIP" and rows[1][2].startswith("10.96.")
    assert rows[1][4] == "80/TCP"
    # kubectl sends fieldValidation=Strict: a misspelt field of a built-in kind is refused.
    done = kubectl("apply", "-f", "-", stdin=_TYPO)
    assert done.returncode == 1
    assert (
        'Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: '
        'unknown field "spec.replica"' in done.stderr
    )
    assert kubectl("get", "deploy", "typo").returncode == 1


def test_create_namespace_configmap_secret_deployment(kubectl: Kubectl) -> None:
    assert kubectl.ok("create", "namespace", "team-a").strip() == "namespace/team-a created"
    out = kubectl.ok("-n", "team-a", "create", "configmap", "settings", "--from-literal=mode=fast")
    assert out.strip() == "configmap/settings created"
    out = kubectl.ok("-n", "team-a", "create", "secret", "generic", "token", "--from-literal=t=s3")
    assert out.strip() == "secret/token created"
    out = kubectl.ok("-n", "team-a", "create", "deployment", "web", "--image=nginx:1.27")
    assert out.strip() == "deployment.apps/web created"
    assert kubectl.ok("-n", "team-a", "get", "cm", "settings", "-o", "jsonpath={.data.mode}") == (
        "fast"
    )
    secret = kubectl.ok("-n", "team-a", "get", "secret", "token", "-o", "jsonpath={.data.t}")
    assert secret == "czM="
    image = "jsonpath={.spec.template.spec.containers[0].image}"
    assert kubectl.ok("-n", "team-a", "get", "deploy", "web", "-o", image) == "nginx:1.27"
    # Every namespace gets its default ServiceAccount.
    assert kubectl.ok("-n", "team-a", "get", "sa", "default", "-o", "name") == (
        "serviceaccount/default\n"
    )


def test_apply_the_dev_overlay(kubectl: Kubectl) -> None:
    out = kubectl.ok("apply", "-k", "deploy/overlays/dev")
    lines = set(out.splitlines())
    assert "namespace/cloudburst-system created" in lines
    assert "deployment.apps/cloudburst-worker created" in lines
    assert "clusterrole.rbac.authorization.k8s.io/cloudburst-worker created" in lines
    assert "configmap/cloudburst-config created" in lines
    assert "service/temporal-dev created" in lines
    # The codec-server component: the UI's compressed payloads as JSON.
    assert "deployment.apps/cloudburst-codec-server created" in lines
    assert "service/cloudburst-codec-server created" in lines
    assert "customresourcedefinition.apiextensions.k8s.io/nodepools.cloudburst.io configured" in (
        lines
    )
    again = kubectl.ok("apply", "-k", "deploy/overlays/dev")
    assert "deployment.apps/cloudburst-worker unchanged" in again
    assert "customresourcedefinition.apiextensions.k8s.io/nodepools.cloudburst.io unchanged" in (
        again
    )
    address = "jsonpath={.data.CLOUDBURST_TEMPORAL_ADDRESS}"
    assert kubectl.ok(
        "-n", "cloudburst-system", "get", "cm", "cloudburst-config", "-o", address
    ) == ("temporal-dev.cloudburst-system.svc:7233")


# ---- get, with the server's columns -----------------------------------------------------


def test_get_nodepools_and_nodeclaims_with_their_printer_columns(
    kubectl: Kubectl, api: client.ApiClient
) -> None:
    if not DR_EXAMPLE.exists():
        kubectl.ok("apply", "-f", "-", stdin=json.dumps(_pool()))
    custom: Any = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", "nodeclaims", _nodeclaim("c1")
    )
    status = {"phase": "Ready", "provider": "hetzner", "region": "fsn1", "instanceType": "cx22"}
    custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", "nodeclaims", "c1", {"status": status}
    )
    rows = _rows(kubectl.ok("get", "nodepools,nodeclaims"))
    assert rows[0] == ["NAME", "NODES", "READY", "CPU", "MEMORY", "LIMIT", "AGE"]
    assert rows[1][0] == "nodepool.cloudburst.io/dr-nodepool" and rows[1][1] == "2"
    assert rows[3] == ["NAME", "NODEPOOL", "PROVIDER", "REGION", "INSTANCE", "PHASE", "AGE"]
    assert rows[4][:6] == [
        "nodeclaim.cloudburst.io/c1",
        "dr-nodepool",
        "hetzner",
        "fsn1",
        "cx22",
        "Ready",
    ]
    # The short name and the CRDs' category resolve too.
    assert _rows(kubectl.ok("get", "cbclaim"))[1][0] == "c1"
    kinds = {row[0].split("/")[0] for row in _rows(kubectl.ok("get", "cloudburst")) if row}
    assert {"nodepool.cloudburst.io", "nodeclaim.cloudburst.io"} <= kinds


def _pool() -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodePool",
        "metadata": {"name": "dr-nodepool", "namespace": "default"},
        "spec": {"limits": {"maxNodes": 2}},
    }


def test_get_built_ins_by_short_names_with_their_columns(kubectl: Kubectl) -> None:
    kubectl.ok("create", "deployment", "short", "--image=nginx")
    kubectl.ok("rollout", "status", "deployment/short", "--timeout=20s")
    out = kubectl.ok("get", "no,po,deploy,svc", "-l", "app=short")
    assert "deployment.apps/short   1/1     1            1" in out
    pods = [row for row in _rows(out) if row and row[0].startswith("pod/short-")]
    assert len(pods) == 1 and pods[0][1:4] == ["1/1", "Running", "0"]
    services = _rows(kubectl.ok("get", "svc", "kubernetes"))
    assert services == [
        ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"],
        ["kubernetes", "ClusterIP", "10.96.0.1", "<none>", "443/TCP", services[1][5]],
    ]


def test_get_all(kubectl: Kubectl) -> None:
    kubectl.ok("create", "deployment", "everything", "--image=nginx")
    kubectl.ok("rollout", "status", "deployment/everything", "--timeout=20s")
    out = kubectl.ok("get", "all")
    assert "service/kubernetes" in out
    assert "deployment.apps/everything" in out
    assert "replicaset.apps/everything-" in out
    assert "pod/everything-" in out


# ---- delete waits for the deletion (watch-list) ------------------------------------------


def test_delete_nodeclaim_returns_once_its_finalizer_is_gone(
    kubectl: Kubectl, api: client.ApiClient
) -> None:
    custom: Any = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", "nodeclaims", _nodeclaim("plain")
    )
    started = time.monotonic()
    done = kubectl("delete", "nodeclaim", "plain", timeout=10)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('nodeclaim.cloudburst.io "plain" deleted')
    assert time.monotonic() - started < 5

    custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", "nodeclaims", _nodeclaim("held", ["cloudburst.io/vm"])
    )
    deleting = kubectl.popen("delete", "nodeclaim", "held")
    time.sleep(1.0)
    assert deleting.poll() is None  # waiting for the finalizer
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", "nodeclaims", "held", {"metadata": {"finalizers": None}}
    )
    out, err = deleting.communicate(timeout=10)
    assert deleting.returncode == 0, err
    assert out.startswith('nodeclaim.cloudburst.io "held" deleted')


def test_wait_for_ready_nodes(kubectl: Kubectl, api: client.ApiClient) -> None:
    core: Any = client.CoreV1Api(api)
    core.create_node({"metadata": {"name": "n1"}})
    waiting = kubectl.popen("wait", "--for=condition=Ready", "node", "--all", "--timeout=20s")
    time.sleep(0.5)
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}
    core.patch_node_status("n1", {"status": {"conditions": [ready]}})
    out, err = waiting.communicate(timeout=20)
    assert waiting.returncode == 0, err
    assert out.strip() == "node/n1 condition met"


# ---- scale and rollout ----------------------------------------------------------------------


def test_scale_and_rollout_status(kubectl: Kubectl) -> None:
    kubectl.ok("create", "deployment", "web", "--image=nginx:1", "--replicas=1")
    out = kubectl.ok("rollout", "status", "deployment/web", "--timeout=20s")
    assert out.strip().endswith('deployment "web" successfully rolled out')
    assert kubectl.ok("scale", "deployment/web", "--replicas=3").strip() == (
        "deployment.apps/web scaled"
    )
    out = kubectl.ok("rollout", "status", "deployment/web", "--timeout=20s")
    assert out.strip().endswith('deployment "web" successfully rolled out')
    rows = _rows(kubectl.ok("get", "deploy", "web"))
    assert rows[1][:4] == ["web", "3/3", "3", "3"]
    kubectl.ok("set", "image", "deployment/web", "nginx=nginx:2")
    out = kubectl.ok("rollout", "status", "deployment/web", "--timeout=20s")
    assert out.strip().endswith('deployment "web" successfully rolled out')
    replicasets = _rows(kubectl.ok("get", "rs", "-l", "app=web"))
    assert sorted(row[1] for row in replicasets[1:]) == ["0", "3"]


# ---- explain, auth ------------------------------------------------------------------------


def test_explain(kubectl: Kubectl) -> None:
    out = kubectl.ok("explain", "nodepool.spec.disruption")
    assert "KIND:       NodePool" in out and "FIELD: disruption <Object>" in out
    assert "budgets" in out
    out = kubectl.ok("explain", "deployment.spec.strategy")
    assert "FIELD: strategy <DeploymentStrategy>" in out and "rollingUpdate" in out


def test_auth_can_i(kubectl: Kubectl, server: KubeApiServer) -> None:
    done = kubectl("auth", "can-i", "create", "pods")
    assert (done.returncode, done.stdout.strip()) == (0, "yes")
    server.forbid("create", "pods", "default")
    try:
        done = kubectl("auth", "can-i", "create", "pods")
        assert (done.returncode, done.stdout.strip()) == (1, "no")
    finally:
        server.allow_all()


# ---- server-side apply ---------------------------------------------------------------------

_SSA = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: applied
  namespace: default
spec:
  replicas: 2
  selector: {matchLabels: {app: applied}}
  template:
    metadata: {labels: {app: applied}}
    spec:
      containers:
      - name: app
        image: nginx:1
"""


def test_server_side_apply(kubectl: Kubectl) -> None:
    out = kubectl.ok("apply", "--server-side", "-f", "-", stdin=_SSA)
    assert out.strip() == "deployment.apps/applied serverside-applied"
    out = kubectl.ok("apply", "--server-side", "-f", "-", stdin=_SSA)
    assert out.strip() == "deployment.apps/applied serverside-applied"
    kubectl.ok("scale", "deployment/applied", "--replicas=4")
    done = kubectl("apply", "--server-side", "-f", "-", stdin=_SSA)
    assert done.returncode == 1
    assert (
        'error: Apply failed with 1 conflict: conflict with "kubectl" with subresource "scale" '
        "using apps/v1 at " in done.stderr
    )
    assert done.stderr.splitlines()[0].endswith(": .spec.replicas")
    out = kubectl.ok("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=_SSA)
    assert out.strip() == "deployment.apps/applied serverside-applied"
    assert kubectl.ok("get", "deploy", "applied", "-o", "jsonpath={.spec.replicas}") == "2"
    managers = json.loads(
        kubectl.ok("get", "deploy", "applied", "-o", "json", "--show-managed-fields")
    )["metadata"]["managedFields"]
    # The scale's manager lost .spec.replicas to the forced apply and is gone; the
    # controller-manager keeps what it writes (status, the revision annotation).
    entries = {(m["manager"], m["operation"], m.get("subresource", "")) for m in managers}
    assert ("kubectl", "Apply", "") in entries
    assert {e for e in entries if e[0] == "kubectl"} == {("kubectl", "Apply", "")}
    # A field the manager stops applying is removed.
    trimmed = _SSA.replace("  replicas: 2\n", "")
    kubectl.ok("apply", "--server-side", "-f", "-", stdin=trimmed.replace("nginx:1", "nginx:2"))
    image = "jsonpath={.spec.template.spec.containers[0].image}"
    assert kubectl.ok("get", "deploy", "applied", "-o", image) == "nginx:2"


def test_server_side_apply_takes_over_from_client_side_apply(kubectl: Kubectl) -> None:
    manifest = _SSA.replace("name: applied", "name: migrated").replace("app: applied", "app: m")
    assert kubectl.ok("apply", "-f", "-", stdin=manifest).strip() == (
        "deployment.apps/migrated created"
    )
    changed = manifest.replace("nginx:1", "nginx:3")
    out = kubectl.ok("apply", "--server-side", "-f", "-", stdin=changed)
    assert out.strip() == "deployment.apps/migrated serverside-applied"
    image = "jsonpath={.spec.template.spec.containers[0].image}"
    assert kubectl.ok("get", "deploy", "migrated", "-o", image) == "nginx:3"


_UNSELECTED = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: mismatched}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: other, tier: front}}
    spec: {containers: [{name: web, image: "nginx:1.27"}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: unselected}
spec:
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: "nginx:1.27"}]}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: everything}
spec:
  serviceName: everything
  selector: {matchLabels: {}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: "postgres:17"}]}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: matching}
spec:
  selector:
    matchExpressions: [{key: app, operator: In, values: [web, api]}]
  template:
    metadata: {labels: {app: api}}
    spec: {containers: [{name: api, image: "nginx:1.27"}]}
"""


def test_a_workload_whose_selector_misses_its_pods_is_refused(kubectl: Kubectl) -> None:
    # Its controller would make pods it never counts as its own, without end.
    done = kubectl("apply", "-f", "-", stdin=_UNSELECTED)
    assert done.returncode == 1
    mismatch = "`selector` does not match template `labels`"
    assert (
        'Deployment.apps "mismatched" is invalid: spec.template.metadata.labels: Invalid value: '
        f'map[string]string{{"app":"other", "tier":"front"}}: {mismatch}'
    ) in done.stderr
    assert (
        'Deployment.apps "unselected" is invalid: [spec.selector: Required value, '
        f'spec.template.metadata.labels: Invalid value: map[string]string{{"app":"web"}}: {mismatch}]'
    ) in done.stderr
    assert (
        'StatefulSet.apps "everything" is invalid: spec.selector: Invalid value: '
        "v1.LabelSelector{MatchLabels:map[string]string{}, "
        "MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for "
        "statefulset"
    ) in done.stderr
    assert done.stdout.strip() == "replicaset.apps/matching created"
    for kind, name in (("deploy", "mismatched"), ("deploy", "unselected"), ("sts", "everything")):
        assert kubectl("get", kind, name).returncode == 1


_BAD_EXPRESSIONS = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: equals}
spec:
  selector:
    matchExpressions: [{key: app, operator: Equals, values: [web]}]
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: "nginx:1.27"}]}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: in-nothing}
spec:
  selector:
    matchExpressions: [{key: app, operator: In}]
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: "nginx:1.27"}]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: exists-valued}
spec:
  selector:
    matchExpressions: [{key: app, operator: Exists, values: [web]}]
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: agent, image: "busybox:1.37"}]}
"""


def test_a_selector_expression_the_server_cannot_build_is_refused(kubectl: Kubectl) -> None:
    done = kubectl("apply", "-f", "-", stdin=_BAD_EXPRESSIONS)
    assert done.returncode == 1
    expression = "spec.selector.matchExpressions[0]"
    assert (
        f'Deployment.apps "equals" is invalid: [{expression}.operator: Invalid value: "Equals": '
        "not a valid selector operator, spec.selector: Invalid value: "
        "v1.LabelSelector{MatchLabels:map[string]string(nil), "
        "MatchExpressions:[]v1.LabelSelectorRequirement{v1.LabelSelectorRequirement"
        '{Key:"app", Operator:"Equals", Values:[]string{"web"}}}}: invalid label selector]'
    ) in done.stderr
    assert (
        f'ReplicaSet.apps "in-nothing" is invalid: [{expression}.values: Required value: '
        "must be specified when `operator` is 'In' or 'NotIn', spec.selector: Invalid value: "
    ) in done.stderr
    assert (
        f'DaemonSet.apps "exists-valued" is invalid: {expression}.values: Forbidden: '
        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
    ) in done.stderr
    for kind, name in (("deploy", "equals"), ("rs", "in-nothing"), ("ds", "exists-valued")):
        assert kubectl("get", kind, name).returncode == 1


_SELECTED = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: reselected}
spec:
  replicas: 0
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: "nginx:1.27"}]}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: renamed}
spec:
  replicas: 0
  serviceName: db
  podManagementPolicy: OrderedReady
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: "postgres:17"}]}
"""


def test_a_workloads_selector_and_a_statefulsets_identity_cannot_change(
    kubectl: Kubectl,
) -> None:
    kubectl.ok("apply", "-f", "-", stdin=_SELECTED)
    changed = _SELECTED.replace("app: web", "app: web2").replace(
        "serviceName: db", "serviceName: db2"
    )

    done = kubectl("apply", "-f", "-", stdin=changed)

    assert done.returncode == 1
    assert (
        'Deployment.apps "reselected" is invalid: spec.selector: Invalid value: '
        'v1.LabelSelector{MatchLabels:map[string]string{"app":"web2"}, '
        "MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"
    ) in done.stderr
    assert (
        'StatefulSet.apps "renamed" is invalid: spec: Forbidden: updates to statefulset spec for '
        "fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', "
        "'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' "
        "are forbidden"
    ) in done.stderr
    # What may change still does; a default left out is no change.
    scaled = _SELECTED.replace("replicas: 0", "replicas: 2").replace(
        "  podManagementPolicy: OrderedReady\n", ""
    )
    assert kubectl.ok("apply", "-f", "-", stdin=scaled).split() == [
        "deployment.apps/reselected",
        "configured",
        "statefulset.apps/renamed",
        "configured",
    ]


_QUALIFIED = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_LABEL_VALUE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
_BAD_METADATA = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: bad-label-key
  labels: {"team name": platform}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: bad-label-value
  labels: {team: "platform/core"}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: bad-annotation
  annotations: {"Example.COM/": x}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: ownerless
  ownerReferences: [{apiVersion: cloudburst.io/v1alpha1, kind: NodePool, name: burst}]
---
apiVersion: cloudburst.io/v1alpha1
kind: NodePool
metadata:
  name: Bad_Pool
spec: {nodeClassRef: default}
---
apiVersion: cloudburst.io/v1alpha1
kind: NodePool
metadata:
  name: labelled
  labels: {"-tier": burst}
spec: {nodeClassRef: default}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: badly-selected}
spec:
  selector:
    matchLabels: {"app!": web}
    matchExpressions: [{key: tier, operator: In, values: ["front end"]}]
  template:
    metadata: {labels: {"app!": web}}
    spec: {containers: [{name: web, image: "nginx:1.27"}]}
"""


def test_label_annotation_and_owner_formats_are_checked_like_a_real_server(
    kubectl: Kubectl,
) -> None:
    """Every kind's metadata, a custom resource's too, and a workload's selector."""
    done = kubectl("apply", "-f", "-", stdin=_BAD_METADATA)

    assert done.returncode == 1
    errors = done.stderr
    assert (
        'ConfigMap "bad-label-key" is invalid: metadata.labels: Invalid value: "team name": '
        f"name part {_QUALIFIED}"
    ) in errors
    assert (
        'ConfigMap "bad-label-value" is invalid: metadata.labels: Invalid value: '
        f'"platform/core": {_LABEL_VALUE}'
    ) in errors
    # An empty name part also fails the name's pattern: both are said.
    assert (
        'ConfigMap "bad-annotation" is invalid: [metadata.annotations: Invalid value: '
        '"Example.COM/": name part must be non-empty, metadata.annotations: Invalid value: '
        f'"Example.COM/": name part {_QUALIFIED}]'
    ) in errors
    assert (
        'ConfigMap "ownerless" is invalid: metadata.ownerReferences.uid: Invalid value: "": '
        "uid must not be empty"
    ) in errors
    assert (
        'NodePool.cloudburst.io "Bad_Pool" is invalid: metadata.name: Invalid value: '
        '"Bad_Pool": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric '
        "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
        "'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    ) in errors
    assert (
        'NodePool.cloudburst.io "labelled" is invalid: metadata.labels: Invalid value: '
        f'"-tier": name part {_QUALIFIED}'
    ) in errors
    assert (
        'Deployment.apps "badly-selected" is invalid: [spec.selector.matchLabels: Invalid '
        f'value: "app!": name part {_QUALIFIED}, '
        'spec.selector.matchExpressions[0].values[0]: Invalid value: "front end": '
        f"{_LABEL_VALUE}, spec.selector: Invalid value: "
    ) in errors
    assert "invalid label selector]" in errors
    assert kubectl.ok("get", "configmaps", "-o", "name").count("bad-") == 0
    assert "labelled" not in kubectl.ok("get", "nodepools", "-o", "name")


def test_well_formed_labels_annotations_and_owners_are_taken(kubectl: Kubectl) -> None:
    fine = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: well-labelled
  labels: {"app.kubernetes.io/name": web, tier: "", "v1.2_x": "A-b.c_9"}
  annotations: {"Example.com/Note": "anything at all / here", kubectl.kubernetes.io/x: ""}
  ownerReferences:
  - {apiVersion: v1, kind: Namespace, name: default, uid: 0b7e5f2c-1d9e-4a35-a9f1-5c3b3b0f8e11}
"""
    assert kubectl.ok("apply", "-f", "-", stdin=fine).split() == [
        "configmap/well-labelled",
        "created",
    ]
