"""`cloudburst plan -f` on a 50-pod file: how long an operator waits, and where the time goes.

    .venv/bin/python bench/plan_command.py [--runs 7] [--pods 50] [--json]
        [--kubeconfig PATH]

Runs the command as a user does (a fresh process each time, shipped catalog, no cluster: the
file carries its NodePool and NodeClass for a Hetzner+Scaleway pool), and inside one process
the planning alone (`explain.plan.compare`: the plan, the cheapest one-type plan, the LP bound)
on the same pods. Prints the median and the spread (min..max) of each: the wall time and the
CPU time (user + system) of the process, which another load on the machine changes less, and
the process's start (importing the plan command) for comparison. With --kubeconfig (e.g. that
of `cloudburst dev`) it also runs the command against that cluster, on the same
pods without the file's NodePool and NodeClass: the cluster's pools take them. Asserts
nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

POOL: dict[str, object] = {
    "apiVersion": "cloudburst.io/v1alpha1",
    "kind": "NodePool",
    "metadata": {"name": "bench", "namespace": "default"},
    "spec": {
        "nodeClassRef": "bench",
        "requirements": {"allowedProviders": ["hetzner", "scaleway"]},
    },
}
CLASS: dict[str, object] = {
    "apiVersion": "cloudburst.io/v1alpha1",
    "kind": "NodeClass",
    "metadata": {"name": "bench", "namespace": "default"},
    "spec": {
        "hetzner": {"location": "fsn1", "apiTokenSecretRef": {"name": "h", "key": "token"}},
        "scaleway": {
            "zone": "fr-par-1",
            "apiKeySecretRef": {"name": "s", "key": "key"},
            "projectID": "00000000-0000-0000-0000-000000000000",
        },
        "join": {"hostApiServer": "https://10.0.0.1:6443"},
    },
}


def workload(pods: int) -> list[dict[str, object]]:
    """Three Deployments of different sizes, `pods` replicas in all."""
    shapes = [("web", "500m", "512Mi"), ("api", "1", "2Gi"), ("batch", "2", "4Gi")]
    docs: list[dict[str, object]] = [POOL, CLASS]
    for i, (name, cpu, memory) in enumerate(shapes):
        replicas = pods // len(shapes) + (1 if i < pods % len(shapes) else 0)
        docs.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "c",
                                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                                }
                            ]
                        }
                    },
                },
            }
        )
    return docs


def spread(values: list[float]) -> dict[str, float]:
    return {
        "median_s": round(statistics.median(values), 3),
        "min_s": round(min(values), 3),
        "max_s": round(max(values), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--pods", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--kubeconfig", help="also run against this cluster (cloudburst dev's)")
    args = parser.parse_args()
    cli = str(Path(sys.executable).parent / "cloudburst")
    env = {**os.environ, "KUBECONFIG": "/nonexistent"}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pods.yaml"
        path.write_text(yaml.safe_dump_all(workload(args.pods)))
        walls, cpus, starts, output = [], [], [], ""
        for _ in range(args.runs):
            wall, cpu, output = _run([cli, "plan", "-f", str(path), "-o", "json"], env)
            walls.append(wall)
            cpus.append(cpu)
            start, _, _ = _run([sys.executable, "-c", "import cli.main, cli.commands.plan"], env)
            starts.append(start)
        answer = json.loads(output)
        planning = _planning_alone(path, args.runs)
        cluster: dict[str, object] = {}
        if args.kubeconfig:
            pods = Path(tmp) / "pods-only.yaml"
            pods.write_text(yaml.safe_dump_all(workload(args.pods)[2:]))
            env = {**os.environ, "KUBECONFIG": args.kubeconfig}
            runs = [
                _run([cli, "plan", "-f", str(pods), "-o", "json"], env) for _ in range(args.runs)
            ]
            found = json.loads(runs[-1][2])
            cluster = {
                "cluster_pool": found["pool"],
                "cluster_nodes": len(found["nodes"]),
                "cluster_command_wall": spread([wall for wall, _, _ in runs]),
                "cluster_command_cpu": spread([cpu for _, cpu, _ in runs]),
            }
    report = {
        "pods": args.pods,
        "runs": args.runs,
        "nodes": len(answer["nodes"]),
        "cost_eur_per_hour": answer["cost_eur_per_hour"],
        "single_type_eur_per_hour": (answer.get("single_type") or {}).get("cost_eur_per_hour"),
        "lower_bound_eur_per_hour": answer["lower_bound_eur_per_hour"],
        "command_wall": spread(walls),
        "command_cpu": spread(cpus),
        "process_start_wall": spread(starts),
        "planning_alone": spread(planning),
        **cluster,
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for key, value in report.items():
        print(f"{key:>26}: {value}")


def _run(command: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the process, its stdout); exits where it failed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begin = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - begin
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{Path(command[0]).name} {command[1]} failed: {done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def _planning_alone(path: Path, runs: int) -> list[float]:
    """`compare` on the file's pods, in this process: what the command computes."""
    from api import NodeClass, NodePool
    from api.planning import PlanRequest, Resources
    from explain.plan import compare, expand
    from planner.catalog import Catalog
    from planner.node_size import kube_reserved
    from planner.recommend import CatalogRecommender

    found = expand(yaml.safe_load_all(path.read_text()))
    pool = NodePool.model_validate(found.pools[0]).spec
    node_class = NodeClass.model_validate(found.classes[0]).spec
    request = PlanRequest(
        pool_name="bench",
        pool=pool,
        class_providers=node_class.configured_providers(),
        node_class=node_class,
        pods=found.pods,
    )
    smallest = Resources(
        cpu_m=min(p.requests.cpu_m for p in found.pods),
        memory_bytes=min(p.requests.memory_bytes for p in found.pods),
    )
    offerings = CatalogRecommender(Catalog.load()).recommend(
        smallest, pool.requirements, request.class_providers, 500
    )
    times = []
    for _ in range(runs):
        begin = time.perf_counter()
        compare(request, offerings, kube_reserved, pool="bench", prices="", limits="")
        times.append(time.perf_counter() - begin)
    return times


if __name__ == "__main__":
    main()
