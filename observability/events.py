"""Recording Kubernetes Events, deduplicated the way kubectl shows them (count + last seen).

The trigger records its refusals here directly; workflows record theirs through the
`record_events` activity (`activities/events.py`), and activities call `record_event` as they go.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from api.events import KubeEvent
from cluster.responses import discard

log = logging.getLogger(__name__)

REPORTING_COMPONENT = "cloudburst"


def record_event(core: k8s.CoreV1Api, event: KubeEvent) -> None:
    """Create the Event, or bump the count of the same one (same object, reason and message).

    The name is derived from what the event says, so repeats from a retried activity, a
    restarted trigger or a second replica fold into one Event instead of piling up.
    """
    ref = event.regarding
    namespace = ref.namespace or "default"
    digest = hashlib.sha256(
        f"{ref.kind}/{ref.namespace}/{ref.name}/{ref.uid}/{event.reason}/{event.message}".encode()
    ).hexdigest()[:12]
    name = f"{ref.name}.cb-{digest}"
    now = datetime.now(UTC)
    body = k8s.CoreV1Event(
        metadata=k8s.V1ObjectMeta(name=name, namespace=namespace),
        involved_object=k8s.V1ObjectReference(
            kind=ref.kind,
            name=ref.name,
            namespace=ref.namespace or None,
            api_version=ref.api_version,
            uid=ref.uid,
        ),
        reason=event.reason,
        message=event.message,
        type=event.type,
        count=1,
        first_timestamp=now,
        last_timestamp=now,
        source=k8s.V1EventSource(component=REPORTING_COMPONENT),
        reporting_component=REPORTING_COMPONENT,
        reporting_instance=REPORTING_COMPONENT,
    )
    try:
        # The answer unread: a burst records an Event per pod, and reading each into the
        # client's models took a fifth of a worker's CPU during a 1,000-pod burst.
        discard(core.create_namespaced_event(namespace, body, _preload_content=False))
        return
    except ApiException as err:
        if err.status != 409:
            raise
    try:
        existing = core.read_namespaced_event(name, namespace)
        core.patch_namespaced_event(
            name,
            namespace,
            {"count": (existing.count or 1) + 1, "lastTimestamp": now.isoformat()},
        )
    except ApiException as err:
        if err.status != 404:  # expired between the two calls: nothing to bump
            raise
