"""The product's wheel (what the image installs) holds no simulator; the simulator's own wheel
(`simulator/`, cloudburst-sim) holds it with its data. Built offline with this interpreter's
setuptools (`--no-build-isolation`), from a copy of the checkout: an in-tree build writes
`build/`, whose leftovers a later wheel would pick up."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("checkout") / "src"
    ignore = shutil.ignore_patterns(".*", "__pycache__", "build", "dist", "*.egg-info")
    shutil.copytree(ROOT, copy, ignore=ignore, symlinks=True)
    return copy


def wheel_files(source: Path, out: Path) -> list[str]:
    offline = ["--no-deps", "--no-build-isolation", "--quiet"]
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), *offline, "--wheel-dir", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_the_product_wheel_holds_no_simulator(checkout: Path, tmp_path: Path) -> None:
    files = wheel_files(checkout, tmp_path)
    assert "cli/main.py" in files and "worker/main.py" in files
    assert "planner/plan.py" in files and "planner/catalog/catalog.json" in files
    assert [f for f in files if f.startswith(("sim/", "simulator/"))] == []


def test_no_module_of_the_product_wheel_imports_the_simulator(
    checkout: Path, tmp_path: Path
) -> None:
    """The development harness (the embedded stack, the demos and drills) is the simulator's
    distribution's (sim/dev/): no module the product's wheel ships imports `sim`, even where
    a guard would keep it from running. Fails on the embedded stack and its demos, which were
    the product's (in cli/), and on the `dev` and `demo` commands' bodies in cli/main.py."""
    files = wheel_files(checkout, tmp_path)
    importing: list[str] = []
    with zipfile.ZipFile(next(tmp_path.glob("*.whl"))) as archive:
        for name in (f for f in files if f.endswith(".py")):
            tree = ast.parse(archive.read(name).decode())
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    modules = [node.module or ""]
                else:
                    continue
                if any(m == "sim" or m.startswith("sim.") for m in modules):
                    importing.append(f"{name}:{node.lineno}")
    assert importing == []


def test_the_image_copies_every_package_of_the_wheel() -> None:
    """The Dockerfile builds the wheel from the folders it copies: a package the wheel names
    but the image does not copy is missing from the image alone. Fails without `COPY explain`
    (missing once: the image's `cloudburst explain` and `plan` import it)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {
        pattern.rstrip("*")
        for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (\w+) \./\1$", dockerfile, re.MULTILINE))
    assert packages == copied, f"packages not copied: {sorted(packages - copied)}"


def test_the_simulator_wheel_holds_the_simulator_and_its_data(
    checkout: Path, tmp_path: Path
) -> None:
    files = wheel_files(checkout / "simulator", tmp_path)
    assert "sim/controlplane/cluster.py" in files
    assert "sim/controlplane/stages/pod-ready.yaml" in files
    assert "sim/controlplane/crds/cloudburst.io_nodepools.yaml" in files
    assert "sim/clouds/price_fixtures/digitalocean.json" in files
    assert [f for f in files if f.split("/", 1)[0] in ("api", "cli", "worker", "workflows")] == []
