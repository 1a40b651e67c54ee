"""NodeClass: how to build a node on each provider and how it joins the cluster."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from api._base import CamelModel, ObjectMeta, SecretKeyRef
from api.limits import (
    DNS_LABEL_PATTERN,
    KUBERNETES_VERSION_PATTERN,
    LABEL_VALUE_PATTERN,
    MAX_REGISTRATION_TIMEOUT_S,
    MAX_SHORT_LIST,
    MIN_REGISTRATION_TIMEOUT_S,
    SECRET_KEY_PATTERN,
    TAILNET_PATTERN,
    TAILSCALE_TAG_PATTERN,
    ObjectName,
    Price,
    ProviderId,
    Text,
    Url,
    cel,
    validations,
)
from api.nodepool import PROVIDERS
from api.plugin import Segment

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


class PluginClass(ProviderBlock):
    """A provider Cloudburst does not ship, behind the plug-in contract (api/plugin.py;
    docs/providers.md, "Plug-in providers"): KubeVirt, Terraform, a homelab's machines.

    `endpoint` is the plug-in's base URL (the contract's `/v1/...` lies under it). There is
    no public default, so it is always an address the operator must allow
    (`CLOUDBURST_ALLOWED_ENDPOINTS["plugin"]`), as the fake provider's is. `tokenSecretRef`
    names the bearer token sent to it, when it wants one. `region` is asked for when an
    offering names none (unset: the plug-in's own default); `image` is passed on as it is.
    """

    endpoint: Url = Field(min_length=1)
    token_secret_ref: SecretKeyRef | None = None
    region: Segment | None = None

    def credential_ref(self) -> SecretKeyRef | None:
        return self.token_secret_ref

    def credential_field(self) -> str:
        return "tokenSecretRef"


# --- on-premises: the operator's own machines ------------------------------------------------

# Proxmox VE's VM ids (`/cluster/nextid`'s range).
MIN_PROXMOX_VMID = 100
MAX_PROXMOX_VMID = 999_999_999
# A cluster's nodes, a site's machines, the shapes offered: each list is an inventory.
MAX_PROXMOX_NODES = 64
MAX_SHAPES = 32
MAX_MACHINES = 256
MAX_SHAPE_CPU = 1024
MAX_SHAPE_MEMORY_GIB = 16384
# A CA certificate bundle (PEM), inline: a CA is no secret.
MAX_CA_BUNDLE_LENGTH = 16384
# A Proxmox VE tag as the API accepts it (pve-common `pve-tag`), lower case here.
PROXMOX_TAG_PATTERN = r"^[a-z0-9_][a-z0-9_+.-]{0,62}$"
# A shape's name is a node label value (node.kubernetes.io/instance-type).
ShapeName = Annotated[str, Field(min_length=1, max_length=63, pattern=LABEL_VALUE_PATTERN)]
# A name that is also a providerID path segment (a region, a machine, a Proxmox node).
DnsLabel = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]
Vmid = Annotated[int, Field(strict=True, ge=MIN_PROXMOX_VMID, le=MAX_PROXMOX_VMID)]


class ProxmoxVmidRange(CamelModel):
    """The VM ids Cloudburst may give its VMs (KubeNodeSmith's `vmIDRange`), both included."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel("self.lower <= self.upper", "vmidRange.lower must not exceed vmidRange.upper")
        )
    )

    lower: Vmid
    upper: Vmid

    @model_validator(mode="after")
    def _ordered(self) -> ProxmoxVmidRange:
        if self.lower > self.upper:
            raise ValueError("vmidRange.lower must not exceed vmidRange.upper")
        return self


class ProxmoxShape(CamelModel):
    """A VM size offered on the cluster: its name is the offering's instance type."""

    name: ShapeName
    cpu: int = Field(strict=True, ge=1, le=MAX_SHAPE_CPU)
    memory_gib: int = Field(strict=True, ge=1, le=MAX_SHAPE_MEMORY_GIB, alias="memoryGiB")


class ProxmoxClass(ProviderBlock):
    """Proxmox VE: VMs on the operator's own cluster, through its API with an API token.

    `endpoint` is the API's address (`https://pve.example:8006`; a trailing `/api2/json` is
    accepted): Proxmox has no public API, so it is always one the operator must allow
    (`CLOUDBURST_ALLOWED_ENDPOINTS["proxmox"]`). The Secret value (`apiTokenSecretRef`) is
    the whole token, `user@realm!tokenid=secret`. `cluster` is the region every offering of
    this block carries; `nodes` the Proxmox nodes VMs may run on (KubeNodeSmith's
    `nodeWhitelist`); `vmidRange` the ids they may take. A VM is a full clone of `template`
    (a VM id) or, with `netboot: true`, a new VM that boots from the network (on `bridge`).
    Every VM is tagged `tag` (KubeNodeSmith's `managedNodeTag`) and its claim's ownership
    labels; `memoryOverheadMiB` is reserved on the host beyond each VM's memory. Its
    first-boot script goes in a cloud-init seed ISO uploaded to `seedStorage` (a storage
    with the `iso` content type on the VM's node, or shared) and attached as its CD-ROM.
    `shapes` are the sizes offered (the catalog), `priceEurPerHour` what one VM costs (0:
    owned hardware). `verifyTls` with `caBundle` (PEM) trusts the cluster's own CA.
    """

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.template) != (has(self.netboot) && self.netboot)",
                "set exactly one of template (the VM id to clone) and netboot: true "
                "(a VM that boots from the network)",
            ),
            cel(
                "self.endpoint.startsWith('https://')",
                "endpoint must be an https:// URL: the Proxmox VE API is served over TLS",
            ),
            cel(
                "self.shapes.all(s, self.shapes.exists_one(t, t.name == s.name))",
                "shape names must be unique",
            ),
        )
    )

    endpoint: Url = Field(min_length=1)
    api_token_secret_ref: SecretKeyRef
    cluster: DnsLabel = "pve"
    nodes: list[DnsLabel] = Field(min_length=1, max_length=MAX_PROXMOX_NODES)
    vmid_range: ProxmoxVmidRange
    template: Vmid | None = None
    netboot: bool = False
    bridge: Text = "vmbr0"
    tag: Annotated[str, Field(max_length=63, pattern=PROXMOX_TAG_PATTERN)] = "cloudburst"
    memory_overhead_mib: int = Field(
        default=0, strict=True, ge=0, le=1024 * 1024, alias="memoryOverheadMiB"
    )
    seed_storage: Text = "local"
    # Where a full clone's disks go (default: the template's storage) and the resource pool
    # VMs join (a token may be granted rights on a pool only).
    storage: Text | None = None
    pool: Text | None = None
    shapes: list[ProxmoxShape] = Field(min_length=1, max_length=MAX_SHAPES)
    price_eur_per_hour: Price = Field(default=0.0, ge=0)
    verify_tls: bool = True
    ca_bundle: str | None = Field(default=None, max_length=MAX_CA_BUNDLE_LENGTH)

    @model_validator(mode="after")
    def _consistent(self) -> ProxmoxClass:
        if (self.template is None) == (not self.netboot):
            raise ValueError(
                "set exactly one of template (the VM id to clone) and netboot: true "
                "(a VM that boots from the network)"
            )
        if not self.endpoint.startswith("https://"):
            raise ValueError(
                "endpoint must be an https:// URL: the Proxmox VE API is served over TLS"
            )
        names = [s.name for s in self.shapes]
        if len(set(names)) != len(names):
            raise ValueError("shape names must be unique")
        return self


class RedfishMachine(CamelModel):
    """One machine of the inventory: its BMC's Redfish service root (`bmc`, e.g.
    `https://10.0.9.21/redfish/v1`), the system there (`systemId`; unset: the only one) and
    the Secret key holding the BMC login as `username:password`. `cpu` and `memoryGiB` stand
    where the BMC reports no `ProcessorSummary.Count` / `MemorySummary.TotalSystemMemoryGiB`."""

    name: DnsLabel
    bmc: Url = Field(min_length=1)
    system_id: Text | None = None
    credentials_secret_ref: SecretKeyRef
    cpu: int | None = Field(default=None, strict=True, ge=1, le=MAX_SHAPE_CPU)
    memory_gib: int | None = Field(
        default=None, strict=True, ge=1, le=MAX_SHAPE_MEMORY_GIB, alias="memoryGiB"
    )
    arch: Literal["x86_64", "arm64"] = "x86_64"


class RedfishClass(ProviderBlock):
    """Bare-metal machines the operator owns, powered on and off through their BMCs (Redfish).

    `machines` is the inventory; each machine's `bmc` is an address the operator must allow
    (`CLOUDBURST_ALLOWED_ENDPOINTS["redfish"]`), and so are `seedUrl` and `imageUrl`. A claim takes a free
    machine (powered off, held by no claim), writes its first-boot script as a cloud-init
    NoCloud seed (`<seedUrl>/<machine>/user-data` and `meta-data`, which the operator's
    netboot setup hands to the machine with `ds=nocloud;s=<seedUrl>/<machine>/`), sets a
    one-time boot from the network (`boot: Pxe`) or from `imageUrl` as virtual media
    (`boot: Cd`) and powers it on; deleting the claim powers it off and returns it. The seed's
    `meta-data` records which claim holds a machine. `site` is the region of its offerings,
    `priceEurPerHour` what one machine costs an hour (0: owned hardware).
    """

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "(has(self.boot) && self.boot == 'Cd') == has(self.imageUrl)",
                "imageUrl goes with boot: Cd (the virtual media to boot), and boot: Cd needs it",
            ),
            cel(
                "self.machines.all(m, self.machines.exists_one(n, n.name == m.name))",
                "machine names must be unique",
            ),
            cel(
                "!has(self.endpoint)",
                "redfish has no endpoint: each machine's bmc and seedUrl are its addresses",
            ),
        )
    )

    site: DnsLabel = "on-prem"
    machines: list[RedfishMachine] = Field(min_length=1, max_length=MAX_MACHINES)
    boot: Literal["Pxe", "Cd"] = "Pxe"
    image_url: Url | None = None
    seed_url: Url = Field(min_length=1)
    price_eur_per_hour: Price = Field(default=0.0, ge=0)
    verify_tls: bool = True

    @model_validator(mode="after")
    def _consistent(self) -> RedfishClass:
        if (self.boot == "Cd") != (self.image_url is not None):
            raise ValueError(
                "imageUrl goes with boot: Cd (the virtual media to boot), and boot: Cd needs it"
            )
        names = [m.name for m in self.machines]
        if len(set(names)) != len(names):
            raise ValueError("machine names must be unique")
        if self.endpoint is not None:
            raise ValueError(
                "redfish has no endpoint: each machine's bmc and seedUrl are its addresses"
            )
        return self

    def machine_credential_refs(self) -> list[tuple[str, SecretKeyRef]]:
        """(machine name, its BMC login's Secret key): the credentials are per machine."""
        return [(m.name, m.credentials_secret_ref) for m in self.machines]

    def credential_field(self) -> str:
        return "machines[].credentialsSecretRef"

    def addresses(self) -> list[tuple[str, str]]:
        """(manifest path, URL) of every address it sends to or has fetched: each BMC, the
        seed server, and the virtual media a BMC is told to boot (`imageUrl`: the machine
        boots whatever is there, so it is an operator's address too)."""
        found = [(f"spec.redfish.machines[{i}].bmc", m.bmc) for i, m in enumerate(self.machines)]
        found.append(("spec.redfish.seedUrl", self.seed_url))
        if self.image_url is not None:
            found.append(("spec.redfish.imageUrl", self.image_url))
        return found


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
    plugin: PluginClass | None = None
    proxmox: ProxmoxClass | None = None
    redfish: RedfishClass | None = None
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
        if self.redfish is not None:
            found += [
                (f"spec.redfish.machines[{i}].credentialsSecretRef", ref)
                for i, (_, ref) in enumerate(self.redfish.machine_credential_refs())
            ]
        return found

    def endpoints(self) -> list[tuple[str, str, str]]:
        """(service, manifest path, URL) of every API address this class overrides.

        The fake provider's endpoint is always one (it has no public API), and so is
        Proxmox's; each BMC of a Redfish inventory and its seed server are too (service
        `redfish`); a Tailscale API endpoint only in the OAuth mode.
        """
        found = [
            (name, f"spec.{name}.endpoint", block.endpoint)
            for name in self.configured_providers()
            if (block := self.provider_block(name)).endpoint
        ]
        if self.redfish is not None:
            found += [("redfish", path, url) for path, url in self.redfish.addresses()]
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
        """A NodeClass reads Secrets of its own namespace only (a namespace is a trust boundary: docs/security.md).

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
