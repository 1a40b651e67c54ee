"""The simulated controller-manager: Deployments keep their pods; pod GC follows deleted nodes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from sim.controllers import Controllers
from sim.kubeapi import KubeApiServer
from sim.kubeapi.resources import REGISTRY


@pytest.fixture
def server() -> Iterator[KubeApiServer]:
    with KubeApiServer(port=0) as srv:
        yield srv


@pytest.fixture
def api(server: KubeApiServer) -> client.ApiClient:
    return server.api_client()


def deployment(name: str, replicas: int) -> client.V1Deployment:
    labels = {"app": name}
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, namespace="default"),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]),
            ),
        ),
    )


def pods_of(core: client.CoreV1Api, app: str) -> list[client.V1Pod]:
    return list(core.list_namespaced_pod("default", label_selector=f"app={app}").items)


def test_a_deployment_replaces_its_lost_pods(api: client.ApiClient) -> None:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    apps.create_namespaced_deployment("default", deployment("web", 2))
    controllers = Controllers(api)
    controllers.tick()
    pods = pods_of(core, "web")
    assert len(pods) == 2
    assert all(p.metadata.owner_references[0].kind == "ReplicaSet" for p in pods)
    core.delete_namespaced_pod(str(pods[0].metadata.name), "default")
    controllers.tick()
    assert len(pods_of(core, "web")) == 2
    controllers.tick()  # steady: no extra pods
    assert len(pods_of(core, "web")) == 2


def test_pods_of_a_deleted_node_are_collected(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="n1")))
    for name, node in (("on-n1", "n1"), ("on-gone", "gone")):
        core.create_namespaced_pod(
            "default",
            client.V1Pod(
                metadata=client.V1ObjectMeta(name=name),
                spec=client.V1PodSpec(
                    node_name=node, containers=[client.V1Container(name="c", image="busybox")]
                ),
            ),
        )
    Controllers(api).tick()
    names = {p.metadata.name for p in core.list_namespaced_pod("default").items}
    assert names == {"on-n1"}


def test_a_node_deleted_between_sweeps_has_its_pods_collected_at_once(
    api: client.ApiClient,
) -> None:
    """Pods are read in full only every `sweep_s`, or as soon as a node the loop saw is gone."""
    core = client.CoreV1Api(api)
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="n1")))
    core.create_namespaced_pod(
        "default",
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="on-n1"),
            spec=client.V1PodSpec(
                node_name="n1", containers=[client.V1Container(name="c", image="busybox")]
            ),
        ),
    )
    controllers = Controllers(api, sweep_s=3600)
    controllers.tick()
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["on-n1"]
    core.delete_node("n1")
    controllers.tick()
    assert core.list_namespaced_pod("default").items == []


def test_a_deployment_whose_pods_are_refused_does_not_stop_the_others(
    server: KubeApiServer, api: client.ApiClient
) -> None:
    """A Deployment stored before the API server validated pod templates (planted)."""
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    broken = api.sanitize_for_serialization(deployment("a-broken", 1))
    broken["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1.5.3Gi"}
    }
    server.store.create(REGISTRY[("apps", "v1", "deployments")], "default", broken)
    apps.create_namespaced_deployment("default", deployment("web", 2))
    Controllers(api).tick()  # the broken one's pod create answers 400: no exception here
    assert len(pods_of(core, "web")) == 2
    assert pods_of(core, "a-broken") == []


def test_a_deleted_node_s_lease_is_collected(api: client.ApiClient) -> None:
    core, leases = client.CoreV1Api(api), client.CoordinationV1Api(api)
    for name in ("kept", "gone"):
        node = core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name)))
        owner = client.V1OwnerReference(
            api_version="v1", kind="Node", name=name, uid=node.metadata.uid
        )
        leases.create_namespaced_lease(
            "kube-node-lease",
            client.V1Lease(
                metadata=client.V1ObjectMeta(name=name, owner_references=[owner]),
                spec=client.V1LeaseSpec(holder_identity=name, lease_duration_seconds=40),
            ),
        )
    core.delete_node("gone")
    Controllers(api).tick()
    names = {lease.metadata.name for lease in leases.list_namespaced_lease("kube-node-lease").items}
    assert names == {"kept"}


def test_a_deployment_rolls_out_through_replica_sets(api: client.ApiClient) -> None:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    apps.create_namespaced_deployment("default", deployment("roll", 2))
    controllers = Controllers(api)
    controllers.tick()
    (rs,) = apps.list_namespaced_replica_set("default").items
    assert rs.metadata.owner_references[0].kind == "Deployment"
    assert rs.metadata.annotations["deployment.kubernetes.io/revision"] == "1"
    pods = pods_of(core, "roll")
    assert {p.metadata.owner_references[0].name for p in pods} == {rs.metadata.name}
    controllers.tick()
    status = apps.read_namespaced_deployment_status("roll", "default").status
    assert (status.replicas, status.updated_replicas, status.available_replicas) == (2, 2, None)


def test_the_nodeclaims_of_a_deleted_nodepool_are_collected(api: client.ApiClient) -> None:
    """As the garbage collector does for Karpenter's: by the owner's uid, so a pool created
    again under the name of a deleted one owns none of its claims; a claim's finalizer holds
    it, deleting, until its controller lets go."""
    custom = client.CustomObjectsApi(api)
    group = ("cloudburst.io", "v1alpha1", "default")

    def pool(name: str) -> str:
        created = custom.create_namespaced_custom_object(
            *group,
            "nodepools",
            {
                "apiVersion": "cloudburst.io/v1alpha1",
                "kind": "NodePool",
                "metadata": {"name": name},
                "spec": {},
            },
        )
        return str(created["metadata"]["uid"])

    def claim(name: str, owner: str | None, pool_uid: str | None) -> None:
        metadata: dict[str, object] = {"name": name, "finalizers": ["cloudburst.io/termination"]}
        if owner and pool_uid:
            metadata["ownerReferences"] = [
                {
                    "apiVersion": "cloudburst.io/v1alpha1",
                    "kind": "NodePool",
                    "name": owner,
                    "uid": pool_uid,
                    "blockOwnerDeletion": True,
                }
            ]
        spec = {
            "nodePool": owner or "none",
            "nodeClass": "sample",
            "offerings": [{"provider": "fake", "region": "sim-1", "instanceType": "s"}],
        }
        custom.create_namespaced_custom_object(
            *group,
            "nodeclaims",
            {
                "apiVersion": "cloudburst.io/v1alpha1",
                "kind": "NodeClaim",
                "metadata": metadata,
                "spec": spec,
            },
        )

    old_uid = pool("reborn")
    claim("of-deleted", "reborn", old_uid)
    claim("of-kept", "kept", pool("kept"))
    claim("unowned", None, None)
    controllers = Controllers(api)
    controllers.tick()  # every owner there: nothing collected
    custom.delete_namespaced_custom_object(*group, "nodepools", "reborn")
    pool("reborn")  # created again: it owns nothing of the old one's

    controllers.tick()

    claims = custom.list_namespaced_custom_object(*group, "nodeclaims")["items"]
    deleting = {c["metadata"]["name"]: bool(c["metadata"].get("deletionTimestamp")) for c in claims}
    assert deleting == {"of-deleted": True, "of-kept": False, "unowned": False}
