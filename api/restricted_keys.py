"""Label and taint keys a NodePool may not put on its nodes: the restricted domains.

A pool's `template.labels` and `template.taints` end up on its nodes, written by the kubelet
and the worker, which may write what the pool's author may not. Keys of Kubernetes, of
Cloudburst and of Karpenter are what the scheduler, the node controller, Cloudburst itself
and other tenants' workloads rely on (`kubernetes.io/hostname` of another node, a zone,
another pool's name), so a pool may not set them: Karpenter's rule (pkg/apis/v1/labels.go,
`RestrictedLabelDomains`, `LabelDomainExceptions`, `IsRestrictedLabel`), with our domain.

`restricted_key_problem` says why, in the words every check uses: the NodePool model (so the
trigger and `cloudburst validate` refuse the pool, naming the field) and the NodePool CRD's CEL
rules (the API server refuses it). Only a pool's template is judged: `NodeTemplate`, `Taint`
and NodeClaims also carry keys Cloudburst puts there itself (the tenant label and taint,
cluster/tenancy.py), and are read back from workflow histories.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final, Literal

from pydantic import ValidationError
from pydantic.json_schema import JsonDict
from pydantic_core import InitErrorDetails, PydanticCustomError

from api.labels import GROUP, K8S_INSTANCE_TYPE, NODEPOOL
from api.limits import cel

KeyKind = Literal["label", "taint"]

# Each domain and its subdomains: a key whose prefix (before its first "/") is the domain or
# ends with "." and the domain.
RESTRICTED_DOMAINS: Final = (
    # Kubernetes': the kubelet's and the node controller's (hostname, os, arch, zone, region,
    # instance type, the not-ready and unreachable taints), and what tools set.
    "kubernetes.io",
    "k8s.io",
    # Cloudburst's: pool, claim, provider, region, instance type, capacity type, the tenant's
    # label and taint, the startup, disrupted and interruption taints (api/labels.py).
    GROUP,
    # Karpenter's: its capacity-type label, which Cloudburst sets beside its own, and the keys
    # that tools read as Karpenter's.
    "karpenter.sh",
)

# Label domains within RESTRICTED_DOMAINS that a pool may use (no taint domain is one).
LABEL_DOMAIN_EXCEPTIONS: Final = (
    # A kubelet may put these on its own Node (`--node-labels` accepts them, the
    # NodeRestriction admission plugin lets it), so nothing relies on them to keep pods
    # apart: a pool setting one gives its nodes nothing they could not claim themselves.
    "node.kubernetes.io",
)
# Karpenter's other two exceptions do not apply here:
# - kops.k8s.io: kOps' labels of its instance groups; Cloudburst's nodes are in none, and the
#   kubelet refuses any k8s.io key in `--node-labels`, where a pool's labels go.
# - node-restriction.kubernetes.io: the domain a kubelet may not set on itself, so that pods
#   can rely on it to choose nodes. Only the control plane sets it, here the worker (the
#   tenant label is there): a pool's key there would be written with the worker's authority.

# Keys in an excepted domain that Cloudburst sets itself, from the offering a claim launches
# (api/labels.py, cluster/requirements.py): restricted all the same.
OUR_LABELS_IN_EXCEPTIONS: Final = frozenset({K8S_INSTANCE_TYPE})

# The one restricted key a pool may state, and only with its own name: the pool label, which
# Cloudburst puts on each of the pool's nodes anyway (its own value wins:
# `ownership_labels`, `static_labels`), as the seed's disaster-recovery example states it.
# Another pool's name is refused by the model alone (`pool_label_problem`): only the
# NodePool's root sees its name, and a rule there is judged again on every status write.
POOL_LABEL: Final = NODEPOOL


def restricted_key_problem(key: str, kind: KeyKind) -> str | None:
    """Why a pool may not set the label or taint `key`; None when it may.

    A key's domain is its prefix, before its first "/"; a key without one is the pool's own.
    The pool label passes here: its value is judged by `pool_label_problem`.
    """
    if not _restricted(key, kind):
        return None
    return f"{kind} {key} is restricted: {_REASONS[kind]}"


def pool_label_problem(value: str, pool_name: str) -> str | None:
    """Why a pool named `pool_name` may not set the pool label to `value`; None when it may."""
    return None if value == pool_name else POOL_LABEL_MESSAGE


def refuse_restricted_keys(
    title: str, pool_name: str | None, labels: Mapping[str, str], taint_keys: Sequence[str]
) -> None:
    """Raise a ValidationError naming each restricted key of a pool's template at its field
    (`template.labels.<key>`, `template.taints.<index>.key`, below the model validated).
    Without the pool's name (itself invalid) the pool label's value is not judged."""
    problems: list[InitErrorDetails] = []
    for key, value in labels.items():
        problem = restricted_key_problem(key, "label")
        if key == POOL_LABEL and pool_name is not None:
            problem = pool_label_problem(value, pool_name)
        if problem is not None:
            problems.append(_error(("template", "labels", key), key, problem))
    for index, key in enumerate(taint_keys):
        if (problem := restricted_key_problem(key, "taint")) is not None:
            problems.append(_error(("template", "taints", index, "key"), key, problem))
    if problems:
        raise ValidationError.from_exception_data(title, problems)


def _restricted(key: str, kind: KeyKind) -> bool:
    domain, slash, _ = key.partition("/")
    if not slash or not _within(domain, RESTRICTED_DOMAINS):
        return False
    if kind == "taint":
        return True
    if key == POOL_LABEL:
        return False
    return not _within(domain, LABEL_DOMAIN_EXCEPTIONS) or key in OUR_LABELS_IN_EXCEPTIONS


def _within(domain: str, domains: Iterable[str]) -> bool:
    return any(domain == d or domain.endswith(f".{d}") for d in domains)


def _error(loc: tuple[str | int, ...], key: str, problem: str) -> InitErrorDetails:
    # A validator's refusal (`value_error`): its message names the key already.
    error = PydanticCustomError("value_error", "{problem}", {"problem": problem})
    return InitErrorDetails(type=error, loc=loc, input=key)


def _listed(items: Sequence[str]) -> str:
    return f"{', '.join(items[:-1])} and {items[-1]}" if len(items) > 1 else items[0]


_ALLOWED = ", ".join(f"{domain}/*" for domain in LABEL_DOMAIN_EXCEPTIONS)
_OURS = ", ".join(sorted(OUR_LABELS_IN_EXCEPTIONS))
_SET_BY = f"keys under {_listed(RESTRICTED_DOMAINS)} are set by Kubernetes and Cloudburst"
_REASONS: Final[dict[KeyKind, str]] = {
    "label": (
        f"{_SET_BY} (allowed: {_ALLOWED}, but not {_OURS}, which Cloudburst sets from the "
        "offering); use a key of your own domain, e.g. example.com/team"
    ),
    "taint": f"{_SET_BY}; use a key of your own domain, e.g. example.com/dedicated",
}
POOL_LABEL_MESSAGE: Final = (
    f"label {POOL_LABEL} is restricted: it is the pool's own name, which Cloudburst sets on "
    "the pool's nodes; leave it out, or set it to this pool's name"
)


# --- the API server's copy: CEL rules of the NodePool CRD ---------------------------------
# RE2 (the API server, cel-python) and Python's `re` read these alike: `[.]` for a dot (no
# escapes to survive CEL's string literals), no end anchor (`$` differs before a final
# newline). CEL's `fieldPath` cannot name a map key or a list index, so the rules judge the
# whole map or list and the message names the key.


def _domain_pattern(domains: Iterable[str]) -> str:
    """A key whose prefix is one of `domains` or a subdomain of one."""
    alternatives = "|".join(domain.replace(".", "[.]") for domain in domains)
    return f"^([^/]*[.])?({alternatives})/"


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _cel_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(_cel_string(item) for item in sorted(items)) + "]"


RESTRICTED_KEY_PATTERN: Final = _domain_pattern(RESTRICTED_DOMAINS)
LABEL_EXCEPTION_PATTERN: Final = _domain_pattern(LABEL_DOMAIN_EXCEPTIONS)
# CEL: label key `k` is restricted (the pool label aside); so is taint `t`'s key.
_LABEL_RESTRICTED = (
    f"k.matches({_cel_string(RESTRICTED_KEY_PATTERN)}) && !(k in {_cel_list([POOL_LABEL])}) && "
    f"(!k.matches({_cel_string(LABEL_EXCEPTION_PATTERN)}) || "
    f"k in {_cel_list(OUR_LABELS_IN_EXCEPTIONS)})"
)


def _rule(variable: str, restricted: str, kind: KeyKind, key_of: str) -> JsonDict:
    """No item of `self` (a map's keys, a list's items) is `restricted`, with the model's
    message: `messageExpression` names the first restricted item's key (the item followed by
    `key_of`), `message` is what a server says that cannot evaluate it."""
    found = cel(
        f"!self.exists({variable}, {restricted})", f"a {kind} key is restricted: {_REASONS[kind]}"
    )
    first = f"self.filter({variable}, {restricted})[0]{key_of}"
    found["messageExpression"] = (
        f"{_cel_string(f'{kind} ')} + {first} + {_cel_string(f' is restricted: {_REASONS[kind]}')}"
    )
    return found


# On `spec.template.labels`.
LABELS_RULE: Final = _rule("k", _LABEL_RESTRICTED, "label", "")
# On each item of `spec.template.taints` (where the API server's error names its index): a
# rule over the whole list, whose message filters the list for the key, is estimated past
# the API server's CEL cost budget (64 taints of 317-character keys) and the CRD is refused.
TAINT_RULE: Final = cel(
    f"!self.key.matches({_cel_string(RESTRICTED_KEY_PATTERN)})",
    f"a taint key is restricted: {_REASONS['taint']}",
    ".key",
)
_TAINT_REASON = f" is restricted: {_REASONS['taint']}"
TAINT_RULE["messageExpression"] = (
    f"{_cel_string('taint ')} + self.key + {_cel_string(_TAINT_REASON)}"
)
