"""NodeClass: how to build a node on each provider and how it joins the cluster."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from api._base import CamelModel, ObjectMeta, SecretKeyRef


class ProviderBlock(CamelModel):
    """Settings shared by every provider block.

    `endpoint` overrides the provider's API address (a regional endpoint, or a local stand-in
    in tests); the credential is always a Secret reference, read inside the activity.
    """

    endpoint: str | None = None
    image: str | None = None

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
    location: str
    api_token_secret_ref: SecretKeyRef
    image: str | None = "ubuntu-24.04"


class ScalewayClass(ProviderBlock):
    zone: str
    # The seed spells it `projectID`, which the camelCase generator would not produce.
    project_id: str = Field(alias="projectID")
    api_key_secret_ref: SecretKeyRef
    access_key_secret_ref: SecretKeyRef | None = None
    image: str | None = "ubuntu_jammy"


class AwsClass(ProviderBlock):
    region: str
    image: str | None = None
    subnet_id: str | None = None
    security_group_ids: list[str] = []
    credentials_secret_ref: SecretKeyRef | None = None


class GcpClass(ProviderBlock):
    project: str
    zone: str
    image: str | None = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"
    network: str | None = None
    subnetwork: str | None = None
    credentials_secret_ref: SecretKeyRef | None = None


class AzureClass(ProviderBlock):
    subscription_id: str
    resource_group: str
    location: str
    subnet_id: str | None = None
    credentials_secret_ref: SecretKeyRef | None = None


class DigitalOceanClass(ProviderBlock):
    region: str
    api_token_secret_ref: SecretKeyRef
    image: str | None = "ubuntu-24-04-x64"


class OvhClass(ProviderBlock):
    project_id: str
    region: str
    credentials_secret_ref: SecretKeyRef
    image: str | None = "Ubuntu 24.04"


class FakeClass(ProviderBlock):
    """The simulated cloud of `sim/` (the embedded demo and the tests)."""

    endpoint: str | None = "http://127.0.0.1:8788"
    region: str = "sim-1"
    api_token_secret_ref: SecretKeyRef | None = None
    image: str | None = "ubuntu-24.04"


class JoinSettings(CamelModel):
    host_api_server: str
    kind_cluster_name: str = "cloudburst"
    token_ttl_minutes: int = Field(default=60, ge=1, le=24 * 60)
    # How long a new VM may take to become a Ready node before the claim gives up on it.
    registration_timeout_seconds: int = Field(default=900, ge=10)


class TailscaleSettings(CamelModel):
    auth_key_secret_ref: SecretKeyRef


class BootstrapSettings(CamelModel):
    kubernetes_version: str = "1.34.3"


class NodeClassSpec(CamelModel):
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
        names = ("aws", "gcp", "azure", "hetzner", "scaleway", "digitalocean", "ovh", "fake")
        return [name for name in names if getattr(self, name) is not None]

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
