"""The `record_events` activity: the Kubernetes Events a workflow asks for (`observability/events.py`
records them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s
from temporalio import activity

from api.events import EventBatch
from observability.events import record_event


class EventActivities:
    def __init__(self, api_client: k8s.ApiClient) -> None:
        self._core = k8s.CoreV1Api(api_client)

    def activities(self) -> list[Callable[..., Any]]:
        return [self.record_events]

    @activity.defn(name="record_events")
    def record_events(self, batch: EventBatch) -> None:
        for event in batch.events:
            record_event(self._core, event)
