"""The whole simulated cluster: Kubernetes API emulator, fake cloud, scheduler and kubelets.

The product reaches it only over HTTP: `kube_url` (or `write_kubeconfig`) for the Kubernetes
API, `cloud_url` for the `fake` provider's NodeClass `spec.fake.endpoint`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim.cloud import FakeCloud, FakeCloudServer
from sim.kubeapi import KubeApiServer
from sim.kubelet import Kubelets
from sim.scheduler import Scheduler


class SimulatedCluster:
    """Start with `.start()` (or `with SimulatedCluster() as sim:`); `.stop()` ends it all."""

    def __init__(
        self,
        boot_delay_s: float = 1.0,
        ready_delay_s: float = 1.0,
        cloud_token: str | None = None,
        kube_port: int = 0,
        cloud_port: int = 0,
        *,
        host: str = "127.0.0.1",
        delete_delay_s: float = 0.2,
        regions: list[str] | None = None,
    ) -> None:
        self.kube = KubeApiServer(host=host, port=kube_port)
        self.cloud = FakeCloud(
            regions=regions,
            boot_delay_s=boot_delay_s,
            delete_delay_s=delete_delay_s,
            token=cloud_token,
        )
        self.cloud_server = FakeCloudServer(self.cloud, host=host, port=cloud_port)
        self.ready_delay_s = ready_delay_s
        self.scheduler: Scheduler | None = None
        self.kubelets: Kubelets | None = None
        self._api_clients: list[Any] = []
        self._started = False

    @property
    def kube_url(self) -> str:
        return self.kube.url

    @property
    def cloud_url(self) -> str:
        return self.cloud_server.url

    def write_kubeconfig(self, path: str | Path) -> Path:
        return self.kube.write_kubeconfig(path)

    def start(self) -> SimulatedCluster:
        if self._started:
            return self
        self.kube.start()
        self.cloud_server.start()
        # Each loop gets its own ApiClient (its own connection pool).
        sched_client, kubelet_client = self.kube.api_client(), self.kube.api_client()
        self._api_clients = [sched_client, kubelet_client]
        self.scheduler = Scheduler(sched_client)
        self.kubelets = Kubelets(kubelet_client, self.cloud, ready_delay_s=self.ready_delay_s)
        self.scheduler.start()
        self.kubelets.start()
        self._started = True
        return self

    def stop(self) -> None:
        if not self._started:
            return
        if self.kubelets is not None:
            self.kubelets.stop()
        if self.scheduler is not None:
            self.scheduler.stop()
        self.cloud_server.stop()
        self.kube.stop()
        for api_client in self._api_clients:
            api_client.close()
        self._started = False

    def __enter__(self) -> SimulatedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
