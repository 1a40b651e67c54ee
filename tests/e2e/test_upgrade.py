"""The upgrade drill (bench/upgrade.py), short: the production topology started with the last
release's worker and trigger, rolled to this code worker first while claims are Ready, one is
draining, a burst is booting and another pending, then the worker rolled back. Nothing may
fail, leak, be made twice or get stuck; the rollback either runs cleanly or is refused by the
release guard with its message.

The release is the newest in CHANGELOG.md: its `Commit:` line, else its tag `v<version>`;
skipped when neither is there yet, or when this clone lacks the commit (a shallow one).
CLOUDBURST_UPGRADE_FROM names another git ref (or a directory) to drill from.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FROM_ENV = "CLOUDBURST_UPGRADE_FROM"
_RELEASE = re.compile(r"^## (?P<version>\d+\.\d+\.\d+)\b", re.M)
_COMMIT = re.compile(r"^Commit: (?P<commit>[0-9a-f]{40})\b", re.M)


def last_release() -> tuple[str | None, str]:
    """The git ref of CHANGELOG.md's newest release, or None and why there is none."""
    changelog = (ROOT / "CHANGELOG.md").read_text()
    headings = list(_RELEASE.finditer(changelog))
    if not headings:
        return None, "CHANGELOG.md names no release"
    version = headings[0]["version"]
    section = changelog[headings[0].end() : headings[1].start() if len(headings) > 1 else None]
    commit = _COMMIT.search(section)
    ref = commit["commit"] if commit else f"v{version}"
    if not _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"):
        if commit is None:
            return None, f"release {version} has no Commit line and no tag {ref} yet"
        return None, f"this clone lacks release {version}'s commit {ref} (a shallow clone?)"
    return ref, ""


def _git(*args: str) -> bool:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, check=False)
    return done.returncode == 0


@pytest.mark.timeout(420)
def test_a_roll_from_the_last_release_and_back_breaks_nothing() -> None:
    ref, why = (os.environ[FROM_ENV], "") if os.environ.get(FROM_ENV) else last_release()
    if ref is None:
        pytest.skip(why)
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "upgrade.py"),
            "--from", ref,
            "--order", "worker-first",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )  # fmt: skip
    result = json.loads(run.stdout.strip().splitlines()[-1])
    [drill] = result["runs"]
    assert run.returncode == 0 and result["ok"], (drill["problems"], run.stderr[-3000:])

    # The old processes ran the release's own tree (a worktree), not this checkout.
    if not Path(ref).is_dir():
        assert not Path(drill["old"]["runs_from"]).is_relative_to(ROOT), drill["old"]
    # What the roll met: a claim draining, claims launching, pods pending.
    claims = drill["at_roll"]["claims"]
    assert claims.get("Deleting", 0) >= 1, drill["at_roll"]
    assert sum(claims.get(p, 0) for p in ("Pending", "Provisioning", "Joining")) >= 1, drill
    assert drill["at_roll"]["pods_pending"] > 0, drill["at_roll"]
    assert drill["draining_claim"].get("ended_after_roll"), drill["draining_claim"]

    assert drill["workflow_tasks_failed"] == {} and drill["nondeterminism"] == {}, drill
    rollback = drill["rollback"]
    assert rollback["outcome"] in ("ran", "refused"), rollback
    if rollback["outcome"] == "refused":
        assert "CLOUDBURST_ALLOW_DOWNGRADE=true" in rollback["message"], rollback
    else:
        assert rollback["workflow_tasks_failed"] == 0, rollback
