"""One settings model for the worker, the watcher and the CLI.

Sources, strongest first: keyword arguments (CLI flags), environment `CLOUDBURST_*`, then the
YAML file named by `CLOUDBURST_CONFIG_FILE` (keys are the field names below, without the
prefix: `temporal_address: ns.acct.tmprl.cloud:7233`). In a cluster the ConfigMap feeds the
environment and the Secret is mounted as files (`temporal_api_key_file`, `temporal_tls_cert`,
`temporal_tls_key`), so no secret sits in an environment variable or a manifest.

Who may reach what (docs/security.md) is read by the worker and the trigger alike:
`worker_namespace` (where the first-boot script Secrets live), `tenant_namespaces` (comma-
separated in the environment: the namespaces whose NodePools and NodeClasses are served and
whose Secrets the worker may read) and `allowed_endpoints` (JSON in the environment:
`{"hetzner": ["https://hetzner-proxy.internal/v1"]}`, the only endpoint overrides a
NodeClass may use).
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from enum import StrEnum
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from api.limits import DNS_LABEL_PATTERN
from api.messages import TASK_QUEUE, claim_task_queue
from api.nodepool.messages import PARTIAL_NODE_HOLD_S
from cluster.tenancy import (
    DEFAULT_WORKER_NAMESPACE,
    SERVICES,
    Tenancy,
    inventory_key,
    url_parts,
)

CONFIG_FILE_ENV = "CLOUDBURST_CONFIG_FILE"


try:
    RELEASE = version("cloudburst")  # the installed distribution's, as pyproject.toml names it
except PackageNotFoundError:  # run from a source tree that was never installed
    RELEASE = "unreleased"

# The ConfigMap (in the worker's namespace) the shipped manifests give the worker and the
# trigger their settings from (envFrom): `cloudburst explain` and `plan` read it too.
CONFIG_MAP = "cloudburst-config"
BATCH_IDLE_S = 0.2
BATCH_MAX_S = 0.5
PENDING_RESEND_S = 300.0


class WorkerQueues(StrEnum):
    """The task queues a worker process polls (`Settings.worker_queues`)."""

    ALL = "all"
    POOLS = "pools"
    CLAIMS = "claims"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CLOUDBURST_", extra="ignore")

    # --- Temporal -------------------------------------------------------------------------
    temporal_address: str = Field(
        default="127.0.0.1:7233", description="The Temporal frontend's host:port."
    )
    temporal_namespace: str = Field(default="default", description="The Temporal namespace.")
    task_queue: str = Field(
        default=TASK_QUEUE,
        description="The pools' task queue; claims run on `<task_queue>-claims` beside it.",
    )
    temporal_tls: bool | None = Field(
        default=None,
        description="TLS to Temporal. Unset: on when a client certificate or an API key is "
        "configured (Temporal Cloud needs it).",
    )
    temporal_tls_cert: Path | None = Field(
        default=None,
        description="mTLS client certificate (a PEM file); give the key too, or neither.",
    )
    temporal_tls_key: Path | None = Field(
        default=None, description="mTLS client key (a PEM file); give the certificate too."
    )
    temporal_tls_ca: Path | None = Field(
        default=None,
        description="CA of a self-hosted server's certificate (a PEM file). Unset: the "
        "system roots.",
    )
    temporal_tls_server_name: str | None = Field(
        default=None,
        description="Server name to verify, when it differs from the address' host (e.g. "
        "via a proxy).",
    )
    temporal_api_key: SecretStr | None = Field(
        default=None, description="API key (Temporal Cloud); `temporal_api_key_file` wins."
    )
    temporal_api_key_file: Path | None = Field(
        default=None,
        description="A file holding the API key, re-read on every connect so that a mounted "
        "Secret can rotate it; wins over `temporal_api_key`.",
    )
    payload_keyring_file: Path | None = Field(
        default=None,
        description="A file (a mounted Secret) of payload keys, one a line: `<key-id> <32 "
        "random bytes, base64>` (`cloudburst payload-key create` prints one). The first "
        "seals every payload this process writes (AES-256-GCM), every one opens; a payload "
        'none opens is refused (docs/security.md, "Payload keys"). Read at start. Unset: '
        "nothing sealed, every payload read as it is.",
    )
    payload_accept_unsealed: bool = Field(
        default=False,
        description="With a keyring, still read payloads no key sealed, as they are: for the "
        "histories written before the keyring, while those workflows drain (docs/security.md, "
        '"Payload keys"). Off: a signal carrying one is dropped, a workflow started with '
        "one fails.",
    )

    # --- Kubernetes -----------------------------------------------------------------------
    kubeconfig: Path | None = Field(
        default=None,
        description="Kubeconfig file. Unset: $KUBECONFIG, ~/.kube/config, or the in-cluster "
        "service account.",
    )
    kube_context: str | None = Field(
        default=None,
        description="The kubeconfig's context to use (as kubectl's --context). Unset: its "
        "current context.",
    )
    cluster_id: str = Field(
        default="cloudburst",
        pattern=DNS_LABEL_PATTERN,
        description="Written on every VM, so that garbage collection never touches another "
        "cluster's VMs. A lowercase DNS label: some clouds compare tags without case "
        "(DigitalOcean), where `Prod` and `prod` would be one cluster.",
    )
    max_concurrent_activities: int = Field(
        default=64,
        description="Activities (VM calls, drains, planning) each task queue's worker runs "
        "at once, each on a thread of its own.",
    )
    max_concurrent_local_activities: int = Field(
        default=64,
        ge=1,
        description="Local activities (a claim's bootstrap Secrets and NodeClaim mirror "
        "writes, run inside its workflow task) each task queue's worker runs at once, on "
        "threads of their own (`Settings.activity_threads`) so that activities in flight never hold "
        "a claim's workflow task open waiting for one. As many as activities: 1,000 claims "
        "scaled down at once queue their mirror writes here (that teardown took 404 s with "
        "16, 313 s with 64).",
    )
    eager_activities_per_workflow_task: int = Field(
        default=8,
        ge=1,
        description="Activities a workflow task's completion may start on this worker at "
        "once (eager execution: Temporal hands them back in its answer, no task queue "
        "between), from the activity slots above. A pool's round can start four (a plan "
        "beside the previous round's claim starts, Events and status): with the SDK's "
        "default, 3, the fourth went through the task queue and waited there 0.1-1.3 s in a "
        'burst (docs/benchmarks-history.md "Burst").',
    )
    max_cached_workflows: int = Field(
        default=100,
        ge=0,
        description="Workflows kept in memory between their tasks, by each task queue's "
        "worker: the claims' fills it, the pools' holds a few pools and schedules. Each "
        "cached claim holds about half a megabyte: the SDK's default of 1,000 put 1,000 "
        'live claims at 714-845 MB, 100 at ~300 MB (docs/benchmarks-history.md "Scale"). '
        "The price is a replay of a claim's ~100-event history when an evicted one next "
        "wakes, which idle claims rarely do; busy ones stay cached.",
    )
    max_concurrent_workflow_tasks: int = Field(
        default=16,
        ge=2,
        description="Workflow tasks each task queue's worker takes on at once (the SDK's "
        "default: 100). A task's timeout runs from the moment it is taken: 300 claims scaled "
        "down together each took one at the default, queued behind each other in one busy "
        'Python process and timed out (docs/benchmarks-history.md "Scale"). The rest wait '
        "in Temporal, where no timeout runs.",
    )
    workflow_task_pollers: int = Field(
        default=10,
        ge=2,
        description="Polls for workflow tasks each task queue's worker keeps open (only "
        "while a slot above is free), half on the queue all workers share, half on the "
        "worker's own sticky queue (`worker.main.SHARED_QUEUE_POLL_SHARE`). A workflow's "
        "first task always comes from the shared queue, and a burst starts dozens of claims "
        "at once; the SDK's default (5 polls, a fifth of them shared) is one poll there, "
        "which took a burst's first tasks one round trip at a time: up to 1.1-1.8 s from a "
        "claim's start to its first task, 0.5-0.9 s with these "
        '(docs/benchmarks-history.md "Burst").',
    )
    sticky_queue_timeout_s: float = Field(
        default=5.0,
        description="How long a workflow task waits on a dead worker's sticky queue before "
        "any worker may take it: part of how long a claim or a pool stalls when a worker "
        "is killed.",
    )
    worker_queues: WorkerQueues = Field(
        default=WorkerQueues.ALL,
        description="Which task queues this process polls: all; pools (pools, their "
        "planning, garbage collection, prices, and any claim started on that queue); or "
        "claims (`<task_queue>-claims`, where pools start their claims, and their "
        "activities): two Deployments, so that a thousand claims' work never shares a "
        "process with the pools' decisions. Both halves must run somewhere.",
    )
    worker_deployment: str | None = Field(
        default=None,
        min_length=1,
        description="Temporal Worker Deployment this worker belongs to (Worker Versioning; "
        "docs/upgrades.md): its workers take only the tasks of the deployment's current "
        "version, so a rolling upgrade never mixes releases on one workflow. Unset: an "
        "unversioned worker.",
    )
    worker_build_id: str = Field(
        default=RELEASE,
        min_length=1,
        description="This worker's version within `worker_deployment` (the release by "
        "default; an image built from an unreleased commit sets its own).",
    )
    allow_downgrade: bool = Field(
        default=False,
        description="Let this worker start although a newer release already ran on this "
        "cluster for this Temporal namespace (the ConfigMap `cloudburst-release`, "
        "worker/release_guard.py), which it refuses otherwise. Safe only when CHANGELOG.md "
        'says "Rollback: safe" for every release newer than this one: a patch\'s commands, '
        "or a payload this worker cannot read, in a claim's or pool's history make it fail "
        'its workflow tasks again and again (docs/upgrades.md "Rolling back").',
    )

    # --- the trigger ----------------------------------------------------------------------
    batch_idle_s: float = Field(
        default=BATCH_IDLE_S,
        gt=0,
        description="The trigger sends each pool its pending pods in batches: once no new "
        "pod came for this long, or `batch_max_s` after the batch's first (like Karpenter's "
        "BATCH_IDLE_DURATION, 1 s there).",
    )
    batch_max_s: float = Field(
        default=BATCH_MAX_S,
        gt=0,
        description="The longest a batch of pending pods waits from its first pod (like "
        "Karpenter's BATCH_MAX_DURATION). Karpenter's 1 s / 10 s make a burst's first pods "
        "wait for its last; ours are short, and the pool holds back only the node a part of "
        "the burst fills partly, up to `partial_node_hold_s`, for the rest to be packed "
        'with it (docs/benchmarks-history.md "Burst").',
    )
    pending_resend_s: float = Field(
        default=PENDING_RESEND_S,
        gt=0,
        description="Like an informer's resync period: this often, each pool with pods still "
        "waiting hears its whole pending set again, so a pod its pool never heard of (the "
        "pool's workflow terminated by hand, then started anew) is planned then, instead of "
        "at the trigger's next re-list. An idle pool hears nothing.",
    )
    partial_node_hold_s: float = Field(
        default=PARTIAL_NODE_HOLD_S,
        ge=0,
        le=60,
        description="How long a pool holds back a node that part of a burst fills only "
        "partly, for the rest of the burst to be packed with it. Bounded: it becomes a "
        "pool's durable timer, and a duration no timer can hold would fail the pool's "
        "workflow task, not this setting.",
    )
    pool_task_timeout_s: float = Field(
        default=10.0,
        ge=1,
        le=120,
        description="The workflow task timeout of the pools the trigger starts (their later "
        "runs keep it): how long a pool waits on a task whose worker died before another "
        "worker takes it over, so most of what a SIGKILL of the pool's worker costs. "
        "Temporal's default, 10 s, suits a worker that also runs claims (a loaded one misses "
        "a shorter timeout, and a pool task that times out again on every retry is a pool "
        "that stopped); with pools on workers of their own (`worker_queues`), 3 s was "
        'measured for pools of up to ~1,000 claims (deploy/README.md "Pools and claims '
        'apart").',
    )
    claim_task_timeout_s: float = Field(
        default=10.0,
        ge=1,
        le=120,
        description="The same for the claims those pools start (their first task runs the "
        "claim's Kubernetes calls as local activities): what a crash of a claims' worker "
        "costs a claim it was running a task of.",
    )
    trigger_id: str | None = Field(
        default=None,
        description="Triggers side by side share the nodes they tell claims about "
        "(trigger/peers.py): each holds a Lease named by this in `worker_namespace`. Unset: "
        "the host name (a pod's name, kept across restarts).",
    )
    csr_max_certificate_seconds: int = Field(
        default=24 * 3600,
        ge=600,
        le=366 * 24 * 3600,
        description="The longest kubelet certificate the CSR approver (`cloudburst "
        "csr-approver`) approves when a request asks for a lifetime (`expirationSeconds`); "
        "one that asks for none gets the signer's `--cluster-signing-duration` "
        "(docs/security.md advises 24h there too).",
    )
    trigger_lease_duration_s: int = Field(
        default=15,
        ge=3,
        le=300,
        description="How long the other triggers wait for one that stopped renewing its "
        "Lease (a crash) before they take its nodes: how late a claim may hear its node "
        "changed after a crash.",
    )

    # --- who may reach what (docs/security.md) --------------------------------------------
    worker_namespace: str = Field(
        default=DEFAULT_WORKER_NAMESPACE,
        description="The worker's own namespace: first-boot script Secrets live here (never "
        "in a tenant's).",
    )
    tenant_namespaces: Annotated[list[str] | None, NoDecode] = Field(
        default=None,
        description="Namespaces whose NodePools and NodeClasses are served (the worker reads "
        "Secrets there and nowhere else but its own namespace); elsewhere they get "
        "Ready=False NamespaceNotServed. Comma-separated in the environment. Unset: every "
        "namespace, for a single-tenant cluster; the shipped manifests always set it, to "
        "match the RoleBindings they grant.",
    )
    allowed_endpoints: dict[str, list[str]] = Field(
        default={},
        description="Endpoint overrides a NodeClass may use, per provider (and "
        '"tailscale"): URLs an override must equal or lie under. JSON in the environment: '
        '`{"hetzner": ["https://hetzner-proxy.internal/v1"]}`. Empty: the providers\' own '
        "APIs only.",
    )

    inventory_owners: dict[str, list[str]] = Field(
        default={},
        description="Which namespace may use each Redfish machine: namespace -> the machines "
        "it owns, each a BMC address (every system behind that host: `https://10.0.9.21`) or "
        "a machine name. Once set, a NodeClass listing a machine owned by another namespace, "
        "or by none, gets Ready=False MachineNotOwned. JSON in the environment: "
        '`{"team-a": ["https://10.0.9.21", "rack1-07"]}`. Empty: no owners (one tenant\'s '
        "inventory).",
    )

    machine_wipe_image_url: str = Field(
        default="",
        description="The wipe image a returned Redfish machine boots once (as virtual media) "
        "before anyone else may take it: it wipes every disk and powers the machine off when "
        'done, which the worker waits for (docs/security.md, "Bare metal between '
        'tenants"). A plain http(s) URL the BMCs can fetch. Unset: a returned machine is '
        "not wiped, and only the namespace that held it may take it again.",
    )

    # --- operations -----------------------------------------------------------------------
    health_port: int = Field(
        default=8081, description="/healthz and /readyz for the kubelet's probes; 0 disables."
    )
    metrics_port: int = Field(
        default=9464,
        description="Our OpenTelemetry metrics as Prometheus text (/metrics); 0 disables.",
    )
    sdk_metrics_port: int = Field(
        default=9465,
        description="The Temporal SDK's own metrics (Rust core), on their own Prometheus "
        "endpoint; 0 disables.",
    )
    tracing: bool = Field(
        default=False,
        description="Spans through Temporal's TracingInterceptor; also on whenever "
        "OTEL_EXPORTER_OTLP_ENDPOINT is set (then exported by OTLP/HTTP).",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="text, or json: one JSON object a line with the workflow id, claim and "
        "activity.",
    )
    log_level: str = Field(default="INFO", description="The root logger's level.")

    # --- the codec server (`cloudburst codec-server`, worker/codec_server.py) -------------
    codec_token_file: Path | None = Field(
        default=None,
        description="A file (a mounted Secret) whose content every request to the codec "
        "server must carry as `Authorization: Bearer <token>`, read on every request so that "
        "the Secret rotates. A file not there (the Deployment's optional Secret, not "
        "created) means no token until it appears.",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources = [init_settings, env_settings, dotenv_settings, file_secret_settings]
        config_file = os.environ.get(CONFIG_FILE_ENV)
        if config_file:
            path = Path(config_file)
            if not path.is_file():
                raise FileNotFoundError(f"{CONFIG_FILE_ENV}={config_file}: no such file")
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        return tuple(sources)

    @field_validator("tenant_namespaces", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("tenant_namespaces")
    @classmethod
    def _namespace_names(cls, value: list[str] | None) -> list[str] | None:
        for name in value or []:
            if not re.match(DNS_LABEL_PATTERN, name):
                raise ValueError(f"{name!r} is not a namespace name")
        return value

    @field_validator("allowed_endpoints")
    @classmethod
    def _endpoint_urls(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        return checked_allowed_endpoints(value)

    @field_validator("inventory_owners")
    @classmethod
    def _inventory_owners(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        return checked_inventory_owners(value)

    @field_validator("machine_wipe_image_url")
    @classmethod
    def _machine_wipe_image_url(cls, value: str) -> str:
        if value and url_parts(value) is None:
            raise ValueError(f"{value!r} is not a plain http(s) URL a BMC can boot")
        return value

    def tenancy(self) -> Tenancy:
        """What the worker's activities and the trigger enforce (cluster/tenancy.py)."""
        return Tenancy(
            worker_namespace=self.worker_namespace,
            namespaces=None
            if self.tenant_namespaces is None
            else frozenset(self.tenant_namespaces),
            allowed_endpoints={k: tuple(v) for k, v in self.allowed_endpoints.items()},
            inventory_owners={k: tuple(v) for k, v in self.inventory_owners.items()},
            machine_wipe_image_url=self.machine_wipe_image_url or None,
        )

    def pool_task_timeout(self) -> timedelta:
        return timedelta(seconds=self.pool_task_timeout_s)

    def claim_task_timeout(self) -> timedelta:
        return timedelta(seconds=self.claim_task_timeout_s)

    def polled_task_queues(self) -> list[str]:
        """The task queues this process's workers poll (`worker.main.build_workers`)."""
        pools, claims = self.task_queue, claim_task_queue(self.task_queue)
        return {
            WorkerQueues.ALL: [pools, claims],
            WorkerQueues.POOLS: [pools],
            WorkerQueues.CLAIMS: [claims],
        }[self.worker_queues]

    def activity_threads(self) -> int:
        """The activity thread pool's size: every activity slot and every local one, of each
        task queue's worker (`worker.main.build_workers`); threads start only when needed."""
        slots = self.max_concurrent_activities + self.max_concurrent_local_activities
        return len(self.polled_task_queues()) * slots

    def api_key(self) -> str | None:
        """The API key from its file (re-read on every connect) or from the value."""
        if self.temporal_api_key_file is not None:
            return self.temporal_api_key_file.read_text().strip() or None
        return self.temporal_api_key.get_secret_value() if self.temporal_api_key else None

    def tls_enabled(self) -> bool:
        if self.temporal_tls is not None:
            return self.temporal_tls
        return bool(
            self.temporal_tls_cert
            or self.temporal_tls_ca
            or self.temporal_api_key
            or self.temporal_api_key_file
        )


def checked_allowed_endpoints(value: dict[str, list[str]]) -> dict[str, list[str]]:
    """`allowed_endpoints` as given, once each service is one and each URL a plain http(s)
    one; ValueError naming the first that is not."""
    for service, urls in value.items():
        if service not in SERVICES:
            raise ValueError(f"{service!r} is not one of {', '.join(SERVICES)}")
        for url in urls:
            if url_parts(url) is None:
                raise ValueError(
                    f"{service}: {url!r} is not a plain http(s) URL (scheme, host, optional "
                    "port and path; no user info, query or fragment; a path whose meaning is "
                    "the server's, with an encoded /, \\ or %, neither)"
                )
    return value


def checked_inventory_owners(value: dict[str, list[str]]) -> dict[str, list[str]]:
    """`inventory_owners` as given, once each key is a namespace name, each machine a name or
    a plain http(s) BMC address, and no machine given to two namespaces; ValueError naming
    the first that is not."""
    given: dict[str, str] = {}
    for namespace, machines in value.items():
        if not re.match(DNS_LABEL_PATTERN, namespace):
            raise ValueError(f"{namespace!r} is not a namespace name")
        for machine in machines:
            if "://" in machine and url_parts(machine) is None:
                raise ValueError(f"{namespace}: {machine!r} is not a plain http(s) BMC address")
            key = inventory_key(machine)
            if given.setdefault(key, namespace) != namespace:
                raise ValueError(f"{machine!r} is given to two namespaces; a machine has one")
    return value
