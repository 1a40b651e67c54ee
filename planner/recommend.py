"""Recommenders: where `plan_capacity` gets its ranked offerings from.

Both answer the same question — the offerings a pool may launch that hold a given shape,
cheapest first — from the built-in catalog or from a CloudBroker-compatible API.
"""

from __future__ import annotations

from typing import Protocol

from api.nodeclaim import Offering
from api.nodepool import Requirements
from api.planning import Resources
from planner.catalog import Catalog
from planner.node_size import kube_reserved, usable_capacity

# How many offerings to ask a recommender for: enough for packing and for failover lists.
OFFERING_LIMIT = 500


class Recommender(Protocol):
    def recommend(
        self,
        shape: Resources,
        requirements: Requirements,
        class_providers: list[str],
        limit: int,
    ) -> list[Offering]:
        """Allowed offerings whose usable capacity holds `shape`, cheapest first."""
        ...


class CatalogRecommender:
    def __init__(self, catalog: Catalog | None = None) -> None:
        self.catalog = catalog or Catalog.load()

    def recommend(
        self,
        shape: Resources,
        requirements: Requirements,
        class_providers: list[str],
        limit: int,
    ) -> list[Offering]:
        fitting = [
            o for o in self.catalog.offerings(requirements, class_providers) if holds(o, shape)
        ]
        return fitting[:limit]


def holds(offering: Offering, shape: Resources) -> bool:
    """Whether a node of this offering, after kube-reserved, can hold `shape`."""
    cap = usable_capacity(offering, kube_reserved(offering))
    return shape.cpu_m <= cap.cpu_m and shape.memory_bytes <= cap.memory_bytes
