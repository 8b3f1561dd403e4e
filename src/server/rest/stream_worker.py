"""The event stream's sender: a child process that writes the core's events to the readers' sockets.

``python stream_worker.py FD BUFFER_BYTES WRITE_TIMEOUT``: FD is its end of a Unix
socket pair with the REST server (korral.server.rest.stream_process). The server encodes each flush of
events once and sends it here once; this process writes it to every reader's socket, so 100 readers cost
the core's process one write per flush, not 100, and their bytes are sent from a process of its own, at
a lower CPU priority (the server sets it), where they never take the scheduler's GIL or, on a busy
machine, its CPU.

The readers' limits are the server's: a reader more than BUFFER_BYTES behind, or that takes nothing for
WRITE_TIMEOUT seconds while it has something to take, is cut off (its connection shut down both ways);
one that closes its end is gone. Either is reported to the server, which frees its stream slot and logs
it. The channel from the server: frames of ``kind (1 byte) | reader id (4) | length (4) | payload``:

- ``R``: a reader joins; its socket comes with the frame (SCM_RIGHTS); payload ``c`` (HTTP/1.1 chunked)
  or ``p`` (plain, HTTP/1.0). It takes only its own bytes (``W``) until it is published (``P``): its
  first events are filtered against the backlog it was sent, by the server.
- ``W``: bytes for one reader, framed for it already.
- ``P``: the reader takes every broadcast from now on.
- ``D``: events for every published reader (payload: the flush's batches of ``(id, EventRecord)`` as
  msgspec's MessagePack, which the core's process writes in C without touching a field; they are
  encoded to YuniKorn's JSON lines here, once, and framed once per mode).
- ``X``: cut a reader off (payload: the reason).
- ``Q``: every reader's connection closes (the server stops).

To the server: ``G | id | length | reason`` when a reader is gone (reason empty: it left). Standard
library and msgspec only: it starts in a few tens of milliseconds and holds nothing of the core.
"""

from __future__ import annotations

import collections
import contextlib
import json
import selectors
import socket
import struct
import sys
import time
from json.encoder import encode_basestring_ascii as _quoted
from typing import Any

import msgspec

HEADER = struct.Struct("!cII")
TICK = 0.25  # seconds between the write-timeout checks
MAX_FDS = 4


# One event as its text needs it: (id, type, objectID, referenceID, message, timestampNano,
# eventChangeType, eventChangeDetail, resource or None); the enums as their numbers.
EventTuple = tuple[int, int, str, str, str, int, int, int, "dict[str, Any] | None"]


def event_line(event: EventTuple) -> str:
    """``json.dumps(dao.event(...)) + "\\n"`` for the event, the same text at half the cost or less
    (the stream encodes every event the core logs, about three per allocation)."""
    event_id, kind, object_id, reference, message, timestamp, change_type, change_detail, resource = event
    return "".join(
        (
            '{"id": ',
            str(event_id),
            ', "type": ',
            str(kind),
            ', "objectID": ' + _quoted(object_id) if object_id else "",
            ', "referenceID": ' + _quoted(reference) if reference else "",
            ', "message": ' + _quoted(message) if message else "",
            ', "timestampNano": ',
            str(timestamp),
            ', "eventChangeType": ',
            str(change_type),
            ', "eventChangeDetail": ',
            str(change_detail),
            ', "resource": {"resources": {' + _resources(resource) + "}}" if resource else "",
            "}\n",
        )
    )


def _resources(resource: dict[str, Any]) -> str:
    return ", ".join(
        f'{_quoted(name)}: {{"value": {value if type(value) is int else json.dumps(value)}}}'
        for name, value in resource.items()
    )


def event_lines(events: list[EventTuple]) -> bytes:
    return "".join(map(event_line, events)).encode()


def record_tuple(event_id: int, record: dict[str, Any]) -> EventTuple:
    """The event tuple of an EventRecord as msgspec wrote it (its fields by name, enums as numbers)."""
    return (
        event_id,
        record["type"],
        record["object_id"],
        record["reference_id"] or record["group_id"],
        record["message"] or record["reason"],
        record["timestamp_nano"],
        record["event_change_type"],
        record["event_change_detail"],
        record["resource"] or None,
    )


def batch_lines(data: bytes) -> bytes:
    """The JSON lines of a flush's batches as the server sends them (MessagePack)."""
    batches = msgspec.msgpack.decode(data)
    return event_lines([record_tuple(event_id, record) for batch in batches for event_id, record in batch])


def take_frames(inbound: bytearray) -> list[tuple[bytes, int, bytes]]:
    """The complete frames at the head of ``inbound`` (kind, reader id, payload), taken out of it in one
    cut; a frame still arriving stays. Both ends of the channel read it so."""
    frames = []
    offset = 0
    while len(inbound) - offset >= HEADER.size:
        kind, reader_id, size = HEADER.unpack_from(inbound, offset)
        end = offset + HEADER.size + size
        if len(inbound) < end:
            break
        frames.append((kind, reader_id, bytes(inbound[offset + HEADER.size : end])))
        offset = end
    del inbound[:offset]
    return frames


def chunk(data: bytes) -> bytes:
    """``data`` as one chunk of HTTP/1.1's chunked transfer encoding."""
    return b"%x\r\n%b\r\n" % (len(data), data)


class StreamReader:
    """One reader's socket and what waits to be written to it."""

    def __init__(self, reader_id: int, sock: socket.socket, chunked: bool) -> None:
        self.reader_id = reader_id
        self.sock = sock
        self.chunked = chunked
        self.pending: collections.deque[memoryview] = collections.deque()
        self.pending_bytes = 0
        self.progress_at = time.monotonic()
        self.published = False

    def send(self) -> bool:
        """Write what waits until the socket takes no more; False when the reader is gone."""
        pending = self.pending
        while pending:
            head = pending[0]
            try:
                sent = self.sock.send(head)
            except BlockingIOError:
                return True
            except OSError:
                return False
            self.progress_at = time.monotonic()
            self.pending_bytes -= sent
            if sent == len(head):
                pending.popleft()
            else:
                pending[0] = head[sent:]
        return True


class Worker:
    def __init__(self, channel: socket.socket, buffer_bytes: int, write_timeout: float) -> None:
        self.channel = channel
        self.buffer_bytes = buffer_bytes
        self.write_timeout = write_timeout
        self.readers: dict[int, StreamReader] = {}
        self.selector = selectors.DefaultSelector()
        self.inbound = bytearray()
        self.fds: collections.deque[int] = collections.deque()
        self.running = True
        channel.setblocking(True)
        self.selector.register(channel, selectors.EVENT_READ, None)

    # ---- the server's channel -------------------------------------------------------------------

    def read_channel(self) -> None:
        data, ancillary, _, _ = self.channel.recvmsg(1 << 20, socket.CMSG_SPACE(MAX_FDS * 4))
        for level, message_type, fd_bytes in ancillary:
            if level == socket.SOL_SOCKET and message_type == socket.SCM_RIGHTS:
                usable = len(fd_bytes) - len(fd_bytes) % 4
                self.fds.extend(struct.unpack(f"{usable // 4}i", fd_bytes[:usable]))
        if not data:
            self.running = False  # the server is gone
            return
        self.inbound += data
        for kind, reader_id, payload in take_frames(self.inbound):
            self.handle(kind, reader_id, payload)

    def handle(self, kind: bytes, reader_id: int, payload: bytes) -> None:
        if kind == b"R":
            sock = socket.socket(fileno=self.fds.popleft())
            sock.setblocking(False)
            reader = StreamReader(reader_id, sock, payload == b"c")
            self.readers[reader_id] = reader
            self.selector.register(sock, selectors.EVENT_READ, reader)
        elif kind == b"D":
            self.broadcast(batch_lines(payload))
        elif kind == b"W":
            own = self.readers.get(reader_id)
            if own is not None:
                self.give(own, memoryview(payload))
        elif kind == b"P":
            published = self.readers.get(reader_id)
            if published is not None:
                published.published = True
        elif kind == b"X":
            cut = self.readers.get(reader_id)
            if cut is not None:
                self.gone(cut, payload.decode() or "cut off by the server", cut=True)
        elif kind == b"Q":
            for reader in list(self.readers.values()):
                self.gone(reader, "the server stops", cut=True, report=False)
            self.running = False

    def report(self, reader_id: int, reason: str) -> None:
        encoded = reason.encode()
        with contextlib.suppress(OSError):
            self.channel.sendall(HEADER.pack(b"G", reader_id, len(encoded)) + encoded)

    # ---- the readers ----------------------------------------------------------------------------

    def broadcast(self, data: bytes) -> None:
        framed: dict[bool, memoryview] = {}
        for reader in list(self.readers.values()):
            if not reader.published:
                continue
            piece = framed.get(reader.chunked)
            if piece is None:
                piece = framed[reader.chunked] = memoryview(chunk(data) if reader.chunked else data)
            self.give(reader, piece)

    def give(self, reader: StreamReader, piece: memoryview) -> None:
        # behind by what it had not taken before this piece: a large piece alone (the core making
        # many events at once, the server's own lag) is never the reader's fault
        if reader.pending_bytes > self.buffer_bytes:
            self.gone(
                reader,
                f"fell behind by {reader.pending_bytes:,} bytes (stream_buffer_bytes {self.buffer_bytes:,})",
                cut=True,
            )
            return
        if not reader.pending:
            reader.progress_at = time.monotonic()
        reader.pending.append(piece)
        reader.pending_bytes += len(piece)
        self.flush(reader)

    def flush(self, reader: StreamReader) -> None:
        if not reader.send():
            self.gone(reader, "")
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if reader.pending else 0)
        self.selector.modify(reader.sock, events, reader)

    def readable(self, reader: StreamReader) -> None:
        """A reader sends nothing once its stream began: data is dropped, its end closing means it left."""
        try:
            data = reader.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.gone(reader, "")

    def gone(self, reader: StreamReader, reason: str, cut: bool = False, report: bool = True) -> None:
        if self.readers.pop(reader.reader_id, None) is None:
            return
        self.selector.unregister(reader.sock)
        if cut:  # the server holds the same connection: shut it down for both
            with contextlib.suppress(OSError):
                reader.sock.shutdown(socket.SHUT_RDWR)
        reader.sock.close()
        if report:
            self.report(reader.reader_id, reason)

    def check_timeouts(self) -> None:
        now = time.monotonic()
        for reader in list(self.readers.values()):
            if reader.pending and now - reader.progress_at > self.write_timeout:
                self.gone(
                    reader,
                    f"took nothing for {self.write_timeout:g}s (stream_write_timeout), "
                    f"{reader.pending_bytes:,} bytes unsent",
                    cut=True,
                )

    def run(self) -> None:
        next_check = time.monotonic() + TICK
        while self.running:
            for key, mask in self.selector.select(TICK):
                reader = key.data
                if reader is None:
                    self.read_channel()
                    if not self.running:
                        break
                    continue
                if reader.reader_id not in self.readers:
                    continue
                if mask & selectors.EVENT_WRITE:
                    self.flush(reader)
                if mask & selectors.EVENT_READ and reader.reader_id in self.readers:
                    self.readable(reader)
            now = time.monotonic()
            if now >= next_check:
                self.check_timeouts()
                next_check = now + TICK
        for reader in list(self.readers.values()):
            self.gone(reader, "", report=False)


def main(argv: list[str]) -> int:
    fd, buffer_bytes, write_timeout = int(argv[0]), int(argv[1]), float(argv[2])
    channel = socket.socket(fileno=fd)
    Worker(channel, buffer_bytes, write_timeout).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
