"""The REST API over TLS and mutual TLS (issue 22): ``core.serve_rest(tls=...)`` and ``korral serve
--rest-tls-cert/--rest-tls-key``, with certificates made at test time (``cryptography``), over loopback
with the stdlib's http.client and ssl."""

from __future__ import annotations

import contextlib
import datetime
import http.client
import ipaddress
import json
import os
import ssl
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from core_helpers import TWO_LEAVES, add_nodes, running

import korral

pytest.importorskip("aiohttp")

WAIT = 30.0


def hostport(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def _certificates(directory: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, both signed by the CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def write(stem: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
        (directory / f"{stem}.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        (directory / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("korral test CA"))
        .issuer_name(name("korral test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    write("ca", ca_key, ca)
    for stem, usage, names in (
        ("server", ExtendedKeyUsageOID.SERVER_AUTH, [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
        ("client", ExtendedKeyUsageOID.CLIENT_AUTH, [x509.DNSName("client.korral.test")]),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name(stem))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        write(stem, key, cert)
    return {stem: directory / f"{stem}.pem" for stem in ("ca", "server", "client")} | {
        f"{stem}_key": directory / f"{stem}.key" for stem in ("server", "client")
    }


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("cryptography")
    return _certificates(tmp_path_factory.mktemp("tls"))


def _client_context(certs: dict[str, Path], *, with_cert: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs["ca"]))
    if with_cert:
        context.load_cert_chain(str(certs["client"]), str(certs["client_key"]))
    return context


def _get(url: str, path: str, context: ssl.SSLContext) -> tuple[int, Any]:
    host, port = hostport(url)
    connection = http.client.HTTPSConnection(host, port, timeout=WAIT, context=context)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_tls_round_trip(certs: dict[str, Path]) -> None:
    with running(TWO_LEAVES) as (core, rm):
        add_nodes(core, rm, ["n1"])
        url = core.serve_rest("127.0.0.1:0", tls={"cert": certs["server"], "key": certs["server_key"]})
        assert url.startswith("https://127.0.0.1:")
        status, body = _get(url, "/ws/v1/partition/default/nodes", _client_context(certs))
        assert status == 200 and [node["nodeID"] for node in body] == ["n1"]
        # the event stream over TLS too
        host, port = hostport(url)
        connection = http.client.HTTPSConnection(host, port, timeout=WAIT, context=_client_context(certs))
        connection.request("GET", "/ws/v1/events/stream")
        response = connection.getresponse()
        assert "InstanceUUID" in json.loads(response.readline())
        add_nodes(core, rm, ["n2"])
        assert json.loads(response.readline())["objectID"] == "n2"
        connection.close()
        # plain HTTP to the TLS port is not answered as HTTP
        plain = http.client.HTTPConnection(host, port, timeout=WAIT)
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            plain.request("GET", "/ws/v1/partitions")
            plain.getresponse()
        plain.close()
        # a client that does not trust the server's CA refuses it
        with pytest.raises(ssl.SSLCertVerificationError):
            _get(url, "/ws/v1/partitions", ssl.create_default_context())


def test_mutual_tls_wants_a_client_certificate(certs: dict[str, Path]) -> None:
    with korral.start() as core:
        url = core.serve_rest(
            "127.0.0.1:0",
            tls={"cert": certs["server"], "key": certs["server_key"], "client_ca": certs["ca"]},
        )
        assert _get(url, "/ws/v1/partitions", _client_context(certs, with_cert=True))[0] == 200
        with pytest.raises((ssl.SSLError, ConnectionError)):
            _get(url, "/ws/v1/partitions", _client_context(certs))


def test_tls_settings_are_checked(certs: dict[str, Path], tmp_path: Path) -> None:
    with korral.start() as core:
        with pytest.raises(ValueError, match="both a certificate"):
            core.serve_rest("127.0.0.1:0", tls={"cert": certs["server"]})
        with pytest.raises(ValueError, match="key file not found"):
            core.serve_rest("127.0.0.1:0", tls={"cert": certs["server"], "key": tmp_path / "none"})
        with pytest.raises(ValueError, match="unknown TLS setting"):
            core.serve_rest("127.0.0.1:0", tls={"cert": certs["server"], "key": certs["server_key"], "ca": 1})
        with pytest.raises(ValueError, match="not usable"):  # a key that is not the certificate's
            core.serve_rest("127.0.0.1:0", tls={"cert": certs["server"], "key": certs["client_key"]})


def test_korral_serve_over_tls(certs: dict[str, Path]) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [
        sys.executable,
        "-m",
        "korral",
        "serve",
        "--grpc",
        "127.0.0.1:0",
        "--rest",
        "127.0.0.1:0",
        "--rest-tls-cert",
        str(certs["server"]),
        "--rest-tls-key",
        str(certs["server_key"]),
    ]
    with _process(command, env) as process:
        assert process.stdout is not None
        url = ""
        while not url:
            line = process.stdout.readline()
            assert line, "korral serve ended before serving REST"
            if "REST API at " in line:
                url = line.split("REST API at ", 1)[1].strip()
        assert url.startswith("https://")
        assert _get(url, "/ws/v1/partitions", _client_context(certs))[0] == 200


@contextlib.contextmanager
def _process(command: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen]:
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        yield process
    finally:
        process.terminate()
        process.wait(WAIT)


def test_korral_serve_refuses_half_a_tls_pair(certs: dict[str, Path]) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "korral",
            "serve",
            "--rest",
            "127.0.0.1:0",
            "--rest-tls-cert",
            str(certs["server"]),
        ],
        capture_output=True,
        text=True,
        timeout=WAIT * 2,
    )
    assert result.returncode != 0
    assert "--rest-tls-key" in result.stderr


def test_korral_serve_refuses_tls_without_rest(certs: dict[str, Path]) -> None:
    command = [sys.executable, "-m", "korral", "serve", "--grpc", "127.0.0.1:0"]
    command += ["--rest-tls-cert", str(certs["server"]), "--rest-tls-key", str(certs["server_key"])]
    result = subprocess.run(command, capture_output=True, text=True, timeout=WAIT * 2)
    assert result.returncode == 1
    assert "give --rest HOST:PORT" in result.stderr
