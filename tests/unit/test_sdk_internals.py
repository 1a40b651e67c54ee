"""The SDK internals the worker leans on are still there, or this fails loudly, naming the SDK.

`worker/context_free.py` wraps the SDK's workflow instances (the sandbox's) to answer the
serialization-context questions outside the sandbox, and its signatures name two private
names, `temporalio.worker._command_aware_visitor.CommandInfo` and
`temporalio.workflow._Definition`. `pyproject.toml` pins `temporalio` to the minor version the
upgrade drill and this suite passed; moving the pin means running this file first.
"""

from __future__ import annotations

import importlib
import inspect
from importlib.metadata import version

import pytest
from temporalio.worker import WorkflowInstance, WorkflowRunner

from worker.context_free import ContextFreeRunner, _ContextFreeInstance

SDK = f"temporalio {version('temporalio')}"


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("temporalio.worker._command_aware_visitor", "CommandInfo"),
        ("temporalio.workflow", "_Definition"),
    ],
)
def test_the_private_names_the_runner_uses_exist(module: str, name: str) -> None:
    found = getattr(importlib.import_module(module), name, None)
    assert found is not None, f"{SDK} has no {module}.{name}: worker/context_free.py needs it"


@pytest.mark.parametrize(
    ("ours", "sdks"),
    [(_ContextFreeInstance, WorkflowInstance), (ContextFreeRunner, WorkflowRunner)],
)
def test_the_wrappers_answer_every_abstract_method_the_sdk_asks(
    ours: type[object], sdks: type[object]
) -> None:
    """A method the SDK adds to its interface, unanswered by the wrapper, would be a
    TypeError at the first workflow (abstract) or a silent fall-through: fail here instead."""
    abstract = set(getattr(sdks, "__abstractmethods__", ()))
    missing = {m for m in abstract if m not in vars(ours)}
    assert not missing, (
        f"{SDK}: {sdks.__name__} asks for {sorted(missing)}; {ours.__name__} lacks them"
    )
    for method in abstract:
        theirs = inspect.signature(getattr(sdks, method))
        mine = inspect.signature(getattr(ours, method))
        assert list(mine.parameters) == list(theirs.parameters), (
            f"{SDK}: {sdks.__name__}.{method}{theirs} is not {ours.__name__}.{method}{mine}"
        )
