"""The bounds of every number, duration and name in NodePool, NodeClass and NodeClaim.

One place, so the models, the generated CRDs (`cloudburst crds`) and docs/resources.md say
the same. A bound is here because a value beyond it cannot be meant and would break
something downstream: datetime arithmetic in a workflow (`date value out of range`), a C int
in the SDK (`Python int too large to convert to C int`), a label the API server refuses, or
a node that expires at once, forever. The regular expressions keep to the subset that
Python's `re`, pydantic's Rust `regex` and the API server's RE2 read alike: no look-around,
no backreferences.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator, Field
from pydantic.json_schema import JsonDict, JsonValue

MINUTE = 60
HOUR = 60 * MINUTE
DAY = 24 * HOUR
YEAR = 365 * DAY

# --- durations (seconds) -------------------------------------------------------------------

# The longest TTL of any kind (after empty, until expired, consolidateAfter): 10 years.
MAX_TTL_S = 10 * YEAR
# A node must live this long before it may expire. Shorter, and a node that takes a few
# minutes to boot and join expires before or right after it is Ready: replaced, expired,
# replaced, forever. Karpenter has no floor (expireAfter: 720h by default); ours is the
# shortest expiry that leaves a slow cloud time to boot a node and run a pod on it.
MIN_EXPIRY_S = 10 * MINUTE
# Drains and unreachable-node waits: at most a year (a timer, not a date, but a year is
# already longer than anyone means).
MAX_GRACE_S = YEAR
# A budget's window after each schedule hit: cron fires at most once a minute (Karpenter
# accepts only minutes and hours), and a window longer than a year never closes.
MIN_BUDGET_WINDOW_S = MINUTE
MAX_BUDGET_WINDOW_S = YEAR
# How long a new VM may take to become a Ready node.
MIN_REGISTRATION_TIMEOUT_S = 10
MAX_REGISTRATION_TIMEOUT_S = DAY
# "1h30m", "45s": at most 9 digits a unit, so no string reaches int() with thousands of digits.
DURATION_PATTERN = (
    r"^([0-9]{1,9}h([0-9]{1,9}m)?([0-9]{1,9}s)?|[0-9]{1,9}m([0-9]{1,9}s)?|[0-9]{1,9}s)$"
)
MAX_DURATION_LENGTH = 32

# --- counts --------------------------------------------------------------------------------

MAX_NODES = 10_000  # minNodes, maxNodes and a budget's node count
MAX_WEIGHT = 100  # Karpenter's weights are 1..100; unset (0 here) is the lowest
MAX_PODS_PER_NODE = 10_000
MAX_BUDGETS = 50  # Karpenter's maxItems
MAX_TAINTS = 64
MAX_LABELS = 64
MAX_SHORT_LIST = 16  # arch, allowedProviders, regions, ids
MAX_OFFERINGS = 100
# "3" (≤ MAX_NODES) or "20%" (≤ 100%): Karpenter's pattern with the count bounded.
BUDGET_NODES_PATTERN = r"^(100%|[0-9]{1,2}%|10000|[0-9]{1,4})$"

# --- quantities ----------------------------------------------------------------------------

MAX_CPU_CORES = 1_000_000
MAX_MEMORY_BYTES = 2**60  # 1Ei
# Kubernetes' quantity grammar (k8s.io/apimachinery resource.Quantity), non-negative, with
# the exponent at most 3 digits: "1e999999999999" is refused before any Decimal arithmetic.
QUANTITY_PATTERN = (
    r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]{1,3})?$"
)
MAX_QUANTITY_LENGTH = 64

# --- money ---------------------------------------------------------------------------------

# The dearest VMs cost about €100/h; ten thousand is a typo's bound, not a price policy.
MAX_PRICE_EUR_PER_HOUR = 10_000.0
MAX_VCPU = float(MAX_CPU_CORES)
MAX_MEMORY_GIB = float(2**30)  # 1Ei

# --- names and text ------------------------------------------------------------------------

MAX_TEXT_LENGTH = 253  # ids, regions, zones, names of things at a provider
MAX_URL_LENGTH = 2048  # endpoints, image references
# RFC 1123 subdomain (object names) and label (namespaces), as the API server checks them.
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
MAX_NAME_LENGTH = 253
MAX_NAMESPACE_LENGTH = 63
# A claim is named `<pool>-<5 characters>` and that name is a node name and a label value
# (63 characters at most), so a pool's name leaves room for the suffix.
MAX_POOL_NAME_LENGTH = 57
MAX_CLAIM_NAME_LENGTH = 63
# Label values and the name part of label keys and taint keys (a qualified name).
LABEL_VALUE_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
MAX_LABEL_VALUE_LENGTH = 63
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
MAX_LABEL_PREFIX_LENGTH = 253
MAX_LABEL_KEY_LENGTH = MAX_LABEL_PREFIX_LENGTH + 1 + 63
# A Secret's data key.
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
# A Tailscale ACL tag (`tag:` and a name of letters, digits and dashes).
TAILSCALE_TAG_PATTERN = r"^tag:[A-Za-z0-9][-A-Za-z0-9]{0,62}$"
# A tailnet as the Tailscale API names it in a path: "-" (the OAuth client's own), an
# organisation ("example.com") or a tailnet id ("T1234CNTRL"); never a "/".
TAILNET_PATTERN = r"^(-|[A-Za-z0-9][-A-Za-z0-9_.@+]{0,252})$"
# MAJOR.MINOR.PATCH, with the "v" the bootstrap activity also accepts.
KUBERNETES_VERSION_PATTERN = r"^v?[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$"
# Five cron fields (printable ASCII) or a macro, as Kubernetes CronJobs; croniter judges the
# fields themselves.
CRON_PATTERN = (
    r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly)"
    r"|[!-~]+ [!-~]+ [!-~]+ [!-~]+ [!-~]+)$"
)
MAX_CRON_LENGTH = 100
# Provider ids (Hetzner networks, firewalls, DigitalOcean keys) are int64 at the provider, but
# a CRD's bounds are JSON numbers the API server holds as float64, and it checks an integer
# only against a bound it can hold exactly: beyond 2^53 every value was refused ("Maximum
# boundary value must be of type integer"). 2^53-1 is the largest it checks.
MAX_PROVIDER_ID = 2**53 - 1

# What each pattern means, for error messages a user can act on (pydantic says "String should
# match pattern '^...$'").
PATTERN_MEANINGS: dict[str, str] = {
    DURATION_PATTERN: "a duration like '30s', '10m' or '1h30m'",
    BUDGET_NODES_PATTERN: f"a node count ('2', at most {MAX_NODES}) or a percentage ('20%')",
    QUANTITY_PATTERN: "a Kubernetes quantity like '500m', '2' or '4Gi'",
    DNS_SUBDOMAIN_PATTERN: "a lowercase DNS name (a-z, 0-9, '-', '.')",
    DNS_LABEL_PATTERN: "a lowercase DNS label (a-z, 0-9, '-'; at most 63)",
    LABEL_VALUE_PATTERN: "a label value (letters, digits, '-', '_', '.'; at most 63)",
    LABEL_KEY_PATTERN: "a label key ('[prefix/]name', the name at most 63)",
    SECRET_KEY_PATTERN: "a Secret key (letters, digits, '-', '_', '.')",
    TAILSCALE_TAG_PATTERN: "a Tailscale tag such as 'tag:cloudburst'",
    TAILNET_PATTERN: "a tailnet: '-' (the OAuth client's own), an organisation or a tailnet id",
    KUBERNETES_VERSION_PATTERN: "a Kubernetes version MAJOR.MINOR.PATCH such as '1.34.3'",
    CRON_PATTERN: "a cron schedule: 5 fields ('0 2 * * *') or a macro ('@daily')",
}

# --- reusable field types ------------------------------------------------------------------

# Numbers are strict: a manifest's "5" or 5.0 or true is refused where a count is meant, as
# the API server refuses it against the CRD's `type: integer`.
Seconds = Annotated[int, Field(strict=True, ge=0)]
Count = Annotated[int, Field(strict=True, ge=0, le=MAX_NODES)]
Text = Annotated[str, Field(max_length=MAX_TEXT_LENGTH)]
Url = Annotated[str, Field(max_length=MAX_URL_LENGTH)]
ObjectName = Annotated[
    str, Field(min_length=1, max_length=MAX_NAME_LENGTH, pattern=DNS_SUBDOMAIN_PATTERN)
]
NamespaceName = Annotated[
    str, Field(min_length=1, max_length=MAX_NAMESPACE_LENGTH, pattern=DNS_LABEL_PATTERN)
]
LabelValue = Annotated[str, Field(max_length=MAX_LABEL_VALUE_LENGTH, pattern=LABEL_VALUE_PATTERN)]
LabelKey = Annotated[
    str, Field(min_length=1, max_length=MAX_LABEL_KEY_LENGTH, pattern=LABEL_KEY_PATTERN)
]


def quantity_text(value: object) -> object:
    """A quantity as Kubernetes reads it: an integer (`cpu: 1000`) is the quantity its digits
    spell ("1000"); a string is judged by the pattern; anything else is refused as it is."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


# Integer or string, as Kubernetes' `resource.Quantity` (the CRD's `x-kubernetes-int-or-string`,
# which `cloudburst crds` writes for it); held as the string. The pattern bounds a string, the
# minimum an integer (each keyword applies to its own type, in the API server as in JSON Schema).
# (The pattern is repeated here: pydantic leaves it out of the schema of a validated string.)
INT_OR_STRING_QUANTITY: JsonDict = {
    "x-kubernetes-int-or-string": True,
    "minimum": 0,
    "pattern": QUANTITY_PATTERN,
}
Quantity = Annotated[
    str,
    BeforeValidator(quantity_text),
    Field(
        min_length=1,
        max_length=MAX_QUANTITY_LENGTH,
        pattern=QUANTITY_PATTERN,
        json_schema_extra=INT_OR_STRING_QUANTITY,
    ),
]
Duration = Annotated[
    str, Field(min_length=2, max_length=MAX_DURATION_LENGTH, pattern=DURATION_PATTERN)
]
ProviderId = Annotated[int, Field(strict=True, ge=1, le=MAX_PROVIDER_ID)]
Price = Annotated[float, Field(strict=True, allow_inf_nan=False, le=MAX_PRICE_EUR_PER_HOUR)]


# --- the API server's copy of the cross-field rules ------------------------------------------


def cel(rule: str, message: str, field_path: str | None = None) -> JsonDict:
    """One `x-kubernetes-validations` rule: the API server's copy of a model validator.

    `cloudburst crds` carries them into the CRDs; tests/unit/test_bounds.py evaluates each one
    with a CEL interpreter against documents the model accepts and refuses.
    """
    rule_dict: JsonDict = {"rule": rule, "message": message}
    if field_path:
        rule_dict["fieldPath"] = field_path
    return rule_dict


def validations(*rules: JsonDict) -> JsonDict:
    """A model's `json_schema_extra`: its CEL rules."""
    listed: list[JsonValue] = [*rules]
    return {"x-kubernetes-validations": listed}


def _quantity_at_most(field: str, bound: str) -> str:
    """CEL: `self.<field>`, when present, is at most `bound`. The API server runs CEL rules on
    a value its schema's pattern refused too, and parsing a quantity such as `1e999999999999`
    keeps it busy past its request timeout: only a value of the pattern (exponents of three
    digits at most) is parsed, any other is the pattern's to refuse."""
    pattern = QUANTITY_PATTERN.replace("\\", "\\\\")
    # An int-or-string field: `string()` reads an integer as the quantity its digits spell.
    text = f"string(self.{field})"
    return (
        f"!has(self.{field}) || !{text}.matches('{pattern}') || "
        f"quantity({text}).compareTo(quantity('{bound}')) <= 0"
    )


# The API server's copy of the cpu and memory bounds (`api.quantity.cpu_within_bounds`,
# `memory_within_bounds`), on every model with `cpu` and `memory` quantities.
CPU_BOUND_RULE = cel(
    _quantity_at_most("cpu", str(MAX_CPU_CORES)),
    f"cpu must be at most {MAX_CPU_CORES} cores",
    ".cpu",
)
MEMORY_BOUND_RULE = cel(
    _quantity_at_most("memory", "1Ei"),
    "memory must be at most 1Ei",
    ".memory",
)


def label_key(key: str) -> str:
    """A qualified name (`[prefix/]name`), as Kubernetes checks label and taint keys."""
    if not re.fullmatch(LABEL_KEY_PATTERN, key):
        raise ValueError(f"{key[:80]!r} is not a label key ('[prefix/]name', name ≤ 63)")
    prefix, _, _ = key.rpartition("/")
    if len(prefix) > MAX_LABEL_PREFIX_LENGTH:
        raise ValueError(f"the prefix of {key[:80]!r} is longer than {MAX_LABEL_PREFIX_LENGTH}")
    return key
