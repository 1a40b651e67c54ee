"""The whole simulated cluster: Kubernetes' control plane, fake cloud, and machines that join.

The control plane is Kubernetes' own (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, built from their Go modules: sim/controlplane/), whose machines join through
bootstrap tokens and CSRs and are then kept by KWOK (sim/controlplane/joining.py).

The product reaches it only over HTTP(S): `kube_url` (or `write_kubeconfig`) for the Kubernetes
API, `cloud_url` for the `fake` provider's NodeClass `spec.fake.endpoint`.

`clouds=["hetzner", "scaleway", ...]` also starts those clouds' local stand-ins
(`sim/clouds/<name>.py`, imported on first use) and lets the kubelets boot their VMs;
`standins[name]` gives each one's `endpoint`, the `credential` to put in a Secret and its
`nodeclass_block(secret_name, key)` ("fake" is always there). `tailscale=True` adds a
tailnet (`sim/tailscale.py`, its API over HTTP) that the kubelets join with the key in a VM's
user data. `endpoints()` is what an operator would allow as endpoint overrides
(`CLOUDBURST_ALLOWED_ENDPOINTS`): every stand-in's address.

The API server runs the NodeRestriction, PodNodeSelector and PodTolerationRestriction
admission plugins, as Cloudburst's docs ask of a cluster, unless `disable_admission_plugins`
names them (the last two read their namespaces' annotations).

The cluster is one where Cloudburst is installed: its namespace (`cloudburst-system`, as
deploy/base/namespace.yaml makes it) exists, for the worker's first-boot script Secrets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from approver.main import running
from approver.nodes import NodeGuard
from sim.cloud import FakeCloud, FakeCloudServer
from sim.clouds import KNOWN_STANDINS, StandinMissingError, standin_module
from sim.clouds.base import standin_endpoint
from sim.controlplane.cluster import KubernetesControlPlane
from sim.controlplane.joining import JoiningKubelets
from sim.tailscale import TailnetStandin

log = logging.getLogger(__name__)
# How often the node guard looks at every Node again, besides watching them.
NODE_GUARD_RESYNC_S = 2.0

# What `kubectl apply -k deploy/...` creates before the worker runs (deploy/base/namespace.yaml).
INSTALL_NAMESPACES = ("cloudburst-system",)
# The one control plane there is (the simulator's own emulator of Kubernetes was removed once
# Kubernetes' own ran every test); the option stays for the commands that take it.
ControlPlane = Literal["kubernetes"]
CONTROL_PLANES: tuple[ControlPlane, ...] = ("kubernetes",)


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
        control_plane: ControlPlane = "kubernetes",
    ) -> None:
        if control_plane not in CONTROL_PLANES:
            raise ValueError(f"control_plane must be one of {', '.join(CONTROL_PLANES)}")
        self.control_plane = control_plane
        self.kube = KubernetesControlPlane(
            host=host,
            port=kube_port,
            disable_admission_plugins=disable_admission_plugins,
            install_namespaces=INSTALL_NAMESPACES,
        )
        # Every node address is a loopback one, the tailnet's too.
        self.tailnet = TailnetStandin(host=host, address_prefix="127.100") if tailscale else None
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
        self.kubelets: JoiningKubelets | None = None
        self._node_guard: Any = None
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
        self.cloud_server.start()
        if self.tailnet is not None:
            self.tailnet.start()
        for name, handle in self.standins.items():
            if name != "fake":
                handle.cloud.start()
        clouds = [self.cloud, *(h.cloud for n, h in self.standins.items() if n != "fake")]
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
        # The rest of `cloudburst csr-approver` (the control plane runs its CSR loop): the
        # Nodes of ended claims forgotten, other namespaces' pods evicted from tenant nodes.
        self._node_guard = running(
            [NodeGuard(self.kube.approver_api_client, resync_s=NODE_GUARD_RESYNC_S)],
            stop_within_s=NODE_GUARD_RESYNC_S + 2,
        )
        self._node_guard.__enter__()
        self._started = True
        return self

    def stop(self) -> None:
        if not self._started:
            return
        if self._node_guard is not None:
            self._node_guard.__exit__(None, None, None)
            self._node_guard = None
        if self.kubelets is not None:
            self.kubelets.stop()
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
