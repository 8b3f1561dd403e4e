"""Real X.509 certificates made at test time (the ``cryptography`` package): a CA, a server certificate
for loopback, client certificates signed by the CA, and one signed by a stranger CA."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@attrs.frozen
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_certs: dict[str, tuple[Path, Path]]  # common name -> (cert, key)
    stranger: tuple[Path, Path]  # a client certificate from another CA
    stranger_ca: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(
    directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> tuple[Path, Path]:
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    common_name: str,
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    usage: x509.ObjectIdentifier,
    names: list[x509.GeneralName],
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca[1], hashes.SHA256())
    )
    return cert, key


def make_pki(directory: Path, clients: tuple[str, ...] = ("rm-a", "rm-b")) -> Pki:
    ca = _ca("korral test CA")
    ca_path = directory / "ca.crt"
    ca_path.write_bytes(ca[0].public_bytes(serialization.Encoding.PEM))
    server = _leaf(
        "localhost",
        ca,
        ExtendedKeyUsageOID.SERVER_AUTH,
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    server_cert, server_key = _write(directory, "server", *server)
    client_certs = {
        name: _write(directory, name, *_leaf(name, ca, ExtendedKeyUsageOID.CLIENT_AUTH, [x509.DNSName(name)]))
        for name in clients
    }
    other = _ca("a stranger CA")
    stranger_ca = directory / "stranger-ca.crt"
    stranger_ca.write_bytes(other[0].public_bytes(serialization.Encoding.PEM))
    stranger = _write(
        directory, "stranger", *_leaf("rm-a", other, ExtendedKeyUsageOID.CLIENT_AUTH, [x509.DNSName("rm-a")])
    )
    return Pki(ca_path, server_cert, server_key, client_certs, stranger, stranger_ca)
