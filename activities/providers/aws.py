"""Amazon EC2 through boto3.

- Idempotent create, twice over: first a lookup of a live instance tagged with the claim (so a
  retry after a crash finds the VM the first attempt made, whatever the API does with tokens),
  then `RunInstances` with `ClientToken` = the claim name (EC2 returns the instance that token
  already made instead of launching a second one).
- Tags `cloudburst.io/*` (EC2 allows `/` and `.` in keys) plus `Name` on the instance and its
  volumes (`TagSpecifications`); `list_owned` filters on them with `describe_instances`.
- User data as text: boto3 base64-encodes `UserData` for RunInstances as the API wants.
- Errors are classified on `ClientError` codes (`_CAPACITY_CODES`, `_OUTAGE_CODES`, … below).
  SDK retries are off (`max_attempts=1`): the activity retry policy owns backoff, so a
  throttled call surfaces as `RetryableError` instead of sleeping inside the activity.
- Credentials: the Secret value is JSON `{"aws_access_key_id", "aws_secret_access_key"[,
  "aws_session_token"]}`; without a Secret reference the worker's own identity through
  boto3's default chain (environment, EKS Pod Identity, IRSA web identity, instance
  profile); none found is a `NoIdentityError` saying what to configure.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import boto3
import botocore.exceptions
from botocore.config import Config

from activities.providers.base import (
    CapacityError,
    FatalError,
    Instance,
    InstanceNotFoundError,
    InstanceSpec,
    InstanceState,
    InstanceType,
    NoIdentityError,
    Provider,
    RetryableError,
    instance_id,
    split_instance_id,
)
from api import labels as L
from api.nodeclass import AwsClass

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
CLIENT_TOKEN_MAX = 64

_CREDENTIAL_FIX = (
    "check the Secret referenced by NodeClass spec.aws.credentialsSecretRef (JSON with "
    "aws_access_key_id and aws_secret_access_key) and the IAM permissions "
    "(ec2:RunInstances, ec2:DescribeInstances, ec2:TerminateInstances, ec2:CreateTags)"
)
_ENDPOINT_FIX = "check NodeClass spec.aws.region and spec.aws.endpoint"
_AMBIENT_FIX = (
    "set NodeClass spec.aws.credentialsSecretRef, or give the worker an AWS identity: EKS Pod "
    "Identity, or IRSA (annotate ServiceAccount cloudburst-system/cloudburst-worker with "
    "eks.amazonaws.com/role-arn, see deploy/README.md)"
)

# Out of capacity or quota, or an outage: try the next offering.
_CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "InsufficientCapacity",
        "Unsupported",
        "VcpuLimitExceeded",
        "InstanceLimitExceeded",
        "MaxSpotInstanceCountExceeded",
        "InsufficientFreeAddressesInSubnet",
    }
)
_OUTAGE_CODES = frozenset({"Unavailable", "ServiceUnavailable"})
_THROTTLE_CODES = frozenset(
    {"RequestLimitExceeded", "Throttling", "ThrottlingException", "TooManyRequestsException"}
)
_AUTH_CODES = frozenset(
    {
        "AuthFailure",
        "UnauthorizedOperation",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "RequestExpired",
        "OptInRequired",
        "Blocked",
    }
)
_NOT_FOUND_CODES = frozenset({"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"})
# Invalid request: which NodeClass field to fix, by error-code prefix.
_INVALID_FIXES = (
    (
        "InvalidAMIID",
        "check NodeClass spec.aws.image / spec.aws.imageArm64 (an AMI id or "
        "resolve:ssm: parameter that exists in the region)",
    ),
    ("InvalidSubnet", "check NodeClass spec.aws.subnetId"),
    ("InvalidGroup", "check NodeClass spec.aws.securityGroupIds"),
    (
        "InvalidParameterCombination",
        "check NodeClass spec.aws (image, subnetId, securityGroupIds) against the instance type",
    ),
    (
        "IdempotentParameterMismatch",
        "the claim's client token was used with other parameters; "
        "delete the VM tagged with this claim or let the claim pick a new name",
    ),
)

# EC2 state -> ours. `terminated` is "gone" (get returns None); a stopped VM will not come
# back by itself, so the claim treats it as lost.
_STATES = {
    "pending": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "shutting-down": InstanceState.STOPPING,
    "stopping": InstanceState.STOPPING,
    "stopped": InstanceState.TERMINATED,
}
_LIVE_STATES = ["pending", "running", "stopping", "stopped"]

# Graviton families: m7g, t4g, c7gn, r6gd, x2gd, im4gn, ...
_ARM_FAMILY = re.compile(r"^[a-z]+\d+g[a-z]*$")


def client_token(claim_name: str) -> str:
    """The RunInstances ClientToken for a claim: its name, hashed down when over 64 chars."""
    if len(claim_name) <= CLIENT_TOKEN_MAX:
        return claim_name
    digest = hashlib.sha256(claim_name.encode()).hexdigest()[:16]
    return f"{claim_name[: CLIENT_TOKEN_MAX - 17]}-{digest}"


def is_arm_instance_type(instance_type: str) -> bool:
    return bool(_ARM_FAMILY.match(instance_type.split(".", 1)[0]))


def parse_credential(credential: str | None) -> dict[str, str]:
    """boto3 session keyword arguments from the Secret value; {} means the default chain."""
    if not credential or not credential.strip():
        return {}
    try:
        data = json.loads(credential)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise FatalError("aws", "the credential Secret value is not a JSON object", _CREDENTIAL_FIX)
    key_id = data.get("aws_access_key_id")
    secret = data.get("aws_secret_access_key")
    if not isinstance(key_id, str) or not isinstance(secret, str) or not key_id or not secret:
        raise FatalError(
            "aws",
            "the credential JSON lacks aws_access_key_id or aws_secret_access_key",
            _CREDENTIAL_FIX,
        )
    out = {"aws_access_key_id": key_id, "aws_secret_access_key": secret}
    token = data.get("aws_session_token")
    if isinstance(token, str) and token:
        out["aws_session_token"] = token
    return out


class AwsProvider(Provider):
    """EC2 in the NodeClass region (or the offering's region)."""

    name: ClassVar[str] = "aws"
    supports_spot: ClassVar[bool] = True
    block: AwsClass

    def __init__(
        self, block: AwsClass, credential: str | None, namespace: str | None = None
    ) -> None:
        super().__init__(block, credential, namespace)
        self._session_kwargs = parse_credential(credential)
        self._lock = threading.Lock()
        self._clients: dict[str, Any] = {}

    # ---- plumbing ------------------------------------------------------------------------

    def _ec2(self, region: str) -> Any:
        """One client per region (boto3 clients are thread-safe; sessions are not)."""
        with self._lock:
            client = self._clients.get(region)
            if client is None:
                session = boto3.session.Session(**self._session_kwargs)
                client = session.client(
                    "ec2",
                    region_name=region,
                    endpoint_url=self.block.endpoint or None,
                    config=Config(
                        retries={"total_max_attempts": 1, "mode": "standard"},
                        connect_timeout=CONNECT_TIMEOUT_S,
                        read_timeout=READ_TIMEOUT_S,
                        user_agent_extra="cloudburst",
                    ),
                )
                self._clients[region] = client
            return client

    @contextmanager
    def _classified(self, what: str, *, creating: bool = False) -> Iterator[None]:
        """Map SDK errors to the typed errors; messages name the call, never a credential."""
        try:
            yield
        except botocore.exceptions.ClientError as exc:
            self._raise_client_error(exc, what, creating=creating)
        except botocore.exceptions.NoCredentialsError:
            raise NoIdentityError(
                self.name,
                f"{what}: no credentialsSecretRef and no AWS credentials in the default chain",
                _AMBIENT_FIX,
            ) from None
        except (
            botocore.exceptions.ConnectTimeoutError,
            botocore.exceptions.ReadTimeoutError,
        ) as exc:
            raise RetryableError(self.name, f"{what}: timed out ({type(exc).__name__})") from exc
        except botocore.exceptions.EndpointConnectionError as exc:
            raise RetryableError(self.name, f"{what}: cannot reach the EC2 endpoint") from exc
        except botocore.exceptions.ParamValidationError as exc:
            raise FatalError(self.name, f"{what}: invalid request: {exc}", _ENDPOINT_FIX) from exc
        except botocore.exceptions.BotoCoreError as exc:
            raise RetryableError(self.name, f"{what}: {type(exc).__name__}") from exc

    def _raise_client_error(
        self, exc: botocore.exceptions.ClientError, what: str, *, creating: bool
    ) -> None:
        error = exc.response.get("Error") or {}
        code = str(error.get("Code") or "")
        message = str(error.get("Message") or "")
        status = int((exc.response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)
        detail = f"{what}: {code or f'HTTP {status}'}: {message}".rstrip(": ")
        if code in _NOT_FOUND_CODES:
            raise InstanceNotFoundError(self.name, detail) from exc
        if code in _THROTTLE_CODES or status == 429:
            raise RetryableError(self.name, detail) from exc
        if code in _CAPACITY_CODES:
            raise CapacityError(self.name, detail) from exc
        if code in _OUTAGE_CODES or status == 503:
            if creating:
                raise CapacityError(self.name, detail) from exc
            raise RetryableError(self.name, detail) from exc
        if code in _AUTH_CODES or status in (401, 403):
            raise FatalError(self.name, detail, _CREDENTIAL_FIX) from None
        for prefix, fix in _INVALID_FIXES:
            if code.startswith(prefix):
                raise FatalError(self.name, detail, fix) from exc
        if status >= 500 or code in ("InternalError", "InternalFailure"):
            raise RetryableError(self.name, detail) from exc
        raise FatalError(self.name, detail, "the request was refused as invalid") from exc

    def _native(self, value: str) -> tuple[str, str]:
        try:
            provider, region, native = split_instance_id(value)
        except ValueError as exc:
            raise FatalError(self.name, f"malformed instance id {value!r}") from exc
        if provider != self.name:
            raise FatalError(self.name, f"instance id {value!r} is not an {self.name} instance")
        return region, native

    def _instance(self, raw: dict[str, Any], region: str) -> Instance | None:
        state_name = str((raw.get("State") or {}).get("Name") or "pending")
        if state_name == "terminated":
            return None
        tags = {str(t["Key"]): str(t["Value"]) for t in raw.get("Tags") or []}
        labels = {k: v for k, v in tags.items() if k.startswith(f"{L.GROUP}/")}
        return Instance(
            id=instance_id(self.name, region, str(raw["InstanceId"])),
            name=tags.get(L.NODECLAIM) or tags.get("Name") or str(raw["InstanceId"]),
            provider=self.name,
            region=region,
            instance_type=str(raw.get("InstanceType") or ""),
            state=_STATES.get(state_name, InstanceState.PENDING),
            labels=labels,
            created_at=raw.get("LaunchTime"),
            private_ip=raw.get("PrivateIpAddress"),
            public_ip=raw.get("PublicIpAddress"),
            capacity_type="spot" if raw.get("InstanceLifecycle") == "spot" else "on-demand",
        )

    def _describe(self, region: str, what: str, **kwargs: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        with self._classified(what):
            for page in self._ec2(region).get_paginator("describe_instances").paginate(**kwargs):
                for reservation in page.get("Reservations") or []:
                    out.extend(reservation.get("Instances") or [])
        return out

    def _find_claim(self, region: str, cluster_id: str, claim: str) -> Instance | None:
        found = self._describe(
            region,
            f"find instance of claim {claim!r}",
            Filters=[
                {"Name": f"tag:{L.NODECLAIM}", "Values": [claim]},
                {"Name": f"tag:{L.CLUSTER}", "Values": [cluster_id]},
                {"Name": "instance-state-name", "Values": _LIVE_STATES},
            ],
        )
        instances = [i for i in (self._instance(raw, region) for raw in found) if i is not None]
        instances.sort(key=lambda i: i.state is InstanceState.TERMINATED)
        return instances[0] if instances else None

    def _image(self, spec: InstanceSpec) -> str:
        if is_arm_instance_type(spec.instance_type) and self.block.image_arm64:
            return self.block.image_arm64
        image = spec.image or self.block.image
        if not image:
            raise FatalError(self.name, "no AMI configured", "set NodeClass spec.aws.image")
        return image

    # ---- Provider ------------------------------------------------------------------------

    def create(self, spec: InstanceSpec) -> Instance:
        region = spec.region or self.block.region
        what = f"create instance {spec.name!r} ({spec.instance_type} in {region})"
        existing = self._find_claim(region, spec.cluster_id, spec.name)
        if existing is not None:
            if existing.state is InstanceState.STOPPING:
                raise RetryableError(
                    self.name,
                    f"{what}: an earlier VM of this claim is stopping; retry once it is gone",
                )
            log.info("instance of %s already exists as %s", spec.name, existing.id)
            return existing
        tags = [{"Key": k, "Value": v} for k, v in {**spec.vm_labels(), "Name": spec.name}.items()]
        params: dict[str, Any] = {
            "ImageId": self._image(spec),
            "InstanceType": spec.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "ClientToken": client_token(spec.name),
            "UserData": spec.user_data,
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tags},
                {"ResourceType": "volume", "Tags": tags},
            ],
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
            "BlockDeviceMappings": [
                {
                    "DeviceName": self.block.root_device_name,
                    "Ebs": {
                        "VolumeSize": self.block.root_volume_gib,
                        "VolumeType": "gp3",
                        "DeleteOnTermination": True,
                    },
                }
            ],
        }
        if spec.capacity_type == "spot":
            # One-time, terminated on interruption: the claim replaces it, nothing restarts it.
            # No MaxPrice: EC2 then caps the spot price at the on-demand price.
            params["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {
                    "SpotInstanceType": "one-time",
                    "InstanceInterruptionBehavior": "terminate",
                },
            }
        if spec.zone:
            params["Placement"] = {"AvailabilityZone": spec.zone}
        if self.block.subnet_id or self.block.security_group_ids:
            interface: dict[str, Any] = {"DeviceIndex": 0, "DeleteOnTermination": True}
            if self.block.subnet_id:
                interface["SubnetId"] = self.block.subnet_id
            if self.block.security_group_ids:
                interface["Groups"] = list(self.block.security_group_ids)
            if self.block.associate_public_ip is not None:
                interface["AssociatePublicIpAddress"] = self.block.associate_public_ip
            params["NetworkInterfaces"] = [interface]
        if self.block.instance_profile:
            key = "Arn" if self.block.instance_profile.startswith("arn:") else "Name"
            params["IamInstanceProfile"] = {key: self.block.instance_profile}
        with self._classified(what, creating=True):
            response = self._ec2(region).run_instances(**params)
        raw = (response.get("Instances") or [{}])[0]
        instance = self._instance(raw, region)
        if instance is None:
            # The token's instance exists but has been terminated since: a retry of a claim
            # whose VM is already gone. Nothing to return; the claim must start over.
            raise FatalError(
                self.name,
                f"{what}: the instance made for this claim's client token is terminated",
                "the claim's VM was deleted; delete the NodeClaim so a new one is made",
            )
        log.info("created %s as %s", spec.name, instance.id)
        return instance

    def get(self, instance_id: str) -> Instance | None:
        region, native = self._native(instance_id)
        try:
            found = self._describe(region, f"get instance {instance_id}", InstanceIds=[native])
        except InstanceNotFoundError:
            return None
        for raw in found:
            if raw.get("InstanceId") == native:
                return self._instance(raw, region)
        return None

    def list_owned(self, cluster_id: str) -> list[Instance]:
        out: list[Instance] = []
        for region in dict.fromkeys([self.block.region, *self.block.regions]):
            found = self._describe(
                region,
                f"list instances of cluster {cluster_id!r} in {region}",
                Filters=[
                    {"Name": f"tag:{L.MANAGED}", "Values": ["true"]},
                    {"Name": f"tag:{L.CLUSTER}", "Values": [cluster_id]},
                    {"Name": "instance-state-name", "Values": [*_LIVE_STATES, "shutting-down"]},
                ],
            )
            out.extend(i for i in (self._instance(raw, region) for raw in found) if i is not None)
        return out

    def delete(self, instance_id: str) -> None:
        region, native = self._native(instance_id)
        what = f"delete instance {instance_id}"
        try:
            with self._classified(what):
                self._ec2(region).terminate_instances(InstanceIds=[native])
        except InstanceNotFoundError:
            log.info("instance %s already gone", instance_id)

    def instance_types(self) -> list[InstanceType]:
        region = self.block.region
        ec2 = self._ec2(region)
        out: list[InstanceType] = []
        with self._classified("list instance types"):
            offered: set[str] = set()
            for page in ec2.get_paginator("describe_instance_type_offerings").paginate(
                LocationType="region"
            ):
                offered.update(
                    str(o["InstanceType"]) for o in page.get("InstanceTypeOfferings") or []
                )
            for page in ec2.get_paginator("describe_instance_types").paginate(
                Filters=[{"Name": "current-generation", "Values": ["true"]}]
            ):
                for raw in page.get("InstanceTypes") or []:
                    name = str(raw["InstanceType"])
                    if offered and name not in offered:
                        continue
                    archs = (raw.get("ProcessorInfo") or {}).get("SupportedArchitectures") or []
                    arch = "arm64" if "arm64" in archs else "x86_64"
                    out.append(
                        InstanceType(
                            provider=self.name,
                            name=name,
                            vcpu=float((raw.get("VCpuInfo") or {}).get("DefaultVCpus") or 0),
                            memory_gib=float((raw.get("MemoryInfo") or {}).get("SizeInMiB") or 0)
                            / 1024,
                            arch=arch,
                            regions=[region],
                            # EC2 has no prices: the Pricing API is a separate service.
                            price_eur_per_hour=None,
                        )
                    )
        return out
