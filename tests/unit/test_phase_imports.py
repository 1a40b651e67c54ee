"""A workflow's phase modules call each other only through the spine (its `workflow.py`) or a
shared module, never sideways (issue #59), read from their imports.

The claim (`workflows/nodeclaim/`): phases launch, registration, liveness, termination;
shared `state` (the claim's state and what is read off it), `calls` (the calls a claim makes,
and those several phases make), `reporting` (what the claim shows and tells its pool), `node`
(whether a Node is the claim's VM, and the claim's view of it).

The pool (`workflows/nodepool/`): phases news (what the pool hears), planning (the pods no
claim covers), disruption (permits, drift, consolidation); the round that sequences them is
the spine's; shared `state`, `deadlines` (what time has brought), `claims` (the pool's claims:
recording, starting, telling, forgetting), `calls` (the planner, which planning and
disruption both call), `reporting`.

Only the spine imports a phase; a shared module imports no phase.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
SPINE = "workflow"
LAYOUT: dict[str, tuple[frozenset[str], frozenset[str]]] = {  # package: (phases, shared)
    "nodeclaim": (
        frozenset({"launch", "registration", "liveness", "termination"}),
        frozenset({"state", "calls", "reporting", "node"}),
    ),
    "nodepool": (
        frozenset({"news", "planning", "disruption"}),
        frozenset({"state", "deadlines", "claims", "calls", "reporting"}),
    ),
}
PHASES = [(package, phase) for package in sorted(LAYOUT) for phase in sorted(LAYOUT[package][0])]
SHARED = [(package, shared) for package in sorted(LAYOUT) for shared in sorted(LAYOUT[package][1])]


def modules_imported_by(package: str, module: str) -> set[str]:
    """The `workflows/<package>` modules `module` imports, wherever in it: `from
    workflows.nodeclaim.state import X` and `from workflows.nodeclaim import node` alike."""
    dotted = f"workflows.{package}"
    found: set[str] = set()
    for node in ast.walk(ast.parse((WORKFLOWS / package / f"{module}.py").read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == dotted:
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(dotted + "."):
            found.add((node.module or "").split(".")[2])
        elif isinstance(node, ast.Import):
            found.update(
                alias.name.split(".")[2]
                for alias in node.names
                if alias.name.startswith(dotted + ".")
            )
    return found


@pytest.mark.parametrize("package", sorted(LAYOUT))
def test_every_module_is_a_phase_shared_or_the_spine(package: str) -> None:
    phases, shared = LAYOUT[package]
    modules = {p.stem for p in (WORKFLOWS / package).glob("*.py")} - {"__init__"}
    assert modules == phases | shared | {SPINE}


@pytest.mark.parametrize(("package", "module"), PHASES)
def test_a_phase_imports_no_other_phase(package: str, module: str) -> None:
    """Fails, on the claim, on liveness → registration.POLL and termination.instance_ref, and
    termination → registration.delete_bootstrap, as they were (now `state.POLL`,
    `state.instance_ref`, `calls.delete_bootstrap`); on the pool, on disruption → planning
    (the planner's call, now `calls.plan`), and on claims → news (`claim_closed`, now the
    claims' own) and reconcile → planning and disruption (the round, now the spine's), as
    they were."""
    phases, _ = LAYOUT[package]
    sideways = modules_imported_by(package, module) & (phases - {module})
    assert not sideways, f"{package}.{module} imports the phases {sorted(sideways)}"


@pytest.mark.parametrize(("package", "module"), SHARED)
def test_a_shared_module_imports_no_phase(package: str, module: str) -> None:
    phases, _ = LAYOUT[package]
    assert not modules_imported_by(package, module) & phases
