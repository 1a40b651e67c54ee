"""End-to-end figures on the embedded stack: decision latency and time to all-bound.

    .venv/bin/python bench/burst.py --pods 1000 [--boot-delay 0]

Prints the burst demo's report (pods bound, nodes, cost, decision p50/p99 from a pod's
creation to its VM's create call, seconds until all pods run and until every node is gone).
Figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging

from cli.demo import run_burst


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--boot-delay", type=float, default=0.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("temporalio").setLevel(logging.CRITICAL)
    report = asyncio.run(
        run_burst(
            lambda text: print(f"• {text}"), args.pods, boot_delay_s=args.boot_delay, timeout_s=900
        )
    )
    print(json.dumps(report.as_dict(), indent=2))


if __name__ == "__main__":
    main()
