"""The join contract end to end: the script `prepare_bootstrap` renders joins Kubernetes' own
control plane as `kubeadm join` would (token discovery, TLS bootstrap through a CSR, the Node
registered as `system:node:<name>`), the node registers with the startup taint, and
`label_node` lifts it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from temporalio.testing import ActivityEnvironment

from activities.bootstrap import BootstrapActivities, read_user_data
from activities.kube import STARTUP_TAINT, KubeActivities
from activities.providers.base import instance_id
from api import labels
from api.messages import BootstrapInput, LabelNodeInput
from api.nodeclaim import Offering
from api.nodeclass import NodeClassSpec
from api.nodepool import Taint
from cluster.tenancy import Tenancy
from sim.cloud import FakeCloud
from sim.controlplane.cluster import KubernetesControlPlane
from sim.controlplane.joining import JoiningKubelets
from sim.tailscale import TailnetStandin
from tests.activities.claims import AuthorisedClaim, authorise_claim, run_bootstrap

STARTUP = {"key": STARTUP_TAINT, "value": "true", "effect": "NoSchedule"}


def run(fn: Any, arg: Any) -> Any:
    return ActivityEnvironment().run(fn, arg)


def wait_for(fn: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting; last value {value!r}")
        time.sleep(0.05)


def taints_of(core: client.CoreV1Api, name: str) -> list[dict[str, Any]]:
    """The Node's taints but those Kubernetes' node lifecycle controller puts on and takes off
    by itself (`node.kubernetes.io/not-ready` while a joined kubelet is not Ready yet)."""
    node = core.read_node(name)
    return [
        {k: v for k, v in (("key", t.key), ("value", t.value), ("effect", t.effect)) if v}
        for t in (node.spec.taints or [])
        if not t.key.startswith("node.kubernetes.io/")
    ]


# --- label_node and the startup taint ------------------------------------------------------


@pytest.fixture
def kube_acts(kube_api_client: client.ApiClient) -> KubeActivities:
    return KubeActivities(kube_api_client, Tenancy())


@pytest.fixture
def make_node(
    core: client.CoreV1Api, made_nodes: list[str]
) -> Callable[[str, list[dict[str, str]]], None]:
    return lambda name, taints: register_node(core, made_nodes, name, taints)


def register_node(
    core: client.CoreV1Api, made_nodes: list[str], name: str, taints: list[dict[str, str]]
) -> None:
    """A node as the claim `name`'s VM (`fake/sim-1/<name>`, `labelled`) registers it."""
    made_nodes.append(name)
    core.create_node(
        client.V1Node(
            metadata=client.V1ObjectMeta(name=name, labels={"existing": "yes"}),
            spec=client.V1NodeSpec(
                taints=[client.V1Taint(**t) for t in taints], provider_id=f"fake:///sim-1/{name}"
            ),
        )
    )


def label(
    acts: KubeActivities,
    claim: AuthorisedClaim,
    new: dict[str, str],
    instance_id: str | None = None,
) -> None:
    """The claim's label call, for a claim the cluster stands behind."""
    asked = LabelNodeInput(
        node_name=claim.name,
        instance_id=instance_id or f"fake/sim-1/{claim.name}",
        labels=new,
        namespace=claim.namespace,
        claim_uid=claim.uid,
    )
    claim.env().run(acts.label_node, asked)


# NoExecute: what an earlier release's script registered (activities/bootstrap.py).
@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])
def test_label_node_lifts_the_startup_taint_and_keeps_others(
    kube_acts, core, make_node, unique, namespace, kube_api_client, effect
):
    name = f"n-{unique}"
    other = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
    make_node(
        name, [other, {**STARTUP, "effect": effect}, {"key": "dedicated", "effect": "NoExecute"}]
    )
    claim = authorise_claim(kube_api_client, namespace, name)
    new = {labels.NODEPOOL: "burst", labels.PROVIDER: "fake"}
    owned = labels.ownership_labels(name, namespace=namespace, node_pool="burst")

    label(kube_acts, claim, new)
    assert taints_of(core, name) == [other, {"key": "dedicated", "effect": "NoExecute"}]
    assert core.read_node(name).metadata.labels == {"existing": "yes", **new, **owned}

    label(kube_acts, claim, new)  # idempotent
    assert taints_of(core, name) == [other, {"key": "dedicated", "effect": "NoExecute"}]
    assert core.read_node(name).metadata.labels == {"existing": "yes", **new, **owned}


def test_label_node_when_the_startup_taint_is_the_only_one(
    kube_acts, core, make_node, unique, namespace, kube_api_client
):
    name = f"n-{unique}"
    make_node(name, [STARTUP])
    label(kube_acts, authorise_claim(kube_api_client, namespace, name, labels={"a": "b"}), {})
    assert taints_of(core, name) == []


def test_label_node_without_startup_taint_leaves_taints_alone(
    kube_acts, core, make_node, unique, namespace, kube_api_client
):
    name = f"n-{unique}"
    other = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
    make_node(name, [other])
    label(kube_acts, authorise_claim(kube_api_client, namespace, name, labels={"a": "b"}), {})
    assert taints_of(core, name) == [other]
    owned = labels.ownership_labels(name, namespace=namespace, node_pool="burst")
    assert core.read_node(name).metadata.labels == {"existing": "yes", "a": "b", **owned}


# --- a machine joins with the real script ---------------------------------------------------


class Sim:
    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        cloud: FakeCloud,
        kubelets: JoiningKubelets,
        tailnet: TailnetStandin,
    ) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        # The pool's namespace (the tailnet's Secrets are there).
        self.namespace = namespace
        self.cloud = cloud
        self.kubelets = kubelets
        self.tailnet = tailnet


@pytest.fixture
def sim(
    cluster: KubernetesControlPlane,
    kube_api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> Iterator[Sim]:
    """The session's control plane, a fake cloud and a tailnet of this test's own, and the
    machines that join the control plane from whatever boots on that cloud (as
    `SimulatedCluster` wires them: addresses in 127.0.0.0/8, the tailnet's too)."""
    cloud = FakeCloud(boot_delay_s=0.05, delete_delay_s=0.05)
    with TailnetStandin(address_prefix="127.100") as tailnet:
        kubelets = JoiningKubelets(
            kube_api_client,
            [cloud],
            ready_delay_s=0.2,
            poll_s=0.05,
            tailnet=tailnet,
            api_server=cluster.url.removeprefix("https://"),
            work_dir=tmp_path / "machines",
        )
        kubelets.start()
        try:
            yield Sim(kube_api_client, namespace, cloud, kubelets, tailnet)
        finally:
            kubelets.stop()
            # A joined machine's Node is Ready (KWOK keeps it): none outlives the test.
            for joined in list(kubelets.joined.values()):
                try:
                    kubelets.core.delete_node(joined.node_name)
                except client.ApiException as err:
                    if err.status != 404:
                        raise


def boot(sim: Sim, claim: str, spec: dict[str, Any]) -> str:
    """prepare_bootstrap (the worker allows the fake cloud and the tailnet's API), then a VM
    with the script."""
    node_class = NodeClassSpec.model_validate(spec)
    assert node_class.fake is not None and node_class.fake.endpoint
    tenancy = Tenancy(
        allowed_endpoints={"tailscale": (sim.tailnet.url,), "fake": (node_class.fake.endpoint,)}
    )
    refs = run_bootstrap(
        sim.api,
        BootstrapActivities(sim.api, tenancy).prepare_bootstrap,
        BootstrapInput(
            claim_name=claim,
            namespace=sim.namespace,
            node_pool="burst",
            node_class_name="default",
            node_class=node_class,
            labels={"team": "ml"},
            taints=[Taint(key="gpu", value="true", effect="NoSchedule")],
            offering=Offering(provider="fake", region="sim-2", instance_type="fk-medium"),
        ),
    )
    script = read_user_data(sim.core, refs)
    inst = sim.cloud.create_instance(
        name=claim, region="sim-2", instance_type="fk-medium", user_data=script
    )
    return str(inst["id"])


def class_spec(sim: Sim, tailscale: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "fake": {},
        "join": {"hostApiServer": "https://100.64.0.1:6443", "tokenTtlMinutes": 30},
        "bootstrap": {"kubernetesVersion": "1.34.3"},
    }
    if tailscale == "reusable":
        key = sim.tailnet.admin_key(reusable=True, tags=["tag:cloudburst"])
        put(sim, "ts", {"k": key})
        spec["tailscale"] = {"authKeySecretRef": {"name": "ts", "key": "k"}}
    elif tailscale == "minted":
        put(sim, "ts-oauth", sim.tailnet.oauth_secret_data())
        spec["tailscale"] = sim.tailnet.nodeclass_block("ts-oauth")
    return spec


def put(sim: Sim, name: str, data: dict[str, str]) -> None:
    sim.core.create_namespaced_secret(
        sim.namespace,
        client.V1Secret(metadata=client.V1ObjectMeta(name=name), string_data=data),
    )


@pytest.mark.parametrize("tailscale", ["off", "reusable", "minted"])
def test_a_vm_booted_with_the_script_joins(sim: Sim, tailscale: str, unique: str) -> None:
    claim = f"burst-j0in{tailscale[0]}-{unique}"
    iid = boot(sim, claim, class_spec(sim, tailscale))

    def registered() -> Any:
        failure = sim.kubelets.join_failures.get(iid)
        assert failure is None, failure
        return sim.kubelets.node_for(iid)

    assert wait_for(registered) == claim
    node = sim.core.read_node(claim)
    assert node.metadata.labels[labels.NODECLAIM] == claim
    assert node.metadata.labels[labels.NODEPOOL] == "burst"
    assert node.metadata.labels[labels.INSTANCE_TYPE] == "fk-medium"
    assert node.metadata.labels["team"] == "ml"
    assert taints_of(sim.core, claim) == [
        {"key": "gpu", "value": "true", "effect": "NoSchedule"},
        STARTUP,
    ]
    devices = [d for d in sim.tailnet.devices() if d["hostname"] == claim]
    internal_ip = next(a.address for a in node.status.addresses if a.type == "InternalIP")
    if tailscale == "off":
        assert devices == []
    else:
        # On the tailnet, tagged, reached on its tailnet address.
        assert [d["tags"] for d in devices] == [["tag:cloudburst"]]
        assert internal_ip == devices[0]["addresses"][0]

    # What the claim does once the node is Ready: sync labels, lift the startup taint.
    gpu = Taint(key="gpu", value="true", effect="NoSchedule")
    authorised = authorise_claim(sim.api, sim.namespace, claim, labels={"team": "ml"}, taints=[gpu])
    label(
        KubeActivities(sim.api, Tenancy()),
        authorised,
        {labels.PROVIDER: "fake"},
        instance_id("fake", "sim-2", iid),
    )
    assert taints_of(sim.core, claim) == [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]


def test_a_minted_key_joins_one_node_only(sim: Sim, unique: str) -> None:
    """Single-use: the key in one VM's user data joins no second machine."""
    spec = class_spec(sim, "minted")
    claim = f"burst-once-{unique}"
    iid = boot(sim, claim, spec)
    assert wait_for(lambda: sim.kubelets.node_for(iid)) == claim
    script = sim.cloud.peek(iid)["user_data"]
    copy = sim.cloud.create_instance(
        name=f"burst-copy-{unique}", region="sim-2", instance_type="fk-medium", user_data=script
    )
    failure = wait_for(lambda: sim.kubelets.join_failures.get(str(copy["id"])))
    assert "tailscale up failed" in failure and "single-use" in failure
    assert sim.kubelets.node_for(str(copy["id"])) is None
