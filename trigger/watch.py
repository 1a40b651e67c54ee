"""List-then-watch loops in threads, feeding an asyncio queue: the base of every watcher."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

WATCH_TIMEOUT_S = 60
RETRY_AFTER_ERROR_S = 1.0

# (kind, event type, object or list of objects for "SYNC")
Emit = Callable[[str, str, Any], None]


def resource_version(obj: Any) -> str:
    """Typed client objects and custom-object dicts alike."""
    if isinstance(obj, dict):
        return str(obj["metadata"]["resourceVersion"])
    return str(obj.metadata.resource_version)


def items_of(listing: Any) -> tuple[list[Any], str]:
    if isinstance(listing, dict):
        return listing.get("items", []), str(listing["metadata"]["resourceVersion"])
    return listing.items, str(listing.metadata.resource_version)


# A watch that reads the objects' JSON itself and turns each into what its consumer wants
# (`cluster.pods.slim_pod`), instead of the client's model of the whole object.
Decode = Callable[[dict[str, Any]], Any]


def watch_forever(
    kind: str,
    list_fn: Callable[..., Any],
    kwargs: dict[str, Any],
    emit: Emit,
    halt: threading.Event,
    decode: Decode | None = None,
) -> None:
    """List, then watch from that resourceVersion; on any error or expiry, list again.

    A "SYNC" event carries the full listing, so the consumer can forget what it knew: that
    is how a restart or a 410 Gone stays correct.
    """
    while not halt.is_set():
        try:
            if decode is None:
                items, version = items_of(list_fn(**kwargs))
            else:
                listing = json.loads(list_fn(**kwargs, _preload_content=False).data)
                items, version = items_of(listing)
                items = [d for d in (_decoded(kind, decode, item) for item in items) if d]
            emit(kind, "SYNC", items)
            while not halt.is_set():
                # Bookmarks keep `version` current while nothing of this kind changes, so a
                # quiet watch resumes instead of expiring (410) and re-listing everything.
                stream = k8s_watch.Watch().stream(
                    list_fn,
                    resource_version=version,
                    timeout_seconds=WATCH_TIMEOUT_S,
                    allow_watch_bookmarks=True,
                    deserialize=decode is None,
                    **kwargs,
                )
                for event in stream:
                    if halt.is_set():
                        return
                    version = resource_version(event["object"])
                    if event["type"] != "BOOKMARK":  # a bookmark only moves the version on
                        obj = event["object"]
                        if decode is not None and not (obj := _decoded(kind, decode, obj)):
                            continue
                        emit(kind, event["type"], obj)
        except ApiException as err:
            if err.status != 410:
                log.warning("%s watch failed (%s); re-listing", kind, err.reason)
        except Exception as err:  # the API server restarting must not kill the watcher
            log.warning("%s watch failed (%s); re-listing", kind, err)
        halt.wait(RETRY_AFTER_ERROR_S)


def _decoded(kind: str, decode: Decode, raw: dict[str, Any]) -> Any:
    """The decoded object, or None (logged) for one that cannot be read: it must not stop
    the watch, which would list it again and stop again, hiding every other object."""
    try:
        return decode(raw)
    except Exception as err:
        name = (raw.get("metadata") or {}).get("name") if isinstance(raw, dict) else None
        log.warning("%s %s skipped: it cannot be read: %s", kind, name or "?", err)
        return None


def start_watches(
    loop: asyncio.AbstractEventLoop,
    queue: asyncio.Queue[tuple[str, str, Any]],
    halt: threading.Event,
    watches: list[tuple[str, Callable[..., Any], dict[str, Any], Decode | None]],
) -> list[threading.Thread]:
    """One thread per (kind, list function, its arguments, decode or None for the client's
    models)."""

    def emit(kind: str, event: str, obj: Any) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, (kind, event, obj))

    threads = [
        threading.Thread(
            target=watch_forever,
            args=(kind, list_fn, kwargs, emit, halt, decode),
            name=f"watch-{kind}",
            daemon=True,
        )
        for kind, list_fn, kwargs, decode in watches
    ]
    for thread in threads:
        thread.start()
    return threads
