"""Which Cloudburst this is: `cloudburst --version` and `cloudburst version`.

The release is the installed distribution's (worker.settings.RELEASE, what the worker's release
guard compares). The commit is known where the install records one: pip's `direct_url.json`
of an install from a VCS URL, or the git checkout an editable install (`make setup`) runs
from; a wheel built without either has none, and says so (null) rather than guess.
"""

from __future__ import annotations

import json
import subprocess
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from pydantic import BaseModel

from worker.settings import RELEASE

DISTRIBUTION = "cloudburst"


class ReleaseInfo(BaseModel):
    release: str
    commit: str | None


def release_info() -> ReleaseInfo:
    return ReleaseInfo(release=RELEASE, commit=_recorded_commit() or _checkout_commit())


def _recorded_commit() -> str | None:
    """The commit pip recorded for an install from a VCS URL (PEP 610)."""
    try:
        text = distribution(DISTRIBUTION).read_text("direct_url.json")
    except PackageNotFoundError:
        return None
    if not text:
        return None
    try:
        vcs = json.loads(text).get("vcs_info") or {}
    except (ValueError, AttributeError):
        return None
    commit = vcs.get("commit_id") if isinstance(vcs, dict) else None
    return commit if isinstance(commit, str) else None


def _checkout_commit() -> str | None:
    """HEAD of the git checkout this code runs from (an editable install), if it is one."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        found = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = found.stdout.strip()
    return commit or None
