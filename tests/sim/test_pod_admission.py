"""The PodNodeSelector and PodTolerationRestriction admission plugins of the emulator, as a
kube-apiserver running them answers (sim/kubeapi/pod_admission.py).

Driven with the official `kubernetes` client and the real kubectl against the session's
simulated cluster, each test in namespaces of its own (deleted afterwards); a private API
server where a test needs another configuration or nodes of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from sim.kubeapi import KubeApiServer
from sim.kubeapi.__main__ import add_admission_arguments, disabled_plugins
from sim.kubeapi.pod_admission import PLUGINS
from sim.scheduler import Scheduler

Obj = dict[str, Any]
KUBECTL = Path(sys.executable).with_name("kubectl")

NODE_SELECTOR = "scheduler.alpha.kubernetes.io/node-selector"
DEFAULTS = "scheduler.alpha.kubernetes.io/defaultTolerations"
WHITELIST = "scheduler.alpha.kubernetes.io/tolerationsWhitelist"
CONFLICT = "pod node label selector conflicts with its namespace node label selector"
NOT_WHITELISTED = (
    "pod tolerations (possibly merged with namespace default tolerations) conflict with its "
    "namespace whitelist"
)
# What DefaultTolerationSeconds adds to every new pod, before PodTolerationRestriction runs.
NOT_READY = {
    "key": "node.kubernetes.io/not-ready",
    "operator": "Exists",
    "effect": "NoExecute",
    "tolerationSeconds": 300,
}
UNREACHABLE = dict(NOT_READY, key="node.kubernetes.io/unreachable")
MEMORY_PRESSURE = {
    "key": "node.kubernetes.io/memory-pressure",
    "operator": "Exists",
    "effect": "NoSchedule",
}
TEAM_A = {"key": "dedicated", "operator": "Equal", "value": "team-a", "effect": "NoSchedule"}


def pod(name: str, cpu: str | None = "100m", **spec: Any) -> Obj:
    """A pod; with `cpu` it is Burstable, without it BestEffort."""
    container: Obj = {"name": "app", "image": "nginx"}
    if cpu is not None:
        container["resources"] = {"requests": {"cpu": cpu}}
    return {"metadata": {"name": name}, "spec": {"containers": [container], **spec}}


def spec_of(core: Any, namespace: str, body: Obj, dry_run: bool = True) -> Obj:
    """The spec the server answers a create with (a dry run stores nothing)."""
    response = core.create_namespaced_pod(
        namespace, body, dry_run="All" if dry_run else None, _preload_content=False
    )
    return dict(json.loads(response.data)["spec"])


def refusal(call: Callable[[], Any]) -> tuple[int, Obj]:
    with pytest.raises(ApiException) as caught:
        call()
    return int(caught.value.status), json.loads(caught.value.body or "null")


@pytest.fixture
def core(kube: client.ApiClient) -> Any:
    return client.CoreV1Api(kube)


@pytest.fixture
def namespace(core: Any) -> Iterator[Callable[[dict[str, str]], str]]:
    """Makes namespaces of this test's own with the given annotations; deletes them after."""
    made: list[str] = []

    def make(annotations: dict[str, str]) -> str:
        name = f"admit-{uuid.uuid4().hex[:8]}"
        core.create_namespace({"metadata": {"name": name, "annotations": annotations}})
        made.append(name)
        return name

    yield make
    for name in made:
        core.delete_namespace(name)


# ---- PodTolerationRestriction ----------------------------------------------------------------


def test_a_namespaces_default_tolerations_are_merged_into_its_new_pods(
    core: Any, namespace: Callable[[dict[str, str]], str]
) -> None:
    """After DefaultTolerationSeconds' two, the namespace's defaults, then memory-pressure for
    a pod that is not BestEffort; a default the pod's own toleration covers is dropped."""
    ns = namespace({DEFAULTS: json.dumps([TEAM_A])})
    assert spec_of(core, ns, pod("burstable"))["tolerations"] == [
        NOT_READY,
        UNREACHABLE,
        TEAM_A,
        MEMORY_PRESSURE,
    ]
    assert spec_of(core, ns, pod("best-effort", cpu=None))["tolerations"] == [
        NOT_READY,
        UNREACHABLE,
        TEAM_A,
    ]
    everything = {"key": "dedicated", "operator": "Exists"}
    own = spec_of(core, ns, pod("own", cpu=None, tolerations=[everything]))
    assert own["tolerations"] == [everything, NOT_READY, UNREACHABLE]
    # Stored as answered, and kept on later updates.
    spec_of(core, ns, pod("kept"), dry_run=False)
    patched = core.patch_namespaced_pod("kept", ns, {"metadata": {"labels": {"a": "b"}}})
    assert core.api_client.sanitize_for_serialization(patched.spec.tolerations) == [
        NOT_READY,
        UNREACHABLE,
        TEAM_A,
        MEMORY_PRESSURE,
    ]


def test_a_whitelist_refuses_what_it_does_not_cover_including_the_servers_own_tolerations(
    core: Any, namespace: Callable[[dict[str, str]], str]
) -> None:
    """DefaultTolerationSeconds runs first: a whitelist without the not-ready/unreachable
    tolerations refuses every new pod, with the plugin's bare error (500, no reason)."""
    ns = namespace({WHITELIST: json.dumps([TEAM_A, MEMORY_PRESSURE])})
    code, status = refusal(lambda: core.create_namespaced_pod(ns, pod("plain")))
    assert code == 500
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": NOT_WHITELISTED,
        "code": 500,
    }
    covering = [TEAM_A, MEMORY_PRESSURE, {"operator": "Exists", "effect": "NoExecute"}]
    ns = namespace({WHITELIST: json.dumps(covering)})
    assert spec_of(core, ns, pod("plain"))["tolerations"] == [
        NOT_READY,
        UNREACHABLE,
        MEMORY_PRESSURE,
    ]
    other = {"key": "dedicated", "operator": "Equal", "value": "team-b", "effect": "NoSchedule"}
    code, status = refusal(lambda: spec_of(core, ns, pod("other", tolerations=[other])))
    assert (code, status["message"]) == (500, NOT_WHITELISTED)
    # A pod stored before the whitelist narrowed can no longer be updated.
    spec_of(core, ns, pod("stored"), dry_run=False)
    core.patch_namespace(ns, {"metadata": {"annotations": {WHITELIST: json.dumps([TEAM_A])}}})
    change = {"metadata": {"labels": {"a": "b"}}}
    code, status = refusal(lambda: core.patch_namespaced_pod("stored", ns, change))
    assert (code, status["message"]) == (500, NOT_WHITELISTED)


def test_a_whitelist_entry_with_exists_and_no_effect_covers_every_value_and_effect(
    core: Any, namespace: Callable[[dict[str, str]], str]
) -> None:
    whitelist = [
        {"key": "dedicated", "operator": "Exists"},
        # NoExecute tolerations of any key, for at most 10 minutes.
        {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 600},
    ]
    ns = namespace({WHITELIST: json.dumps(whitelist), DEFAULTS: json.dumps([TEAM_A])})
    tolerations = [
        TEAM_A,
        {"key": "dedicated", "operator": "Equal", "value": "x", "effect": "NoExecute"},
        {"key": "dedicated", "operator": "Exists"},
        {"key": "spot", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
    ]
    admitted = spec_of(core, ns, pod("covered", cpu=None, tolerations=tolerations))
    # The merge with the namespace's default leaves out what `dedicated: Exists` covers.
    assert admitted["tolerations"] == [
        {"key": "dedicated", "operator": "Exists"},
        tolerations[3],
        NOT_READY,
        UNREACHABLE,
    ]
    forever = {"key": "spot", "operator": "Exists", "effect": "NoExecute"}
    elsewhere = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}
    for toleration in (forever, elsewhere):
        code, status = refusal(
            partial(spec_of, core, ns, pod("uncovered", cpu=None, tolerations=[toleration]))
        )
        assert (code, status["message"]) == (500, NOT_WHITELISTED), toleration
    # The memory-pressure toleration a Burstable pod gets is judged too.
    code, status = refusal(lambda: spec_of(core, ns, pod("burstable")))
    assert (code, status["message"]) == (500, NOT_WHITELISTED)


def test_an_unreadable_tolerations_annotation_answers_encoding_jsons_error(
    core: Any, namespace: Callable[[dict[str, str]], str]
) -> None:
    for annotation, message in (
        (
            '[{"key": 1}]',
            "json: cannot unmarshal number into Go struct field Toleration.key of type string",
        ),
        ('{"key": "a"}', "json: cannot unmarshal object into Go value of type []v1.Toleration"),
        ("[{", "unexpected end of JSON input"),
        ("[x]", "invalid character 'x' looking for beginning of value"),
    ):
        ns = namespace({DEFAULTS: annotation})
        code, status = refusal(partial(spec_of, core, ns, pod("p")))
        assert (code, status["message"]) == (500, message), annotation


# ---- PodNodeSelector ---------------------------------------------------------------------------


def test_a_namespaces_node_selector_is_merged_and_a_conflict_is_forbidden(
    core: Any, namespace: Callable[[dict[str, str]], str]
) -> None:
    ns = namespace({NODE_SELECTOR: "team=a, tier=batch"})
    merged = spec_of(core, ns, pod("ssd", nodeSelector={"disk": "ssd", "team": "a"}))
    assert merged["nodeSelector"] == {"disk": "ssd", "team": "a", "tier": "batch"}
    assert spec_of(core, ns, pod("plain"))["nodeSelector"] == {"team": "a", "tier": "batch"}
    code, status = refusal(lambda: spec_of(core, ns, pod("web", nodeSelector={"team": "b"})))
    assert code == 403
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'pods "web" is forbidden: {CONFLICT}',
        "reason": "Forbidden",
        "details": {"name": "web", "kind": "pods"},
        "code": 403,
    }
    # A generated name comes after admission: the refusal names no pod.
    unnamed = pod("", nodeSelector={"team": "b"})
    unnamed["metadata"] = {"generateName": "web-"}
    code, status = refusal(lambda: spec_of(core, ns, unnamed))
    assert (code, status["message"], status["details"]) == (
        403,
        f"pods is forbidden: {CONFLICT}",
        {"kind": "pods"},
    )


def test_the_node_selector_is_judged_on_create_only(
    core: Any, namespace: Callable[[dict[str, str]], str]
) -> None:
    """Upstream's handler takes creates only: a stored pod stays updatable when its
    namespace's selector changes to one it conflicts with."""
    ns = namespace({NODE_SELECTOR: "team=a"})
    assert spec_of(core, ns, pod("p"), dry_run=False)["nodeSelector"] == {"team": "a"}
    core.patch_namespace(ns, {"metadata": {"annotations": {NODE_SELECTOR: "team=b"}}})
    patched = core.patch_namespaced_pod("p", ns, {"metadata": {"labels": {"a": "b"}}})
    assert patched.spec.node_selector == {"team": "a"}
    code, status = refusal(lambda: spec_of(core, ns, pod("q", nodeSelector={"team": "a"})))
    assert (code, status["message"]) == (403, f'pods "q" is forbidden: {CONFLICT}')


def test_an_unparsable_node_selector_answers_the_parsers_error(
    core: Any, namespace: Callable[[dict[str, str]], str]
) -> None:
    for annotation, message in (
        ("team=a=b", "invalid selector: [team a b]"),
        ("team", "invalid selector: [team]"),
        (
            "bad key=a",
            '<nil>: Invalid value: "bad key": name part must consist of alphanumeric '
            "characters, '-', '_' or '.', and must start and end with an alphanumeric "
            "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
            "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
        ),
        (
            "team=a b",
            '[team]: Invalid value: "a b": a valid label must be an empty string or consist '
            "of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
            "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
        ),
    ):
        ns = namespace({NODE_SELECTOR: annotation})
        code, status = refusal(partial(spec_of, core, ns, pod("p")))
        assert (code, status["message"]) == (500, message), annotation
        assert "reason" not in status


# ---- with kubectl ------------------------------------------------------------------------------


def test_kubectl_shows_the_merge_and_both_refusals(
    kubeconfig: Path, tmp_path: Path, namespace: Callable[[dict[str, str]], str]
) -> None:
    env = dict(os.environ, KUBECONFIG=str(kubeconfig), HOME=str(tmp_path))

    def kubectl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(KUBECTL), *args], input=stdin, capture_output=True, text=True, env=env, timeout=60
        )

    covering = [TEAM_A, {"operator": "Exists", "effect": "NoExecute"}, MEMORY_PRESSURE]
    ns = namespace(
        {NODE_SELECTOR: "team=a", DEFAULTS: json.dumps([TEAM_A]), WHITELIST: json.dumps(covering)}
    )
    manifest = dict(pod("web"), apiVersion="v1", kind="Pod")
    manifest["metadata"] = {"name": "web", "namespace": ns}
    applied = kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(manifest))
    assert applied.returncode == 0, applied.stderr
    shown = kubectl("get", "pod", "web", "-n", ns, "-o", "json")
    spec = json.loads(shown.stdout)["spec"]
    assert spec["nodeSelector"] == {"team": "a"}
    assert spec["tolerations"] == [NOT_READY, UNREACHABLE, TEAM_A, MEMORY_PRESSURE]

    manifest["metadata"]["name"] = "other-team"
    manifest["spec"] = dict(manifest["spec"], nodeSelector={"team": "b"})
    done = kubectl("create", "-f", "-", stdin=json.dumps(manifest))
    assert done.returncode == 1
    assert done.stderr == (
        'Error from server (Forbidden): error when creating "STDIN": pods "other-team" is '
        f"forbidden: {CONFLICT}\n"
    )
    spot = {"key": "spot", "operator": "Exists"}
    manifest["metadata"]["name"] = "spot"
    manifest["spec"] = dict(pod("spot")["spec"], tolerations=[spot])
    done = kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(manifest))
    assert done.returncode == 1
    assert done.stderr == f'Error from server: error when creating "STDIN": {NOT_WHITELISTED}\n'


# ---- configuration, and plugins turned off -----------------------------------------------------


def test_the_plugins_configuration_files_apply_when_a_namespace_says_nothing() -> None:
    config: dict[str, dict[str, Any]] = {
        "PodNodeSelector": {
            "podNodeSelectorPluginConfig": {
                "clusterDefaultNodeSelector": "pool=shared",
                "team-b": "pool=team-b,disk=ssd",
            }
        },
        "PodTolerationRestriction": {"default": [TEAM_A], "whitelist": [TEAM_A]},
    }
    with KubeApiServer(admission_config=config) as server, server.api_client() as api:
        core: Any = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": "plain"}})
        # The cluster's whitelist leaves out DefaultTolerationSeconds' tolerations.
        code, status = refusal(lambda: spec_of(core, "plain", pod("p", cpu=None)))
        assert (code, status["message"]) == (
            500,
            NOT_WHITELISTED.replace("its namespace", "its cluster"),
        )
        empty = {WHITELIST: "", NODE_SELECTOR: ""}  # set, empty: overrides the configuration
        core.create_namespace({"metadata": {"name": "team-b", "annotations": empty}})
        spec = spec_of(core, "team-b", pod("p", cpu=None, nodeSelector={"pool": "team-b"}))
        assert spec["tolerations"] == [NOT_READY, UNREACHABLE, TEAM_A]
        assert spec["nodeSelector"] == {"pool": "team-b"}
        other = pod("q", cpu=None, nodeSelector={"pool": "team-b", "zone": "a"})
        code, status = refusal(lambda: spec_of(core, "team-b", other))
        assert (code, status["message"]) == (
            403,
            'pods "q" is forbidden: pod node label selector labels conflict with its '
            "namespace whitelist",
        )
        core.create_namespace({"metadata": {"name": "free", "annotations": {WHITELIST: ""}}})
        assert spec_of(core, "free", pod("p", cpu=None))["nodeSelector"] == {"pool": "shared"}


def test_plugins_turned_off_leave_pods_as_sent() -> None:
    """The same namespace and pods on a server with the plugins and on one without them."""
    annotations = {NODE_SELECTOR: "team=a", DEFAULTS: json.dumps([TEAM_A])}
    answers = {}
    for disabled in ((), PLUGINS):
        with (
            KubeApiServer(disable_admission_plugins=disabled) as server,
            server.api_client() as api,
        ):
            core: Any = client.CoreV1Api(api)
            core.create_namespace({"metadata": {"name": "team-a", "annotations": annotations}})
            answers[disabled] = spec_of(core, "team-a", pod("p"))
            if disabled:
                conflicting = pod("q", nodeSelector={"team": "b"})
                assert spec_of(core, "team-a", conflicting)["nodeSelector"] == {"team": "b"}
    assert answers[()]["nodeSelector"] == {"team": "a"}
    assert answers[()]["tolerations"] == [NOT_READY, UNREACHABLE, TEAM_A, MEMORY_PRESSURE]
    assert "nodeSelector" not in answers[PLUGINS]
    assert answers[PLUGINS]["tolerations"] == [NOT_READY, UNREACHABLE]
    with pytest.raises(ValueError, match="'DefaultTolerationSeconds' is unknown"):
        KubeApiServer(disable_admission_plugins=["DefaultTolerationSeconds"])
    parser = argparse.ArgumentParser()
    add_admission_arguments(parser)
    args = parser.parse_args(
        ["--disable-admission-plugins", "PodNodeSelector,PodTolerationRestriction"]
    )
    assert disabled_plugins(args) == ["PodNodeSelector", "PodTolerationRestriction"]


# ---- where the pods land ---------------------------------------------------------------------


def test_an_annotated_namespaces_pods_land_on_its_own_tainted_nodes_only() -> None:
    """No selector and no toleration in the pod: the namespace's annotations take it past the
    other team's nodes and the untainted one, to its team's tainted node."""
    with KubeApiServer() as server, server.api_client() as api:
        scheduler = Scheduler(server.api_client(), resync_s=0.2, store=server.store)
        scheduler.start()
        try:
            core: Any = client.CoreV1Api(api)
            alloc = {"cpu": "4", "memory": "8Gi", "pods": "110"}
            for name, team in (("open", None), ("team-b", "team-b"), ("team-a", "team-a")):
                taints = [{"key": "dedicated", "value": team, "effect": "NoSchedule"}]
                labels = {"team": team[-1]} if team else {}
                node = {
                    "metadata": {"name": name, "labels": labels},
                    "spec": {"taints": taints if team else []},
                    "status": {
                        "capacity": alloc,
                        "allocatable": alloc,
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                }
                core.create_node(node)
            annotations = {NODE_SELECTOR: "team=a", DEFAULTS: json.dumps([TEAM_A])}
            core.create_namespace({"metadata": {"name": "team-a", "annotations": annotations}})
            core.create_namespace({"metadata": {"name": "nobody"}})
            core.create_namespaced_pod("team-a", pod("app"))
            core.create_namespaced_pod("nobody", pod("app"))
            assert wait_for_node(core, "team-a", "app") == "team-a"
            assert wait_for_node(core, "nobody", "app") == "open"
        finally:
            scheduler.stop()


def wait_for_node(core: Any, namespace: str, name: str) -> str:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        node = core.read_namespaced_pod(name, namespace).spec.node_name
        if node:
            return str(node)
        time.sleep(0.05)
    raise AssertionError(f"{namespace}/{name} was not scheduled")
