"""What `explain pod` and `explain node` both show: Events, a claim, ages and durations."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from api.explain import ClaimView, EventView
from api.nodeclaim import NodeClaimStatus


def event_views(events: list[Any]) -> list[EventView]:
    """Events (the client's CoreV1Event) oldest first, as `kubectl describe` lists them."""
    views = [
        EventView(
            type=event.type or "Normal",
            reason=event.reason or "",
            message=event.message or "",
            count=event.count or 1,
            last_seen=event.last_timestamp or event.event_time or event.first_timestamp,
            source=(event.source.component if event.source else None)
            or event.reporting_component
            or "",
        )
        for event in events
    ]
    return sorted(views, key=lambda e: (e.last_seen is None, e.last_seen or datetime.min))


def claim_view(namespace: str, name: str, status: NodeClaimStatus, now: datetime) -> ClaimView:
    """A claim's phase and age, its offering and where its price was read, and when."""
    offering = (
        f"{status.provider}/{status.region}/{status.instance_type}"
        + (f" ({status.capacity_type})" if status.capacity_type else "")
        if status.provider
        else None
    )
    return ClaimView(
        namespace=namespace,
        name=name,
        phase=status.phase.value,
        age_s=(now - status.created_at).total_seconds() if status.created_at else None,
        offering=offering,
        price_eur_per_hour=status.price_eur_per_hour,
        price_source=status.price_source,
        price_as_of=status.price_as_of,
        node=status.node_name,
    )


def duration_text(seconds: float) -> str:
    """`42s`, `3m20s`, `2h5m`, `3d4h`: how long, to the unit that matters."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s" if s % 60 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60}m"
    return f"{s // 86400}d{(s % 86400) // 3600}h"


def price_text(claim: ClaimView) -> str:
    """`at €0.0120/h (hetzner price API, as of 2026-11-28T10:00:00Z)`, or what is known."""
    if claim.price_eur_per_hour is None:
        return "price unknown"
    where = ", ".join(
        part
        for part in (claim.price_source, f"as of {claim.price_as_of}" if claim.price_as_of else "")
        if part
    )
    return f"at €{claim.price_eur_per_hour:.4f}/h" + (f" ({where})" if where else "")
