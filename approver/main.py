"""`cloudburst csr-approver`'s loops, each on a thread of its own."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from kubernetes import client as k8s

from approver.csr import CsrApprover
from approver.nodes import NodeGuard


class Loop(Protocol):
    def run(self, stop: threading.Event) -> None: ...


def approver_loops(
    api_client: k8s.ApiClient, *, max_expiration_seconds: int, resync_s: float = 30.0
) -> list[Loop]:
    """What the command runs: the CSR approver and the node guard."""
    return [
        CsrApprover(api_client, max_expiration_seconds=max_expiration_seconds, resync_s=resync_s),
        NodeGuard(api_client, resync_s=resync_s),
    ]


@contextmanager
def running(loops: list[Loop], *, stop_within_s: float = 35.0) -> Iterator[threading.Event]:
    """The loops on threads until the block ends (or the event it yields is set)."""
    stop = threading.Event()
    threads = [
        threading.Thread(target=loop.run, args=(stop,), name=type(loop).__name__, daemon=True)
        for loop in loops
    ]
    for thread in threads:
        thread.start()
    try:
        yield stop
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=stop_within_s)
