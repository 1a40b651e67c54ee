"""kube-apiserver's PodNodeSelector and PodTolerationRestriction admission plugins, as upstream
runs them.

Both are off in a stock kube-apiserver until `--enable-admission-plugins` names them.
Cloudburst's docs tell operators to enable them (a tenant's namespace then pins its pods to
the tenant's nodes), and the emulator stands for a cluster configured that way: both run
unless `KubeApiServer(disable_admission_plugins=[...])` (`--disable-admission-plugins`) names
them. `admission_config` holds what `--admission-control-config-file` would give each plugin.

PodNodeSelector (k8s.io/kubernetes plugin/pkg/admission/podnodeselector/admission.go) judges
a pod's create only: its handler takes no updates, so a pod is never judged again when its
namespace's selector changes.
- The namespace's `scheduler.alpha.kubernetes.io/node-selector` annotation ("k=v,k2=v2", read
  by labels.ConvertSelectorToLabelsMap) or, when the annotation is absent, the configured
  `clusterDefaultNodeSelector` is merged into the pod's `spec.nodeSelector`.
- A key the pod sets to another value is refused, 403 Forbidden: `pods "web" is forbidden: pod
  node label selector conflicts with its namespace node label selector`.
- A namespace's whitelist in the configuration must hold every key and value of the merged
  selector (403, `... pod node label selector labels conflict with its namespace whitelist`).
- A selector that does not parse is answered with the parser's error as it is (`invalid
  selector: [a b c]`, `<nil>: Invalid value: ...`): the plugin returns it bare, and the API
  server answers a bare error 500 with no reason.

PodTolerationRestriction (plugin/pkg/admission/podtolerationrestriction/admission.go, with
pkg/util/tolerations) judges creates and updates of the pod itself, never its subresources.
- On create, the namespace's `scheduler.alpha.kubernetes.io/defaultTolerations` (a JSON list
  of tolerations; when the annotation is absent, the configured `default`) are merged into the
  pod's tolerations.
- On create and on update, a pod whose QoS class is not BestEffort also gets the
  `node.kubernetes.io/memory-pressure` Exists NoSchedule toleration.
- Merging (MergeTolerations) keeps the pod's tolerations first and drops any toleration that
  another one in the list already covers (isSuperset).
- Every toleration of the result must be covered by an entry of the namespace's
  `scheduler.alpha.kubernetes.io/tolerationsWhitelist` (when the annotation is absent, the
  configured `whitelist`; an empty one allows anything): a bare error again, 500 with no
  reason, `pod tolerations (possibly merged with namespace default tolerations) conflict with
  its namespace whitelist` (`cluster whitelist` when the configured list judged). An
  annotation that is not a JSON list of tolerations answers `encoding/json`'s error the same
  way.

Order: in kube-apiserver's plugin order PodNodeSelector comes before DefaultTolerationSeconds
and PodTolerationRestriction after it, so the 300 s `not-ready` and `unreachable` tolerations
DefaultTolerationSeconds adds to every new pod (sim/kubeapi/builtins.py) are merged and judged
like the pod's own: a whitelist must cover them (`{"operator": "Exists", "effect":
"NoExecute"}` does) or it refuses every new pod. The store runs both plugins after
DefaultTolerationSeconds; PodNodeSelector touches nothing else, so its answer is the same.
Both answer before the object's own validation (422), dry runs and server-side applies
included; writes the store makes for itself, and objects a test plants with `Store.create`
without options, skip them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from api.quantity import parse_quantity
from sim.kubeapi import objectmeta
from sim.kubeapi.errors import ApiError, FieldError, go_quote
from sim.kubeapi.resources import NAMESPACES

if TYPE_CHECKING:
    from sim.kubeapi.store import Store

Obj = dict[str, Any]

NODE_SELECTOR = "PodNodeSelector"
TOLERATION_RESTRICTION = "PodTolerationRestriction"
PLUGINS = (NODE_SELECTOR, TOLERATION_RESTRICTION)

NODE_SELECTOR_ANNOTATION = "scheduler.alpha.kubernetes.io/node-selector"
DEFAULT_TOLERATIONS_ANNOTATION = "scheduler.alpha.kubernetes.io/defaultTolerations"
TOLERATIONS_WHITELIST_ANNOTATION = "scheduler.alpha.kubernetes.io/tolerationsWhitelist"
# PodNodeSelector's configuration: `podNodeSelectorPluginConfig` maps this key to the
# cluster's default selector and each namespace's name to its whitelist.
CLUSTER_DEFAULT_NODE_SELECTOR = "clusterDefaultNodeSelector"

SELECTOR_CONFLICT = "pod node label selector conflicts with its namespace node label selector"
SELECTOR_NOT_WHITELISTED = "pod node label selector labels conflict with its namespace whitelist"
TOLERATIONS_NOT_WHITELISTED = (
    "pod tolerations (possibly merged with namespace default tolerations) conflict with its "
    "{scope} whitelist"
)


@dataclass(frozen=True)
class Toleration:
    """A core.Toleration: what its semantic equality (and so the merge) compares."""

    key: str = ""
    operator: str = ""  # "" means Equal to the scheduler, but not to isSuperset
    value: str = ""
    effect: str = ""
    seconds: int | None = None  # tolerationSeconds

    def as_json(self) -> Obj:
        """The v1 JSON form: empty fields are omitted."""
        fields = (
            ("key", self.key),
            ("operator", self.operator),
            ("value", self.value),
            ("effect", self.effect),
        )
        out: Obj = {name: value for name, value in fields if value}
        if self.seconds is not None:
            out["tolerationSeconds"] = self.seconds
        return out


MEMORY_PRESSURE = Toleration("node.kubernetes.io/memory-pressure", "Exists", "", "NoSchedule")


class PodAdmission:
    """The two plugins as one API server runs them: which are on, and their configuration.

    `config` maps a plugin's name to what its configuration file holds:
    `{"PodNodeSelector": {"podNodeSelectorPluginConfig": {"clusterDefaultNodeSelector":
    "k=v", "<namespace>": "k=v"}}, "PodTolerationRestriction": {"default": [...],
    "whitelist": [...]}}`. A name or a toleration it cannot read is a ValueError, as
    kube-apiserver refuses to start.
    """

    def __init__(
        self,
        disabled: Iterable[str] = (),
        config: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        off = set(disabled)
        config = dict(config or {})
        for name in sorted(off | set(config)):
            if name not in PLUGINS:
                raise ValueError(
                    f"admission plugin {name!r} is unknown here: the emulator's are "
                    f"{', '.join(PLUGINS)}"
                )
        self.enabled = frozenset(PLUGINS) - off
        selectors = (config.get(NODE_SELECTOR) or {}).get("podNodeSelectorPluginConfig") or {}
        self.node_selectors = {str(k): str(v) for k, v in dict(selectors).items()}
        restriction = config.get(TOLERATION_RESTRICTION) or {}
        self.default_tolerations = _configured_tolerations(restriction, "default")
        self.tolerations_whitelist = _configured_tolerations(restriction, "whitelist")

    def admit_create(self, store: Store, namespace: str, name: str, pod: Obj) -> None:
        """A new pod, in place: PodNodeSelector, then PodTolerationRestriction. `name` is the
        one the request gave (empty for a `generateName`: the server names the pod later)."""
        if not self.enabled or not isinstance(pod.get("spec"), dict):
            return  # not a pod a real server would have decoded: nothing to judge
        ns = store.get(NAMESPACES, "", namespace)
        if NODE_SELECTOR in self.enabled:
            self._select_nodes(ns, name, pod)
        if TOLERATION_RESTRICTION in self.enabled:
            self._restrict_tolerations(ns, pod, creating=True)

    def admit_update(self, store: Store, namespace: str, pod: Obj) -> None:
        """An update of the pod itself, in place (PodTolerationRestriction only)."""
        if TOLERATION_RESTRICTION in self.enabled and isinstance(pod.get("spec"), dict):
            self._restrict_tolerations(store.get(NAMESPACES, "", namespace), pod, creating=False)

    # ---- PodNodeSelector -----------------------------------------------------------------

    def _select_nodes(self, ns: Obj, name: str, pod: Obj) -> None:
        own = pod["spec"].get("nodeSelector") or {}
        if not isinstance(own, dict) or not all(isinstance(v, str) for v in own.values()):
            return  # not a map of strings: a real server would not have decoded the pod
        wanted = self._namespace_node_selector(ns)
        if any(key in own and own[key] != value for key, value in wanted.items()):
            raise _forbidden(name, SELECTOR_CONFLICT)
        merged = {**wanted, **own}
        if merged != own:
            pod["spec"] = dict(pod["spec"], nodeSelector=dict(sorted(merged.items())))
        # Validate, which Admit ends with: the namespace's whitelist in the configuration.
        ns_name = str((ns.get("metadata") or {}).get("name") or "")
        whitelist = _selector_map(self.node_selectors.get(ns_name, ""))
        if whitelist and any(whitelist.get(key) != value for key, value in merged.items()):
            raise _forbidden(name, SELECTOR_NOT_WHITELISTED)

    def _namespace_node_selector(self, ns: Obj) -> dict[str, str]:
        annotations = (ns.get("metadata") or {}).get("annotations") or {}
        if NODE_SELECTOR_ANNOTATION in annotations:
            return _selector_map(str(annotations[NODE_SELECTOR_ANNOTATION]))
        return _selector_map(self.node_selectors.get(CLUSTER_DEFAULT_NODE_SELECTOR, ""))

    # ---- PodTolerationRestriction --------------------------------------------------------

    def _restrict_tolerations(self, ns: Obj, pod: Obj, creating: bool) -> None:
        own = _pod_tolerations(pod["spec"].get("tolerations"))
        if own is None:
            return  # not tolerations a real server would have decoded
        extra: list[Toleration] = []
        if creating:
            defaults = _namespace_tolerations(ns, DEFAULT_TOLERATIONS_ANNOTATION)
            extra = list(self.default_tolerations or []) if defaults is None else defaults
        if not _best_effort(pod):
            extra.append(MEMORY_PRESSURE)
        merged = merge_tolerations(own, extra) if extra else own
        if merged != own:
            pod["spec"] = dict(pod["spec"], tolerations=[t.as_json() for t in merged])
        # Validate, which Admit ends with: the whitelist.
        if not merged:
            return
        whitelist, scope = _namespace_tolerations(ns, TOLERATIONS_WHITELIST_ANNOTATION), "namespace"
        if whitelist is None:
            whitelist, scope = self.tolerations_whitelist, "cluster"
        if whitelist and not verify_against_whitelist(merged, whitelist):
            raise _bare_error(TOLERATIONS_NOT_WHITELISTED.format(scope=scope))


def merge_tolerations(first: list[Toleration], second: list[Toleration]) -> list[Toleration]:
    """MergeTolerations: both lists in order, without a toleration another one covers (of two
    equal ones, the first is kept)."""
    everything = [*first, *second]
    merged: list[Toleration] = []
    for i, toleration in enumerate(everything):
        if any(is_superset(kept, toleration) for kept in merged):
            continue
        if any(
            later != toleration and is_superset(later, toleration) for later in everything[i + 1 :]
        ):
            continue
        merged.append(toleration)
    return merged


def verify_against_whitelist(tolerations: list[Toleration], whitelist: list[Toleration]) -> bool:
    """VerifyAgainstWhitelist: each toleration covered by some entry of the whitelist."""
    if not whitelist or not tolerations:
        return True
    return all(any(is_superset(w, t) for w in whitelist) for t in tolerations)


def is_superset(ss: Toleration, t: Toleration) -> bool:
    """isSuperset: whether `ss` tolerates every taint `t` tolerates."""
    if ss == t:
        return True
    # An empty key with Exists matches every key; an empty effect, every effect.
    if t.key != ss.key and (ss.key != "" or ss.operator != "Exists"):
        return False
    if t.effect != ss.effect and ss.effect != "":
        return False
    # A NoExecute entry with tolerationSeconds covers only those tolerating no longer.
    if (
        ss.effect == "NoExecute"
        and ss.seconds is not None
        and (t.seconds is None or t.seconds > ss.seconds)
    ):
        return False
    if ss.operator in ("Equal", ""):
        return t.operator == "Equal" and t.value == ss.value
    return ss.operator == "Exists"


# ---- what the plugins read ---------------------------------------------------------------------


def _selector_map(text: str) -> dict[str, str]:
    """labels.ConvertSelectorToLabelsMap: "k=v,k2=v2", every key and value validated."""
    labels: dict[str, str] = {}
    if not text:
        return labels
    for term in text.split(","):
        parts = term.split("=")
        if len(parts) != 2:
            raise _bare_error(f"invalid selector: [{' '.join(parts)}]")  # Go's %s of a []string
        key, value = parts[0].strip(), parts[1].strip()
        problems = objectmeta.qualified_name_problems(key)
        if problems:
            raise _bare_error(str(FieldError.invalid("<nil>", key, "; ".join(problems))))
        problems = objectmeta.label_value_problems(value)
        if problems:
            raise _bare_error(str(FieldError.invalid(f"[{key}]", value, "; ".join(problems))))
        labels[key] = value
    return labels


def _namespace_tolerations(ns: Obj, annotation: str) -> list[Toleration] | None:
    """extractNSTolerations: None when the annotation is absent, [] when it is empty."""
    annotations = (ns.get("metadata") or {}).get("annotations") or {}
    if annotation not in annotations:
        return None
    text = str(annotations[annotation])
    return decode_tolerations(text) if text else []


def _configured_tolerations(config: Mapping[str, Any], field: str) -> list[Toleration] | None:
    if config.get(field) is None:
        return None
    try:
        return decode_tolerations(json.dumps(config[field]))
    except ApiError as e:
        raise ValueError(f"{TOLERATION_RESTRICTION} configuration: {field}: {e.message}") from None


def _pod_tolerations(value: Any) -> list[Toleration] | None:
    """The pod's own tolerations, or None when they are not of the shape the API defines."""
    if value is None:
        return []
    if not isinstance(value, list):
        return None
    found = []
    for entry in value:
        if not isinstance(entry, dict):
            return None
        strings = [entry.get(k) for k in ("key", "operator", "value", "effect")]
        seconds = entry.get("tolerationSeconds")
        if not all(s is None or isinstance(s, str) for s in strings):
            return None
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
            return None
        key, operator, value_, effect = (s or "" for s in strings)
        found.append(Toleration(key, operator, value_, effect, seconds))
    return found


_QOS_RESOURCES = ("cpu", "memory")


def _best_effort(pod: Obj) -> bool:
    """qos.GetPodQOS(pod) == BestEffort: the class the status names, else no cpu or memory
    requested or limited above zero, in the pod-level resources when the pod sets them
    (PodLevelResources, on by default), else in any container or init container."""
    status = pod.get("status")
    named = status.get("qosClass") if isinstance(status, dict) else None
    if isinstance(named, str) and named:
        return named == "BestEffort"
    spec = pod["spec"]
    if spec.get("resources") is not None:
        lists = [spec["resources"]]
    else:
        containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        lists = [c.get("resources") for c in containers if isinstance(c, dict)]
    for resources in lists:
        if not isinstance(resources, dict):
            continue
        for kind in ("requests", "limits"):
            quantities = resources.get(kind)
            if isinstance(quantities, dict) and any(
                _positive(quantities[name]) for name in _QOS_RESOURCES if name in quantities
            ):
                return False
    return True


def _positive(quantity: Any) -> bool:
    try:
        return parse_quantity(quantity) > 0
    except (ValueError, TypeError, ArithmeticError):
        return False  # decoding refused the body before a quantity could get here


# ---- answers -------------------------------------------------------------------------------


def _forbidden(name: str, why: str) -> ApiError:
    """errors.NewForbidden(pods, name, why): the name is left out when the pod has none yet."""
    shown = f"pods {go_quote(name)}" if name else "pods"
    details = {"name": name, "kind": "pods"} if name else {"kind": "pods"}
    return ApiError(403, "Forbidden", f"{shown} is forbidden: {why}", details)


def _bare_error(message: str) -> ApiError:
    """A plugin's plain Go error: ErrorToAPIStatus answers it 500, with no reason."""
    return ApiError(500, "", message)


# ---- encoding/json into []v1.Toleration ----------------------------------------------------

# The struct's fields by their JSON names, with the Go types its errors name.
_FIELD_TYPES = {
    "key": "string",
    "operator": "v1.TolerationOperator",
    "value": "string",
    "effect": "v1.TaintEffect",
    "tolerationSeconds": "int64",
}
_INT_LITERAL = re.compile(r"-?(0|[1-9][0-9]*)")
_INT64 = 2**63


class _Number(str):
    """A JSON number as its literal: Go's errors quote it, and int64 takes integers only."""


class _Object(list[tuple[str, Any]]):
    """A JSON object as its members in order (Go assigns them in order, the last one wins)."""


def decode_tolerations(text: str) -> list[Toleration]:
    """json.Unmarshal into []v1.Toleration, with Go's errors (a 500 when they are answered):
    names match case-insensitively, unknown ones are ignored, null leaves a field empty."""
    try:
        document = json.loads(
            text,
            object_pairs_hook=_Object,
            parse_int=_Number,
            parse_float=_Number,
            parse_constant=_refuse_constant,
        )
    except json.JSONDecodeError as e:
        raise _bare_error(_go_syntax_error(e)) from None
    except _ConstantRefused as e:
        raise _bare_error(str(e)) from None
    if document is None:
        return []
    if isinstance(document, _Object) or not isinstance(document, list):
        raise _bare_error(_type_error(document, "[]v1.Toleration"))
    tolerations = []
    for element in document:
        if element is None:
            tolerations.append(Toleration())
            continue
        if not isinstance(element, _Object):
            raise _bare_error(_type_error(element, "v1.Toleration"))
        tolerations.append(_toleration(element))
    return tolerations


def _toleration(members: _Object) -> Toleration:
    fields: dict[str, Any] = {}
    for name, value in members:
        field = name if name in _FIELD_TYPES else None
        if field is None:
            field = next((f for f in _FIELD_TYPES if f.lower() == name.lower()), None)
        if field is None or value is None:
            continue
        go_type = _FIELD_TYPES[field]
        if field == "tolerationSeconds":
            if not isinstance(value, _Number):
                raise _bare_error(_type_error(value, go_type, field))
            if not _INT_LITERAL.fullmatch(value) or not -_INT64 <= int(value) < _INT64:
                raise _bare_error(_type_error(value, go_type, field, literal=True))
            fields[field] = int(value)
        elif isinstance(value, str) and not isinstance(value, _Number):
            fields[field] = value
        else:
            raise _bare_error(_type_error(value, go_type, field))
    return Toleration(
        fields.get("key", ""),
        fields.get("operator", ""),
        fields.get("value", ""),
        fields.get("effect", ""),
        fields.get("tolerationSeconds"),
    )


def _type_error(value: Any, go_type: str, field: str = "", literal: bool = False) -> str:
    """UnmarshalTypeError's text."""
    if isinstance(value, _Number):
        kind = f"number {value}" if literal else "number"
    elif isinstance(value, bool):
        kind = "bool"
    elif isinstance(value, str):
        kind = "string"
    elif isinstance(value, _Object):
        kind = "object"
    else:
        kind = "array"
    if field:
        return f"json: cannot unmarshal {kind} into Go struct field Toleration.{field} of type {go_type}"
    return f"json: cannot unmarshal {kind} into Go value of type {go_type}"


class _ConstantRefused(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    """NaN and Infinity are Python's extensions; Go's scanner stops at their first letter."""
    if name.startswith("-"):
        raise _ConstantRefused(f"invalid character {_go_char(name[1])} in numeric literal")
    raise _ConstantRefused(f"invalid character {_go_char(name[0])} looking for beginning of value")


def _go_syntax_error(e: json.JSONDecodeError) -> str:
    """Go's SyntaxError text for where Python's decoder stopped."""
    doc, pos, msg = e.doc, e.pos, e.msg
    if pos >= len(doc) or msg.startswith("Unterminated string"):
        return "unexpected end of JSON input"
    char = doc[pos]
    if msg.startswith("Invalid \\"):  # a bad escape: Python points at the backslash
        escaped = doc[pos + 1] if pos + 1 < len(doc) else ""
        if not escaped:
            return "unexpected end of JSON input"
        if escaped == "u":
            bad = next((c for c in doc[pos + 2 : pos + 6] if c not in _HEX), "")
            if not bad:
                return "unexpected end of JSON input"
            return f"invalid character {_go_char(bad)} in \\u hexadecimal character escape"
        return f"invalid character {_go_char(escaped)} in string escape code"
    if msg.startswith("Invalid control character"):
        where = "in string literal"
    elif msg.startswith("Expecting property name"):
        where = "looking for beginning of object key string"
    elif msg.startswith("Expecting ':'"):
        where = "after object key"
    elif msg.startswith("Expecting ','"):
        inside = _innermost(doc, pos)
        where = "after object key:value pair" if inside == "{" else "after array element"
    elif msg.startswith("Extra data"):
        where = "after top-level value"
    else:  # Expecting value
        where = "looking for beginning of value"
    return f"invalid character {_go_char(char)} {where}"


_HEX = frozenset("0123456789abcdefABCDEF")


def _innermost(doc: str, pos: int) -> str:
    """The bracket of the object or array open at `pos`."""
    stack: list[str] = []
    in_string = escaped = False
    for char in doc[:pos]:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            stack.append(char)
        elif char in "]}" and stack:
            stack.pop()
    return stack[-1] if stack else ""


def _go_char(char: str) -> str:
    """encoding/json's quoteChar: the character between single quotes, Go-escaped."""
    if char == "'":
        return "'\\''"
    if char == '"':
        return "'\"'"
    return f"'{go_quote(char)[1:-1]}'"
