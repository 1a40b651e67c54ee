"""Karpenter's v1 NodePools (karpenter.sh/v1) and EC2NodeClasses (karpenter.k8s.aws/v1) as
Cloudburst NodePools and NodeClasses: `cloudburst convert`.

Written from Karpenter's v1 API reference (karpenter.sh, "NodePools" and "NodeClasses"). Pure:
a document in, the converted object and its notes out. Every field of the input is accounted
for: converted, approximated, or listed as not converted with the reason. A field no mapping
reads is listed too (`_leftovers`), so a field this module does not know is never dropped in
silence. What Karpenter leaves to its defaults is written out where ours differ (a default
here is not Karpenter's), and what Cloudburst needs that Karpenter has no field for (the AWS
region, the API server nodes join) is a placeholder listed to fill in.

docs/migrating-from-karpenter.md puts the two APIs side by side.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import ValidationError

from api.limits import MAX_GRACE_S, MIN_EXPIRY_S
from api.nodepool import API_VERSION, Budget, parse_duration
from api.problems import field_errors
from api.quantity import memory_bytes
from api.restricted_keys import restricted_key_problem

NODEPOOL_API = "karpenter.sh/v1"
EC2NODECLASS_API = "karpenter.k8s.aws/v1"
KARPENTER_GROUPS = ("karpenter.sh", "karpenter.k8s.aws")
# What a placeholder says, so that `grep REPLACE-ME` finds every one.
PLACEHOLDER = "REPLACE-ME"
PLACEHOLDER_API_SERVER = f"https://{PLACEHOLDER}:6443"

# Karpenter v1's defaults where ours differ (its CRDs' `default`s): written out, so that the
# converted pool behaves as the Karpenter one did.
KARPENTER_EXPIRE_AFTER = "720h"
KARPENTER_CONSOLIDATION_POLICY = "WhenEmptyOrUnderutilized"
KARPENTER_CONSOLIDATE_AFTER = "0s"

ARCH_LABEL = "kubernetes.io/arch"
OS_LABEL = "kubernetes.io/os"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
REGION_LABEL = "topology.kubernetes.io/region"
ZONE_LABEL = "topology.kubernetes.io/zone"
_ARCHES = ("amd64", "arm64")
_CAPACITY_TYPES = ("spot", "on-demand")
# An AWS availability zone is its region and a letter ("us-west-2a"); Local and Wavelength
# zones ("us-west-2-lax-1a") are not, and are not approximated.
_AWS_ZONE = re.compile(r"^([a-z]{2}(?:-[a-z]+)+-[0-9]+)[a-z]$")
_NO_INSTANCE_FILTER = (
    "Cloudburst pools do not filter instance types: a pool ranks every offering of its "
    "providers by price (requirements.maxPriceEurPerHour caps it); a pod that needs a type "
    "selects it with a nodeSelector or node affinity on node.kubernetes.io/instance-type"
)


class NoteKind(StrEnum):
    NOT_CONVERTED = "not-converted"  # no counterpart: the field is left out
    APPROXIMATED = "approximated"  # converted to the nearest thing, which is not the same
    DEFAULT = "default"  # Karpenter's default, written out because ours differs
    FILL_IN = "fill-in"  # Cloudburst needs it, Karpenter has no field for it: a placeholder


@dataclass(frozen=True)
class Note:
    source: str  # "karpenter.yaml#1 (karpenter.sh/v1 NodePool default)"
    path: str  # the input's field ("spec.template.spec.startupTaints"); for FILL_IN the output's
    kind: NoteKind
    reason: str

    def __str__(self) -> str:
        return f"{self.source}: {self.path}: {self.kind.value}: {self.reason}"

    def as_dict(self) -> dict[str, str]:
        return {"source": self.source, "path": self.path, "kind": self.kind, "reason": self.reason}


@dataclass
class Conversion:
    converted: dict[str, Any]
    notes: list[Note]


@dataclass(frozen=True)
class ConvertOptions:
    namespace: str = "default"
    # EC2NodeClass has neither: Karpenter launches into its own cluster's region and its nodes
    # join its own cluster.
    aws_region: str | None = None
    api_server: str | None = None


def is_karpenter(document: object) -> bool:
    """Whether a document is of one of Karpenter's API groups."""
    if not isinstance(document, dict) or not isinstance(document.get("apiVersion"), str):
        return False
    return str(document["apiVersion"]).split("/")[0] in KARPENTER_GROUPS


def convertible(document: dict[str, Any]) -> bool:
    return (document.get("apiVersion"), document.get("kind")) in (
        (NODEPOOL_API, "NodePool"),
        (EC2NODECLASS_API, "EC2NodeClass"),
    )


def convert(document: dict[str, Any], source: str, options: ConvertOptions) -> Conversion:
    """One Karpenter v1 NodePool or EC2NodeClass as ours (`convertible` says which can be)."""
    reading = _Reading(document, source)
    if document.get("kind") == "NodePool":
        converted = _nodepool(reading, options)
    else:
        converted = _nodeclass(reading, options)
    reading.notes += _leftovers(reading)
    return Conversion(converted, reading.notes)


# --- NodePool --------------------------------------------------------------------------------


def _nodepool(reading: _Reading, options: ConvertOptions) -> dict[str, Any]:
    name = reading.take("metadata", "name")
    spec: dict[str, Any] = {}
    requirements: dict[str, Any] = {}
    template: dict[str, Any] = {}
    disruption: dict[str, Any] = {}
    _metadata(reading)
    reading.noted(("status",), NoteKind.NOT_CONVERTED, "Karpenter's controller writes it")

    node_class = reading.get("spec", "template", "spec", "nodeClassRef")
    if isinstance(node_class, dict):
        if node_class.get("group") == "karpenter.k8s.aws" and node_class.get("kind") == (
            "EC2NodeClass"
        ):
            reading.consume("spec", "template", "spec", "nodeClassRef")
            spec["nodeClassRef"] = node_class.get("name")
            # A Karpenter pool on EC2 launches on AWS; other clouds are one line away.
            requirements["allowedProviders"] = ["aws"]
        else:
            reading.noted(
                ("spec", "template", "spec", "nodeClassRef"),
                NoteKind.NOT_CONVERTED,
                "only EC2NodeClasses (group karpenter.k8s.aws) convert",
            )

    labels = _labels(reading, ("spec", "template", "metadata", "labels"))
    reading.noted(
        ("spec", "template", "metadata", "annotations"),
        NoteKind.NOT_CONVERTED,
        "Cloudburst puts no annotations of a pool's on its nodes",
    )
    taints = _taints(reading, ("spec", "template", "spec", "taints"))
    reading.noted(
        ("spec", "template", "spec", "startupTaints"),
        NoteKind.NOT_CONVERTED,
        "Cloudburst's nodes carry its own startup taint until they are ready; a pool "
        "declares no others",
    )
    _requirements(reading, requirements, labels)
    _expiry_and_grace(reading, disruption)
    _disruption(reading, disruption)
    limits = _limits(reading)
    weight = reading.take("spec", "weight")
    if weight is not None:
        spec["weight"] = weight

    if requirements:
        spec["requirements"] = requirements
    if limits:
        spec["limits"] = limits
    if labels or taints:
        template = {k: v for k, v in (("labels", labels), ("taints", taints)) if v}
        spec["template"] = template
    if disruption:
        spec["disruption"] = disruption
    return {
        "apiVersion": API_VERSION,
        "kind": "NodePool",
        "metadata": _our_metadata(reading, name, options),
        "spec": spec,
    }


def _labels(reading: _Reading, at: tuple[str, ...]) -> dict[str, Any]:
    labels = reading.get(*at)
    if not isinstance(labels, dict):
        return {}
    kept: dict[str, Any] = {}
    for key, value in labels.items():
        problem = restricted_key_problem(str(key), "label")
        if problem:
            reading.noted((*at, str(key)), NoteKind.NOT_CONVERTED, problem)
        else:
            reading.consume(*at, str(key))
            kept[str(key)] = value
    return kept


def _taints(reading: _Reading, at: tuple[str, ...]) -> list[dict[str, Any]]:
    taints = reading.get(*at)
    if not isinstance(taints, list):
        return []
    kept = []
    for index, taint in enumerate(taints):
        if not isinstance(taint, dict):
            continue
        problem = restricted_key_problem(str(taint.get("key")), "taint")
        if problem:
            reading.noted((*at, index), NoteKind.NOT_CONVERTED, problem)
            continue
        for name in ("key", "value", "effect"):
            if name in taint:
                reading.consume(*at, index, name)
        kept.append({k: taint[k] for k in ("key", "value", "effect") if k in taint})
    return kept


def _requirements(reading: _Reading, requirements: dict[str, Any], labels: dict[str, Any]) -> None:
    at = ("spec", "template", "spec", "requirements")
    found = reading.get(*at)
    if not isinstance(found, list):
        return
    zones: list[tuple[int, list[str]]] = []
    has_region = False
    for index, requirement in enumerate(found):
        if not isinstance(requirement, dict):
            continue
        here = (*at, index)
        key, operator = requirement.get("key"), requirement.get("operator")
        listed_values = requirement.get("values")
        values = [str(v) for v in listed_values] if isinstance(listed_values, list) else []
        reading.noted(
            (*here, "minValues"),
            NoteKind.NOT_CONVERTED,
            "a pool launches the cheapest offering that fits; it keeps no minimum of "
            "distinct values",
        )
        if key == ARCH_LABEL:
            chosen, unknown = _chosen(operator, values, _ARCHES)
            if chosen is not None:
                requirements["arch"] = chosen
                reading.consume_requirement(here)
                if unknown:
                    reading.noted(
                        (*here, "values"),
                        NoteKind.APPROXIMATED,
                        f"{', '.join(unknown)}: Cloudburst launches amd64 and arm64 only",
                    )
        elif key == CAPACITY_TYPE_LABEL:
            chosen, unknown = _chosen(operator, values, _CAPACITY_TYPES)
            if chosen:
                requirements["capacityType"] = chosen
                reading.consume_requirement(here)
                if unknown:
                    reading.noted(
                        (*here, "values"),
                        NoteKind.APPROXIMATED,
                        f"{', '.join(unknown)}: Cloudburst launches spot and on-demand capacity "
                        "only (no capacity reservations)",
                    )
        elif key == REGION_LABEL and operator == "In" and values:
            requirements["regionConstraint"] = values
            has_region = True
            reading.consume_requirement(here)
        elif key == ZONE_LABEL and operator == "In" and values:
            zones.append((index, values))
        elif key == OS_LABEL and (operator == "Exists" or (operator == "In" and "linux" in values)):
            reading.consume_requirement(here)
            if operator == "In" and values != ["linux"]:
                reading.noted(
                    (*here, "values"), NoteKind.APPROXIMATED, "Cloudburst's nodes run Linux only"
                )
        elif isinstance(key, str) and (
            key == "node.kubernetes.io/instance-type" or key.startswith("karpenter.k8s.aws/")
        ):
            reading.noted(here, NoteKind.NOT_CONVERTED, _NO_INSTANCE_FILTER)
        elif (
            isinstance(key, str)
            and operator == "In"
            and len(values) == 1
            and restricted_key_problem(key, "label") is None
        ):
            # Karpenter labels its nodes with a requirement of one value: so does a label.
            labels[key] = values[0]
            reading.consume_requirement(here)
        else:
            reading.noted(
                here,
                NoteKind.NOT_CONVERTED,
                "a pool states providers, regions, architectures and capacity types; "
                "other node requirements are the pods' own (nodeSelector, node affinity)",
            )
    for index, values in zones:
        regions = [m.group(1) for v in values if (m := _AWS_ZONE.match(v))]
        if has_region or len(regions) != len(values):
            reading.noted(
                (*at, index),
                NoteKind.NOT_CONVERTED,
                "a pool chooses regions, not zones; pods choose zones (topology.kubernetes.io/"
                "zone in their node affinity)",
            )
            continue
        requirements["regionConstraint"] = sorted(set(regions))
        has_region = True
        reading.consume_requirement((*at, index))
        reading.noted(
            (*at, index),
            NoteKind.APPROXIMATED,
            f"zones {', '.join(values)} widened to their regions {', '.join(sorted(set(regions)))}: "
            "a pool chooses regions; pods that need a zone select it",
        )


def _chosen(
    operator: object, values: list[str], known: tuple[str, ...]
) -> tuple[list[str] | None, list[str]]:
    """The known values a requirement allows, and its values we do not know."""
    unknown = [v for v in values if v not in known]
    if operator == "In":
        chosen = [v for v in known if v in values]
    elif operator == "NotIn":
        chosen = [v for v in known if v not in values]
    elif operator == "Exists":
        chosen = list(known)
    else:
        return None, unknown
    return (chosen or None), unknown


def _expiry_and_grace(reading: _Reading, disruption: dict[str, Any]) -> None:
    at = ("spec", "template", "spec")
    expire = reading.get(*at, "expireAfter")
    if expire is None:
        seconds = parse_duration(KARPENTER_EXPIRE_AFTER)
        disruption["ttlSecondsUntilExpired"] = seconds
        reading.notes.append(
            reading.note(
                "spec.template.spec.expireAfter",
                NoteKind.DEFAULT,
                f"Karpenter's default {KARPENTER_EXPIRE_AFTER} written as "
                f"disruption.ttlSecondsUntilExpired: {seconds} (Cloudburst's nodes do not "
                "expire by default)",
            )
        )
    elif expire == "Never":
        reading.consume(*at, "expireAfter")
    else:
        seconds_or_why = _seconds(expire)
        if isinstance(seconds_or_why, str):
            reading.noted((*at, "expireAfter"), NoteKind.NOT_CONVERTED, seconds_or_why)
        elif seconds_or_why < MIN_EXPIRY_S:
            reading.noted(
                (*at, "expireAfter"),
                NoteKind.NOT_CONVERTED,
                f"{expire}: Cloudburst's nodes live at least {MIN_EXPIRY_S // 60}m (a node that "
                "expires before it could be used is replaced forever)",
            )
        else:
            disruption["ttlSecondsUntilExpired"] = seconds_or_why
            reading.consume(*at, "expireAfter")
    grace = reading.get(*at, "terminationGracePeriod")
    if grace is not None:
        seconds_or_why = _seconds(grace)
        if isinstance(seconds_or_why, str):
            reading.noted((*at, "terminationGracePeriod"), NoteKind.NOT_CONVERTED, seconds_or_why)
        elif seconds_or_why > MAX_GRACE_S:
            reading.noted(
                (*at, "terminationGracePeriod"),
                NoteKind.NOT_CONVERTED,
                f"{grace}: a drain waits at most a year",
            )
        else:
            disruption["terminationGracePeriodSeconds"] = seconds_or_why
            reading.consume(*at, "terminationGracePeriod")


def _seconds(duration: object) -> int | str:
    """A Karpenter (Go) duration in seconds, or why it is none of ours ("1.5h", "500ms")."""
    try:
        return parse_duration(str(duration))
    except ValueError as err:
        return f"{err}: Cloudburst counts whole hours, minutes and seconds"


def _disruption(reading: _Reading, disruption: dict[str, Any]) -> None:
    at = ("spec", "disruption")
    policy = reading.get(*at, "consolidationPolicy")
    after = reading.get(*at, "consolidateAfter")
    if policy is None:
        policy = KARPENTER_CONSOLIDATION_POLICY
        reading.notes.append(
            reading.note(
                "spec.disruption.consolidationPolicy",
                NoteKind.DEFAULT,
                f"Karpenter's default {policy} written out (Cloudburst's is WhenEmpty)",
            )
        )
    elif policy in ("WhenEmpty", "WhenEmptyOrUnderutilized"):
        reading.consume(*at, "consolidationPolicy")
    else:
        reading.noted((*at, "consolidationPolicy"), NoteKind.NOT_CONVERTED, f"unknown {policy!r}")
        policy = None
    if after is None:
        after = KARPENTER_CONSOLIDATE_AFTER
        reading.notes.append(
            reading.note(
                "spec.disruption.consolidateAfter",
                NoteKind.DEFAULT,
                f"Karpenter's default {after} written out (Cloudburst's is 30s)",
            )
        )
    elif after != "Never" and isinstance(_seconds(after), str):
        reading.noted((*at, "consolidateAfter"), NoteKind.NOT_CONVERTED, str(_seconds(after)))
        after = None
    else:
        reading.consume(*at, "consolidateAfter")
    if after == "Never":
        # Karpenter consolidates nothing: no empty node leaves, no underutilized one moves.
        disruption["consolidationPolicy"] = "WhenEmpty"
        disruption["ttlSecondsAfterEmpty"] = None
    elif after is not None:
        # Karpenter's one wait is two of ours: how long a node stays empty, and how long a
        # pool waits before consolidating underutilized nodes.
        disruption["ttlSecondsAfterEmpty"] = parse_duration(after)
        disruption["consolidateAfter"] = after
        if policy is not None:
            disruption["consolidationPolicy"] = policy
    budgets = reading.get(*at, "budgets")
    if isinstance(budgets, list):
        kept = []
        for index, budget in enumerate(budgets):
            try:
                Budget.model_validate(budget)
            except ValidationError as err:
                why = "; ".join(f"{p or 'budget'}: {m}" for p, m in field_errors(err))
                reading.noted((*at, "budgets", index), NoteKind.NOT_CONVERTED, why)
                continue
            reading.consume(*at, "budgets", index)
            kept.append(budget)
        disruption["budgets"] = kept


def _limits(reading: _Reading) -> dict[str, Any]:
    at = ("spec", "limits")
    limits = reading.get(*at)
    if not isinstance(limits, dict):
        return {}
    out = {}
    for name in ("cpu", "memory"):
        if name in limits:
            out[name] = limits[name]
            reading.consume(*at, name)
    for name in limits:
        if name not in out:
            reading.noted(
                (*at, str(name)),
                NoteKind.NOT_CONVERTED,
                "a pool limits cpu, memory and its node count (limits.maxNodes)",
            )
    return out


# --- EC2NodeClass ----------------------------------------------------------------------------


def _nodeclass(reading: _Reading, options: ConvertOptions) -> dict[str, Any]:
    name = reading.take("metadata", "name")
    _metadata(reading)
    reading.noted(("status",), NoteKind.NOT_CONVERTED, "Karpenter's controller writes it")
    aws: dict[str, Any] = {}
    if options.aws_region:
        aws["region"] = options.aws_region
    else:
        aws["region"] = f"{PLACEHOLDER}-region"
        reading.notes.append(
            reading.note(
                "spec.aws.region",
                NoteKind.FILL_IN,
                "an EC2NodeClass has no region (Karpenter launches in its cluster's): give "
                "--aws-region, or write it in",
            )
        )
    _selector_ids(reading, "subnetSelectorTerms", aws, "subnetId", many=False)
    _selector_ids(reading, "securityGroupSelectorTerms", aws, "securityGroupIds", many=True)
    _ami(reading, aws)
    profile = reading.take("spec", "instanceProfile")
    if profile is not None:
        aws["instanceProfile"] = profile
    reading.noted(
        ("spec", "role"),
        NoteKind.NOT_CONVERTED,
        "Cloudburst takes an instance profile (aws.instanceProfile), not a role to make one of",
    )
    public_ip = reading.take("spec", "associatePublicIPAddress")
    if public_ip is not None:
        aws["associatePublicIp"] = public_ip
    _root_volume(reading, aws)
    for field_name, why in _NODECLASS_UNMAPPED.items():
        reading.noted(("spec", field_name), NoteKind.NOT_CONVERTED, why)
    api_server = options.api_server or PLACEHOLDER_API_SERVER
    if not options.api_server:
        reading.notes.append(
            reading.note(
                "spec.join.hostApiServer",
                NoteKind.FILL_IN,
                "where nodes join the cluster (Karpenter's join their own cluster): give "
                "--api-server, or write it in",
            )
        )
    return {
        "apiVersion": API_VERSION,
        "kind": "NodeClass",
        "metadata": _our_metadata(reading, name, options),
        "spec": {"aws": aws, "join": {"hostApiServer": api_server}},
    }


_NODECLASS_UNMAPPED = {
    "amiFamily": "Cloudburst bootstraps every node itself (cloud-init, kubeadm join); the "
    "image is aws.image / aws.imageArm64",
    "userData": "Cloudburst writes the node's user data (its bootstrap); `cloudburst bootstrap "
    "render` shows it",
    "kubelet": "the kubelet's settings are the bootstrap's (kubeadm), not a NodeClass's",
    "tags": "Cloudburst tags instances and volumes with their claim's own labels",
    "metadataOptions": "Cloudburst launches with IMDSv2 required, its own setting",
    "instanceStorePolicy": "no counterpart",
    "detailedMonitoring": "no counterpart",
    "context": "no counterpart (EC2 fleet context)",
    "capacityReservationSelectorTerms": "Cloudburst has no capacity reservations",
}


def _selector_ids(
    reading: _Reading, terms_field: str, aws: dict[str, Any], ours: str, *, many: bool
) -> None:
    at = ("spec", terms_field)
    terms = reading.get(*at)
    if not isinstance(terms, list):
        return
    ids: list[str] = []
    for index, term in enumerate(terms):
        if isinstance(term, dict) and set(term) == {"id"} and (many or not ids):
            ids.append(str(term["id"]))
            reading.consume(*at, index)
        else:
            what = f"Cloudburst takes {'ids' if many else 'one subnet id'} ({ours})"
            reading.noted(
                (*at, index),
                NoteKind.NOT_CONVERTED,
                f"{what}: selection by tags or names has no counterpart",
            )
    if ids:
        aws[ours] = ids if many else ids[0]


def _ami(reading: _Reading, aws: dict[str, Any]) -> None:
    at = ("spec", "amiSelectorTerms")
    terms = reading.get(*at)
    if not isinstance(terms, list):
        return
    only_id = len(terms) == 1 and isinstance(terms[0], dict) and set(terms[0]) == {"id"}
    if only_id:
        aws["image"] = terms[0]["id"]
        reading.consume(*at, 0)
        reading.noted(
            (*at, 0),
            NoteKind.APPROXIMATED,
            "taken as the amd64 image (aws.image); an arm64 one goes in aws.imageArm64",
        )
        return
    for index in range(len(terms)):
        reading.noted(
            (*at, index),
            NoteKind.NOT_CONVERTED,
            "Cloudburst takes one image per architecture (aws.image, aws.imageArm64: an AMI "
            "id or resolve:ssm: parameter), not a selection; its default is Ubuntu 24.04",
        )


def _root_volume(reading: _Reading, aws: dict[str, Any]) -> None:
    at = ("spec", "blockDeviceMappings")
    mappings = reading.get(*at)
    if not isinstance(mappings, list):
        return
    roots = [
        i
        for i, m in enumerate(mappings)
        if isinstance(m, dict) and (m.get("rootVolume") or len(mappings) == 1)
    ]
    for index, mapping in enumerate(mappings):
        here = (*at, index)
        if index not in roots[:1] or not isinstance(mapping, dict):
            reading.noted(here, NoteKind.NOT_CONVERTED, "Cloudburst sizes the root volume only")
            continue
        found = mapping.get("ebs")
        ebs: dict[str, Any] = found if isinstance(found, dict) else {}
        size = ebs.get("volumeSize")
        if size is not None:
            try:
                aws["rootVolumeGib"] = math.ceil(memory_bytes(size) / 2**30)
                reading.consume(*here, "ebs", "volumeSize")
            except ValueError as err:
                reading.noted((*here, "ebs", "volumeSize"), NoteKind.NOT_CONVERTED, str(err))
        if "deviceName" in mapping:
            aws["rootDeviceName"] = mapping["deviceName"]
            reading.consume(*here, "deviceName")
        if "rootVolume" in mapping:
            reading.consume(*here, "rootVolume")
        for name in mapping.get("ebs") or {}:
            if name != "volumeSize":
                reading.noted(
                    (*here, "ebs", str(name)),
                    NoteKind.NOT_CONVERTED,
                    "Cloudburst's root volume is gp3, deleted with the instance; its size and device are "
                    "the settings",
                )


# --- metadata --------------------------------------------------------------------------------


def _metadata(reading: _Reading) -> None:
    """The input's own metadata: its labels carry over, what the API server sets does not."""
    metadata = reading.get("metadata")
    if not isinstance(metadata, dict):
        return
    for name in metadata:
        if name in ("name", "labels"):
            continue
        reading.noted(
            ("metadata", str(name)),
            NoteKind.NOT_CONVERTED,
            "set by the API server, or Karpenter's own"
            if name != "annotations"
            else "the Karpenter object's annotations are not carried over",
        )


def _our_metadata(reading: _Reading, name: object, options: ConvertOptions) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": options.namespace}
    labels = reading.get("metadata", "labels")
    if isinstance(labels, dict) and labels:
        metadata["labels"] = labels
        reading.consume("metadata", "labels")
    return metadata


# --- reading, with every field accounted for -------------------------------------------------

Path = tuple[str | int, ...]


@dataclass
class _Reading:
    document: dict[str, Any]
    source: str
    consumed: set[Path] = field(default_factory=set)
    notes: list[Note] = field(default_factory=list)
    noted_paths: set[Path] = field(default_factory=set)

    def get(self, *path: str | int) -> Any:
        node: Any = self.document
        for part in path:
            if isinstance(part, int):
                if not isinstance(node, list) or part >= len(node):
                    return None
            elif not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def take(self, *path: str | int) -> Any:
        value = self.get(*path)
        if value is not None:
            self.consumed.add(path)
        return value

    def consume(self, *path: str | int) -> None:
        self.consumed.add(path)

    def consume_requirement(self, at: Path) -> None:
        for name in ("key", "operator", "values"):
            self.consumed.add((*at, name))

    def noted(self, path: Path, kind: NoteKind, reason: str) -> None:
        """A note about a field of the input, if it is there."""
        if self.get(*path) is None:
            return
        self.noted_paths.add(path)
        self.notes.append(self.note(_shown(path), kind, reason))

    def note(self, path: str, kind: NoteKind, reason: str) -> Note:
        return Note(self.source, path, kind, reason)


def _leftovers(reading: _Reading) -> list[Note]:
    """A note for every field of the input no mapping read nor noted."""
    marked = reading.consumed | reading.noted_paths
    return [
        reading.note(_shown(path), NoteKind.NOT_CONVERTED, "no counterpart in Cloudburst")
        for path in _unread(reading.document, (), marked)
        if path not in (("apiVersion",), ("kind",))
    ]


def _unread(value: Any, at: Path, marked: set[Path]) -> Iterator[Path]:
    if at in marked:
        return
    below = any(len(path) > len(at) and path[: len(at)] == at for path in marked)
    if isinstance(value, dict) and value:
        for key, child in value.items():
            yield from _unread(child, (*at, str(key)), marked)
    elif isinstance(value, list) and value and below:
        for index, child in enumerate(value):
            yield from _unread(child, (*at, index), marked)
    elif at and value not in (None, {}, []):  # an empty field says nothing to convert
        yield at


def _shown(path: Path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text
