"""What a replay of a pool's run costs: the worker's work when it takes a pool over.

    .venv/bin/python bench/replay.py [HISTORY ...] [--repeat 3] [--json]

A worker that did not have the pool cached (another worker died, the pool was evicted, or
Temporal refused a task because a signal came in as it closed a run) replays the run's
whole history before it decides anything new. That replay has to fit in the pool's
workflow task timeout (`CLOUDBURST_POOL_TASK_TIMEOUT_S`), beside whatever else the worker
is doing. Default histories: the pools of the committed replay corpus
(`tests/replay/histories/nodepool-*`), the largest a chaos soak's pool. Each is
replayed `--repeat` times with today's workflow code, in this process, one at a time;
prints the median wall and CPU seconds per replay and per workflow task. Asserts nothing
(exits 1 only if a history no longer replays).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from worker.main import workflow_runner
from worker.payload_codec import DATA_CONVERTER
from workflows.registry import WORKFLOWS

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "replay" / "histories"


@dataclass
class Replayed:
    history: str
    events: int
    workflow_tasks: int
    signals: int
    wall_s: float  # median of the repeats
    cpu_s: float
    ms_per_task: float
    failure: str | None


def load(path: Path) -> WorkflowHistory:
    raw = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    return WorkflowHistory.from_json(path.name, raw)


def _count(history: WorkflowHistory, kind: EventType.ValueType) -> int:
    return sum(1 for event in history.events if event.event_type == kind)


async def replay(path: Path, repeat: int) -> Replayed:
    history = load(path)
    replayer = Replayer(
        workflows=WORKFLOWS,
        data_converter=DATA_CONVERTER,
        workflow_runner=workflow_runner(DATA_CONVERTER),  # as the workers run them
    )
    walls, cpus = [], []
    failure = None
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        if result.replay_failure is not None:
            failure = str(result.replay_failure)
    tasks = _count(history, EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
    wall_s = statistics.median(walls)
    return Replayed(
        history=path.name,
        events=len(history.events),
        workflow_tasks=tasks,
        signals=_count(history, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED),
        wall_s=round(wall_s, 3),
        cpu_s=round(statistics.median(cpus), 3),
        ms_per_task=round(wall_s / max(tasks, 1) * 1000, 2),
        failure=failure,
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("histories", nargs="*", type=Path, help="history JSON (.json or .gz)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> list[Replayed]:
    paths = args.histories or sorted(
        [*CORPUS.glob("nodepool-*.json"), *CORPUS.glob("nodepool-*.json.gz")]
    )
    return [await replay(path, args.repeat) for path in paths]


def main() -> None:
    args = parse_args()
    results = asyncio.run(run(args))
    if args.json:
        print(json.dumps({"repeat": args.repeat, "replays": [asdict(r) for r in results]}))
    else:
        print(
            f"{'history':48} {'events':>7} {'tasks':>6} {'wall s':>7} {'cpu s':>6} {'ms/task':>8}"
        )
        for r in results:
            print(
                f"{r.history:48} {r.events:7d} {r.workflow_tasks:6d} {r.wall_s:7.3f} "
                f"{r.cpu_s:6.3f} {r.ms_per_task:8.2f}"
                + (f"  FAILED: {r.failure}" if r.failure else "")
            )
    sys.stdout.flush()
    sys.stderr.flush()
    # Not sys.exit: the SDK core's threads may still call into Python while the interpreter
    # finalizes after a replay failure ("Fatal Python error: PyGILState_Release ... runtime
    # state: finalizing", SIGABRT under load), which would turn the bench's verdict into a crash.
    os._exit(1 if any(r.failure for r in results) else 0)


if __name__ == "__main__":
    main()
