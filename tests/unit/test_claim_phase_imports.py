"""The claim's phase modules call each other only through the spine (`workflows/nodeclaim/
workflow.py`) or a shared module, never sideways (issue #59), read from their imports.

Phases: launch, registration, liveness, termination. Shared: `state` (the claim's state and
what is read off it), `calls` (the calls a claim makes, and those several phases make),
`reporting` (what the claim shows and tells its pool), `node` (whether a Node is the claim's
VM). Only the spine imports a phase; a shared module imports no phase.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CLAIM = Path(__file__).resolve().parents[2] / "workflows" / "nodeclaim"
PHASES = frozenset({"launch", "registration", "liveness", "termination"})
SHARED = frozenset({"state", "calls", "reporting", "node"})
SPINE = "workflow"


def claim_modules_imported_by(module: str) -> set[str]:
    """The `workflows/nodeclaim` modules `module` imports, wherever in it: `from
    workflows.nodeclaim.state import X` and `from workflows.nodeclaim import node` alike."""
    found: set[str] = set()
    for node in ast.walk(ast.parse((CLAIM / f"{module}.py").read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "workflows.nodeclaim":
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "workflows.nodeclaim."
        ):
            found.add((node.module or "").split(".")[2])
        elif isinstance(node, ast.Import):
            found.update(
                alias.name.split(".")[2]
                for alias in node.names
                if alias.name.startswith("workflows.nodeclaim.")
            )
    return found


def test_every_module_of_the_claim_is_a_phase_shared_or_the_spine() -> None:
    modules = {p.stem for p in CLAIM.glob("*.py")} - {"__init__"}
    assert modules == PHASES | SHARED | {SPINE}


@pytest.mark.parametrize("phase", sorted(PHASES))
def test_a_phase_imports_no_other_phase(phase: str) -> None:
    """Fails on liveness → registration.POLL and termination.instance_ref, and termination →
    registration.delete_bootstrap, as they were: now `state.POLL`, `state.instance_ref` and
    `calls.delete_bootstrap`."""
    sideways = claim_modules_imported_by(phase) & (PHASES - {phase})
    assert not sideways, f"{phase} imports the phases {sorted(sideways)}"


@pytest.mark.parametrize("shared", sorted(SHARED))
def test_a_shared_module_imports_no_phase(shared: str) -> None:
    assert not claim_modules_imported_by(shared) & PHASES
