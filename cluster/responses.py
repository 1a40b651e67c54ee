"""Raw answers of the `kubernetes` client (`_preload_content=False`): calls whose answer we do
not need skip the client's models, which cost more CPU than the calls themselves."""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger(__name__)


def discard(response: Any) -> None:
    """Drain and release a raw response so its connection is reused."""
    try:
        response.read()
        response.release_conn()
    except Exception:  # best effort: the pool copes with an unreleased connection
        log.debug("could not release response", exc_info=True)


def resource_version(response: Any) -> str:
    """The written object's metadata.resourceVersion from a raw answer ("" if it has none);
    the response is released."""
    try:
        body = json.loads(response.data)
    except ValueError:
        return ""
    finally:
        discard(response)
    metadata = body.get("metadata") if isinstance(body, dict) else None
    return str((metadata or {}).get("resourceVersion") or "")
