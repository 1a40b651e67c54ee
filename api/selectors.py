"""Kubernetes label selectors (`metav1.LabelSelector`): `matchLabels` and `matchExpressions`,
with the API server's rules and meaning. A shared NodePool names the namespaces it serves
with one (`spec.namespaceSelector`, matched against each Namespace's labels).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from api._base import CamelModel
from api.limits import (
    MAX_LABELS,
    MAX_SHORT_LIST,
    LabelKey,
    LabelValue,
    cel,
    label_key,
    validations,
)

SelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist"]


class LabelSelectorRequirement(CamelModel):
    """`key` `operator` `values`: In and NotIn need values, Exists and DoesNotExist none."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "(self.operator in ['In', 'NotIn']) == (has(self.values) && size(self.values) > 0)",
                "In and NotIn need values; Exists and DoesNotExist take none",
                ".values",
            ),
        )
    )

    key: LabelKey
    operator: SelectorOperator
    values: list[LabelValue] = Field(default=[], max_length=MAX_SHORT_LIST)

    _key = field_validator("key")(label_key)

    @model_validator(mode="after")
    def _values_fit_operator(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs values")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        return not present


class LabelSelector(CamelModel):
    """All of `matchLabels` and `matchExpressions` must hold; an empty selector selects
    everything, as in Kubernetes."""

    match_labels: dict[str, LabelValue] = Field(default={}, max_length=MAX_LABELS)
    match_expressions: list[LabelSelectorRequirement] = Field(default=[], max_length=MAX_LABELS)

    @field_validator("match_labels")
    @classmethod
    def _keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            label_key(key)
        return value

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            requirement.matches(labels) for requirement in self.match_expressions
        )

    def describe(self) -> str:
        """The selector as `kubectl get -l` writes one ("" selects everything)."""
        parts = [f"{k}={v}" for k, v in sorted(self.match_labels.items())]
        for r in self.match_expressions:
            if r.operator in ("In", "NotIn"):
                parts.append(f"{r.key} {r.operator.lower()} ({','.join(r.values)})")
            else:
                parts.append(r.key if r.operator == "Exists" else f"!{r.key}")
        return ",".join(parts)
