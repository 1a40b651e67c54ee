"""What the image holds, without a Docker daemon: a wheel built from exactly the sources
deploy/Dockerfile copies into its builder stage, installed into a fresh virtualenv, then every `cloudburst` command's
`--help` and a `cloudburst plan -f` of a file outside the source tree, run from there.
(The dependencies are this environment's: see `image_venv`.)

A wheel built from the whole checkout would not show a package the Dockerfile forgets to copy:
pyproject's package list names it and setuptools finds it in the tree. Built from the copied
sources alone, the wheel lacks it and the commands that import it fail as they would in a pod.

The image's tag follows the package's version: every manifest that names the image names the
version pyproject.toml says.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import DEPLOY, ROOT

DOCKERFILE = DEPLOY / "Dockerfile"
IMAGE = "cloudburst"
# Walks the installed `cloudburst` app (typer builds it on click) and runs `--help` of every
# command and group, each through click's own entry point (`main`), in the fresh virtualenv:
# a lazily imported command (cli/lazy_group.py) imports its module only there. Prints, as
# JSON into the file its argument names, each command path with its exit code and error, and
# where `cli` was imported from.
HELP_EVERY_COMMAND = """
import json, sys
import typer.main
import cli
from cli.main import app

root = typer.main.get_command(app)
results = []

def run(path):
    try:
        root.main(args=[*path, "--help"], prog_name="cloudburst", standalone_mode=False)
        code, error = 0, ""
    except SystemExit as exit:
        code, error = exit.code or 0, ""
    except Exception as err:
        code, error = 1, f"{type(err).__name__}: {err}"
    results.append({"command": " ".join(path), "code": code, "error": error})

def walk(group, path):
    run(path)
    if hasattr(group, "list_commands"):  # a group (of typer's own copy of click)
        ctx = group.context_class(group, info_name="cloudburst")
        for name in group.list_commands(ctx):
            try:
                command = group.get_command(ctx, name)  # a lazy command's import
            except Exception as err:
                error = f"{type(err).__name__}: {err}"
                results.append({"command": " ".join([*path, name]), "code": 1, "error": error})
                continue
            walk(command, [*path, name])

walk(root, [])
with open(sys.argv[1], "w") as out:
    json.dump({"cli": cli.__file__, "results": results}, out)
"""
# A workload, a NodePool and a NodeClass a user writes for `cloudburst plan -f`.
WORKLOAD = """\
apiVersion: cloudburst.io/v1alpha1
kind: NodeClass
metadata: {name: burst, namespace: default}
spec:
  hetzner:
    location: fsn1
    apiTokenSecretRef: {name: hcloud, key: token}
  join: {hostApiServer: "https://100.64.0.1:6443"}
---
apiVersion: cloudburst.io/v1alpha1
kind: NodePool
metadata: {name: burst, namespace: default}
spec:
  nodeClassRef: burst
  requirements: {allowedProviders: [hetzner]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: web
          image: nginx
          resources: {requests: {cpu: "1", memory: 1Gi}}
"""


def builder_copies(dockerfile: str) -> list[str]:
    """The sources of every `COPY` in the Dockerfile's first (builder) stage, as written.

    Only the plain form is understood (`COPY src... dest`); any other (JSON form, flags,
    wildcards) fails here rather than be guessed at.
    """
    logical = dockerfile.replace("\\\n", " ").splitlines()
    instructions = [line.split(None, 1) for line in logical if line.strip()]
    instructions = [i for i in instructions if not i[0].startswith("#")]
    stages = [n for n, i in enumerate(instructions) if i[0].upper() == "FROM"]
    assert stages and stages[0] == 0, "the Dockerfile starts with its builder stage's FROM"
    builder = instructions[: stages[1] if len(stages) > 1 else None]
    sources: list[str] = []
    for instruction in builder:
        if instruction[0].upper() != "COPY":
            continue
        words = shlex.split(instruction[1])
        assert not words[0].startswith(("[", "--")), f"COPY form not understood: {instruction}"
        assert not any(c in w for w in words[:-1] for c in "*?["), f"wildcard: {instruction}"
        sources += words[:-1]
    assert sources, "the builder stage copies nothing"
    return sources


def package_version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv holding the wheel of the copied sources, as the image's builder stage
    installs it (`pip install .`).

    Its dependencies are this environment's, resolved from the same pyproject.toml, reached
    through a path file rather than installed again (a hundred packages, minutes on a busy
    machine): a path line adds their directory alone, so this checkout's editable installs
    (whose finders a nested `.pth` would start) are not seen, and `pip check` confirms they
    meet the wheel's requirements.
    """
    context = tmp_path_factory.mktemp("build-context")
    for source in builder_copies(DOCKERFILE.read_text()):
        origin = ROOT / source
        assert origin.exists(), f"deploy/Dockerfile copies {source}, which does not exist"
        ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist")
        if origin.is_dir():
            shutil.copytree(origin, context / source, ignore=ignore)
        else:
            (context / source).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, context / source)
    wheels = tmp_path_factory.mktemp("wheel")
    offline = ["--no-deps", "--no-build-isolation", "--quiet"]
    run([sys.executable, "-m", "pip", "wheel", str(context), *offline, "-w", str(wheels)])
    (wheel,) = wheels.glob("*.whl")
    venv = tmp_path_factory.mktemp("image") / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = str(venv / "bin" / "python")
    pip = [sys.executable, "-m", "pip", "--python", python, "--disable-pip-version-check"]
    run([*pip, "install", "--quiet", "--no-deps", "--no-index", str(wheel)])
    own = run([python, "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    dependencies = sysconfig.get_path("purelib")
    (Path(own.stdout.strip()) / "cloudburst-dependencies.pth").write_text(dependencies + "\n")
    run([*pip, "check"])
    return venv


def run(
    args: list[str],
    timeout: float = 300,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env, check=False
    )
    assert done.returncode == 0, f"{shlex.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done


def outside_the_source_tree(tmp_path: Path) -> dict[str, str]:
    """The environment of a pod's process: no PYTHONPATH, no kubeconfig, a home of its own."""
    home = tmp_path / "home"
    home.mkdir()
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TMPDIR")}
    return keep | {"HOME": str(home), "KUBECONFIG": str(home / "none"), "COLUMNS": "200"}


def test_the_builder_stage_copies_what_pyproject_packages() -> None:
    """Each package pyproject.toml lists is copied (with `explain` missing, fails naming it),
    the fast half of the image test below."""
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {name.rstrip("*") for name in listed["packages"]["find"]["include"]}
    copied = set(builder_copies(DOCKERFILE.read_text()))
    assert packages - copied == set(), "deploy/Dockerfile does not COPY these packages"
    assert {"pyproject.toml", "README.md"} <= copied


def test_every_command_runs_from_the_image_contents(image_venv: Path, tmp_path: Path) -> None:
    """Every command's `--help` and `cloudburst plan -f` run from the wheel of the Dockerfile's
    copied sources. Without `COPY explain` in deploy/Dockerfile, `plan` and `explain` (which
    import `explain/`) fail with ModuleNotFoundError here."""
    env = outside_the_source_tree(tmp_path)
    python = str(image_venv / "bin" / "python")
    report = tmp_path / "help.json"
    run([python, "-I", "-c", HELP_EVERY_COMMAND, str(report)], cwd=tmp_path, env=env)
    walked = json.loads(report.read_text())
    assert Path(walked["cli"]).is_relative_to(image_venv), walked["cli"]
    failed = [r for r in walked["results"] if r["code"] != 0]
    assert failed == [], failed
    commands = {r["command"] for r in walked["results"]}
    assert {"", "worker", "trigger", "plan", "explain", "explain pod", "validate"} <= commands

    workload = tmp_path / "workload.yaml"
    workload.write_text(WORKLOAD)
    cloudburst = str(image_venv / "bin" / "cloudburst")
    planned = run([cloudburst, "plan", "-f", str(workload), "-o", "json"], cwd=tmp_path, env=env)
    answer: dict[str, Any] = json.loads(planned.stdout)
    assert answer["pool"] == "default/burst", answer
    assert answer["pods"] == 3 and answer["nodes"], answer
    assert {n["offering"].split("/")[0] for n in answer["nodes"]} == {"hetzner"}, answer
    assert answer["prices"].startswith("the shipped catalog"), answer  # package data in the wheel


def test_the_image_tag_is_the_package_version(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """Every container of every shipped overlay that runs the image names it at the package's
    version, and so do the build commands the Dockerfile and deploy/README.md give (with
    `cloudburst:0.1.0` in the manifests and 0.2.0.dev0 in pyproject.toml, fails listing them)."""
    wanted = f"{IMAGE}:{package_version()}"
    images = {
        (overlay, doc["kind"], doc["metadata"]["name"], container["image"])
        for overlay, docs in rendered.items()
        for doc in docs
        for container in _containers(doc)
        if container["image"].split(":")[0].rsplit("/", 1)[-1] == IMAGE
    }
    assert images, "no manifest runs the cloudburst image"
    assert {i for i in images if i[3] != wanted} == set()
    for path in (DOCKERFILE, DEPLOY / "README.md"):
        built = [w for w in path.read_text().split() if w.startswith(f"{IMAGE}:")]
        assert built and set(built) == {wanted}, f"{path.relative_to(ROOT)}: {built}"


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    pod = (doc.get("spec") or {}).get("template", {}).get("spec", {})
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def test_the_dockerfile_parser_reads_the_forms_it_claims() -> None:
    """The parser above joins continued lines, stops at the second stage and refuses a form it
    does not understand (so a changed Dockerfile is never half read)."""
    text = "FROM a AS b\nCOPY x \\\n  y ./\n# COPY z ./\nRUN true\nFROM c\nCOPY --from=b /o /o\n"
    assert builder_copies(text) == ["x", "y"]
    with pytest.raises(AssertionError, match="not understood"):
        builder_copies('FROM a\nCOPY ["x", "./"]\n')
    assert yaml.safe_load(WORKLOAD.split("---")[0])["kind"] == "NodeClass"
