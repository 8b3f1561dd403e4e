"""The REST server's bounds: connection count, header and idle timeouts, event stream limits, TLS.

Everything an outside client can hold on the REST port is bounded here, so that no client (or 3,000 of
them) keeps sockets, file descriptors or memory the rest of the process needs (the gRPC server above
all): ``RestLimits`` holds the settings (``core.serve_rest(**settings)``), ``ConnectionGuard`` wraps
each accepted connection's aiohttp protocol to count it, refuse it past the cap and close it when it
sends no complete request head in time or stays idle, and ``tls_context`` builds the server's TLS
context from certificate files.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler

from korral import log_text
from korral.server.fds import default_max_connections, fd_limit

log = log_text.logger("korral.rest")

MAX_FD_SHARE = 2  # a configured max_connections above half the limit is refused
# a refused connection gets this answer (YuniKorn's error body) and is closed
REFUSED = json.dumps(
    {"status_code": 503, "message": "Too many connections", "description": "Too many connections"}
).encode()
REFUSAL_LOG_INTERVAL = 60.0  # seconds between two warnings that connections are being refused


class MalformedRequestLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's log of its protocol handler (``AppRunner(logger=...)``). A client's malformed request
    (request line or header too long, too many headers, bad bytes: ``HttpProcessingError``) is answered
    400 by aiohttp and, as YuniKorn's Go server does, not logged above DEBUG: one line, its reason
    escaped and cut, no traceback. Logged as aiohttp logs it, each was an ERROR with a traceback
    quoting the request (16 KB of log for one bad request line). The handler's own failures keep
    theirs."""

    def exception(self, msg: object, *args: object, exc_info: object = True, **kwargs: object) -> None:
        if isinstance(exc_info, HttpProcessingError):
            self.logger.debug("refused a malformed HTTP request: %s", exc_info.message)
            return
        self.logger.exception(msg, *args, exc_info=exc_info, **kwargs)


HTTP_LOG = MalformedRequestLog(log_text.logger("korral.rest.http"), {})


def _positive(instance: Any, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{attribute.name} must be a positive number, got {value!r}")


def _niceness(instance: Any, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 19:
        raise ValueError(f"{attribute.name} must be a whole number from 0 to 19, got {value!r}")


def _count(instance: Any, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{attribute.name} must be a whole number of at least 1, got {value!r}")


@attrs.frozen
class RestLimits:
    """The REST server's bounds (every one a setting of ``core.serve_rest``; docs/api.md lists them).

    - ``max_connections``: open connections at most (default: a quarter of RLIMIT_NOFILE, at most
      1,024); one more is answered 503 and closed at once. Above half the limit: refused.
    - ``header_timeout``: seconds from a connection's opening (or a request's first byte) to its
      complete request head, and for a request's body; past it the connection is closed.
    - ``idle_timeout``: seconds a connection may sit between requests (or with an answer its client does
      not read) before it is closed.
    - ``max_streams`` / ``max_streams_per_host``: open ``/ws/v1/events/stream`` readers in total / from
      one client address (YuniKorn's ``event.maxStreams`` 100 and ``event.maxStreamsPerHost`` 15); one
      more is answered 503 "Too many streaming connections", as YuniKorn.
    - ``stream_buffer_bytes``: event bytes a stream reader may fall behind by before it is cut off.
    - ``stream_write_timeout``: seconds one write to a stream reader may wait on it (YuniKorn: 5).
    - ``stream_flush_interval``: seconds events are gathered before they go out to the readers (one
      encoding and one write per reader per interval, whatever the scheduler's event rate).
    - ``stream_lag_events``: events logged but not yet sent to the readers (the server's own lag, when
      it cannot send as fast as the core makes them) at most; past it every reader is cut off.
    - ``stream_process``: readers of a plain-HTTP server are written to by a child process (one per
      server, started with the first reader), so their bytes never take the core's GIL; False: by the
      server's event loop. Over TLS the loop writes (the child holds no TLS session).
    - ``stream_nice``: how much lower that process's CPU priority is (0-19, ``os.nice``): on a busy
      machine the scheduler's CPU comes before the readers' bytes; a reader the process cannot serve
      in time falls behind and is cut off. What waits for the process is bounded by 32 MiB (or 4 x
      ``stream_buffer_bytes``, if more); past it every reader it has is cut off.
    """

    max_connections: int = attrs.field(factory=default_max_connections, validator=_count)
    header_timeout: float = attrs.field(default=10.0, validator=_positive)
    idle_timeout: float = attrs.field(default=60.0, validator=_positive)
    max_streams: int = attrs.field(default=100, validator=_count)
    max_streams_per_host: int = attrs.field(default=15, validator=_count)
    stream_buffer_bytes: int = attrs.field(default=4 << 20, validator=_count)
    stream_write_timeout: float = attrs.field(default=5.0, validator=_positive)
    stream_flush_interval: float = attrs.field(default=0.05, validator=_positive)
    stream_lag_events: int = attrs.field(default=100_000, validator=_count)
    stream_process: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    stream_nice: int = attrs.field(default=10, validator=_niceness)

    def __attrs_post_init__(self) -> None:
        ceiling = fd_limit() // MAX_FD_SHARE
        if self.max_connections > ceiling:
            raise ValueError(
                f"max_connections {self.max_connections} is more than half the process's file "
                f"descriptor limit (RLIMIT_NOFILE {fd_limit()}): the gRPC server and the core would "
                "run short; raise the limit (ulimit -n) or lower max_connections"
            )

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> RestLimits:
        """From ``serve_rest``'s keyword settings; an unknown name is refused with the known ones."""
        known = {field.name for field in attrs.fields(cls)}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise TypeError(
                f"unknown REST setting(s) {', '.join(unknown)}: the settings are {', '.join(sorted(known))}"
            )
        return cls(**settings)


def tls_context(tls: ssl.SSLContext | Mapping[str, Any] | None) -> ssl.SSLContext | None:
    """The server's TLS context: given as is, or made from ``{"cert": F, "key": F, "client_ca": F}``
    (PEM files; ``client_ca``: clients must present a certificate it signed - mutual TLS)."""
    if tls is None or isinstance(tls, ssl.SSLContext):
        return tls
    if not isinstance(tls, Mapping):
        raise TypeError(f"tls must be an ssl.SSLContext or a mapping of cert, key, client_ca; got {tls!r}")
    unknown = sorted(set(tls) - {"cert", "key", "client_ca"})
    if unknown:
        raise ValueError(
            f"unknown TLS setting(s) {', '.join(unknown)}: the settings are cert, key, client_ca"
        )
    if not tls.get("cert") or not tls.get("key"):
        raise ValueError("TLS needs both a certificate (cert) and its private key (key)")
    for name in ("cert", "key", "client_ca"):
        if tls.get(name) and not Path(tls[name]).is_file():
            raise ValueError(f"TLS {name} file not found: {tls[name]}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(str(tls["cert"]), str(tls["key"]))
        if tls.get("client_ca"):
            context.load_verify_locations(cafile=str(tls["client_ca"]))
            context.verify_mode = ssl.CERT_REQUIRED
    except ssl.SSLError as exc:
        raise ValueError(f"TLS certificate or key not usable: {exc}") from None
    return context


class Connection(asyncio.Protocol):
    """One accepted connection: aiohttp's protocol behind it, and what the guard's sweeps read."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self.guard = guard
        self.inner = inner
        self.transport: asyncio.Transport | None = None
        self.admitted = False
        now = time.monotonic()
        self.head_since: float | None = now  # waiting for a request head since then
        self.last_seen = now
        self.handling = 0  # requests being answered (a stream's whole life)
        self.unsent = 0  # bytes of an answer the client had not taken at the last sweep
        self.progress_at = now
        self.on_drained: Callable[[], None] | None = None  # an event stream's: its transport sent all

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if not self.guard.admit(self):
            return
        self.admitted = True
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        self.last_seen = now
        if self.handling == 0 and self.head_since is None:
            self.head_since = now
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.forget(self)
        if self.admitted:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()
        if self.on_drained is not None:
            self.on_drained()

    def started(self) -> None:
        """A request's head arrived and its handler runs."""
        self.handling += 1
        self.head_since = None

    def finished(self) -> None:
        self.handling -= 1
        self.last_seen = self.progress_at = time.monotonic()


class ConnectionGuard:
    """Counts the REST server's connections, refuses them past ``max_connections`` and closes those
    that send no request head in time or sit idle; one sweep over all of them a few times a second."""

    def __init__(self, limits: RestLimits) -> None:
        self.limits = limits
        self.factory: Callable[[], asyncio.Protocol] | None = None  # aiohttp's, when it listens
        self.connections: dict[Any, Connection] = {}  # transport -> connection
        self.refused = 0
        self.closed_idle = 0
        self.closed_slow_head = 0
        self._refusal_logged = 0.0
        self._sweeper: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __call__(self) -> asyncio.Protocol:
        assert self.factory is not None
        return Connection(self, self.factory())

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """The connection is answering a request: no header or idle timeout meanwhile."""
        connection = self.of(request.transport)
        if connection is None:
            return await handler(request)
        connection.started()
        try:
            return await handler(request)
        finally:
            connection.finished()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._sweeper = loop.call_later(self._interval(), self._sweep)

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    async def listen(
        self, factory: Callable[[], asyncio.Protocol], host: str, port: int, context: ssl.SSLContext | None
    ) -> tuple[asyncio.Server, str]:
        """Listen at ``host:port`` (TLS with ``context``), every connection of ``factory`` (aiohttp's
        server) through the guard; returns the server and its base URL."""
        self.factory = factory
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            self,
            host,
            port,
            ssl=context,
            ssl_handshake_timeout=self.limits.header_timeout if context is not None else None,
            reuse_address=True,
        )
        self.start(loop)
        sockets = server.sockets
        bound = sockets[0].getsockname()[1] if sockets else port
        shown = f"[{host}]" if ":" in host else host
        return server, f"{'https' if context is not None else 'http'}://{shown}:{bound}"

    def _interval(self) -> float:
        shortest = min(self.limits.header_timeout, self.limits.idle_timeout)
        return min(1.0, max(0.02, shortest / 4))

    # ---- the connections' life -------------------------------------------------------------------

    def admit(self, connection: Connection) -> bool:
        transport = connection.transport
        assert transport is not None
        if len(self.connections) >= self.limits.max_connections:
            self.refused += 1
            now = time.monotonic()
            if now - self._refusal_logged >= REFUSAL_LOG_INTERVAL:
                self._refusal_logged = now
                log.warning(
                    "REST connections at the cap (max_connections %d): refusing new ones (%d so far)",
                    self.limits.max_connections,
                    self.refused,
                )
            transport.write(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=UTF-8\r\n"
                b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(REFUSED), REFUSED)
            )
            transport.close()
            return False
        self.connections[transport] = connection
        return True

    def forget(self, connection: Connection) -> None:
        self.connections.pop(connection.transport, None)

    def of(self, transport: Any) -> Connection | None:
        return self.connections.get(transport)

    def _sweep(self) -> None:
        now = time.monotonic()
        limits = self.limits
        for transport, connection in list(self.connections.items()):
            if connection.handling:  # being answered: a query ends, a stream bounds itself
                continue
            if connection.head_since is not None:
                if now - connection.head_since > limits.header_timeout:
                    self.closed_slow_head += 1
                    log.info(
                        "REST connection from %s closed: no complete request within %gs",
                        _peer(transport),
                        limits.header_timeout,
                    )
                    transport.abort()
                continue
            unsent = transport.get_write_buffer_size()
            if unsent and unsent != connection.unsent:  # the client takes its answer: not idle
                connection.unsent = unsent
                connection.progress_at = connection.last_seen = now
                continue
            connection.unsent = unsent
            if now - max(connection.last_seen, connection.progress_at) > limits.idle_timeout:
                self.closed_idle += 1
                log.debug(
                    "REST connection from %s closed: idle for %gs", _peer(transport), limits.idle_timeout
                )
                if unsent:
                    transport.abort()
                else:
                    transport.close()
        if self._loop is not None and self._sweeper is not None:
            self._sweeper = self._loop.call_later(self._interval(), self._sweep)


def _peer(transport: Any) -> str:
    peer = transport.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "?"
