"""The REST server's bounds over real loopback sockets (issue 22, point 5): idle and half-open
connections are closed, connections are capped, event stream readers are limited per host and in
total and cut off when they fall behind, a client leaving is one log line, out-of-range numbers are
400 (TLS: test_rest_tls.py)."""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import resource
import socket
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from core_helpers import TWO_LEAVES, add_apps, add_nodes, eventually, running

import korral
from korral import testing as t

pytest.importorskip("aiohttp")

WAIT = 30.0  # generous: a loaded machine still closes what it must well within it


def hostport(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def closed_by_server(sock: socket.socket, timeout: float = WAIT) -> bool:
    """Whether the server closes the connection (EOF or reset) within ``timeout``; reads and drops
    whatever it sent before."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def stream(
    host: str, port: int, *, source: str = "127.0.0.1", path: str = "/ws/v1/events/stream"
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    connection = http.client.HTTPConnection(host, port, timeout=WAIT, source_address=(source, 0))
    connection.request("GET", path)
    return connection, connection.getresponse()


# ---- connections: header and idle timeouts, the cap ---------------------------------------------------


def test_silent_slow_and_idle_connections_are_closed_after_the_timeouts() -> None:
    core = korral.start()
    try:
        host, port = hostport(core.serve_rest("127.0.0.1:0", header_timeout=0.5, idle_timeout=0.5))
        silent = [socket.create_connection((host, port)) for _ in range(50)]  # open, never send
        slow = socket.create_connection((host, port))
        slow.sendall(b"GET /ws/v1/partitions HTTP/1.1\r\nHost: x\r\n")  # a head never finished
        idle = http.client.HTTPConnection(host, port, timeout=WAIT)  # answered once, then idle
        idle.request("GET", "/ws/v1/partitions")
        answer = idle.getresponse()
        assert answer.status == 200 and answer.getheader("Connection") != "close"
        answer.read()
        assert idle.sock is not None
        kept = idle.sock
        assert all(closed_by_server(sock) for sock in [*silent, slow, kept])
        # and the server still answers newcomers
        fresh = http.client.HTTPConnection(host, port, timeout=WAIT)
        fresh.request("GET", "/ws/v1/partitions")
        assert fresh.getresponse().status == 200
        for sock in [*silent, slow]:
            sock.close()
        idle.close()
        fresh.close()
    finally:
        core.stop()


def test_a_connection_that_keeps_asking_is_not_idle() -> None:
    core = korral.start()
    try:
        host, port = hostport(core.serve_rest("127.0.0.1:0", header_timeout=5, idle_timeout=1))
        connection = http.client.HTTPConnection(host, port, timeout=WAIT)
        began = time.monotonic()
        while time.monotonic() - began < 3:  # three idle timeouts long, one keep-alive connection
            connection.request("GET", "/ws/v1/partitions")
            response = connection.getresponse()
            assert response.status == 200
            response.read()
            time.sleep(0.2)
        assert connection.sock is not None  # never reconnected: http.client would have, silently
        connection.close()
    finally:
        core.stop()


def test_connections_past_the_cap_are_answered_503_and_closed() -> None:
    core = korral.start()
    try:
        host, port = hostport(core.serve_rest("127.0.0.1:0", max_connections=5, header_timeout=60))
        held = [socket.create_connection((host, port)) for _ in range(5)]
        time.sleep(0.2)  # the server has taken them (it accepts as they come)
        extra = socket.create_connection((host, port))
        extra.settimeout(WAIT)
        answer = b""
        while chunk := extra.recv(65536):
            answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503")
        assert json.loads(body)["message"] == "Too many connections"
        for sock in held:
            sock.close()

        def served() -> bool:
            with contextlib.suppress(OSError):
                connection = http.client.HTTPConnection(host, port, timeout=WAIT)
                connection.request("GET", "/ws/v1/partitions")
                status = connection.getresponse().status
                connection.close()
                return status == 200
            return False

        eventually(served)  # room again once they are gone
        extra.close()
    finally:
        core.stop()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")
def test_a_flood_of_rest_connections_holds_at_most_the_cap_and_grpc_still_answers() -> None:
    with korral.start() as core:
        grpc_address = core.serve_grpc("127.0.0.1:0")
        host, port = hostport(core.serve_rest("127.0.0.1:0", max_connections=20, header_timeout=60))
        before = len(os.listdir("/proc/self/fd"))
        # a thousand sockets where this process may open them (its own limit counts them too)
        many = min(1000, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 3)
        flood = [socket.create_connection((host, port)) for _ in range(many)]  # none sends anything

        def server_side() -> int:  # descriptors the server holds: all but the clients' own
            return len(os.listdir("/proc/self/fd")) - before - len(flood)

        eventually(lambda: server_side() <= 20)
        time.sleep(0.5)  # and it stays there
        assert server_side() <= 20
        with korral.connect(grpc_address) as remote:  # the gRPC server has descriptors to spare
            rm = t.RecordingRM("rm")
            remote.register_resource_manager(t.register("rm", TWO_LEAVES), rm)
        for sock in flood:
            sock.close()


def test_limits_are_checked_when_serving_starts() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    with korral.start() as core:
        with pytest.raises(ValueError, match="RLIMIT_NOFILE"):
            core.serve_rest("127.0.0.1:0", max_connections=soft)
        with pytest.raises(ValueError, match="idle_timeout must be a positive number"):
            core.serve_rest("127.0.0.1:0", idle_timeout=0)
        with pytest.raises(ValueError, match="max_streams_per_host must be a whole number"):
            core.serve_rest("127.0.0.1:0", max_streams_per_host=-1)
        with pytest.raises(TypeError, match=r"unknown REST setting.*max_conections"):
            core.serve_rest("127.0.0.1:0", max_conections=5)


# ---- query numbers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query, reason",
    [
        ("start=" + "9" * 5000, "value out of range"),
        ("count=" + "1" * 5000, "value out of range"),
        ("start=18446744073709551616", "value out of range"),
        ("start=-1", "invalid syntax"),
        ("count=%C2%B2", "invalid syntax"),  # a superscript two: str.isdigit() says yes
    ],
)
def test_out_of_range_numbers_are_400(query: str, reason: str) -> None:
    with korral.start() as core:
        host, port = hostport(core.serve_rest("127.0.0.1:0"))
        paths = ["/ws/v1/events/batch"] + (["/ws/v1/events/stream"] if query.startswith("count") else [])
        for path in paths:
            connection = http.client.HTTPConnection(host, port, timeout=WAIT)
            connection.request("GET", f"{path}?{query}")
            response = connection.getresponse()
            body = json.loads(response.read())
            assert response.status == 400, body
            assert body["status_code"] == 400 and reason in body["message"]
            connection.close()


def test_the_largest_unsigned_number_is_accepted() -> None:
    with korral.start() as core:
        host, port = hostport(core.serve_rest("127.0.0.1:0"))
        connection = http.client.HTTPConnection(host, port, timeout=WAIT)
        connection.request("GET", "/ws/v1/events/batch?start=18446744073709551615")
        response = connection.getresponse()
        assert response.status == 200
        assert json.loads(response.read())["EventRecords"] == []


# ---- the event stream -----------------------------------------------------------------------------


def test_stream_limits_per_host_and_in_total_answer_as_yunikorn() -> None:
    with running(TWO_LEAVES) as (core, rm):
        host, port = hostport(core.serve_rest("127.0.0.1:0", max_streams=3, max_streams_per_host=2))
        opened = []
        for source in ("127.0.0.1", "127.0.0.1"):
            connection, response = stream(host, port, source=source)
            assert response.status == 200
            opened.append(connection)
        connection, response = stream(host, port, source="127.0.0.1")  # a third from one host
        assert response.status == 503
        assert json.loads(response.read()) == {
            "status_code": 503,
            "message": "Too many streaming connections",
            "description": "Too many streaming connections",
        }
        connection.close()
        other, response = stream(host, port, source="127.0.0.2")  # another host: room in total
        assert response.status == 200
        opened.append(other)
        connection, response = stream(host, port, source="127.0.0.3")  # the fourth in total
        assert response.status == 503
        assert json.loads(response.read())["message"] == "Too many streaming connections"
        connection.close()
        opened.pop(0).close()  # one leaves: its host has room again

        def admitted() -> bool:
            connection, response = stream(host, port, source="127.0.0.1")
            if response.status == 200:
                opened.append(connection)
                return True
            connection.close()
            return False

        eventually(admitted)
        add_nodes(core, rm, ["n1"])  # and every admitted reader hears the next event
        for connection in opened:
            assert connection.sock is not None
        for connection in opened:
            connection.close()


def _events_until(condition: Any, core: korral.Core, rm: Any, prefix: str) -> int:
    """Log events (applications added, each an event of ~300 bytes) until ``condition()``."""
    batch = 0
    while not condition():
        add_apps(core, rm, {f"{prefix}-{batch}-{i}-{'x' * 40}": "root.a" for i in range(200)})
        batch += 1
        assert batch < 200, "never happened"
    return batch


def test_a_reader_that_does_not_read_is_cut_off(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="korral.rest")
    with running(TWO_LEAVES) as (core, rm):
        host, port = hostport(core.serve_rest("127.0.0.1:0", max_streams=1, stream_buffer_bytes=64 * 1024))
        lazy = socket.socket()
        lazy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # takes little, then nothing
        lazy.connect((host, port))
        lazy.sendall(b"GET /ws/v1/events/stream HTTP/1.1\r\nHost: x\r\n\r\n")
        lazy.settimeout(WAIT)
        assert lazy.recv(4096).startswith(b"HTTP/1.1 200")  # a reader now; from here on it reads nothing

        def cut() -> bool:
            return "cut off" in caplog.text

        _events_until(cut, core, rm, "lazy")
        lines = [r for r in caplog.records if "cut off" in r.getMessage()]
        assert len(lines) == 1 and lines[0].levelno == logging.WARNING
        assert "fell behind" in lines[0].getMessage() or "write waited" in lines[0].getMessage()
        assert closed_by_server(lazy)
        lazy.close()
        # its place is free: a reader that reads gets in, and gets what happens next
        connection, response = stream(host, port)
        assert response.status == 200
        assert "InstanceUUID" in json.loads(response.readline())
        add_apps(core, rm, {"after": "root.a"})
        assert json.loads(response.readline())["objectID"] == "after"
        connection.close()
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.slow
def test_a_reader_that_takes_nothing_is_cut_off_after_the_write_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="korral.rest")
    with running(TWO_LEAVES) as (core, rm):
        host, port = hostport(
            core.serve_rest("127.0.0.1:0", stream_buffer_bytes=256 << 20, stream_write_timeout=1)
        )
        lazy = socket.socket()
        lazy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        lazy.connect((host, port))
        lazy.sendall(b"GET /ws/v1/events/stream HTTP/1.1\r\nHost: x\r\n\r\n")
        lazy.settimeout(WAIT)
        assert lazy.recv(4096).startswith(b"HTTP/1.1 200")
        _events_until(lambda: "cut off" in caplog.text, core, rm, "stuck")
        lines = [r.getMessage() for r in caplog.records if "cut off" in r.getMessage()]
        assert len(lines) == 1 and "took nothing for 1s (stream_write_timeout)" in lines[0]
        assert closed_by_server(lazy)
        lazy.close()


def test_readers_are_cut_off_when_the_server_falls_behind_the_core(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="korral.rest")
    with running(TWO_LEAVES) as (core, rm):
        # flushes 2 s apart: 300 events logged meanwhile are more than the server may hold for readers
        host, port = hostport(core.serve_rest("127.0.0.1:0", stream_lag_events=100, stream_flush_interval=2))
        readers = [stream(host, port) for _ in range(2)]
        for _, response in readers:
            assert "InstanceUUID" in json.loads(response.readline())
        add_apps(core, rm, {f"burst-{i}": "root.a" for i in range(300)})
        for connection, response in readers:
            with pytest.raises((http.client.IncompleteRead, ConnectionError)):
                response.read()  # the server ended it mid-stream (no last chunk): it reads to the end
            connection.close()
        # each cut is logged by the server's loop, which may get to the second one just after the reader
        # saw its connection end: wait for it (bounded), do not race it
        deadline = time.monotonic() + 30
        lines = [r.getMessage() for r in caplog.records if "cut off" in r.getMessage()]
        while len(lines) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
            lines = [r.getMessage() for r in caplog.records if "cut off" in r.getMessage()]
        assert len(lines) == 2 and all("stream_lag_events" in line for line in lines)
        # a newcomer is served from here on
        connection, response = stream(host, port)
        assert "InstanceUUID" in json.loads(response.readline())
        add_apps(core, rm, {"calm": "root.a"})
        assert json.loads(response.readline())["objectID"] == "calm"
        connection.close()


def test_a_reader_that_keeps_up_gets_every_event_in_order() -> None:
    with running(TWO_LEAVES) as (core, rm):
        host, port = hostport(core.serve_rest("127.0.0.1:0"))
        connection, response = stream(host, port, path="/ws/v1/events/stream?count=5")
        assert "InstanceUUID" in json.loads(response.readline())
        names = {f"app-{i}": "root.a" for i in range(600)}
        for chunk in range(0, 600, 100):
            add_apps(core, rm, dict(list(names.items())[chunk : chunk + 100]))
        seen: list[str] = []
        while len(set(seen) & set(names)) < len(names):
            seen.append(json.loads(response.readline())["objectID"])
        firsts = [name for i, name in enumerate(seen) if name in names and name not in seen[:i]]
        assert firsts == list(names)  # every one, in the order they were logged
        connection.close()


def test_an_http_1_0_reader_gets_the_events_unframed() -> None:
    with running(TWO_LEAVES) as (core, rm):
        host, port = hostport(core.serve_rest("127.0.0.1:0"))
        sock = socket.create_connection((host, port), timeout=WAIT)
        sock.sendall(b"GET /ws/v1/events/stream HTTP/1.0\r\n\r\n")
        body = sock.makefile("rb")
        assert body.readline().startswith(b"HTTP/1.0 200")
        head = []
        while (line := body.readline()) not in (b"\r\n", b""):
            head.append(line.lower())
        assert not [line for line in head if line.startswith(b"transfer-encoding")]
        assert "InstanceUUID" in json.loads(body.readline())
        add_apps(core, rm, {"plain": "root.a"})
        assert json.loads(body.readline())["objectID"] == "plain"
        body.close()
        sock.close()


def test_a_reader_leaving_mid_stream_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with running(TWO_LEAVES) as (core, rm):
        host, port = hostport(core.serve_rest("127.0.0.1:0"))
        sock = socket.create_connection((host, port))
        sock.sendall(b"GET /ws/v1/events/stream HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(65536)  # the head and the instance id
        add_apps(core, rm, {"first": "root.a"})
        assert sock.recv(65536)
        # leave with a reset while the server has events to write
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()

        def left() -> bool:
            add_apps(core, rm, {f"more-{time.monotonic_ns()}": "root.a"})
            return any("left" in r.getMessage() for r in caplog.records if r.name == "korral.rest")

        eventually(left)
        add_apps(core, rm, {"last": "root.a"})
        mine = [r for r in caplog.records if r.name.startswith(("korral.rest", "aiohttp"))]
        about = [r for r in mine if "left" in r.getMessage() or r.exc_info]
        assert len(about) == 1, [r.getMessage() for r in about]
        assert about[0].levelno in (logging.INFO, logging.WARNING) and about[0].exc_info is None
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_reader_leaving_while_the_server_waits_on_it_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    """It stopped reading (the server's writes back up), then closed: main logged an ERROR traceback."""
    caplog.set_level(logging.DEBUG)
    with running(TWO_LEAVES) as (core, rm):
        host, port = hostport(core.serve_rest("127.0.0.1:0"))
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, port))
        sock.sendall(b"GET /ws/v1/events/stream HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(WAIT)
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        for batch in range(10):  # ~400 KB of events it does not read
            add_apps(core, rm, {f"unread-{batch}-{i}-{'x' * 40}": "root.a" for i in range(200)})
        sock.close()

        def said() -> list[logging.LogRecord]:
            add_apps(core, rm, {f"more-{time.monotonic_ns()}": "root.a"})
            return [
                r
                for r in caplog.records
                if r.name == "korral.rest" and "event stream reader" in r.getMessage()
            ]

        eventually(said)
        add_apps(core, rm, {"last": "root.a"})
        time.sleep(0.2)
        assert len(said()) == 1, [r.getMessage() for r in said()]
        assert said()[0].levelno in (logging.INFO, logging.WARNING)
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.parametrize(
    "fields",
    [
        {"object_id": "app-1", "message": "ask added", "reference_id": "key-1"},
        {
            "object_id": "u",
            "group_id": "root.a",
            "resource": {"memory": 10, "vcore": 1_000, "nvidia.com/gpu": 1},
        },
        {"object_id": 'quo"te\\d \u00e9\u4e2d\U0001f600\n', "reason": "only a reason", "message": ""},
        {"object_id": "", "reference_id": "", "group_id": "", "message": "", "resource": {}},
    ],
)
def test_the_stream_writes_each_event_as_the_batch_route_does(fields: dict[str, Any]) -> None:
    from korral import si
    from korral.server.rest import dao
    from korral.server.rest.stream import _PACK, event_line
    from korral.server.rest.stream_worker import batch_lines

    for kind in si.EventRecordType:
        for change in si.EventChangeType:
            record = si.EventRecord(
                type=kind,
                timestamp_nano=1_700_000_000_123_456_789,
                event_change_type=change,
                event_change_detail=si.EventChangeDetail.ALLOC_PREEMPT,
                **fields,
            )
            expected = json.dumps(dao.event(12_345, record)) + "\n"
            assert event_line(12_345, record) == expected  # the server's loop (TLS readers)
            # the sender process, from the batch as it crosses to it
            assert batch_lines(_PACK.encode([[(12_345, record)]])).decode() == expected
