"""`python -m sim.controlplane build`: build (or find) the control plane's binaries and print
where they are and which release they are; `make test` runs it before the suite."""

from __future__ import annotations

import sys
import time

from sim.controlplane.binaries import ControlPlaneUnavailable, control_plane_binaries, release


def main(argv: list[str]) -> int:
    if argv != ["build"]:
        print("usage: python -m sim.controlplane build", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        directory = control_plane_binaries()
    except ControlPlaneUnavailable as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"{release(directory)} in {directory} ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
