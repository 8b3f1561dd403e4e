"""``/ws/v1/events/stream``: every event the core logs, to many readers, bounded and cheap.

One listener on the core's event log serves every reader of a server (none while nobody reads): the
scheduler's threads only append a batch to a list and, once per ``stream_flush_interval``, wake the
server's event loop; the loop encodes what gathered once and hands the same bytes to every reader. So
100 readers cost the scheduler one list append per batch, and the loop one encoding per interval plus
one write per reader.

With ``stream_process`` (the default, for plain HTTP), a reader whose stream is under way is handed to
the stream sender, a child process at a lower CPU priority (korral.server.rest.stream_worker): the loop then
sends each flush to that process once, and the process writes it to every reader's socket, so the
readers' bytes cost the core's process one write per flush however many read, never its GIL, and on a
busy machine the scheduler's CPU before theirs. Over TLS (the process holds no TLS session) or with
``stream_process=False`` the loop writes to every reader itself.

A reader that falls behind by more than ``stream_buffer_bytes`` (what is queued for it and what its
connection has not taken), or whose write waits more than ``stream_write_timeout``, is cut off, as
YuniKorn removes a consumer whose buffer is full. Readers are limited in total and per client address
(``StreamLimiter``, as YuniKorn's streaming_limit.go). A reader leaving, or cut off, is one log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec
from aiohttp import web

from korral import log_text, si
from korral.server.events import EventLog
from korral.server.rest.limits import Connection, RestLimits
from korral.server.rest.stream_process import StreamProcess
from korral.server.rest.stream_worker import EventTuple, chunk, event_lines
from korral.server.rest.stream_worker import event_line as line_of

log = log_text.logger("korral.rest")

Batch = list[tuple[int, Any]]
# what may wait for the sender process (or 4 x stream_buffer_bytes, if more): past it, the process
# cannot keep up with the core and its readers are cut off
SENDER_BACKLOG_BYTES = 32 << 20


class StreamLimiter:
    """Open streams in total and per client address (YuniKorn's StreamingLimiter; korral counts by the
    client's address, where YuniKorn counts by the Host header the client sent)."""

    def __init__(self, limits: RestLimits) -> None:
        self.limits = limits
        self.total = 0
        self.per_host: dict[str, int] = {}

    def add(self, host: str) -> bool:
        if self.total >= self.limits.max_streams:
            log.info("event stream refused to %s: max_streams %d reached", host, self.limits.max_streams)
            return False
        if self.per_host.get(host, 0) >= self.limits.max_streams_per_host:
            log.info(
                "event stream refused to %s: max_streams_per_host %d reached",
                host,
                self.limits.max_streams_per_host,
            )
            return False
        self.total += 1
        self.per_host[host] = self.per_host.get(host, 0) + 1
        return True

    def remove(self, host: str) -> None:
        count = self.per_host.get(host, 0)
        if count <= 0:
            return
        self.total -= 1
        if count == 1:
            del self.per_host[host]
        else:
            self.per_host[host] = count - 1


class Reader:
    """One stream client: its connection, what waits for it until its stream has begun, and why it
    was cut off, if it was. Events go straight to its connection (no task per reader to wake)."""

    def __init__(self, host: str, transport: asyncio.Transport) -> None:
        self.host = host
        self.transport = transport
        self.after: int | None = None  # events up to this id were sent as the backlog
        self.chunked = True  # HTTP/1.1 chunked transfer encoding (HTTP/1.0: the bare body)
        self.ready = False  # the head and backlog went out: events may follow directly
        self.waiting: list[bytes] = []
        self.done = asyncio.Event()
        self.cut: str | None = None
        self.left = False
        self.unsent = 0  # the connection's unsent bytes after the last write
        self.progress_at = time.monotonic()
        self.movable = False  # may be handed to the stream sender process (plain HTTP)
        self.handed_id: int | None = None  # its id there, once handed

    def behind(self) -> int:
        return sum(len(chunk) for chunk in self.waiting) + self.transport.get_write_buffer_size()

    def offer(self, data: bytes, limits: RestLimits, now: float) -> None:
        """More events for the reader. Cut off if it had not taken what it was given before by more
        than ``stream_buffer_bytes`` (a large flush alone, the server's own lag, is never the reader's
        fault), or took nothing for ``stream_write_timeout`` while it had something to take."""
        if self.cut is not None or self.left:
            return
        if self.transport.is_closing():  # gone: its handler ends (handler_cancellation)
            self.left = True
            return
        behind = self.behind()
        if behind > limits.stream_buffer_bytes:
            self.cut_off(
                f"fell behind by {behind:,} bytes (stream_buffer_bytes {limits.stream_buffer_bytes:,})"
            )
            return
        unsent = self.transport.get_write_buffer_size()
        if unsent == 0 or unsent < self.unsent:
            self.progress_at = now
        elif now - self.progress_at > limits.stream_write_timeout:
            self.cut_off(
                f"took nothing for {limits.stream_write_timeout:g}s (stream_write_timeout), "
                f"{unsent:,} bytes unsent"
            )
            return
        if data:
            self.waiting.append(data)  # the same bytes for every reader: shared, not copied
        if self.ready:
            self._send()

    def _send(self) -> None:
        """Hand what waits to the connection while it holds nothing unsent: each write then goes to
        the socket at once, and at most the part the socket did not take is copied into the
        transport's buffer (writing into a non-empty buffer copies every byte, and asyncio moves the
        rest of a large buffer after each send)."""
        transport = self.transport
        if transport.is_closing():
            # asyncio calls _drained from inside its own write of a closing transport: a write then
            # fails there and asyncio ends the connection twice (a traceback in the loop's log)
            return
        waiting = self.waiting
        while waiting and transport.get_write_buffer_size() == 0:
            transport.write(waiting.pop(0))
        self.unsent = transport.get_write_buffer_size()

    def begin(self, connection: Connection | None) -> None:
        """The head and backlog went out: what waited follows, then events as they are flushed. The
        connection says when its transport has sent everything (a buffer limit of 0: paused while it
        holds anything), and the next chunk goes out then."""
        self.ready = True
        if connection is not None:
            connection.on_drained = self._drained
            self.transport.set_write_buffer_limits(high=0)
        self._send()
        self.progress_at = time.monotonic()

    def _drained(self) -> None:
        if self.ready and self.cut is None and not self.left and self.waiting:
            self.progress_at = time.monotonic()
            self._send()

    def cut_off(self, reason: str) -> None:
        if self.cut is not None:
            return
        self.cut = reason
        self.waiting.clear()
        log.warning("event stream reader %s cut off: %s", self.host, reason)
        self.transport.abort()
        self.done.set()


# an enum member's number, looked up rather than converted for each event
_NUMBER = {
    member: int(member)
    for kind in (si.EventRecordType, si.EventChangeType, si.EventChangeDetail)
    for member in kind
}


# the flush's batches as they go to the sender process (stream_worker.batch_lines reads them)
_PACK = msgspec.msgpack.Encoder()


def event_tuple(event_id: int, record: si.EventRecord) -> EventTuple:
    """The event's fields as the stream's text needs them (stream_worker.record_tuple: the same from
    the sender process's side)."""
    return (
        event_id,
        _NUMBER[record.type],
        record.object_id,
        record.reference_id or record.group_id,
        record.message or record.reason,
        record.timestamp_nano,
        _NUMBER[record.event_change_type],
        _NUMBER[record.event_change_detail],
        dict(record.resource) if record.resource else None,
    )


def event_line(event_id: int, record: si.EventRecord) -> str:
    """``json.dumps(dao.event(event_id, record)) + "\\n"``: the stream's text of one event."""
    return line_of(event_tuple(event_id, record))


def _tuples(batches: list[Batch], after: int | None = None) -> list[EventTuple]:
    return [
        event_tuple(event_id, record)
        for batch in batches
        for event_id, record in batch
        if after is None or event_id > after
    ]


def _encode(batches: list[Batch], after: int | None = None) -> bytes:
    return event_lines(_tuples(batches, after))


class EventFanout:
    """The one listener of a server on the core's event log, and its readers."""

    def __init__(self, events: EventLog, limits: RestLimits) -> None:
        self.events = events
        self.limits = limits
        self.readers: set[Reader] = set()
        self._lock = threading.Lock()
        self._gathered: list[Batch] = []
        self._armed = False
        self._pumping = False
        self._lagging = 0  # events gathered, not yet flushed
        self._overflow = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.handed: dict[int, Reader] = {}  # readers the sender process writes to, by their id there
        self._process: StreamProcess | None = None
        self._closed = False  # the server stops: no sender process starts after this
        self._ids = itertools.count(1)

    def listener(self, batch: Batch) -> None:
        """Called on the thread that logged the batch: a list append, and a wake-up per interval."""
        with self._lock:
            if self._lagging + len(batch) > self.limits.stream_lag_events:
                self._overflow = True  # the readers are cut off at the flush: nothing kept meanwhile
                self._gathered = []
                self._lagging = 0
            else:
                self._gathered.append(batch)
                self._lagging += len(batch)
            if self._armed:
                return
            self._armed = True
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed: the server is stopping
                loop.call_soon_threadsafe(loop.call_later, self.limits.stream_flush_interval, self._flush)

    def _flush(self) -> None:
        with self._lock:
            batches, self._gathered = self._gathered, []
            overflow, self._overflow = self._overflow, False
            self._lagging = 0
            self._armed = False
        if overflow:
            reason = (
                f"the server fell more than {self.limits.stream_lag_events:,} events behind the core "
                "(stream_lag_events): it cannot send them as fast as they are made"
            )
            for reader in list(self.readers):  # each has missed events: it reconnects (events/batch)
                reader.cut_off(reason)
            for reader_id in list(self.handed):
                self._cut_handed(reader_id, reason)
            return
        if not batches or not (self.readers or self.handed):
            return
        encoded: bytes | None = None
        framed: bytes | None = None
        limits = self.limits
        now = time.monotonic()
        first = next((batch[0][0] for batch in batches if batch), None)
        process = self._process
        if self.handed and process is not None:
            # a reader's first flush: only what its backlog did not hold, then every flush as the others
            overlapping = []
            for reader_id, reader in self.handed.items():
                if reader.after is None:
                    continue
                if first is not None and first > reader.after:  # nothing of it in the backlog
                    process.publish(reader_id)
                    reader.after = None
                else:
                    overlapping.append((reader_id, reader))
            if any(batches):
                process.broadcast(_PACK.encode(batches))  # to the published readers
            for reader_id, reader in overlapping:
                assert reader.after is not None
                own = _encode(batches, reader.after)
                if own:
                    process.private(reader_id, chunk(own) if reader.chunked else own)
                process.publish(reader_id)
                reader.after = None
        for reader in list(self.readers):
            if reader.after is not None and (first is None or first <= reader.after):
                own = _encode(batches, reader.after)  # without what its backlog held
                if own:
                    reader.offer(chunk(own) if reader.chunked else own, limits, now)
                continue
            reader.after = None
            if encoded is None:
                encoded = _encode(batches)
                if not encoded:
                    return
            if reader.chunked:
                if framed is None:
                    framed = chunk(encoded)
                reader.offer(framed, limits, now)
            else:
                reader.offer(encoded, limits, now)
        self._pump_later()

    # ---- the sender process ---------------------------------------------------------------------------

    async def hand_over(self, reader: Reader, connection: Connection | None) -> bool:
        """Give the reader to the sender process once its head and backlog have left the server (the
        process must write after them); False: the server writes to it itself."""
        transport = reader.transport
        if transport.get_write_buffer_size():
            if connection is None:
                return False
            drained = asyncio.Event()
            connection.on_drained = drained.set
            transport.set_write_buffer_limits(high=0)  # paused until it holds nothing: then drained
            if transport.get_write_buffer_size():
                await asyncio.wait_for(drained.wait(), self.limits.stream_write_timeout)
            connection.on_drained = None
        sock = transport.get_extra_info("socket")
        # checked before the sender starts: a reader cut off while its backlog drained (the server
        # stopped meanwhile) must not start a process that no one would stop
        if sock is None or transport.is_closing() or reader.cut is not None:
            return False
        process = self._sender()
        if process is None:
            return False
        reader.handed_id = reader_id = next(self._ids)
        transport.pause_reading()  # the process watches the connection from now on
        self.readers.discard(reader)
        self.handed[reader_id] = reader
        process.hand_over(reader_id, sock.fileno(), reader.chunked)
        if reader.waiting:  # what flushes offered it meanwhile, framed for it already
            process.private(reader_id, b"".join(reader.waiting))
            reader.waiting.clear()
        if reader.after is None:
            process.publish(reader_id)
        reader.ready = True
        return True

    def _sender(self) -> StreamProcess | None:
        """The sender process, started if it is not running; None if it cannot start or the server
        stops."""
        if self._closed:
            return None
        if self._process is not None and self._process.alive:
            return self._process
        try:
            self._process = StreamProcess(
                asyncio.get_running_loop(),
                buffer_bytes=self.limits.stream_buffer_bytes,
                write_timeout=self.limits.stream_write_timeout,
                nice=self.limits.stream_nice,
                max_buffered=max(SENDER_BACKLOG_BYTES, self.limits.stream_buffer_bytes * 4),
                on_gone=self._gone,
            )
        except OSError as error:
            log.warning("event stream sender not started (%s): the server writes to readers itself", error)
            self._process = None
        return self._process

    def _gone(self, reader_id: int, reason: str) -> None:
        """The sender process ended a reader (reason: why it was cut off; empty: it left), or itself
        (reader_id -1: every reader it had is cut off)."""
        ids = list(self.handed) if reader_id == -1 else [reader_id]
        for each in ids:
            reader = self.handed.pop(each, None)
            if reader is None:
                continue
            if reason:
                reader.cut_off(reason)
            else:
                reader.left = True
                log.info("event stream reader %s left", reader.host)
                reader.transport.abort()
                reader.done.set()

    def _cut_handed(self, reader_id: int, reason: str) -> None:
        reader = self.handed.pop(reader_id, None)
        if reader is None:
            return
        if self._process is not None:
            self._process.cut(reader_id, reason)
        reader.cut_off(reason)

    def _pump_later(self) -> None:
        """While some reader has bytes waiting for its connection to take what it holds, look again
        each interval (events may not come to do it)."""
        if self._pumping or self._loop is None:
            return
        if any(reader.waiting and reader.ready and reader.cut is None for reader in self.readers):
            self._pumping = True
            self._loop.call_later(self.limits.stream_flush_interval, self._pump)

    def _pump(self) -> None:
        self._pumping = False
        now = time.monotonic()
        for reader in list(self.readers):
            if reader.waiting and reader.ready and reader.cut is None:
                reader.offer(b"", self.limits, now)
        self._pump_later()

    def join(self, reader: Reader) -> None:
        if not self.readers and not self.handed:  # the first reader: listen from now on
            self._loop = asyncio.get_running_loop()
            self.events.listen(self.listener)
        self.readers.add(reader)

    def leave(self, reader: Reader) -> None:
        self.readers.discard(reader)
        handed = reader.handed_id is not None and self.handed.pop(reader.handed_id, None) is not None
        if handed and self._process is not None and reader.handed_id is not None:
            # its handler ended (the server stops): the process lets go of it too
            self._process.cut(reader.handed_id, reader.cut or "the server stops")
        if not self.readers and not self.handed:
            self.events.unlisten(self.listener)
            with self._lock:
                self._gathered = []
                self._lagging = 0
                self._overflow = False

    def close(self) -> None:
        self._closed = True
        for reader in [*self.readers, *self.handed.values()]:
            reader.cut = reader.cut or "the server stops"
            reader.done.set()
        if self._process is not None:
            self._process.close()
            self._process = None


async def serve_stream(
    request: web.Request,
    *,
    fanout: EventFanout,
    limiter: StreamLimiter,
    instance_uuid: str,
    count: int,
    error: Callable[[int, str], web.Response],
    headers: dict[str, str],
    connection: Connection | None = None,
) -> web.StreamResponse:
    """One reader's stream: the instance id, the last ``count`` events, then each event as logged."""
    host = request.remote or "?"
    if not limiter.add(host):
        return error(503, "Too many streaming connections")
    try:
        return await _stream(request, fanout, host, instance_uuid, count, headers, connection)
    finally:
        limiter.remove(host)


async def _stream(
    request: web.Request,
    fanout: EventFanout,
    host: str,
    instance_uuid: str,
    count: int,
    headers: dict[str, str],
    connection: Connection | None,
) -> web.StreamResponse:
    limits = fanout.limits
    response = web.StreamResponse(headers={**headers, "Content-Type": "application/json; charset=UTF-8"})
    transport = request.transport
    if not isinstance(transport, asyncio.Transport):  # gone before its stream began
        return response
    reader = Reader(host, transport)
    fanout.join(reader)  # listening before the backlog is read: nothing falls between the two
    try:
        backlog = fanout.events.latest(count) if count else []
        reader.after = backlog[-1][0] if backlog else fanout.events.highest()
        reader.chunked = request.version >= (1, 1)
        reader.movable = limits.stream_process and transport.get_extra_info("sslcontext") is None
        if reader.chunked:  # said here: the events written directly are framed as chunks (chunk)
            response.enable_chunked_encoding()
        await response.prepare(request)
        first = (json.dumps({"InstanceUUID": instance_uuid}) + "\n").encode() + _encode([backlog])
        # the head and the backlog through aiohttp's writer; then events go to the connection directly
        await asyncio.wait_for(response.write(first), limits.stream_write_timeout)
        if not (reader.movable and await fanout.hand_over(reader, connection)):
            reader.begin(connection)
        await reader.done.wait()
    except TimeoutError:
        reader.cut_off(
            f"its backlog waited more than {limits.stream_write_timeout:g}s (stream_write_timeout)"
        )
    except ConnectionError as exc:  # the client left mid-write: its own choice, one line
        log.info("event stream reader %s left: %s", host, exc or type(exc).__name__)
    except asyncio.CancelledError:  # the client left (handler_cancellation) or was cut off
        if reader.cut is None and not reader.left:  # (left: the sender process said so already)
            log.info("event stream reader %s left", host)
        raise
    finally:
        fanout.leave(reader)
    return response
