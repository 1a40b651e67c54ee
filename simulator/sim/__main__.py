"""Run the simulated cluster standalone.

python -m sim --kube-port 6443 --cloud-port 8788 --kubeconfig ./sim.kubeconfig
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading

from sim.cluster import CONTROL_PLANES, SimulatedCluster

# The admission plugins `--disable-admission-plugins` may turn off (kube-apiserver's own flag,
# passed on): those Cloudburst's docs ask a cluster to run.
OPTIONAL_PLUGINS = ("NodeRestriction", "PodNodeSelector", "PodTolerationRestriction")


def main(argv: list[str] | None = None) -> None:
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
        default="kubernetes",
        help="Kubernetes' own, built from its Go modules (the only one)",
    )
    parser.add_argument(
        "--disable-admission-plugins",
        action="append",
        default=[],
        metavar="NAMES",
        help=f"admission plugins to turn off, of {','.join(OPTIONAL_PLUGINS)} (all on by default)",
    )
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
        disable_admission_plugins=[
            name for value in args.disable_admission_plugins for name in value.split(",") if name
        ],
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
