"""Every activity an activities class defines is registered on the worker: a method with
`@activity.defn` left out of its class's `activities()` list passes mypy and fails only when
a workflow calls it (an activity "not registered on this worker", retried for good)."""

from __future__ import annotations

import inspect

from kubernetes import client as k8s

from worker.main import build_activities
from worker.settings import Settings


def test_every_defined_activity_is_registered() -> None:
    registered = build_activities(k8s.ApiClient(), Settings().tenancy())
    names = {getattr(fn, "__temporal_activity_definition").name for fn in registered}
    classes = {type(fn.__self__) for fn in registered if inspect.ismethod(fn)}
    defined = {
        f"{cls.__name__}.{attr}": member.__temporal_activity_definition.name
        for cls in classes
        for attr, member in inspect.getmembers(cls)
        if hasattr(member, "__temporal_activity_definition")
    }
    assert defined, "no activity classes found"
    missing = {where: name for where, name in defined.items() if name not in names}
    assert missing == {}
    assert len(names) == len(registered), "two activities share a name"
