"""AWS specifics: ClientToken idempotency (moto does not enforce it), error codes, credentials,
and the kubelet view of moto's instances."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.stub import ANY, Stubber

from activities.providers.aws import (
    CLIENT_TOKEN_MAX,
    AwsProvider,
    client_token,
    is_arm_instance_type,
    parse_credential,
)
from activities.providers.base import (
    CapacityError,
    FatalError,
    InstanceSpec,
    ProviderError,
    RetryableError,
    split_instance_id,
)
from api import labels as L
from api.nodeclass import AwsClass
from sim.clouds.aws import AwsStandin
from tests.providers.harness_aws import standin_and_provider

REGION = "eu-central-1"
CLUSTER = "aws-cluster"


def spec(name: str, user_data: str = "#!/bin/sh\necho hi\n", **kw: Any) -> InstanceSpec:
    return InstanceSpec(
        name=name,
        cluster_id=CLUSTER,
        node_pool="burst",
        region=kw.pop("region", REGION),
        instance_type=kw.pop("instance_type", "t3.small"),
        user_data=user_data,
        labels={L.MANAGED: "true", L.CLUSTER: CLUSTER, L.NODEPOOL: "burst", L.NODECLAIM: name},
        **kw,
    )


@pytest.fixture(scope="module")
def moto() -> Iterator[tuple[AwsStandin, AwsProvider]]:
    with standin_and_provider() as pair:
        yield pair


# ---- idempotency, explicitly (moto makes a second instance for a repeated token) -------------


def _stubbed_provider() -> tuple[AwsProvider, Stubber]:
    secret = "stub-secret-" + uuid.uuid4().hex
    provider = AwsProvider(
        AwsClass(region=REGION, endpoint="http://127.0.0.1:9"),
        json.dumps({"aws_access_key_id": "AKIASTUB", "aws_secret_access_key": secret}),
    )
    stubber = Stubber(provider._ec2(REGION))
    return provider, stubber


def _instance(iid: str, name: str, state: str = "pending") -> dict[str, Any]:
    return {
        "InstanceId": iid,
        "InstanceType": "t3.small",
        "State": {"Code": 0, "Name": state},
        "LaunchTime": datetime.now(UTC),
        "PrivateIpAddress": "10.0.0.7",
        "Tags": [
            {"Key": L.MANAGED, "Value": "true"},
            {"Key": L.CLUSTER, "Value": CLUSTER},
            {"Key": L.NODEPOOL, "Value": "burst"},
            {"Key": L.NODECLAIM, "Value": name},
            {"Key": "Name", "Value": name},
        ],
    }


def test_client_token_is_the_claim_and_a_repeat_returns_the_token_s_instance() -> None:
    """What EC2 does and moto does not: the same ClientToken returns the instance it made.

    The second create models the worst case — the tag lookup does not see the first VM yet
    (eventual consistency, or the first answer was lost) — so RunInstances is called again
    with the same token, and EC2 answers with the first instance.
    """
    provider, stubber = _stubbed_provider()
    name = "nc-aws-token-1"
    lookup = {
        "Filters": [
            {"Name": f"tag:{L.NODECLAIM}", "Values": [name]},
            {"Name": f"tag:{L.CLUSTER}", "Values": [CLUSTER]},
            {"Name": "instance-state-name", "Values": ANY},
        ]
    }
    run = {
        "ImageId": ANY,
        "InstanceType": "t3.small",
        "MinCount": 1,
        "MaxCount": 1,
        "ClientToken": name,
        "UserData": ANY,
        "TagSpecifications": ANY,
        "MetadataOptions": ANY,
        "BlockDeviceMappings": ANY,
    }
    first = {"Instances": [_instance("i-0abc", name)], "ReservationId": "r-1"}
    with stubber:
        stubber.add_response("describe_instances", {"Reservations": []}, lookup)
        stubber.add_response("run_instances", first, run)
        stubber.add_response("describe_instances", {"Reservations": []}, lookup)
        stubber.add_response("run_instances", first, run)
        a = provider.create(spec(name))
        b = provider.create(spec(name))
        stubber.assert_no_pending_responses()
    assert a.id == b.id == f"aws/{REGION}/i-0abc"
    assert a.labels[L.NODECLAIM] == name


def test_tags_go_on_instance_and_volume_with_the_claim() -> None:
    provider, stubber = _stubbed_provider()
    name = "nc-aws-tags"
    seen: dict[str, Any] = {}

    def capture(params: dict[str, Any], **_: Any) -> None:
        seen.update(params)

    provider._ec2(REGION).meta.events.register("provide-client-params.ec2.RunInstances", capture)
    with stubber:
        stubber.add_response("describe_instances", {"Reservations": []})
        stubber.add_response(
            "run_instances", {"Instances": [_instance("i-0t", name)], "ReservationId": "r"}
        )
        provider.create(spec(name))
    kinds = {
        t["ResourceType"]: {x["Key"]: x["Value"] for x in t["Tags"]}
        for t in seen["TagSpecifications"]
    }
    assert set(kinds) == {"instance", "volume"}
    for tags in kinds.values():
        assert tags[L.NODECLAIM] == name and tags[L.MANAGED] == "true" and tags["Name"] == name
    assert seen["UserData"] == "#!/bin/sh\necho hi\n"  # boto3 base64-encodes it on the wire


def test_create_finds_the_live_instance_before_calling_run_instances(
    moto: tuple[AwsStandin, AwsProvider],
) -> None:
    cloud, provider = moto
    name = f"nc-aws-{uuid.uuid4().hex[:8]}"
    before = sum(1 for action, _ in cloud.requests_seen() if action == "RunInstances")
    a = provider.create(spec(name))
    b = provider.create(spec(name))
    after = sum(1 for action, _ in cloud.requests_seen() if action == "RunInstances")
    assert a.id == b.id
    assert after - before == 1
    assert cloud.stats()["created_by_name"][name] == 1
    provider.delete(a.id)


def test_long_claim_names_give_a_valid_token() -> None:
    long = "nc-" + "x" * 100
    token = client_token(long)
    assert len(token) <= CLIENT_TOKEN_MAX and token != client_token(long + "y")
    assert client_token("short") == "short"


# ---- error classification ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("InsufficientInstanceCapacity", 500, CapacityError),
        ("VcpuLimitExceeded", 400, CapacityError),
        ("InstanceLimitExceeded", 400, CapacityError),
        ("Unsupported", 400, CapacityError),
        ("InsufficientFreeAddressesInSubnet", 400, CapacityError),
        ("MaxSpotInstanceCountExceeded", 400, CapacityError),
        ("Unavailable", 503, CapacityError),
        ("RequestLimitExceeded", 503, RetryableError),
        ("AuthFailure", 401, FatalError),
        ("UnauthorizedOperation", 403, FatalError),
        ("IdempotentParameterMismatch", 400, FatalError),
        ("InvalidAMIID.NotFound", 400, FatalError),
        ("InternalError", 500, RetryableError),
    ],
)
def test_run_instances_errors_are_classified(
    code: str, status: int, expected: type[ProviderError]
) -> None:
    provider, stubber = _stubbed_provider()
    with stubber:
        stubber.add_response("describe_instances", {"Reservations": []})
        stubber.add_client_error("run_instances", code, "message from EC2", status)
        with pytest.raises(ProviderError) as caught:
            provider.create(spec("nc-aws-err"))
    assert type(caught.value) is expected, caught.value
    assert code in str(caught.value)
    if isinstance(caught.value, FatalError):
        assert caught.value.fix


def test_outage_on_reads_is_retryable_and_not_found_is_gone() -> None:
    provider, stubber = _stubbed_provider()
    with stubber:
        stubber.add_client_error("describe_instances", "Unavailable", "down", 503)
        with pytest.raises(RetryableError):
            provider.get(f"aws/{REGION}/i-1")
        stubber.add_client_error("describe_instances", "InvalidInstanceID.NotFound", "gone", 400)
        assert provider.get(f"aws/{REGION}/i-1") is None
        stubber.add_client_error("terminate_instances", "InvalidInstanceID.NotFound", "gone", 400)
        provider.delete(f"aws/{REGION}/i-1")  # already gone: fine


def test_terminated_is_gone_and_stopped_is_lost() -> None:
    provider, stubber = _stubbed_provider()
    with stubber:
        stubber.add_response(
            "describe_instances",
            {"Reservations": [{"Instances": [_instance("i-2", "n", "terminated")]}]},
        )
        assert provider.get(f"aws/{REGION}/i-2") is None
        stubber.add_response(
            "describe_instances",
            {"Reservations": [{"Instances": [_instance("i-2", "n", "stopped")]}]},
        )
        got = provider.get(f"aws/{REGION}/i-2")
        assert got is not None and got.state.value == "terminated"


# ---- credentials -----------------------------------------------------------------------------


def test_credentials_never_appear_in_errors(moto: tuple[AwsStandin, AwsProvider]) -> None:
    cloud, provider = moto
    cloud.inject_failure("create", "auth")
    try:
        with pytest.raises(FatalError) as caught:
            provider.create(spec(f"nc-aws-{uuid.uuid4().hex[:8]}"))
    finally:
        cloud.clear_failures()
    text = f"{caught.value} {caught.value!r} {caught.value.__cause__!r}"
    assert cloud.secret_access_key not in text
    assert "credentialsSecretRef" in caught.value.fix

    secret = "s3cr3t-" + uuid.uuid4().hex
    for bad in ("not json " + secret, json.dumps({"aws_secret_access_key": secret})):
        with pytest.raises(FatalError) as err:
            parse_credential(bad)
        assert secret not in str(err.value) and err.value.__cause__ is None
    assert parse_credential(None) == {}
    assert parse_credential(
        json.dumps(
            {"aws_access_key_id": "A", "aws_secret_access_key": "B", "aws_session_token": "C"}
        )
    ) == {"aws_access_key_id": "A", "aws_secret_access_key": "B", "aws_session_token": "C"}


def test_graviton_types_get_the_arm_image() -> None:
    assert is_arm_instance_type("m7g.large") and is_arm_instance_type("t4g.small")
    assert is_arm_instance_type("c7gn.xlarge") and not is_arm_instance_type("m6i.large")
    assert not is_arm_instance_type("g5.xlarge")


# ---- the kubelet view ------------------------------------------------------------------------


def test_bootable_view_of_moto(moto: tuple[AwsStandin, AwsProvider]) -> None:
    cloud, provider = moto
    name = f"nc-aws-{uuid.uuid4().hex[:8]}"
    inst = provider.create(spec(name, user_data="#cloud-config\n# ünïcode 'q' \"qq\"\n"))
    native = split_instance_id(inst.id)[2]
    assert cloud.instance_states()[native] == "pending"
    deadline = time.monotonic() + 10
    while cloud.instance_states()[native] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    vm = cloud.peek(native)
    assert vm is not None
    assert vm["user_data"] == "#cloud-config\n# ünïcode 'q' \"qq\"\n"
    assert vm["labels"][L.NODECLAIM] == name and vm["instance_type"] == "t3.small"
    assert vm["private_ip"]
    assert cloud.instance_shape("t3.small") == (2.0, 2.0, "x86_64")
    assert cloud.instance_shape("m7g.large") == (2.0, 8.0, "arm64")
    assert cloud.instance_shape("no.such") is None
    provider.delete(inst.id)
    assert native not in cloud.instance_states()
    assert cloud.peek(native) is None


def test_standins_are_isolated_accounts(moto: tuple[AwsStandin, AwsProvider]) -> None:
    _cloud, provider = moto
    inst = provider.create(spec(f"nc-aws-{uuid.uuid4().hex[:8]}"))
    with AwsStandin(boot_delay_s=0) as other:
        assert split_instance_id(inst.id)[2] not in other.instance_states()
    provider.delete(inst.id)


def test_list_owned_scans_the_extra_regions() -> None:
    with standin_and_provider() as (cloud, _):
        block = AwsClass.model_validate(
            {**cloud.nodeclass_block("aws", "c"), "regions": ["us-east-1"]}
        )
        provider = AwsProvider(block, cloud.credential)
        a = provider.create(spec(f"nc-aws-{uuid.uuid4().hex[:8]}"))
        b = provider.create(spec(f"nc-aws-{uuid.uuid4().hex[:8]}", region="us-east-1"))
        assert b.id.startswith("aws/us-east-1/")
        assert {i.id for i in provider.list_owned(CLUSTER)} == {a.id, b.id}
        assert provider.get(b.id) is not None
