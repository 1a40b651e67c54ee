"""The planner is a package of its own (issue #59), read as an import graph: pure (no Temporal,
no Kubernetes client, no network, nothing of the layers that call it), its modules importing
one way along its walk (planner/__init__.py), and called as a library — consolidation's
activity asks the planner, not the planning activity.

Every import is read from the source (`ast`), those inside functions and under
`TYPE_CHECKING` too: a cycle hidden behind `TYPE_CHECKING` is still one.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLANNER = ROOT / "planner"

# The planner's modules in the order of its walk: each imports only modules before it.
WALK = (
    "shapes",
    "lp",
    "regions",
    "node_size",
    "catalog",
    "patterns",
    "packing",
    "bound",
    "plan",
    "recommend",
)
# What the planner may import besides the standard library and itself: the pure layers below
# it, and HiGHS for its bound.
ALLOWED_OUTSIDE = frozenset({"api", "cluster", "highspy"})


def imports_of(path: Path) -> set[str]:
    """Every module `path` imports, by its full dotted name (relative imports resolved)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    if path.name == "__init__.py":
        package = package.removesuffix(".__init__")
    else:
        package = package.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            found.add(base)
    return found


def planner_modules() -> dict[str, Path]:
    """The planner's modules by name (a subpackage by its `__init__.py`), its own docstring's
    `__init__.py` aside."""
    modules = {p.stem: p for p in PLANNER.glob("*.py") if p.name != "__init__.py"}
    modules.update({p.parent.name: p for p in PLANNER.glob("*/__init__.py")})
    return modules


def test_every_planner_module_is_in_the_walk() -> None:
    assert sorted(planner_modules()) == sorted(WALK)


@pytest.mark.parametrize("module", WALK)
def test_the_planner_imports_nothing_it_does_not_own_but_the_pure_layers(module: str) -> None:
    """Fails on an import of temporalio, kubernetes, activities, workflows, ... (before the
    planner had a package of its own, its modules lived among the activities)."""
    outside = {
        name
        for name in imports_of(planner_modules()[module])
        if name.split(".")[0] not in sys.stdlib_module_names
        and name.split(".")[0] not in ALLOWED_OUTSIDE | {"planner", "__future__"}
    }
    assert not outside, f"planner/{module} imports {sorted(outside)}"


@pytest.mark.parametrize("module", WALK)
def test_the_planner_walk_is_one_way(module: str) -> None:
    """Fails on an import against the walk: patterns.py once imported packing.py's types
    under TYPE_CHECKING while packing.py imported patterns.py (a cycle)."""
    earlier = set(WALK[: WALK.index(module)])
    inside = {
        name.split(".")[1]
        for name in imports_of(planner_modules()[module])
        if name.startswith("planner.")
    }
    assert inside <= earlier, f"planner/{module} imports {sorted(inside - earlier)}, later"


def test_consolidation_asks_the_planner_not_the_planning_activity() -> None:
    """Fails when consolidation's activity calls `PlanningActivities` (it once did)."""
    found = imports_of(ROOT / "activities" / "planning" / "consolidation.py")
    assert "planner.plan" in found
    assert "activities.planning.activity" not in found


@pytest.mark.parametrize(
    "caller",
    [
        "activities/planning/activity.py",
        "activities/planning/inputs.py",
        "cli/commands/plan.py",
        "explain/plan.py",
        "bench/cost.py",
    ],
)
def test_callers_use_the_planner_as_a_library(caller: str) -> None:
    assert any(name.startswith("planner.") for name in imports_of(ROOT / caller))
