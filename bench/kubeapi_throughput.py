"""Rough figures for the Kubernetes API emulator: `python bench/kubeapi_throughput.py`.

Prints creates/s, list time and watch latency; asserts nothing (figures vary by machine).
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

from kubernetes import client, watch

from sim.kubeapi import KubeApiServer

N = 1000


def pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


def main() -> None:
    with KubeApiServer() as server, server.api_client() as api:
        core: Any = client.CoreV1Api(api)
        started = time.perf_counter()
        for i in range(N):
            core.create_namespaced_pod("default", pod(f"p{i}"))
        elapsed = time.perf_counter() - started
        print(f"create: {N} pods in {elapsed:.2f} s ({N / elapsed:.0f}/s)")

        started = time.perf_counter()
        items = core.list_namespaced_pod("default").items
        print(f"list: {len(items)} pods in {(time.perf_counter() - started) * 1000:.0f} ms (typed)")
        started = time.perf_counter()
        resp = core.list_namespaced_pod("default", _preload_content=False)
        resp.read()
        print(f"list: raw in {(time.perf_counter() - started) * 1000:.0f} ms")

        started = time.perf_counter()
        for i in range(N):
            core.patch_namespaced_pod(f"p{i}", "default", {"metadata": {"labels": {"n": str(i)}}})
        print(f"patch: {N} in {time.perf_counter() - started:.2f} s")

        latencies: list[float] = []
        sent: dict[str, float] = {}
        rv = core.list_namespaced_pod("default", limit=1).metadata.resource_version
        ready = threading.Event()

        def watcher() -> None:
            w = watch.Watch()
            ready.set()
            for ev in w.stream(
                core.list_namespaced_pod,
                "default",
                resource_version=rv,
                timeout_seconds=30,
                label_selector="lat=1",
            ):
                name = ev["object"].metadata.name
                if name in sent:
                    latencies.append(time.perf_counter() - sent[name])
                if len(latencies) == 100:
                    w.stop()

        t = threading.Thread(target=watcher)
        t.start()
        ready.wait()
        time.sleep(0.3)
        for i in range(100):
            sent[f"lat{i}"] = time.perf_counter()
            core.create_namespaced_pod(
                "default",
                {**pod(f"lat{i}"), "metadata": {"name": f"lat{i}", "labels": {"lat": "1"}}},
            )
            time.sleep(0.02)
        t.join()
        ms = sorted(x * 1000 for x in latencies)
        print(
            f"watch latency over {len(ms)} events: p50 {statistics.median(ms):.1f} ms, p99 {ms[int(len(ms) * 0.99) - 1]:.1f} ms"
        )


if __name__ == "__main__":
    main()
