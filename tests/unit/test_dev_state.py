"""`cloudburst dev` keeps Temporal's state across restarts of one release only."""

from __future__ import annotations

from pathlib import Path

from sim.dev.stack import keep_state_of_this_release
from worker.settings import RELEASE


def test_a_db_of_an_earlier_checkout_is_kept_aside_and_one_of_this_release_kept(
    tmp_path: Path,
) -> None:
    db = tmp_path / "temporal.db"
    db.write_text("workflows of a checkout before the first release")
    assert keep_state_of_this_release(tmp_path) == db
    assert not db.exists()  # this release starts afresh ...
    assert (tmp_path / "temporal.db.an-earlier-checkout").read_text().startswith("workflows")
    db.write_text("this release's workflows")
    assert keep_state_of_this_release(tmp_path) == db
    assert db.read_text() == "this release's workflows"  # ... and keeps its own
    assert (tmp_path / "release").read_text().strip() == RELEASE


def test_a_db_of_another_release_is_kept_aside(tmp_path: Path) -> None:
    (tmp_path / "temporal.db").write_text("0.0.9's")
    (tmp_path / "release").write_text("0.0.9\n")
    keep_state_of_this_release(tmp_path)
    assert (tmp_path / "temporal.db.0.0.9").read_text() == "0.0.9's"
