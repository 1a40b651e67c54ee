"""What the API server checks of an apps/v1 workload's selector (pkg/apis/apps/validation).

A Deployment, ReplicaSet, StatefulSet or DaemonSet must have a selector, a non-empty one,
and its pod template's labels must match it: a controller would otherwise make pods it can
never count as its own, forever. The answers are the server's, values printed as Go's `%#v`
prints them (`map[string]string{"app":"web"}`).
"""

from __future__ import annotations

from typing import Any

from sim.kubeapi.errors import FieldError, GoSyntax, go_quote
from sim.kubeapi.selectors import match_label_selector_object

WORKLOAD_KINDS = frozenset(["Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"])
# The kind each validation names in "empty selector is invalid for ..." (a ReplicaSet's
# borrowed the Deployment's text).
_EMPTY_SELECTOR_NAMES = {
    "Deployment": "deployment",
    "ReplicaSet": "deployment",
    "StatefulSet": "statefulset",
    "DaemonSet": "daemonset",
}


def selector_errors(kind: str, obj: dict[str, Any]) -> list[FieldError]:
    spec = obj.get("spec")
    if kind not in WORKLOAD_KINDS or not isinstance(spec, dict):
        return []
    errors: list[FieldError] = []
    selector = spec.get("selector")
    template = spec.get("template")
    metadata = template.get("metadata") if isinstance(template, dict) else None
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    if not isinstance(selector, dict):
        if kind != "DaemonSet":  # its validation has no Required: only the mismatch below
            errors.append(FieldError.required("spec.selector"))
    elif not selector.get("matchLabels") and not selector.get("matchExpressions"):
        errors.append(
            FieldError.invalid(
                "spec.selector",
                GoSyntax(_label_selector(selector)),
                f"empty selector is invalid for {_EMPTY_SELECTOR_NAMES[kind]}",
            )
        )
        return errors  # an empty selector matches every template: nothing more to say
    # A missing selector is labels.Nothing(): no template matches it.
    if not isinstance(selector, dict) or not match_label_selector_object(
        selector, labels if isinstance(labels, dict) else {}
    ):
        errors.append(
            FieldError.invalid(
                "spec.template.metadata.labels",
                GoSyntax(_string_map(labels)),
                "`selector` does not match template `labels`",
            )
        )
    return errors


def _string_map(value: Any) -> str:
    if not isinstance(value, dict):
        return "map[string]string(nil)"
    pairs = ", ".join(f"{go_quote(str(k))}:{go_quote(str(value[k]))}" for k in sorted(value))
    return f"map[string]string{{{pairs}}}"


def _label_selector(selector: dict[str, Any]) -> str:
    expressions = selector.get("matchExpressions")
    shown = (
        "[]v1.LabelSelectorRequirement{}"
        if isinstance(expressions, list)
        else ("[]v1.LabelSelectorRequirement(nil)")
    )
    return (
        f"v1.LabelSelector{{MatchLabels:{_string_map(selector.get('matchLabels'))}, "
        f"MatchExpressions:{shown}}}"
    )
