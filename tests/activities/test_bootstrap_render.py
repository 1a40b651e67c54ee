"""The first-boot script as text: shellcheck, golden renders, `cloudburst bootstrap render`.

Golden files in `golden/` are what `cloudburst bootstrap render` prints for the manifests
below (secrets are placeholders, so they are stable). After an intended change to the
template, refresh them and review the diff:

    CLOUDBURST_UPDATE_GOLDEN=1 .venv/bin/pytest tests/activities/test_bootstrap_render.py
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from activities.bootstrap import ca_cert_hash
from api import NodeClass, NodePool, Offering
from cli.commands.bootstrap import (
    CA_HASH_PLACEHOLDER,
    TOKEN_PLACEHOLDER,
    RenderError,
    render_preview,
)

GOLDEN = Path(__file__).parent / "golden"
CLI = Path(sys.executable).parent / "cloudburst"
JOIN_BLOCK = re.compile(r"<<'CLOUDBURST_JOIN_CONFIG'\n(.*?)\nCLOUDBURST_JOIN_CONFIG\n", re.DOTALL)

POOL = """\
apiVersion: cloudburst.io/v1alpha1
kind: NodePool
metadata: {name: gpu-burst, namespace: ml}
spec:
  template:
    labels: {team: ml, example.com/tier: batch}
    taints:
      - {key: nvidia.com/gpu, value: "true", effect: NoSchedule}
      - {key: dedicated, effect: PreferNoSchedule}
"""
CLASS_WITH_TAILSCALE = """\
apiVersion: cloudburst.io/v1alpha1
kind: NodeClass
metadata: {name: hetzner-ts, namespace: ml}
spec:
  hetzner:
    location: fsn1
    apiTokenSecretRef: {name: hetzner-api-token, key: HETZNER_API_TOKEN}
  join: {hostApiServer: "https://100.64.0.1:6443", tokenTtlMinutes: 30}
  tailscale:
    authKeySecretRef: {name: tailscale-auth, key: authkey}
  bootstrap: {kubernetesVersion: "1.34.3"}
"""
CLASS_DIRECT = """\
apiVersion: cloudburst.io/v1alpha1
kind: NodeClass
metadata: {name: scaleway-direct, namespace: ml}
spec:
  scaleway:
    zone: fr-par-1
    projectID: example-project
    apiKeySecretRef: {name: scaleway-api-keys, key: SCW_SECRET_KEY}
  join: {hostApiServer: "api.example.com"}
  bootstrap: {kubernetesVersion: "1.33.5"}
"""
CASES: dict[str, tuple[str, Offering | None]] = {
    "with-tailscale.sh": (
        CLASS_WITH_TAILSCALE,
        Offering(provider="hetzner", region="fsn1", instance_type="cx22"),
    ),
    "without-tailscale.sh": (CLASS_DIRECT, None),
}


def models(class_yaml: str) -> tuple[NodePool, NodeClass]:
    return (
        NodePool.model_validate(yaml.safe_load(POOL)),
        NodeClass.model_validate(yaml.safe_load(class_yaml)),
    )


def render_case(name: str) -> str:
    class_yaml, offering = CASES[name]
    pool, node_class = models(class_yaml)
    return render_preview(pool, node_class, claim_name="gpu-burst-x7k2q", offering=offering)


def join_config(script: str) -> dict[str, Any]:
    match = JOIN_BLOCK.search(script)
    assert match, "join heredoc not found"
    parsed = yaml.safe_load(match.group(1))
    assert isinstance(parsed, dict)
    return parsed


def self_signed_ca(path: Path) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "kubernetes")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    path.write_bytes(pem)
    return ca_cert_hash(pem)


# --- static checks ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_script_passes_bash_n_and_shellcheck(case: str, tmp_path: Path) -> None:
    path = tmp_path / case
    path.write_text(render_case(case))
    subprocess.run(["bash", "-n", str(path)], check=True)
    if shutil.which("shellcheck") is None:
        if os.environ.get("CI"):
            pytest.fail("shellcheck is not installed (make test installs the Debian package)")
        pytest.skip("shellcheck not installed (apt-get install shellcheck)")
    result = subprocess.run(
        ["shellcheck", "-s", "bash", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- golden renders ----------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_render(case: str) -> None:
    rendered = render_case(case)
    path = GOLDEN / case
    if os.environ.get("CLOUDBURST_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(rendered)
    assert path.exists(), f"no golden {path}: run with CLOUDBURST_UPDATE_GOLDEN=1"
    assert rendered == path.read_text(), (
        f"{case} differs from {path}; if the change is intended, refresh with "
        "CLOUDBURST_UPDATE_GOLDEN=1 and review the diff"
    )


def test_goldens_say_what_they_show() -> None:
    with_ts = (GOLDEN / "with-tailscale.sh").read_text()
    direct = (GOLDEN / "without-tailscale.sh").read_text()
    assert "TAILSCALE_ENABLED=true" in with_ts and "TAILSCALE_ENABLED=false" in direct
    ts_config, direct_config = join_config(with_ts), join_config(direct)
    startup = {"key": "cloudburst.io/unregistered", "value": "true", "effect": "NoSchedule"}
    for config in (ts_config, direct_config):
        assert config["nodeRegistration"]["taints"] == [
            {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
            {"key": "dedicated", "effect": "PreferNoSchedule"},
            startup,
        ]
    assert direct_config["discovery"]["bootstrapToken"]["apiServerEndpoint"] == (
        "api.example.com:6443"
    )
    labels_arg = ts_config["nodeRegistration"]["kubeletExtraArgs"][0]["value"]
    assert "cloudburst.io/instance-type=cx22" in labels_arg
    assert "example.com/tier=batch" in labels_arg
    # The VM asks its cloud's metadata service who it is: the offering's cloud, or without
    # an offering the class's only one.
    assert "\nPROVIDER=hetzner\n" in with_ts and "\nPROVIDER=scaleway\n" in direct
    for script in (with_ts, direct):
        assert "\nSTEP=provider-id\nfind_provider_id\n" in script


# --- render_preview --------------------------------------------------------------------------


def test_preview_uses_placeholders_for_every_secret() -> None:
    script = render_case("with-tailscale.sh")
    discovery = join_config(script)["discovery"]["bootstrapToken"]
    assert discovery["token"] == TOKEN_PLACEHOLDER
    assert discovery["caCertHashes"] == [CA_HASH_PLACEHOLDER]
    assert (
        "TAILSCALE_AUTHKEY='<TAILSCALE-AUTH-KEY from Secret ml/tailscale-auth key authkey>'\n"
        in script
    )


CLASS_TWO_CLOUDS = """\
apiVersion: cloudburst.io/v1alpha1
kind: NodeClass
metadata: {name: two-clouds, namespace: ml}
spec:
  hetzner:
    location: fsn1
    apiTokenSecretRef: {name: hetzner-api-token, key: HETZNER_API_TOKEN}
  ovh:
    projectID: example-project
    region: SBG5
    credentialsSecretRef: {name: ovh-credentials, key: credentials}
  join: {hostApiServer: "https://100.64.0.1:6443"}
"""
CLASS_OVH = CLASS_TWO_CLOUDS.replace(
    """  hetzner:
    location: fsn1
    apiTokenSecretRef: {name: hetzner-api-token, key: HETZNER_API_TOKEN}
""",
    "",
)
CLASS_FAKE = """\
apiVersion: cloudburst.io/v1alpha1
kind: NodeClass
metadata: {name: sim, namespace: ml}
spec:
  fake: {}
  join: {hostApiServer: "https://100.64.0.1:6443"}
"""


@pytest.mark.parametrize(
    # What the script's PROVIDER and REGION lines say, as rendered.
    ("class_yaml", "offering", "provider", "region"),
    [
        (CLASS_TWO_CLOUDS, Offering(provider="hetzner", region="nbg1", instance_type="cx22"),
         "hetzner", "''"),
        (CLASS_TWO_CLOUDS, Offering(provider="ovh", region="GRA11", instance_type="b3-8"),
         "ovh", "GRA11"),
        # Without an offering: the class's only cloud (OVH's region from the class), or none.
        (CLASS_OVH, None, "ovh", "SBG5"),
        (CLASS_TWO_CLOUDS, None, "''", "''"),
        # The simulated cloud has no metadata service: its kubelet names itself.
        (CLASS_FAKE, None, "''", "''"),
    ],
)  # fmt: skip
def test_the_script_asks_the_offerings_cloud_who_the_vm_is(
    class_yaml: str, offering: Offering | None, provider: str, region: str
) -> None:
    pool, node_class = models(class_yaml)
    script = render_preview(pool, node_class, claim_name="gpu-burst-x7k2q", offering=offering)
    assert f"\nPROVIDER={provider}\nREGION={region}\n" in script


def test_preview_refuses_an_offering_the_class_cannot_launch() -> None:
    pool, node_class = models(CLASS_DIRECT)
    with pytest.raises(RenderError, match="hetzner"):
        render_preview(
            pool,
            node_class,
            offering=Offering(provider="hetzner", region="fsn1", instance_type="cx22"),
        )


# --- the CLI ---------------------------------------------------------------------------------


def cloudburst(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLI), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "200", "PATH": "", "HOME": "/nonexistent"},
        check=False,
    )


@pytest.fixture
def manifests(tmp_path: Path) -> tuple[Path, Path]:
    pool, node_class = tmp_path / "pool.yaml", tmp_path / "class.yaml"
    pool.write_text(POOL)
    node_class.write_text(CLASS_WITH_TAILSCALE)
    return pool, node_class


def test_cli_prints_the_script_with_placeholders(manifests: tuple[Path, Path]) -> None:
    pool, node_class = manifests
    result = cloudburst(
        "bootstrap", "render", "--nodeclass", node_class, "--nodepool", pool,
        "--claim", "gpu-burst-x7k2q", "--offering", "hetzner/fsn1/cx22",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == (GOLDEN / "with-tailscale.sh").read_text()
    assert "tskey-" not in result.stdout


def test_cli_fills_the_ca_hash_from_a_ca_file(manifests: tuple[Path, Path], tmp_path: Path) -> None:
    pool, node_class = manifests
    expected = self_signed_ca(tmp_path / "ca.crt")
    result = cloudburst(
        "bootstrap", "render", "--nodeclass", node_class, "--nodepool", pool,
        "--ca-cert", tmp_path / "ca.crt",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    config = join_config(result.stdout)
    assert config["discovery"]["bootstrapToken"]["caCertHashes"] == [expected]
    assert config["nodeRegistration"]["name"] == "gpu-burst-xxxxx"


def test_cli_bad_manifest_exits_1_with_the_field_path(
    manifests: tuple[Path, Path], tmp_path: Path
) -> None:
    pool, _ = manifests
    bad = tmp_path / "bad-class.yaml"
    bad.write_text(CLASS_WITH_TAILSCALE.replace("tokenTtlMinutes: 30", "tokenTtlMinutes: 0"))
    result = cloudburst("bootstrap", "render", "--nodeclass", bad, "--nodepool", pool)
    assert result.returncode == 1
    assert "spec.join.tokenTtlMinutes" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--offering", "hetzner-fsn1"], "PROVIDER/REGION/INSTANCE-TYPE"),
        (["--offering", "aws/eu-west-1/m5.large"], "aws"),
        (["--claim", "Not_A_Host"], "not a valid node/host name"),
        (["--ca-cert", "/nonexistent/ca.crt"], "cannot read /nonexistent/ca.crt"),
    ],
)
def test_cli_bad_options_exit_1_with_a_message(
    manifests: tuple[Path, Path], args: list[str], message: str
) -> None:
    pool, node_class = manifests
    result = cloudburst("bootstrap", "render", "--nodeclass", node_class, "--nodepool", pool, *args)
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_missing_file_exits_1(tmp_path: Path, manifests: tuple[Path, Path]) -> None:
    _, node_class = manifests
    missing = tmp_path / "nope.yaml"
    result = cloudburst("bootstrap", "render", "--nodeclass", node_class, "--nodepool", missing)
    assert result.returncode == 1
    assert "cannot read" in result.stderr and "Traceback" not in result.stderr
