"""The release guard: a worker older than a release that already ran here refuses to start.

A release may add a `workflow.patched` branch (CHANGELOG.md, docs/upgrades.md): once it has
run, the histories of the claims and pools it advanced hold its marker and the commands of its
new branch. An older worker replaying one of them meets commands its code never issues, fails
the workflow task as nondeterministic, and Temporal hands the task back again and again: the
claim or pool stops, silently, until a worker that knows the branch runs it. A release may
also write payloads the older one cannot read (a field it removed or retyped; 0.1.0 refuses
any field it does not know): the same endless retries, as decoding errors.

So each worker, before it polls, records the newest release that started for its Temporal
namespace in the ConfigMap `cloudburst-release` of its own namespace (one key per Temporal
namespace, the release as its value), and a worker older than the recorded release exits with
a message naming both and what to do, unless the operator says every newer release is safe to
roll back from (CHANGELOG.md's `Rollback: safe`; `Settings.allow_downgrade`,
`CLOUDBURST_ALLOW_DOWNGRADE`). The record keeps the newest
release even then: it is a fact about the histories (a newer release wrote some), not a
preference, and each start of the older release needs the override again.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from enum import StrEnum

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from worker.settings import RELEASE, Settings

log = logging.getLogger(__name__)

RELEASE_CONFIGMAP = "cloudburst-release"
OVERRIDE = "CLOUDBURST_ALLOW_DOWNGRADE"
# What a refusal's message opens with: the drill (bench/upgrade.py) looks for it.
REFUSAL_OPENING = "refusing to start"
# Writers racing (two workers of a new release starting together): read again and decide again.
_ATTEMPTS = 5


class Action(StrEnum):
    RECORD = "record"  # ours is the newest (or the first): write it
    KEEP = "keep"  # nothing to write: the same release, an allowed downgrade, or no version
    REFUSE = "refuse"


@dataclass(frozen=True)
class Verdict:
    action: Action
    message: str


class DowngradeRefused(SystemExit):
    """The worker's exit: its message is printed and the process ends with 1, no traceback
    (a SystemExit, which `cloudburst worker` turns into exactly that)."""


def decide(
    recorded: str | None,
    running: str,
    *,
    allow_downgrade: bool,
    temporal_namespace: str,
    where: str,
) -> Verdict:
    """What a worker of release `running` does, given the release `recorded` for its Temporal
    namespace (None: none yet) in the ConfigMap `where` (namespace/name)."""
    if not is_version(running):
        return Verdict(
            Action.KEEP,
            f"release {running!r} is no version (a source tree never installed): the release "
            "guard neither checks nor records it",
        )
    order = None if recorded is None else compare(running, recorded)
    if order is None:
        return Verdict(Action.RECORD, f"release {running} recorded in {where}")
    if order > 0:
        return Verdict(Action.RECORD, f"release {running} recorded in {where} (was {recorded})")
    if order == 0:
        return Verdict(Action.KEEP, f"release {running} is the one recorded in {where}")
    if allow_downgrade:
        return Verdict(
            Action.KEEP,
            f"release {running} starts although {recorded} already ran for Temporal namespace "
            f"{temporal_namespace!r}: allowed by {OVERRIDE} (every release after {running} is "
            "safe to roll back from, as the operator says)",
        )
    return Verdict(Action.REFUSE, refusal(recorded or "", running, temporal_namespace, where))


def refusal(recorded: str, running: str, temporal_namespace: str, where: str) -> str:
    """The refusal: both releases, what running the older one would do, what to do instead."""
    return (
        f"cloudburst worker {running}: {REFUSAL_OPENING}: release {recorded} already ran on "
        f"this cluster for Temporal namespace {temporal_namespace!r} (recorded in the "
        f"ConfigMap {where}).\n"
        f"  What a rollback would do: claims and pools that {recorded} advanced may carry "
        f"commands of a `workflow.patched` branch {running} does not know, or payloads it "
        f"cannot read; {running} would fail their workflow tasks, Temporal would retry them "
        "without end (nondeterministic, or failing to decode), and those nodes would be neither "
        "watched nor deleted until a newer worker ran them.\n"
        f"  What to do: roll forward (run {recorded} or newer again). If CHANGELOG.md says "
        f'"Rollback: safe" for every release after {running} up to {recorded}, the rollback '
        f"is safe: set {OVERRIDE}=true on this worker (docs/upgrades.md, "
        '"Rolling back").'
    )


def is_version(text: str) -> bool:
    return compare(text, text) is not None


def compare(a: str, b: str) -> int | None:
    """-1, 0 or 1 as release `a` is older than, the same as or newer than `b` (PEP 440 with
    `packaging`; without it, the numeric release part alone); None when either is no
    version."""
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:  # an image without packaging: releases are plain X.Y.Z
        return _compare_numeric(a, b)
    try:
        left, right = Version(a), Version(b)
    except InvalidVersion:
        return None
    return (left > right) - (left < right)


def _compare_numeric(a: str, b: str) -> int | None:
    found = [re.match(r"v?(\d+(?:\.\d+)*)", text.strip()) for text in (a, b)]
    if found[0] is None or found[1] is None:
        return None
    left, right = (tuple(int(p) for p in m.group(1).split(".")) for m in found if m)
    return (left > right) - (left < right)


def data_key(temporal_namespace: str) -> str:
    """The ConfigMap key of a Temporal namespace (keys allow letters, digits, `-._`)."""
    return re.sub(r"[^-._a-zA-Z0-9]", "_", temporal_namespace)


def check_release(api_client: k8s.ApiClient, settings: Settings, release: str = RELEASE) -> None:
    """Record `release` as the newest that started here, or raise `DowngradeRefused`.

    Without the grant to read or write the ConfigMap (RBAC not applied with the release), or
    without the namespace, the worker starts and says at ERROR that the guard did not run: the
    guard must not be what stops the autoscaler."""
    core = k8s.CoreV1Api(api_client)
    namespace, key = settings.worker_namespace, data_key(settings.temporal_namespace)
    where = f"{namespace}/{RELEASE_CONFIGMAP}"
    try:
        for _ in range(_ATTEMPTS):
            found = _read(core, namespace)
            recorded = (found.data or {}).get(key) if found is not None else None
            verdict = decide(
                recorded,
                release,
                allow_downgrade=settings.allow_downgrade,
                temporal_namespace=settings.temporal_namespace,
                where=where,
            )
            if verdict.action is Action.REFUSE:
                log.error("release %s older than %s recorded in %s", release, recorded, where)
                raise DowngradeRefused(verdict.message)
            if verdict.action is Action.KEEP:
                if recorded is not None and compare(release, recorded) == -1:
                    log.warning("%s", verdict.message)
                else:
                    log.info("%s", verdict.message)
                return
            if _write(core, namespace, found, key, release):
                log.info("%s", verdict.message)
                return
    except ApiException as err:
        if err.status not in (403, 404):  # 404: only a create's, the namespace is missing
            raise
        log.error(
            "release guard not run: could not read or write the ConfigMap %s (%s): the "
            "namespace must exist and the worker hold this release's Role "
            "cloudburst-worker-release (deploy/base/rbac.yaml)",
            where,
            err.reason,
        )
        return
    raise RuntimeError(f"{where} changed under every one of {_ATTEMPTS} writes: try again")


def _read(core: k8s.CoreV1Api, namespace: str) -> k8s.V1ConfigMap | None:
    try:
        found: k8s.V1ConfigMap = core.read_namespaced_config_map(RELEASE_CONFIGMAP, namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return found


def _write(
    core: k8s.CoreV1Api,
    namespace: str,
    found: k8s.V1ConfigMap | None,
    key: str,
    release: str,
) -> bool:
    """Create the ConfigMap, or patch our key at the version read; False when another writer
    came first (409), so the caller reads and decides again."""
    try:
        if found is None:
            core.create_namespaced_config_map(
                namespace,
                k8s.V1ConfigMap(
                    metadata=k8s.V1ObjectMeta(name=RELEASE_CONFIGMAP, namespace=namespace),
                    data={key: release},
                ),
            )
        else:
            assert found.metadata is not None
            # The resourceVersion makes the patch conditional: a newer release written since
            # our read is never overwritten by an older one.
            body = {
                "metadata": {"resourceVersion": found.metadata.resource_version},
                "data": {key: release},
            }
            core.patch_namespaced_config_map(RELEASE_CONFIGMAP, namespace, body)
    except ApiException as err:
        if err.status == 409:
            return False
        raise
    return True
