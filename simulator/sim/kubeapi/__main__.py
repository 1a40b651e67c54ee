"""Run the emulator standalone: `python -m sim.kubeapi --port 0 --kubeconfig PATH`."""

from __future__ import annotations

import argparse
import signal
import threading

from sim.kubeapi.pod_admission import PLUGINS
from sim.kubeapi.server import KubeApiServer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sim.kubeapi", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--kubeconfig", help="write a kubeconfig for this server here")
    add_admission_arguments(parser)
    args = parser.parse_args(argv)

    server = KubeApiServer(
        host=args.host,
        port=args.port,
        disable_admission_plugins=disabled_plugins(args),
    )
    server.start()
    if args.kubeconfig:
        server.write_kubeconfig(args.kubeconfig)
    print(server.url, flush=True)

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop()


def add_admission_arguments(parser: argparse.ArgumentParser) -> None:
    """kube-apiserver's `--disable-admission-plugins`: comma-separated, may be repeated."""
    parser.add_argument(
        "--disable-admission-plugins",
        action="append",
        default=[],
        metavar="NAMES",
        help=f"admission plugins to turn off, of {','.join(PLUGINS)} (all on by default)",
    )


def disabled_plugins(args: argparse.Namespace) -> list[str]:
    return [name for value in args.disable_admission_plugins for name in value.split(",") if name]


if __name__ == "__main__":
    main()
