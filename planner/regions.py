"""Region groups for `regionConstraint` and the offering filters a pool's requirements imply.

"EU" means regions located in EU member states (the UK and Switzerland are not in it, which
matters to users who choose EU for data residency). "US" is the continental United States.
The fake provider's simulated regions belong to every group: the demo pool works with any.
"""

from __future__ import annotations

from api.nodeclaim import Offering
from api.nodepool import Requirements

REGION_GROUPS: dict[str, dict[str, frozenset[str]]] = {
    "EU": {
        "aws": frozenset(
            {"eu-central-1", "eu-west-1", "eu-west-3", "eu-north-1", "eu-south-1", "eu-south-2"}
        ),
        "gcp": frozenset(
            {
                "europe-west1",
                "europe-west3",
                "europe-west4",
                "europe-west8",
                "europe-west9",
                "europe-west10",
                "europe-north1",
                "europe-central2",
                "europe-southwest1",
            }
        ),
        "azure": frozenset(
            {
                "westeurope",
                "northeurope",
                "germanywestcentral",
                "francecentral",
                "swedencentral",
                "italynorth",
                "polandcentral",
                "spaincentral",
            }
        ),
        "hetzner": frozenset({"fsn1", "nbg1", "hel1"}),
        "scaleway": frozenset({"fr-par", "nl-ams", "pl-waw"}),
        "digitalocean": frozenset({"ams3", "fra1"}),
        "ovh": frozenset({"GRA11", "GRA9", "SBG5", "DE1", "WAW1", "RBX-A"}),
    },
    "US": {
        "aws": frozenset({"us-east-1", "us-east-2", "us-west-1", "us-west-2"}),
        "gcp": frozenset({"us-central1", "us-east1", "us-east4", "us-west1", "us-west2"}),
        "azure": frozenset({"eastus", "eastus2", "centralus", "westus2", "westus3"}),
        "hetzner": frozenset({"ash", "hil"}),
        "scaleway": frozenset(),
        "digitalocean": frozenset({"nyc1", "nyc3", "sfo2", "sfo3"}),
        "ovh": frozenset({"US-EAST-VA-1", "US-WEST-OR-1"}),
    },
}
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def in_region_constraint(offering: Offering, constraint: str | list[str]) -> bool:
    if isinstance(constraint, list):
        # Explicit slugs may name a region ("fr-par") or a zone ("fr-par-2").
        return offering.region in constraint or (
            offering.zone is not None and offering.zone in constraint
        )
    name = constraint.upper()
    if name == "ANY":
        return True
    if offering.provider == "fake":
        return True
    group = REGION_GROUPS.get(name)
    if group is None:
        return False
    return offering.region in group.get(offering.provider, frozenset())


def offering_allowed(
    offering: Offering, requirements: Requirements, class_providers: list[str] | None
) -> str | None:
    """None if the pool may launch this offering, else which requirement rules it out."""
    if class_providers is not None and offering.provider not in class_providers:
        return "provider not configured in the NodeClass"
    if requirements.allowed_providers and offering.provider not in requirements.allowed_providers:
        return "provider not in allowedProviders"
    if _ARCH.get(offering.arch, offering.arch) not in {_ARCH.get(a, a) for a in requirements.arch}:
        return "arch"
    if not in_region_constraint(offering, requirements.region_constraint):
        return "regionConstraint"
    if offering.capacity_type not in requirements.capacity_type:
        return "capacityType"
    price = offering.price_eur_per_hour
    if price is None:
        return "no price"
    if (
        requirements.max_price_eur_per_hour is not None
        and price > requirements.max_price_eur_per_hour
    ):
        return "maxPriceEurPerHour"
    return None
