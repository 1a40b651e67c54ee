"""EC2 stand-in: moto's server, behind a small proxy that injects failures and isolates state.

EC2 answers in XML with hundreds of shapes, so nothing here imitates it: every request goes
to moto's `ThreadedMotoServer` (on 127.0.0.1, port 0). The proxy in front of it

- injects failures per op (`inject_failure(op, kind, times=1)`): the matching request is
  answered with an EC2 error document (`<Response><Errors><Error><Code>...`) instead of being
  forwarded — ops are read from the form body's `Action` (RunInstances → create,
  DescribeInstances with ids → get, without → list, TerminateInstances → delete,
  DescribeInstanceTypes/Offerings → catalog);
- gives each stand-in its own moto account (`x-moto-account-id`), because moto's state is
  process-wide and several stand-ins (or tests) share one process;
- serves the stand-in's own reads under `/_internal/` (never failed, never counted): the
  `BootableCloud` side reads instances and their `userData` through boto3 against moto, as
  the simulated kubelets' "inside view" of a VM.

moto does not enforce `ClientToken` idempotency and puts new instances straight into
`pending`/`running`; the boot delay the kubelets see is applied here (from when the stand-in
first saw the instance).
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import secrets
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any, Self
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

import boto3
from botocore.config import Config
from moto.server import ThreadedMotoServer

from sim.clouds.base import (
    CloudStandin,
    Request,
    Response,
    SpotNotice,
    rfc3339,
)

PROVIDER = "aws"
OPS = ("create", "get", "list", "delete", "catalog")
DEFAULT_REGIONS = ("eu-central-1", "us-east-1", "us-west-2")
INTERNAL = "_internal"

# kind -> (HTTP status, EC2 error code, message), as EC2 sends them.
_FAILURES: dict[str, tuple[int, str, str]] = {
    "unavailable": (503, "Unavailable", "The server is overloaded and can't handle the request."),
    "capacity": (
        500,
        "InsufficientInstanceCapacity",
        "We currently do not have sufficient capacity in the Availability Zone you requested "
        "(injected).",
    ),
    "quota": (
        400,
        "VcpuLimitExceeded",
        "You have requested more vCPU capacity than your current vCPU limit allows (injected).",
    ),
    "throttle": (503, "RequestLimitExceeded", "Request limit exceeded (injected)."),
    "auth": (401, "AuthFailure", "AWS was not able to validate the provided access credentials."),
}
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}

_QUIET = False


def _quiet_moto() -> None:
    """moto's werkzeug server logs every request on stderr: keep tests and the demo readable."""
    global _QUIET
    if not _QUIET:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        _QUIET = True


def _error_xml(code: str, message: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{escape(code)}</Code>"
        f"<Message>{escape(message)}</Message></Error></Errors>"
        f"<RequestID>{uuid.uuid4()}</RequestID></Response>"
    ).encode()


def _refused_market_options(form: dict[str, list[str]]) -> tuple[str, str] | None:
    """What EC2 answers to malformed InstanceMarketOptions (moto accepts anything): the
    (code, message) of the error, or None. moto records a spot request's lifecycle itself."""
    prefix = "InstanceMarketOptions."

    def value(key: str) -> str | None:
        values = form.get(prefix + key)
        return values[-1] if values else None

    market = value("MarketType")
    if market is None:
        if any(k.startswith(prefix) for k in form):
            return "MissingParameter", "The request must contain the parameter MarketType"
        return None
    if market not in ("spot", "capacity-block"):
        return "InvalidParameterValue", f"Value ({market}) for parameter MarketType is invalid."
    kind = value("SpotOptions.SpotInstanceType") or "one-time"
    behavior = value("SpotOptions.InstanceInterruptionBehavior") or "terminate"
    if kind not in ("one-time", "persistent"):
        return "InvalidParameterValue", f"Value ({kind}) for parameter SpotInstanceType is invalid."
    if behavior not in ("hibernate", "stop", "terminate"):
        return (
            "InvalidParameterValue",
            f"Value ({behavior}) for parameter InstanceInterruptionBehavior is invalid.",
        )
    if kind == "one-time" and behavior != "terminate":
        return (
            "InvalidParameterCombination",
            "One-time Spot Instances can only be terminated on interruption.",
        )
    return None


def _op_of(form: dict[str, list[str]]) -> str | None:
    action = (form.get("Action") or [""])[-1]
    match action:
        case "RunInstances":
            return "create"
        case "DescribeInstances":
            return "get" if any(k.startswith("InstanceId.") for k in form) else "list"
        case "TerminateInstances":
            return "delete"
        case "DescribeInstanceTypes" | "DescribeInstanceTypeOfferings":
            return "catalog"
    return None


def _region_of_request(req: Request) -> str:
    """The region in the SigV4 credential scope (`Credential=KEY/DATE/REGION/ec2/...`)."""
    parts = _credential_scope(req)
    return parts[2] if len(parts) > 2 else ""


def _credential_scope(req: Request) -> list[str]:
    auth = req.headers.get("authorization", "")
    _, _, scope = auth.partition("Credential=")
    return scope.split(",", 1)[0].split("/")


class AwsStandin(CloudStandin):
    """moto + failure-injecting proxy; a `BootableCloud` for the simulated kubelets."""

    provider = PROVIDER
    region = "eu-central-1"
    instance_type = "t3.small"

    def __init__(
        self,
        *,
        boot_delay_s: float = 1.0,
        host: str = "127.0.0.1",
        port: int = 0,
        regions: tuple[str, ...] = DEFAULT_REGIONS,
        account_id: str | None = None,
    ) -> None:
        self.host = host
        self.regions = list(regions)
        self.account_id = account_id or f"{secrets.randbelow(10**12):012d}"
        # moto accepts any keys; these are what the provider reads from its Secret.
        self.access_key_id = "AKIA" + secrets.token_hex(8).upper()
        self.secret_access_key = secrets.token_urlsafe(30)
        self.credential = json.dumps(
            {
                "aws_access_key_id": self.access_key_id,
                "aws_secret_access_key": self.secret_access_key,
            }
        )
        self._moto: ThreadedMotoServer | None = None
        self._moto_addr: tuple[str, int] | None = None
        self._first_seen: dict[str, float] = {}
        self._region_of: dict[str, str] = {}
        self._shapes: dict[str, tuple[float, float, str] | None] = {}
        self._internal: dict[str, Any] = {}
        self._requests: list[tuple[str, str]] = []  # (op or action, region-less path)
        self._access_keys: set[str] = set()  # access key ids requests were signed with
        # instance id -> the spot instance-action IMDS serves it (until it is terminated)
        self._notices: dict[str, SpotNotice] = {}
        # The proxy in front of moto, injecting failures; moto keeps the VMs (and counts them).
        super().__init__(
            ops=OPS, name="aws-standin", boot_delay_s=boot_delay_s, host=host, port=port
        )

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> Self:
        if self._moto is None:
            _quiet_moto()
            self._moto = ThreadedMotoServer(ip_address=self.host, port=0, verbose=False)
            self._moto.start()
            self._moto_addr = self._moto.get_host_and_port()
        return super().start()

    def stop(self) -> None:
        super().stop()
        if self._moto is not None:
            self._moto.stop()
            self._moto = None

    def nodeclass_block(self, secret_name: str, secret_key: str) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "region": self.region,
            # moto has no SSM-resolved AMIs; any well-formed id launches.
            "image": "ami-0123456789abcdef0",
            "imageArm64": "ami-0fedcba9876543210",
            "credentialsSecretRef": {"name": secret_name, "key": secret_key},
        }

    # ---- test controls ---------------------------------------------------------------------

    def access_keys_seen(self) -> set[str]:
        """The access key ids (not secrets) the provider's requests were signed with."""
        with self._lock:
            return set(self._access_keys)

    def requests_seen(self) -> list[tuple[str, str]]:
        """(EC2 Action, region) of every request the provider made, in order."""
        with self._lock:
            return list(self._requests)

    def _all_instances(self) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        for region in self.regions:
            pages = self.ec2(region).get_paginator("describe_instances").paginate()
            for page in pages:
                for reservation in page.get("Reservations") or []:
                    out.extend((region, raw) for raw in reservation.get("Instances") or [])
        return out

    def stats(self) -> dict[str, Any]:
        created: Counter[str] = Counter()
        states: Counter[str] = Counter()
        for _region, raw in self._all_instances():
            tags = {t["Key"]: t["Value"] for t in raw.get("Tags") or []}
            created[tags.get("Name") or raw["InstanceId"]] += 1
            states[str(raw["State"]["Name"])] += 1
        return {
            "created_by_name": dict(created),
            "instances_created": sum(created.values()),
            "live_instances": sum(n for s, n in states.items() if s != "terminated"),
            "states": dict(states),
            "requests": len(self._requests),
            "failures": self.failures.pending(),
        }

    def interrupt(self, instance_id: str, *, notice_s: float = 2.0) -> SpotNotice:
        """Reclaim a spot instance as EC2 does: IMDS `spot/instance-action` says
        `{"action": "terminate", "time": ...}` (two minutes ahead on EC2, `notice_s` here),
        then the instance is `terminated` with StateReason `Server.SpotInstanceTermination`.
        An on-demand instance cannot be interrupted (ValueError)."""
        with self._lock:
            region = self._region_of.get(instance_id)
        for r in [region] if region else self.regions:
            ec2 = self.ec2(r)
            try:
                found = ec2.describe_instances(InstanceIds=[instance_id])
            except ec2.exceptions.ClientError:
                continue
            for reservation in found.get("Reservations") or []:
                for raw in reservation.get("Instances") or []:
                    if raw.get("InstanceLifecycle") != "spot":
                        raise ValueError(f"{instance_id} is not a spot instance")
                    if raw["State"]["Name"] in ("shutting-down", "terminated"):
                        raise ValueError(f"{instance_id} is already {raw['State']['Name']}")
                    now = time.monotonic()
                    at = datetime.now(UTC) + timedelta(seconds=notice_s)
                    notice = SpotNotice(
                        native_id=instance_id,
                        region=r,
                        detail={"action": "terminate", "time": rfc3339(at)},
                        taint_value="spot-itn",
                        noticed_mono=now,
                        due_mono=now + notice_s,
                    )
                    with self._lock:
                        self._notices[instance_id] = notice
                    return notice
        raise KeyError(instance_id)

    def instance_action(self, instance_id: str) -> dict[str, str] | None:
        """What IMDS `/latest/meta-data/spot/instance-action` serves the instance (404: None)."""
        self._reclaim_due()
        with self._lock:
            notice = self._notices.get(instance_id)
        return dict(notice.detail) if notice is not None else None

    def interruption_notice(self, native_id: str) -> str | None:
        """The in-VM agent's view (the kubelets'): the notice's taint value, or None."""
        with self._lock:
            notice = self._notices.get(native_id)
        return notice.taint_value if notice is not None and not notice.done else None

    def _reclaim_due(self) -> None:
        """Terminate the instances whose notice ran out, with EC2's spot state reason. moto
        has no API for a service-side termination: its backend (same process) is used."""
        now = time.monotonic()
        with self._lock:
            due = [n for n in self._notices.values() if not n.done and now >= n.due_mono]
            for n in due:
                n.done = True
        for n in due:
            from moto.ec2.models import ec2_backends
            from moto.ec2.models.instances import StateReason

            backend = ec2_backends[self.account_id][n.region]
            try:
                instance = backend.get_instance(n.native_id)
            except Exception:  # already gone
                continue
            instance.terminate()
            instance._reason = "Service initiated"
            instance.state_reason = StateReason(
                "Server.SpotInstanceTermination: Spot instance termination",
                "Server.SpotInstanceTermination",
            )

    # ---- the stand-in's own boto3 view (through /_internal/: no failures) -----------------

    def ec2(self, region: str | None = None) -> Any:
        """A boto3 EC2 client on this stand-in's moto account that bypasses injection."""
        region = region or self.region
        with self._lock:
            client = self._internal.get(region)
            if client is None:
                client = boto3.client(
                    "ec2",
                    endpoint_url=f"{self.url}/{INTERNAL}/",
                    region_name=region,
                    aws_access_key_id="internal",
                    aws_secret_access_key="internal",
                    config=Config(retries={"total_max_attempts": 1}),
                )
                self._internal[region] = client
            return client

    # ---- BootableCloud ---------------------------------------------------------------------

    def _state(self, native_id: str, ec2_state: str, now: float) -> str:
        match ec2_state:
            case "pending" | "running":
                with self._lock:
                    first = self._first_seen.setdefault(native_id, now)
                return "pending" if now - first < self.boot_delay_s else "running"
            case "shutting-down" | "stopping" | "stopped":
                return "stopping"
        return "terminated"

    def instance_states(self) -> dict[str, str]:
        self._reclaim_due()
        now = time.monotonic()
        out: dict[str, str] = {}
        for region, raw in self._all_instances():
            state = str(raw["State"]["Name"])
            if state == "terminated":
                continue  # EC2 lists terminated VMs for a while; to the kubelets they are gone
            iid = str(raw["InstanceId"])
            with self._lock:
                self._region_of[iid] = region
            out[iid] = self._state(iid, state, now)
        return out

    def peek(self, native_id: str) -> dict[str, Any] | None:
        with self._lock:
            region = self._region_of.get(native_id)
        regions = [region] if region else self.regions
        for r in regions:
            ec2 = self.ec2(r)
            try:
                found = ec2.describe_instances(InstanceIds=[native_id])
            except ec2.exceptions.ClientError:
                continue
            for reservation in found.get("Reservations") or []:
                for raw in reservation.get("Instances") or []:
                    if raw["State"]["Name"] == "terminated":
                        return None
                    attr = ec2.describe_instance_attribute(
                        InstanceId=native_id, Attribute="userData"
                    )
                    encoded = (attr.get("UserData") or {}).get("Value") or ""
                    tags = {str(t["Key"]): str(t["Value"]) for t in raw.get("Tags") or []}
                    return {
                        "id": native_id,
                        "name": tags.get("Name", native_id),
                        "region": r,
                        "instance_type": raw["InstanceType"],
                        "user_data": base64.b64decode(encoded).decode() if encoded else "",
                        "private_ip": raw.get("PrivateIpAddress"),
                        "labels": {k: v for k, v in tags.items() if k.startswith("cloudburst.io/")},
                        "tags": tags,
                        "state": self._state(native_id, raw["State"]["Name"], time.monotonic()),
                    }
        return None

    def instance_shape(self, instance_type: str) -> tuple[float, float, str] | None:
        with self._lock:
            if instance_type in self._shapes:
                return self._shapes[instance_type]
        ec2 = self.ec2()
        try:
            found = ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"]
        except ec2.exceptions.ClientError:
            found = []
        shape: tuple[float, float, str] | None = None
        if found:
            raw = found[0]
            archs = raw["ProcessorInfo"]["SupportedArchitectures"]
            shape = (
                float(raw["VCpuInfo"]["DefaultVCpus"]),
                float(raw["MemoryInfo"]["SizeInMiB"]) / 1024,
                "arm64" if "arm64" in archs else "x86_64",
            )
        with self._lock:
            self._shapes[instance_type] = shape
        return shape

    # ---- the proxy -------------------------------------------------------------------------

    def _route(self, req: Request) -> Response:
        internal = req.parts[:1] == [INTERNAL]
        path = "/" + "/".join(req.parts[1:] if internal else req.parts)
        if not internal:
            self._reclaim_due()  # what the provider reads shows the reclaimed instance
            form = parse_qs(req.body.decode("utf-8", "replace"), keep_blank_values=True)
            op = _op_of(form)
            action = (form.get("Action") or ["?"])[-1]
            with self._lock:
                self._requests.append((action, _region_of_request(req)))
                self._access_keys.add(_credential_scope(req)[0])
            refused = _refused_market_options(form) if action == "RunInstances" else None
            if refused is not None:
                return Response(400, _error_xml(*refused), content_type="text/xml")
            failed = self._fail(op) if op else None
            if failed is not None:
                return failed
        return self._forward(req, path)

    def _failure_response(self, kind: str) -> Response:
        status, code, message = _FAILURES[kind]
        return Response(status, _error_xml(code, message), content_type="text/xml")

    def _forward(self, req: Request, path: str) -> Response:
        assert self._moto_addr is not None, "start() the stand-in first"
        query = "&".join(f"{k}={v}" for k, vs in req.query.items() for v in vs)
        headers = {k: v for k, v in req.headers.items() if k not in _HOP_BY_HOP}
        headers["x-moto-account-id"] = self.account_id
        conn = http.client.HTTPConnection(*self._moto_addr, timeout=60)
        try:
            conn.request(req.method, path + (f"?{query}" if query else ""), req.body, headers)
            answer = conn.getresponse()
            body = answer.read()
            content_type = answer.getheader("Content-Type") or "text/xml"
            passed = {
                k: v
                for k, v in answer.getheaders()
                if k.lower() not in _HOP_BY_HOP
                and k.lower() not in ("content-type", "server", "date")
            }
            return Response(answer.status, body, headers=passed, content_type=content_type)
        finally:
            conn.close()


def standin(*, boot_delay_s: float = 1.0, host: str = "127.0.0.1") -> AwsStandin:
    """The factory `sim.cluster` and `cloudburst dev` use (not yet started)."""
    return AwsStandin(boot_delay_s=boot_delay_s, host=host)
