"""Run the simulated cluster standalone.

python -m sim --kube-port 6443 --cloud-port 8788 --kubeconfig ./sim.kubeconfig \
    [--control-plane kubernetes|emulator]
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading

from sim.cluster import CONTROL_PLANES, SimulatedCluster
from sim.kubeapi.__main__ import add_admission_arguments, disabled_plugins


def main(argv: list[str] | None = None) -> None:
    # The API server and its clients (scheduler, kubelets, controllers) are threads of this
    # one process, each request a hand-off between two of them: with CPython's 5 ms switch
    # interval a busy thread kept each waiting request back (a 1,000-pod burst took 2.4 s to
    # be marked Unschedulable at p50; 1.1 s with 1 ms).
    sys.setswitchinterval(0.001)
    parser = argparse.ArgumentParser(prog="python -m sim", description="Simulated cluster")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--kube-port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--cloud-port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--kubeconfig", help="write a kubeconfig for the API server here")
    parser.add_argument("--boot-delay", type=float, default=1.0, help="VM pending -> running (s)")
    parser.add_argument("--ready-delay", type=float, default=1.0, help="Node joined -> Ready (s)")
    parser.add_argument("--cloud-token", default=None, help="require this bearer token")
    parser.add_argument(
        "--control-plane",
        choices=CONTROL_PLANES,
        default="emulator",
        help="kubernetes: Kubernetes' own, built from its Go modules; emulator: sim/kubeapi",
    )
    add_admission_arguments(parser)
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    sim = SimulatedCluster(
        boot_delay_s=args.boot_delay,
        ready_delay_s=args.ready_delay,
        cloud_token=args.cloud_token,
        kube_port=args.kube_port,
        cloud_port=args.cloud_port,
        host=args.host,
        disable_admission_plugins=disabled_plugins(args),
        control_plane=args.control_plane,
    )
    sim.start()
    print(f"Kubernetes API: {sim.kube_url}", flush=True)
    print(f"Fake cloud API: {sim.cloud_url}  (NodeClass spec.fake.endpoint)", flush=True)
    print(f"Cloud admin:    {sim.cloud_url}/_admin/stats", flush=True)
    # The worker and the trigger refuse endpoint overrides an operator did not allow.
    allowed = json.dumps(sim.endpoints(), separators=(",", ":"))
    print(f"Allow them:     CLOUDBURST_ALLOWED_ENDPOINTS='{allowed}'", flush=True)
    if args.kubeconfig:
        path = sim.write_kubeconfig(args.kubeconfig)
        print(f"kubeconfig:     {path}  (export KUBECONFIG={path})", flush=True)
    print("Ctrl-C to stop.", flush=True)

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    sim.stop()


if __name__ == "__main__":
    main()
