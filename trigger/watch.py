"""List-then-watch loops in threads, feeding an asyncio queue: the base of every watcher."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

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


@dataclass(frozen=True)
class Slim:
    """A watch that reads its objects' JSON itself: `fields` keeps what its consumer reads
    (`cluster.pods.pod_fields`), `build` makes what the consumer gets of them
    (`cluster.pods.pod_model`), instead of the client's model of the whole object.

    An event that changes none of the kept fields is not passed on: the consumer would get
    the very object it has. Most of a pod watch's events in a burst are such (the scheduler
    rewriting why a pod waits, the kubelet reporting its containers), and each cost a model
    and a turn of the consumer's loop."""

    fields: Callable[[dict[str, Any]], dict[str, Any]]
    build: Callable[[dict[str, Any]], Any]


class _Kept:
    """What a slim watch last passed on, per object: a digest of its kept fields."""

    def __init__(self, slim: Slim) -> None:
        self._slim = slim
        self._digests: dict[str, bytes] = {}

    def listed(self, kind: str, items: list[Any]) -> list[Any]:
        self._digests.clear()
        objects = (self.changed(kind, "ADDED", raw) for raw in items)
        return [obj for obj in objects if obj is not None]

    def changed(self, kind: str, event: str, raw: dict[str, Any]) -> Any:
        """The consumer's object, or None: unchanged for it, or unreadable (logged, skipped:
        it must not stop the watch, which would list it again and stop again, hiding every
        other object)."""
        try:
            fields = self._slim.fields(raw)
            key = _key(raw)
            digest = None if event == "DELETED" else _digest(fields)
            if digest is not None and self._digests.get(key) == digest:
                return None
            obj = self._slim.build(fields)
        except Exception as err:
            name = (raw.get("metadata") or {}).get("name") if isinstance(raw, dict) else None
            log.warning("%s %s skipped: it cannot be read: %s", kind, name or "?", err)
            return None
        if digest is None:
            self._digests.pop(key, None)
        else:
            self._digests[key] = digest
        return obj


def _digest(fields: dict[str, Any]) -> bytes:
    try:
        data = orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # an integer beyond 64 bits, which orjson refuses
        data = json.dumps(fields, sort_keys=True).encode()
    return hashlib.blake2b(data, digest_size=16).digest()


def _loads(data: bytes) -> Any:
    """orjson reads a burst's listing several times faster; what it refuses (an integer
    beyond 64 bits) the standard library reads, as the watch itself does."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def _raw_events(list_fn: Callable[..., Any], kwargs: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """One watch request's events as JSON, each line read with orjson. The client's
    `Watch.stream(deserialize=False)` reads them with the standard library, and meets an
    ERROR event (a 410 the API server sends inside the stream) with a `KeyError`, hiding
    the error; here it is the `ApiException` it stands for."""
    response = list_fn(**kwargs, watch=True, _preload_content=False)
    try:
        if not 200 <= response.status <= 299:
            raise ApiException(http_resp=response)
        for line in iter_resp_lines(response):
            event = _loads(line)
            if event["type"] == "ERROR":
                status = event.get("object") or {}
                reason = f"{status.get('reason')}: {status.get('message')}"
                raise ApiException(status=status.get("code"), reason=reason)
            yield event
    finally:
        response.close()
        response.release_conn()


def _key(raw: dict[str, Any]) -> str:
    metadata = raw["metadata"]
    return str(metadata.get("uid") or f"{metadata.get('namespace')}/{metadata['name']}")


def watch_forever(
    kind: str,
    list_fn: Callable[..., Any],
    kwargs: dict[str, Any],
    emit: Emit,
    halt: threading.Event,
    slim: Slim | None = None,
) -> None:
    """List, then watch from that resourceVersion; on any error or expiry, list again.

    A "SYNC" event carries the full listing, so the consumer can forget what it knew: that
    is how a restart or a 410 Gone stays correct.
    """
    kept = _Kept(slim) if slim is not None else None
    while not halt.is_set():
        try:
            if kept is None:
                items, version = items_of(list_fn(**kwargs))
            else:
                listing = _loads(list_fn(**kwargs, _preload_content=False).data)
                items, version = items_of(listing)
                items = kept.listed(kind, items)
            emit(kind, "SYNC", items)
            while not halt.is_set():
                # Bookmarks keep `version` current while nothing of this kind changes, so a
                # quiet watch resumes instead of expiring (410) and re-listing everything.
                watching = {
                    **kwargs,
                    "resource_version": version,
                    "timeout_seconds": WATCH_TIMEOUT_S,
                    "allow_watch_bookmarks": True,
                }
                stream = (
                    k8s_watch.Watch().stream(list_fn, **watching)
                    if kept is None
                    else _raw_events(list_fn, watching)
                )
                for event in stream:
                    if halt.is_set():
                        return
                    version = resource_version(event["object"])
                    if event["type"] != "BOOKMARK":  # a bookmark only moves the version on
                        obj = event["object"]
                        if (
                            kept is not None
                            and (obj := kept.changed(kind, event["type"], obj)) is None
                        ):
                            continue
                        emit(kind, event["type"], obj)
        except ApiException as err:
            if err.status != 410:
                log.warning("%s watch failed (%s); re-listing", kind, err.reason)
        except Exception as err:  # the API server restarting must not kill the watcher
            log.warning("%s watch failed (%s); re-listing", kind, err)
        halt.wait(RETRY_AFTER_ERROR_S)


def start_watches(
    loop: asyncio.AbstractEventLoop,
    queue: asyncio.Queue[tuple[str, str, Any]],
    halt: threading.Event,
    watches: list[tuple[str, Callable[..., Any], dict[str, Any], Slim | None]],
) -> list[threading.Thread]:
    """One thread per (kind, list function, its arguments, `Slim` or None for the client's
    models)."""

    def emit(kind: str, event: str, obj: Any) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, (kind, event, obj))

    threads = [
        threading.Thread(
            target=watch_forever,
            args=(kind, list_fn, kwargs, emit, halt, slim),
            name=f"watch-{kind}",
            daemon=True,
        )
        for kind, list_fn, kwargs, slim in watches
    ]
    for thread in threads:
        thread.start()
    return threads
