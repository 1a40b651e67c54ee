"""Serialization contexts answered outside the workflow sandbox when no part of the converter
reads them.

Why: for every payload sequence a workflow task decodes or encodes, the SDK (temporalio 1.x,
`_CommandAwareDataConverter`) asks the workflow instance which serialization context and
which external-store context apply, and the sandboxed instance answers each question by
compiling and running a snippet inside the sandbox. In a 1,000-pod burst that was a fifth of
the claims' worker's CPU and a tenth of the pools' (docs/benchmarks-history.md "Burst").

The answers only matter to a converter with a part that takes a context
(`WithSerializationContext`: payload converter, codec, failure converter) or with external
storage. The SDK's own `DataConverter.with_context` returns the very same converter when no
part takes one, and then every answer leads the SDK to the same converter: "no context" (the
worker's converter as it is) is that converter. So for such a converter the runner answers
"no context" itself; for any other it is not used, and the sandbox answers as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.converter import (
    DataConverter,
    SerializationContext,
    StorageDriverStoreContext,
    WorkflowSerializationContext,
)
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner
from temporalio.workflow import Info

if TYPE_CHECKING:  # the SDK's private names, in its runner's signatures only
    from temporalio.worker._command_aware_visitor import CommandInfo
    from temporalio.workflow import _Definition

_PROBE = WorkflowSerializationContext(namespace="probe", workflow_id="probe")


def ignores_contexts(converter: DataConverter) -> bool:
    """Whether no serialization or store context can change what `converter` does."""
    return converter.external_storage is None and converter.with_context(_PROBE) is converter


class _ContextFreeInstance(WorkflowInstance):
    def __init__(self, inner: WorkflowInstance) -> None:
        self._inner = inner

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        return self._inner.activate(act)

    def get_serialization_context(
        self, command_info: CommandInfo | None
    ) -> SerializationContext | None:
        return None

    def get_external_store_context(
        self, command_info: CommandInfo | None
    ) -> StorageDriverStoreContext:
        return StorageDriverStoreContext(target=None)

    def get_info(self) -> Info:
        return self._inner.get_info()

    def get_thread_id(self) -> int | None:
        return self._inner.get_thread_id()


class ContextFreeRunner(WorkflowRunner):
    """`inner`'s instances, answering the context questions without entering the sandbox.
    Only for a converter `ignores_contexts` accepts (`runner_for`)."""

    def __init__(self, inner: WorkflowRunner) -> None:
        self._inner = inner

    def prepare_workflow(self, defn: _Definition) -> None:
        self._inner.prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _ContextFreeInstance(self._inner.create_instance(det))

    def set_worker_level_failure_exception_types(
        self, types: Sequence[type[BaseException]]
    ) -> None:
        self._inner.set_worker_level_failure_exception_types(types)


def runner_for(converter: DataConverter, inner: WorkflowRunner) -> WorkflowRunner:
    """`inner`, spared the sandbox's context answers when `converter` cannot use them."""
    return ContextFreeRunner(inner) if ignores_contexts(converter) else inner
