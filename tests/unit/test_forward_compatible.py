"""A worker reads what a newer release wrote: fields it does not know are skipped, anything else
wrong still fails. This is what makes a rollback safe when the newer release only added fields
(0.1.0's workers refused a pool's plan once 0.2.0 gave offerings an `available` count)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload

from api.nodeclaim import NodeClaim, NodeClaimSpec, Offering
from api.nodepool.messages import PoolState
from tests.workflows.test_history_bound import waiting_pods
from tests.workflows.test_nodepool_races import specs
from worker.payload_codec import DATA_CONVERTER


def written(value: object, change: Any) -> Payload:
    """`value` as a newer release would write it: its JSON changed by `change`."""
    [payload] = DATA_CONVERTER.payload_converter.to_payloads([value])
    document = json.loads(payload.data)
    change(document)
    return Payload(metadata=payload.metadata, data=json.dumps(document).encode())


def read(payload: Payload) -> PoolState:
    [value] = DATA_CONVERTER.payload_converter.from_payloads([payload], [PoolState])
    assert isinstance(value, PoolState)
    return value


def newer_fields(document: dict[str, Any]) -> None:
    document["consolidationHistory"] = [1, 2]  # at the top
    document["specs"]["pool"]["disruption"]["budgets"][0]["maxPerHour"] = 3  # in a list
    document["specs"]["node_class"]["fake"]["diskGiB"] = 40  # deep in a model


def test_fields_a_newer_release_added_are_skipped_and_the_rest_is_read() -> None:
    state = PoolState(specs=specs(), pending=waiting_pods(3))
    assert read(written(state, newer_fields)) == state


def test_a_field_of_the_wrong_type_still_fails_even_beside_unknown_ones() -> None:
    state = PoolState(specs=specs(), pending=waiting_pods(1))

    def wrong(document: dict[str, Any]) -> None:
        newer_fields(document)
        document["specs"]["pool"]["weight"] = "heavy"

    with pytest.raises(Exception) as raised:
        read(written(state, wrong))
    assert "weight" in str(raised.value) or "weight" in str(raised.value.__cause__)


def test_an_unknown_field_is_reported_once(caplog: pytest.LogCaptureFixture) -> None:
    state = PoolState(specs=specs(), pending=waiting_pods(1))

    def unknown(document: dict[str, Any]) -> None:
        document["specs"]["pool"]["template"]["annotationsForNodes"] = {"a": "b"}

    with caplog.at_level("WARNING", logger="worker.forward_compatible"):
        read(written(state, unknown))
        read(written(state, unknown))
    said = [r.getMessage() for r in caplog.records if "annotationsForNodes" in r.getMessage()]
    assert len(said) == 1
    assert "specs.pool.template.annotationsForNodes" in said[0]


def test_metadata_keeps_its_unknown_fields_while_a_spec_field_is_skipped() -> None:
    """`ObjectMeta` keeps fields it does not model (managedFields…) by design; skipping a
    newer spec field must not drop them."""
    claim = NodeClaim.model_validate(
        {
            "metadata": {"name": "c1", "namespace": "team", "managedFields": [{"manager": "x"}]},
            "spec": NodeClaimSpec(
                node_pool="p",
                node_class="c",
                offerings=[Offering(provider="fake", region="r", instance_type="t")],
            ).model_dump(by_alias=True),
        }
    )
    [payload] = DATA_CONVERTER.payload_converter.to_payloads([claim])
    document = json.loads(payload.data)
    document["spec"]["offerings"][0]["reservationId"] = "r-1"
    changed = Payload(metadata=payload.metadata, data=json.dumps(document).encode())
    [back] = DATA_CONVERTER.payload_converter.from_payloads([changed], [NodeClaim])
    assert back == claim
    assert back.metadata.model_extra == {"managedFields": [{"manager": "x"}]}
