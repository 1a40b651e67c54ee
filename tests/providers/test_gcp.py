"""GCP specifics: operation polling stays on the configured endpoint (the ExtendedOperation
trap), request ids, label mapping, anonymous vs service-account credentials, classification."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from google.api_core import exceptions as gexc

from activities.providers.base import (
    CapacityError,
    FatalError,
    InstanceSpec,
    ProviderError,
    RetryableError,
    split_instance_id,
)
from activities.providers.gcp import (
    GcpProvider,
    canonical_key,
    instance_name,
    label_key,
    label_value,
    parse_credential,
    request_id,
)
from api import labels as L
from api.nodeclass import GcpClass
from sim.clouds.gcp import GcpStandin, parse_filter
from tests.providers.harness_gcp import standin_and_provider

CLUSTER = "gcp-cluster"


def spec(name: str, cluster: str = CLUSTER, **kw: Any) -> InstanceSpec:
    return InstanceSpec(
        name=name,
        cluster_id=cluster,
        node_pool="burst",
        region=kw.pop("region", "europe-west4"),
        instance_type=kw.pop("instance_type", "e2-standard-2"),
        user_data=kw.pop("user_data", "#!/bin/sh\necho hi\n"),
        labels={L.MANAGED: "true", L.CLUSTER: cluster, L.NODEPOOL: "burst", L.NODECLAIM: name},
        **kw,
    )


def claim() -> str:
    return f"nc-gcp-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def gcp() -> Iterator[tuple[GcpStandin, GcpProvider]]:
    with standin_and_provider(op_delay_s=0.4) as pair:
        yield pair


def test_operation_polling_stays_on_the_configured_endpoint(
    gcp: tuple[GcpStandin, GcpProvider],
) -> None:
    cloud, provider = gcp
    before = len(cloud.polls())
    inst = provider.create(spec(claim()))
    # The insert answered RUNNING; the VM exists only once the operation is done, and the
    # only way to learn that was to poll the stand-in: the polls say it waited for it.
    polls = cloud.polls()[before:]
    assert polls and all(zone == "europe-west4-a" for zone, _, _ in polls)
    assert {how for _, _, how in polls} == {"wait"}
    host = urlsplit(cloud.url).netloc
    assert {h for _, _, h in cloud.requests_seen()} == {host}
    assert provider.get(inst.id) is not None
    provider.delete(inst.id)


def test_request_id_is_stable_per_claim_and_offering(gcp: tuple[GcpStandin, GcpProvider]) -> None:
    a = request_id("nc-1", "europe-west4-a", "e2-small")
    assert a == request_id("nc-1", "europe-west4-a", "e2-small")
    assert a != request_id("nc-1", "us-central1-a", "e2-small")
    assert uuid.UUID(a).version == 5 and uuid.UUID(a).int != 0
    cloud, provider = gcp
    name = claim()
    inserts_before = [
        r for r in cloud.requests_seen() if r[0] == "POST" and r[1].endswith("/instances")
    ]
    first = provider.create(spec(name))
    second = provider.create(spec(name))  # the same request id: GCE returns the same operation
    inserts = [r for r in cloud.requests_seen() if r[0] == "POST" and r[1].endswith("/instances")]
    assert first.id == second.id and len(inserts) - len(inserts_before) == 2
    assert cloud.stats()["created_by_name"][name] == 1
    provider.delete(first.id)


def test_capacity_in_the_operation_then_a_clean_retry(gcp: tuple[GcpStandin, GcpProvider]) -> None:
    cloud, provider = gcp
    name = claim()
    cloud.inject_failure("create", "capacity")
    with pytest.raises(CapacityError) as caught:
        provider.create(spec(name))
    assert "ZONE_RESOURCE_POOL_EXHAUSTED" in str(caught.value)
    # The failed request id would replay its failure: the retry derives a new one.
    inst = provider.create(spec(name))
    assert cloud.stats()["created_by_name"][name] == 1
    provider.delete(inst.id)


def test_labels_are_mapped_and_read_back_exactly(gcp: tuple[GcpStandin, GcpProvider]) -> None:
    assert label_key(L.NODECLAIM) == "cloudburst-io_nodeclaim"
    assert canonical_key(label_key(L.NODECLAIM)) == L.NODECLAIM
    assert label_value("Prod.Cluster/01") == "prod-cluster-01"
    cloud, provider = gcp
    cluster = "Prod.Cluster-01"  # not a valid label value as is
    name = claim()
    inst = provider.create(spec(name, cluster=cluster))
    vm = cloud.peek(split_instance_id(inst.id)[2])
    assert vm is not None
    assert vm["gce_labels"]["cloudburst-io_cluster"] == "prod-cluster-01"
    assert vm["gce_labels"]["cloudburst-io_nodeclaim"] == name
    assert inst.labels[L.CLUSTER] == cluster  # canonical, exact
    owned = provider.list_owned(cluster)
    assert [i.id for i in owned] == [inst.id] and owned[0].labels[L.NODECLAIM] == name
    # Another cluster whose sanitised id collides is not ours.
    assert provider.list_owned("prod-cluster-01") == []
    provider.delete(inst.id)


def test_instance_names_are_valid() -> None:
    assert instance_name("nc-abc") == "nc-abc"
    assert instance_name("Pool.Claim_1") == "pool-claim-1"
    assert instance_name("1abc").startswith("cb-")
    long = instance_name("n" + "x" * 100)
    assert len(long) <= 63 and long != instance_name("n" + "x" * 101)


def test_no_credential_means_anonymous() -> None:
    with standin_and_provider(credential=False) as (cloud, provider):
        inst = provider.create(spec(claim()))
        assert provider.get(inst.id) is not None
        assert cloud.stats()["tokens_issued"] == 0
    # Against a cloud that wants a credential, anonymous is refused with what to fix.
    with GcpStandin(boot_delay_s=0) as cloud:
        block = GcpClass.model_validate(cloud.nodeclass_block("gcp", "key"))
        with pytest.raises(FatalError) as caught:
            GcpProvider(block, None).create(spec(claim()))
        assert "credentialsSecretRef" in caught.value.fix


def test_credentials_never_appear_in_errors(gcp: tuple[GcpStandin, GcpProvider]) -> None:
    cloud, provider = gcp
    cloud.inject_failure("create", "auth", times=5)
    try:
        with pytest.raises(FatalError) as caught:
            provider.create(spec(claim()))
    finally:
        cloud.clear_failures()
    key_body = cloud.private_key_pem.splitlines()[1]
    text = f"{caught.value} {caught.value!r} {caught.value.__cause__!r}"
    assert key_body not in text and cloud.access_token not in text
    # A broken key: the error names the Secret, not the key material.
    info = cloud.service_account_info()
    info["private_key"] = info["private_key"].replace("MII", "XYZ")
    with pytest.raises(FatalError) as bad:
        parse_credential(json.dumps(info))
    assert key_body[5:30] not in str(bad.value) and bad.value.__cause__ is None
    with pytest.raises(FatalError):
        parse_credential("{not json")


def _api_error(cls: type[gexc.GoogleAPICallError], reason: str) -> gexc.GoogleAPICallError:
    return cls("message", errors=[{"reason": reason, "message": "m", "domain": "global"}])


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (_api_error(gexc.Forbidden, "quotaExceeded"), CapacityError),
        (_api_error(gexc.Forbidden, "forbidden"), FatalError),
        (_api_error(gexc.TooManyRequests, "rateLimitExceeded"), RetryableError),
        (_api_error(gexc.Forbidden, "rateLimitExceeded"), RetryableError),
        (_api_error(gexc.ServiceUnavailable, "backendError"), CapacityError),
        (_api_error(gexc.Unauthorized, "authError"), FatalError),
        (_api_error(gexc.BadRequest, "invalid"), FatalError),
        (_api_error(gexc.InternalServerError, "backendError"), RetryableError),
    ],
)
def test_create_errors_are_classified(
    gcp: tuple[GcpStandin, GcpProvider], error: Exception, expected: type[ProviderError]
) -> None:
    _cloud, provider = gcp
    with pytest.raises(ProviderError) as caught:
        provider._raise(error, "create", creating=True)
    assert type(caught.value) is expected


def test_outage_on_reads_is_retryable(gcp: tuple[GcpStandin, GcpProvider]) -> None:
    cloud, provider = gcp
    cloud.inject_failure("get", "unavailable")
    with pytest.raises(RetryableError):
        provider.get("gcp/europe-west4-a/whatever")
    assert provider.get("gcp/europe-west4-a/does-not-exist") is None
    provider.delete("gcp/europe-west4-a/does-not-exist")


def test_other_regions_use_the_zones_map(gcp: tuple[GcpStandin, GcpProvider]) -> None:
    cloud, provider = gcp
    inst = provider.create(spec(claim(), region="us-central1", instance_type="t2a-standard-2"))
    assert inst.id.startswith("gcp/us-central1-a/") and inst.region == "us-central1"
    vm = cloud.peek(split_instance_id(inst.id)[2])
    assert vm is not None and vm["zone"] == "us-central1-a"
    assert [i.id for i in provider.list_owned(CLUSTER) if i.id == inst.id] == [inst.id]
    provider.delete(inst.id)


def test_filter_parsing() -> None:
    assert parse_filter('(labels.a = "x") AND (labels.b-c_d = "y")') == {
        "labels.a": "x",
        "labels.b-c_d": "y",
    }
    assert parse_filter('name = "vm-1"') == {"name": "vm-1"}


def test_bootable_view(gcp: tuple[GcpStandin, GcpProvider]) -> None:
    cloud, provider = gcp
    script = "#!/bin/sh\necho 'grüße' \"x\"\n"
    inst = provider.create(spec(claim(), user_data=script))
    native = split_instance_id(inst.id)[2]
    assert cloud.instance_states()[native] in ("pending", "running")
    vm = cloud.peek(native)
    assert vm is not None and vm["user_data"] == script and vm["private_ip"]
    assert vm["labels"][L.NODECLAIM] == inst.name
    assert cloud.instance_shape("t2a-standard-2") == (2.0, 8.0, "arm64")
    assert cloud.instance_shape("e2-standard-2") == (2.0, 8.0, "x86_64")
    provider.delete(inst.id)
