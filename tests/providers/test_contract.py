"""One contract suite for every provider module, each against its cloud's local stand-in.

Parametrized over the harness modules `tests/providers/harness_<provider>.py` (see
`harness.py`): create → get → list_owned → idempotent create → delete → gone → delete again;
user data intact; canonical labels; injected failures classified; the catalog.
Run one cloud with `-k hetzner`.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from activities.providers.base import (
    CapacityError,
    FatalError,
    Instance,
    InstanceSpec,
    ProviderError,
    RetryableError,
    split_instance_id,
)
from api import labels as L
from tests.providers.harness import ProviderHarness, harness_module, harness_names

CLUSTER = "ct-cluster"
POOL = "burst"
GONE_TIMEOUT_S = 30.0

# The error class each injected failure must surface as (activities/providers/base.py's error classes).
EXPECTED_ERRORS: dict[str, type[ProviderError]] = {
    "capacity": CapacityError,
    "quota": CapacityError,
    "unavailable": CapacityError,  # outage: try the next offering
    "throttle": RetryableError,
    "auth": FatalError,
}


@pytest.fixture(scope="module", params=harness_names())
def h(request: pytest.FixtureRequest) -> Iterator[ProviderHarness]:
    module: Any = harness_module(request.param)
    with module.harness() as value:
        assert isinstance(value, ProviderHarness)
        yield value


@pytest.fixture
def made(h: ProviderHarness) -> Iterator[list[str]]:
    """Instance ids a test made; deleted afterwards, best effort."""
    ids: list[str] = []
    yield ids
    h.clear()
    for iid in ids:
        with contextlib.suppress(ProviderError):
            h.provider.delete(iid)


def claim_name() -> str:
    # Valid on every cloud: lower case, starts with a letter, short.
    return f"nc-ct-{uuid.uuid4().hex[:10]}"


def spec(h: ProviderHarness, name: str, user_data: str = "#!/bin/sh\necho hi\n") -> InstanceSpec:
    return InstanceSpec(
        name=name,
        cluster_id=CLUSTER,
        node_pool=POOL,
        region=h.region,
        instance_type=h.instance_type,
        user_data=user_data,
        labels={
            L.MANAGED: "true",
            L.CLUSTER: CLUSTER,
            L.NODEPOOL: POOL,
            L.NODECLAIM: name,
        },
    )


def wait_for(fn: Callable[[], Any], timeout: float = GONE_TIMEOUT_S, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or fn}; last value {value!r}")
        time.sleep(0.1)


def assert_canonical_labels(inst: Instance, name: str) -> None:
    assert inst.labels.get(L.MANAGED) == "true", inst.labels
    assert inst.labels.get(L.CLUSTER) == CLUSTER, inst.labels
    assert inst.labels.get(L.NODEPOOL) == POOL, inst.labels
    assert inst.labels.get(L.NODECLAIM) == name, inst.labels


def big_script() -> str:
    """About 20 KiB of shell with quotes, backslashes, tabs, unicode and a heredoc."""
    head = (
        "#!/bin/bash\nset -euo pipefail\n"
        "echo 'single' \"double\" `backtick` $HOME \\\\ \\n \t tab\n"
        "cat > /etc/motd <<'EOF'\nGrüße aus Zürich — ☁️ burst 🚀 ünïcödé 日本語\nEOF\n"
    )
    lines = [head]
    n = 0
    while sum(len(x.encode()) for x in lines) < 20 * 1024:
        lines.append(f'echo "line {n}: it\'s \\"quoted\\" & <tagged> ½ ∑ λ" # {"x" * (n % 40)}\n')
        n += 1
    lines.append("exit 0\n")
    return "".join(lines)


# ---- the suite -----------------------------------------------------------------------------


def test_lifecycle_is_idempotent(h: ProviderHarness, made: list[str]) -> None:
    p = h.provider
    name = claim_name()
    inst = p.create(spec(h, name))
    made.append(inst.id)
    provider, _region, native = split_instance_id(inst.id)
    assert provider == p.name == inst.provider and native
    assert inst.name == name or name in inst.name
    assert inst.instance_type == h.instance_type
    assert_canonical_labels(inst, name)

    got = p.get(inst.id)
    assert got is not None and got.id == inst.id
    assert_canonical_labels(got, name)

    owned = [i for i in p.list_owned(CLUSTER) if i.labels.get(L.NODECLAIM) == name]
    assert [i.id for i in owned] == [inst.id]
    assert_canonical_labels(owned[0], name)
    assert all(i.id != inst.id for i in p.list_owned("some-other-cluster"))

    again = p.create(spec(h, name))
    assert again.id == inst.id
    assert h.created_count(name) == 1

    p.delete(inst.id)
    wait_for(lambda: p.get(inst.id) is None, what=f"{inst.id} to be gone")
    p.delete(inst.id)  # already gone: fine
    assert all(i.id != inst.id for i in p.list_owned(CLUSTER))
    assert h.created_count(name) == 1


def test_user_data_arrives_intact(h: ProviderHarness, made: list[str]) -> None:
    script = big_script()
    assert 20 * 1024 <= len(script.encode()) < 24 * 1024
    inst = h.provider.create(spec(h, claim_name(), user_data=script))
    made.append(inst.id)
    assert h.user_data_of(inst.id) == script


@pytest.mark.parametrize("kind", list(EXPECTED_ERRORS))
def test_injected_failure_is_classified(h: ProviderHarness, made: list[str], kind: str) -> None:
    name = claim_name()
    h.inject(kind)
    try:
        with pytest.raises(ProviderError) as caught:
            inst = h.provider.create(spec(h, name))
            made.append(inst.id)
    finally:
        h.clear()
    err = caught.value
    assert isinstance(err, EXPECTED_ERRORS[kind]), f"{kind} surfaced as {err!r}"
    assert err.provider == h.provider.name
    if isinstance(err, FatalError):
        assert err.fix, "a fatal error must say what to fix"
    if h.credential:
        assert h.credential not in str(err)
        assert h.credential not in repr(err.__cause__ or "")
    # Nothing is left behind that a retry would trip over: the next create works.
    inst = h.provider.create(spec(h, name))
    made.append(inst.id)
    assert_canonical_labels(inst, name)


def test_instance_type_catalog(h: ProviderHarness) -> None:
    types = h.provider.instance_types()
    assert types and all(t.provider == h.provider.name for t in types)
    ours = next((t for t in types if t.name == h.instance_type), None)
    assert ours is not None, f"{h.instance_type} missing from {[t.name for t in types]}"
    assert ours.vcpu > 0 and ours.memory_gib > 0 and ours.arch
    assert not ours.regions or h.region in ours.regions
