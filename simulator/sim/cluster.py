"""The whole simulated cluster: a Kubernetes control plane, fake cloud, and machines that join.

`control_plane="kubernetes"` runs Kubernetes' own control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, built from their Go modules: sim/controlplane/), whose
machines join through bootstrap tokens and CSRs and are then kept by KWOK
(sim/controlplane/joining.py); `"emulator"` runs this package's API server emulator
(sim/kubeapi/) with its scheduler, controllers and kubelets, which needs no Go.

The product reaches it only over HTTP(S): `kube_url` (or `write_kubeconfig`) for the Kubernetes
API, `cloud_url` for the `fake` provider's NodeClass `spec.fake.endpoint`.

`clouds=["hetzner", "scaleway", ...]` also starts those clouds' local stand-ins
(`sim/clouds/<name>.py`, imported on first use) and lets the kubelets boot their VMs;
`standins[name]` gives each one's `endpoint`, the `credential` to put in a Secret and its
`nodeclass_block(secret_name, key)` ("fake" is always there). `tailscale=True` adds a
tailnet (`sim/tailscale.py`, its API over HTTP) that the kubelets join with the key in a VM's
user data. `endpoints()` is what an operator would allow as endpoint overrides
(`CLOUDBURST_ALLOWED_ENDPOINTS`): every stand-in's address.

The API server runs the PodNodeSelector and PodTolerationRestriction admission plugins, as
Cloudburst's docs ask of a cluster, unless `disable_admission_plugins` names them
(`admission_config`: their configuration; sim/kubeapi/pod_admission.py).

The cluster is one where Cloudburst is installed: its namespace (`cloudburst-system`, as
deploy/base/namespace.yaml makes it) exists, for the worker's first-boot script Secrets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sim.cloud import FakeCloud, FakeCloudServer
from sim.clouds import KNOWN_STANDINS, StandinMissingError, standin_module
from sim.clouds.base import standin_endpoint
from sim.controllers import Controllers
from sim.controlplane.cluster import KubernetesControlPlane
from sim.kubeapi import KubeApiServer
from sim.kubelet import Kubelets
from sim.scheduler import Scheduler
from sim.tailscale import TailnetStandin

log = logging.getLogger(__name__)

# What `kubectl apply -k deploy/...` creates before the worker runs (deploy/base/namespace.yaml).
INSTALL_NAMESPACES = ("cloudburst-system",)
ControlPlane = Literal["emulator", "kubernetes"]
CONTROL_PLANES: tuple[ControlPlane, ...] = ("emulator", "kubernetes")


@dataclass
class StandinHandle:
    """One cloud of the simulated cluster as the product is pointed at it."""

    name: str
    cloud: Any  # the stand-in object (FakeCloud for "fake"): inject_failure, stats, peek...
    _endpoint: Any  # str, or a callable giving it once started

    @property
    def endpoint(self) -> str:
        return str(self._endpoint() if callable(self._endpoint) else self._endpoint)

    @property
    def credential(self) -> str:
        """The ONE string the provider reads from its Secret."""
        value = getattr(self.cloud, "credential", None)
        if value is None:
            value = getattr(self.cloud, "token", None)
        return "" if value is None else str(value)

    def nodeclass_block(self, secret_name: str, secret_key: str) -> dict[str, Any]:
        """The camelCase NodeClass block reaching this cloud with the credential in that key."""
        if self.name == "fake":
            block: dict[str, Any] = {"endpoint": self.endpoint, "region": self.cloud.regions[0]}
            if self.cloud.token is not None:
                block["apiTokenSecretRef"] = {"name": secret_name, "key": secret_key}
            return block
        make = getattr(self.cloud, "nodeclass_block", None)
        if make is None:
            raise NotImplementedError(f"the {self.name} stand-in has no nodeclass_block()")
        return dict(make(secret_name, secret_key))


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
        clouds: list[str] | None = None,
        missing_standins: Literal["error", "skip"] = "error",
        tailscale: bool = False,
        disable_admission_plugins: Iterable[str] = (),
        admission_config: Mapping[str, Mapping[str, Any]] | None = None,
        control_plane: ControlPlane = "emulator",
    ) -> None:
        if control_plane not in CONTROL_PLANES:
            raise ValueError(f"control_plane must be one of {', '.join(CONTROL_PLANES)}")
        self.control_plane = control_plane
        self.kube: KubeApiServer | KubernetesControlPlane
        if control_plane == "kubernetes":
            if admission_config:
                raise ValueError(
                    "admission_config is the emulator's: Kubernetes' PodNodeSelector and "
                    "PodTolerationRestriction read their namespaces' annotations"
                )
            self.kube = KubernetesControlPlane(
                host=host,
                port=kube_port,
                disable_admission_plugins=disable_admission_plugins,
                install_namespaces=INSTALL_NAMESPACES,
            )
        else:
            self.kube = KubeApiServer(
                host=host,
                port=kube_port,
                disable_admission_plugins=disable_admission_plugins,
                admission_config=admission_config,
            )
        # On the real control plane every node address is a loopback one (tailnet's too).
        self.tailnet = (
            TailnetStandin(
                host=host, address_prefix="127.100" if control_plane == "kubernetes" else "100.64"
            )
            if tailscale
            else None
        )
        self.cloud = FakeCloud(
            regions=regions,
            boot_delay_s=boot_delay_s,
            delete_delay_s=delete_delay_s,
            token=cloud_token,
        )
        self.cloud_server = FakeCloudServer(self.cloud, host=host, port=cloud_port)
        self.ready_delay_s = ready_delay_s
        self.standins: dict[str, StandinHandle] = {
            "fake": StandinHandle("fake", self.cloud, lambda: self.cloud_server.url)
        }
        # Clouds asked for whose stand-in does not exist (yet), with why (missing="skip").
        self.missing_standins: dict[str, str] = {}
        for name in dict.fromkeys(clouds or []):
            if name == "fake":
                continue
            if name not in KNOWN_STANDINS:
                raise ValueError(
                    f"unknown cloud {name!r}: choose from fake, {', '.join(KNOWN_STANDINS)}"
                )
            try:
                module = standin_module(name)
            except (StandinMissingError, ImportError) as exc:
                # ImportError: the stand-in exists but a dependency of it (an SDK, moto) is
                # not installed here.
                if missing_standins == "error":
                    raise
                self.missing_standins[name] = (
                    str(exc)
                    if isinstance(exc, StandinMissingError)
                    else f"the {name} stand-in cannot be imported: {exc}"
                )
                log.error("skipping cloud %s: %s", name, self.missing_standins[name])
                continue
            obj = module.standin(boot_delay_s=boot_delay_s, host=host)
            self.standins[name] = StandinHandle(name, obj, lambda o=obj: standin_endpoint(o))
        self.scheduler: Scheduler | None = None
        self.kubelets: Kubelets | None = None
        self.controllers: Controllers | None = None
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

    def endpoints(self) -> dict[str, list[str]]:
        """Service -> the stand-in addresses (every path under them) a worker may call."""
        found = {
            # A stand-in called at several addresses (Redfish: the BMCs and the seed server)
            # lists them as `urls`.
            name: list(
                getattr(handle.cloud, "urls", None)
                or [str(getattr(handle.cloud, "url", None) or handle.endpoint)]
            )
            for name, handle in self.standins.items()
            if name != "fake"
        }
        found["fake"] = [self.cloud_url]
        if self.tailnet is not None:
            found["tailscale"] = [self.tailnet.url]
        return found

    def start(self) -> SimulatedCluster:
        if self._started:
            return self
        self.kube.start()
        if isinstance(self.kube, KubeApiServer):
            for namespace in INSTALL_NAMESPACES:
                self.kube.ensure_namespace(namespace)
        self.cloud_server.start()
        if self.tailnet is not None:
            self.tailnet.start()
        for name, handle in self.standins.items():
            if name != "fake":
                handle.cloud.start()
        clouds = [self.cloud, *(h.cloud for n, h in self.standins.items() if n != "fake")]
        if isinstance(self.kube, KubernetesControlPlane):
            from sim.controlplane.joining import JoiningKubelets

            kubelet_client = self.kube.api_client()
            self._api_clients = [kubelet_client]
            self.kubelets = JoiningKubelets(
                kubelet_client,
                clouds,
                ready_delay_s=self.ready_delay_s,
                tailnet=self.tailnet,
                api_server=self.kube.url.removeprefix("https://"),
                work_dir=self.kube.work_dir / "machines",
            )
            self.kubelets.start()
            self._started = True
            return self
        # Each loop gets its own ApiClient (its own connection pool).
        sched_client, kubelet_client = self.kube.api_client(), self.kube.api_client()
        controllers_client = self.kube.api_client()
        self._api_clients = [sched_client, kubelet_client, controllers_client]
        self.scheduler = Scheduler(sched_client, min_pass_interval_s=0.05, store=self.kube.store)
        self.kubelets = Kubelets(
            kubelet_client,
            clouds,
            ready_delay_s=self.ready_delay_s,
            tailnet=self.tailnet,
        )
        self.controllers = Controllers(controllers_client)
        self.scheduler.start()
        self.kubelets.start()
        self.controllers.start()
        self._started = True
        return self

    def stop(self) -> None:
        if not self._started:
            return
        if self.kubelets is not None:
            self.kubelets.stop()
        if self.scheduler is not None:
            self.scheduler.stop()
        if self.controllers is not None:
            self.controllers.stop()
        for name, handle in self.standins.items():
            if name != "fake":
                try:
                    handle.cloud.stop()
                except Exception:
                    log.exception("stopping the %s stand-in failed", name)
        self.cloud_server.stop()
        if self.tailnet is not None:
            self.tailnet.stop()
        self.kube.stop()
        for api_client in self._api_clients:
            api_client.close()
        self._started = False

    def __enter__(self) -> SimulatedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
