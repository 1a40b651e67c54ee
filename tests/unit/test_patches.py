"""The versioning rule (docs/upgrades.md), checked: every `workflow.patched` id in the workflow
code is named in CHANGELOG.md under the release that added it, no patch outlives the release
after next — a patch added in release N is retired (its old branch deleted) by N+2 —, and
every release says whether a worker may be rolled back from it to the release before, never
"safe" when it adds a patch.

CHANGELOG.md lists the releases newest first, each `## <version> — <date>` with a line
`Patches added: a, b` (or `none`) and, after the first release, `Rollback: safe` or
`Rollback: unsafe — why`; under `## Unreleased` what main adds towards the next. The current
release is `pyproject.toml`'s version, and a development version (`0.2.0.dev0`) is the
Unreleased one.
"""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_RELEASE = re.compile(r"^## (?P<version>\d+\.\d+\.\d+|Unreleased)\b")
UNRELEASED = "Unreleased"
_PATCHES = re.compile(r"^Patches added:\s*(?P<ids>.*)$")
_ROLLBACK = re.compile(r"^Rollback:\s*(?P<verdict>safe|unsafe)\b")


@dataclass(frozen=True)
class Release:
    version: str
    patches: frozenset[str]
    # Whether a worker may roll back from this release to the one before (None: not said).
    rollback_safe: bool | None = None


def releases(changelog: str) -> list[Release]:
    """The releases CHANGELOG.md names, oldest first."""
    found: list[Release] = []
    version: str | None = None
    for line in changelog.splitlines():
        if match := _RELEASE.match(line):
            version = match["version"]
            found.append(Release(version, frozenset()))
        elif (match := _PATCHES.match(line)) and version is not None:
            ids = {i.strip(" `") for i in match["ids"].split(",")} - {"none", ""}
            found[-1] = replace(found[-1], patches=frozenset(ids))
        elif (match := _ROLLBACK.match(line)) and version is not None:
            found[-1] = replace(found[-1], rollback_safe=match["verdict"] == "safe")
    return list(reversed(found))


def patch_ids(source: str) -> set[str]:
    """The ids a module passes to `workflow.patched` or `workflow.deprecate_patch`."""
    ids = set()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("patched", "deprecate_patch")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            ids.add(node.args[0].value)
    return ids


def problems(in_code: set[str], history: list[Release], current: str) -> list[str]:
    """What breaks the rule: a patch no release names, a patch two releases old, a release
    after the first that says nothing of a rollback, or says it is safe and adds a patch."""
    versions = [r.version for r in history]
    if ".dev" in current:
        current = UNRELEASED
    if current not in versions:
        return [f"CHANGELOG.md has no entry for the current release {current}"]
    now = versions.index(current)
    said = []
    for release in history[1:]:
        if release.rollback_safe is None:
            said.append(
                f"{release.version} says nothing of a rollback to the release before it "
                "(`Rollback: safe` or `Rollback: unsafe — why`)"
            )
        elif release.rollback_safe and release.patches:
            said.append(
                f"{release.version} adds patches ({', '.join(sorted(release.patches))}): a "
                "rollback from it is unsafe"
            )
    for patch in sorted(in_code):
        added = [i for i, r in enumerate(history) if patch in r.patches]
        if not added:
            said.append(f"patch {patch!r} is named under no release in CHANGELOG.md")
        elif now - added[0] >= 2:
            said.append(
                f"patch {patch!r} (added in {versions[added[0]]}) must be retired by "
                f"{versions[added[0] + 2]}: delete its old branch"
            )
    return said


def test_the_workflow_code_keeps_the_rule() -> None:
    code: set[str] = set()
    for path in (ROOT / "workflows").rglob("*.py"):
        code |= patch_ids(path.read_text())
    current = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    history = releases((ROOT / "CHANGELOG.md").read_text())
    assert problems(code, history, current) == []


CHANGELOG = """# Changelog

## 0.3.0 — 2027-03-01
Patches added: retry-sooner
Rollback: unsafe — the patch

## 0.2.0 — 2027-01-10
Patches added: `label-at-join`, hold-longer
Rollback: unsafe — the patches

## 0.1.0 — 2026-11-28
Patches added: none
"""


def test_a_changelog_lists_releases_oldest_first_with_their_patches() -> None:
    assert releases(CHANGELOG) == [
        Release("0.1.0", frozenset()),
        Release("0.2.0", frozenset({"label-at-join", "hold-longer"}), rollback_safe=False),
        Release("0.3.0", frozenset({"retry-sooner"}), rollback_safe=False),
    ]


@pytest.mark.parametrize(
    ("in_code", "current", "wanted"),
    [
        ({"label-at-join"}, "0.2.0", []),  # the release that adds it
        ({"label-at-join", "retry-sooner"}, "0.3.0", []),  # one release later: still allowed
        ({"unnamed"}, "0.2.0", ["patch 'unnamed' is named under no release in CHANGELOG.md"]),
        ({"x"}, "0.4.0", ["CHANGELOG.md has no entry for the current release 0.4.0"]),
    ],
)
def test_the_rule(in_code: set[str], current: str, wanted: list[str]) -> None:
    assert problems(in_code, releases(CHANGELOG), current) == wanted


def test_a_patch_two_releases_old_fails() -> None:
    changelog = (
        "## 0.4.0 — 2027-05-01\nPatches added: none\nRollback: safe\n" + CHANGELOG.split("\n", 1)[1]
    )
    assert problems({"hold-longer"}, releases(changelog), "0.4.0") == [
        "patch 'hold-longer' (added in 0.2.0) must be retired by 0.4.0: delete its old branch"
    ]


def test_main_between_releases_is_the_unreleased_entry() -> None:
    changelog = (
        "## Unreleased\nPatches added: brand-new\nRollback: unsafe — brand-new\n"
        + CHANGELOG.split("\n", 1)[1]
    )
    history = releases(changelog)
    assert history[-1] == Release(UNRELEASED, frozenset({"brand-new"}), rollback_safe=False)
    assert problems({"brand-new", "retry-sooner"}, history, "0.4.0.dev0") == []
    assert problems({"label-at-join"}, history, "0.4.0.dev0") == [
        "patch 'label-at-join' (added in 0.2.0) must be retired by Unreleased: delete its old "
        "branch"
    ]


def test_patch_ids_are_read_from_the_code() -> None:
    source = (
        "from temporalio import workflow\n"
        "def f():\n"
        "    if workflow.patched('a'):\n        pass\n"
        "    workflow.deprecate_patch('b')\n"
    )
    assert patch_ids(source) == {"a", "b"}


def test_a_release_says_whether_a_rollback_from_it_is_safe_and_never_safe_with_a_patch() -> None:
    """0.2.0 added no patch, yet 0.1.0 could not read its payloads: "no patch" alone does not
    make a rollback safe, so each release says it, and the check keeps the one rule it can."""
    silent = "## 0.4.0 — 2027-05-01\nPatches added: none\n" + CHANGELOG.split("\n", 1)[1]
    assert problems(set(), releases(silent), "0.4.0") == [
        "0.4.0 says nothing of a rollback to the release before it "
        "(`Rollback: safe` or `Rollback: unsafe — why`)"
    ]
    wrong = CHANGELOG.replace("Rollback: unsafe — the patch\n", "Rollback: safe\n")
    assert problems({"retry-sooner"}, releases(wrong), "0.3.0") == [
        "0.3.0 adds patches (retry-sooner): a rollback from it is unsafe"
    ]
