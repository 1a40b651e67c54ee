"""`cloudburst convert`: Karpenter's documented example NodePool and EC2NodeClass become objects
`cloudburst validate` accepts, with every field that does not convert as it is listed; then
each mapping on its own (cli/karpenter.py), and `validate` on Karpenter's objects."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cli.karpenter import (
    PLACEHOLDER,
    Conversion,
    ConvertOptions,
    NoteKind,
    convert,
)
from cli.main import app

KARPENTER = Path(__file__).parents[1] / "fixtures" / "karpenter"
NODEPOOL = KARPENTER / "nodepool.yaml"
EC2NODECLASS = KARPENTER / "ec2nodeclass.yaml"
RUNNER = CliRunner()


def _documented(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    return document


def _pool(**spec: Any) -> dict[str, Any]:
    """A minimal Karpenter v1 NodePool with `spec` merged in."""
    document: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "p"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": "c",
                    },
                    "requirements": [],
                }
            }
        },
    }
    for key, value in spec.items():
        document["spec"][key] = value
    return document


def _with_template(**fields: Any) -> dict[str, Any]:
    document = _pool()
    document["spec"]["template"]["spec"].update(fields)
    return document


def _converted(document: dict[str, Any], **options: Any) -> Conversion:
    return convert(document, "test", ConvertOptions(**options))


def _notes(conversion: Conversion, kind: NoteKind | None = None) -> dict[str, str]:
    return {n.path: n.reason for n in conversion.notes if kind is None or n.kind == kind}


def _requirement(key: str, operator: str, *values: str) -> dict[str, Any]:
    requirement: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        requirement["values"] = list(values)
    return requirement


# --- the documented examples, through the command ---------------------------------------------


def test_the_documented_examples_convert_to_objects_validate_accepts(tmp_path: Path) -> None:
    """Karpenter's example NodePool and EC2NodeClass convert; `validate` accepts the output."""
    result = RUNNER.invoke(
        app,
        ["convert", "-f", str(NODEPOOL), "-f", str(EC2NODECLASS), "--aws-region", "us-west-2",
         "--api-server", "https://10.0.0.1:6443"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    converted = tmp_path / "converted.yaml"
    converted.write_text(result.stdout)
    pool, node_class = yaml.safe_load_all(result.stdout)
    assert (pool["kind"], node_class["kind"]) == ("NodePool", "NodeClass")
    assert pool["spec"]["nodeClassRef"] == node_class["metadata"]["name"] == "default"
    checked = RUNNER.invoke(app, ["validate", str(converted)])
    assert checked.exit_code == 0, checked.output
    assert checked.output.count("✓") == 2


def test_every_field_of_the_examples_that_does_not_convert_is_listed() -> None:
    """On standard error and under "notes" of -o json, each with its field and why."""
    result = RUNNER.invoke(app, ["convert", "-o", "json", "-f", str(NODEPOOL), "-f", "-"],
                           input=EC2NODECLASS.read_text())  # fmt: skip
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    notes = {(n["source"].split("#")[0], n["path"]): n["kind"] for n in answer["notes"]}
    pool, node_class = str(NODEPOOL), "-"
    for path, kind in [
        ("status", "not-converted"),
        ("spec.template.metadata.annotations", "not-converted"),
        ("spec.template.spec.startupTaints", "not-converted"),
        ("spec.template.spec.requirements[0]", "not-converted"),  # instance-category
        ("spec.template.spec.requirements[0].minValues", "not-converted"),
        ("spec.template.spec.requirements[1]", "not-converted"),  # instance-family
        ("spec.template.spec.requirements[4]", "not-converted"),  # instance-generation Gt
        ("spec.template.spec.requirements[5]", "approximated"),  # zones -> region
        ("spec.template.spec.requirements[7].values", "approximated"),  # reserved
    ]:
        assert notes.get((pool, path)) == kind, path
    for path, kind in [
        ("spec.kubelet", "not-converted"),
        ("spec.amiFamily", "not-converted"),
        ("spec.role", "not-converted"),
        ("spec.userData", "not-converted"),
        ("spec.subnetSelectorTerms[0]", "not-converted"),
        ("spec.blockDeviceMappings[0].ebs.kmsKeyID", "not-converted"),
        ("spec.aws.region", "fill-in"),
        ("spec.join.hostApiServer", "fill-in"),
    ]:
        assert notes.get((node_class, path)) == kind, path
    for note in answer["notes"]:
        assert f"{note['path']}: {note['kind']}: {note['reason']}" in result.stderr


def test_a_field_no_mapping_knows_is_listed_not_dropped() -> None:
    """A field this module has never heard of (a newer Karpenter's) is listed as not
    converted; without `_leftovers` it vanished from the output without a word."""
    document = _pool(futureField={"a": 1})
    document["spec"]["template"]["spec"]["newKnob"] = True
    notes = _notes(_converted(document), NoteKind.NOT_CONVERTED)
    assert notes["spec.futureField.a"] == "no counterpart in Cloudburst"
    assert notes["spec.template.spec.newKnob"] == "no counterpart in Cloudburst"


def test_nothing_to_convert_fails(tmp_path: Path) -> None:
    deployment = tmp_path / "d.yaml"
    deployment.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n")
    result = RUNNER.invoke(app, ["convert", "-f", str(deployment)])
    assert result.exit_code == 1
    assert "skipped" in result.stderr and "nothing to convert" in result.stderr


# --- NodePool mappings -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requirement", "arch"),
    [
        (_requirement("kubernetes.io/arch", "In", "arm64"), ["arm64"]),
        (_requirement("kubernetes.io/arch", "NotIn", "arm64"), ["amd64"]),
        (_requirement("kubernetes.io/arch", "Exists"), ["amd64", "arm64"]),
    ],
)
def test_arch(requirement: dict[str, Any], arch: list[str]) -> None:
    converted = _converted(_with_template(requirements=[requirement])).converted
    assert converted["spec"]["requirements"]["arch"] == arch


def test_capacity_type_keeps_what_we_launch_and_names_the_rest() -> None:
    requirement = _requirement("karpenter.sh/capacity-type", "In", "reserved", "spot")
    conversion = _converted(_with_template(requirements=[requirement]))
    assert conversion.converted["spec"]["requirements"]["capacityType"] == ["spot"]
    reason = _notes(conversion, NoteKind.APPROXIMATED)["spec.template.spec.requirements[0].values"]
    assert reason.startswith("reserved:")


def test_regions_and_zones() -> None:
    region = _requirement("topology.kubernetes.io/region", "In", "eu-west-1")
    converted = _converted(_with_template(requirements=[region])).converted
    assert converted["spec"]["requirements"]["regionConstraint"] == ["eu-west-1"]
    zones = _requirement("topology.kubernetes.io/zone", "In", "eu-west-1a", "eu-west-1b")
    conversion = _converted(_with_template(requirements=[zones]))
    assert conversion.converted["spec"]["requirements"]["regionConstraint"] == ["eu-west-1"]
    assert "spec.template.spec.requirements[0]" in _notes(conversion, NoteKind.APPROXIMATED)
    local = _requirement("topology.kubernetes.io/zone", "In", "us-west-2-lax-1a")
    conversion = _converted(_with_template(requirements=[local]))
    assert "regionConstraint" not in conversion.converted["spec"]["requirements"]
    assert "spec.template.spec.requirements[0]" in _notes(conversion, NoteKind.NOT_CONVERTED)


def test_instance_requirements_are_named_with_what_to_do_instead() -> None:
    requirements = [
        _requirement("karpenter.k8s.aws/instance-family", "In", "m5"),
        _requirement("node.kubernetes.io/instance-type", "In", "m5.large"),
    ]
    notes = _notes(_converted(_with_template(requirements=requirements)), NoteKind.NOT_CONVERTED)
    for index in (0, 1):
        assert (
            "node.kubernetes.io/instance-type" in notes[f"spec.template.spec.requirements[{index}]"]
        )


def test_a_requirement_of_one_value_on_a_free_key_is_a_label() -> None:
    """Karpenter labels its nodes with such a requirement; a restricted key is not one."""
    requirements = [
        _requirement("team", "In", "a"),
        _requirement("kubernetes.io/os", "In", "linux"),
        _requirement("karpenter.sh/nodepool", "In", "other"),
    ]
    conversion = _converted(_with_template(requirements=requirements))
    assert conversion.converted["spec"]["template"]["labels"] == {"team": "a"}
    notes = _notes(conversion, NoteKind.NOT_CONVERTED)
    assert "spec.template.spec.requirements[1]" not in notes  # our nodes are Linux
    assert "spec.template.spec.requirements[2]" in notes


def test_labels_and_taints_in_restricted_domains_are_not_converted() -> None:
    document = _with_template(
        taints=[
            {"key": "example.com/gpu", "effect": "NoSchedule"},
            {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"},
        ]
    )
    document["spec"]["template"]["metadata"] = {
        "labels": {"team": "a", "node-role.kubernetes.io/worker": "", "cloudburst.io/x": "y"}
    }
    conversion = _converted(document)
    template = conversion.converted["spec"]["template"]
    assert template["labels"] == {"team": "a"}
    assert template["taints"] == [{"key": "example.com/gpu", "effect": "NoSchedule"}]
    notes = _notes(conversion, NoteKind.NOT_CONVERTED)
    assert "is restricted" in notes["spec.template.metadata.labels.node-role.kubernetes.io/worker"]
    assert "is restricted" in notes["spec.template.metadata.labels.cloudburst.io/x"]
    assert "is restricted" in notes["spec.template.spec.taints[1]"]


@pytest.mark.parametrize(
    ("expire", "expected", "kind"),
    [
        ("720h", 2592000, None),
        ("Never", None, None),
        (None, 2592000, NoteKind.DEFAULT),  # Karpenter's default, written out
        ("5m", None, NoteKind.NOT_CONVERTED),  # below our floor
        ("1.5h", None, NoteKind.NOT_CONVERTED),
    ],
)
def test_expire_after(expire: str | None, expected: int | None, kind: NoteKind | None) -> None:
    document = _with_template(expireAfter=expire) if expire else _pool()
    conversion = _converted(document)
    assert conversion.converted["spec"].get("disruption", {}).get("ttlSecondsUntilExpired") == (
        expected
    )
    noted = [n for n in conversion.notes if n.path == "spec.template.spec.expireAfter"]
    assert [n.kind for n in noted] == ([kind] if kind else [])


def test_termination_grace_period() -> None:
    converted = _converted(_with_template(terminationGracePeriod="48h")).converted
    assert converted["spec"]["disruption"]["terminationGracePeriodSeconds"] == 48 * 3600


@pytest.mark.parametrize(
    ("disruption", "expected"),
    [
        (
            {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m"},
            {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m", "ttlSecondsAfterEmpty": 300},
        ),
        (
            {"consolidateAfter": "Never"},
            {"consolidationPolicy": "WhenEmpty", "ttlSecondsAfterEmpty": None},
        ),
        (
            {},
            {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
             "ttlSecondsAfterEmpty": 0},
        ),
    ],
)  # fmt: skip
def test_consolidation(disruption: dict[str, Any], expected: dict[str, Any]) -> None:
    """Karpenter's one wait (consolidateAfter) is ours for empty and underutilized nodes;
    Never consolidates nothing; its defaults, not ours, when it states none."""
    converted = _converted(_pool(disruption=disruption)).converted["spec"]["disruption"]
    assert {k: converted.get(k) for k in expected} == expected


def test_budgets_convert_and_a_broken_one_is_named() -> None:
    budgets = [
        {"nodes": "10%"},
        {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h", "reasons": ["Drifted"]},
        {"nodes": "0", "schedule": "@daily"},  # no duration
    ]
    conversion = _converted(_pool(disruption={"budgets": budgets}))
    assert conversion.converted["spec"]["disruption"]["budgets"] == budgets[:2]
    assert "spec.disruption.budgets[2]" in _notes(conversion, NoteKind.NOT_CONVERTED)


def test_limits_weight_and_node_class() -> None:
    document = _pool(limits={"cpu": 1000, "memory": "1000Gi", "nvidia.com/gpu": 4}, weight=10)
    conversion = _converted(document)
    spec = conversion.converted["spec"]
    assert spec["limits"] == {"cpu": 1000, "memory": "1000Gi"}
    assert spec["weight"] == 10
    assert spec["nodeClassRef"] == "c" and spec["requirements"]["allowedProviders"] == ["aws"]
    assert "spec.limits.nvidia.com/gpu" in _notes(conversion, NoteKind.NOT_CONVERTED)
    other = copy.deepcopy(document)
    other["spec"]["template"]["spec"]["nodeClassRef"]["group"] = "karpenter.azure.com"
    conversion = _converted(other)
    assert "nodeClassRef" not in conversion.converted["spec"]
    assert "spec.template.spec.nodeClassRef" in _notes(conversion, NoteKind.NOT_CONVERTED)


def test_namespace_and_object_labels() -> None:
    document = _pool()
    document["metadata"]["labels"] = {"team": "a"}
    document["metadata"]["uid"] = "1234"
    conversion = _converted(document, namespace="team-a")
    assert conversion.converted["metadata"] == {
        "name": "p",
        "namespace": "team-a",
        "labels": {"team": "a"},
    }
    assert "metadata.uid" in _notes(conversion, NoteKind.NOT_CONVERTED)


# --- EC2NodeClass mappings ---------------------------------------------------------------------


def test_ec2nodeclass_ids_profile_and_root_volume() -> None:
    conversion = _converted(
        _documented(EC2NODECLASS), aws_region="us-west-2", api_server="https://1.2.3.4:6443"
    )
    spec = conversion.converted["spec"]
    assert spec["aws"] == {
        "region": "us-west-2",
        "subnetId": "subnet-09fa4a0a8f233a921",
        "securityGroupIds": ["sg-063d7acfb4b06c82c"],
        "instanceProfile": "KarpenterNodeInstanceProfile-${CLUSTER_NAME}",
        "associatePublicIp": True,
        "rootVolumeGib": 100,
        "rootDeviceName": "/dev/xvda",
    }
    assert spec["join"] == {"hostApiServer": "https://1.2.3.4:6443"}
    assert not _notes(conversion, NoteKind.FILL_IN)


def test_ec2nodeclass_placeholders_are_listed_to_fill_in() -> None:
    conversion = _converted(_documented(EC2NODECLASS))
    assert PLACEHOLDER in conversion.converted["spec"]["aws"]["region"]
    assert PLACEHOLDER in conversion.converted["spec"]["join"]["hostApiServer"]
    assert set(_notes(conversion, NoteKind.FILL_IN)) == {
        "spec.aws.region",
        "spec.join.hostApiServer",
    }


def test_one_ami_id_is_the_image() -> None:
    document = _documented(EC2NODECLASS)
    document["spec"]["amiSelectorTerms"] = [{"id": "ami-0abc"}]
    conversion = _converted(document)
    assert conversion.converted["spec"]["aws"]["image"] == "ami-0abc"
    assert "spec.amiSelectorTerms[0]" in _notes(conversion, NoteKind.APPROXIMATED)


# --- validate on Karpenter's objects ------------------------------------------------------------


def test_validate_names_a_karpenter_pool_with_the_hint_and_fails() -> None:
    """Without the fix `validate` printed nothing and exited 0 on a Karpenter NodePool."""
    result = RUNNER.invoke(app, ["validate", str(NODEPOOL)])
    assert result.exit_code == 1
    assert "not a Cloudburst object: karpenter.sh/v1 NodePool default" in result.stdout
    assert "try `cloudburst convert`" in result.stdout
    ignored = RUNNER.invoke(app, ["validate", "--ignore-unknown", str(NODEPOOL)])
    assert ignored.exit_code == 0 and "not checked" in ignored.stdout


def test_validate_says_which_objects_of_a_mixed_file_it_checked(tmp_path: Path) -> None:
    mixed = tmp_path / "mixed.yaml"
    ours = "apiVersion: cloudburst.io/v1alpha1\nkind: NodePool\nmetadata: {name: p}\n"
    mixed.write_text(f"{ours}---\n{NODEPOOL.read_text()}---\n{EC2NODECLASS.read_text()}")
    result = RUNNER.invoke(app, ["validate", "-f", str(mixed)])
    assert result.exit_code == 1
    assert "✓ " in result.stdout and "NodePool default/p" in result.stdout
    assert "#2: apiVersion/kind: not a Cloudburst object: karpenter.sh/v1 NodePool" in result.stdout
    assert "#3: apiVersion/kind: not a Cloudburst object: karpenter.k8s.aws/v1 EC2NodeClass" in (
        result.stdout
    )
    assert "1 Cloudburst object(s) checked, 2 of other groups not checked" in result.stdout


@pytest.mark.parametrize(
    "spec",
    [
        {"template": {"spec": {"requirements": [{"key": "kubernetes.io/arch", "values": 5}]}}},
        {"template": {"spec": {"requirements": ["arch"], "taints": [1, None]}}},
        {"template": "x", "disruption": [], "limits": "lots"},
        {"disruption": {"consolidateAfter": 60, "budgets": [None, {"nodes": []}]}},
        {"template": {"metadata": {"labels": ["a"]}, "spec": {"expireAfter": ["1h"]}}},
    ],
)
def test_a_broken_pool_is_converted_or_refused_never_a_traceback(
    tmp_path: Path, spec: dict[str, Any]
) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(_pool(**spec)))
    result = RUNNER.invoke(app, ["convert", "-f", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output and "could not be converted" not in result.output


def test_a_converted_object_ours_refuses_fails_the_command(tmp_path: Path) -> None:
    """Checked as `validate` checks it: a Karpenter pool's name longer than ours may be (its
    claims are <pool>-<5 characters>, a label value) is named, field and all, and exit 1."""
    document = _pool()
    document["metadata"]["name"] = "p" * 60
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(document))
    result = RUNNER.invoke(app, ["convert", "-f", str(path)])
    assert result.exit_code == 1
    assert f"✗ converted NodePool {'p' * 60}: metadata: name: a NodePool's name is at most" in (
        result.stderr
    )
    assert "spec: not-converted" not in result.stderr  # an empty field drops nothing
