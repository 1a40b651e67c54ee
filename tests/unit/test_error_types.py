"""Error types cross the Temporal boundary by name: each is written once, in api/errors.py.

A literal at a raise or in a retry policy would let the two sides drift apart unseen (a
renamed type passes mypy and fails at run time), so none may appear in the code that raises
them (activities) or the code that reads them (workflows)."""

from __future__ import annotations

import ast
from pathlib import Path

from api import errors

REPO = Path(__file__).resolve().parents[2]
SIDES = ("activities", "workflows")


def _literal_error_types() -> list[str]:
    found = []
    for path in sorted(p for side in SIDES for p in (REPO / side).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            callee = node.func.id if isinstance(node.func, ast.Name) else None
            for keyword in node.keywords:
                value = keyword.value
                raised = callee == "ApplicationError" and keyword.arg == "type"
                policy = keyword.arg == "non_retryable_error_types"
                literal = isinstance(value, ast.Constant | ast.JoinedStr) or (
                    isinstance(value, ast.List)
                    and any(isinstance(e, ast.Constant) for e in value.elts)
                )
                if (raised or policy) and literal:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_no_error_type_is_spelled_outside_api_errors() -> None:
    assert _literal_error_types() == []


def test_what_a_claim_never_retries_is_what_the_activities_mean_by_it() -> None:
    assert set(errors.CLAIM_NON_RETRYABLE) == {
        errors.CAPACITY_ERROR,
        errors.PROVIDER_FATAL,
        errors.INVALID_CONFIGURATION,
        errors.NODE_NOT_FOUND,
    }
    assert errors.PROVIDER_RETRYABLE not in errors.CLAIM_NON_RETRYABLE
    assert errors.kube_api_error(409) == errors.KUBE_CONFLICT
    assert errors.kube_api_error(None) == "KubeApiError"
