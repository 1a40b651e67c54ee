"""The committed CRDs are the ones `cloudburst crds` generates, structural, and they accept the
seed's example manifests unchanged (and what our own code writes)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from api import NodeClaim
from api.claims import new_claim
from api.nodepool import NodePoolResources, NodePoolSpec, NodePoolStatus
from cli.commands.crds import KINDS, file_name, write_crds
from tests.deploy.conftest import DEPLOY, ROOT

CRDS = DEPLOY / "base" / "crds"
EXAMPLES = ROOT / "tests" / "fixtures"
# What a structural schema may say (apiextensions.k8s.io/v1 JSONSchemaProps, as we use it).
ALLOWED = {
    "type", "format", "description", "enum", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "minLength", "maxLength", "pattern", "minItems", "maxItems",
    "uniqueItems", "multipleOf", "minProperties", "maxProperties", "required", "items",
    "properties", "additionalProperties", "nullable", "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string", "x-kubernetes-validations", "anyOf",
}  # fmt: skip
# The one `anyOf` a structural schema may hold beside `x-kubernetes-int-or-string`.
INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]


def crd_schemas() -> dict[str, dict[str, Any]]:
    schemas = {}
    for path in sorted(CRDS.glob("cloudburst.io_*.yaml")):
        crd = yaml.safe_load(path.read_text())
        schemas[crd["spec"]["names"]["kind"]] = crd["spec"]["versions"][0]["schema"][
            "openAPIV3Schema"
        ]
    return schemas


def test_committed_crds_are_not_stale(tmp_path: Path) -> None:
    write_crds(tmp_path)
    for generated in sorted(tmp_path.iterdir()):
        committed = CRDS / generated.name
        assert committed.exists(), f"{committed} is missing: run `cloudburst crds`"
        assert committed.read_text() == generated.read_text(), (
            f"{committed} is stale (the models in api/ changed): run `cloudburst crds`"
        )
    assert {p.name for p in CRDS.iterdir()} == {p.name for p in tmp_path.iterdir()}


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_crd_shape(kind: Any) -> None:
    crd = yaml.safe_load((CRDS / file_name(kind)).read_text())
    spec = crd["spec"]
    assert spec["group"] == "cloudburst.io" and spec["scope"] == "Namespaced"
    assert spec["names"]["categories"] == ["cloudburst"]
    assert all(name.startswith("cb") for name in spec["names"]["shortNames"])
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    schema = version["schema"]["openAPIV3Schema"]
    assert schema["properties"]["metadata"] == {"type": "object"}
    _assert_structural(schema, kind.kind)


def test_printer_columns() -> None:
    def columns(kind: str) -> list[tuple[str, str, int]]:
        crd = yaml.safe_load((CRDS / f"cloudburst.io_{kind}.yaml").read_text())
        return [
            (c["name"].upper(), c["jsonPath"], c.get("priority", 0))
            for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]
        ]

    claim = columns("nodeclaims")
    assert [c[0] for c in claim if c[2] == 0] == [
        "NODEPOOL", "PROVIDER", "REGION", "INSTANCE", "PHASE", "AGE"
    ]  # fmt: skip
    assert ("NODE", ".status.nodeName", 1) in claim
    assert ("PRICE", ".status.priceEurPerHour", 1) in claim
    pool = columns("nodepools")
    assert [c[0] for c in pool if c[2] == 0] == ["NODES", "READY", "CPU", "MEMORY", "LIMIT", "AGE"]
    schemas = crd_schemas()
    for kind, found in (("NodePool", pool), ("NodeClaim", claim)):
        for _, path, _ in found:
            _assert_path_exists(schemas[kind], path)


def test_seed_examples_validate_against_the_crds_unchanged() -> None:
    schemas = crd_schemas()
    documents = [d for d in yaml.safe_load_all((EXAMPLES / "dr-example.yaml").read_text()) if d]
    ours = [d for d in documents if d["apiVersion"].startswith("cloudburst.io/")]
    assert {d["kind"] for d in ours} == {"NodePool", "NodeClass"}
    for document in ours:
        _validate(schemas[document["kind"]], document)


def test_what_the_code_writes_validates() -> None:
    """A NodeClaim as the mirror writes it, and a NodePool status as the model makes it."""
    schemas = crd_schemas()
    claim = _sample_claim()
    _validate(schemas["NodeClaim"], claim.model_dump(mode="json", exclude_none=True))
    status = NodePoolStatus(
        nodes=2, ready_nodes=1, resources=NodePoolResources(cpu="4", memory="8Gi")
    )
    pool = {
        "apiVersion": "cloudburst.io/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": "p"},
        "status": status.model_dump(mode="json", exclude_none=True),
    }
    _validate(schemas["NodePool"], pool)


def test_schemas_reject_what_the_models_reject() -> None:
    schemas = crd_schemas()
    documents = [d for d in yaml.safe_load_all((EXAMPLES / "dr-example.yaml").read_text()) if d]
    pool = copy.deepcopy(next(d for d in documents if d["kind"] == "NodePool"))
    pool["spec"]["limits"]["maxNode"] = 3  # a typo: strict field validation refuses it
    with pytest.raises(jsonschema.ValidationError):
        _validate(schemas["NodePool"], pool)
    pool = copy.deepcopy(next(d for d in documents if d["kind"] == "NodePool"))
    pool["spec"]["requirements"]["maxPriceEurPerHour"] = 0
    with pytest.raises(jsonschema.ValidationError):
        _validate(schemas["NodePool"], pool)


# --- helpers ---------------------------------------------------------------------------------


def _sample_claim() -> NodeClaim:
    from api import Offering
    from api.nodeclaim import NodeClaimPhase

    claim = new_claim(
        name="dr-nodepool-abcde",
        namespace="default",
        pool_name="dr-nodepool",
        pool=NodePoolSpec(),
        node_class_name="dr-nodeclass",
        offerings=[Offering(provider="hetzner", region="fsn1", instance_type="cx22")],
    )
    claim.status.phase = NodeClaimPhase.READY
    claim.status.provider, claim.status.region = "hetzner", "fsn1"
    claim.status.set_condition("Ready", True, "Ready", "node Ready", datetime.now(UTC))
    return claim


def _validate(schema: dict[str, Any], document: dict[str, Any]) -> None:
    jsonschema.Draft4Validator(_as_json_schema(schema)).validate(document)


def _as_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI v3 -> JSON Schema draft 4, as the API server with strict field validation
    applies it: `nullable` admits null, and unknown fields are refused where the schema lists
    the fields (kubectl's default `--validate=strict`)."""
    out = {k: v for k, v in node.items() if not k.startswith("x-kubernetes-") and k != "nullable"}
    if "properties" in node:
        out["properties"] = {k: _as_json_schema(v) for k, v in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _as_json_schema(node["additionalProperties"])
    if "items" in node:
        out["items"] = _as_json_schema(node["items"])
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    elif node.get("nullable") and "anyOf" in out:
        # A nullable quantity (int-or-string): the API server admits null before its anyOf.
        out["anyOf"] = [*out["anyOf"], {"type": "null"}]
    return out


def _assert_structural(node: dict[str, Any], where: str) -> None:
    unknown = set(node) - ALLOWED
    assert not unknown, f"{where}: {unknown} not allowed in a CRD schema"
    if "anyOf" in node:
        assert node.get("x-kubernetes-int-or-string") and node["anyOf"] == INT_OR_STRING, where
    assert (
        "type" in node
        or node.get("x-kubernetes-preserve-unknown-fields")
        or node.get("x-kubernetes-int-or-string")
    ), f"{where}: no type"
    assert node.get("additionalProperties") is not False, f"{where}: additionalProperties: false"
    assert not ("properties" in node and "additionalProperties" in node), where
    for name, child in node.get("properties", {}).items():
        _assert_structural(child, f"{where}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        _assert_structural(node["additionalProperties"], f"{where}.*")
    if node.get("type") == "array":
        assert "items" in node, f"{where}: array without items"
        _assert_structural(node["items"], f"{where}[]")


def _assert_path_exists(schema: dict[str, Any], json_path: str) -> None:
    node = schema
    for part in json_path.strip(".").split("."):
        if part == "creationTimestamp":
            return
        assert part in node.get("properties", {}), f"printer column path {json_path} not in schema"
        node = node["properties"][part]
