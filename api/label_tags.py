"""Ownership labels as cloud tags, where a cloud's tags are `key:value` strings of
`[A-Za-z0-9:_-]` (DigitalOcean): the provider writes them, orphan GC selects on them, the
DigitalOcean stand-in reads them back. One convention, so both sides agree byte for byte.

Each canonical label `cloudburst.io/<key>=<value>` becomes the tag `cloudburst-<key>:<value>`,
with every value character outside `[A-Za-z0-9-]` written as `_` + two hex digits per UTF-8
byte (so `.` is `_2e`). Labels outside `cloudburst.io/` are not tagged.
"""

from __future__ import annotations

import string

from api import labels as L

TAG_PREFIX = "cloudburst-"
_TAG_SAFE = frozenset(string.ascii_letters + string.digits + "-")


def label_tag(key: str, value: str) -> str:
    """`cloudburst.io/nodeclaim`, `pool-abc12` → `cloudburst-nodeclaim:pool-abc12`."""
    short = key.removeprefix(f"{L.GROUP}/")
    return f"{TAG_PREFIX}{short}:{escape_tag_value(value)}"


def tags_for(labels: dict[str, str]) -> list[str]:
    return [label_tag(k, v) for k, v in labels.items() if k.startswith(f"{L.GROUP}/")]


def labels_from_tags(tags: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for tag in tags:
        key, sep, value = tag.partition(":")
        if sep and key.startswith(TAG_PREFIX):
            out[f"{L.GROUP}/{key.removeprefix(TAG_PREFIX)}"] = unescape_tag_value(value)
    return out


def escape_tag_value(value: str) -> str:
    out: list[str] = []
    for ch in value:
        if ch in _TAG_SAFE:
            out.append(ch)
        else:
            out.extend(f"_{b:02x}" for b in ch.encode())
    return "".join(out)


def unescape_tag_value(value: str) -> str:
    raw = bytearray()
    i = 0
    while i < len(value):
        if value[i] == "_" and i + 3 <= len(value):
            try:
                raw.append(int(value[i + 1 : i + 3], 16))
                i += 3
                continue
            except ValueError:
                pass
        raw.extend(value[i].encode())
        i += 1
    return raw.decode(errors="replace")
