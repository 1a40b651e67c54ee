"""What `cloudburst doctor` asks the cluster and Temporal, recorded as facts (`facts.py`).

Everything here reads, with three harmless exceptions, each creating nothing: a
SubjectAccessReview per right (the API server's answer to "may this ServiceAccount ...?"),
a TokenReview of a live bootstrap token it finds (is the token authenticated?), and Pods
created with `dryRun=All` (which admission sees, and nothing stores). The provider calls
list this cluster's VMs. A step that cannot run records its error under its check's name.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import ssl
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, cast
from urllib.parse import urlsplit

import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource
from temporalio.exceptions import ApplicationError

from activities.credentials import read_provider_credential
from activities.planning.config import PlanningConfig
from activities.prices.price_store import live_catalog, read_store, statuses
from activities.providers import provider_class
from activities.providers.base import ProviderError
from api import labels
from api.nodeclass import NodeClass
from cli.commands.crds import GROUP, KINDS, VERSION, crd
from cli.doctor.facts import (
    AccessFact,
    AdmissionFact,
    BootstrapAuthFact,
    ClusterInfoFact,
    CrdFact,
    CredentialFact,
    DeploymentFact,
    Facts,
    JoinAddressFact,
    PriceFact,
    TemporalFact,
)
from cli.doctor.shipped import (
    CONFIG_MAP,
    CSR_APPROVER_DEPLOYMENT,
    KUBEADM_AUTOAPPROVE_BINDING,
    KUBEADM_RENEWAL_BINDING,
    NEEDS,
    TRIGGER_DEPLOYMENT,
    WORKER_DEPLOYMENT,
    Need,
    tenant_need,
)
from cluster.tenancy import NODE_SELECTOR_ANNOTATION, TOLERATIONS_WHITELIST_ANNOTATION
from planner.catalog import Catalog, stale_price_notes
from worker.settings import Settings

# The pools' own worker of deploy/components/split-workers, checked when it is there.
POOL_WORKER_DEPLOYMENT = "cloudburst-pool-worker"
BOOTSTRAP_TOKEN_TYPE = "bootstrap.kubernetes.io/token"
# A tenant no namespace is: the dry-run Pods claim its toleration and its nodes.
NOBODY = "cloudburst-doctor-no-tenant"
DRY_RUN_POD = "cloudburst-doctor-dry-run"
# What each plugin answers a Pod it refuses (kube-apiserver's admission plugins' messages).
REFUSALS = {
    "PodTolerationRestriction": "conflict with its namespace whitelist",
    "PodNodeSelector": "conflicts with its namespace node label selector",
}
NETWORK_TIMEOUT_S = 10.0
# SubjectAccessReviews in flight at once (the client's connection pool holds as many).
REVIEWS_AT_ONCE = 8


def expected_crds() -> dict[str, dict[str, Any]]:
    """CRD name -> version -> openAPIV3Schema, as this release generates them."""
    out: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        spec = crd(kind)
        out[spec["metadata"]["name"]] = {
            v["name"]: v["schema"]["openAPIV3Schema"] for v in spec["spec"]["versions"]
        }
    return out


def installed_settings(data: dict[str, str]) -> Settings:
    """The worker's and trigger's settings as ConfigMap cloudburst-config gives them (their
    environment), read as `Settings` reads its environment."""
    fields = Settings.model_fields
    values: dict[str, Any] = {}
    for key, value in data.items():
        name = key.removeprefix("CLOUDBURST_").lower()
        if not key.startswith("CLOUDBURST_") or name not in fields:
            continue
        annotation = str(fields[name].annotation)
        values[name] = json.loads(value) if annotation.startswith("dict") else value
    return _InstalledSettings.model_validate(values)


class _InstalledSettings(Settings):
    """Settings from the values given alone: this shell's CLOUDBURST_* environment and
    config file are not the install's."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


class Gatherer:
    """The facts of one install, gathered with an API client whose user may read the cluster
    (an operator's kubeconfig)."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        install_namespace: str,
        temporal_address: str | None,
        local: Settings,
    ) -> None:
        self.api_client = api_client
        self.namespace = install_namespace
        self.temporal_address = temporal_address
        self.local = local
        self.core = k8s.CoreV1Api(api_client)
        self.apps = k8s.AppsV1Api(api_client)
        self.custom = k8s.CustomObjectsApi(api_client)
        self.authz = k8s.AuthorizationV1Api(api_client)
        self.authn = k8s.AuthenticationV1Api(api_client)
        self.rbac = k8s.RbacAuthorizationV1Api(api_client)
        self.networking = k8s.NetworkingV1Api(api_client)

    def gather(self, now: datetime | None = None) -> Facts:
        facts = Facts(install_namespace=self.namespace, now=now or datetime.now(UTC))
        config: dict[str, str] = {}
        try:
            config = dict(
                self.core.read_namespaced_config_map(CONFIG_MAP, self.namespace).data or {}
            )
            facts.config_found = True
        except ApiException as err:
            if err.status != 404:
                raise
        installed: Settings | None
        try:
            installed = installed_settings(config)
        except (ValidationError, ValueError) as err:
            installed = None
            facts.errors["config"] = f"ConfigMap {self.namespace}/{CONFIG_MAP}: {err}"
        node_classes = self._node_classes(facts)
        steps: list[tuple[str, Callable[[], None]]] = [
            ("crds", lambda: self._crds(facts)),
            ("rbac", lambda: self._access(facts, installed)),
            ("worker", lambda: self._workers(facts)),
            ("trigger", lambda: self._trigger(facts)),
            ("temporal", lambda: self._temporal(facts, installed, config)),
            ("cluster-info", lambda: self._cluster_info(facts)),
            ("join-address", lambda: self._join_addresses(facts, node_classes)),
            ("bootstrap-token-auth", lambda: self._bootstrap_auth(facts)),
            ("csr-approver", lambda: self._csr_approval(facts)),
            ("admission-plugins", lambda: self._admission(facts, installed)),
            ("network-policies", lambda: self._network_policies(facts)),
            ("credentials", lambda: self._credentials(facts, installed, node_classes)),
            ("prices", lambda: self._prices(facts, config, node_classes)),
        ]
        for name, step in steps:
            try:
                step()
            except Exception as err:  # the client raises several unrelated types
                facts.errors[name] = _reason(err)
        return facts

    # --- each step ---------------------------------------------------------------------------

    def _crds(self, facts: Facts) -> None:
        for name in expected_crds():
            try:
                raw = cast(
                    dict[str, Any],
                    self.custom.get_cluster_custom_object(
                        "apiextensions.k8s.io", "v1", "customresourcedefinitions", name
                    ),
                )
            except ApiException as err:
                if err.status != 404:
                    raise
                facts.crds.append(CrdFact(name, None))
                continue
            versions = {
                v["name"]: (v.get("schema") or {}).get("openAPIV3Schema") or {}
                for v in raw["spec"]["versions"]
                if v.get("served")
            }
            facts.crds.append(CrdFact(name, versions))

    def _access(self, facts: Facts, installed: Settings | None) -> None:
        needs: list[Need] = list(NEEDS)
        for tenant in (installed.tenant_namespaces or []) if installed else []:
            needs.append(tenant_need(tenant))
        asks = [
            (need, need.namespace(self.namespace), verb, name)
            for need in needs
            for verb in need.verbs
            for name in need.names or (None,)
        ]
        # One review a right, a round trip each: a few at once.
        with ThreadPoolExecutor(max_workers=REVIEWS_AT_ONCE) as pool:
            answers = list(pool.map(lambda ask: self._may(*ask), asks))
        facts.access.extend(
            AccessFact(
                account=need.account,
                namespace=namespace,
                group=need.group,
                resource=need.resource,
                verb=verb,
                name=name,
                allowed=allowed,
            )
            for (need, namespace, verb, name), allowed in zip(asks, answers, strict=True)
        )

    def _may(self, need: Need, namespace: str | None, verb: str, name: str | None) -> bool:
        resource, _, subresource = need.resource.partition("/")
        review = k8s.V1SubjectAccessReview(
            spec=k8s.V1SubjectAccessReviewSpec(
                user=f"system:serviceaccount:{self.namespace}:{need.account}",
                groups=[
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{self.namespace}",
                    "system:authenticated",
                ],
                resource_attributes=k8s.V1ResourceAttributes(
                    namespace=namespace,
                    group=need.group,
                    resource=resource,
                    subresource=subresource or None,
                    verb=verb,
                    name=name,
                ),
            )
        )
        answer = self.authz.create_subject_access_review(review)
        return bool(answer.status and answer.status.allowed)

    def _deployment(self, name: str) -> DeploymentFact:
        try:
            found = self.apps.read_namespaced_deployment(name, self.namespace)
        except ApiException as err:
            if err.status != 404:
                raise
            return DeploymentFact(name, self.namespace, None)
        status = found.status
        return DeploymentFact(
            name,
            self.namespace,
            desired=found.spec.replicas if found.spec.replicas is not None else 1,
            ready=(status.ready_replicas or 0) if status else 0,
            updated=(status.updated_replicas or 0) if status else 0,
        )

    def _workers(self, facts: Facts) -> None:
        facts.workers.append(self._deployment(WORKER_DEPLOYMENT))
        pools = self._deployment(POOL_WORKER_DEPLOYMENT)
        if pools.desired is not None:
            facts.workers.append(pools)

    def _trigger(self, facts: Facts) -> None:
        facts.trigger = self._deployment(TRIGGER_DEPLOYMENT)

    def _csr_approval(self, facts: Facts) -> None:
        facts.csr_approver = self._deployment(CSR_APPROVER_DEPLOYMENT)
        facts.autoapprove_binding = self._binding_exists(KUBEADM_AUTOAPPROVE_BINDING)
        facts.renewal_binding = self._binding_exists(KUBEADM_RENEWAL_BINDING)

    def _binding_exists(self, name: str) -> bool:
        try:
            self.rbac.read_cluster_role_binding(name)
        except ApiException as err:
            if err.status != 404:
                raise
            return False
        return True

    def _temporal(self, facts: Facts, installed: Settings | None, config: dict[str, str]) -> None:
        """Reached from here (--temporal-address, else $CLOUDBURST_TEMPORAL_ADDRESS, else the
        installed address), with TLS as this shell's settings say or, unset, as the install's."""
        if installed is None:
            raise ValueError(f"ConfigMap {self.namespace}/{CONFIG_MAP} is unreadable")
        address = (
            self.temporal_address
            or (
                self.local.temporal_address if "CLOUDBURST_TEMPORAL_ADDRESS" in os.environ else None
            )
            or installed.temporal_address
        )
        updates: dict[str, Any] = {
            "temporal_address": address,
            "temporal_namespace": installed.temporal_namespace,
        }
        if self.local.temporal_tls is None and not self.local.tls_enabled():
            updates["temporal_tls"] = installed.tls_enabled()
        settings = self.local.model_copy(update=updates)
        error = asyncio.run(_reach_temporal(settings))
        facts.temporal = TemporalFact(
            address=address,
            namespace=installed.temporal_namespace,
            error=error,
            installed_tls=installed.tls_enabled(),
            installed_address=installed.temporal_address,
        )

    def _cluster_info(self, facts: Facts) -> None:
        try:
            found = self.core.read_namespaced_config_map("cluster-info", "kube-public")
        except ApiException as err:
            if err.status != 404:
                raise
            facts.cluster_info = ClusterInfoFact(found=False)
            return
        anonymous = self._anonymous_may_read_cluster_info()
        try:
            document = yaml.safe_load((found.data or {})["kubeconfig"])
            cluster = document["clusters"][0]["cluster"]
            server = str(cluster["server"])
            ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        except (KeyError, IndexError, TypeError, ValueError, yaml.YAMLError) as err:
            facts.cluster_info = ClusterInfoFact(
                found=True, problem=f"its `kubeconfig` names no server and CA ({err!r})"
            )
            return
        facts.cluster_info = ClusterInfoFact(
            found=True,
            server=server,
            anonymous_may_read=anonymous,
            reach_error=_tls_handshake(server, ca),
        )

    def _anonymous_may_read_cluster_info(self) -> bool:
        review = k8s.V1SubjectAccessReview(
            spec=k8s.V1SubjectAccessReviewSpec(
                user="system:anonymous",
                groups=["system:unauthenticated"],
                resource_attributes=k8s.V1ResourceAttributes(
                    namespace="kube-public", resource="configmaps", verb="get", name="cluster-info"
                ),
            )
        )
        answer = self.authz.create_subject_access_review(review)
        return bool(answer.status and answer.status.allowed)

    def _node_classes(self, facts: Facts) -> list[tuple[str, NodeClass | str]]:
        """Every NodeClass as `namespace/name` and its model, or why it does not validate."""
        try:
            raw = cast(
                dict[str, Any],
                self.custom.list_cluster_custom_object(GROUP, VERSION, "nodeclasses"),
            )
        except ApiException as err:
            facts.errors["credentials"] = facts.errors["join-address"] = _reason(err)
            return []
        out: list[tuple[str, NodeClass | str]] = []
        for item in raw.get("items") or []:
            meta = item.get("metadata") or {}
            where = f"{meta.get('namespace', '?')}/{meta.get('name', '?')}"
            try:
                out.append((where, NodeClass.model_validate(item)))
            except ValidationError as err:
                out.append(
                    (where, f"invalid ({err.error_count()} error(s)): {err.errors()[0]['msg']}")
                )
        return out

    def _join_addresses(
        self, facts: Facts, node_classes: list[tuple[str, NodeClass | str]]
    ) -> None:
        for where, node_class in node_classes:
            if isinstance(node_class, NodeClass):
                facts.join_addresses.append(
                    JoinAddressFact(where, node_class.spec.join.host_api_server)
                )

    def _bootstrap_auth(self, facts: Facts) -> None:
        facts.bootstrap_auth = self._review_a_live_token(facts.now) or self._apiserver_flags()

    def _review_a_live_token(self, now: datetime) -> BootstrapAuthFact | None:
        try:
            listed = self.core.list_namespaced_secret(
                "kube-system", field_selector=f"type={BOOTSTRAP_TOKEN_TYPE}"
            )
        except ApiException as err:
            if err.status == 403:
                return None
            raise
        for secret in listed.items or []:
            data = {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}
            if data.get("usage-bootstrap-authentication") != "true":
                continue
            expires = data.get("expiration")
            if expires and datetime.fromisoformat(expires.replace("Z", "+00:00")) <= now:
                continue
            token = f"{data.get('token-id')}.{data.get('token-secret')}"
            review = self.authn.create_token_review(
                k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=token))
            )
            status = review.status
            user = status.user.username if status and status.user else None
            authenticated = bool(status and status.authenticated)
            return BootstrapAuthFact(
                "token-review",
                authenticated and bool(user and user.startswith("system:bootstrap:")),
                f"TokenReview of the live token {_name(secret)}: "
                + (f"authenticated as {user}" if authenticated else "not authenticated"),
            )
        return None

    def _apiserver_flags(self) -> BootstrapAuthFact:
        pods = self.core.list_namespaced_pod(
            "kube-system", label_selector="component=kube-apiserver"
        )
        for pod in pods.items or []:
            for container in pod.spec.containers if pod.spec else []:
                args = [*(container.command or []), *(container.args or [])]
                enabled = "--enable-bootstrap-token-auth=true" in args
                return BootstrapAuthFact(
                    "apiserver-flags",
                    enabled,
                    f"Pod kube-system/{_name(pod)} "
                    + ("has" if enabled else "lacks")
                    + " --enable-bootstrap-token-auth=true",
                )
        return BootstrapAuthFact(
            "unknown",
            None,
            "no live bootstrap token in kube-system to review, and no kube-apiserver Pod "
            "whose flags say",
        )

    def _admission(self, facts: Facts, installed: Settings | None) -> None:
        if installed is None:
            raise ValueError(f"ConfigMap {self.namespace}/{CONFIG_MAP} is unreadable")
        facts.tenant_namespaces = list(installed.tenant_namespaces or [])
        for tenant in facts.tenant_namespaces:
            meta = self.core.read_namespace(tenant).metadata
            annotations = (meta.annotations if meta else None) or {}
            facts.admission.append(
                self._dry_run(
                    tenant,
                    "PodTolerationRestriction",
                    TOLERATIONS_WHITELIST_ANNOTATION in annotations,
                    {
                        "tolerations": [
                            {
                                "key": labels.TENANT_TAINT,
                                "operator": "Equal",
                                "value": NOBODY,
                                "effect": "NoSchedule",
                            }
                        ]
                    },
                )
            )
            if NODE_SELECTOR_ANNOTATION in annotations:
                facts.admission.append(
                    self._dry_run(
                        tenant,
                        "PodNodeSelector",
                        True,
                        {"nodeSelector": {labels.TENANT_LABEL: NOBODY}},
                    )
                )

    def _dry_run(
        self, namespace: str, plugin: str, annotated: bool, spec: dict[str, Any]
    ) -> AdmissionFact:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": DRY_RUN_POD, "namespace": namespace},
            "spec": {
                "automountServiceAccountToken": False,
                "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}],
                **spec,
            },
        }
        try:
            self.core.create_namespaced_pod(namespace, cast(Any, pod), dry_run="All")
        except ApiException as err:
            message = _api_message(err)
            # PodNodeSelector answers 403; PodTolerationRestriction's plain error comes back
            # as a 500: the plugin's own words say which refused.
            if REFUSALS[plugin] in message:
                return AdmissionFact(namespace, plugin, annotated, refused=True, message=message)
            raise
        return AdmissionFact(namespace, plugin, annotated, refused=False)

    def _network_policies(self, facts: Facts) -> None:
        listed = self.networking.list_namespaced_network_policy(self.namespace)
        facts.network_policies = [_name(p) for p in listed.items or []]

    def _credentials(
        self,
        facts: Facts,
        installed: Settings | None,
        node_classes: list[tuple[str, NodeClass | str]],
    ) -> None:
        if installed is None:
            raise ValueError(f"ConfigMap {self.namespace}/{CONFIG_MAP} is unreadable")
        tenancy = installed.tenancy()
        for where, node_class in node_classes:
            if isinstance(node_class, str):
                facts.credentials.append(CredentialFact(where, "-", node_class))
                continue
            namespace = node_class.metadata.namespace
            for provider in node_class.spec.configured_providers():
                refusal = tenancy.refusal(namespace, node_class.spec, (provider,))
                if refusal is not None:
                    facts.credentials.append(
                        CredentialFact(where, provider, f"{refusal.reason}: {refusal.message}")
                    )
                    continue
                facts.credentials.append(
                    CredentialFact(
                        where,
                        provider,
                        _list_owned(node_class, provider, self.core, installed.cluster_id),
                    )
                )

    def _prices(
        self,
        facts: Facts,
        config: dict[str, str],
        node_classes: list[tuple[str, NodeClass | str]],
    ) -> None:
        providers = sorted(
            {
                p
                for _, node_class in node_classes
                if isinstance(node_class, NodeClass)
                for p in node_class.spec.configured_providers()
            }
        )
        planning = PlanningConfig.from_env(config)
        data = read_store(self.core, self.namespace)
        catalog = live_catalog(Catalog.load(), data)
        offerings = [o for o in catalog.all_offerings() if o.provider in providers]
        facts.prices = PriceFact(
            providers=providers,
            max_age_h=planning.price_max_age_h,
            stale=stale_price_notes(
                offerings, facts.now, timedelta(hours=planning.price_max_age_h)
            ),
            failed={
                s.provider: s.error
                for s in statuses(data)
                if s.outcome == "failed" and s.provider in providers
            },
        )


# --- helpers ----------------------------------------------------------------------------------


async def _reach_temporal(settings: Settings) -> str | None:
    """None when Temporal answers for the namespace; else why not."""
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.service import RPCError

    from worker.client import TemporalConfigError, connect_temporal

    try:
        client = await asyncio.wait_for(connect_temporal(settings), NETWORK_TIMEOUT_S)
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=settings.temporal_namespace),
            timeout=timedelta(seconds=NETWORK_TIMEOUT_S),
        )
    except TimeoutError:
        return f"no answer within {NETWORK_TIMEOUT_S:g} s"
    except (RuntimeError, RPCError, TemporalConfigError) as err:
        return str(err) or type(err).__name__
    return None


def _tls_handshake(server: str, ca_pem: str) -> str | None:
    """None when `server` completes a TLS handshake whose certificate `ca_pem` verifies."""
    parts = urlsplit(server)
    host, port = parts.hostname, parts.port or 443
    if not host:
        return f"{server!r} names no host"
    context = ssl.create_default_context(cadata=ca_pem)
    try:
        with (
            socket.create_connection((host, port), timeout=NETWORK_TIMEOUT_S) as raw,
            context.wrap_socket(raw, server_hostname=host),
        ):
            return None
    except (OSError, ssl.SSLError) as err:
        return str(err) or type(err).__name__


def _list_owned(
    node_class: NodeClass, provider: str, core: k8s.CoreV1Api, cluster_id: str
) -> str | None:
    """None when the provider lists this cluster's VMs with the NodeClass's credential."""
    namespace = node_class.metadata.namespace
    try:
        block = node_class.spec.provider_block(provider)
        client = provider_class(provider)(block, read_provider_credential(core, namespace, block))
        try:
            client.list_owned(cluster_id)
        finally:
            close = getattr(client, "close", None)
            if callable(close):
                close()
    except (ProviderError, ApplicationError) as err:  # scrubbed of credentials at the boundary
        return err.message
    except ApiException as err:
        return f"Kubernetes API: HTTP {err.status} {err.reason or ''}".strip()
    except Exception as err:  # an SDK's own error: its type only, which carries no secret
        return f"{type(err).__name__} from the {provider} SDK"
    return None


def _name(obj: Any) -> str:
    return str(obj.metadata.name) if obj.metadata else "?"


def _api_message(err: ApiException) -> str:
    try:
        return str(json.loads(err.body or "{}").get("message") or err.reason)
    except ValueError:
        return str(err.reason)


def _reason(err: BaseException) -> str:
    if isinstance(err, ApiException):
        return f"HTTP {err.status}: {_api_message(err)}"
    return str(err) or type(err).__name__
