"""What the API server checks of an apps/v1 workload's selector (pkg/apis/apps/validation).

A Deployment, ReplicaSet, StatefulSet or DaemonSet must have a selector, a non-empty one
whose labels and expressions are well formed, and its pod template's labels must match it: a
controller would otherwise make pods it can never count as its own, forever. The selector
cannot change once created (a StatefulSet's spec, but for a few fields, cannot). The
answers are the server's, values printed as Go's `%#v` prints them
(`map[string]string{"app":"web"}`).
"""

from __future__ import annotations

from typing import Any

from sim.kubeapi.errors import FieldError, GoSyntax, go_quote
from sim.kubeapi.objectmeta import label_errors, label_key_errors, label_value_problems
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


# What each validation says of a selector that cannot be built (a StatefulSet's says nothing).
_UNBUILDABLE_SELECTOR = {
    "Deployment": "invalid label selector",
    "ReplicaSet": "invalid label selector",
    "StatefulSet": "",
}
# What a StatefulSet's update may change (ValidateStatefulSetUpdate); its message lists them.
_STATEFULSET_MUTABLE = (
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "revisionHistoryLimit",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
)
_STATEFULSET_DEFAULTS = {"podManagementPolicy": "OrderedReady"}
_STATEFULSET_FORBIDDEN = (
    "updates to statefulset spec for fields other than "
    + ", ".join(f"'{name}'" for name in _STATEFULSET_MUTABLE[:-1])
    + f" and '{_STATEFULSET_MUTABLE[-1]}' are forbidden"
)


def selector_errors(
    kind: str, obj: dict[str, Any], old: dict[str, Any] | None = None
) -> list[FieldError]:
    """Every error of a workload's create (`old` None) or of its update from `old`."""
    spec = obj.get("spec")
    if kind not in WORKLOAD_KINDS or not isinstance(spec, dict):
        return []
    errors = _selector_errors(kind, spec)
    errors += _update_errors(kind, spec, old.get("spec") if old is not None else None)
    return errors


def _update_errors(kind: str, spec: dict[str, Any], old_spec: Any) -> list[FieldError]:
    if not isinstance(old_spec, dict):
        return []
    if kind == "StatefulSet":
        # The server defaults the new object before it compares: a default left out is no change.
        changed = [
            key
            for key in set(spec) | set(old_spec)
            if key not in _STATEFULSET_MUTABLE
            and spec.get(key, _STATEFULSET_DEFAULTS.get(key))
            != old_spec.get(key, _STATEFULSET_DEFAULTS.get(key))
        ]
        return [FieldError.forbidden("spec", _STATEFULSET_FORBIDDEN)] if changed else []
    selector = spec.get("selector")
    if selector == old_spec.get("selector"):
        return []
    shown = _label_selector(selector) if isinstance(selector, dict) else "(*v1.LabelSelector)(nil)"
    return [FieldError.invalid("spec.selector", GoSyntax(shown), "field is immutable")]


def _selector_errors(kind: str, spec: dict[str, Any]) -> list[FieldError]:
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
    else:
        errors += label_errors(selector.get("matchLabels"), "spec.selector.matchLabels")
        errors += _expression_errors(selector.get("matchExpressions"))
        if errors:
            # Not a selector the server can build (LabelSelectorAsSelector): said once more
            # on the selector (not by a DaemonSet's validation), the template not matched.
            if kind in _UNBUILDABLE_SELECTOR:
                shown = GoSyntax(_label_selector(selector))
                errors.append(
                    FieldError.invalid("spec.selector", shown, _UNBUILDABLE_SELECTOR[kind])
                )
            return errors
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


def _expression_errors(expressions: Any) -> list[FieldError]:
    """ValidateLabelSelectorRequirement: the operator and its values, the key's format and
    each value's."""
    if not isinstance(expressions, list):
        return []
    errors: list[FieldError] = []
    for index, requirement in enumerate(expressions):
        if not isinstance(requirement, dict):
            continue
        path = f"spec.selector.matchExpressions[{index}]"
        operator, values = requirement.get("operator"), requirement.get("values") or []
        if operator in ("In", "NotIn"):
            if not values:
                errors.append(
                    FieldError.required(
                        f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'"
                    )
                )
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                errors.append(
                    FieldError.forbidden(
                        f"{path}.values",
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    )
                )
        else:
            errors.append(
                FieldError.invalid(
                    f"{path}.operator", str(operator or ""), "not a valid selector operator"
                )
            )
        errors += label_key_errors(str(requirement.get("key") or ""), f"{path}.key")
        errors += [
            FieldError.invalid(f"{path}.values[{i}]", value, problem)
            for i, value in enumerate(values if isinstance(values, list) else [])
            if isinstance(value, str)
            for problem in label_value_problems(value)
        ]
    return errors


def _string_map(value: Any) -> str:
    if not isinstance(value, dict):
        return "map[string]string(nil)"
    pairs = ", ".join(f"{go_quote(str(k))}:{go_quote(str(value[k]))}" for k in sorted(value))
    return f"map[string]string{{{pairs}}}"


def _string_slice(value: Any) -> str:
    if not isinstance(value, list):
        return "[]string(nil)"
    return "[]string{" + ", ".join(go_quote(str(v)) for v in value) + "}"


def _requirement(requirement: Any) -> str:
    fields = requirement if isinstance(requirement, dict) else {}
    return (
        f"v1.LabelSelectorRequirement{{Key:{go_quote(str(fields.get('key') or ''))}, "
        f"Operator:{go_quote(str(fields.get('operator') or ''))}, "
        f"Values:{_string_slice(fields.get('values'))}}}"
    )


def _label_selector(selector: dict[str, Any]) -> str:
    expressions = selector.get("matchExpressions")
    shown = (
        "[]v1.LabelSelectorRequirement{" + ", ".join(_requirement(r) for r in expressions) + "}"
        if isinstance(expressions, list)
        else ("[]v1.LabelSelectorRequirement(nil)")
    )
    return (
        f"v1.LabelSelector{{MatchLabels:{_string_map(selector.get('matchLabels'))}, "
        f"MatchExpressions:{shown}}}"
    )
