"""Whether a node has been told its VM is about to be reclaimed (spot interruption).

The notice reaches the VM only from inside (EC2 instance metadata `spot/instance-action`,
the GCE metadata server's `instance/preempted`, Azure Scheduled Events `Preempt`): an agent
on the node turns it into a taint, as aws-node-termination-handler does in IMDS mode. Ours
is `cloudburst.io/interruption=<what the provider said>:NoSchedule`; the watcher and the
claim's poll read it off the Node, and the claim drains and deletes the node at once.
"""

from __future__ import annotations

from typing import Any

from api.labels import INTERRUPTION_TAINT


def interruption_notice(node: Any) -> str | None:
    """The notice a Node carries (the taint's value, or "interrupted"), else None."""
    spec = getattr(node, "spec", None)
    for taint in (getattr(spec, "taints", None) or []) if spec is not None else []:
        if taint.key == INTERRUPTION_TAINT:
            return str(taint.value or "interrupted")
    return None
