"""The test control plane's keys and certificates, made per start as `kubeadm init` makes them.

One cluster CA signs the API server's serving certificate and every client certificate, and is
the CA the controller-manager's CSR signer uses (`--cluster-signing-*`), so a kubelet client
certificate issued through a CSR authenticates at the API server (`--client-ca-file`). The
service-account key pair signs and checks ServiceAccount tokens.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# The API server's names, as kubeadm puts them in its serving certificate.
API_SERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
VALIDITY = datetime.timedelta(days=365)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass(frozen=True)
class ClientIdentity:
    """A client certificate's identity: the API server reads CN as the user, O as groups."""

    user: str
    groups: tuple[str, ...] = ()


class ClusterPki:
    """The CA and what it signed, written under `directory` (see `write`)."""

    def __init__(self, directory: Path, host: str) -> None:
        self.directory = directory
        self.host = host
        now = datetime.datetime.now(datetime.UTC)
        self._not_before = now - datetime.timedelta(minutes=5)
        self._not_after = now + VALIDITY
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        self._ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
        self.ca_cert = (
            self._builder(self._ca_name, self._ca_key.public_key())
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
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._ca_key.public_key()),
                critical=False,
            )
            .sign(self._ca_key, hashes.SHA256())
        )
        self.ca_pem = _cert_pem(self.ca_cert).decode()
        directory.mkdir(parents=True, exist_ok=True)
        self.ca_cert_file = self._write("ca.crt", self.ca_pem.encode())
        self.ca_key_file = self._write("ca.key", _key_pem(self._ca_key))
        service_account_key = ec.generate_private_key(ec.SECP256R1())
        self.service_account_key_file = self._write("sa.key", _key_pem(service_account_key))
        self.service_account_public_file = self._write(
            "sa.pub",
            service_account_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )
        self.serving_cert_file, self.serving_key_file = self._issue(
            "apiserver",
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
            ExtendedKeyUsageOID.SERVER_AUTH,
            dns_names=API_SERVER_DNS_NAMES,
            ips=(host,),
        )

    def _builder(
        self, subject: x509.Name, public_key: ec.EllipticCurvePublicKey
    ) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._ca_name)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before)
            .not_valid_after(self._not_after)
        )

    def _write(self, name: str, data: bytes) -> Path:
        path = self.directory / name
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    def _issue(
        self,
        file_stem: str,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        *,
        dns_names: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
    ) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            self._builder(subject, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if dns_names or ips:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName(name) for name in dns_names]
                    + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
                ),
                critical=False,
            )
        cert = builder.sign(self._ca_key, hashes.SHA256())
        return (
            self._write(f"{file_stem}.crt", _cert_pem(cert)),
            self._write(f"{file_stem}.key", _key_pem(key)),
        )

    def client_certificate(self, file_stem: str, identity: ClientIdentity) -> tuple[Path, Path]:
        """A client certificate for `identity`, as (certificate file, key file)."""
        subject = x509.Name(
            [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in identity.groups]
            + [x509.NameAttribute(NameOID.COMMON_NAME, identity.user)]
        )
        return self._issue(file_stem, subject, ExtendedKeyUsageOID.CLIENT_AUTH)
