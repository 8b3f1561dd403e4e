"""validate-conf answers every refusal as YuniKorn does: HTTP 200 with ``allowed: false`` and the reason.

YuniKorn's admission controller admits a ConfigMap on any answer but a 2xx one, so an over-limit config
answered with 400, 408 or 413 would be admitted. Each case here is what a client could send to slip a
config past it.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from hostile_configs import HOSTILE

import korral
from korral.config import MAX_CONFIG_BYTES, load_config

WAIT = 60


@pytest.fixture(scope="module")
def rest() -> Iterator[str]:
    with korral.start() as core:
        yield core.serve_rest("127.0.0.1:0", header_timeout=2)


def _post(url: str, body: bytes) -> tuple[int, Any]:
    request = urllib.request.Request(url + "/ws/v1/validate-conf", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=WAIT) as response:  # raises on any non-2xx answer
        return response.status, json.loads(response.read())


@pytest.mark.parametrize("name", HOSTILE)
def test_a_config_past_a_bound_is_200_not_allowed_with_the_bounds_reason(rest: str, name: str) -> None:
    text = HOSTILE[name]()
    with pytest.raises(korral.ConfigLimitError) as refused:
        load_config(text)
    status, body = _post(rest, text.encode())
    assert status == 200
    assert body == {"allowed": False, "reason": str(refused.value)}


def test_a_body_far_over_the_size_bound_is_200_not_allowed_and_never_read_whole(rest: str) -> None:
    status, body = _post(rest, b"#" * (MAX_CONFIG_BYTES * 2))
    assert status == 200
    assert body["allowed"] is False and "configuration too large" in body["reason"]
    assert f"{MAX_CONFIG_BYTES * 2:,} bytes" in body["reason"]


def test_a_chunked_body_over_the_size_bound_is_200_not_allowed(rest: str) -> None:
    host, port = rest.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=WAIT)
    chunk = b"#" * (1 << 20)
    # no Content-Length: the server counts what arrives and stops reading past the bound
    connection.request("POST", "/ws/v1/validate-conf", body=iter([chunk] * 12), encode_chunked=True)
    response = connection.getresponse()
    assert response.status == 200
    body = json.loads(response.read())
    connection.close()
    assert body["allowed"] is False and "configuration too large" in body["reason"]


def test_a_body_that_stops_coming_is_200_not_allowed(rest: str) -> None:
    host, port = rest.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=WAIT)
    try:
        sock.sendall(
            b"POST /ws/v1/validate-conf HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\npartitions:"
        )
        answer = sock.makefile("rb")
        assert answer.readline().startswith(b"HTTP/1.1 200")
        while answer.readline() not in (b"\r\n", b""):
            pass
        body = json.loads(answer.readline())
    finally:
        sock.close()
    assert body == {"allowed": False, "reason": "the request body did not arrive in time"}


def test_a_body_not_utf8_is_200_not_allowed(rest: str) -> None:
    status, body = _post(rest, b"\xff\xfe\x00")
    assert status == 200 and body["allowed"] is False and "UTF-8" in body["reason"]
