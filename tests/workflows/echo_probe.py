"""A workflow that sends its input, wrapped, through an activity that unwraps it, then through
a local activity, and returns what came back: every kind of payload a workflow task decodes
and encodes, the activity's input written by the workflow alone. See
test_context_free.py."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow

WRAPPING = " (wrapped)"


@activity.defn
async def unwrap(text: str) -> str:
    return text.removesuffix(WRAPPING)


@workflow.defn
class EchoProbe:
    @workflow.run
    async def run(self, text: str) -> str:
        remote = await workflow.execute_activity(
            unwrap, text + WRAPPING, start_to_close_timeout=timedelta(seconds=30)
        )
        local = await workflow.execute_local_activity(
            unwrap, remote, start_to_close_timeout=timedelta(seconds=30)
        )
        return local
