"""`cloudburst plan`: workloads become the pods their controllers make, and a plan is compared
with the cheapest one-instance-type plan and the LP bound — checked by hand on small cases
(no node overhead, so a node's size is what pods may use)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from api.nodeclaim import Offering
from api.nodepool import NodePoolSpec
from api.planning import PlanRequest, PodDemand, Resources
from explain.plan import WorkloadError, cheapest_single_type, compare, expand

SMALL = Offering(
    provider="hetzner",
    region="fsn1",
    instance_type="s",
    vcpu=2,
    memory_gib=4,
    price_eur_per_hour=0.02,
)
LARGE = Offering(
    provider="hetzner",
    region="fsn1",
    instance_type="l",
    vcpu=8,
    memory_gib=16,
    price_eur_per_hour=0.05,
)


def no_overhead(offering: Offering) -> Resources:
    return Resources()


def pods(count: int, cpu_m: int = 1000, prefix: str = "p") -> list[PodDemand]:
    return [
        PodDemand(
            uid=f"{prefix}{i}",
            namespace="default",
            name=f"{prefix}{i}",
            requests=Resources(cpu_m=cpu_m, memory_bytes=2**30, pods=1),
        )
        for i in range(count)
    ]


def request(demands: list[PodDemand], **pool: Any) -> PlanRequest:
    return PlanRequest(
        pool_name="burst",
        namespace="default",
        pool=NodePoolSpec.model_validate(pool),
        class_providers=["hetzner"],
        pods=demands,
    )


def compared(req: PlanRequest) -> Any:
    return compare(
        req,
        [SMALL, LARGE],
        no_overhead,
        pool="default/burst",
        prices="test",
        limits="",
        tight_bound=False,
    )


def test_ten_one_core_pods_take_a_large_and_a_small_node() -> None:
    answer = compared(request(pods(10)))
    # By hand: 8 pods fill the large node (8 cores), 2 the small one (2 cores).
    assert sorted(n.offering for n in answer.nodes) == ["hetzner/fsn1/l", "hetzner/fsn1/s"]
    assert answer.cost_eur_per_hour == pytest.approx(0.07)
    # One type at best: 2 large (or 5 small) nodes, €0.10/h.
    assert answer.single_type is not None
    assert answer.single_type.cost_eur_per_hour == pytest.approx(0.10)
    assert (
        answer.single_type.nodes
        == {"hetzner/fsn1/l": 2, "hetzner/fsn1/s": 5}[answer.single_type.offering]
    )
    # The LP bound: 10 cores at the large node's €0.00625 a core.
    assert answer.lower_bound_eur_per_hour == pytest.approx(0.0625)


def test_a_pod_no_offering_holds_is_named_and_left_out_of_the_comparisons() -> None:
    demands = pods(2) + pods(1, cpu_m=16000, prefix="huge")
    answer = compared(request(demands))
    assert list(answer.unschedulable) == ["default/huge0"]
    assert answer.single_type is not None and answer.single_type.offering == "hetzner/fsn1/s"
    assert answer.cost_eur_per_hour == pytest.approx(0.02)


def test_the_pools_limits_hold_pods_back_but_not_the_comparisons() -> None:
    limited = request(pods(10), limits={"maxNodes": 1}).model_copy(update={"max_new_nodes": 1})
    answer = compared(limited)
    assert len(answer.nodes) == 1 and len(answer.limited) == 2
    assert answer.single_type is not None and answer.single_type.cost_eur_per_hour == pytest.approx(
        0.10
    )


def test_no_single_type_when_pods_select_different_ones() -> None:
    demands = pods(1, prefix="a") + pods(1, prefix="b")
    demands[0].node_selector = {"node.kubernetes.io/instance-type": "s"}
    demands[1].node_selector = {"node.kubernetes.io/instance-type": "l"}
    single, note = cheapest_single_type(request(demands), [SMALL, LARGE], no_overhead, {"a0", "b0"})
    assert single is None and "no single offering hosts every pod" in note


def workload(kind: str, spec: dict[str, Any], name: str = "w") -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}
    if kind == "CronJob":
        return {
            "kind": kind,
            "metadata": {"name": name},
            "spec": {"jobTemplate": {"spec": {**spec, "template": template}}},
        }
    return {"kind": kind, "metadata": {"name": name}, "spec": {**spec, "template": template}}


def test_workloads_become_the_pods_their_controllers_make() -> None:
    found = expand(
        [
            workload("Deployment", {"replicas": 3}, "web"),
            workload("StatefulSet", {}, "db"),  # replicas default to 1
            workload("Job", {"parallelism": 5, "completions": 2}, "once"),
            workload("CronJob", {"parallelism": 4}, "nightly"),
            {"kind": "List", "items": [workload("ReplicaSet", {"replicas": 2}, "rs")]},
            {"kind": "DaemonSet", "metadata": {"name": "logs"}, "spec": {}},
            {"kind": "ConfigMap", "metadata": {"name": "cfg"}},
        ],
        default_namespace="apps",
    )
    names = [p.name for p in found.pods]
    assert names == ["web-0", "web-1", "web-2", "db-0", "once-0", "once-1"] + [
        f"nightly-{i}" for i in range(4)
    ] + ["rs-0", "rs-1"]
    assert {p.namespace for p in found.pods} == {"apps"}
    assert len({p.uid for p in found.pods}) == len(found.pods)
    assert all(p.requests.cpu_m == 1000 for p in found.pods)
    assert any("DaemonSet apps/logs" in note for note in found.notes)
    assert any("ConfigMap apps/cfg: not a workload" in note for note in found.notes)


def test_a_workload_that_cannot_be_planned_says_which_and_why() -> None:
    with pytest.raises(WorkloadError, match=r"Deployment default/web: spec\.replicas must be"):
        expand([workload("Deployment", {"replicas": "three"}, "web")])
    with pytest.raises(WorkloadError, match="its pod has no containers"):
        expand([{"kind": "Pod", "metadata": {"name": "empty"}, "spec": {}}])
    with pytest.raises(WorkloadError, match="more than 20000 pods"):
        expand([workload("Deployment", {"replicas": 20001}, "huge")])


def test_a_pool_holds_what_its_published_status_says() -> None:
    from api import NodePool
    from cli.commands.plan import _published_holdings

    def pool(status: dict[str, Any] | None) -> NodePool:
        return NodePool.model_validate({"metadata": {"name": "p"}, "status": status})

    published = {"nodes": 3, "readyNodes": 2, "resources": {"cpu": "6", "memory": "12Gi"}}
    assert _published_holdings(pool(published)) == (3, 6000, 12 * 2**30)
    assert _published_holdings(pool({"nodes": 0})) == (0, 0, 0)
    # Before the pool's first status: unknown, said as such (`limits_text`), not zero.
    assert _published_holdings(pool(None)) is None


def test_a_file_without_pods_is_said_to_have_nothing_to_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from cli.main import app

    only_a_pool = tmp_path / "pool.yaml"
    only_a_pool.write_text(
        "apiVersion: cloudburst.io/v1alpha1\nkind: NodePool\nmetadata: {name: p}\nspec: {}\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    result = CliRunner().invoke(app, ["plan", "-f", str(only_a_pool)])
    assert result.exit_code == 1
    assert "nothing to plan: no pod in the files" in result.output


def test_a_pod_that_cannot_be_read_is_named_with_the_path_in_its_manifest() -> None:
    broken = workload("Deployment", {"replicas": 2}, "web")
    broken["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = [1]
    with pytest.raises(WorkloadError) as unreadable:
        expand([broken])
    assert str(unreadable.value).startswith(
        "Deployment default/web: its pod cannot be read: "
        "spec.template.spec.containers.0.resources.requests.cpu: "
    )
    cron = workload("CronJob", {}, "nightly")
    cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["tolerations"] = "all"
    with pytest.raises(
        WorkloadError, match=r"spec\.jobTemplate\.spec\.template\.spec\.tolerations"
    ):
        expand([cron])
    with pytest.raises(WorkloadError, match=r"document 1 \(Pod\): metadata must be an object"):
        expand([{"kind": "Pod", "metadata": "p", "spec": {"containers": [{"name": "c"}]}}])
    with pytest.raises(WorkloadError, match=r"document 1 item 1: not a Kubernetes object"):
        expand([{"kind": "List", "items": ["x"]}])
    with pytest.raises(WorkloadError, match=r"Deployment default/d: spec must be an object"):
        expand([{"kind": "Deployment", "metadata": {"name": "d"}, "spec": [1]}])
    with pytest.raises(WorkloadError, match=r"Job default/j: spec\.template\.spec must be"):
        expand([{"kind": "Job", "metadata": {"name": "j"}, "spec": {"template": "x"}}])
