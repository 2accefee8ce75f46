"""Fixtures for the security tests: a throwaway PKI made in the test's tmp dir.

``pki`` gives a CA, a server certificate for ``localhost``/127.0.0.1, a client certificate
(CN ``alice``) signed by that CA, and a second, untrusted CA with its own client certificate.
``pki.issue(cn, ca=...)`` makes more. Keys are EC P-256 (fast to generate).
"""

from __future__ import annotations

import datetime
import ipaddress
import pathlib
from dataclasses import dataclass

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Issued:
    cert: pathlib.Path
    key: pathlib.Path
    der: bytes


@dataclass
class _Ca:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    path: pathlib.Path


def _name(cn: str | None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Horae tests")]
    if cn is not None:
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attributes)


def _write_key(key: ec.EllipticCurvePrivateKey, path: pathlib.Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


class Pki:
    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.ca = self._make_ca("Horae test CA", "ca")
        self.other_ca = self._make_ca("Untrusted CA", "other-ca")
        self.server = self.issue("localhost", server=True)
        self.client = self.issue("alice")
        self.untrusted_client = self.issue("mallory", ca=self.other_ca)

    def _make_ca(self, cn: str, stem: str) -> _Ca:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=30))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True,
                    crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                               critical=False)
                .sign(key, hashes.SHA256()))
        path = self.root / f"{stem}.pem"
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return _Ca(cert, key, path)

    def issue(self, cn: str | None, *, ca: _Ca | None = None, server: bool = False,
              stem: str | None = None) -> Issued:
        ca = ca or self.ca
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca.cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=10))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                       ca.key.public_key()), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
        cert = builder.sign(ca.key, hashes.SHA256())
        stem = stem or cn or "anonymous"
        cert_path, key_path = self.root / f"{stem}-cert.pem", self.root / f"{stem}-key.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path)
        return Issued(cert_path, key_path, cert.public_bytes(serialization.Encoding.DER))


@pytest.fixture
def pki(tmp_path: pathlib.Path) -> Pki:
    return Pki(tmp_path)
