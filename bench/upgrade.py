"""Upgrade drill: the production topology rolled from an older release to new code, and back.

    .venv/bin/python bench/upgrade.py --from v0.1.0 [--to DIR] [--json] [--versioned]
        [--order worker-first|trigger-first|both] [--self-test]

Runs what a cluster runs, each component its own OS process (`sim.dev.topology`, as
bench/chaos.py does: the Temporal dev server on a persistent database and the simulated cluster, `python -m sim`, from
this repository), with the worker and the trigger of the OLD code: a `git worktree` of `--from`
(or a directory given as it is), run by this venv's interpreter with the tree as working
directory and first on `PYTHONPATH`, so that its modules shadow the installed ones, and with
the release its pyproject.toml names as the installed distribution's (a dist-info beside it),
as an image built from that tree would report it. A probe run the same way (interpreter,
environment, directory) says where `cli` and the workflows are loaded from and which release
the worker reports; a process whose probe does not point into its tree fails the drill.

With the old code it brings up what a roll meets: claims Ready with their pods bound, one
draining (a PodDisruptionBudget holds its pod, so the drain lasts the pool's grace period), a
burst whose VMs are booting and a burst still pending. Then it rolls process by process
(`--order`: the worker first or the trigger first; `both`: one run of each), each old process
stopped as a Deployment stops it (SIGTERM) and the new one started (`--versioned`: the new
worker is a second Worker Deployment Version, set current, then the old one stopped), sends the
new processes a burst, and rolls the worker back: the old one started again either runs (its
workflow tasks must not fail) or refuses to start with the release guard's message
(worker/release_guard.py), and the new one is started again. Last, every pod is deleted,
every node must go, and every history is scanned.

The verdict (JSON): workflow tasks failed (nondeterminism apart; those of the rollback apart),
workflows failed, claims stuck, VMs leaked or made twice, pods never bound, how long pods waited
to bind before, during and after the roll, how long each process was down, what the rollback
did, `ok`; the exit status is 1 unless ok.

`--self-test` shows that the drill can fail: from `--from` (default HEAD) to a copy of it whose
claims start a timer in their liveness loop, unpatched (expected: nondeterminism, not ok), then
the same behind `workflow.patched("drill-self-test")` (expected: ok). Both copies report the
release `<from's>+drill`, newer than the old code's, so the rollback meets the guard when the
old code has one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
import traceback
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from kubernetes import client as k8s
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowExecutionStatus

from api.labels import STARTUP_TAINT
from api.messages import claim_workflow_id
from sim.dev.stack import temporal_cli
from sim.dev.topology import (
    PACKAGES,
    POOLS,
    REPO,
    BindWatch,
    Process,
    Report,
    Topology,
    add_control_plane_argument,
    cloud_instances,
    connect,
    kube_client,
    own_group_dying_with_parent,
    seed,
    verdict,
    wave_pod,
)
from worker.payload_codec import new_key_line

ORDERS = {"worker-first": ("worker", "trigger"), "trigger-first": ("trigger", "worker")}
DEPLOYMENT = "cloudburst-drill"
RUN = "from cli.main import main; main()"
# Where a process's code and release come from, as it reports them.
PROBE = """
import json
from importlib.metadata import version
from pathlib import Path
import cli, worker.main, workflows.nodeclaim.liveness as liveness
print(json.dumps({
    "cli": cli.__file__,
    "liveness": liveness.__file__,
    "release": version("cloudburst"),  # worker.settings.RELEASE, where the code has it
    "versioning": hasattr(worker.main, "deployment_config"),
    "release_guard": Path(worker.main.__file__).with_name("release_guard.py").exists(),
}))
"""
WORKER_UP = "worker polling task queues"
# A trigger's pending-pod watcher has listed the pods and told each pool its pending set.
TRIGGER_UP = "pending pods,"
# What the old release's guard prints (worker/release_guard.py REFUSAL_OPENING), literal: the
# old code's wording is the one that counts.
REFUSAL = "refusing to start"
HELD = "drill.io/held"
NDE = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR
CLOSE_RACE = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND
# The self-test's command change: a timer in each pass of the claim's liveness loop.
LIVENESS = Path("workflows/nodeclaim/liveness.py")
LIVENESS_ANCHOR = (
    "        state.update_details()\n        await workflow.wait_condition(lambda: state.dirty)\n"
)
SELF_TEST_TIMER = (
    "        await workflow.sleep(timedelta(milliseconds=50), summary='drill self-test')\n"
)
SELF_TEST_PATCH = "drill-self-test"
COPY_IGNORED = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", "*.egg-info", ".cloudburst", ".*_cache"
)


# --- the code under test ---------------------------------------------------------------------


@dataclass
class Tree:
    """A tree of the project whose worker and trigger the drill runs."""

    label: str  # "old" or "new"
    path: Path
    source: str  # the git ref or directory it came from
    commit: str | None
    release: str  # its pyproject.toml's version
    build_id: str
    probe: dict[str, Any] = field(default_factory=dict)

    def identity(self, state: Path) -> Path:
        """A directory holding only a dist-info of this tree's release: on `PYTHONPATH`, the
        release `importlib.metadata` (worker.settings.RELEASE) reports, as if installed."""
        where = state / f"identity-{self.label}"
        info = where / f"cloudburst-{self.release}.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: cloudburst\nVersion: {self.release}\n"
        )
        return where

    def env(self, base: dict[str, str], state: Path) -> dict[str, str]:
        return {**base, "PYTHONPATH": f"{self.path}{os.pathsep}{self.identity(state)}"}

    def summary(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "commit": self.commit,
            "release": self.release,
            "build_id": self.build_id,
            "runs_from": self.probe.get("cli"),
            "versioning": self.probe.get("versioning"),
            "release_guard": self.probe.get("release_guard"),
        }


class TreeProcess(Process):
    """A component run from a tree: this interpreter, the tree as working directory (first on
    `sys.path` for `-c`) and on `PYTHONPATH`."""

    def __init__(self, name: str, tree: Tree, args: list[str], env: dict[str, str], log: Path):
        super().__init__(name, [sys.executable, "-c", RUN, *args], env, log)
        self.tree = tree

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.argv,
                cwd=self.tree.path,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=own_group_dying_with_parent,
            )

    def log_size(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def log_since(self, offset: int) -> str:
        with contextlib.suppress(OSError), self.log.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")
        return ""


class Trees(contextlib.ExitStack):
    """Makes the trees a drill runs and removes them (worktrees with `git worktree remove
    --force`), also when the drill fails."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[Path] = []
        self.callback(self._remove)

    def checkout(self, source: str, label: str) -> Tree:
        """A worktree of the git ref `source`, or the directory `source` as it is."""
        if Path(source).is_dir():
            return describe_tree(Path(source).resolve(), source, label)
        commit = _git(REPO, "rev-parse", "--verify", f"{source}^{{commit}}", check=False)
        commit = commit or released_commit(source)
        parent = Path(tempfile.mkdtemp(prefix=f"cloudburst-upgrade-{label}-"))
        self.made.append(parent)
        _git(REPO, "worktree", "add", "--detach", str(parent / "tree"), commit)
        return describe_tree(parent / "tree", source, label)

    def changed_copy(self, base: Tree, label: str, *, patched: bool) -> Tree:
        """`base` with the self-test's command change, released as `<base>+drill`."""
        parent = Path(tempfile.mkdtemp(prefix=f"cloudburst-upgrade-{label}-"))
        self.made.append(parent)
        tree = parent / "tree"
        shutil.copytree(base.path, tree, ignore=COPY_IGNORED, symlinks=True)
        source = (tree / LIVENESS).read_text()
        if LIVENESS_ANCHOR not in source:
            raise RuntimeError(f"{LIVENESS} changed: the self-test's anchor is not in it")
        change = SELF_TEST_TIMER
        if patched:
            change = f"        if workflow.patched({SELF_TEST_PATCH!r}):\n    {SELF_TEST_TIMER}"
        (tree / LIVENESS).write_text(source.replace(LIVENESS_ANCHOR, change + LIVENESS_ANCHOR))
        pyproject = tree / "pyproject.toml"
        pyproject.write_text(
            re.sub(
                r'^version = ".*"$',
                f'version = "{base.release}+drill"',
                pyproject.read_text(),
                count=1,
                flags=re.M,
            )
        )
        described = describe_tree(tree, f"{base.source} + {label}", "new")
        described.build_id = f"{described.release}-{label}"
        return described

    def _remove(self) -> None:
        for parent in self.made:
            if (parent / "tree" / ".git").is_file():
                subprocess.run(
                    ["git", "-C", str(REPO), "worktree", "remove", "--force", str(parent / "tree")],
                    capture_output=True,
                    check=False,
                )
            shutil.rmtree(parent, ignore_errors=True)
        subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], capture_output=True)


def describe_tree(path: Path, source: str, label: str) -> Tree:
    release = tomllib.loads((path / "pyproject.toml").read_text())["project"]["version"]
    commit = _git(path, "rev-parse", "HEAD", check=False) or None
    dirty = bool(_git(path, "status", "--porcelain", check=False)) if commit else False
    if commit:
        build_id = f"{release}-{commit[:10]}{'-dirty' if dirty else ''}"
    else:
        build_id = f"{release}-{hashlib.sha256(str(path).encode()).hexdigest()[:10]}"
    return Tree(label, path, source, commit, release, build_id)


def released_commit(ref: str) -> str:
    """The commit CHANGELOG.md names for release `ref` (`v0.1.0` or `0.1.0`): a clone without
    tags (CI's) still finds it. Raises when `ref` is neither a git ref nor a release there."""
    version = ref.removeprefix("v")
    changelog = (REPO / "CHANGELOG.md").read_text()
    heading = re.search(
        rf"^## {re.escape(version)} .*?^Commit: ([0-9a-f]{{40}})", changelog, re.M | re.S
    )
    if heading is None:
        raise RuntimeError(f"{ref} is no git ref here, nor a release CHANGELOG.md names")
    return heading.group(1)


def _git(where: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip() if done.returncode == 0 else ""


def probe(tree: Tree, env: dict[str, str]) -> list[str]:
    """Run the probe as the tree's processes run; the problems with what it reports."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=tree.path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        return [f"{tree.label} code does not import: {done.stderr.strip()[-2000:]}"]
    tree.probe = json.loads(done.stdout.strip().splitlines()[-1])
    problems = []
    for module in ("cli", "liveness"):
        if not Path(tree.probe[module]).resolve().is_relative_to(tree.path.resolve()):
            problems.append(
                f"{tree.label} {module} loads from {tree.probe[module]}, not {tree.path}"
            )
    if tree.probe["release"] != tree.release:
        problems.append(
            f"{tree.label} worker reports release {tree.probe['release']}, its tree {tree.release}"
        )
    return problems


def compile_tree(tree: Tree) -> None:
    """Bytecode, as an image has it (sim.dev.topology.PACKAGES says why)."""
    packages = [str(tree.path / p) for p in PACKAGES if (tree.path / p).is_dir()]
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *packages],
        check=False,
        stdout=subprocess.DEVNULL,
    )


# --- one run ---------------------------------------------------------------------------------


@dataclass
class RunReport:
    order: str
    versioned: dict[str, Any]
    old: dict[str, Any]
    new: dict[str, Any]
    # What the roll met: NodeClaims by phase, VMs by state, pods not yet bound.
    at_roll: dict[str, Any] = field(default_factory=dict)
    roll: list[dict[str, Any]] = field(default_factory=list)
    rollback: dict[str, Any] = field(default_factory=dict)
    workflow_tasks_failed: dict[str, int] = field(default_factory=dict)
    nondeterminism: dict[str, int] = field(default_factory=dict)
    close_races: dict[str, int] = field(default_factory=dict)
    # Running workflows whose workflow task has failed and is being retried: a loop.
    tasks_retrying: dict[str, int] = field(default_factory=dict)
    workflows_failed: list[str] = field(default_factory=list)
    claims_stuck: list[str] = field(default_factory=list)
    lifecycles_completed: int = 0
    vms_created: int = 0
    vms_leaked: int = 0
    vms_created_twice: list[str] = field(default_factory=list)
    pods_created: int = 0
    pods_never_bound: list[str] = field(default_factory=list)
    # The longest a pod waited to bind, by when it was created: with the old code, across the
    # roll (mid-launch, pending and post-roll bursts), and across the rollback.
    bind_wait_max_s: dict[str, float | None] = field(default_factory=dict)
    bind_wait_p50_s: float | None = None
    draining_claim: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    ok: bool = False


class Drill:
    def __init__(
        self, old: Tree, new: Tree, order: str, versioned: bool, args: argparse.Namespace
    ) -> None:
        self.old, self.new, self.order, self.versioned, self.args = old, new, order, versioned, args
        self.state = Path(tempfile.mkdtemp(prefix="cloudburst-upgrade-"))
        if args.sealed:
            # As docs/security.md ("Payload keys") says to upgrade from a release without
            # sealing: the keys Secret mounted and unsealed payloads still read while the
            # workflows started before drain. Every process and the drill's own client get
            # them (an old tree's processes ignore both settings).
            keyring = self.state / "payload-keyring"
            keyring.write_text(new_key_line() + "\n")
            os.environ["CLOUDBURST_PAYLOAD_KEYRING_FILE"] = str(keyring)
            os.environ["CLOUDBURST_PAYLOAD_ACCEPT_UNSEALED"] = "true"
        self.topology = Topology(self.state, args.boot_delay, control_plane=args.control_plane)
        self.report = RunReport(order=order, versioned={}, old=old.summary(), new=new.summary())
        self.started = time.monotonic()
        self.phases: dict[str, tuple[float, float]] = {}  # name -> (wall clock from, to)
        self.pods: dict[str, str] = {}  # pod -> phase of the drill it was created in
        self.processes: dict[tuple[str, str], TreeProcess] = {}
        for tree in (old, new):
            self.processes[("worker", tree.label)] = self._process("worker", tree)
            self.processes[("trigger", tree.label)] = self._process("trigger", tree)

    def _process(self, role: str, tree: Tree) -> TreeProcess:
        template = self.topology.worker if role == "worker" else self.topology.trigger
        env = tree.env(template.env, self.state)
        args = [role]
        if role == "worker":
            args += ["--queues", "all"]
            if self.versioned:
                env |= {
                    "CLOUDBURST_WORKER_DEPLOYMENT": DEPLOYMENT,
                    "CLOUDBURST_WORKER_BUILD_ID": tree.build_id,
                }
        else:
            # A Lease of its own, as a Deployment's new pod has a new name: the old trigger
            # releases its Lease when stopped, and the new one then tells about every node.
            env["CLOUDBURST_TRIGGER_ID"] = f"trigger-{tree.label}"
        return TreeProcess(
            f"{role}-{tree.label}", tree, args, env, self.state / f"{role}-{tree.label}.log"
        )

    async def run(self) -> RunReport:
        report = self.report
        try:
            for tree in (self.old, self.new):
                report.problems += probe(tree, self.processes[("worker", tree.label)].env)
                compile_tree(tree)
            report.old, report.new = self.old.summary(), self.new.summary()
            if report.problems:
                return self._finish()
            if self.versioned:
                report.versioned = {
                    "deployment": DEPLOYMENT,
                    "old": bool(self.old.probe["versioning"]),
                    "new": bool(self.new.probe["versioning"]),
                }
            await self._stages()
        except Exception as err:
            # Where in the drill, too: the exception alone (a 404, say) does not say which step.
            here = [f for f in traceback.extract_tb(err.__traceback__) if "/bench/" in f.filename]
            at = (
                f" (at {Path(here[-1].filename).name}:{here[-1].lineno} {here[-1].name})"
                if here
                else ""
            )
            report.problems.append(f"{type(err).__name__}{at}: {err}")
            for process in [*self.processes.values(), self.topology.sim, self.topology.temporal]:
                print(f"--- {process.name} log, last lines\n{process.tail()}", file=sys.stderr)
        finally:
            for process in self.processes.values():
                process.stop()
            self.topology.stop()
            if not self.args.keep_state:
                shutil.rmtree(self.state, ignore_errors=True)
        return self._finish()

    async def _stages(self) -> None:
        topology, args = self.topology, self.args
        topology.temporal.start()
        topology.sim.start()
        client = await connect(topology)
        api = await asyncio.to_thread(kube_client, topology)
        await asyncio.to_thread(seed, api, topology, args.empty_ttl)
        await asyncio.to_thread(hold_with_a_budget, api)
        self.core, self.custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
        self.watch = BindWatch(api)
        self.watch.start()

        # With the old code: claims Ready, one draining, a burst booting, a burst pending.
        self._mark("old")
        if not await self._start_worker(self.old):
            raise RuntimeError("the old worker did not start")
        if self.versioned and self.old.probe["versioning"]:
            await self._set_current(self.old)
        await self._start_trigger(self.processes[("trigger", "old")])
        held = "r-held"
        # The held pod first and alone, so that its node holds no other pod to drain.
        await self._pods("old", [(held, POOLS[0])], labels={HELD: "true"})
        await self._bound([held], args.wave_timeout)
        await self._pods("old", per_pool("r", args.ready))
        await self._bound(list(self.pods), args.wave_timeout)
        await self._drain_held(held)
        await self._mid_launch()
        await self._pods("roll", per_pool("f", args.burst))  # pending when the roll begins
        self.report.at_roll = await self._snapshot()

        # The roll, process by process; then a burst only the new processes serve.
        self._mark("roll")
        for role in ORDERS[self.order]:
            await self._roll(role)
        await self._pods("roll", per_pool("p", args.burst))
        await self._bound(list(self.pods), args.wave_timeout)
        await self._drain_done(client)
        if self.versioned:
            self.report.versioned["after_roll"] = await versions_running(client)

        self._mark("rollback")
        await self._rollback()
        self._mark("end")

        # Every pod gone, so every node goes; then what the histories say.
        await self._delete_pods(list(self.pods))
        self.watch.stop()
        running, vms = await settle(client, topology, args.settle_timeout)
        self.report.claims_stuck, self.report.vms_leaked = running, len(vms)
        await self._verdict(client)

    # --- bring-up ---------------------------------------------------------------------------

    async def _pods(
        self, phase: str, pods: list[tuple[str, str]], labels: dict[str, str] | None = None
    ) -> None:
        """Create `pods` (name, pool), counted in `phase` of the drill."""
        for name, pool in pods:
            pod = wave_pod(name, pool)
            assert pod.metadata is not None and pod.spec is not None
            pod.metadata.labels = {**(pod.metadata.labels or {}), **(labels or {})}
            # Releases before 0.2.0 register their nodes with a NoExecute startup taint, which
            # kube-controller-manager's taint eviction controller may act on just as the taint
            # is lifted, deleting a pod bound that moment (fixed since: NoSchedule; CHANGELOG).
            # The old release's own bug is not what the drill is about: its pods tolerate it.
            pod.spec.tolerations = [
                k8s.V1Toleration(key=STARTUP_TAINT, operator="Exists", effect="NoExecute")
            ]
            await asyncio.to_thread(self.core.create_namespaced_pod, "default", pod)
            self.watch.created[name] = time.monotonic()
            self.pods[name] = phase
        self.report.pods_created = len(self.pods)

    async def _bound(self, names: list[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not all(n in self.watch.bound for n in names):
            await asyncio.sleep(0.3)

    async def _drain_held(self, held: str) -> None:
        """Scale the held pod's node down (`kubectl delete nodeclaim`): its drain waits on the
        PodDisruptionBudget for the pool's grace period, across the roll."""
        pod = await asyncio.to_thread(self.core.read_namespaced_pod, held, "default")
        node = pod.spec.node_name if pod.spec else None
        if not node:
            raise RuntimeError(f"the held pod {held} never bound")
        await asyncio.to_thread(
            self.custom.delete_namespaced_custom_object,
            "cloudburst.io",
            "v1alpha1",
            "default",
            "nodeclaims",
            node,
        )
        self.report.draining_claim = {"claim": node}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(k8s.ApiException):
                found = await asyncio.to_thread(self.core.read_node, node)
                if found.spec and found.spec.unschedulable:
                    self.report.draining_claim["cordoned_before_roll"] = True
                    return
            await asyncio.sleep(0.3)
        self.report.problems.append(f"the held node {node} was never cordoned")

    async def _mid_launch(self) -> None:
        """A burst whose claims have started (their VMs booting) when the roll begins: a pool
        starts a round's claims together, so the first one's NodeClaim says they are out."""
        before = len(await self._claims())
        await self._pods("roll", per_pool("m", self.args.burst))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(await self._claims()) <= before:
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.3)

    async def _claims(self) -> list[dict[str, Any]]:
        listing = await asyncio.to_thread(
            self.custom.list_namespaced_custom_object,
            "cloudburst.io",
            "v1alpha1",
            "default",
            "nodeclaims",
        )
        return list(cast(dict[str, Any], listing)["items"])

    async def _snapshot(self) -> dict[str, Any]:
        claims = Counter(c.get("status", {}).get("phase", "?") for c in await self._claims())
        vms = Counter(
            i.get("state", "?") for i in await asyncio.to_thread(cloud_instances, self.topology)
        )
        pending = sorted(n for n in self.pods if n not in self.watch.bound)
        return {"claims": dict(claims), "vms": dict(vms), "pods_pending": len(pending)}

    # --- the roll ---------------------------------------------------------------------------

    async def _roll(self, role: str) -> None:
        old, new = self.processes[(role, "old")], self.processes[(role, "new")]
        began = time.monotonic()
        step: dict[str, Any] = {"step": f"{role} old -> new"}
        if role == "worker" and self.versioned:
            # Both versions poll; the new one takes every task once current.
            if not await self._start_worker(self.new):
                raise RuntimeError(f"the new worker did not start: {new.tail()}")
            await self._set_current(self.new)
            old.stop()
        else:
            old.stop()
            if role == "trigger":
                await self._start_trigger(new)
            elif not await self._start_worker(self.new):
                raise RuntimeError(f"the new worker did not start: {new.tail()}")
        # Unversioned, the role had no process for that long; versioned, both versions polled.
        step["down_s" if not (role == "worker" and self.versioned) else "seconds"] = round(
            time.monotonic() - began, 2
        )
        self.report.roll.append(step)

    async def _start_worker(self, tree: Tree) -> bool:
        """Start the tree's worker; True once it polls, False if it exited first."""
        process = self.processes[("worker", tree.label)]
        offset = process.log_size()
        process.start()
        return await self._until_logged(process, offset, WORKER_UP, timeout_s=90)

    async def _start_trigger(self, process: TreeProcess) -> None:
        offset = process.log_size()
        process.start()
        await self._until_logged(process, offset, TRIGGER_UP, timeout_s=30)

    async def _until_logged(
        self, process: TreeProcess, offset: int, line: str, timeout_s: float
    ) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if line in process.log_since(offset):
                return True
            if process.exited():
                return False
            await asyncio.sleep(0.1)
        return False

    async def _set_current(self, tree: Tree) -> None:
        """`temporal worker deployment set-current-version` to the tree's version (or to the
        unversioned workers, when its code predates versioning)."""
        target = ["--build-id", tree.build_id] if tree.probe["versioning"] else ["--unversioned"]
        command = [
            temporal_cli(),
            "worker",
            "deployment",
            "set-current-version",
            "--address",
            f"127.0.0.1:{self.topology.temporal_port}",
            "--deployment-name",
            DEPLOYMENT,
            *target,
            "--yes",
        ]
        deadline = time.monotonic() + 30
        while True:
            done = await asyncio.to_thread(
                subprocess.run, command, capture_output=True, text=True, check=False
            )
            if done.returncode == 0:
                current = tree.build_id if tree.probe["versioning"] else "unversioned"
                self.report.versioned.setdefault("current", []).append(current)
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"set-current-version {tree.build_id}: {done.stderr.strip()}")
            await asyncio.sleep(0.5)

    async def _drain_done(self, client: Client) -> None:
        """The draining claim ended (its workflow completed) after the roll."""
        claim = self.report.draining_claim.get("claim")
        if not claim:
            return
        handle = client.get_workflow_handle(claim_workflow_id("default", claim))
        grace = 20 + 40  # chaos.seed's terminationGracePeriodSeconds, and the node's deletion
        try:
            await asyncio.wait_for(handle.result(), timeout=grace)
            self.report.draining_claim["ended_after_roll"] = True
        except Exception as err:
            self.report.draining_claim["ended_after_roll"] = False
            self.report.problems.append(f"the draining claim {claim} did not end: {err!r}")

    # --- the rollback -----------------------------------------------------------------------

    async def _rollback(self) -> None:
        """The new worker replaced by the old one again: it runs, or it refuses to."""
        old = self.processes[("worker", "old")]
        new = self.processes[("worker", "new")]
        offset = old.log_size()
        rollback: dict[str, Any] = {}
        self.report.rollback = rollback
        if not self.versioned:
            new.stop()
        began = time.monotonic()
        up = await self._start_worker(self.old)
        said = old.log_since(offset)
        if up:
            rollback["outcome"] = "ran"
            if self.versioned:
                await self._set_current(self.old)
                new.stop()
            # Work for the old code: a burst, and one pool's nodes emptied (their claims go).
            pods = per_pool("b", self.args.burst)
            await self._pods("rollback", pods)
            await self._delete_pods([n for n in self.pods if n.startswith(f"r-{POOLS[1]}-")])
            await self._bound([name for name, _ in pods], self.args.wave_timeout)
        elif REFUSAL in said:
            rollback["outcome"] = "refused"
            opening = f"cloudburst worker {self.old.release}:"
            rollback["message"] = said[said.find(opening) :].strip() if opening in said else said
            if not self.versioned:
                await self._start_worker(self.new)
        else:
            rollback["outcome"] = "crashed"
            self.report.problems.append(f"the old worker neither ran nor refused: {old.tail()}")
            if not self.versioned:
                await self._start_worker(self.new)
        rollback["seconds"] = round(time.monotonic() - began, 2)

    async def _delete_pods(self, names: list[str]) -> None:
        for name in names:
            with contextlib.suppress(k8s.ApiException):
                await asyncio.to_thread(
                    self.core.delete_namespaced_pod, name, "default", grace_period_seconds=0
                )

    # --- the verdict ------------------------------------------------------------------------

    def _mark(self, phase: str) -> None:
        self.phases[phase] = (time.time(), float("inf"))
        for name, (since, until) in list(self.phases.items()):
            if name != phase and until == float("inf"):
                self.phases[name] = (since, time.time())

    async def _verdict(self, client: Client) -> None:
        report = self.report
        found = Report()
        await verdict(client, self.topology, None, found)
        report.vms_created, report.vms_created_twice = found.vms_created, found.vms_created_twice
        report.workflows_failed = found.workflows_failed
        report.lifecycles_completed = found.lifecycles_completed
        report.close_races = found.close_races
        rollback_from = self.phases["rollback"][0]
        in_rollback = Counter[str]()
        async for execution in client.list_workflows():
            handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
            history = await handle.fetch_history()
            for event in history.events:
                if event.event_type != EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                    continue
                cause = event.workflow_task_failed_event_attributes.cause
                if cause == CLOSE_RACE:
                    continue
                report.workflow_tasks_failed[execution.id] = (
                    report.workflow_tasks_failed.get(execution.id, 0) + 1
                )
                message = event.workflow_task_failed_event_attributes.failure.message
                if cause == NDE or "TMPRL1100" in message:
                    report.nondeterminism[execution.id] = (
                        report.nondeterminism.get(execution.id, 0) + 1
                    )
                if event.event_time.ToMicroseconds() / 1e6 >= rollback_from:
                    in_rollback[execution.id] += 1
            if execution.status == WorkflowExecutionStatus.RUNNING:
                pending = (await handle.describe()).raw_description.pending_workflow_task
                if pending.attempt > 1:
                    report.tasks_retrying[execution.id] = pending.attempt
        report.rollback["workflow_tasks_failed"] = sum(in_rollback.values())
        waits = {
            n: self.watch.bound[n] - self.watch.created[n]
            for n in self.watch.created
            if n in self.watch.bound
        }
        report.pods_never_bound = sorted(n for n in self.pods if n not in waits)
        for phase in ("old", "roll", "rollback"):
            mine = [w for n, w in waits.items() if self.pods.get(n) == phase]
            report.bind_wait_max_s[phase] = round(max(mine), 2) if mine else None
        if waits:
            report.bind_wait_p50_s = round(statistics.median(waits.values()), 2)

    def _finish(self) -> RunReport:
        report = self.report
        report.seconds = round(time.monotonic() - self.started, 1)
        problems = report.problems
        for what, value in (
            ("workflow tasks failed", report.workflow_tasks_failed),
            ("workflow tasks retrying", report.tasks_retrying),
            ("workflows failed", report.workflows_failed),
            ("claims stuck", report.claims_stuck),
            ("VMs created twice", report.vms_created_twice),
            ("pods never bound", report.pods_never_bound),
        ):
            if value:
                problems.append(f"{what}: {value}")
        if report.vms_leaked:
            problems.append(f"{report.vms_leaked} VMs leaked")
        report.ok = not problems
        return report


async def versions_running(client: Client) -> dict[str, int]:
    """Running workflows by the Worker Deployment Version they run on."""
    found: Counter[str] = Counter()
    async for execution in client.list_workflows("ExecutionStatus = 'Running'"):
        described = await client.get_workflow_handle(execution.id).describe()
        info = described.raw_description.workflow_execution_info.versioning_info
        found[info.deployment_version.build_id or "unversioned"] += 1
    return dict(found)


def per_pool(prefix: str, count: int) -> list[tuple[str, str]]:
    """`count` pods for each pool: (name, pool)."""
    return [(f"{prefix}-{pool}-{i}", pool) for pool in POOLS for i in range(count)]


def hold_with_a_budget(api: k8s.ApiClient) -> None:
    """A PodDisruptionBudget no eviction of a held pod may satisfy: its node's drain waits for
    the grace period (activities/kube.py drain_node)."""
    k8s.PolicyV1Api(api).create_namespaced_pod_disruption_budget(
        "default",
        k8s.V1PodDisruptionBudget(
            metadata=k8s.V1ObjectMeta(name="drill-held"),
            spec=k8s.V1PodDisruptionBudgetSpec(
                min_available=1, selector=k8s.V1LabelSelector(match_labels={HELD: "true"})
            ),
        ),
    )


async def settle(
    client: Client, topology: Topology, timeout_s: float
) -> tuple[list[str], list[dict[str, Any]]]:
    """Wait until no claim runs and no VM is left, or every claim still running is retrying a
    failed workflow task (a loop no wait ends); what is still there then."""
    deadline = time.monotonic() + timeout_s
    running: list[str] = []
    vms: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            running = [
                e.id
                async for e in client.list_workflows(
                    "WorkflowType = 'NodeClaimWorkflow' AND ExecutionStatus = 'Running'"
                )
            ]
            vms = await asyncio.to_thread(cloud_instances, topology)
            if not running and not vms:
                break
            attempts = [
                (
                    await client.get_workflow_handle(i).describe()
                ).raw_description.pending_workflow_task.attempt
                for i in running
            ]
            if running and min(attempts) >= 3:
                break
        await asyncio.sleep(2)
    return running, vms


# --- the drill and its self-test -------------------------------------------------------------


async def drill(old: Tree, new: Tree, args: argparse.Namespace) -> dict[str, Any]:
    orders = list(ORDERS) if args.order == "both" else [args.order]
    runs = [await Drill(old, new, order, args.versioned, args).run() for order in orders]
    return {
        "from": old.source,
        "to": new.source,
        "runs": [asdict(r) for r in runs],
        "ok": all(r.ok for r in runs),
    }


async def self_test(base: Tree, trees: Trees, args: argparse.Namespace) -> dict[str, Any]:
    """The drill from `base` to `base` with an unpatched command change (it must fail on
    nondeterminism) and with the change behind a patch (it must pass)."""
    results: dict[str, Any] = {"from": base.source}
    # A claim the unpatched change stops may wait on a timer of hours, not retry a failed task
    # (what settle looks for): the settling is bounded shorter.
    args = argparse.Namespace(**{**vars(args), "settle_timeout": min(args.settle_timeout, 45.0)})
    for label, patched in (("unpatched", False), ("patched", True)):
        new = trees.changed_copy(base, label, patched=patched)
        run = await Drill(base, new, "worker-first", args.versioned, args).run()
        if patched:
            expected, held = "ok", run.ok
        else:
            expected, held = (
                "not ok, nondeterminism reported",
                (not run.ok and bool(run.nondeterminism)),
            )
        results[label] = {"expected": expected, "as_expected": held, "run": asdict(run)}
    results["ok"] = all(results[k]["as_expected"] for k in ("unpatched", "patched"))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--from", dest="source", default=None, help="git ref (or directory) of the old code"
    )
    parser.add_argument(
        "--to", default=str(REPO), help="directory of the new code (default: this repo)"
    )
    parser.add_argument("--order", choices=[*ORDERS, "both"], default="both")
    parser.add_argument(
        "--versioned", action="store_true", help="workers as Worker Deployment Versions"
    )
    parser.add_argument(
        "--sealed",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="payloads sealed with a keyring, unsealed ones still read (the documented upgrade)",
    )
    parser.add_argument("--self-test", action="store_true", help="show that the drill can fail")
    parser.add_argument(
        "--ready", type=int, default=1, help="Ready claims of each pool (and one held)"
    )
    parser.add_argument("--burst", type=int, default=2, help="pods each pool gets in a burst")
    parser.add_argument("--boot-delay", type=float, default=2.5, help="VM boot and node Ready, s")
    add_control_plane_argument(parser)
    parser.add_argument("--empty-ttl", type=int, default=3)
    parser.add_argument("--wave-timeout", type=float, default=90.0)
    parser.add_argument("--settle-timeout", type=float, default=120.0)
    parser.add_argument("--keep-state", action="store_true", help="keep logs and the db")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.source is None and not args.self_test:
        parser.error("--from is required (a git ref, or a directory)")
    # A SIGTERM (a test's timeout) unwinds like an error: the worktrees are removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with Trees() as trees:
        old = trees.checkout(args.source or "HEAD", "old")
        if args.self_test:
            result = asyncio.run(self_test(old, trees, args))
        else:
            new = describe_tree(Path(args.to).resolve(), args.to, "new")
            if new.build_id == old.build_id:
                new.build_id += "-new"
            result = asyncio.run(drill(old, new, args))
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
