"""The simulator (`simulator/`, the distribution cloudburst-sim) is a development tool the
product's wheel and image leave out: nothing the worker, the trigger or the command line load
may need it, and the commands that do need it say so in one line where it is missing. Run in
processes of their own, with `sim` made unimportable (`sys.modules["sim"] = None`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

WITHOUT_SIM = "import sys; sys.modules['sim'] = None\n"


def run_without_sim(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_SIM + code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "200"},  # rich wraps stderr at 80 columns in a pipe
    )


def test_the_processes_import_without_the_simulator() -> None:
    done = run_without_sim(
        "import worker.main, trigger.pending, trigger.nodes, cli.main, typer.main\n"
        # The app imports a command's module when it is looked up: look every one up.
        "group = typer.main.get_command(cli.main.app)\n"
        "ctx = group.make_context('cloudburst', [], resilient_parsing=True)\n"
        "assert all(group.get_command(ctx, name) for name in group.list_commands(ctx))\n"
        "assert not [m for m in sys.modules if m.startswith('sim.')], 'a sim module was loaded'\n"
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("command", "options"),
    [("dev", []), ("demo", []), ("dev", ["--port", "7234"]), ("demo", ["--scenario", "dr"])],
)
def test_the_embedded_stack_without_the_simulator_says_how_to_install_it(
    command: str, options: list[str]
) -> None:
    """`dev` and `demo` are the simulator's (sim/dev/commands.py); without it, whatever
    options are given, one line says how to install it (not "No such option")."""
    argv = ["cloudburst", command, *options]
    done = run_without_sim(f"sys.argv = {argv!r}\nfrom cli.main import main\nmain()\n")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"`cloudburst {command}`" in lines[0]
    assert "make dev" in lines[0] and "pip install ./simulator" in lines[0]
