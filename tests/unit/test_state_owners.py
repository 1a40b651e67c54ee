"""Each field of a workflow's state has one writer (issue #59), read from the code: one module
of the workflow's package assigns it (`x.f = …`, `x.f[k] = …`, `x.f += …`, `del x.f[k]`) or
changes it in place (`x.f.append(…)`, `.pop`, `.clear`, …), where `x` is the state or a
name bound to it. A method of the state's class in `state.py` is the state's own named
transition and counts as the module `state`. Setting a field up when the state is made
(`__post_init__`, `of`) is no write. docs/architecture.md, "Who writes the state", is the
table this checks.

A field that is a record of its own is checked by its fields: the claim's `status`
(`NodeClaimStatus`: its conditions are set through its `set_condition`, the record's own
method) and the pool's `state` (`PoolState`, what the pool carries across continue-as-new).

Fails, without the fix, on the claim's `dirty` (written from five modules), `next_poll_at`
(registration and liveness), `permit` (the signal and liveness), `bootstrap` (launch and
calls), `observed` (node, and liveness through a property setter), `status.capacity` (launch,
node, registration), and on the pool's `dirty`, `config_error` and `config_retry_at` (news
and reconcile), `consolidate_at` (deadlines and disruption), `status_stale` (news and
reporting), `deleted` (news and claims),
`disruption_blocked` (news, and claims once it forgets a claim that ended without a word),
`failed_offerings` (news and the round), `forgotten_by_look` (claims and news), and the
pool's ledgers: `pending` (news, planning), `claims` (claims, news, planning), `blocked`
(claims, news, planning, reporting, the round), `disruption_queue` (disruption, news, the
spine's handlers and a transition) and `permits` (disruption, the handlers, a transition).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLAIM = ROOT / "workflows" / "nodeclaim"
POOL = ROOT / "workflows" / "nodepool"
MUTATORS = frozenset(
    {"append", "extend", "insert", "add", "update", "clear", "pop", "popitem", "remove"}
    | {"discard", "setdefault", "difference_update", "intersection_update", "sort"}
)
CONSTRUCTION = frozenset({"__post_init__", "of", "__init__"})


def fields_of(path: Path, class_name: str) -> list[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return [
                statement.target.id
                for statement in node.body
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
            ]
    raise AssertionError(f"no class {class_name} in {path}")


def _functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def writers(
    package: Path, fields: list[str], roots: set[str], own_roots: set[str]
) -> dict[str, set[str]]:
    """field -> the modules of `package` that write it, where the state is any expression in
    `roots` (`own_roots` too in state.py, whose methods are the state's), or a name a function
    binds to one (`state = run.state`)."""
    found: dict[str, set[str]] = defaultdict(set)
    for module in sorted(package.glob("*.py")):
        tree = ast.parse(module.read_text())
        for function in _functions(tree):
            if module.stem == "state" and function.name in CONSTRUCTION:
                continue
            names = roots | (own_roots if module.stem == "state" else set())
            for node in ast.walk(function):
                if (
                    isinstance(node, ast.Assign)
                    and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and ast.unparse(node.value) in names
                ):
                    names = names | {node.targets[0].id}
            for node in ast.walk(function):
                targets: list[ast.expr] = []
                if isinstance(node, ast.Assign):
                    targets = list(node.targets)
                elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                    targets = [node.target]
                elif isinstance(node, ast.Delete):
                    targets = list(node.targets)
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in MUTATORS
                ):
                    targets = [node.func.value]
                flat: list[ast.expr] = []
                for target in targets:
                    flat += target.elts if isinstance(target, ast.Tuple) else [target]
                for target in flat:
                    while isinstance(target, ast.Attribute | ast.Subscript):
                        if (
                            isinstance(target, ast.Attribute)
                            and target.attr in fields
                            and ast.unparse(target.value) in names
                        ):
                            found[target.attr].add(module.stem)
                            break
                        target = target.value
    return found


CLAIM_STATE = fields_of(CLAIM / "state.py", "ClaimState")
CLAIM_STATUS = fields_of(ROOT / "api" / "nodeclaim.py", "NodeClaimStatus")
POOL_RUN = fields_of(POOL / "state.py", "PoolRun")
POOL_STATE = fields_of(ROOT / "api" / "nodepool" / "messages.py", "PoolState")

CLAIM_ROOTS = {"state", "self._state"}
POOL_ROOTS = {"run", "self._run"}
SHAPES = {
    "claim state": (CLAIM, [f for f in CLAIM_STATE if f != "status"], CLAIM_ROOTS, {"self"}),
    "claim status": (
        CLAIM,
        CLAIM_STATUS,
        {f"{root}.status" for root in CLAIM_ROOTS},
        {"self.status"},
    ),
    "pool run": (POOL, [f for f in POOL_RUN if f != "state"], POOL_ROOTS, {"self"}),
    "pool state": (POOL, POOL_STATE, {f"{root}.state" for root in POOL_ROOTS}, {"self.state"}),
}


def test_the_fields_are_read() -> None:
    assert {"dirty", "next_poll_at", "permit", "status"} <= set(CLAIM_STATE)
    assert {"config_error", "consolidate_at"} <= set(POOL_STATE)
    assert {"dirty", "state"} <= set(POOL_RUN)


def test_the_reader_finds_writes_through_every_form(tmp_path: Path) -> None:
    """The reader itself: a write through an alias, a subscript, a mutator and `del` each
    count, and a transition's write counts as `state` (or the checks below could pass by
    seeing nothing)."""
    found = writers(*SHAPES["pool state"])
    assert found["config_failures"] == {"news"}  # `state.config_failures += 1`, an alias
    (tmp_path / "phase.py").write_text(
        "def a(run):\n    state = run.state\n    state.blocked.clear()\n"
        "def b(run):\n    del run.state.claims[name]\n"
        "def c(run):\n    run.state.pending.pop(uid, None)\n"
        "def d(run):\n    run.state.claims[name].nominated.append(uid)\n"
        "def e(run):\n    run.state.permits[name] = reason\n"
    )
    (tmp_path / "state.py").write_text(
        "class PoolRun:\n    def t(self):\n        self.state.disruption_queue.pop(name)\n"
    )
    _, fields, roots, own = SHAPES["pool state"]
    assert writers(tmp_path, fields, roots, own) == {
        "blocked": {"phase"},
        "claims": {"phase"},
        "pending": {"phase"},
        "permits": {"phase"},
        "disruption_queue": {"state"},
    }


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_field_has_one_writer(shape: str) -> None:
    found = writers(*SHAPES[shape])
    shared = {field: sorted(modules) for field, modules in found.items() if len(modules) > 1}
    assert not shared, f"{shape}: fields written from several modules: {shared}"
