"""A pod as planning reads it from its JSON: the fields `pod_demand` reads (the requests, the
node selector, the required node affinity, the tolerations, the names), checked, under the
attribute names of the Kubernetes client's `V1Pod`, so that `pod_demand` reads either.

`cloudburst plan` reads its files' pods and the cluster's DaemonSets' pod templates through
this view: the client's model of a whole pod (some 150 nested models, each a pydantic class
built at import) takes longer to import than the plan takes to make. The fields a plan does
not read are ignored, as they are by the planner that reads a `V1Pod`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, StrictFloat, StrictInt, StrictStr, ValidationError
from pydantic.alias_generators import to_camel

from api.problems import field_errors

# A resource quantity: a string ("500m", "2Gi"), or a number a manifest may write bare.
Quantity = StrictStr | StrictInt | StrictFloat


class _View(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_name=True, extra="ignore", frozen=True
    )


class ObjectMetaView(_View):
    name: StrictStr | None = None
    namespace: StrictStr | None = None
    uid: StrictStr | None = None
    labels: dict[str, StrictStr] | None = None
    annotations: dict[str, StrictStr] | None = None


class ResourceRequirementsView(_View):
    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None


class ContainerView(_View):
    name: StrictStr | None = None
    resources: ResourceRequirementsView | None = None
    restart_policy: StrictStr | None = None


class NodeSelectorRequirementView(_View):
    key: StrictStr
    operator: StrictStr
    values: list[StrictStr] | None = None


class NodeSelectorTermView(_View):
    match_expressions: list[NodeSelectorRequirementView] | None = None
    match_fields: list[NodeSelectorRequirementView] | None = None


class NodeSelectorView(_View):
    node_selector_terms: list[NodeSelectorTermView]


class NodeAffinityView(_View):
    required_during_scheduling_ignored_during_execution: NodeSelectorView | None = None


class AffinityView(_View):
    node_affinity: NodeAffinityView | None = None


class TolerationView(_View):
    key: StrictStr | None = None
    operator: StrictStr | None = None
    value: StrictStr | None = None
    effect: StrictStr | None = None


class PodSpecView(_View):
    containers: list[ContainerView]
    init_containers: list[ContainerView] | None = None
    overhead: dict[str, Quantity] | None = None
    node_selector: dict[str, StrictStr] | None = None
    affinity: AffinityView | None = None
    tolerations: list[TolerationView] | None = None


class PodView(_View):
    metadata: ObjectMetaView | None = None
    spec: PodSpecView | None = None


class PodUnreadable(ValueError):
    """A pod's JSON that does not read as a pod: says where (the manifest's field paths)."""


def pod_view(raw: dict[str, Any], at: str = "") -> PodView:
    """The pod of a JSON object with its `metadata` and `spec` (a Pod, or a workload's pod
    template found at `at`, e.g. "spec.template."); `PodUnreadable` names each field that is
    not what Kubernetes expects there, as `cloudburst validate` does."""
    try:
        return PodView.model_validate(raw)
    except ValidationError as err:
        errors = field_errors(err)
        said = "; ".join(f"{at}{path}: {message}" for path, message in errors[:5])
        more = f"; and {len(errors) - 5} more" if len(errors) > 5 else ""
        raise PodUnreadable(said + more) from None
