"""The benches in bench/ are scripts that share code as packages (`sim.dev.topology`,
`sim.dev.planner_inputs` in the simulator's distribution), never by reaching into each other:
no script edits `sys.path` or imports a script beside it (which works only because Python puts
a script's own directory first on `sys.path`, and leaves `mypy bench` guessing), read from
their source. Fails on bench/burst.py, scale.py (`sys.path.insert` to reach chaos.py),
upgrade.py and cost.py (`from chaos import …`, `from packing import …`) and replay.py,
seal.py (`sys.path.insert` of the repository's root) as they were."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(BENCH.glob("*.py"))


def test_there_are_benches_to_read() -> None:
    assert len(SCRIPTS) >= 5


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_bench_leaves_sys_path_alone(script: Path) -> None:
    touching = [
        node.lineno
        for node in ast.walk(ast.parse(script.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    ]
    assert not touching, f"{script.name} touches sys.path on lines {touching}"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_bench_imports_no_other_bench(script: Path) -> None:
    siblings = {p.stem for p in SCRIPTS}
    imported: set[str] = set()
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
    assert not imported & siblings, f"{script.name} imports {sorted(imported & siblings)}"
