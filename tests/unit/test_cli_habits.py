"""kubectl's habits, on every command where they apply: a walk of the whole command tree (the
click commands typer builds), each command classified by what it reads, and the flags people
type without thinking looked for where its class needs them. A new command must be
classified here, or the walk fails."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from cli.connect import fail, list_namespace
from cli.main import app

ROOT = get_command(app)
RUNNER = CliRunner()

# Commands that read the cluster's objects: the kubeconfig and its context.
READS_CLUSTER = {
    "worker", "trigger", "csr-approver", "doctor", "plan", "pools list", "pools describe", "claims create",
    "claims list", "explain pod", "explain node", "explain claim", "catalog show",
    "catalog status",
}  # fmt: skip
# Commands about namespaced objects, or that make them (convert): -n/--namespace.
NAMESPACED = {
    "plan", "convert", "pools list", "pools describe", "pools retry", "claims create",
    "claims list", "claims describe", "claims scale-down", "explain pod", "explain claim",
}  # fmt: skip
# List commands: -A/--all-namespaces and -l/--selector.
LISTS = {"pools list", "claims list"}
# Commands that read manifests: -f/--filename, `-` being standard input.
READS_FILES = {"validate", "convert", "plan", "bootstrap render"}
# Commands none of it applies to: processes of their own, generators, Temporal-only steps.
NONE_APPLY = {
    "dev", "demo", "codec-server", "crds", "config-reference", "tenant-rbac", "version",
    "catalog refresh", "payload-key create",
}  # fmt: skip
CLASSIFIED = READS_CLUSTER | NAMESPACED | LISTS | READS_FILES | NONE_APPLY


def commands(group: Any = ROOT, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf command, by its path. (Typer builds on a click of its own: the group's own
    context class, and duck typing, rather than `click`'s.)"""
    context = group.context_class(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None, name
        path = f"{prefix}{name}"
        if hasattr(command, "list_commands"):
            yield from commands(command, f"{path} ")
        else:
            yield path, command


def flags(command: Any) -> set[str]:
    return {flag for param in command.params for flag in getattr(param, "opts", [])}


TREE = dict(commands())


def test_every_command_is_classified() -> None:
    unclassified = sorted(set(TREE) - CLASSIFIED)
    assert not unclassified, f"say which of kubectl's habits apply to {unclassified}"


@pytest.mark.parametrize(
    ("group", "wanted"),
    [
        (READS_CLUSTER, {"--kubeconfig", "--context"}),
        (NAMESPACED, {"-n", "--namespace"}),
        (LISTS, {"-A", "--all-namespaces", "-l", "--selector"}),
        (READS_FILES, {"-f", "--filename"}),
    ],
    ids=["cluster", "namespaced", "lists", "files"],
)
def test_the_habits_are_where_they_apply(group: set[str], wanted: set[str]) -> None:
    """Without the habits `pools describe -n`, `--context` anywhere, `-A`, `-l` and
    `bootstrap render -f` were refused (No such option)."""
    missing = {path: sorted(wanted - flags(TREE[path])) for path in sorted(group) if path in TREE}
    assert not {path: m for path, m in missing.items() if m}


def test_a_kubeconfig_goes_with_a_context_and_a_namespace_with_n() -> None:
    """Beyond the classes: no command takes one flag of a kubectl pair without the other."""
    for path, command in TREE.items():
        found = flags(command)
        if "--kubeconfig" in found:
            assert "--context" in found, path
        if "--namespace" in found:
            assert "-n" in found, path


def test_version() -> None:
    """`cloudburst --version` was refused (No such option); `version -o json` says both."""
    printed = RUNNER.invoke(app, ["--version"])
    assert printed.exit_code == 0 and printed.stdout.startswith("cloudburst "), printed.output
    answer = RUNNER.invoke(app, ["version", "-o", "json"])
    assert answer.exit_code == 0, answer.output
    info = json.loads(answer.stdout)
    assert set(info) == {"release", "commit"} and info["release"]
    # This checkout is a git work tree (make setup installs it editable): its commit is known.
    assert info["commit"] is None or len(info["commit"]) == 40


def test_n_and_a_together_are_refused() -> None:
    assert list_namespace("team-a", False) == "team-a"
    assert list_namespace(None, True) is None
    with pytest.raises(type(fail(""))):
        list_namespace("team-a", True)


def test_f_dash_reads_standard_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`-f -` is standard input for every command that reads manifests (validate and
    convert: tests/unit/test_convert.py); without it `-` was a file that did not exist."""
    seed = (Path(__file__).parents[1] / "fixtures" / "dr-example.yaml").read_text()
    rendered = RUNNER.invoke(app, ["bootstrap", "render", "-f", "-"], input=seed)
    assert rendered.exit_code == 0, rendered.output
    assert "NodeClaim default/dr-nodepool-" in rendered.stdout
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    pool = "apiVersion: cloudburst.io/v1alpha1\nkind: NodePool\nmetadata: {name: p}\nspec: {}\n"
    planned = RUNNER.invoke(app, ["plan", "-f", "-"], input=pool)
    assert "nothing to plan: no pod in the files" in planned.output
