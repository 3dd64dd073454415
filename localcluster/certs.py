"""The local cluster's certificates: one CA, made here, signs the API server's serving
certificate, the admin client certificate (group system:masters), the controllers' webhook
certificate (127.0.0.1: their webhooks are called by URL, since Endpoints cannot hold loopback
addresses) and kwok's; plus the service-account token signing key.

Long lifetimes are fine: everything listens on 127.0.0.1 only and is thrown away
by `cluster-down`.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = datetime.timedelta(days=3650)
"""Long enough that cert-controller (the Training Operator's rotation, which renews a
certificate within 90 days of its end) keeps ours."""


CA_NAME = "training-operator-ca"


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


def _new_key() -> rsa.RSAPrivateKey:
    """RSA, written PKCS#1: the Training Operator's cert-controller parses its Secret's keys
    with x509.ParsePKCS1PrivateKey (open-policy-agent/cert-controller v0.16.0,
    pkg/rotator/rotator.go) and replaces a certificate it cannot read."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_key(key, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
    )


class Authority:
    """A CA in `directory` (ca.crt, ca.key), made on first use."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.pair = Pair(directory / "ca.crt", directory / "ca.key")
        if not self.pair.cert.exists():
            directory.mkdir(parents=True, exist_ok=True)
            key = _new_key()
            name = _name("trainstack-localcluster-ca")
            cert = (
                _builder(name, name, key.public_key())
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                # cert-controller keeps a CA only if it verifies for its CA name (ValidCert with
                # CAName, open-policy-agent/cert-controller v0.16.0 pkg/rotator/rotator.go);
                # the Training Operator v1.9.4 names its CA so (pkg/cert/cert.go caName).
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(CA_NAME)]), critical=False)
                .add_extension(
                    x509.KeyUsage(
                        digital_signature=True,
                        content_commitment=False,
                        key_encipherment=False,
                        data_encipherment=False,
                        key_agreement=False,
                        key_cert_sign=True,
                        crl_sign=True,
                        encipher_only=False,
                        decipher_only=False,
                    ),
                    critical=True,
                )
                .sign(key, hashes.SHA256())
            )
            _write_key(key, self.pair.key)
            self.pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self._cert = x509.load_pem_x509_certificate(self.pair.cert.read_bytes())
        self._key = serialization.load_pem_private_key(self.pair.key.read_bytes(), None)

    def issue(
        self,
        name: str,
        *,
        common_name: str,
        organization: str | None = None,
        hosts: tuple[str, ...] = (),
        client: bool = False,
    ) -> Pair:
        """A leaf certificate `name.crt`/`name.key`, made once: for serving `hosts` (IPs or
        DNS names), or for a client (`client=True`)."""
        pair = Pair(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        if pair.cert.exists() and pair.key.exists():
            return pair
        key = _new_key()
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = _builder(_name(common_name, organization), self._cert.subject, key.public_key())
        builder = builder.add_extension(
            x509.BasicConstraints(ca=False, path_length=None), critical=True
        ).add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        _write_key(key, pair.key)
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return pair


def signing_key(directory: Path) -> Pair:
    """The service-account token signing key (RSA: what the API server's issuer expects)."""
    pair = Pair(directory / "sa.pub", directory / "sa.key")
    if not pair.key.exists():
        key = _new_key()
        _write_key(key, pair.key)
        pair.cert.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
    return pair
