"""Label and field selectors, parsed once per request into a predicate over an object dict."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sim.kubeapi.errors import bad_request

Obj = dict[str, Any]
Predicate = Callable[[Obj], bool]


def parse_label_selector(text: str | None) -> Predicate | None:
    """`a=b,c!=d,e in (x,y),f notin (z),g,!h` -> predicate on `metadata.labels`; None if empty."""
    if not text or not text.strip():
        return None
    tests = [_label_term(term.strip()) for term in _split_terms(text) if term.strip()]

    def matches(obj: Obj) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(test(labels) for test in tests)

    return matches


def parse_field_selector(text: str | None) -> Predicate | None:
    """`metadata.name=x,spec.nodeName!=,status.phase==Running` -> predicate; None if empty.

    Any dotted path is accepted (a real server only allows a per-kind list): a missing field
    compares as the empty string, so `spec.nodeName=` selects unbound pods.
    """
    if not text or not text.strip():
        return None
    tests: list[tuple[list[str], str, bool]] = []
    for term in text.split(","):
        term = term.strip()
        if not term:
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*(==|!=|=)\s*(.*)", term)
        if not m:
            raise bad_request(f'invalid field selector: "{term}"')
        tests.append((m.group(1).split("."), m.group(3).strip(), m.group(2) != "!="))

    def matches(obj: Obj) -> bool:
        return all((field_value(obj, path) == want) == equal for path, want, equal in tests)

    return matches


def field_value(obj: Obj, path: list[str]) -> str:
    value: Any = obj
    for part in path:
        if not isinstance(value, dict):
            return ""
        value = value.get(part)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def match_label_selector_object(selector: Obj | None, labels: dict[str, str]) -> bool:
    """A `LabelSelector` object (matchLabels + matchExpressions), as in a PDB spec.

    An empty selector matches everything (policy/v1 semantics); None matches nothing.
    """
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _split_terms(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


_SET_TERM = re.compile(r"([A-Za-z0-9_./\-]+)\s+(in|notin)\s+\((.*)\)")
_EQ_TERM = re.compile(r"([A-Za-z0-9_./\-]+)\s*(==|!=|=)\s*([A-Za-z0-9_.\-]*)")
_KEY = re.compile(r"(!?)\s*([A-Za-z0-9_./\-]+)")


def _label_term(term: str) -> Callable[[dict[str, str]], bool]:
    if m := _SET_TERM.fullmatch(term):
        key, op = m.group(1), m.group(2)
        values = {v.strip() for v in m.group(3).split(",") if v.strip()}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: key not in labels or labels[key] not in values
    if m := _EQ_TERM.fullmatch(term):
        key, op, value = m.group(1), m.group(2), m.group(3)
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: key in labels and labels[key] == value
    if m := _KEY.fullmatch(term):
        key = m.group(2)
        if m.group(1):
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise bad_request(f'unable to parse requirement: "{term}"')
