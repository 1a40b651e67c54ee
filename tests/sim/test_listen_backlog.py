"""The stand-ins take a burst of new connections as a cloud's API does: queued while the
server is busy, not dropped (a dropped one is sent again by the client's kernel a second
later, which the burst benchmark showed as 1 s create calls)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from contextlib import ExitStack

import pytest

from sim.cloud import FakeCloud, FakeCloudServer
from sim.clouds.base import Response, StandinHTTPServer

BURST = 64  # a burst's claims creating their VMs at once, with room


def port_of_fake_cloud() -> tuple[int, Callable[[], None]]:
    server = FakeCloudServer(FakeCloud())
    return server.port, server._httpd.server_close


def port_of_standin() -> tuple[int, Callable[[], None]]:
    server = StandinHTTPServer(lambda request: Response(200, {}))
    return server.port, server._httpd.server_close


@pytest.mark.parametrize("serve", [port_of_fake_cloud, port_of_standin])
def test_a_burst_of_connections_waits_while_the_server_accepts_none(
    serve: Callable[[], tuple[int, Callable[[], None]]],
) -> None:
    port, close = serve()  # listening, never accepting: the accept loop as slow as it gets
    connected = 0
    with ExitStack() as sockets:
        for _ in range(BURST):
            sock = sockets.enter_context(socket.socket())
            # A dropped connection attempt waits for the kernel's retry (1 s, then 3 s).
            sock.settimeout(2)
            try:
                sock.connect(("127.0.0.1", port))
            except OSError:
                break
            connected += 1
    close()
    assert connected == BURST
