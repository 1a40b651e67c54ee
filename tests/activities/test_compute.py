"""create/get/delete_instance as the worker runs them: the real provider modules and SDKs,
the cloud stand-ins over HTTP, the credential Secret in Kubernetes' own API server.

What matters most here: a delete never gives up while the VM may still exist.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.compute import ComputeActivities
from activities.providers import provider_class
from activities.providers.base import Instance, InstanceSpec, Provider, split_instance_id
from api import labels as L
from api.errors import INVALID_CONFIGURATION, PROVIDER_FATAL
from api.messages import InstanceRef
from api.nodeclass import NodeClassSpec
from cluster.tenancy import Tenancy
from sim.clouds.ovh import OvhStandin
from sim.clouds.scaleway import ScalewayStandin, new_secret_key
from tests.activities.claims import claims_env

CLUSTER = "c1"
SECRET = "cloud-creds"
KEY = "credential"


@dataclass
class Cloud:
    name: str
    standin: ScalewayStandin | OvhStandin
    credential: str  # what the stand-in accepts
    wrong_credential: str  # well-formed, but refused (an expired or rotated key)

    def node_class(self) -> NodeClassSpec:
        return NodeClassSpec.model_validate(
            {
                self.name: self.standin.nodeclass_block(SECRET, KEY),
                "join": {"hostApiServer": "https://100.64.0.1:6443"},
            }
        )

    def provider(self) -> Provider:
        block = self.node_class().provider_block(self.name)
        return provider_class(self.name)(block, self.credential)

    def make_vm(self, claim: str, **kw: Any) -> Instance:
        """A VM of `claim` as create_instance makes it (by the provider directly)."""
        values: dict[str, Any] = {
            "name": claim,
            "cluster_id": CLUSTER,
            "node_pool": "burst",
            "region": self.standin.region,
            "instance_type": self.standin.instance_type,
            "user_data": "#!/bin/sh\n",
            "labels": {
                L.MANAGED: "true",
                L.CLUSTER: CLUSTER,
                L.NODEPOOL: "burst",
                L.NODECLAIM: claim,
            },
            **kw,
        }
        return self.provider().create(InstanceSpec.model_validate(values))

    def exists(self, inst: Instance) -> bool:
        vm = self.standin.peek(split_instance_id(inst.id)[2])
        return vm is not None and vm["state"] != "stopping"


@pytest.fixture(params=["scaleway", "ovh"])
def cloud(request: pytest.FixtureRequest) -> Iterator[Cloud]:
    if request.param == "scaleway":
        scw = ScalewayStandin(secret_key=new_secret_key(), boot_delay_s=0.05, delete_delay_s=0.05)
        with scw:
            yield Cloud("scaleway", scw, scw.credential, new_secret_key())
    else:
        with OvhStandin(boot_delay_s=0.05, delete_delay_s=0.05) as ovh:
            wrong = {**json.loads(ovh.credential), "application_secret": "expired-secret-0000"}
            yield Cloud("ovh", ovh, ovh.credential, json.dumps(wrong))


@pytest.fixture
def scaleway() -> Iterator[Cloud]:
    with ScalewayStandin(secret_key=new_secret_key(), boot_delay_s=0.05, delete_delay_s=0.05) as c:
        yield Cloud("scaleway", c, c.credential, new_secret_key())


@pytest.fixture
def acts(kube_api_client: client.ApiClient, request: pytest.FixtureRequest) -> ComputeActivities:
    """The worker, with the test's stand-in allowed as an endpoint override (as the dev
    stack's operator allows its stand-ins)."""
    clouds = [
        request.getfixturevalue(n) for n in ("cloud", "scaleway") if n in request.fixturenames
    ]
    allowed = {c.name: (c.standin.url,) for c in clouds}
    return ComputeActivities(kube_api_client, Tenancy(allowed_endpoints=allowed))


def put_secret(core: client.CoreV1Api, namespace: str, value: str) -> None:
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name=SECRET),
        data={KEY: base64.b64encode(value.encode()).decode()},
    )
    try:
        core.create_namespaced_secret(namespace, body)
    except client.ApiException as err:
        if err.status != 409:
            raise
        core.replace_namespaced_secret(SECRET, namespace, body)


def ref(cloud: Cloud, namespace: str, claim: str, instance_id: str | None) -> InstanceRef:
    return InstanceRef(
        claim_name=claim,
        instance_id=instance_id,
        provider=cloud.name,
        cluster_id=CLUSTER,
        reason="Empty",
        namespace=namespace,
        node_class_name="default",
        node_class=cloud.node_class(),
    )


def run(fn: Any, r: InstanceRef) -> Any:
    """The activity as the claim's own workflow runs it (it acts for no other)."""
    return claims_env(r.namespace, r.claim_name).run(fn, r)


def failure(fn: Any, r: InstanceRef) -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        run(fn, r)
    return caught.value


def test_a_vm_is_looked_up_and_deleted_only_for_its_claims_own_workflow(
    acts: ComputeActivities, core: client.CoreV1Api, namespace: str, scaleway: Cloud
) -> None:
    """Whoever starts a workflow of another id with this claim's name in its input reaches
    neither its VM nor its Secret. (Fails on the activities that took the input's word.)"""
    put_secret(core, namespace, scaleway.credential)
    vm = scaleway.make_vm("nc-theirs")
    r = ref(scaleway, namespace, "nc-theirs", vm.id)
    for fn in (acts.get_instance, acts.delete_instance):
        with pytest.raises(ApplicationError) as refused:
            ActivityEnvironment().run(fn, r)
        assert refused.value.non_retryable and "not authorised by the cluster" in str(refused.value)
    assert scaleway.exists(vm)


def test_delete_with_an_expired_credential_retries_until_it_is_fixed(
    acts: ComputeActivities, core: client.CoreV1Api, namespace: str, cloud: Cloud
) -> None:
    vm = cloud.make_vm("nc-expired")
    put_secret(core, namespace, cloud.wrong_credential)
    r = ref(cloud, namespace, "nc-expired", vm.id)

    err = failure(acts.delete_instance, r)
    assert err.type == PROVIDER_FATAL and not err.non_retryable, err
    field = cloud.node_class().provider_block(cloud.name).credential_field()
    assert field in err.message  # what to fix
    assert cloud.wrong_credential not in err.message
    assert cloud.exists(vm)

    # The operator rotates the Secret; the activity's next attempt deletes the VM.
    put_secret(core, namespace, cloud.credential)
    run(acts.delete_instance, r)
    assert cloud.standin.peek(split_instance_id(vm.id)[2]) is None


def test_delete_without_the_credentials_secret_retries(
    acts: ComputeActivities, core: client.CoreV1Api, namespace: str, cloud: Cloud
) -> None:
    vm = cloud.make_vm("nc-nosecret")
    r = ref(cloud, namespace, "nc-nosecret", vm.id)

    err = failure(acts.delete_instance, r)
    assert err.type == INVALID_CONFIGURATION and not err.non_retryable, err
    assert f"{namespace}/{SECRET}" in err.message
    assert cloud.exists(vm)

    put_secret(core, namespace, cloud.credential)
    run(acts.delete_instance, r)
    assert cloud.standin.peek(split_instance_id(vm.id)[2]) is None


def test_delete_on_a_provider_the_node_class_lacks_retries(
    acts: ComputeActivities, namespace: str, scaleway: Cloud
) -> None:
    r = ref(scaleway, namespace, "nc-noblock", None).model_copy(update={"provider": "ovh"})
    err = failure(acts.delete_instance, r)
    assert err.type == INVALID_CONFIGURATION and not err.non_retryable, err
    assert "`ovh`" in err.message


def test_get_still_fails_at_once_on_a_fatal_error(
    acts: ComputeActivities, core: client.CoreV1Api, namespace: str, scaleway: Cloud
) -> None:
    """Only deletion retries everything: the liveness check keeps its behaviour."""
    vm = scaleway.make_vm("nc-get")
    r = ref(scaleway, namespace, "nc-get", vm.id)
    err = failure(acts.get_instance, r)
    assert err.type == INVALID_CONFIGURATION and err.non_retryable, err
    put_secret(core, namespace, scaleway.wrong_credential)
    err = failure(acts.get_instance, r)
    assert err.type == PROVIDER_FATAL and err.non_retryable, err
    put_secret(core, namespace, scaleway.credential)
    info = run(acts.get_instance, r)
    assert info is not None and info.instance_id == vm.id


def test_delete_by_label_finds_the_vm_in_any_zone(
    acts: ComputeActivities, core: client.CoreV1Api, namespace: str, scaleway: Cloud
) -> None:
    """An interrupted create leaves no instance id: the VM is found by the claim's label,
    whichever zone of whichever region the offering put it in."""
    put_secret(core, namespace, scaleway.credential)
    par2 = scaleway.make_vm("nc-par2", zone="fr-par-2")
    ams = scaleway.make_vm("nc-ams", region="nl-ams")
    assert split_instance_id(par2.id)[1] == "fr-par-2"
    assert split_instance_id(ams.id)[1] == "nl-ams-1"

    run(acts.delete_instance, ref(scaleway, namespace, "nc-par2", None))
    assert scaleway.standin.peek(split_instance_id(par2.id)[2]) is None
    assert scaleway.exists(ams)  # another claim's VM stays

    run(acts.delete_instance, ref(scaleway, namespace, "nc-ams", None))
    assert scaleway.standin.peek(split_instance_id(ams.id)[2]) is None
    assert scaleway.standin.volumes() == []
