"""The CRDs' `x-kubernetes-validations` rules, evaluated with cel-python (`celpy`).

cel-python is a development dependency: without it the emulator still validates the
OpenAPI part of each schema, and says once in the log that the CEL rules are not checked.
The Kubernetes CEL library functions our rules use are supplied here: `quantity()`,
`isQuantity()` and the Quantity methods `compareTo`, `isLessThan`, `isGreaterThan`, `sign`,
`asApproximateFloat` (k8s.io/apiserver/pkg/cel/library/quantity.go); `has()`, `size()` and
`duration()` are CEL's own.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from api.quantity import parse_quantity
from sim.kubeapi.quantities import parse_error

log = logging.getLogger(__name__)

try:  # a dependency of cloudburst-sim; rules go unchecked (with a warning) without it
    import celpy
    from celpy import celtypes
    from celpy.evaluation import CELEvalError
except ImportError:  # pragma: no cover - exercised only where it was left out
    celpy = None  # type: ignore[assignment]

_warned = threading.Event()


def available() -> bool:
    """Whether rules can be evaluated; logs once (per process) when they cannot."""
    if celpy is not None:
        return True
    if not _warned.is_set():
        _warned.set()
        log.warning(
            "cel-python is not installed: the emulator does not check the CRDs' "
            "x-kubernetes-validations (CEL) rules; `pip install cel-python` to check them"
        )
    return False


class RuleError(Exception):
    """A rule that failed to evaluate (as opposed to evaluating to false)."""


@dataclass
class Rule:
    """One compiled `x-kubernetes-validations` entry."""

    rule: str
    message: str
    message_expression: str
    field_path: str  # normalized: "minNodes", "a.b" (no leading dot)
    reason: str  # "" (FieldValueInvalid), FieldValueForbidden, FieldValueRequired, ...
    program: Any
    message_program: Any

    def holds(self, self_value: Any) -> bool:
        """True or False; raises RuleError when the rule does not evaluate to a boolean."""
        try:
            result = self.program.evaluate({"self": self_value})
        except CELEvalError as exc:
            raise RuleError(_error_text(exc)) from None
        except Exception as exc:  # a library function raising: CEL reports it as an error
            raise RuleError(str(exc)) from None
        if isinstance(result, CELEvalError):
            raise RuleError(_error_text(result))
        if not isinstance(result, bool):  # celtypes.BoolType subclasses int, not bool
            return bool(isinstance(result, celtypes.BoolType) and result)
        return result

    def failure_message(self, self_value: Any) -> str:
        """The rule's message: messageExpression, else message, else `failed rule: <rule>`."""
        if self.message_program is not None:
            try:
                text = str(self.message_program.evaluate({"self": self_value})).strip()
                if text and "\n" not in text:
                    return text
            except Exception:  # the server falls back to the static message
                log.debug("messageExpression %r failed", self.message_expression)
        return self.message.strip() or f"failed rule: {self.rule.strip()}"

    @property
    def error_name(self) -> str:
        """ruleErrorString: the message, else the rule."""
        return self.message.strip() or self.rule.strip()


_env_lock = threading.Lock()
_env: Any = None


def compile_rules(entries: list[dict[str, Any]], where: str) -> list[Rule]:
    """Compile a schema node's rules; a rule celpy cannot compile is logged and skipped."""
    if not entries or not available():
        return []
    global _env
    rules = []
    with _env_lock:
        if _env is None:
            _env = celpy.Environment()
        for entry in entries:
            text = str(entry.get("rule") or "")
            message_expression = str(entry.get("messageExpression") or "")
            try:
                program = _env.program(_env.compile(text), functions=_FUNCTIONS)
                message_program = (
                    _env.program(_env.compile(message_expression), functions=_FUNCTIONS)
                    if message_expression
                    else None
                )
            except Exception as exc:
                log.warning("CEL rule %r at %s not checked: %s", text, where or "<root>", exc)
                continue
            rules.append(
                Rule(
                    rule=text,
                    message=str(entry.get("message") or ""),
                    message_expression=message_expression,
                    field_path=_normalize_field_path(str(entry.get("fieldPath") or "")),
                    reason=str(entry.get("reason") or ""),
                    program=program,
                    message_program=message_program,
                )
            )
    return rules


def _normalize_field_path(path: str) -> str:
    """`.minNodes` -> `minNodes`, `.a['b.c']` -> `a[b.c]`: how ValidFieldPath prints."""
    out = path.lstrip(".")
    return out.replace("['", "[").replace("']", "]")


def _error_text(exc: Any) -> str:
    args = getattr(exc, "args", ())
    text = str(args[0]) if args else str(exc)
    if "no matching overload" in text or "no such overload" in text:
        return "no such overload"
    return text


def error_detail(rule: Rule, problem: str) -> str:
    """How the server words a rule that failed to evaluate."""
    if problem.startswith("no such overload"):
        return (
            f"'{problem}': call arguments did not match a supported operator, function or "
            f"macro signature for rule: {rule.error_name}"
        )
    return f"{problem} evaluating rule: {rule.error_name}"


# ---- values: the object as CEL sees it -------------------------------------------------


def to_cel(value: Any, node: Any) -> Any:
    """The JSON value as a CEL value, typed by its schema node (`sim.kubeapi.schema._Node`).

    Integers of a `type: number` field are doubles; a null field of an object with properties
    is absent (k8s.io/apiserver/pkg/cel/common UnstructuredToVal).
    """
    if value is None:
        return None
    node_type = getattr(node, "type", None)
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int | float) and node_type == "number":
        return celtypes.DoubleType(float(value))
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, float):
        if node_type == "integer" and value.is_integer():
            return celtypes.IntType(int(value))
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    if isinstance(value, list):
        items = getattr(node, "items", None)
        return celtypes.ListType([to_cel(v, items) for v in value if v is not None])
    if isinstance(value, dict):
        properties = getattr(node, "properties", None)
        additional = getattr(node, "additional", None)
        out = {}
        for key, item in value.items():
            if item is None and properties:
                continue
            child = properties.get(key) if properties else additional
            out[celtypes.StringType(key)] = to_cel(item, child)
        return celtypes.MapType(out)
    return celpy.json_to_cel(value)


# ---- the Kubernetes CEL library: quantities ----------------------------------------------


class Quantity:
    """kubernetes CEL's Quantity type, as much as comparisons need."""

    def __init__(self, text: str) -> None:
        self.text = text
        try:
            self.value: Decimal = parse_quantity(text)
        except ValueError:
            # The server's grammar accepts more than api/quantity's arithmetic (1e9999).
            raise RuleError(f"cannot compute quantity {text!r}") from None

    def compare(self, other: Quantity) -> int:
        return (self.value > other.value) - (self.value < other.value)


def _quantity(text: Any) -> Quantity:
    problem = parse_error(str(text))
    if problem:
        raise RuleError(problem)
    return Quantity(str(text).strip())


def _is_quantity(text: Any) -> Any:
    return celtypes.BoolType(parse_error(str(text)) is None)


def _compare_to(a: Quantity, b: Quantity) -> Any:
    return celtypes.IntType(a.compare(b))


def _is_less_than(a: Quantity, b: Quantity) -> Any:
    return celtypes.BoolType(a.compare(b) < 0)


def _is_greater_than(a: Quantity, b: Quantity) -> Any:
    return celtypes.BoolType(a.compare(b) > 0)


def _sign(a: Quantity) -> Any:
    return celtypes.IntType((a.value > 0) - (a.value < 0))


def _as_approximate_float(a: Quantity) -> Any:
    return celtypes.DoubleType(float(a.value))


_FUNCTIONS: dict[str, Any] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "compareTo": _compare_to,
    "isLessThan": _is_less_than,
    "isGreaterThan": _is_greater_than,
    "sign": _sign,
    "asApproximateFloat": _as_approximate_float,
}
