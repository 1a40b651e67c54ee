"""Who may open a connection to each pod the manifests run, and on which port.

No network plugin enforces NetworkPolicy here, so this reads every overlay's policies and
evaluates them as one does (Kubernetes' NetworkPolicy semantics): a pod that some policy
selects for Ingress accepts only what a rule of one of those policies admits; a rule's
absent or empty `from` admits every source, its absent or empty `ports` every port; a peer
with a podSelector alone selects pods of the policy's namespace, with a namespaceSelector
the pods of the namespaces it selects (every pod there, without a podSelector); a port by
name is the target's container port of that name. Then each port of each pod must admit
exactly its clients, named by the manifests' own labels and processes (docs/security.md
"Closing Temporal")."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import COMPONENTS, DEPLOY, OVERLAYS, kustomize

Manifest = dict[str, Any]

# The dev overlay with every optional component: the only rendering in which the pools'
# worker (components/split-workers) and an in-cluster Temporal run side by side.
DEV_WITH_COMPONENTS = "overlays/dev+components"
ALL_OVERLAYS = [*OVERLAYS, DEV_WITH_COMPONENTS]

# The processes that connect to Temporal (`cloudburst worker`, `cloudburst trigger`), by
# their container's first argument. The codec server calls nothing.
TEMPORAL_CLIENT_COMMANDS = frozenset({"worker", "trigger"})
# Ports that serve Prometheus metrics, by name: ours and the Temporal SDK's.
METRICS_PORTS = frozenset({"metrics", "sdk-metrics"})

# Sources that live outside the manifests, as a policy names them (a peer with a
# namespaceSelector): Prometheus, as base/network-policies.yaml admits it to the metrics
# ports, and the codec server's callers, as components/codec-server/network-policy.yaml
# admits them.
PROMETHEUS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}
CODEC_SERVER_CLIENTS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "cloudburst-system"}},
    "podSelector": {"matchLabels": {"cloudburst.io/codec-server-client": "true"}},
}
# What a port admits when nothing restricts it: any source at all.
ANYONE = "anyone"


@dataclass(frozen=True)
class ContainerPort:
    name: str
    number: int
    protocol: str


@dataclass(frozen=True)
class Pod:
    """A Deployment's pod, as its template declares it."""

    deployment: str
    namespace: str
    labels: Mapping[str, str]
    command: str  # the first container's first argument: `worker`, `trigger`, ...
    ports: tuple[ContainerPort, ...]


@dataclass(frozen=True)
class Admitted:
    """Who may connect to one port of one pod: pods of the manifests (by Deployment) and
    sources beyond them (a peer that names other namespaces, canonical JSON; or ANYONE)."""

    pods: frozenset[str] = frozenset()
    outside: frozenset[str] = frozenset()

    def __str__(self) -> str:
        return f"pods {sorted(self.pods)}, from outside {sorted(self.outside)}"


@pytest.fixture(scope="module")
def overlays(
    rendered: dict[str, list[Manifest]], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, list[Manifest]]:
    # An overlay of the dev overlay (kustomize loads no file of another root, so it cannot be
    # copied as conftest's `composed` copies the others), adding the components it lacks.
    dev = DEPLOY / "overlays/dev"
    own = yaml.safe_load((dev / "kustomization.yaml").read_text()).get("components", [])
    has = {(dev / component).resolve() for component in own}
    into = tmp_path_factory.mktemp("overlay")
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(dev, into)],
        "components": [
            os.path.relpath(DEPLOY / component, into)
            for component in COMPONENTS
            if (DEPLOY / component).resolve() not in has
        ],
    }
    (into / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return rendered | {DEV_WITH_COMPONENTS: kustomize(into)}


def pods_of(objects: list[Manifest]) -> list[Pod]:
    pods = []
    for deployment in (o for o in objects if o["kind"] == "Deployment"):
        template = deployment["spec"]["template"]
        containers = template["spec"]["containers"]
        pods.append(
            Pod(
                deployment=deployment["metadata"]["name"],
                namespace=deployment["metadata"]["namespace"],
                labels=template["metadata"].get("labels", {}),
                command=(containers[0].get("args") or [""])[0],
                ports=tuple(
                    ContainerPort(
                        name=port.get("name", str(port["containerPort"])),
                        number=port["containerPort"],
                        protocol=port.get("protocol", "TCP"),
                    )
                    for container in containers
                    for port in container.get("ports", [])
                ),
            )
        )
    return pods


def policies_of(objects: list[Manifest]) -> list[Manifest]:
    return [o for o in objects if o["kind"] == "NetworkPolicy"]


def namespace_labels(objects: list[Manifest], namespace: str) -> dict[str, str]:
    """A namespace's labels, with the name label the control plane sets on every one."""
    declared: dict[str, str] = {}
    for o in objects:
        if o["kind"] == "Namespace" and o["metadata"]["name"] == namespace:
            declared = o["metadata"].get("labels", {})
    return {**declared, "kubernetes.io/metadata.name": namespace}


def selects(selector: Manifest, labels: Mapping[str, str]) -> bool:
    """A LabelSelector's verdict on a set of labels (`{}` selects everything)."""
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for requirement in selector.get("matchExpressions", []):
        key, operator = requirement["key"], requirement["operator"]
        values = requirement.get("values", [])
        match operator:
            case "In":
                holds = key in labels and labels[key] in values
            case "NotIn":
                holds = key not in labels or labels[key] not in values
            case "Exists":
                holds = key in labels
            case "DoesNotExist":
                holds = key not in labels
            case _:
                raise AssertionError(f"unknown selector operator {operator!r}")
        if not holds:
            return False
    return True


def is_empty(selector: Manifest) -> bool:
    return not selector.get("matchLabels") and not selector.get("matchExpressions")


def applies_to(policy: Manifest, pod: Pod) -> bool:
    """The policy selects the pod and restricts its ingress (policyTypes absent: Ingress)."""
    spec = policy["spec"]
    return (
        policy["metadata"]["namespace"] == pod.namespace
        and "Ingress" in spec.get("policyTypes", ["Ingress"])
        and selects(spec["podSelector"], pod.labels)
    )


def opens(rule_port: Manifest, port: ContainerPort) -> bool:
    """A NetworkPolicyPort's verdict on a container port: by name, by number (up to
    `endPort`), or every port of its protocol when it names none."""
    if rule_port.get("protocol", "TCP") != port.protocol:
        return False
    value: str | int | None = rule_port.get("port")
    if value is None:
        return True
    if isinstance(value, str):
        return value == port.name
    last: int = rule_port.get("endPort", value)
    return value <= port.number <= last


def canonical(peer: Manifest) -> str:
    return json.dumps(peer, sort_keys=True)


def admitted(objects: list[Manifest], pod: Pod, port: ContainerPort) -> Admitted:
    """Everyone the overlay's policies let connect to `port` of `pod`."""
    policies = [p for p in policies_of(objects) if applies_to(p, pod)]
    if not policies:  # not isolated: Kubernetes admits every source
        return Admitted(outside=frozenset({ANYONE}))
    everyone = pods_of(objects)
    pods: set[str] = set()
    outside: set[str] = set()
    for policy in policies:
        home = policy["metadata"]["namespace"]
        for rule in policy["spec"].get("ingress") or []:
            if rule.get("ports") and not any(opens(p, port) for p in rule["ports"]):
                continue
            peers = rule.get("from") or []
            if not peers:
                outside.add(ANYONE)
            for peer in peers:
                if "ipBlock" in peer:
                    outside.add(canonical(peer))
                    continue
                namespaces = peer.get("namespaceSelector")
                pod_selector = peer.get("podSelector", {})
                if namespaces is not None:  # other namespaces' pods may match too
                    outside.add(canonical(peer))
                pods.update(
                    source.deployment
                    for source in everyone
                    if (
                        selects(namespaces, namespace_labels(objects, source.namespace))
                        if namespaces is not None
                        else source.namespace == home
                    )
                    and selects(pod_selector, source.labels)
                )
    return Admitted(frozenset(pods), frozenset(outside))


def temporal_frontends(objects: list[Manifest]) -> set[tuple[str, str]]:
    """(Deployment, port name) behind CLOUDBURST_TEMPORAL_ADDRESS when the overlay runs that
    Temporal itself (a Service `<name>.<namespace>.svc:<port>` of the manifests), else none."""
    [config] = [
        o["data"]
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "cloudburst-config"
    ]
    host, _, number = config["CLOUDBURST_TEMPORAL_ADDRESS"].rpartition(":")
    name, _, rest = host.partition(".")
    namespace = rest.partition(".")[0]
    services = [
        o
        for o in objects
        if o["kind"] == "Service"
        and o["metadata"]["name"] == name
        and o["metadata"]["namespace"] == namespace
    ]
    frontends: set[tuple[str, str]] = set()
    for service in services:
        [target] = [
            p.get("targetPort", p["port"])
            for p in service["spec"]["ports"]
            if p["port"] == int(number)
        ]
        for pod in pods_of(objects):
            if pod.namespace == namespace and selects(
                {"matchLabels": service["spec"]["selector"]}, pod.labels
            ):
                frontends.update(
                    (pod.deployment, port.name)
                    for port in pod.ports
                    if port.name == target or port.number == target
                )
        assert frontends, f"{config['CLOUDBURST_TEMPORAL_ADDRESS']} reaches no pod's port"
    return frontends


def clients(objects: list[Manifest]) -> dict[str, Admitted]:
    """Who should reach each port of each pod, keyed `<deployment>:<port>`."""
    frontends = temporal_frontends(objects)
    temporal_clients = frozenset(
        pod.deployment for pod in pods_of(objects) if pod.command in TEMPORAL_CLIENT_COMMANDS
    )
    return {
        f"{pod.deployment}:{port.name}": (
            Admitted(pods=temporal_clients)
            if (pod.deployment, port.name) in frontends
            else port_clients(pod, port)
        )
        for pod in pods_of(objects)
        for port in pod.ports
    }


def port_clients(pod: Pod, port: ContainerPort) -> Admitted:
    """Who should reach a port that is not Temporal's frontend: a metrics port, Prometheus;
    the codec server's port, its labelled callers. Any other (health, the dev Web UI)
    admits nobody: the kubelet's probes and `kubectl port-forward` are not subject to
    NetworkPolicy."""
    if port.name in METRICS_PORTS:
        return Admitted(outside=frozenset({canonical(PROMETHEUS)}))
    if pod.deployment == "cloudburst-codec-server" and port.name == "codec":
        return Admitted(outside=frozenset({canonical(CODEC_SERVER_CLIENTS)}))
    return Admitted()


@pytest.mark.parametrize("overlay", ALL_OVERLAYS)
def test_every_pod_refuses_what_no_policy_admits(
    overlays: dict[str, list[Manifest]], overlay: str
) -> None:
    """A default deny in every namespace the manifests run pods in (so that a pod added
    later is closed too), and every pod selected by some Ingress policy."""
    objects = overlays[overlay]
    pods = pods_of(objects)
    default_denies = {
        p["metadata"]["namespace"]
        for p in policies_of(objects)
        if is_empty(p["spec"]["podSelector"])
        and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
        and not p["spec"].get("ingress")
    }
    undenied = {pod.namespace for pod in pods} - default_denies
    assert undenied == set(), f"{overlay}: no default-deny ingress policy in {undenied}"
    open_pods = [
        pod.deployment
        for pod in pods
        if not any(applies_to(policy, pod) for policy in policies_of(objects))
    ]
    assert open_pods == [], f"{overlay}: no policy restricts who reaches {open_pods}"


@pytest.mark.parametrize("overlay", ALL_OVERLAYS)
def test_no_rule_admits_every_pod_or_every_port(
    overlays: dict[str, list[Manifest]], overlay: str
) -> None:
    """Every rule names its sources by pod labels (an empty or absent podSelector admits
    every pod of the namespaces it names; an ipBlock, addresses no label pins) and its ports
    by ports the pods it guards listen on (a misspelt name opens nothing, silently)."""
    objects = overlays[overlay]
    pods = pods_of(objects)
    for policy in policies_of(objects):
        name = f"{overlay}: NetworkPolicy {policy['metadata']['name']}"
        guarded = [pod for pod in pods if applies_to(policy, pod)]
        for rule in policy["spec"].get("ingress") or []:
            assert rule.get("from"), f"{name}: a rule without `from` admits every source"
            for peer in rule["from"]:
                assert "ipBlock" not in peer, f"{name}: {peer} admits addresses, not pods"
                assert not is_empty(peer.get("podSelector", {})), (
                    f"{name}: {peer} admits every pod of the namespaces it names"
                )
            assert rule.get("ports"), f"{name}: a rule without `ports` opens every port"
            for rule_port in rule["ports"]:
                assert "port" in rule_port, f"{name}: {rule_port} opens every port"
                assert any(opens(rule_port, p) for pod in guarded for p in pod.ports), (
                    f"{name}: no pod it guards listens on {rule_port}"
                )


# The one namespace label no one sets: the API server gives every Namespace its own name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


@pytest.mark.parametrize("overlay", ALL_OVERLAYS)
def test_no_rule_admits_pods_by_a_label_a_tenant_can_set(
    overlays: dict[str, list[Manifest]], overlay: str
) -> None:
    """A peer with a namespaceSelector names its namespaces by name: a pod label admits only
    where tenants have no rights. `namespaceSelector: {}` (every namespace) with a pod label,
    as the codec server's policy had (issue #55), admits any pod a namespace editor labels so;
    a selector on another namespace label, any namespace labelled so. Fails on that policy."""
    for policy in policies_of(overlays[overlay]):
        name = f"{overlay}: NetworkPolicy {policy['metadata']['name']}"
        for rule in policy["spec"].get("ingress") or []:
            for peer in rule.get("from") or []:
                if "namespaceSelector" not in peer:
                    continue  # the policy's own namespace: the operator's
                selector = peer["namespaceSelector"]
                assert set(selector) == {"matchLabels"}, f"{name}: {peer}"
                assert set(selector["matchLabels"]) == {NAMESPACE_NAME_LABEL}, (
                    f"{name}: {peer} names its namespaces by labels others can set"
                )


@pytest.mark.parametrize("overlay", ALL_OVERLAYS)
def test_every_policy_selects_pods_by_labels_their_deployments_carry(
    overlays: dict[str, list[Manifest]], overlay: str
) -> None:
    """A policy whose podSelector matches no pod template guards nothing: a label renamed
    on one side only."""
    objects = overlays[overlay]
    pods = pods_of(objects)
    for policy in policies_of(objects):
        spec = policy["spec"]
        assert any(
            policy["metadata"]["namespace"] == pod.namespace
            and selects(spec["podSelector"], pod.labels)
            for pod in pods
        ), f"{overlay}: NetworkPolicy {policy['metadata']['name']} selects no pod"


@pytest.mark.parametrize("overlay", ALL_OVERLAYS)
def test_each_port_admits_exactly_its_clients(
    overlays: dict[str, list[Manifest]], overlay: str
) -> None:
    """For every port of every pod, who the policies admit equals who should connect:
    Temporal's frontend the worker(s) and trigger (by their process, so a Deployment whose
    pod lacks the label the policy selects it by fails here), the metrics ports Prometheus,
    the codec server its labelled callers, and every other port nobody."""
    objects = overlays[overlay]
    actual = {
        f"{pod.deployment}:{port.name}": admitted(objects, pod, port)
        for pod in pods_of(objects)
        for port in pod.ports
    }
    expected = clients(objects)
    wrong = {
        port: f"admits {actual[port]}; should admit {expected[port]}"
        for port in expected
        if actual[port] != expected[port]
    }
    assert wrong == {}, overlay


def test_the_dev_temporal_is_reached_by_every_temporal_client_and_nothing_else(
    overlays: dict[str, list[Manifest]],
) -> None:
    """The expectations above, pinned where they matter most: in the dev overlay with every
    component, Temporal's frontend admits exactly the worker, the pools' worker and the
    trigger, and none of its other ports admits anyone."""
    objects = overlays[DEV_WITH_COMPONENTS]
    [temporal] = [pod for pod in pods_of(objects) if pod.deployment == "temporal-dev"]
    assert temporal_frontends(objects) == {("temporal-dev", "grpc")}
    by_port = {port.name: admitted(objects, temporal, port) for port in temporal.ports}
    assert by_port == {
        "grpc": Admitted(
            pods=frozenset({"cloudburst-worker", "cloudburst-pool-worker", "cloudburst-trigger"})
        ),
        "ui": Admitted(),
    }


def test_the_evaluation_reads_policies_as_kubernetes_does() -> None:
    """The evaluator itself, on policies whose verdicts Kubernetes' documentation states:
    no policy admits everyone, an empty `from` admits everyone, a namespaceSelector alone
    admits every pod of the namespaces it selects, both together only the pods that match
    both, and a named port opens only the port of that name."""
    namespace = {"kind": "Namespace", "metadata": {"name": "ns", "labels": {"team": "a"}}}

    def deployment(name: str, labels: dict[str, str]) -> Manifest:
        return {
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {"args": [name], "ports": [{"name": "web", "containerPort": 80}]}
                        ]
                    },
                }
            },
        }

    def policy(rule: Manifest) -> Manifest:
        return {
            "kind": "NetworkPolicy",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"podSelector": {"matchLabels": {"app": "server"}}, "ingress": [rule]},
        }

    server, client = deployment("server", {"app": "server"}), deployment("client", {"app": "c"})
    objects: list[Manifest] = [namespace, server, client]
    [target, _] = pods_of(objects)
    [web] = target.ports
    assert admitted(objects, target, web) == Admitted(outside=frozenset({ANYONE}))
    assert admitted([*objects, policy({})], target, web) == Admitted(outside=frozenset({ANYONE}))
    by_namespace = {"namespaceSelector": {"matchLabels": {"team": "a"}}}
    assert admitted([*objects, policy({"from": [by_namespace]})], target, web) == Admitted(
        pods=frozenset({"server", "client"}), outside=frozenset({canonical(by_namespace)})
    )
    both = {**by_namespace, "podSelector": {"matchLabels": {"app": "c"}}}
    assert admitted([*objects, policy({"from": [both]})], target, web) == Admitted(
        pods=frozenset({"client"}), outside=frozenset({canonical(both)})
    )
    named_port = policy(
        {"from": [{"podSelector": {"matchLabels": {"app": "c"}}}], "ports": [{"port": "web"}]}
    )
    assert admitted([*objects, named_port], target, web) == Admitted(pods=frozenset({"client"}))
    assert admitted([*objects, named_port], target, ContainerPort("other", 81, "TCP")) == Admitted()
