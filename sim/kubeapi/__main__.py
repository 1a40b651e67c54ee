"""Run the emulator standalone: `python -m sim.kubeapi --port 0 --kubeconfig PATH`."""

from __future__ import annotations

import argparse
import signal
import threading

from sim.kubeapi.server import KubeApiServer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sim.kubeapi", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--kubeconfig", help="write a kubeconfig for this server here")
    args = parser.parse_args(argv)

    server = KubeApiServer(host=args.host, port=args.port)
    server.start()
    if args.kubeconfig:
        server.write_kubeconfig(args.kubeconfig)
    print(server.url, flush=True)

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop()


if __name__ == "__main__":
    main()
