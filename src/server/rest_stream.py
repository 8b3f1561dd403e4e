"""``/ws/v1/events/stream``: every event the core logs, to many readers, bounded and cheap.

One listener on the core's event log serves every reader of a server (none while nobody reads): the
scheduler's threads only append a batch to a list and, once per ``stream_flush_interval``, wake the
server's event loop; the loop encodes what gathered once and hands the same bytes to every reader. So
100 readers cost the scheduler one list append per batch, and the loop one encoding per interval plus
one write per reader.

A reader that falls behind by more than ``stream_buffer_bytes`` (what is queued for it and what its
connection has not taken), or whose write waits more than ``stream_write_timeout``, is cut off, as
YuniKorn removes a consumer whose buffer is full. Readers are limited in total and per client address
(``StreamLimiter``, as YuniKorn's streaming_limit.go). A reader leaving, or cut off, is one log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from aiohttp import web

from korral.server import dao
from korral.server.events import EventLog
from korral.server.rest_limits import RestLimits

log = logging.getLogger("korral.rest")

Batch = list[tuple[int, Any]]


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
    """One stream client: the bytes queued for it and why it was cut off, if it was."""

    def __init__(self, host: str, transport: asyncio.Transport | None, after: int | None) -> None:
        self.host = host
        self.transport = transport
        self.after = after  # events up to this id were sent as the backlog
        self.chunks: list[bytes] = []
        self.queued = 0
        self.wake = asyncio.Event()
        self.cut: str | None = None

    def behind(self) -> int:
        unsent = self.transport.get_write_buffer_size() if self.transport is not None else 0
        return self.queued + unsent

    def offer(self, data: bytes, limit: int) -> None:
        if self.cut is not None or not data:
            return
        self.chunks.append(data)
        self.queued += len(data)
        behind = self.behind()
        if behind > limit:
            self.cut_off(f"fell behind by {behind:,} bytes (stream_buffer_bytes {limit:,})")
        else:
            self.wake.set()

    def take(self) -> bytes:
        data = b"".join(self.chunks)
        self.chunks.clear()
        self.queued = 0
        return data

    def cut_off(self, reason: str) -> None:
        if self.cut is not None:
            return
        self.cut = reason
        self.chunks.clear()
        self.queued = 0
        log.warning("event stream reader %s cut off: %s", self.host, reason)
        if self.transport is not None:
            self.transport.abort()
        self.wake.set()


def _encode(batches: list[Batch], after: int | None = None) -> bytes:
    return "".join(
        json.dumps(dao.event(event_id, record)) + "\n"
        for batch in batches
        for event_id, record in batch
        if after is None or event_id > after
    ).encode()


class EventFanout:
    """The one listener of a server on the core's event log, and its readers."""

    def __init__(self, events: EventLog, limits: RestLimits) -> None:
        self.events = events
        self.limits = limits
        self.readers: set[Reader] = set()
        self._lock = threading.Lock()
        self._gathered: list[Batch] = []
        self._armed = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def listener(self, batch: Batch) -> None:
        """Called on the thread that logged the batch: a list append, and a wake-up per interval."""
        with self._lock:
            self._gathered.append(batch)
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
            self._armed = False
        if not batches or not self.readers:
            return
        shared: bytes | None = None
        limit = self.limits.stream_buffer_bytes
        first = next((batch[0][0] for batch in batches if batch), None)
        for reader in list(self.readers):
            if reader.after is not None and (first is None or first <= reader.after):
                reader.offer(_encode(batches, reader.after), limit)  # skip what its backlog held
                continue
            reader.after = None
            if shared is None:
                shared = _encode(batches)
            reader.offer(shared, limit)

    def join(self, reader: Reader) -> None:
        if not self.readers:
            self._loop = asyncio.get_running_loop()
            self.events.listen(self.listener)
        self.readers.add(reader)

    def leave(self, reader: Reader) -> None:
        self.readers.discard(reader)
        if not self.readers:
            self.events.unlisten(self.listener)
            with self._lock:
                self._gathered = []

    def close(self) -> None:
        for reader in list(self.readers):
            reader.cut = reader.cut or "the server stops"
            reader.wake.set()


async def serve_stream(
    request: web.Request,
    *,
    fanout: EventFanout,
    limiter: StreamLimiter,
    instance_uuid: str,
    count: int,
    error: Callable[[int, str], web.Response],
    headers: dict[str, str],
) -> web.StreamResponse:
    """One reader's stream: the instance id, the last ``count`` events, then each event as logged."""
    host = request.remote or "?"
    if not limiter.add(host):
        return error(503, "Too many streaming connections")
    try:
        return await _stream(request, fanout, host, instance_uuid, count, headers)
    finally:
        limiter.remove(host)


async def _stream(
    request: web.Request,
    fanout: EventFanout,
    host: str,
    instance_uuid: str,
    count: int,
    headers: dict[str, str],
) -> web.StreamResponse:
    limits = fanout.limits
    response = web.StreamResponse(headers={**headers, "Content-Type": "application/json; charset=UTF-8"})
    transport = request.transport
    reader = Reader(host, transport if isinstance(transport, asyncio.Transport) else None, None)
    fanout.join(reader)  # listening before the backlog is read: nothing falls between the two
    try:
        backlog = fanout.events.latest(count) if count else []
        reader.after = backlog[-1][0] if backlog else fanout.events.highest()
        await response.prepare(request)
        first = (json.dumps({"InstanceUUID": instance_uuid}) + "\n").encode() + _encode([backlog])
        await asyncio.wait_for(response.write(first), limits.stream_write_timeout)
        while True:
            await reader.wake.wait()
            reader.wake.clear()
            if reader.cut is not None:
                break
            data = reader.take()
            if data:
                await asyncio.wait_for(response.write(data), limits.stream_write_timeout)
    except TimeoutError:
        reader.cut_off(f"a write waited more than {limits.stream_write_timeout:g}s (stream_write_timeout)")
    except ConnectionError as exc:  # the client left mid-write: its own choice, one line
        log.info("event stream reader %s left: %s", host, exc or type(exc).__name__)
    except asyncio.CancelledError:
        if reader.cut is None:
            log.info("event stream reader %s left", host)
        raise
    finally:
        fanout.leave(reader)
    return response
