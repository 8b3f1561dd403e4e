"""A malformed HTTP request to the REST port costs the log one short line at most: aiohttp answers it
400 and, as YuniKorn's Go server, korral does not log it above DEBUG (logged as aiohttp logs it, each
was an ERROR with a traceback quoting the request line: 16 KB of log for one request, 6.5 MB/s from
one unauthenticated client)."""

from __future__ import annotations

import socket

from hostile_serve import LOG_LINE, WAIT, korral_serve

from korral.log_text import MAX_LOGGED_CHARS

REQUESTS = 200
MALFORMED = [
    b"GET /" + b"\x1b[31m" * 2_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",  # request line too long
    b"GET /ws/v1/partitions HTTP/1.1\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(200)) + b"\r\n",
    b"GET /ws/v1/partitions HTTP/1.1\r\nX-Big: " + b"\x00\x1b" * 9_000 + b"\r\n\r\n",  # header too long
]


def _send(address: str, request: bytes) -> bytes:
    host, port = address.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=WAIT) as sock:
        sock.sendall(request)
        return sock.recv(200)


def test_malformed_requests_get_400_and_no_traceback_in_the_log() -> None:
    with korral_serve(rest=True) as served:  # --log-level debug: every line korral writes
        for index in range(REQUESTS):
            answer = _send(served.rest, MALFORMED[index % len(MALFORMED)])
            assert answer.split(b"\r\n")[0].endswith(b" 400 Bad Request"), answer[:200]
        log = served.stop()
    assert "Traceback" not in log
    lines = log.splitlines()
    assert all(LOG_LINE.match(line) for line in lines), [
        line[:200] for line in lines if not LOG_LINE.match(line)
    ]
    refused = [line for line in lines if "malformed HTTP request" in line]
    assert len(refused) <= REQUESTS
    assert all(len(line) <= MAX_LOGGED_CHARS + 200 for line in refused)
    assert all(" DEBUG " in line for line in refused)
