"""Which pool a pending pod goes to, and what the user is told when none fits."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from api.nodeclaim import Offering
from api.nodepool import NodePoolSpec
from api.planning import NodeSelectorRequirement, NodeSelectorTerm, PodDemand, Resources, Toleration
from cluster.requirements import (
    offering_filter,
    pod_demand,
    pool_can_host,
    rank_pools,
)


def pool(
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    arch: list[str] | None = None,
    weight: int = 0,
    regions: str | list[str] = "ANY",
    providers: list[str] | None = None,
) -> NodePoolSpec:
    return NodePoolSpec.model_validate(
        {
            "template": {"labels": labels or {}, "taints": taints or []},
            "requirements": {
                "arch": arch or ["x86_64"],
                "regionConstraint": regions,
                "allowedProviders": providers or [],
            },
            "weight": weight,
        }
    )


def pod(
    selector: dict[str, str] | None = None,
    terms: list[list[tuple[str, str, list[str]]]] | None = None,
    tolerations: list[Toleration] | None = None,
) -> PodDemand:
    return PodDemand(
        uid="u1",
        namespace="default",
        name="web-1",
        requests=Resources(cpu_m=100, memory_bytes=2**20, pods=1),
        node_selector=selector or {},
        required_affinity=[
            NodeSelectorTerm(
                match_expressions=[
                    NodeSelectorRequirement(key=k, operator=op, values=v) for k, op, v in term
                ]
            )
            for term in terms or []
        ],
        tolerations=tolerations or [],
    )


SSD = pool(labels={"disktype": "ssd", "tier": "3"})
GPU_TAINT = {"key": "gpu", "value": "true", "effect": "NoSchedule"}

CASES: list[tuple[str, NodePoolSpec, PodDemand, str | None]] = [
    ("no constraints", SSD, pod(), None),
    ("nodeSelector match", SSD, pod({"disktype": "ssd"}), None),
    ("nodeSelector on the pool label", SSD, pod({"cloudburst.io/nodepool": "p"}), None),
    ("nodeSelector os", SSD, pod({"kubernetes.io/os": "linux"}), None),
    (
        "nodeSelector missing label",
        SSD,
        pod({"gpu": "a100"}),
        "nodeSelector gpu=a100: gpu=a100 is not among the pool's labels",
    ),
    (
        "nodeSelector other value",
        SSD,
        pod({"disktype": "hdd"}),
        "nodeSelector disktype=hdd: the pool's nodes have disktype=ssd",
    ),
    ("In", SSD, pod(terms=[[("disktype", "In", ["hdd", "ssd"])]]), None),
    (
        "In fails",
        SSD,
        pod(terms=[[("disktype", "In", ["hdd"])]]),
        "required node affinity: disktype In [hdd]: the pool's nodes have disktype=ssd",
    ),
    ("NotIn", SSD, pod(terms=[[("disktype", "NotIn", ["hdd"])]]), None),
    ("NotIn on a missing label", SSD, pod(terms=[[("zone-x", "NotIn", ["a"])]]), None),
    ("NotIn fails", SSD, pod(terms=[[("disktype", "NotIn", ["ssd"])]]), "disktype NotIn [ssd]"),
    ("Exists", SSD, pod(terms=[[("disktype", "Exists", [])]]), None),
    ("Exists fails", SSD, pod(terms=[[("gpu", "Exists", [])]]), "no label gpu"),
    ("DoesNotExist", SSD, pod(terms=[[("gpu", "DoesNotExist", [])]]), None),
    ("DoesNotExist fails", SSD, pod(terms=[[("disktype", "DoesNotExist", [])]]), "disktype=ssd"),
    ("Gt", SSD, pod(terms=[[("tier", "Gt", ["2"])]]), None),
    ("Gt fails", SSD, pod(terms=[[("tier", "Gt", ["3"])]]), "tier Gt [3]"),
    ("Lt", SSD, pod(terms=[[("tier", "Lt", ["4"])]]), None),
    ("Lt fails", SSD, pod(terms=[[("tier", "Lt", ["3"])]]), "tier Lt [3]"),
    ("Gt on a non-number", SSD, pod(terms=[[("disktype", "Gt", ["1"])]]), "disktype Gt [1]"),
    (
        "expressions are ANDed",
        SSD,
        pod(terms=[[("disktype", "In", ["ssd"]), ("tier", "Gt", ["5"])]]),
        "tier Gt [5]",
    ),
    (
        "terms are ORed",
        SSD,
        pod(terms=[[("disktype", "In", ["hdd"])], [("tier", "In", ["3"])]]),
        None,
    ),
    (
        "no term matches",
        SSD,
        pod(terms=[[("disktype", "In", ["hdd"])], [("tier", "In", ["1"])]]),
        "none of the 2 required node affinity terms matches (term 1: disktype In [hdd]",
    ),
    (
        "hostname of a node not yet made",
        SSD,
        pod(terms=[[("kubernetes.io/hostname", "In", ["node-7"])]]),
        "not known in advance",
    ),
    (
        "taint tolerated (Equal)",
        pool(taints=[GPU_TAINT]),
        pod(tolerations=[Toleration(key="gpu", value="true", effect="NoSchedule")]),
        None,
    ),
    (
        "taint tolerated (Exists)",
        pool(taints=[GPU_TAINT]),
        pod(tolerations=[Toleration(key="gpu", operator="Exists")]),
        None,
    ),
    (
        "taint tolerated (empty key, Exists)",
        pool(taints=[GPU_TAINT]),
        pod(tolerations=[Toleration(operator="Exists")]),
        None,
    ),
    (
        "empty key needs Exists",
        pool(taints=[GPU_TAINT]),
        pod(tolerations=[Toleration(value="true")]),
        "taint gpu=true:NoSchedule is not tolerated",
    ),
    (
        "taint not tolerated",
        pool(taints=[GPU_TAINT]),
        pod(),
        "taint gpu=true:NoSchedule is not tolerated",
    ),
    (
        "toleration value differs",
        pool(taints=[GPU_TAINT]),
        pod(tolerations=[Toleration(key="gpu", value="false")]),
        "taint gpu=true:NoSchedule is not tolerated",
    ),
    (
        "toleration effect differs",
        pool(taints=[GPU_TAINT]),
        pod(tolerations=[Toleration(key="gpu", operator="Exists", effect="NoExecute")]),
        "not tolerated",
    ),
    (
        "PreferNoSchedule needs no toleration",
        pool(taints=[{"key": "spot", "effect": "PreferNoSchedule"}]),
        pod(),
        None,
    ),
    ("amd64 selector on an x86_64 pool", SSD, pod({"kubernetes.io/arch": "amd64"}), None),
    (
        "x86_64 selector on an amd64 pool",
        pool(arch=["amd64"]),
        pod({"kubernetes.io/arch": "x86_64"}),
        None,
    ),
    (
        "arm64 on an aarch64 pool",
        pool(arch=["aarch64"]),
        pod(terms=[[("kubernetes.io/arch", "In", ["arm64"])]]),
        None,
    ),
    (
        "arm64 on an x86 pool",
        SSD,
        pod({"kubernetes.io/arch": "arm64"}),
        "nodeSelector kubernetes.io/arch=arm64: arch arm64 not in pool arch [x86_64]",
    ),
    (
        "arm64 on a multi-arch pool",
        pool(arch=["x86_64", "arm64"]),
        pod({"kubernetes.io/arch": "arm64"}),
        None,
    ),
    (
        "instance type is left to offering filtering",
        SSD,
        pod({"node.kubernetes.io/instance-type": "cx32"}),
        None,
    ),
    (
        "region outside an explicit region list",
        pool(regions=["fsn1", "nbg1"]),
        pod({"topology.kubernetes.io/region": "hel1"}),
        "not among the pool's regions ['fsn1', 'nbg1']",
    ),
    (
        "region inside the list",
        pool(regions=["fsn1"]),
        pod({"topology.kubernetes.io/region": "fsn1"}),
        None,
    ),
    (
        "provider not allowed",
        pool(providers=["hetzner"]),
        pod({"cloudburst.io/provider": "aws"}),
        "not among the pool's allowedProviders ['hetzner']",
    ),
]


@pytest.mark.parametrize(
    ("pool_spec", "demand", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_pool_can_host(pool_spec: NodePoolSpec, demand: PodDemand, expected: str | None) -> None:
    reason = pool_can_host("p", pool_spec, demand)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason, reason


def test_rank_pools_highest_weight_first_and_reasons_for_the_rest() -> None:
    pools = [
        ("general", pool(weight=10)),
        ("ssd", pool(labels={"disktype": "ssd"}, weight=50)),
        ("gpu", pool(taints=[GPU_TAINT], weight=100)),
        ("also-general", pool(weight=10)),
    ]
    matching, reasons = rank_pools(pools, pod())
    assert matching == ["ssd", "also-general", "general"]  # equal weights: by name
    assert reasons == {"gpu": "taint gpu=true:NoSchedule is not tolerated"}


def test_a_pod_no_pool_can_host_gets_a_reason_per_pool() -> None:
    pools = [("ssd", SSD), ("arm", pool(arch=["arm64"]))]
    matching, reasons = rank_pools(pools, pod({"disktype": "nvme"}))
    assert matching == []
    assert reasons["ssd"] == "nodeSelector disktype=nvme: the pool's nodes have disktype=ssd"
    assert "disktype=nvme is not among the pool's labels" in reasons["arm"]


def test_offering_filter_keeps_the_offerings_whose_labels_fit() -> None:
    spec = pool(arch=["x86_64", "arm64"])
    demand = pod(
        {"kubernetes.io/arch": "arm64"},
        terms=[[("node.kubernetes.io/instance-type", "NotIn", ["cax11"])]],
    )
    allows = offering_filter("p", spec, demand)
    assert allows is not None
    arm = Offering(provider="hetzner", region="fsn1", instance_type="cax21", arch="arm64")
    small_arm = arm.model_copy(update={"instance_type": "cax11"})
    x86 = arm.model_copy(update={"instance_type": "cx22", "arch": "x86_64"})
    assert [allows(o) for o in (arm, small_arm, x86)] == [True, False, False]
    assert offering_filter("p", spec, pod({"disktype": "ssd"})) is None  # nothing to filter


def test_pod_demand_adds_containers_and_takes_the_largest_init_container() -> None:
    def container(
        cpu: str, memory: str, *, limits: bool = False, sidecar: bool = False
    ) -> k8s.V1Container:
        res = {"cpu": cpu, "memory": memory}
        return k8s.V1Container(
            name="c",
            resources=k8s.V1ResourceRequirements(limits=res)
            if limits
            else k8s.V1ResourceRequirements(requests=res),
            restart_policy="Always" if sidecar else None,
        )

    v1pod = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="web-1", namespace="shop", uid="uid-1"),
        spec=k8s.V1PodSpec(
            containers=[container("250m", "256Mi"), container("1", "1Gi", limits=True)],
            init_containers=[container("2", "128Mi"), container("100m", "64Mi", sidecar=True)],
            node_selector={"disktype": "ssd"},
            tolerations=[k8s.V1Toleration(key="gpu", operator="Exists", effect="NoSchedule")],
            affinity=k8s.V1Affinity(
                node_affinity=k8s.V1NodeAffinity(
                    required_during_scheduling_ignored_during_execution=k8s.V1NodeSelector(
                        node_selector_terms=[
                            k8s.V1NodeSelectorTerm(
                                match_expressions=[
                                    k8s.V1NodeSelectorRequirement(
                                        key="tier", operator="Gt", values=["2"]
                                    )
                                ]
                            )
                        ]
                    )
                )
            ),
        ),
    )
    demand = pod_demand(v1pod)
    # cpu: max(250m + 1 + 100m sidecar, 2 init) = 2; memory: 256Mi + 1Gi + 64Mi sidecar.
    assert demand.requests == Resources(cpu_m=2000, memory_bytes=(256 + 1024 + 64) * 2**20, pods=1)
    assert (demand.uid, demand.namespace, demand.name) == ("uid-1", "shop", "web-1")
    assert demand.node_selector == {"disktype": "ssd"}
    assert demand.required_affinity[0].match_expressions[0].operator == "Gt"
    assert demand.tolerations == [Toleration(key="gpu", operator="Exists", effect="NoSchedule")]
    assert (
        pool_can_host(
            "p", pool(labels={"disktype": "ssd", "tier": "3"}, taints=[GPU_TAINT]), demand
        )
        is None
    )
