"""`cloudburst validate` never tracebacks and never passes a broken file.

Run through the real command (typer's CliRunner over cli.main.app): every crash of the
issue as a regression case, then over a thousand generated broken documents (mutations of
valid NodePool/NodeClass manifests).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import typer.testing
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.main import get_command
from typer.testing import CliRunner

from api.limits import MAX_GRACE_S, MAX_NODES, MAX_REGISTRATION_TIMEOUT_S, MAX_TTL_S
from cli.main import app
from cli.manifests import MAX_DEPTH, MAX_EXPANDED_NODES, MAX_FILE_BYTES
from tests.unit.test_bounds import NODE_CLASS, POOL

RUNNER = CliRunner()
COMMAND = get_command(app)
HEAD = "apiVersion: cloudburst.io/v1alpha1\nkind: NodePool\nmetadata: {name: p}\n"


def validate(path: Path) -> str:
    """The command's output; it must end with exit code 1 and no exception of its own."""
    result = RUNNER.invoke(app, ["validate", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output and "could not be checked" not in result.output
    assert result.exit_code == 1, result.output
    for line in result.output.splitlines():
        # Every problem: the file, the document's index (or the whole file), and the field.
        assert re.match(rf"✗ {re.escape(str(path))}(#\d+( \(.*?\))?)?: \S.*?: ", line), line
    return result.output


def write(tmp_path: Path, text: str | bytes, name: str = "m.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


# --- the crashes and silent passes of the issue ----------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("apiVersion: cloudburst.io/v1alpha1\nkind: [NodePool]\n", "#1: kind: "),
        ("apiVersion: cloudburst.io/v1alpha1\nkind: {NodePool: 1}\n", "#1: kind: "),
        (HEAD + "spec: {nodeClassRef: '[/red]'}\n", "spec.nodeClassRef: "),
        (HEAD + "spec: {limits: {'[/red]': 1, '[bold]x': 2}}\n", "spec.limits.[/red]: unknown"),
        (HEAD + "spec: {limits: {maxNodes: " + "9" * 5000 + "}}\n", "5000 digits"),
        (HEAD + "spec: {limits: {cpu: 1e999999999999}}\n", "spec.limits.cpu: must be"),
        ("", "(file): no documents"),
        ("---\n---\n", "(file): no documents"),
        ("# only a comment\n", "(file): no documents"),
        ("apiVersion: -999999\nkind: NodePool\n", "#1: apiVersion: must be"),
        ("apiVersion: [cloudburst.io/v1alpha1]\nkind: NodePool\n", "#1: apiVersion: "),
        ("apiVersion: true\nkind: NodePool\n", "#1: apiVersion: "),
        ("apiVersion: 1.5\nkind: NodePool\n", "#1: apiVersion: "),
        ("kind: NodePool\nmetadata: {name: p}\n", "apiVersion: must be"),
        ("apiVersion: cloudburst.io/v1alpha1\nkind: NodeGroup\n", "#1: apiVersion/kind: unknown"),
        ("apiVersion: cloudburst.io/v2\nkind: NodePool\n", "#1: apiVersion/kind: unknown"),
        ("- 1\n- 2\n", "#1: (document): document is a list"),
        ("just a string\n", "#1: (document): document is a str"),
        ("apiVersion: v1\nkind: NodePool\nkind: NodeClass\n", "duplicate key 'kind'"),
        ("spec: [unclosed\n", "invalid YAML: line"),
        ("a: !!python/object:os.system ls\n", "invalid YAML"),
        ("a: &a [*a]\n", "(file): an alias refers to the node that contains it"),
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", f"nested deeper than {MAX_DEPTH}"),
        (
            HEAD
            + "spec:\n  disruption:\n    budgets: [{schedule: '* * * * *', duration: 99999999h}]\n"
            "    terminationGracePeriodSeconds: 1000000000000000\n"
            "    ttlSecondsUntilExpired: 4611686018427387904\n",
            "spec.disruption.budgets.0.duration: '99999999h' is longer than",
        ),
        (
            HEAD + "spec: {disruption: {ttlSecondsUntilExpired: 1}}\n",
            "greater than or equal to 600",
        ),
        (HEAD + "spec: {requirements: {allowedProviders: [nosuchcloud]}}\n", "unknown provider"),
        (HEAD + "spec: {limits: {cpu: 1.5.3Gi}}\n", "Kubernetes quantity"),
        (HEAD + "spec: {limits: {minNodes: 3, maxNodes: 1}}\n", "exceeds maxNodes"),
        (HEAD + "spec: {limits: {maxNodes: '5'}}\n", "spec.limits.maxNodes: "),
        (HEAD + "spec: {requirements: {maxPriceEurPerHour: .inf}}\n", "maxPriceEurPerHour"),
    ],
)
def test_regressions(tmp_path: Path, text: str, expected: str) -> None:
    output = validate(write(tmp_path, text))
    assert expected in output, output


def test_not_utf8(tmp_path: Path) -> None:
    output = validate(write(tmp_path, b"apiVersion: cloudburst.io/v1alpha1\nkind: \xff\xfe\n"))
    assert "(file): not UTF-8 text: byte 0xff on line 2" in output


def test_a_yaml_bomb_is_refused_quickly(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 12)]
    output = validate(write(tmp_path, "\n".join(lines) + "\n"))
    assert f"expands to more than {MAX_EXPANDED_NODES} values" in output


def test_a_file_too_large_is_refused(tmp_path: Path) -> None:
    output = validate(write(tmp_path, HEAD + "# " + "x" * MAX_FILE_BYTES + "\n"))
    assert "larger than 3 MiB" in output


def test_a_missing_file_and_a_directory(tmp_path: Path) -> None:
    assert "cannot read" in validate(tmp_path / "nope.yaml")
    assert "cannot read" in validate(tmp_path)


def test_markup_in_a_name_prints_as_written(tmp_path: Path) -> None:
    document = copy.deepcopy(POOL)
    document["metadata"]["name"] = "[bold red]pool[/]"
    output = validate(write(tmp_path, yaml.safe_dump(document)))
    assert "(NodePool [bold red]pool[/])" in output


def test_valid_files_still_pass(tmp_path: Path) -> None:
    path = write(tmp_path, yaml.safe_dump_all([POOL, NODE_CLASS]))
    result = RUNNER.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.count("✓") == 2


def test_restricted_label_and_taint_keys_are_named_with_their_field(tmp_path: Path) -> None:
    text = HEAD + (
        "spec:\n  template:\n"
        "    labels: {kubernetes.io/hostname: node-1, node.kubernetes.io/team: a, team: a,\n"
        "             cloudburst.io/nodepool: another-pool}\n"
        "    taints: [{key: gpu, effect: NoSchedule}, {key: cloudburst.io/tenant, effect: NoSchedule}]\n"
    )
    lines = validate(write(tmp_path, text)).splitlines()
    where = f"✗ {tmp_path / 'm.yaml'}#1 (NodePool p): "
    assert lines == [
        f"{where}spec.template.labels.kubernetes.io/hostname: label kubernetes.io/hostname is "
        "restricted: keys under kubernetes.io, k8s.io, cloudburst.io and karpenter.sh are set "
        "by Kubernetes and Cloudburst (allowed: node.kubernetes.io/*, but not "
        "node.kubernetes.io/instance-type, which Cloudburst sets from the offering); use a key "
        "of your own domain, e.g. example.com/team",
        f"{where}spec.template.labels.cloudburst.io/nodepool: label cloudburst.io/nodepool is "
        "restricted: it is the pool's own name, which Cloudburst sets on the pool's nodes; "
        "leave it out, or set it to this pool's name",
        f"{where}spec.template.taints.1.key: taint cloudburst.io/tenant is restricted: keys "
        "under kubernetes.io, k8s.io, cloudburst.io and karpenter.sh are set by Kubernetes and "
        "Cloudburst; use a key of your own domain, e.g. example.com/dedicated",
    ]
    allowed = (
        HEAD
        + "spec: {template: {labels: {node.kubernetes.io/team: a, cloudburst.io/nodepool: p}}}\n"
    )
    result = RUNNER.invoke(app, ["validate", str(write(tmp_path, allowed, "ok.yaml"))])
    assert result.exit_code == 0, result.output


def test_the_committed_fixtures(tmp_path: Path) -> None:
    fixtures = Path(__file__).parent / "manifests"
    output = validate(fixtures / "broken.yaml")
    assert "spec.limits.maxNode: unknown field" in output
    seed = Path(__file__).parents[1] / "fixtures" / "dr-example.yaml"
    # Its Deployment is not ours: named as not checked, and let pass with --ignore-unknown.
    assert RUNNER.invoke(app, ["validate", "--ignore-unknown", str(seed)]).exit_code == 0


# --- a thousand generated broken documents ---------------------------------------------------

Path_ = tuple[str | int, ...]
# Integer fields and the range each accepts.
INTS: dict[str, dict[Path_, tuple[int, int]]] = {
    "NodePool": {
        ("spec", "weight"): (0, 100),
        ("spec", "limits", "maxNodes"): (0, MAX_NODES),
        ("spec", "limits", "minNodes"): (0, 4),  # the base pool's maxNodes is 4
        ("spec", "disruption", "ttlSecondsAfterEmpty"): (0, MAX_TTL_S),
        ("spec", "disruption", "ttlSecondsUntilExpired"): (600, MAX_TTL_S),
        ("spec", "disruption", "terminationGracePeriodSeconds"): (0, MAX_GRACE_S),
        ("spec", "disruption", "nodeUnreachableGracePeriodSeconds"): (0, MAX_GRACE_S),
    },
    "NodeClass": {
        ("spec", "join", "tokenTtlMinutes"): (1, 24 * 60),
        ("spec", "join", "registrationTimeoutSeconds"): (10, MAX_REGISTRATION_TIMEOUT_S),
        ("spec", "hetzner", "networkID"): (1, 2**53 - 1),
    },
}
# String fields with a grammar: anything with a space and markup in it breaks it.
PATTERNED: dict[str, list[Path_]] = {
    "NodePool": [
        ("metadata", "name"),
        ("spec", "nodeClassRef"),
        ("spec", "limits", "cpu"),
        ("spec", "limits", "memory"),
        ("spec", "template", "labels", "burst"),
        ("spec", "disruption", "consolidateAfter"),
        ("spec", "disruption", "budgets", 0, "nodes"),
    ],
    "NodeClass": [
        ("metadata", "name"),
        ("spec", "bootstrap", "kubernetesVersion"),
        ("spec", "hetzner", "apiTokenSecretRef", "name"),
        ("spec", "hetzner", "apiTokenSecretRef", "key"),
    ],
}
# Free text bounded by length only.
TEXT: dict[str, list[Path_]] = {
    "NodePool": [("spec", "disruption", "budgets", 0, "nodes")],
    "NodeClass": [("spec", "hetzner", "location"), ("spec", "join", "hostApiServer")],
}
REQUIRED: dict[str, list[Path_]] = {
    "NodePool": [("metadata",), ("metadata", "name")],
    "NodeClass": [
        ("metadata",),
        ("metadata", "name"),
        ("spec",),
        ("spec", "join"),
        ("spec", "join", "hostApiServer"),
        ("spec", "hetzner", "location"),
        ("spec", "hetzner", "apiTokenSecretRef"),
    ],
}
OBJECTS: dict[str, list[Path_]] = {
    "NodePool": [("spec",), ("spec", "limits"), ("spec", "disruption"), ("spec", "requirements")],
    "NodeClass": [("spec",), ("spec", "join"), ("spec", "hetzner")],
}
MARKUP = st.sampled_from(["[/red]", "[bold]", "[link=x]", "[/]", "[red]x[/blue]", "\\[x]"])
HUGE = "HUGE-INTEGER-PLACEHOLDER"
_NOT_AN_INT = st.one_of(
    st.text(max_size=10),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer()),
    st.lists(st.integers(), min_size=1, max_size=2),
    st.dictionaries(st.text(min_size=1, max_size=3), st.integers(), min_size=1, max_size=2),
)
_NOT_A_STRING = st.one_of(
    st.integers(-(2**64), 2**64),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.text(max_size=3), min_size=1, max_size=2),
    st.dictionaries(st.text(min_size=1, max_size=3), st.text(max_size=3), min_size=1, max_size=2),
)

# Quantities are integers or strings, as Kubernetes reads them: an integer is refused only
# below 0 or above the field's bound (cpu 10^6 cores, memory 1Ei).
QUANTITIES = ("cpu", "memory")
_NOT_A_QUANTITY = st.one_of(
    st.integers(-(2**64), -1),
    st.integers(2**61, 2**64),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.text(max_size=3), min_size=1, max_size=2),
    st.dictionaries(st.text(min_size=1, max_size=3), st.text(max_size=3), min_size=1, max_size=2),
)


def _dotted(path: Path_) -> str:
    return ".".join(str(part) for part in path)


def _set(document: dict[str, Any], path: Path_, value: Any) -> None:
    node: Any = document
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


@st.composite
def broken_manifest(draw: st.DrawFn) -> tuple[str | bytes, str]:
    """A broken manifest (YAML text or bytes) and what the output must name."""
    kind = draw(st.sampled_from(["NodePool", "NodeClass"]))
    document = copy.deepcopy(POOL if kind == "NodePool" else NODE_CLASS)
    huge_digits = 0
    how = draw(
        st.sampled_from(
            ["wrong-int", "out-of-range", "huge-int", "bad-string", "long-text", "wrong-string",
             "missing", "unknown-field", "header", "not-a-mapping", "bytes"]
        )
    )  # fmt: skip
    if how in ("wrong-int", "out-of-range", "huge-int"):
        path, (low, high) = draw(st.sampled_from(sorted(INTS[kind].items())))
        if how == "wrong-int":
            value: Any = draw(_NOT_AN_INT)
        elif how == "out-of-range":
            value = draw(st.one_of(st.integers(high + 1, 2**200), st.integers(-(2**200), low - 1)))
        else:
            huge_digits = draw(st.integers(41, 6000))
            value = HUGE
        _set(document, path, value)
        expected = _dotted(path)
    elif how in ("bad-string", "wrong-string"):
        path = draw(st.sampled_from(PATTERNED[kind]))
        if how == "bad-string":
            value = draw(st.text(max_size=20)) + " " + draw(MARKUP)
        elif path[-1] in QUANTITIES:
            value = draw(_NOT_A_QUANTITY)
        else:
            value = draw(_NOT_A_STRING)
        _set(document, path, value)
        expected = _dotted(path)
    elif how == "long-text":
        path = draw(st.sampled_from(TEXT[kind]))
        _set(document, path, draw(MARKUP) * draw(st.integers(1000, 3000)))  # > 2048
        expected = _dotted(path)
    elif how == "missing":
        path = draw(st.sampled_from(REQUIRED[kind]))
        node: Any = document
        for part in path[:-1]:
            node = node[part]
        del node[path[-1]]
        expected = _dotted(path) + ": required field is missing"
    elif how == "unknown-field":
        path = draw(st.sampled_from(OBJECTS[kind]))
        name = draw(MARKUP) + draw(st.text(alphabet="abcxyz", max_size=5))
        node = document
        for part in path:
            node = node[part]
        node[name] = draw(st.integers(0, 3))
        expected = f"{_dotted((*path, name))}: unknown field"
    elif how == "header":
        field = draw(st.sampled_from(["apiVersion", "kind"]))
        if draw(st.booleans()):
            del document[field]
        else:
            document[field] = draw(
                st.one_of(st.integers(), st.booleans(), st.none(), st.lists(st.text(), max_size=2))
            )
        expected = f"#1: {field}: must be"
    elif how == "not-a-mapping":
        scalar = draw(st.one_of(st.integers(-5, 5), st.text(min_size=1, max_size=8), MARKUP))
        text = yaml.safe_dump([scalar] if draw(st.booleans()) else scalar)
        return (text if yaml.safe_load(text) is not None else "[1]\n"), "#1: (document): "
    else:  # bytes that are not UTF-8, anywhere in an otherwise valid manifest
        raw = yaml.safe_dump(document).encode()
        at = draw(st.integers(0, len(raw)))
        bad = draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"]))
        return raw[:at] + bad + raw[at:], "(file): not UTF-8 text"
    text = yaml.safe_dump(document, allow_unicode=True)
    if huge_digits:
        text = text.replace(HUGE, "9" * huge_digits)
    return text, expected


@settings(
    max_examples=1000,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=broken_manifest())
def test_generated_broken_manifests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: tuple[str | bytes, str]
) -> None:
    # The same command, built once: typer's runner rebuilds it from the app on every call.
    monkeypatch.setattr(typer.testing, "_get_command", lambda _: COMMAND)
    text, expected = case
    output = validate(write(tmp_path, text, "generated.yaml"))
    assert expected in output, output
