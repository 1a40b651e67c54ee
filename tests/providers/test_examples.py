"""The manifests of examples/, as a user takes them: `cloudburst validate`, then `kubectl apply`
to Kubernetes' own API server (the shipped CRDs, their CEL rules), then the credential each
NodeClass names, read from a Secret in the cluster as the worker reads it and used by the
provider's real module for one read-only call (`list_owned`) to its cloud's stand-in.

The stand-in takes the example's block with its own addresses and identifiers laid over it
(its endpoint, its project, its machines): what the example says about the Secret (its name,
its key, the shape of its value) is what is tried. Every example names its Secrets in the
`kubectl create secret` lines of its header, and they are checked against the NodeClass.
"""

from __future__ import annotations

import base64
import contextlib
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from activities.credentials import read_provider_credential
from activities.providers import provider_class
from api import NodeClass
from api.nodepool import PROVIDERS
from sim.clouds import standin_module
from sim.controlplane.cluster import KubernetesControlPlane
from tests.providers.harness_plugin import REGION, running_reference

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CLI = str(Path(sys.executable).parent / "cloudburst")
# What examples/ must cover: every provider a user configures (the fake cloud is the
# simulator's, never a user's).
USER_PROVIDERS = sorted(set(PROVIDERS) - {"fake"})
# The files of examples/ that are not manifests, and the tests that run them.
RUN_ELSEWHERE = {
    "README.md": "a guide, no manifest",
    "plugin-provider/README.md": "tests/providers/test_plugin_reference.py",
    "plugin-provider/plugin_server.py": "tests/providers/harness_plugin.py",
    "plugin-provider/hooks/create": "tests/providers/harness_plugin.py",
    "plugin-provider/hooks/delete": "tests/providers/harness_plugin.py",
    "plugin-provider/machines.example.json": "tests/providers/test_plugin_reference.py",
}
CLUSTER_ID = "examples"


def example_files() -> list[Path]:
    """The manifests this module applies: every YAML file directly in examples/."""
    return sorted(EXAMPLES.glob("*.yaml"))


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def node_classes(path: Path) -> list[NodeClass]:
    return [NodeClass.model_validate(d) for d in documents(path) if d.get("kind") == "NodeClass"]


def test_every_file_in_examples_is_applied_or_run_by_a_test() -> None:
    """A file added to examples/ that no test applies (a manifest in a subdirectory, which the
    glob above misses) or runs fails here, naming it; and every provider has an example."""
    applied = {p.relative_to(EXAMPLES).as_posix() for p in example_files()}
    every = {
        p.relative_to(EXAMPLES).as_posix()
        for p in EXAMPLES.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert every - applied - set(RUN_ELSEWHERE) == set()
    assert set(RUN_ELSEWHERE) <= every, "a file listed as run elsewhere is gone"
    covered = {
        p
        for path in example_files()
        for c in node_classes(path)
        for p in c.spec.configured_providers()
    }
    assert set(USER_PROVIDERS) - covered == set(), "providers without an example"


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.stem)
def test_the_header_says_how_to_create_each_secret(path: Path) -> None:
    """Each Secret key a NodeClass reads has its `kubectl create secret generic NAME` line in
    the file's header, naming the key (a renamed Secret in the manifest alone fails here)."""
    comments = [line.lstrip("# ") for line in path.read_text().splitlines() if line.startswith("#")]
    lines = "\n".join(comments).replace("\\\n", " ").splitlines()
    commands = [re.search(r"create secret generic (\S+)(.*)", line) for line in lines]
    said = {found[1]: found[2] for found in commands if found}
    for node_class in node_classes(path):
        for field, ref in node_class.spec.secret_refs():
            assert ref.name in said, f"{path.name}: no `create secret generic {ref.name}` ({field})"
            assert ref.key in said[ref.name], f"{path.name}: {ref.name} lacks key {ref.key}"
        oauth = node_class.spec.tailscale and node_class.spec.tailscale.oauth_client_secret_ref
        if oauth:
            assert oauth.client_id_key in said[oauth.name]
            assert oauth.client_secret_key in said[oauth.name]


def test_validate_accepts_every_example() -> None:
    files = [str(p) for p in example_files()]
    done = subprocess.run(
        # dr.yaml carries its workload (a Deployment): named as not checked, not a failure.
        [CLI, "validate", "--ignore-unknown", *files],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for path in example_files():
        for doc in documents(path):
            if doc["apiVersion"].startswith("cloudburst.io/"):
                assert f"{doc['kind']} default/{doc['metadata']['name']}" in done.stdout


@pytest.fixture(scope="module")
def plane(kube_control_plane: KubernetesControlPlane) -> KubernetesControlPlane:
    return kube_control_plane


@pytest.fixture
def namespace(plane: KubernetesControlPlane) -> Iterator[str]:
    name = f"ex-{uuid.uuid4().hex[:8]}"
    plane.ensure_namespace(name)
    yield name
    k8s.CoreV1Api(plane.api_client()).delete_namespace(name)


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.stem)
def test_each_example_applies_and_its_credential_reaches_the_stand_in(
    plane: KubernetesControlPlane, namespace: str, path: Path
) -> None:
    """`kubectl apply -f` of the example as written (the API server's schema and CEL rules
    take it), then each provider block's credential, from a Secret made as the header says,
    through the real provider module to the stand-in."""
    applied = subprocess.run(
        [str(plane.kubectl), "--kubeconfig", str(plane.admin_kubeconfig), "-n", namespace,
         "apply", "--server-side", "-f", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    api = plane.api_client()
    custom = k8s.CustomObjectsApi(api)
    core = k8s.CoreV1Api(api)
    for doc in documents(path):
        if doc["apiVersion"].startswith("cloudburst.io/"):
            plural = f"{doc['kind'].lower()}es" if doc["kind"] == "NodeClass" else "nodepools"
            found = custom.get_namespaced_custom_object(
                "cloudburst.io", "v1alpha1", namespace, plural, doc["metadata"]["name"]
            )
            _kept_as_written(found["spec"], doc["spec"])
    for node_class in node_classes(path):
        for provider in node_class.spec.configured_providers():
            raw = node_class.spec.provider_block(provider).model_dump(
                mode="json", by_alias=True, exclude_unset=True
            )
            with _standin(provider, raw, namespace) as (block, credential):
                ref_secrets = _secrets_for(provider, block, credential)
                for name, data in ref_secrets.items():
                    core.create_namespaced_secret(
                        namespace,
                        k8s.V1Secret(
                            metadata=k8s.V1ObjectMeta(name=name),
                            data={
                                k: base64.b64encode(v.encode()).decode() for k, v in data.items()
                            },
                        ),
                    )
                made = provider_class(provider)(
                    block, read_provider_credential(core, namespace, block), namespace=namespace
                )
                try:
                    assert made.list_owned(CLUSTER_ID) == []
                finally:
                    close = getattr(made, "close", None)
                    if close is not None:
                        close()
                for name in ref_secrets:
                    core.delete_namespaced_secret(name, namespace)


def _kept_as_written(found: dict[str, Any], written: dict[str, Any]) -> None:
    """The API server kept every value the example writes (no field pruned or changed)."""
    for key, value in written.items():
        assert key in found, key
        if isinstance(value, dict):
            _kept_as_written(found[key], value)
        else:
            assert found[key] == value, (key, found[key], value)


@contextlib.contextmanager
def _standin(provider: str, example: dict[str, Any], namespace: str) -> Iterator[tuple[Any, str]]:
    """The provider's stand-in, started, and the example's block (the model's class) with the
    stand-in's addresses and identifiers over it but the example's credential reference."""
    from api.nodeclass import NodeClassSpec

    model = NodeClassSpec.model_fields[provider].annotation
    block_class = next(a for a in getattr(model, "__args__", (model,)) if a is not type(None))
    ref = _credential_ref(example)
    if provider == "plugin":
        with running_reference(namespace=namespace) as plugin:
            block = block_class.model_validate(
                example | {"endpoint": plugin.endpoint, "region": REGION}
            )
            yield block, plugin.credential
        return
    cloud = standin_module(provider).standin(boot_delay_s=0.1, host="127.0.0.1")
    cloud.start()
    try:
        own = cloud.nodeclass_block(*(ref[:2] if ref else ("unused", "unused")))
        if provider == "redfish":
            # Each machine's login: the example's first reference, for every stand-in machine.
            machines = example["machines"]
            first = machines[0]["credentialsSecretRef"]
            own = own | {"machines": [m | {"credentialsSecretRef": first} for m in own["machines"]]}
        merged = example | own
        if ref is not None:
            merged[ref[2]] = {"name": ref[0], "key": ref[1]}
        yield block_class.model_validate(merged), cloud.credential
    finally:
        cloud.stop()


def _credential_ref(block: dict[str, Any]) -> tuple[str, str, str] | None:
    for field in ("apiTokenSecretRef", "apiKeySecretRef", "credentialsSecretRef", "tokenSecretRef"):
        if field in block:
            return block[field]["name"], block[field]["key"], field
    return None


def _secrets_for(provider: str, block: Any, credential: str) -> dict[str, dict[str, str]]:
    """The Secrets the block names, holding the stand-in's credential."""
    found: dict[str, dict[str, str]] = {}
    refs = (
        [m.credentials_secret_ref for m in block.machines]
        if provider == "redfish"
        else [r for r in [block.credential_ref()] if r is not None]
    )
    for ref in refs:
        found.setdefault(ref.name, {})[ref.key] = credential
    return found
