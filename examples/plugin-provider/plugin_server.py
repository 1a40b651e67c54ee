#!/usr/bin/env python3
"""A reference plug-in provider for Cloudburst: a homelab's own machines, driven by hooks.

It serves the plug-in contract v1 (Cloudburst's docs/providers.md, "Plug-in providers";
api/plugin_contract.schema.json) for a fixed inventory of machines, and runs the
operator's shell hooks to give a machine its first-boot script and power it on (`create`),
and to power it off and forget the script (`delete`). Python's standard library only.

    python3 plugin_server.py --inventory machines.json --hooks hooks/ \
        --state /var/lib/cloudburst-plugin/state.json --listen 0.0.0.0:8790 \
        --tokens-file /etc/cloudburst-plugin/tokens.json --tls-cert C --tls-key K

What it shows of the contract:
- every machine's instance belongs to one namespace (a tenant): each request names its
  namespace (header `Cloudburst-Namespace`), and the operator's tokens file says which
  token serves which namespace (`{"team-a": "<token>", "team-b": "<token>"}`; never the
  tenant's NodeClass). A token that is no one's is 401, one that serves another namespace
  403 (`fatal`, naming no one else); a namespace sees, lists and deletes its own instances
  alone (another's id is 404 `notFound`), and the same claim name in two namespaces is two
  instances;
- every create is checked against the contract's JSON Schema before anything happens
  (400 `fatal`, naming the fields);
- create is idempotent by the claim's name: a second create of a name it has answers that
  instance (200), whatever its state; a name another cluster holds is refused (409 `fatal`);
- the inventory is finite: `GET /v1/instance-types` says how many machines of each type
  are free (`available`), and a create with none free answers 503 `capacity`, so the claim
  moves on to its next offering (a public cloud, say);
- an instance id names one life of one machine (`<machine>.<n>`), never reused, so a
  claim that deletes its instance can never delete the next claim's on the same machine;
- hook exit statuses map to the typed errors (sysexits.h): 69 EX_UNAVAILABLE -> capacity,
  75 EX_TEMPFAIL -> retryable, anything else -> fatal;
- the first-boot script is a secret: it reaches the create hook on stdin only, is never
  logged, never stored by this server, and the delete hook removes the hook's copy.

Hooks get the machine's inventory `env` and `CLOUDBURST_INSTANCE_ID`, `CLOUDBURST_MACHINE_ID`,
`CLOUDBURST_MACHINE_ADDRESS`, `CLOUDBURST_CLAIM`, `CLOUDBURST_CLUSTER_ID`,
`CLOUDBURST_NAMESPACE`, `CLOUDBURST_NODE_POOL`, `CLOUDBURST_REGION`, `CLOUDBURST_INSTANCE_TYPE`, `CLOUDBURST_IMAGE`
and `CLOUDBURST_PROVIDER_ID` (`plugin:///<region>/<instance id>`: what the machine must
write to /etc/cloudburst/provider-id before the first-boot script runs; the shipped create
hook does it with a cloud-init vendor-data file).
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import json
import logging
import os
import re
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

log = logging.getLogger("cloudburst-plugin")

HERE = Path(__file__).resolve().parent
# The contract's schema, as Cloudburst generates it; copy it beside this file elsewhere.
SCHEMA_CANDIDATES = (
    HERE / "plugin_contract.schema.json",
    HERE.parent.parent / "api" / "plugin_contract.schema.json",
)
PROVIDER_ID_SCHEME = "plugin"
EX_UNAVAILABLE = 69  # sysexits.h: the machine cannot be had now -> capacity
EX_TEMPFAIL = 75  # sysexits.h: try again later -> retryable
MAX_BODY_BYTES = 1 << 20
# The tenant a request is for (Cloudburst's api/plugin.py NAMESPACE_HEADER): a namespace name.
NAMESPACE_HEADER = "Cloudburst-Namespace"
NAMESPACE_PATTERN = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class ContractError(Exception):
    """An answer in the contract's error form: `kind` decides what Cloudburst does next."""

    def __init__(
        self,
        status: int,
        kind: str,
        message: str,
        *,
        fix: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.fix = fix
        self.retry_after_s = retry_after_s

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"kind": self.kind, "message": self.message}
        if self.fix:
            error["fix"] = self.fix
        if self.retry_after_s is not None:
            error["retryAfterSeconds"] = self.retry_after_s
        return {"error": error}


# ---- the contract's schema ----------------------------------------------------------------


class Contract:
    """The contract's JSON Schema, and the subset of JSON Schema it uses, checked by hand (the
    standard library has no validator): $ref, anyOf, type, enum, const, lengths, pattern,
    bounds, required, properties, additionalProperties, maxProperties, items, maxItems."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self.defs: dict[str, Any] = schema.get("$defs", {})

    @classmethod
    def load(cls, path: Path | None = None) -> Contract:
        for candidate in (path,) if path else SCHEMA_CANDIDATES:
            if candidate is not None and candidate.exists():
                return cls(json.loads(candidate.read_text(encoding="utf-8")))
        raise FileNotFoundError(
            "no plugin_contract.schema.json: pass --schema (it is in Cloudburst's api/)"
        )

    def problems(self, definition: str, value: Any) -> list[str]:
        """What is wrong with `value` as the contract's `definition`; [] when nothing."""
        found: list[str] = []
        self._check(value, {"$ref": f"#/$defs/{definition}"}, "", found)
        return found

    def _check(self, value: Any, schema: dict[str, Any], at: str, found: list[str]) -> None:
        where = at or "the body"
        if "$ref" in schema:
            self._check(value, self.defs[schema["$ref"].rsplit("/", 1)[1]], at, found)
            return
        if "anyOf" in schema:
            branches: list[list[str]] = []
            for branch in schema["anyOf"]:
                attempt: list[str] = []
                self._check(value, branch, at, attempt)
                if not attempt:
                    return
                branches.append(attempt)
            found.extend(sorted(branches, key=lambda b: len(b))[0])
            return
        kind = schema.get("type")
        if kind is not None and not _is_type(value, kind):
            found.append(f"{where}: must be {kind}")
            return
        if "enum" in schema and value not in schema["enum"]:
            found.append(f"{where}: must be one of {', '.join(map(str, schema['enum']))}")
        if "const" in schema and value != schema["const"]:
            found.append(f"{where}: must be {schema['const']!r}")
        if isinstance(value, str):
            if len(value) < schema.get("minLength", 0):
                found.append(f"{where}: at least {schema['minLength']} characters")
            if "maxLength" in schema and len(value) > schema["maxLength"]:
                found.append(f"{where}: at most {schema['maxLength']} characters")
            if "pattern" in schema and not re.search(schema["pattern"], value):
                found.append(f"{where}: must match {schema['pattern']}")
        if isinstance(value, int | float) and not isinstance(value, bool):
            if "minimum" in schema and value < schema["minimum"]:
                found.append(f"{where}: at least {schema['minimum']}")
            if "maximum" in schema and value > schema["maximum"]:
                found.append(f"{where}: at most {schema['maximum']}")
            if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
                found.append(f"{where}: more than {schema['exclusiveMinimum']}")
            if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
                found.append(f"{where}: less than {schema['exclusiveMaximum']}")
        if isinstance(value, dict):
            for name in schema.get("required", []):
                if name not in value:
                    found.append(f"{at + '.' if at else ''}{name}: required")
            properties = schema.get("properties", {})
            extra = schema.get("additionalProperties", True)
            for name, item in value.items():
                path = f"{at + '.' if at else ''}{name}"
                if name in properties:
                    self._check(item, properties[name], path, found)
                elif isinstance(extra, dict):
                    self._check(item, extra, path, found)
                elif extra is False:
                    found.append(f"{path}: not a field of the contract")
            if "maxProperties" in schema and len(value) > schema["maxProperties"]:
                found.append(f"{where}: at most {schema['maxProperties']} entries")
        if isinstance(value, list):
            if "maxItems" in schema and len(value) > schema["maxItems"]:
                found.append(f"{where}: at most {schema['maxItems']} items")
            if isinstance(schema.get("items"), dict):
                for i, item in enumerate(value):
                    self._check(item, schema["items"], f"{where}[{i}]", found)


def _is_type(value: Any, kind: str | list[str]) -> bool:
    if isinstance(kind, list):
        return any(_is_type(value, k) for k in kind)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    python = {
        "string": str,
        "boolean": bool,
        "object": dict,
        "array": list,
        "null": type(None),
    }
    return isinstance(value, python[kind])


# ---- the inventory and its instances ------------------------------------------------------


@dataclass(frozen=True)
class MachineType:
    name: str
    vcpu: float
    memory_gib: float
    arch: str
    price_eur_per_hour: float | None = None


@dataclass(frozen=True)
class Machine:
    id: str
    instance_type: str
    region: str
    address: str | None = None
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Inventory:
    default_region: str
    types: dict[str, MachineType]
    machines: dict[str, Machine]

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Inventory:
        region = str(doc["defaultRegion"])
        types = {
            str(t["name"]): MachineType(
                name=str(t["name"]),
                vcpu=float(t["vcpu"]),
                memory_gib=float(t["memoryGiB"]),
                arch=str(t["arch"]),
                price_eur_per_hour=t.get("priceEurPerHour"),
            )
            for t in doc["instanceTypes"]
        }
        machines: dict[str, Machine] = {}
        for m in doc["machines"]:
            machine = Machine(
                id=str(m["id"]),
                instance_type=str(m["instanceType"]),
                region=str(m.get("region") or region),
                address=m.get("address"),
                env={str(k): str(v) for k, v in (m.get("env") or {}).items()},
            )
            if machine.instance_type not in types:
                raise ValueError(f"machine {machine.id}: unknown type {machine.instance_type}")
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,50}", machine.id):
                raise ValueError(f"machine id {machine.id!r}: letters, digits, '-', '_' only")
            machines[machine.id] = machine
        return cls(region, types, machines)


@dataclass
class Record:
    """One instance: one life of one machine, for one claim of one namespace."""

    id: str
    name: str
    machine: str
    cluster_id: str
    node_pool: str
    region: str
    instance_type: str
    labels: dict[str, str]
    state: str  # pending | running | stopping
    created_at: str
    image: str | None = None
    error: str | None = None  # the last hook failure of a delete still to be done
    # The tenant whose instance it is ("": a server without tokens asked without one).
    namespace: str = ""

    def answer(self, address: str | None) -> dict[str, Any]:
        """The contract's Instance."""
        body: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "region": self.region,
            "instanceType": self.instance_type,
            "state": self.state,
            "labels": self.labels,
            "capacityType": "on-demand",
            "createdAt": self.created_at,
        }
        if address:
            body["privateIP"] = address
        return body


class Homelab:
    """The machines, their instances and the hooks; thread-safe; its state survives restarts
    in `state_path` (never with a first-boot script)."""

    def __init__(
        self,
        inventory: Inventory,
        hooks: Path,
        state_path: Path,
        contract: Contract,
        *,
        hook_timeout_s: float = 50.0,
    ) -> None:
        self.inventory = inventory
        self.hooks = hooks
        self.state_path = state_path
        self.contract = contract
        self.hook_timeout_s = hook_timeout_s
        for hook in ("create", "delete"):
            path = hooks / hook
            if not os.access(path, os.X_OK):
                raise FileNotFoundError(f"hook {path} is missing or not executable")
        self._lock = threading.Lock()
        self._records: dict[tuple[str, str], Record] = {}  # by (namespace, claim name)
        self._lives: Counter[str] = Counter()  # machine -> lives so far (instance ids)
        self._deleting: set[str] = set()  # instance ids whose delete hook runs now
        self._load()

    # ---- the operations -------------------------------------------------------------------

    def create(self, request: Any, namespace: str = "") -> tuple[int, dict[str, Any]]:
        problems = self.contract.problems("CreateInstanceRequest", request)
        if problems:
            raise ContractError(
                400,
                "fatal",
                "the request is not contract v1: " + "; ".join(problems[:5]),
                fix="send a contract v1 CreateInstanceRequest",
            )
        name = str(request["name"])
        cluster = str(request["clusterID"])
        with self._lock:
            held = self._records.get((namespace, name))
            if held is not None:
                if held.cluster_id != cluster:
                    raise ContractError(
                        409,
                        "fatal",
                        f"the name {name} is held by an instance of another cluster",
                        fix="delete that instance, or give this cluster its own claim names",
                    )
                return 200, self._answer(held)
            record = self._reserve(request, namespace)
            self._save()
        try:
            self._run_hook("create", record, stdin=str(request["userData"]))
        except ContractError:
            with self._lock:
                self._records.pop((record.namespace, record.name), None)
                self._save()
            raise
        with self._lock:
            record.state = "running"
            self._save()
            log.info("instance %s of claim %s is running", record.id, record.name)
            return 201, self._answer(record)

    def get(self, instance_id: str, namespace: str = "") -> dict[str, Any]:
        with self._lock:
            return self._answer(self._by_id(instance_id, namespace))

    def owned(self, cluster: str, namespace: str = "") -> dict[str, Any]:
        """The cluster's instances of `namespace`: never another namespace's."""
        if not cluster:
            raise ContractError(400, "fatal", "the query parameter cluster is required")
        with self._lock:
            return {
                "instances": [
                    self._answer(r)
                    for r in self._records.values()
                    if r.cluster_id == cluster and r.namespace == namespace
                ]
            }

    def delete(self, instance_id: str, namespace: str = "") -> dict[str, Any]:
        with self._lock:
            record = self._by_id(instance_id, namespace)
            record.state = "stopping"
            self._save()
            start = record.id not in self._deleting
            if start:
                self._deleting.add(record.id)
            answer = self._answer(record)
        if start:
            threading.Thread(
                target=self._finish_delete, args=(record,), name=f"delete-{record.id}"
            ).start()
        return answer

    def instance_types(self) -> dict[str, Any]:
        with self._lock:
            busy = {r.machine for r in self._records.values()}
            out = []
            for t in self.inventory.types.values():
                machines = [
                    m for m in self.inventory.machines.values() if m.instance_type == t.name
                ]
                item: dict[str, Any] = {
                    "name": t.name,
                    "vcpu": t.vcpu,
                    "memoryGiB": t.memory_gib,
                    "arch": t.arch,
                    "regions": sorted({m.region for m in machines})
                    or [self.inventory.default_region],
                    "available": sum(1 for m in machines if m.id not in busy),
                }
                if t.price_eur_per_hour is not None:
                    item["priceEurPerHour"] = t.price_eur_per_hour
                out.append(item)
            return {"instanceTypes": out}

    def records(self) -> list[Record]:
        """A copy of every instance (for a simulated cluster's kubelets, and for tests)."""
        with self._lock:
            return [Record(**asdict(r)) for r in self._records.values()]

    # ---- helpers (with the lock held where they say so) -----------------------------------

    def _reserve(self, request: dict[str, Any], namespace: str) -> Record:
        """A free machine for the request, as a pending instance of `namespace` (lock held)."""
        wanted = str(request["instanceType"])
        region = str(request.get("region") or self.inventory.default_region)
        if wanted not in self.inventory.types:
            raise ContractError(
                400,
                "fatal",
                f"no instance type {wanted}; this plug-in has "
                f"{', '.join(sorted(self.inventory.types))}",
                fix="choose an instance type GET /v1/instance-types lists",
            )
        if request.get("capacityType", "on-demand") != "on-demand":
            raise ContractError(503, "capacity", "this plug-in has no spot machines")
        busy = {r.machine for r in self._records.values()}
        kind = [
            m
            for m in self.inventory.machines.values()
            if m.instance_type == wanted and m.region == region
        ]
        free = [m for m in kind if m.id not in busy]
        if not free:
            raise ContractError(
                503,
                "capacity",
                f"all {len(kind)} machines of type {wanted} in {region} are in use",
            )
        machine = free[0]
        self._lives[machine.id] += 1
        record = Record(
            id=f"{machine.id}.{self._lives[machine.id]}",
            name=str(request["name"]),
            machine=machine.id,
            cluster_id=str(request["clusterID"]),
            node_pool=str(request["nodePool"]),
            region=region,
            instance_type=wanted,
            labels={str(k): str(v) for k, v in (request.get("labels") or {}).items()},
            state="pending",
            created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            image=request.get("image"),
            namespace=namespace,
        )
        self._records[(namespace, record.name)] = record
        log.info("machine %s reserved for claim %s as %s", machine.id, record.name, record.id)
        return record

    def _by_id(self, instance_id: str, namespace: str) -> Record:
        """`namespace`'s instance of that id; another namespace's is as good as none (and
        the answer says no more). An instance made before requests named their namespace
        (in the state with none) is read and deleted by id as it was then, so that its
        claim still deletes it after an upgrade; no namespace lists it (a list feeds orphan
        garbage collection, which must see only its own)."""
        for record in self._records.values():
            if record.id == instance_id and record.namespace in (namespace, ""):
                return record
        raise ContractError(404, "notFound", f"no instance {instance_id}")

    def _answer(self, record: Record) -> dict[str, Any]:
        machine = self.inventory.machines.get(record.machine)
        return record.answer(machine.address if machine else None)

    def _finish_delete(self, record: Record) -> None:
        try:
            self._run_hook("delete", record, stdin="")
        except ContractError as err:
            with self._lock:
                record.error = err.message
                self._deleting.discard(record.id)
                self._save()
            log.warning("delete of %s failed (retried at the next DELETE): %s", record.id, err)
            return
        with self._lock:
            self._records.pop((record.namespace, record.name), None)
            self._deleting.discard(record.id)
            self._save()
        log.info("instance %s of claim %s is gone", record.id, record.name)

    def _run_hook(self, hook: str, record: Record, *, stdin: str) -> None:
        """Run a hook for `record`; its exit status becomes the contract's error kind."""
        machine = self.inventory.machines.get(record.machine)
        env = {
            **os.environ,
            **(machine.env if machine else {}),
            "CLOUDBURST_INSTANCE_ID": record.id,
            "CLOUDBURST_MACHINE_ID": record.machine,
            "CLOUDBURST_MACHINE_ADDRESS": (machine.address if machine else None) or "",
            "CLOUDBURST_CLAIM": record.name,
            "CLOUDBURST_NAMESPACE": record.namespace,
            "CLOUDBURST_CLUSTER_ID": record.cluster_id,
            "CLOUDBURST_NODE_POOL": record.node_pool,
            "CLOUDBURST_REGION": record.region,
            "CLOUDBURST_INSTANCE_TYPE": record.instance_type,
            "CLOUDBURST_IMAGE": record.image or "",
            "CLOUDBURST_PROVIDER_ID": f"{PROVIDER_ID_SCHEME}:///{record.region}/{record.id}",
        }
        try:
            done = subprocess.run(
                [str(self.hooks / hook)],
                input=stdin.encode(),
                env=env,
                capture_output=True,
                timeout=self.hook_timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ContractError(
                503,
                "retryable",
                f"the {hook} hook of machine {record.machine} took over {self.hook_timeout_s:g}s",
                retry_after_s=10.0,
            ) from None
        except OSError as exc:
            raise ContractError(
                500, "fatal", f"the {hook} hook cannot run: {exc}", fix=f"check {self.hooks}"
            ) from None
        if done.returncode == 0:
            return
        # The hook's own words (its last line on stderr) for the operator; the hook must not
        # print the first-boot script, which this server never logs.
        said = (done.stderr.decode(errors="replace").strip().splitlines() or [""])[-1][:300]
        what = f"the {hook} hook of machine {record.machine} exited {done.returncode}: {said}"
        log.warning("%s", what)
        if done.returncode == EX_UNAVAILABLE:
            raise ContractError(503, "capacity", what)
        if done.returncode == EX_TEMPFAIL:
            raise ContractError(503, "retryable", what, retry_after_s=10.0)
        raise ContractError(
            500, "fatal", what, fix=f"check the {hook} hook and machine {record.machine}"
        )

    # ---- state on disk -------------------------------------------------------------------

    def _load(self) -> None:
        if not self.state_path.exists():
            return
        doc = json.loads(self.state_path.read_text(encoding="utf-8"))
        self._lives.update({str(k): int(v) for k, v in doc.get("lives", {}).items()})
        for raw in doc.get("instances", []):
            record = Record(**raw)
            # A create that was under way when the server stopped: its hook's outcome is
            # unknown and its script is gone (never stored), so the machine is let go.
            if record.state in ("pending", "stopping"):
                record.state = "stopping"
            self._records[(record.namespace, record.name)] = record
        for record in list(self._records.values()):
            if record.state == "stopping":
                self.delete(record.id, record.namespace)

    def _save(self) -> None:
        """Write the state atomically (lock held)."""
        doc = {
            "lives": dict(self._lives),
            "instances": [asdict(r) for r in self._records.values()],
        }
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.state_path.parent, prefix=".state-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, self.state_path)


# ---- HTTP ---------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are logged by `_answer`, without bodies."""

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        status, body = 500, None
        try:
            # Read first, whatever the answer: a body left unread would be taken for the
            # connection's next request.
            payload = self._body()
            namespace = self._tenant()
            status, body = self._route(self.command, parts, parse_qs(url.query), payload, namespace)
        except ContractError as err:
            status, body = err.status, err.body()
        except Exception:
            log.exception("%s %s failed", self.command, url.path)
            status, body = 500, ContractError(500, "retryable", "plug-in error").body()
        self._answer(status, body, url.path)

    def _tenant(self) -> str:
        """The namespace the request is for, once its token is known to serve it.

        Without tokens (`--tokens-file` not given) every caller is served, and the header
        only keeps namespaces' instances apart. With them, the header is required and the
        token must be the one the operator gave that namespace: any other token is 401 (no
        one's) or 403 (another namespace's), and neither answer names who it serves.
        """
        namespace = self.headers.get(NAMESPACE_HEADER, "")
        if namespace and not NAMESPACE_PATTERN.fullmatch(namespace):
            raise ContractError(400, "fatal", f"header {NAMESPACE_HEADER} is no namespace name")
        tokens = self.server.tokens
        if tokens is None:
            return namespace
        given = self.headers.get("Authorization", "").encode()
        # Every token compared, so the time taken says nothing of which one matched.
        matches = {
            served: hmac.compare_digest(given, f"Bearer {token}".encode())
            for served, token in tokens.items()
        }
        if not any(matches.values()):
            raise ContractError(
                401, "fatal", "missing or wrong bearer token", fix="check the token Secret"
            )
        if not namespace:
            raise ContractError(
                400,
                "fatal",
                f"header {NAMESPACE_HEADER} is required: this plug-in serves each namespace "
                "its own instances",
                fix="a Cloudburst that speaks contract v1 with tenancy sends it",
            )
        if not matches.get(namespace, False):
            raise ContractError(
                403,
                "fatal",
                f"this token does not serve namespace {namespace}",
                fix=f"the token Secret of a NodeClass in {namespace} holds the token the "
                f"plug-in's operator gives {namespace}",
            )
        return namespace

    def _route(
        self,
        method: str,
        parts: list[str],
        query: dict[str, list[str]],
        payload: bytes,
        namespace: str,
    ) -> tuple[int, dict[str, Any] | None]:
        lab = self.server.homelab
        if parts[:1] != ["v1"]:
            raise ContractError(404, "fatal", "this plug-in serves contract v1 under /v1/")
        rest = parts[1:]
        if rest == ["instances"] and method == "POST":
            return lab.create(_json(payload), namespace)
        if rest == ["instances"] and method == "GET":
            return 200, lab.owned(query.get("cluster", [""])[-1], namespace)
        if len(rest) == 2 and rest[0] == "instances" and method == "GET":
            return 200, lab.get(rest[1], namespace)
        if len(rest) == 2 and rest[0] == "instances" and method == "DELETE":
            return 202, lab.delete(rest[1], namespace)
        if rest == ["instance-types"] and method == "GET":
            return 200, lab.instance_types()
        raise ContractError(404, "fatal", f"no operation {method} /{'/'.join(parts)}")

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            raise ContractError(413, "fatal", f"a body of {length} bytes is too large")
        return self.rfile.read(length) if length else b""

    def _answer(self, status: int, body: dict[str, Any] | None, path: str) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)
        log.info("%s %s -> %d", self.command, path, status)

    do_GET = do_POST = do_DELETE = _dispatch


def _json(payload: bytes) -> Any:
    try:
        return json.loads(payload or b"null")
    except ValueError:
        raise ContractError(400, "fatal", "the body is not JSON") from None


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    homelab: Homelab
    tokens: dict[str, str] | None  # namespace -> its token; None: no authentication


class PluginServer:
    """The HTTP face of a `Homelab`, served from a daemon thread (`start`/`stop`, or `with`).
    `tokens`: namespace -> the token that serves it (None: every caller is served)."""

    def __init__(
        self,
        homelab: Homelab,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        tokens: dict[str, str] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.homelab = homelab
        self._httpd = _HTTPServer((host, port), _Handler)
        self._httpd.homelab = homelab
        self._httpd.tokens = tokens
        self._scheme = "https" if tls else "http"
        if tls is not None:
            self._httpd.socket = tls.wrap_socket(self._httpd.socket, server_side=True)
        self._thread: threading.Thread | None = None

    @property
    def tokens(self) -> dict[str, str] | None:
        return self._httpd.tokens

    @tokens.setter
    def tokens(self, value: dict[str, str] | None) -> None:
        self._httpd.tokens = value

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"{self._scheme}://{host!s}:{port}"

    def start(self) -> PluginServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="plugin-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> PluginServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inventory", type=Path, required=True, help="machines.json")
    parser.add_argument("--hooks", type=Path, default=HERE / "hooks", help="create, delete")
    parser.add_argument("--state", type=Path, required=True, help="where instances are kept")
    parser.add_argument("--listen", default="127.0.0.1:8790", help="host:port")
    parser.add_argument(
        "--tokens-file",
        type=Path,
        help='JSON {"<namespace>": "<token>"}: the bearer token that serves each namespace',
    )
    parser.add_argument("--schema", type=Path, help="plugin_contract.schema.json")
    parser.add_argument("--hook-timeout", type=float, default=50.0, help="seconds")
    parser.add_argument("--tls-cert", type=Path)
    parser.add_argument("--tls-key", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    inventory = Inventory.from_json(json.loads(args.inventory.read_text(encoding="utf-8")))
    homelab = Homelab(
        inventory,
        args.hooks,
        args.state,
        Contract.load(args.schema),
        hook_timeout_s=args.hook_timeout,
    )
    tokens = _read_tokens(args.tokens_file) if args.tokens_file else None
    tls = None
    if args.tls_cert:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.tls_cert, args.tls_key)
    host, _, port = args.listen.rpartition(":")
    server = PluginServer(homelab, host or "127.0.0.1", int(port), tokens=tokens, tls=tls)
    if tokens is None:
        log.warning("no --tokens-file: every caller that reaches %s is served", server.url)
    if tls is None:
        log.warning(
            "no --tls-cert: tokens and first-boot scripts cross in cleartext (Cloudburst calls "
            "an http:// plug-in only where an operator allows that very URL)"
        )
    log.info(
        "serving contract v1 on %s: %d machines of %d types",
        server.url,
        len(inventory.machines),
        len(inventory.types),
    )
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    server.start()
    with contextlib.suppress(KeyboardInterrupt):
        stopped.wait()
    server.stop()
    return 0


def _read_tokens(path: Path) -> dict[str, str]:
    """The tokens file: one token per namespace, each a different one."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or not doc:
        raise SystemExit(f"{path}: a JSON object of namespace -> token")
    tokens: dict[str, str] = {}
    for namespace, token in doc.items():
        if not NAMESPACE_PATTERN.fullmatch(str(namespace)):
            raise SystemExit(f"{path}: {namespace!r} is no namespace name")
        if not isinstance(token, str) or len(token.strip()) < 16:
            raise SystemExit(f"{path}: the token of {namespace} must be 16 characters or more")
        tokens[str(namespace)] = token.strip()
    if len(set(tokens.values())) != len(tokens):
        raise SystemExit(f"{path}: a token serves one namespace: give each its own")
    return tokens


if __name__ == "__main__":
    sys.exit(main())
