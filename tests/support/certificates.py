"""Certificates made at test time: a CA, a server certificate for 127.0.0.1/::1/localhost, a client
certificate, and a stranger (a client certificate from another CA, which mutual TLS must refuse).

From Python: `make_certificates(directory)`. From other languages' tests (the Go client's):
`.venv/bin/python -m tests.support.certificates DIR` writes the same files into DIR and prints their
paths as JSON. EC P-256 keys: generated in milliseconds, accepted by gRPC's TLS in every language.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_NAMES = ("localhost",)
SERVER_ADDRESSES = ("127.0.0.1", "::1")
VALIDITY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class CertificateFiles:
    """PEM files. ca signed server_cert and client_cert; stranger_cert comes from another CA."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path
    stranger_key: Path


@dataclass(frozen=True)
class _Authority:
    name: x509.Name
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    @classmethod
    def create(cls, common_name: str) -> "_Authority":
        key = ec.generate_private_key(ec.SECP256R1())
        name = _name(common_name)
        builder = (
            _builder(name, name, key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(cert_sign=True), critical=True)
        )
        return cls(name, key, builder.sign(key, hashes.SHA256()))

    def issue(
        self, common_name: str, usage: x509.ObjectIdentifier, san: x509.SubjectAlternativeName | None = None
    ) -> tuple[bytes, bytes]:
        """A leaf certificate and its key, as PEM."""
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            _builder(_name(common_name), self.name, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if san is not None:
            builder = builder.add_extension(san, critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        return certificate.public_bytes(serialization.Encoding.PEM), _private_pem(key)


def make_certificates(directory: Path) -> CertificateFiles:
    directory.mkdir(parents=True, exist_ok=True)
    authority = _Authority.create("mlnode test CA")
    server_san = x509.SubjectAlternativeName(
        [x509.DNSName(name) for name in SERVER_NAMES]
        + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in SERVER_ADDRESSES]
    )
    server = authority.issue("mlnode test server", ExtendedKeyUsageOID.SERVER_AUTH, server_san)
    client = authority.issue("mlnode test client", ExtendedKeyUsageOID.CLIENT_AUTH)
    stranger = _Authority.create("another CA").issue("stranger", ExtendedKeyUsageOID.CLIENT_AUTH)
    files = CertificateFiles(
        ca=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        stranger_cert=directory / "stranger.pem",
        stranger_key=directory / "stranger.key",
    )
    files.ca.write_bytes(authority.certificate.public_bytes(serialization.Encoding.PEM))
    for (certificate, key), cert_path, key_path in (
        (server, files.server_cert, files.server_key),
        (client, files.client_cert, files.client_key),
        (stranger, files.stranger_cert, files.stranger_key),
    ):
        cert_path.write_bytes(certificate)
        key_path.write_bytes(key)
        key_path.chmod(0o600)
    return files


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    # A little in the past: a clock a few minutes behind must not find the certificate not yet valid.
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY)
    )


def _key_usage(cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


if __name__ == "__main__":
    made = make_certificates(Path(sys.argv[1]))
    print(json.dumps({name: str(path) for name, path in asdict(made).items()}, indent=2))
