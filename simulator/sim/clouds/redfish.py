"""Bare metal for the simulated cluster: sushy-tools' own Redfish emulator, and a bridge that
turns its powered-on machines into VMs the simulated kubelets boot.

No Redfish stand-in of ours: `sushy-emulator` (the `sushy-tools` distribution, OpenStack's
Redfish emulator) runs as a subprocess on a free port with its fake driver
(`SUSHY_EMULATOR_FAKE_DRIVER = True`), one fake system per machine of the inventory
(`SUSHY_EMULATOR_FAKE_SYSTEMS`), HTTP basic auth from a bcrypt htpasswd file
(`SUSHY_EMULATOR_AUTH_FILE`, read on every request) and its state in a directory of its own
(`SUSHY_EMULATOR_STATE_DIR`). The provider talks to it with sushy, as to a real BMC.

Beside it, `SeedServer` is what the operator's netboot setup would serve: the cloud-init
holding record of each machine, `PUT`/`GET`/`DELETE /seed/<machine>/meta-data`,
`If-None-Match: *` honoured (412 when the file exists), and each claim's first-boot script as
a one-time seed at its per-claim address (answered once; docs/providers.md, "The seed
server"). The provider writes a machine's seed before powering it on; a real machine
PXE-boots with `ds=nocloud;s=<seedUrl>/<machine>/<key>/` and cloud-init runs the `user-data`;
here the bridge fetches it, once, over HTTP as cloud-init would.

The bridge is the `BootableCloud` of the kubelets: it polls the emulator's systems (at most
once every `poll_s`; the fake driver applies a power change 1-11 s after the request, and only
when the system is next read, so the polling is also what lands it, and why the emulator's
`EXTERNAL_NOTIFICATION_URL`, sent only then, cannot replace it), and reports each machine
that has a one-time seed: powered on for `boot_delay_s` → "running" (its `user-data`, fetched
once, is what `peek` hands the kubelet), on for less → "pending", off → "terminated". A
machine whose seed is removed is no longer listed, so its node is lost as a deleted VM's is.

Failure injection (`inject_failure(op, kind)`, op `create`): `unavailable` and `throttle`
make the seed server's next PUTs answer 503 and 429; `auth` changes the BMC password in the
emulator's htpasswd file; `capacity` and `quota` record every free machine as another
cluster's. `clear_failures` undoes them all.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt
import httpx
import yaml

from sim.clouds.base import Failures, Request, Response, StandinHTTPServer, private_ip

PROVIDER = "redfish"
SITE = "on-prem"
USER = "cloudburst"
START_TIMEOUT_S = 60.0
# (name prefix, count, cpu, memory GiB) of the default inventory.
INVENTORY = (("metal", 4, 16, 64), ("bigmetal", 2, 32, 128))
SEED_PATH = "/seed"


@dataclass(frozen=True)
class Machine:
    name: str
    uuid: str
    cpu: int
    memory_gib: int

    @property
    def shape(self) -> str:
        """The shape name the provider gives this size (`metal-<cpu>c<memory>g`)."""
        return f"metal-{self.cpu}c{self.memory_gib}g"


def inventory(spec: tuple[tuple[str, int, int, int], ...] = INVENTORY) -> list[Machine]:
    return [
        Machine(f"{prefix}-{i:02d}", str(uuid.uuid4()), cpu, memory)
        for prefix, count, cpu, memory in spec
        for i in range(1, count + 1)
    ]


class SeedServer:
    """The NoCloud seeds of the machines, as the operator's netboot server keeps them under the
    contract of docs/providers.md ("The seed server"):

    - `<machine>/meta-data`: the holding record (PUT with `If-None-Match: *`, GET, DELETE);
    - `<machine>/<key>/{meta-data,user-data}`: the machine's one-time seed at its per-claim
      address (PUT; a PUT under another key replaces the machine's seed). `user-data` is
      answered once and forgotten as it is answered;
    - `DELETE <machine>/seed`: the machine's one-time seed, whatever its key.

    No other address holds a script: `GET <machine>/user-data` is 404. What the netboot side
    hands the machine is `boot_address(machine)`, the seed's base address.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._lock = threading.Lock()
        self.files: dict[tuple[str, str], bytes] = {}
        # machine -> (key, {"meta-data"|"user-data": bytes}): the one-time seeds.
        self.seeds: dict[str, tuple[str, dict[str, bytes]]] = {}
        # machine -> the last script written for it (what the tests compare; never served).
        self.scripts: dict[str, bytes] = {}
        self.failures = Failures(("create",), ("unavailable", "throttle"))
        self.claims_by_name: Counter[str] = Counter()
        self._http = StandinHTTPServer(self._route, host=host, port=port, name="seed-server")

    @property
    def url(self) -> str:
        return f"{self._http.url}{SEED_PATH}"

    def start(self) -> None:
        self._http.start()

    def stop(self) -> None:
        self._http.stop()

    def read(self, machine: str, name: str) -> bytes | None:
        with self._lock:
            return self.files.get((machine, name))

    def write(self, machine: str, name: str, data: bytes) -> None:
        with self._lock:
            self.files[(machine, name)] = data

    def remove(self, machine: str, name: str) -> None:
        with self._lock:
            self.files.pop((machine, name), None)

    def seeded(self, machine: str) -> bool:
        """Whether the machine has a one-time seed (fetched or not) to boot into a cluster."""
        with self._lock:
            return machine in self.seeds

    def boot_address(self, machine: str) -> str | None:
        """What the netboot side hands the machine: `ds=nocloud;s=<this>/`."""
        with self._lock:
            seed = self.seeds.get(machine)
        return f"{self.url}/{machine}/{seed[0]}" if seed else None

    def script_of(self, machine: str) -> bytes | None:
        with self._lock:
            return self.scripts.get(machine)

    def _route(self, request: Request) -> Response:
        parts = request.path.removeprefix(SEED_PATH).strip("/").split("/")
        if not request.path.startswith(SEED_PATH + "/") or len(parts) not in (2, 3):
            return _not_found()
        with self._lock:
            if len(parts) == 3:
                return self._one_time_seed(request, parts[0], parts[1], parts[2])
            machine, name = parts
            if name == "seed":
                if request.method != "DELETE":
                    return Response(405, "method not allowed", content_type="text/plain")
                if self.seeds.pop(machine, None) is None:
                    return _not_found()
                return Response(204)
            if name == "user-data":
                return _not_found()  # the script is only ever at its one-time address
            key = (machine, name)
            if request.method == "GET":
                data = self.files.get(key)
                if data is None:
                    return _not_found()
                return Response(200, data, content_type="text/plain")
            if request.method == "PUT":
                refused = self._injected()
                if refused is not None:
                    return refused
                if request.headers.get("if-none-match") == "*" and key in self.files:
                    return Response(412, "exists", content_type="text/plain")
                self.files[key] = request.body
                claim = _meta_data(request.body).get("cloudburst.io/nodeclaim")
                if claim and name == "meta-data":
                    self.claims_by_name[claim] += 1
                return Response(201)
            if request.method == "DELETE":
                if self.files.pop(key, None) is None:
                    return _not_found()
                return Response(204)
        return Response(405, "method not allowed", content_type="text/plain")

    def _one_time_seed(self, request: Request, machine: str, key: str, name: str) -> Response:
        if name not in ("meta-data", "user-data"):
            return _not_found()
        held = self.seeds.get(machine)
        if request.method == "PUT":
            refused = self._injected()
            if refused is not None:
                return refused
            if held is None or held[0] != key:
                held = self.seeds[machine] = (key, {})
            held[1][name] = request.body
            if name == "user-data":
                self.scripts[machine] = request.body
            return Response(201)
        if request.method == "GET":
            if held is None or held[0] != key or name not in held[1]:
                return _not_found()
            if name == "user-data":
                return Response(200, held[1].pop(name), content_type="text/plain")  # once
            return Response(200, held[1][name], content_type="text/plain")
        return Response(405, "method not allowed", content_type="text/plain")

    def _injected(self) -> Response | None:
        kind = self.failures.take("create")
        if kind == "unavailable":
            return Response(503, "unavailable (injected)", content_type="text/plain")
        if kind == "throttle":
            return Response(
                429, "too many requests (injected)", {"Retry-After": "1"}, content_type="text/plain"
            )
        return None


def _not_found() -> Response:
    return Response(404, "not found", content_type="text/plain")


class RedfishBridge:
    """sushy-emulator + the seed server + the kubelets' view of the machines."""

    provider = PROVIDER

    def __init__(
        self,
        *,
        machines: list[Machine] | None = None,
        boot_delay_s: float = 1.0,
        poll_s: float = 0.5,
        host: str = "127.0.0.1",
    ) -> None:
        self.machines = machines if machines is not None else inventory()
        self.by_name = {m.name: m for m in self.machines}
        self.boot_delay_s = boot_delay_s
        self.poll_s = poll_s
        self.host = host
        self.region = SITE
        self.instance_type = self.machines[0].shape
        self.password = uuid.uuid4().hex
        self.seed = SeedServer(host=host)
        self._dir = Path(tempfile.mkdtemp(prefix="redfish-bridge-"))
        self._port = _free_port(host)
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._power: dict[str, str] = {}
        self._on_since: dict[str, float] = {}
        self._polled = 0.0
        self._occupied: list[str] = []
        self._scripts: dict[str, bytes] = {}  # one-time seed address -> what the machine read
        self._numbers = {m.name: n for n, m in enumerate(self.machines, start=1)}
        self._write_config()

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The emulator's address (every machine's BMC)."""
        return f"http://{self.host}:{self._port}"

    @property
    def endpoint(self) -> str:
        return f"{self.url}/redfish/v1"

    @property
    def urls(self) -> list[str]:
        """Every address the provider calls: the BMCs' and the seed server's."""
        return [self.url, self.seed.url]

    @property
    def credential(self) -> str:
        return f"{USER}:{self.password}"

    def start(self) -> RedfishBridge:
        if self._process is not None:
            return self
        self.seed.start()
        log = (self._dir / "emulator.log").open("wb")
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sushy_tools.emulator.main",
                "--config",
                str(self._dir / "emulator.conf"),
                "--interface",
                self.host,
                "--port",
                str(self._port),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self._process.poll() is not None:
                tail = (self._dir / "emulator.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"sushy-emulator exited: {tail}")
            try:
                if httpx.get(f"{self.endpoint}/", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"sushy-emulator did not answer within {START_TIMEOUT_S:g}s")
            time.sleep(0.2)

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
            self._process = None
        self.seed.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> RedfishBridge:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def nodeclass_block(self, secret_name: str, secret_key: str) -> dict[str, Any]:
        return {
            "site": SITE,
            "seedUrl": self.seed.url,
            "machines": [
                {
                    "name": m.name,
                    "bmc": self.endpoint,
                    "systemId": m.uuid,
                    "credentialsSecretRef": {"name": secret_name, "key": secret_key},
                    # sushy-tools' fake driver reports no CPU or memory counts.
                    "cpu": m.cpu,
                    "memoryGiB": m.memory_gib,
                }
                for m in self.machines
            ],
        }

    def _write_config(self, password: str | None = None) -> None:
        digest = bcrypt.hashpw((password or self.password).encode(), bcrypt.gensalt(rounds=4))
        (self._dir / "htpasswd").write_text(f"{USER}:{digest.decode()}\n")
        systems = [
            {
                "uuid": m.uuid,
                "name": m.name,
                "power_state": "Off",
                "nics": [{"mac": _mac(n), "ip": private_ip(n, 172)}],
            }
            for n, m in enumerate(self.machines, start=1)
        ]
        state = self._dir / "state"
        config = (
            "SUSHY_EMULATOR_FAKE_DRIVER = True\n"
            f"SUSHY_EMULATOR_FAKE_SYSTEMS = {systems!r}\n"
            f"SUSHY_EMULATOR_AUTH_FILE = {str(self._dir / 'htpasswd')!r}\n"
            f"SUSHY_EMULATOR_STATE_DIR = {str(state)!r}\n"
        )
        (self._dir / "emulator.conf").write_text(config)

    # ---- failure injection -----------------------------------------------------------------

    def inject_failure(self, op: str, kind: str, times: int | None = 1) -> None:
        if op != "create":
            raise ValueError(f"op must be 'create', not {op!r}")
        if kind in ("unavailable", "throttle"):
            self.seed.failures.inject("create", kind, times)
        elif kind == "auth":
            self._write_config(password=uuid.uuid4().hex)  # the BMC's password changed
        elif kind in ("capacity", "quota"):
            for m in self.machines:
                if self.seed.read(m.name, "meta-data") is None:
                    self.seed.write(
                        m.name,
                        "meta-data",
                        b'cloudburst.io/cluster: "another-cluster"\n'
                        b'cloudburst.io/nodeclaim: "someone-else"\n',
                    )
                    self._occupied.append(m.name)
        else:
            raise ValueError(f"unknown failure kind {kind!r}")

    def clear_failures(self) -> None:
        self.seed.failures.clear()
        self._write_config()
        for name in self._occupied:
            self.seed.remove(name, "meta-data")
        self._occupied.clear()

    # ---- BootableCloud ---------------------------------------------------------------------

    def _poll(self) -> dict[str, str]:
        """The power state of each machine that has a seed (the others boot nothing into
        the cluster), read from the emulator at most every `poll_s`."""
        with self._lock:
            now = time.monotonic()
            if now - self._polled < self.poll_s:
                return dict(self._power)
            self._polled = now
        power: dict[str, str] = {}
        login = base64.b64encode(f"{USER}:{self.password}".encode()).decode()
        for m in self.machines:
            if not self.seed.seeded(m.name):
                continue
            request = urllib.request.Request(
                f"{self.endpoint}/Systems/{m.uuid}", headers={"Authorization": f"Basic {login}"}
            )
            # urllib, not httpx: a read every `poll_s` would flood the dev stack's log.
            try:
                with urllib.request.urlopen(request, timeout=5) as answer:
                    power[m.name] = str(json.load(answer).get("PowerState") or "")
            except (OSError, ValueError):
                power[m.name] = self._power.get(m.name, "")
        with self._lock:
            for name, state in power.items():
                if state == "On":
                    self._on_since.setdefault(name, now)
                else:
                    self._on_since.pop(name, None)
            self._power = power
            return dict(power)

    def instance_states(self) -> dict[str, str]:
        power = self._poll()
        now = time.monotonic()
        states: dict[str, str] = {}
        for m in self.machines:
            if not self.seed.seeded(m.name):
                continue  # nothing to boot into the cluster
            if power.get(m.name) == "On":
                since = self._on_since.get(m.name, now)
                states[m.name] = "running" if now - since >= self.boot_delay_s else "pending"
            else:
                states[m.name] = "terminated"
        return states

    def peek(self, native_id: str) -> dict[str, Any] | None:
        machine = self.by_name.get(native_id)
        if machine is None:
            return None
        user_data = self._first_boot_script(native_id)
        meta = _meta_data(self.seed.read(native_id, "meta-data") or b"")
        return {
            "id": native_id,
            "name": meta.get("local-hostname", ""),
            "region": SITE,
            "instance_type": meta.get("cloudburst.io/instance-type", machine.shape),
            "user_data": user_data.decode(),
            "private_ip": private_ip(self._numbers[native_id], 172),
            "labels": {k: v for k, v in meta.items() if k.startswith("cloudburst.io/")},
            "power": self._power.get(native_id, ""),
            "image": "netboot",
        }

    def _first_boot_script(self, machine: str) -> bytes:
        """What the machine's cloud-init fetched at its first boot: the one-time seed's
        `user-data`, read over HTTP at the address the netboot side hands it, once per seed
        (empty when someone else read it first: the machine does not join)."""
        address = self.seed.boot_address(machine)
        if address is None:
            return b""
        with self._lock:
            fetched = self._scripts.get(address)
        if fetched is None:
            answer = httpx.get(f"{address}/user-data", timeout=5)
            fetched = answer.content if answer.status_code == 200 else b""
            with self._lock:
                fetched = self._scripts.setdefault(address, fetched)
        return fetched

    def instance_shape(self, instance_type: str) -> tuple[float, float, str] | None:
        for m in self.machines:
            if m.shape == instance_type:
                return float(m.cpu), float(m.memory_gib), "x86_64"
        return None

    def power_state(self, machine: str) -> str:
        """Read now, from the emulator (tests)."""
        uuid_ = self.by_name[machine].uuid
        answer = httpx.get(f"{self.endpoint}/Systems/{uuid_}", auth=(USER, self.password))
        return str(answer.json().get("PowerState") or "")

    def stats(self) -> dict[str, Any]:
        held = [m.name for m in self.machines if self.seed.read(m.name, "meta-data") is not None]
        return {
            "created_by_name": dict(self.seed.claims_by_name),
            "instances_created": sum(self.seed.claims_by_name.values()),
            "live_instances": len(held),
            "power": dict(self._power),
            "failures": self.seed.failures.pending(),
        }


def _meta_data(data: bytes) -> dict[str, str]:
    try:
        doc = yaml.safe_load(data.decode(errors="replace"))
    except yaml.YAMLError:
        return {}
    return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}


def _mac(n: int) -> str:
    return "52:54:00:" + ":".join(f"{b:02x}" for b in n.to_bytes(3, "big"))


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def standin(*, boot_delay_s: float = 1.0, host: str = "127.0.0.1") -> RedfishBridge:
    """The factory `sim.cluster.SimulatedCluster(clouds=[...])` and `cloudburst dev` use."""
    return RedfishBridge(boot_delay_s=boot_delay_s, host=host)


__all__ = ["INVENTORY", "Machine", "RedfishBridge", "SeedServer", "inventory", "standin"]


class WipeImage:
    """What the operator's wipe image does on a machine that boots it (docs/security.md,
    "Bare metal between tenants"), played against the emulator: a machine powered on
    with `image_url` in its virtual CD runs the wipe for `wipe_s`, then powers itself off —
    the report the worker waits for. The fake driver has no disks to wipe (its systems have
    no storage), so `wiped` counts the runs; what a real image erases is not shown here.

    Runs while its `with` block does, looking every `poll_s` (each read also lands the fake
    driver's pending power changes)."""

    def __init__(
        self, bridge: RedfishBridge, image_url: str, wipe_s: float = 1.0, poll_s: float = 0.2
    ) -> None:
        self.bridge = bridge
        self.image_url = image_url
        self.wipe_s = wipe_s
        self.poll_s = poll_s
        self.wiped: Counter[str] = Counter()
        self._running_since: dict[str, float] = {}
        self._powering_off: set[str] = set()  # asked to power off, not off yet
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wipe-image", daemon=True)

    def __enter__(self) -> WipeImage:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        auth = (USER, self.bridge.password)
        with httpx.Client(auth=auth, timeout=5) as http:
            while not self._stop.wait(self.poll_s):
                for machine in self.bridge.machines:
                    try:
                        self._look(http, machine)
                    except (httpx.HTTPError, ValueError):
                        continue  # the emulator restarting or busy: look again next time

    def _look(self, http: httpx.Client, machine: Machine) -> None:
        system = f"{self.bridge.endpoint}/Systems/{machine.uuid}"
        power = http.get(system).json().get("PowerState")
        media = http.get(f"{system}/VirtualMedia/Cd").json()
        if machine.name in self._powering_off:
            if power == "Off":
                self._powering_off.discard(machine.name)
            return
        booted = power == "On" and media.get("Inserted") and media.get("Image") == self.image_url
        if not booted:
            self._running_since.pop(machine.name, None)
            return
        since = self._running_since.setdefault(machine.name, time.monotonic())
        if time.monotonic() - since < self.wipe_s:
            return
        http.post(
            f"{system}/Actions/ComputerSystem.Reset", json={"ResetType": "ForceOff"}
        ).raise_for_status()
        self.wiped[machine.name] += 1
        self._running_since.pop(machine.name, None)
        self._powering_off.add(machine.name)
