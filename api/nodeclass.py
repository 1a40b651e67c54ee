"""NodeClass: how to build a node on each provider and how it joins the cluster."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from api._base import CamelModel, ObjectMeta, SecretKeyRef
from api.limits import (
    KUBERNETES_VERSION_PATTERN,
    MAX_REGISTRATION_TIMEOUT_S,
    MAX_SHORT_LIST,
    MIN_REGISTRATION_TIMEOUT_S,
    SECRET_KEY_PATTERN,
    TAILNET_PATTERN,
    TAILSCALE_TAG_PATTERN,
    ObjectName,
    ProviderId,
    Text,
    Url,
    cel,
    validations,
)
from api.nodepool import PROVIDERS

# AWS alone has more than 30 regions.
MAX_REGIONS = 64

SecretKey = Annotated[str, Field(min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN)]
TailscaleTag = Annotated[str, Field(max_length=67, pattern=TAILSCALE_TAG_PATTERN)]


class ProviderBlock(CamelModel):
    """Settings shared by every provider block.

    `endpoint` overrides the provider's API address (a regional endpoint, a proxy, or a local
    stand-in in tests). The provider sends its credential there, so an override is used only
    when the operator allows it (`CLOUDBURST_ALLOWED_ENDPOINTS`, per provider); any other is
    refused before a call is made (the NodeClass gets Ready=False, EndpointNotAllowed). The
    credential is always a Secret reference in the NodeClass's own namespace, read inside the
    activity.
    """

    endpoint: Url | None = None
    image: Url | None = None

    def credential_ref(self) -> SecretKeyRef | None:
        """The Secret holding this provider's credential, whatever the block calls it."""
        for field in ("api_token_secret_ref", "api_key_secret_ref", "credentials_secret_ref"):
            ref = getattr(self, field, None)
            if isinstance(ref, SecretKeyRef):
                return ref
        return None

    def credential_field(self) -> str:
        """The manifest name of the credential field, for error messages that say what to fix."""
        for field in ("api_token_secret_ref", "api_key_secret_ref", "credentials_secret_ref"):
            if field in type(self).model_fields:
                alias = type(self).model_fields[field].alias
                return alias or field
        return "credentials"


class HetznerClass(ProviderBlock):
    """Hetzner Cloud. The Secret value is the project's API token (read & write).

    `location` is the default when an offering names none (fsn1, nbg1, hel1, ash, hil, sin);
    `networkID` attaches a private network (its IP becomes the node's InternalIP),
    `firewallIDs` and `sshKeys` (names) are passed to the server create. `endpoint` defaults
    to https://api.hetzner.cloud/v1.
    """

    location: Text
    api_token_secret_ref: SecretKeyRef
    image: Url | None = "ubuntu-24.04"
    network_id: ProviderId | None = Field(default=None, alias="networkID")
    firewall_ids: list[ProviderId] = Field(
        default_factory=list, alias="firewallIDs", max_length=MAX_SHORT_LIST
    )
    ssh_keys: list[Text] = Field(default=[], max_length=MAX_SHORT_LIST)


class ScalewayClass(ProviderBlock):
    """Scaleway Instances. The Secret value (`apiKeySecretRef`) is the API key's SECRET key
    (a UUID; the `SCW_SECRET_KEY`), or a JSON object `{"access_key": ..., "secret_key": ...}`.

    The SDK authenticates with the secret key alone (`X-Auth-Token`) but insists on an
    access-key-shaped value: when none is given the placeholder "SCWXXXXXXXXXXXXXXXXX" is
    used. `accessKeySecretRef` is accepted for manifests that name it but is not read (one
    Secret value per provider): put the access key into the JSON form instead.

    `zone` (fr-par-1, nl-ams-1, pl-waw-1, ...) is the default; an offering naming a region
    (fr-par) uses that region's zone of the same number. `projectID` must be the project's
    UUID. `securityGroup` (ID) and `placementGroup` (ID) are optional. `endpoint` defaults to
    https://api.scaleway.com.
    """

    zone: Text
    # The seed spells it `projectID`, which the camelCase generator would not produce.
    project_id: Text = Field(alias="projectID")
    api_key_secret_ref: SecretKeyRef
    access_key_secret_ref: SecretKeyRef | None = None
    image: Url | None = "ubuntu_jammy"
    security_group: Text | None = None
    placement_group: Text | None = None


class AwsClass(ProviderBlock):
    """Amazon EC2.

    `credentialsSecretRef` names a Secret key whose value is JSON
    `{"aws_access_key_id": "...", "aws_secret_access_key": "..."[, "aws_session_token": "..."]}`;
    without it the worker's own identity is used through boto3's default chain (EKS Pod
    Identity, IRSA, environment, instance profile): see deploy/README.md.
    `image`/`imageArm64` take an AMI id or a `resolve:ssm:` public parameter (the defaults are
    Canonical's Ubuntu 24.04, resolved in whatever region the VM lands in); the arm64 one is
    used for Graviton types (m7g, t4g, ...). Without `subnetId` the default VPC's default
    subnet of the zone is used; nodes need outbound internet (public IP or NAT).
    """

    region: Text
    # Other regions offerings may launch in; `list_owned` (garbage collection) scans them too.
    regions: list[Text] = Field(default=[], max_length=MAX_REGIONS)
    image: Url | None = (
        "resolve:ssm:/aws/service/canonical/ubuntu/server/24.04/stable/current/amd64/hvm/"
        "ebs-gp3/ami-id"
    )
    image_arm64: Url | None = (
        "resolve:ssm:/aws/service/canonical/ubuntu/server/24.04/stable/current/arm64/hvm/"
        "ebs-gp3/ami-id"
    )
    subnet_id: Text | None = None
    security_group_ids: list[Text] = Field(default=[], max_length=MAX_SHORT_LIST)
    associate_public_ip: bool | None = None
    # Instance profile name or ARN (e.g. for ECR pulls); none by default.
    instance_profile: Url | None = None
    root_volume_gib: int = Field(default=30, strict=True, ge=8, le=16384)
    root_device_name: Text = "/dev/sda1"
    credentials_secret_ref: SecretKeyRef | None = None


class GcpClass(ProviderBlock):
    """Google Compute Engine.

    `credentialsSecretRef` names a Secret key whose value is a service-account key JSON (the
    file `gcloud iam service-accounts keys create` writes); without it the worker's own
    identity is used (Application Default Credentials: GKE Workload Identity, the metadata
    server, `GOOGLE_APPLICATION_CREDENTIALS`; see deploy/README.md). `zone` is the default zone; an
    offering in another region uses `zones[region]`, else `<region>-b`. `network`/`subnetwork`
    take URLs or `projects/P/global/networks/N` paths (default: the `default` network).
    Labels are stored as `cloudburst-io_<name>` (GCE forbids `.` and `/` in label keys).
    """

    project: Text
    zone: Text
    zones: dict[str, Text] = Field(default={}, max_length=MAX_REGIONS)
    image: Url | None = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"
    image_arm64: Url | None = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-arm64"
    network: Url | None = None
    subnetwork: Url | None = None
    # An ephemeral public IP, for outbound internet without Cloud NAT.
    external_ip: bool = True
    # Service account the VM runs as (email); none by default.
    service_account: Text | None = None
    disk_size_gb: int = Field(default=30, strict=True, ge=10, le=65536)
    disk_type: Text = "pd-balanced"
    credentials_secret_ref: SecretKeyRef | None = None


class AzureClass(ProviderBlock):
    """Azure virtual machines.

    `credentialsSecretRef` names a Secret key whose value is JSON
    `{"tenant_id": "...", "client_id": "...", "client_secret": "..."}` (a service principal;
    optional `authority_host` for sovereign clouds) or `{"access_token": "..."}`; without it
    the worker's own identity is used through `DefaultAzureCredential` (AKS Workload
    Identity, managed identity, environment; see deploy/README.md). `subnetId` is the full
    resource id of an existing subnet (`/subscriptions/S/resourceGroups/RG/providers/
    Microsoft.Network/virtualNetworks/V/subnets/N`) with outbound internet (NAT gateway);
    the NIC is created in it. `image`/`imageArm64` are `publisher:offer:sku:version` URNs or
    an image resource id; the arm64 one is used for Ampere/Cobalt sizes (`D2ps_v5`, ...).
    """

    subscription_id: Text
    resource_group: Text
    location: Text
    # Azure resource ids are paths, longer than a name.
    subnet_id: Url | None = None
    network_security_group_id: Url | None = None
    image: Url | None = "Canonical:ubuntu-24_04-lts:server:latest"
    image_arm64: Url | None = "Canonical:ubuntu-24_04-lts:server-arm64:latest"
    os_disk_size_gb: int = Field(default=30, strict=True, ge=30, le=4095)
    os_disk_type: Text = "StandardSSD_LRS"
    credentials_secret_ref: SecretKeyRef | None = None


class DigitalOceanClass(ProviderBlock):
    """DigitalOcean droplets.

    Credential: the API token (read and write scope) in the Secret `apiTokenSecretRef` names.
    `endpoint`: the API base URL, default `https://api.digitalocean.com/v2/`. `region` is the
    default when an offering names none; `vpcUUID` puts droplets in a VPC (the region's default
    VPC otherwise); `sshKeyIDs` are numeric key ids (fingerprints would make the SDK look
    keys up behind the endpoint's back).
    """

    region: Text = "fra1"
    api_token_secret_ref: SecretKeyRef
    image: Url | None = "ubuntu-24-04-x64"
    vpc_uuid: Text | None = Field(default=None, alias="vpcUUID")
    ssh_key_ids: list[ProviderId] = Field(default=[], alias="sshKeyIDs", max_length=MAX_SHORT_LIST)
    monitoring: bool = False


class OvhClass(ProviderBlock):
    """OVHcloud Public Cloud instances in one project.

    Credential: ONE Secret value (`credentialsSecretRef`) holding JSON
    `{"application_key": ..., "application_secret": ..., "consumer_key": ...}`.
    `apiEndpoint` is the OVH API to use (`ovh-eu`, `ovh-ca`, `ovh-us`); `endpoint` (a URL such
    as `https://eu.api.ovh.com/1.0`) overrides it. `projectID` is the Public Cloud project
    (the API's serviceName); `region` the default region (e.g. `GRA11`); `image` an image
    name looked up per region; `sshKeyID` and `networkID` (a private network) are optional.
    """

    project_id: Text = Field(alias="projectID")
    region: Text = "GRA11"
    credentials_secret_ref: SecretKeyRef
    image: Url | None = "Ubuntu 24.04"
    api_endpoint: Literal["ovh-eu", "ovh-ca", "ovh-us"] = "ovh-eu"
    ssh_key_id: Text | None = Field(default=None, alias="sshKeyID")
    network_id: Text | None = Field(default=None, alias="networkID")


class FakeClass(ProviderBlock):
    """The simulated cloud of `sim/` (the embedded demo and the tests).

    It has no public API: its `endpoint` (always set) must be one the operator allows, so a
    production worker (no allowed endpoints) refuses the fake provider altogether.
    """

    endpoint: Url | None = "http://127.0.0.1:8788"
    region: Text = "sim-1"
    api_token_secret_ref: SecretKeyRef | None = None
    image: Url | None = "ubuntu-24.04"


class JoinSettings(CamelModel):
    host_api_server: Url = Field(min_length=1)
    kind_cluster_name: Text = "cloudburst"
    token_ttl_minutes: int = Field(default=60, strict=True, ge=1, le=24 * 60)
    # How long a new VM may take to become a Ready node before the claim gives up on it.
    registration_timeout_seconds: int = Field(
        default=900, strict=True, ge=MIN_REGISTRATION_TIMEOUT_S, le=MAX_REGISTRATION_TIMEOUT_S
    )


class TailscaleOAuthClientRef(CamelModel):
    """A Secret in the NodeClass's namespace holding a Tailscale OAuth client (its id and its
    secret, under two keys), with the `auth_keys` and `devices:core` scopes."""

    name: ObjectName
    client_id_key: SecretKey = "client_id"
    client_secret_key: SecretKey = "client_secret"


class TailscaleSettings(CamelModel):
    """How nodes join the tailnet: one of two modes.

    - `oauthClientSecretRef` (recommended): for each claim the worker mints an auth key of
      its own through the Tailscale API — single-use, ephemeral, pre-authorized, tagged with
      `tags`, expiring with the join token — and the VM's user data carries only that key;
      the node's device is removed from the tailnet when the claim is deleted.
    - `authKeySecretRef` (the seed's form, weaker): one reusable key, shared by every node
      and written into each VM's user data, where it stays readable for the VM's life.

    `tailnet` (default `-`, the OAuth client's own) and `apiEndpoint` (default
    https://api.tailscale.com; an override must be one the operator allows) go with the
    OAuth mode.
    """

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.authKeySecretRef) != has(self.oauthClientSecretRef)",
                "set exactly one of authKeySecretRef (a reusable key) and oauthClientSecretRef "
                "(a per-node key minted through the Tailscale API)",
            ),
            cel(
                "!has(self.oauthClientSecretRef) || (has(self.tags) && size(self.tags) > 0)",
                "oauthClientSecretRef needs tags: a key minted by an OAuth client must be tagged",
            ),
            cel(
                "has(self.oauthClientSecretRef) || "
                "!(has(self.tags) || has(self.tailnet) || has(self.apiEndpoint))",
                "tags, tailnet and apiEndpoint go with oauthClientSecretRef",
            ),
        )
    )

    auth_key_secret_ref: SecretKeyRef | None = None
    oauth_client_secret_ref: TailscaleOAuthClientRef | None = None
    tags: list[TailscaleTag] | None = Field(default=None, max_length=MAX_SHORT_LIST)
    tailnet: Annotated[str, Field(max_length=253, pattern=TAILNET_PATTERN)] | None = None
    api_endpoint: Url | None = None

    @model_validator(mode="after")
    def _one_mode(self) -> TailscaleSettings:
        if (self.auth_key_secret_ref is None) == (self.oauth_client_secret_ref is None):
            raise ValueError(
                "set exactly one of authKeySecretRef (a reusable key) and oauthClientSecretRef "
                "(a per-node key minted through the Tailscale API)"
            )
        if self.oauth_client_secret_ref is not None and not self.tags:
            raise ValueError(
                "oauthClientSecretRef needs tags: a key minted by an OAuth client must be tagged"
            )
        if self.oauth_client_secret_ref is None and (
            self.tags is not None or self.tailnet is not None or self.api_endpoint is not None
        ):
            raise ValueError("tags, tailnet and apiEndpoint go with oauthClientSecretRef")
        return self

    @property
    def minted(self) -> bool:
        """Per-node keys minted through the API (the OAuth mode)."""
        return self.oauth_client_secret_ref is not None


class BootstrapSettings(CamelModel):
    kubernetes_version: str = Field(
        default="1.34.3", max_length=16, pattern=KUBERNETES_VERSION_PATTERN
    )


class NodeClassSpec(CamelModel):
    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                " || ".join(f"has(self.{name})" for name in PROVIDERS),
                "configure at least one provider block (e.g. hetzner, scaleway, fake)",
            )
        )
    )

    aws: AwsClass | None = None
    gcp: GcpClass | None = None
    azure: AzureClass | None = None
    hetzner: HetznerClass | None = None
    scaleway: ScalewayClass | None = None
    digitalocean: DigitalOceanClass | None = None
    ovh: OvhClass | None = None
    fake: FakeClass | None = None
    join: JoinSettings
    tailscale: TailscaleSettings | None = None
    bootstrap: BootstrapSettings = BootstrapSettings()

    @model_validator(mode="after")
    def _at_least_one_provider(self) -> NodeClassSpec:
        if not self.configured_providers():
            raise ValueError("configure at least one provider block (e.g. hetzner, scaleway, fake)")
        return self

    def configured_providers(self) -> list[str]:
        return [name for name in PROVIDERS if getattr(self, name) is not None]

    def provider_block(self, provider: str) -> ProviderBlock:
        block = getattr(self, provider, None)
        if not isinstance(block, ProviderBlock):
            raise KeyError(provider)
        return block

    def secret_refs(self) -> list[tuple[str, SecretKeyRef]]:
        """Every Secret key this class names, with its manifest path (`spec.hetzner.apiTokenSecretRef`)."""
        found: list[tuple[str, SecretKeyRef]] = []
        blocks: list[tuple[str, CamelModel | None]] = [
            *((name, getattr(self, name)) for name in PROVIDERS),
            ("tailscale", self.tailscale),
        ]
        for name, block in blocks:
            if block is None:
                continue
            for field, info in type(block).model_fields.items():
                ref = getattr(block, field)
                if isinstance(ref, SecretKeyRef):
                    found.append((f"spec.{name}.{info.alias or field}", ref))
        return found

    def endpoints(self) -> list[tuple[str, str, str]]:
        """(service, manifest path, URL) of every API address this class overrides.

        The fake provider's endpoint is always one (it has no public API); a Tailscale API
        endpoint only in the OAuth mode.
        """
        found = [
            (name, f"spec.{name}.endpoint", block.endpoint)
            for name in self.configured_providers()
            if (block := self.provider_block(name)).endpoint
        ]
        if self.tailscale is not None and self.tailscale.api_endpoint:
            found.append(("tailscale", "spec.tailscale.apiEndpoint", self.tailscale.api_endpoint))
        return found


class NodeClass(CamelModel):
    api_version: Literal["cloudburst.io/v1alpha1"] = "cloudburst.io/v1alpha1"
    kind: Literal["NodeClass"] = "NodeClass"
    metadata: ObjectMeta
    spec: NodeClassSpec
    status: dict[str, object] | None = None

    @model_validator(mode="after")
    def _secrets_in_own_namespace(self) -> NodeClass:
        """A NodeClass reads Secrets of its own namespace only (ARCHITECTURE.md rule 7).

        The CRD cannot say so (a CEL rule does not see `metadata.namespace`): the trigger
        refuses such a class with `Ready=False` `InvalidSpec`, and the activities refuse the
        reference again before any read.
        """
        own = self.metadata.namespace
        for path, ref in self.spec.secret_refs():
            if ref.namespace not in (None, own):
                raise ValueError(
                    f"{path}.namespace: {ref.namespace} is not this NodeClass's namespace "
                    f"({own}); a NodeClass may only reference Secrets in its own namespace: "
                    f"remove `namespace` and keep the Secret in {own}"
                )
        return self
