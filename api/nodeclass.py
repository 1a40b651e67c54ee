"""NodeClass: how to build a node on each provider and how it joins the cluster."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from api._base import CamelModel, ObjectMeta, SecretKeyRef
from api.limits import (
    KUBERNETES_VERSION_PATTERN,
    MAX_REGISTRATION_TIMEOUT_S,
    MAX_SHORT_LIST,
    MIN_REGISTRATION_TIMEOUT_S,
    ProviderId,
    Text,
    Url,
    cel,
    validations,
)
from api.nodepool import PROVIDERS

# AWS alone has more than 30 regions.
MAX_REGIONS = 64


class ProviderBlock(CamelModel):
    """Settings shared by every provider block.

    `endpoint` overrides the provider's API address (a regional endpoint, or a local stand-in
    in tests); the credential is always a Secret reference, read inside the activity.
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
    without it the default AWS chain is used (instance profile, IRSA, environment).
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
    file `gcloud iam service-accounts keys create` writes); without it requests are sent
    unauthenticated (only a local stand-in accepts that). `zone` is the default zone; an
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
    `DefaultAzureCredential` is used (managed/workload identity). `subnetId` is the full
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
    """The simulated cloud of `sim/` (the embedded demo and the tests)."""

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


class TailscaleSettings(CamelModel):
    auth_key_secret_ref: SecretKeyRef


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


class NodeClass(CamelModel):
    api_version: Literal["cloudburst.io/v1alpha1"] = "cloudburst.io/v1alpha1"
    kind: Literal["NodeClass"] = "NodeClass"
    metadata: ObjectMeta
    spec: NodeClassSpec
    status: dict[str, object] | None = None
