"""The approver's one way to follow a kind of object: list it, judge every item, watch from the
list's version until the watch times out (`resync_s`, after which everything is judged again),
and start over after any failure."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any, cast

from kubernetes import watch

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def json_body(response: object) -> Obj:
    """The body of a response read with `_preload_content=False`."""
    return cast(Obj, json.loads(cast(Any, response).data))


def list_and_watch(
    list_fn: Callable[..., Any],
    consider: Callable[[Obj], object],
    stop: threading.Event,
    *,
    resync_s: float,
    what: str,
) -> None:
    """Until `stop`: every listed object, then every added or changed one, to `consider`."""
    while not stop.is_set():
        try:
            listed = json_body(list_fn(_preload_content=False))
            for item in listed.get("items", []):
                consider(item)
            stream = watch.Watch()
            for event in stream.stream(
                list_fn,
                resource_version=listed["metadata"]["resourceVersion"],
                timeout_seconds=max(1, int(resync_s)),
            ):
                if stop.is_set():
                    stream.stop()
                    break
                if event["type"] in ("ADDED", "MODIFIED"):
                    consider(event["raw_object"])
        except Exception:
            log.exception("the %s loop failed; listing again", what)
            stop.wait(1.0)
