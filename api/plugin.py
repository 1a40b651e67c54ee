"""The plug-in provider contract, version 1: the five provider operations over HTTP + JSON.

A provider Cloudburst does not ship (KubeVirt, Terraform, a homelab's machines) is a small
HTTP server that answers these messages; NodeClass `spec.plugin.endpoint` points at it and
`activities/providers/plugin.py` calls it. These models are the one source of the contract:
`api/plugin_contract.schema.json` (JSON Schema 2020-12) is generated from them
(`write_schema`; tests/unit/test_plugin_contract.py checks it is current and rewrites it
with CLOUDBURST_UPDATE_GOLDEN=1);
docs/providers.md ("Plug-in providers") says what each operation must do.

    POST   /v1/instances              CreateInstanceRequest -> Instance (201 made, 200 had it)
    GET    /v1/instances/{id}         -> Instance, or 404 kind notFound
    GET    /v1/instances?cluster=<id> -> InstanceList (every instance of that cluster)
    DELETE /v1/instances/{id}         -> 202 Instance (stopping), 204/200, or 404 notFound
    GET    /v1/instance-types         -> InstanceTypeList

Every error answer carries `ErrorAnswer`. Fields are camelCase on the wire; both sides
ignore fields they do not know, so that a later v1 may add optional ones.

Every request names the tenant it is for: header `Cloudburst-Namespace`, the namespace of the
claim (of the NodeClass whose token it sends). A plug-in that serves several tenants keeps a
credential per namespace — its operator's configuration says which token serves which
namespace, never the NodeClass — refuses a call whose token does not serve the namespace it
names (403 `fatal`), and answers each namespace's instances to that namespace alone: a list
holds only its instances, another's id is 404 `notFound` (examples/plugin-provider).
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.json_schema import models_json_schema

from api.limits import (
    DNS_LABEL_PATTERN,
    LABEL_VALUE_PATTERN,
    MAX_LABELS,
    MAX_MEMORY_GIB,
    MAX_NODES,
    MAX_URL_LENGTH,
    MAX_VCPU,
)
from api.nodepool import ON_DEMAND, CapacityType

VERSION: Final = "v1"
# The tenant a request is for: the claim's namespace (a Kubernetes namespace name).
NAMESPACE_HEADER: Final = "Cloudburst-Namespace"
PREFIX: Final = f"/{VERSION}"
SCHEMA_PATH: Final = Path(__file__).with_name("plugin_contract.schema.json")
SCHEMA_ID: Final = "https://cloudburst.io/schemas/plugin-contract/v1.json"
# A node's providerID: `plugin:///<region>/<id>`, what the claim matches its node by.
PROVIDER_ID_SCHEME: Final = "plugin"
# Where the first-boot script reads that providerID on the machine, written there by the
# plug-in's own first-boot handling (a cloud-init vendor-data or multipart part, the image).
PROVIDER_ID_FILE: Final = "/etc/cloudburst/provider-id"
# The first-boot script is at most 32 KiB (activities/bootstrap.py); room for growth.
MAX_USER_DATA_LENGTH: Final = 64 * 1024
MAX_INSTANCES: Final = MAX_NODES
MAX_INSTANCE_TYPES: Final = 1000
MAX_REGIONS: Final = 64

# A native id, a region, an instance type: one providerID path segment and a valid label
# value (letters, digits, '-', '_', '.'; alphanumeric at both ends; at most 63).
Segment = Annotated[str, Field(min_length=1, max_length=63, pattern=LABEL_VALUE_PATTERN)]
ClaimName = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]
Labels = Annotated[dict[str, str], Field(max_length=MAX_LABELS)]


class ContractModel(BaseModel):
    """camelCase on the wire; unknown fields ignored (a later v1 may add optional ones)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        serialize_by_alias=True,
    )


class InstanceState(StrEnum):
    PENDING = "pending"  # accepted, not powered on yet
    RUNNING = "running"  # powered on: its first-boot script runs (or ran)
    STOPPING = "stopping"  # deletion under way
    TERMINATED = "terminated"  # off for good; listed until the plug-in forgets it


class CreateInstanceRequest(ContractModel):
    """`POST /v1/instances`: make one machine for one NodeClaim, idempotent by `name`.

    `userData` is the first-boot script (a shell script that joins the cluster). It holds a
    join token (and possibly a Tailscale key): a secret. The plug-in hands it to the machine
    unchanged and never logs it, stores it only where the machine reads it, and removes it
    with the machine.
    """

    name: ClaimName = Field(
        description="The NodeClaim's name: the node's name, the machine's hostname and the "
        "idempotency key (a second create of a name the plug-in has answers that instance)."
    )
    cluster_id: Segment = Field(
        alias="clusterID", description="The Cloudburst installation the machine is for."
    )
    node_pool: ClaimName = Field(description="The NodePool the claim belongs to.")
    region: Segment | None = Field(
        default=None, description="Where to make it; null: the plug-in's own default region."
    )
    zone: Segment | None = None
    instance_type: Segment = Field(description="One of the plug-in's instance types.")
    capacity_type: CapacityType = Field(
        default=ON_DEMAND,
        description="on-demand in this version: Cloudburst asks plug-ins for no spot machines.",
    )
    image: Annotated[str, Field(max_length=MAX_URL_LENGTH)] | None = Field(
        default=None, description="NodeClass spec.plugin.image, when set: the plug-in's to read."
    )
    labels: Labels = Field(
        default_factory=dict,
        description="Ownership labels (cloudburst.io/managed, /cluster, /nodepool, "
        "/nodeclaim): kept with the instance and answered back unchanged.",
    )
    user_data: Annotated[str, Field(max_length=MAX_USER_DATA_LENGTH)] = Field(
        description="The first-boot script, UTF-8 text, byte for byte as the machine must "
        "run it. A secret: never logged."
    )


class Instance(ContractModel):
    """One machine, as every instance operation answers it."""

    id: Segment = Field(
        description="The plug-in's own id of the machine (stable for its life). The node's "
        "providerID is plugin:///<region>/<id>."
    )
    name: ClaimName = Field(description="The name it was created with.")
    region: Segment
    instance_type: Segment
    state: InstanceState
    labels: Labels = Field(
        default_factory=dict, description="The labels it was created with, unchanged."
    )
    capacity_type: CapacityType = ON_DEMAND
    created_at: datetime | None = Field(default=None, description="RFC 3339.")
    private_ip: Annotated[str, Field(max_length=64)] | None = Field(default=None, alias="privateIP")
    public_ip: Annotated[str, Field(max_length=64)] | None = Field(default=None, alias="publicIP")


class InstanceList(ContractModel):
    """`GET /v1/instances?cluster=<id>`: every instance whose clusterID is `<id>`, in one
    answer (no paging), the terminated ones it still lists included."""

    instances: list[Instance] = Field(max_length=MAX_INSTANCES)


class InstanceType(ContractModel):
    """One kind of machine the plug-in can make."""

    name: Segment
    vcpu: float = Field(gt=0, le=MAX_VCPU)
    memory_gib: float = Field(gt=0, le=MAX_MEMORY_GIB, alias="memoryGiB")
    # api.nodepool.ARCHITECTURES (a test keeps the two alike).
    arch: Literal["x86_64", "amd64", "arm64", "aarch64"]
    regions: list[Segment] = Field(
        min_length=1, max_length=MAX_REGIONS, description="Where it can be made."
    )
    price_eur_per_hour: float | None = Field(
        default=None,
        ge=0,
        le=10_000,
        description="What an hour costs, for ranking; null: unpriced (owned hardware).",
    )
    available: int | None = Field(
        default=None,
        ge=0,
        le=MAX_NODES,
        description="How many more can be made now (free machines, room on the hosts); "
        "null: no limit the plug-in knows of.",
    )


class InstanceTypeList(ContractModel):
    """`GET /v1/instance-types`."""

    instance_types: list[InstanceType] = Field(max_length=MAX_INSTANCE_TYPES)


class ErrorKind(StrEnum):
    """What Cloudburst does next: the provider errors of activities/providers/base.py."""

    CAPACITY = "capacity"  # none to be had now: try the claim's next offering
    RETRYABLE = "retryable"  # the same call may succeed later
    FATAL = "fatal"  # no retry helps: `fix` says what to change
    NOT_FOUND = "notFound"  # 404 only: the instance does not exist (any more)


class PluginError(ContractModel):
    kind: ErrorKind
    # Unbounded here: a long message is shortened by the reader, not refused with the kind.
    message: str = Field(description="What happened, in a line; never a secret.")
    retry_after_seconds: float | None = Field(
        default=None, ge=0, le=3600, description="retryable: when to try again."
    )
    fix: str | None = Field(
        default=None, description="fatal: what the operator changes (a field, a Secret)."
    )


class ErrorAnswer(ContractModel):
    """The body of every answer that is not a success."""

    error: PluginError


# HTTP status each kind is answered with (the kind in the body decides; the status is for
# proxies, logs and clients that read no body).
ERROR_STATUS: Final[dict[ErrorKind, tuple[int, ...]]] = {
    ErrorKind.CAPACITY: (503,),
    ErrorKind.RETRYABLE: (429, 500, 502, 503, 504),
    ErrorKind.FATAL: (400, 401, 403, 404, 409, 422),
    ErrorKind.NOT_FOUND: (404,),
}

MESSAGES: Final[tuple[type[ContractModel], ...]] = (
    CreateInstanceRequest,
    Instance,
    InstanceList,
    InstanceTypeList,
    ErrorAnswer,
)

# The operations, as the schema document lists them (`x-operations`).
OPERATIONS: Final[list[dict[str, Any]]] = [
    {
        "operation": "create",
        "method": "POST",
        "path": f"{PREFIX}/instances",
        "request": "CreateInstanceRequest",
        "answers": {"201": "Instance", "200": "Instance"},
    },
    {
        "operation": "get",
        "method": "GET",
        "path": f"{PREFIX}/instances/{{id}}",
        "answers": {"200": "Instance", "404": "ErrorAnswer"},
    },
    {
        "operation": "list",
        "method": "GET",
        "path": f"{PREFIX}/instances",
        "query": {"cluster": "the clusterID whose instances to list (required)"},
        "answers": {"200": "InstanceList"},
    },
    {
        "operation": "delete",
        "method": "DELETE",
        "path": f"{PREFIX}/instances/{{id}}",
        "answers": {"202": "Instance", "200": "Instance", "204": None, "404": "ErrorAnswer"},
    },
    {
        "operation": "instanceTypes",
        "method": "GET",
        "path": f"{PREFIX}/instance-types",
        "answers": {"200": "InstanceTypeList"},
    },
]


def contract_schema() -> dict[str, Any]:
    """The contract as one JSON Schema document: every message under `$defs`, the
    operations and the error statuses beside them."""
    _, defs = models_json_schema(
        [(model, "validation") for model in MESSAGES],
        ref_template="#/$defs/{model}",
        by_alias=True,
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": f"Cloudburst provider plug-in contract {VERSION}",
        "description": (
            "The five provider operations a plug-in serves over HTTP + JSON under "
            f"{PREFIX}/ (docs/providers.md, Plug-in providers). Authentication: "
            "`Authorization: Bearer <token>` when the NodeClass names a token Secret. "
            f"Tenancy: every request carries `{NAMESPACE_HEADER}: <namespace>`, the claim's "
            "namespace; a token serves the namespaces the plug-in's operator says (403 fatal "
            "for any other), and each namespace sees only its own instances (another's id: "
            "404 notFound). "
            "Every non-2xx answer carries ErrorAnswer. Generated from api/plugin.py."
        ),
        "x-operations": OPERATIONS,
        "x-error-statuses": {kind.value: list(codes) for kind, codes in ERROR_STATUS.items()},
        "x-provider-id": f"{PROVIDER_ID_SCHEME}:///<region>/<id>, read by the first-boot "
        f"script from {PROVIDER_ID_FILE}",
        **defs,
    }


def schema_text() -> str:
    return json.dumps(contract_schema(), indent=2, sort_keys=False) + "\n"


def write_schema(path: Path = SCHEMA_PATH) -> Path:
    path.write_text(schema_text(), encoding="utf-8")
    return path
