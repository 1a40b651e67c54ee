"""The release guard's decision (worker/release_guard.py): an older worker refuses to start
after a newer release ran, unless the operator allows the downgrade; bench/upgrade.py shows
the refusal end to end."""

from __future__ import annotations

import pytest

from worker import release_guard
from worker.release_guard import Action, compare, data_key, decide

WHERE = "cloudburst-system/cloudburst-release"


def verdict(recorded: str | None, running: str, allow: bool = False) -> release_guard.Verdict:
    return decide(recorded, running, allow_downgrade=allow, temporal_namespace="prod", where=WHERE)


@pytest.mark.parametrize(
    ("recorded", "running", "action"),
    [
        (None, "0.1.0", Action.RECORD),  # the first worker on this cluster
        ("0.1.0", "0.2.0", Action.RECORD),  # an upgrade
        ("0.2.0rc1", "0.2.0", Action.RECORD),
        ("0.1.0", "0.1.0+drill", Action.RECORD),  # a local build of a release is newer
        ("0.2.0", "0.2.0", Action.KEEP),  # a restart
        ("0.2.0", "0.1.0", Action.REFUSE),  # a rollback
        ("0.10.0", "0.9.0", Action.REFUSE),  # numeric, not text, order
        ("hand-edited", "0.1.0", Action.RECORD),  # no version recorded: ours is
        ("0.2.0", "unreleased", Action.KEEP),  # a source tree never installed: not checked
    ],
)
def test_what_a_worker_does(recorded: str | None, running: str, action: Action) -> None:
    assert verdict(recorded, running).action is action


def test_the_override_lets_an_older_release_start_without_recording_it() -> None:
    allowed = verdict("0.2.0", "0.1.0", allow=True)
    assert allowed.action is Action.KEEP
    assert "CLOUDBURST_ALLOW_DOWNGRADE" in allowed.message
    # Nothing to allow on an upgrade: it is recorded as without the override.
    assert verdict("0.1.0", "0.2.0", allow=True).action is Action.RECORD


def test_the_refusal_names_both_releases_what_a_rollback_does_and_what_to_do() -> None:
    message = verdict("0.3.0", "0.2.0").message
    assert release_guard.REFUSAL_OPENING in message
    assert "release 0.3.0 already ran" in message and "cloudburst worker 0.2.0" in message
    assert "'prod'" in message and WHERE in message
    assert "nondeterministic" in message and "decode" in message  # what would happen
    assert "roll forward" in message  # what to do
    assert "CLOUDBURST_ALLOW_DOWNGRADE=true" in message and '"Rollback: safe"' in message


def test_versions_compare_as_pep_440_and_without_packaging_by_their_numbers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert compare("0.10.0", "0.9.1") == 1
    assert compare("1.0.0", "1.0.0") == 0
    assert compare("1.0.0.dev3", "1.0.0") == -1
    assert compare("x", "1.0.0") is None
    # An image without `packaging`: the numeric release part alone.
    monkeypatch.setitem(__import__("sys").modules, "packaging.version", None)
    assert compare("0.10.0", "0.9.1") == 1
    assert compare("v1.2", "1.2.0rc1") == -1  # (1, 2) < (1, 2, 0)
    assert compare("x", "1.0.0") is None


def test_each_temporal_namespace_has_a_key_a_configmap_accepts() -> None:
    assert data_key("default") == "default"
    assert data_key("prod.a1b2c") == "prod.a1b2c"
    assert data_key("odd/name") == "odd_name"
