"""The cluster CA (a real self-signed certificate) and the kubeconfigs built around it."""

from __future__ import annotations

import base64
import datetime
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

CONTEXT = "cloudburst-sim"


def make_ca_pem(common_name: str = "kubernetes") -> str:
    """A self-signed EC P-256 CA certificate (CA:TRUE), like kubeadm's but faster to make.

    The private key is thrown away: the emulator serves plain HTTP and never signs anything,
    but the product hashes this CA's public key for `kubeadm join`.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def cluster_info_kubeconfig(server: str, ca_pem: str) -> str:
    """The `kubeconfig` key of `kube-public/cluster-info`, shaped exactly like kubeadm's."""
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "clusters": [
            {
                "cluster": {
                    "certificate-authority-data": base64.b64encode(ca_pem.encode()).decode(),
                    "server": server,
                },
                "name": "",
            }
        ],
        "contexts": None,
        "current-context": "",
        "kind": "Config",
        "preferences": {},
        "users": None,
    }
    return yaml.safe_dump(doc, sort_keys=False)


def client_kubeconfig(server: str) -> str:
    """A kubeconfig for clients: plain HTTP, no authentication, context `cloudburst-sim`."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": server}}],
        "users": [{"name": CONTEXT, "user": {}}],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": "default"},
            }
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }
    return yaml.safe_dump(doc, sort_keys=False)
