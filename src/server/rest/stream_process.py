"""The REST server's side of the event stream's sender process (korral.server.rest.stream_worker).

Runs on the server's event loop only. The process starts with the first reader handed to it and ends
with the server (or when it falls too far behind: then its readers are cut off, and the next reader
starts a new one). What the loop sends it waits in a buffer bounded by ``max_buffered`` bytes: the
process is behind by more than that only when it cannot send as fast as the core makes events.
"""

from __future__ import annotations

import array
import asyncio
import collections
import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from korral import log_text
from korral.server.rest import stream_worker
from korral.server.rest.stream_worker import HEADER, take_frames

log = log_text.logger("korral.rest")

STOP_TIMEOUT = 5.0


class StreamProcess:
    """The sender process and the channel to it: readers handed over, events broadcast, and each
    reader's end (``on_gone(reader_id, reason)``: reason empty when the reader left)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        buffer_bytes: int,
        write_timeout: float,
        nice: int,
        max_buffered: int,
        on_gone: Callable[[int, str], None],
    ) -> None:
        self._loop = loop
        self._on_gone = on_gone
        self._max_buffered = max_buffered
        self._outgoing: collections.deque[tuple[memoryview, int | None]] = collections.deque()
        self._buffered = 0
        self._inbound = bytearray()
        self._writing = False
        self.alive = True
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    str(Path(stream_worker.__file__)),
                    str(theirs.fileno()),
                    str(buffer_bytes),
                    str(write_timeout),
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        if nice:
            with contextlib.suppress(OSError):  # a lower priority is always allowed; never fatal
                os.setpriority(os.PRIO_PROCESS, self._process.pid, nice)
        ours.setblocking(False)
        self._channel = ours
        loop.add_reader(ours.fileno(), self._readable)

    # ---- to the process ---------------------------------------------------------------------------

    def hand_over(self, reader_id: int, fileno: int, chunked: bool) -> None:
        """The reader's socket goes to the process (a duplicate: the server keeps its own, unused)."""
        fd = os.dup(fileno)
        self._send(HEADER.pack(b"R", reader_id, 1) + (b"c" if chunked else b"p"), fd)

    def broadcast(self, data: bytes) -> None:
        """Events for every published reader: the flush's batches packed (the process writes the text)."""
        self._send(HEADER.pack(b"D", 0, len(data)), None)
        self._send(data, None)

    def private(self, reader_id: int, framed: bytes) -> None:
        """Bytes for one reader only (framed for it already): what it gets before its first flush."""
        self._send(HEADER.pack(b"W", reader_id, len(framed)), None)
        self._send(framed, None)

    def publish(self, reader_id: int) -> None:
        """The reader takes every broadcast from now on."""
        self._send(HEADER.pack(b"P", reader_id, 0), None)

    def cut(self, reader_id: int, reason: str) -> None:
        encoded = reason.encode()
        self._send(HEADER.pack(b"X", reader_id, len(encoded)) + encoded, None)

    def _send(self, data: bytes, fd: int | None) -> None:
        if not self.alive:
            if fd is not None:
                os.close(fd)
            return
        self._outgoing.append((memoryview(data), fd))
        self._buffered += len(data)
        if self._buffered > self._max_buffered:
            self._fail(
                f"the stream sender fell more than {self._max_buffered:,} bytes behind the core: it cannot "
                "send events as fast as they are made"
            )
            return
        self._write()

    def _write(self) -> None:
        outgoing = self._outgoing
        while outgoing:
            data, fd = outgoing[0]
            try:
                if fd is not None:
                    sent = self._channel.sendmsg(
                        [data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
                    )
                    os.close(fd)  # the process has its own now
                else:
                    sent = self._channel.send(data)
            except BlockingIOError:
                break
            except OSError as error:
                self._fail(f"the stream sender's channel failed: {error}")
                return
            self._buffered -= sent
            if sent == len(data):
                outgoing.popleft()
            else:
                outgoing[0] = (data[sent:], None)
        if outgoing and not self._writing:
            self._writing = True
            self._loop.add_writer(self._channel.fileno(), self._writable)
        elif not outgoing and self._writing:
            self._writing = False
            self._loop.remove_writer(self._channel.fileno())

    def _writable(self) -> None:
        self._write()

    # ---- from the process -------------------------------------------------------------------------

    def _readable(self) -> None:
        try:
            data = self._channel.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._fail("the stream sender ended")
            return
        self._inbound += data
        for kind, reader_id, payload in take_frames(self._inbound):
            if kind == b"G":
                self._on_gone(reader_id, payload.decode())

    # ---- its end ----------------------------------------------------------------------------------

    def _fail(self, reason: str) -> None:
        """The process cannot go on: its readers are cut off (the server's callback), it is stopped."""
        if not self.alive:
            return
        log.warning("%s", reason)
        self._end(kill=True)
        self._on_gone(-1, reason)

    def close(self) -> None:
        """Every reader's connection closes, then the process ends."""
        if not self.alive:
            return
        if self._outgoing:  # a frame may be half sent: the process cannot read what follows it
            self._end(kill=True)
            return
        with contextlib.suppress(OSError):
            self._channel.setblocking(True)
            self._channel.settimeout(STOP_TIMEOUT)
            self._channel.sendall(HEADER.pack(b"Q", 0, 0))
        self._end(kill=False)

    def _end(self, kill: bool) -> None:
        self.alive = False
        for _, fd in self._outgoing:
            if fd is not None:
                os.close(fd)
        self._outgoing.clear()
        self._buffered = 0
        with contextlib.suppress(Exception):
            self._loop.remove_reader(self._channel.fileno())
            if self._writing:
                self._loop.remove_writer(self._channel.fileno())
        self._channel.close()
        if kill:
            self._process.kill()
        try:
            self._process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(STOP_TIMEOUT)

    @property
    def pid(self) -> int:
        return self._process.pid
