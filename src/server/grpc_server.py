"""The SI over gRPC: si.v1.Scheduler served by grpc.aio on its own thread and event loop, beside the core.

- Requests are decoded here (raw bytes in, so a malformed message is this call's ``INVALID_ARGUMENT``
  with the reason, never an opaque failure; a big one off the loop: korral.server.decoder) and routed
  into the core like in-process SI calls.
- Four streams: the SI's three (one kind of request each, so requests of different kinds on them are
  not ordered with each other) and korral's ``UpdateInOrder``, which carries all three kinds of one RM
  in order (one coroutine reads it and routes each request before reading the next) and that RM's
  responses of every kind in the core's order.
- Sessions (korral.server.session): a stream carries one RM, fixed by its first request; a request
  naming another rmID on it is ``PERMISSION_DENIED`` and routed nowhere. The RM's responses go back on
  its latest stream of each kind. The core's callbacks for that RM run on its dispatcher thread: they
  encode the response there and hand the bytes to the event loop with ``call_soon_threadsafe``, which
  never blocks, so the server never holds up a scheduling decision or the RM's dispatcher.
- Nothing is lost silently: responses not yet written are held per RM (bounded by count per kind and
  by bytes); past a bound, or when a stream that had responses written on it breaks, the RM is cut off
  and every later stream or call for it is ``FAILED_PRECONDITION`` (trailing metadata
  ``korral-resync: 1``) until it registers again with its existing allocations (the SI's recovery).
- Who may speak for an RM (korral.server.auth): TLS (mutual with a client CA) and per-RM tokens (a call
  carrying none is refused before its message is read: korral.server.call_auth); a registration over a
  live RM from another connection needs its credentials; with neither, the server warns at start-up.
- ``maximum_concurrent_rpcs`` bounds open calls, and message sizes are bounded both ways.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import grpc

from korral import log_text, si
from korral.callback import ResourceManagerCallback
from korral.errors import ConfigError, KorralError, SchedulerError
from korral.server.auth import Authenticator, ServerTls, load_tokens
from korral.server.call_auth import interceptors
from korral.server.convert import ConversionError, parse, serialize
from korral.server.decoder import ON_LOOP_BYTES, Decoder, decode
from korral.server.fds import default_max_connections
from korral.server.resets import ResetGuard
from korral.server.session import (
    ALLOCATION,
    APPLICATION,
    CLOSE,
    LEAVE_METADATA,
    MAX_BACKLOG,
    MAX_BACKLOG_BYTES,
    NODE,
    ORDERED,
    RESYNC,
    Abort,
    RmSession,
    Stream,
)
from korral.server.turns import RegistrationTurns, Turn
from korral.si import si_pb2

log = log_text.logger("korral.grpc")
# how long after a client's requests end a cancellation of its call may still arrive (see _read_requests)
GOODBYE_GRACE = 0.2

SERVICE = "si.v1.Scheduler"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
MAX_CONCURRENT_RPCS = 1000
START_TIMEOUT = 30.0
# gRPC's default limit on a message a client receives (4 MiB in grpc-go, grpc-java, grpc-js, Python's),
# less room for UpdateInOrder's framing: a response past it is sent as several, so a client left at
# its defaults reads them all
MAX_RESPONSE_BYTES = 4 * 1024 * 1024 - 16

# a peer that stops answering keepalive pings is gone: its streams end and its RM stops being live
KEEPALIVE_OPTIONS = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
]
# Streams open at once on one HTTP/2 connection. gRPC's core counts a stream until the server is done
# with it, so a client that opens and at once resets streams (HTTP/2 "rapid reset", CVE-2023-44487)
# cannot run past it: its connection's further streams wait or are refused, others' calls go on (and
# korral.server.resets closes that connection). An RM needs at most 4 streams and a unary call at a
# time: 100 serves 20 RMs sharing one connection.
MAX_STREAMS_PER_CONNECTION = 100
STREAM_OPTIONS = [("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION)]
# A connection that has not finished its HTTP/2 handshake (the client's preface and SETTINGS) this many
# seconds after it opened is closed: silent sockets hold neither a connection slot nor a descriptor long
HANDSHAKE_TIMEOUT = 10.0
__all__ = ["ALLOCATION", "APPLICATION", "MAX_BACKLOG", "MAX_BACKLOG_BYTES", "NODE", "GrpcServer"]


def channel_options(max_message_bytes: int = MAX_MESSAGE_BYTES) -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
    ]


class _RemoteCallback(ResourceManagerCallback):
    """The core's callbacks for one registration of a remote RM: encode on the dispatcher thread, hand
    over without blocking.

    ``predicates`` answers True and events and container scheduling states are not sent: the seed's
    service has no RPC for them (api.md: they are in-process only)."""

    flow_controlled = True  # the server waits for the core before reading the RM's next request

    def __init__(self, server: GrpcServer, session: RmSession, generation: int) -> None:
        self._server = server
        self._session = session
        self._generation = generation

    def _hand_over(self, kind: str, message: Any, fields: tuple[str, ...]) -> None:
        for part in encoded_parts(message, fields):
            self._server.hand_over(self._session, self._generation, kind, part)

    def update_allocation(self, response: si.AllocationResponse) -> None:
        self._hand_over(ALLOCATION, response, ("new", "released", "released_asks", "rejected"))

    def update_application(self, response: si.ApplicationResponse) -> None:
        self._hand_over(APPLICATION, response, ("rejected", "accepted", "updated"))

    def update_node(self, response: si.NodeResponse) -> None:
        self._hand_over(NODE, response, ("rejected", "accepted"))


def encoded_parts(response: Any, fields: tuple[str, ...]) -> list[bytes]:
    """The response's wire bytes: one message, or several when it would encode past the limit (its
    items, those of ``fields`` in turn, halved until each part fits; a single item goes alone)."""
    data = serialize(response)
    if len(data) <= MAX_RESPONSE_BYTES:
        return [data]
    items = [(name, item) for name in fields for item in getattr(response, name)]
    if len(items) < 2:
        return [data]
    halves = (items[: len(items) // 2], items[len(items) // 2 :])
    parts: list[bytes] = []
    for half in halves:
        grouped: dict[str, list[Any]] = {}
        for name, item in half:
            grouped.setdefault(name, []).append(item)
        parts += encoded_parts(type(response)(**grouped), fields)
    return parts


def _split_address(address: str) -> tuple[str, str]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address must be HOST:PORT, got {address!r}")
    return host, port


class GrpcServer:
    """si.v1.Scheduler for one core, listening only at the address it was given."""

    def __init__(
        self,
        core: Any,
        address: str,
        *,
        max_concurrent_rpcs: int = MAX_CONCURRENT_RPCS,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        max_backlog: int = MAX_BACKLOG,
        max_backlog_bytes: int = MAX_BACKLOG_BYTES,
        max_connections: int | None = None,
        default_config: str = "",
        tls: ServerTls | Mapping[str, Any] | None = None,
        tokens: str | Path | Mapping[str, str] | None = None,
    ) -> None:
        """default_config: the queues.yaml of an RM that registers with an empty config (korral serve
        --config); empty: the core's own default, as in-process. tls: the server's certificate (and a
        client CA for mutual TLS): a ServerTls, or {"cert": F, "key": F, "client_ca": F} as serve_rest
        takes it; tokens: rmID -> secret, or a YAML/JSON file of them. max_connections: connections
        open at once (default: a quarter of RLIMIT_NOFILE, at most 1,024); one more is closed as soon
        as it is accepted (the client sees UNAVAILABLE)."""
        if max_backlog < 1 or max_backlog_bytes < 1:
            raise ValueError("max_backlog and max_backlog_bytes must be at least 1")
        if max_connections is None:
            max_connections = default_max_connections()
        if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
            raise ValueError(f"max_connections must be a whole number of at least 1, got {max_connections!r}")
        tls = ServerTls.of(tls) if tls is not None else None
        self._core = core
        self._default_config = default_config
        self._host, _ = _split_address(address)
        self._requested = address
        self._max_concurrent_rpcs = max_concurrent_rpcs
        self._max_message_bytes = max_message_bytes
        self._max_backlog = max_backlog
        self._max_backlog_bytes = max_backlog_bytes
        self._max_connections = max_connections
        self._credentials = tls.credentials() if tls is not None else None
        self._auth = Authenticator(tls, load_tokens(tokens) if tokens is not None else None)
        self._sessions: dict[str, RmSession] = {}
        self._turns = RegistrationTurns()
        self._streams: set[Stream] = set()
        # calls each connection's client reset before sending a request: past a bound, it is closed
        self._resets = ResetGuard()
        self._decoder = Decoder()  # a stream's big requests, off the loop
        self._loop = asyncio.new_event_loop()
        self._server: grpc.aio.Server | None = None
        self._closed = False
        self._close_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run_loop, name="korral-grpc", daemon=True)
        self.address = ""

    # ---- lifecycle (any thread) -------------------------------------------------------------------

    def start(self) -> str:
        self._thread.start()
        try:
            port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(START_TIMEOUT)
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(START_TIMEOUT)
            raise
        self.address = f"{self._host}:{port}"
        log.info("gRPC SI listening on %s%s", self.address, " (TLS)" if self._credentials else "")
        if self._auth.open:
            log.warning(
                "gRPC SI on %s has neither TLS nor tokens: any process that can reach it may act as any "
                "RM (register over it, read its responses)",
                self.address,
            )
        return self.address

    def close(self, grace: float = 2.0) -> None:
        """Finish writing what each stream holds, end the streams, stop listening; idempotent."""
        with self._close_lock:
            if self._closed or not self._thread.is_alive():
                self._closed = True
                return
            self._closed = True
        try:
            asyncio.run_coroutine_threadsafe(self._stop(grace), self._loop).result(grace + START_TIMEOUT)
        except Exception:
            log.exception("gRPC server did not stop cleanly")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(START_TIMEOUT)

    def hand_over(self, session: RmSession, generation: int, kind: str, data: bytes) -> None:
        """From a core dispatcher thread: never blocks (the loop applies the backlog policy)."""
        try:
            self._loop.call_soon_threadsafe(session.deliver, generation, kind, data)
        except RuntimeError:
            log.debug("gRPC server closed: %s response for RmID=%s not sent", kind, session.rm_id)

    def backlog(self, rm_id: str) -> tuple[int, int]:
        """(responses, bytes) held or queued for the RM and not yet written (read on the loop)."""

        async def read() -> tuple[int, int]:
            session = self._sessions.get(rm_id)
            return session.backlog() if session is not None else (0, 0)

        return asyncio.run_coroutine_threadsafe(read(), self._loop).result(START_TIMEOUT)

    def must_resync(self, rm_id: str) -> str | None:
        """Why the RM must register again before it is served, or None (read on the loop)."""

        async def read() -> str | None:
            session = self._sessions.get(rm_id)
            return session.resync if session is not None else None

        return asyncio.run_coroutine_threadsafe(read(), self._loop).result(START_TIMEOUT)

    # ---- the loop thread --------------------------------------------------------------------------

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    async def _start(self) -> int:
        server = grpc.aio.server(
            maximum_concurrent_rpcs=self._max_concurrent_rpcs,
            interceptors=interceptors(self._auth.tokens),
            # no SO_REUSEPORT: a second server on a busy port is an error, not a silent share of its calls
            options=[
                *channel_options(self._max_message_bytes),
                ("grpc.so_reuseport", 0),
                *KEEPALIVE_OPTIONS,
                *STREAM_OPTIONS,
                # past it gRPC's core closes each new connection at once; with the handshake timeout,
                # silent clients cannot take every descriptor (the REST server's, a real RM's)
                ("grpc.max_allowed_incoming_connections", self._max_connections),
                ("grpc.server_handshake_timeout_ms", int(HANDSHAKE_TIMEOUT * 1000)),
            ],
        )
        # raw bytes in and out: decoding here turns a malformed message into INVALID_ARGUMENT with a reason
        handlers: dict[str, grpc.RpcMethodHandler] = {
            "RegisterResourceManager": grpc.unary_unary_rpc_method_handler(self._register),
            "UpdateConfiguration": grpc.unary_unary_rpc_method_handler(self._update_configuration),
        }
        for kind, method in (
            (ALLOCATION, "UpdateAllocation"),
            (APPLICATION, "UpdateApplication"),
            (NODE, "UpdateNode"),
            (ORDERED, "UpdateInOrder"),
        ):
            handlers[method] = grpc.stream_stream_rpc_method_handler(self._stream_handler(kind))
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        try:
            port: int  # grpc's server (untyped here): the port bound, 0 if none
            if self._credentials is not None:
                port = server.add_secure_port(self._requested, self._credentials)
            else:
                port = server.add_insecure_port(self._requested)
        except RuntimeError as error:
            raise OSError(f"cannot listen on {self._requested}{self._tls_hint()}: {error}") from None
        if port == 0:
            raise OSError(f"cannot listen on {self._requested}{self._tls_hint()}")
        await server.start()
        self._server = server
        self._resets.local_port = port
        return port

    def _tls_hint(self) -> str:
        return " (or the TLS certificate and key are not a pair)" if self._credentials is not None else ""

    async def _stop(self, grace: float) -> None:
        for stream in list(self._streams):
            stream.close()
        # let the handlers write what they hold before the server cancels what is left
        for _ in range(100):
            if not self._streams:
                break
            await asyncio.sleep(grace / 100)
        if self._server is not None:
            await self._server.stop(grace)
        self._decoder.close()

    # ---- who may speak for an RM ------------------------------------------------------------------

    async def _check_caller(self, rm_id: str, context: grpc.aio.ServicerContext) -> None:
        refusal = self._auth.refusal(rm_id, context)
        if refusal is not None:
            log.warning("refused a call from %s: %s", context.peer(), refusal)
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, refusal)

    def _foreign(
        self, session: RmSession, context: grpc.aio.ServicerContext, registering: bool
    ) -> Abort | None:
        """Why this call may not act for the session's RM from its connection, or None.

        The session is bound to the connection the RM registered on. From another one, a call needs the
        RM's credentials (its token; its client certificate under mutual TLS); without them it is refused
        while the RM is live, and otherwise told to register again from there (an RM coming back on a
        new connection registers again; a stream or update from it would join a session it did not
        start, which may have been registered over since)."""
        if context.peer() == session.peer or self._auth.carries_credentials(session.identity, context):
            return None
        if session.live:
            return Abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"RmID={session.rm_id} is live on another connection (its streams are open there): acting "
                "for it from this one needs that RM's credentials",
            )
        if registering:
            return None
        return Abort(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"RmID={session.rm_id} was registered on another connection: {RESYNC} from this one",
            resync=True,
        )

    # ---- unary calls ------------------------------------------------------------------------------

    async def _register(self, data: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            request = parse(si_pb2.RegisterResourceManagerRequest, data)
        except ConversionError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        await self._check_caller(request.rm_id, context)
        if not request.config and self._default_config:
            request = attrs.evolve(request, config=self._default_config)
        turn = await self._turns.wait(request.rm_id)
        try:
            return await self._register_in_turn(request, context, turn)
        finally:
            turn.release()

    async def _register_in_turn(
        self, request: si.RegisterResourceManagerRequest, context: grpc.aio.ServicerContext, turn: Turn
    ) -> bytes:
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            # its caller has given up: registering now would act for a client that reads no answer
            await context.abort(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                "the call's deadline passed before korral could start the registration: nothing was "
                "registered",
            )
        session = self._sessions.get(request.rm_id)
        was_registered = session is not None
        if session is not None:
            foreign = self._foreign(session, context, registering=True)
            if foreign is not None:
                log.warning("refused a registration from %s: %s", context.peer(), foreign.details)
                await context.abort(foreign.code, foreign.details)
        else:  # kept only once registered, so refused registrations leave nothing behind
            session = RmSession(request.rm_id, self._max_backlog, self._max_backlog_bytes)
        generation = session.begin_registration()
        callback = _RemoteCallback(self, session, generation)
        try:
            await self._call_core(context, self._core.register_resource_manager, request, callback, turn=turn)
        except BaseException as error:
            if session.generation == generation:
                session.registration_failed(str(error) or type(error).__name__, was_registered)
            raise
        if session.generation == generation:  # no later registration overtook this one
            session.registered(context.peer(), self._auth.identity(context))
            self._sessions[request.rm_id] = session
        response: bytes = si_pb2.RegisterResourceManagerResponse().SerializeToString()
        return response

    async def _update_configuration(self, data: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            request = parse(si_pb2.UpdateConfigurationRequest, data)
        except ConversionError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        await self._check_caller(request.rm_id, context)
        session = self._sessions.get(request.rm_id)
        if session is not None:
            await self._check_session(session, context)
        if any(key == LEAVE_METADATA for key, _ in context.invocation_metadata() or ()):
            # the RM leaves, with the credentials that may act for it (checked above)
            await self._call_core(context, self._core.unregister_resource_manager, request.rm_id)
            if self._sessions.get(request.rm_id) is session and session is not None:
                session.leave()
                del self._sessions[request.rm_id]
            log.info("RmID=%s left", request.rm_id)
        else:
            await self._call_core(context, self._core.update_configuration, request)
        response: bytes = si_pb2.UpdateConfigurationResponse().SerializeToString()
        return response

    async def _check_session(self, session: RmSession, context: grpc.aio.ServicerContext) -> None:
        if session.resync is not None:
            abort = Abort(grpc.StatusCode.FAILED_PRECONDITION, session.resync, resync=True)
            await context.abort(abort.code, abort.details, abort.trailing_metadata)
        foreign = self._foreign(session, context, registering=False)
        if foreign is not None:
            await context.abort(foreign.code, foreign.details, foreign.trailing_metadata)

    async def _call_core(
        self,
        context: grpc.aio.ServicerContext,
        method: Callable[..., Any],
        *args: Any,
        turn: Turn | None = None,
    ) -> Any:
        # the core's blocking asks run on the loop's executor, so other calls and streams keep flowing
        core_call = asyncio.get_running_loop().run_in_executor(None, method, *args)
        try:
            return await (turn.hold_until(core_call) if turn is not None else core_call)
        except ConfigError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        except SchedulerError as error:
            await context.abort(grpc.StatusCode[error.grpc_status], str(error))
        except KorralError as error:
            await context.abort(grpc.StatusCode.INTERNAL, str(error))

    # ---- streams ----------------------------------------------------------------------------------

    def _stream_handler(self, kind: str) -> Callable[..., Any]:
        async def handle(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> None:
            await self._serve_stream(kind, requests, context)

        return handle

    async def _serve_stream(
        self, kind: str, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> None:
        stream = Stream(kind, context.peer())
        stream.task = asyncio.current_task()
        self._streams.add(stream)
        reader = asyncio.ensure_future(self._read_requests(stream, requests, context))
        try:
            while True:
                item = await stream.queue.get()
                if item is CLOSE:
                    return
                if isinstance(item, Abort):
                    await context.abort(item.code, item.details, item.trailing_metadata)
                response_kind, data = item
                stream.sent_any = True
                stream.writing = True
                try:
                    await context.write(stream.wire(response_kind, data))
                except asyncio.CancelledError:
                    interrupt = stream.interrupt
                    if interrupt is None:
                        raise
                    # korral cut the RM off while the client was not reading: end the call now
                    current = asyncio.current_task()
                    if current is not None:
                        current.uncancel()
                    await context.abort(interrupt.code, interrupt.details, interrupt.trailing_metadata)
                stream.writing = False
                session = stream.session
                if session is not None and session.generation == stream.generation:
                    session.written(response_kind, len(data))
        except asyncio.CancelledError:
            # the client reset the call before it sent a request: what HTTP/2 rapid reset does
            if stream.first_rm_id is None and not self._closed:
                self._resets.reset(stream.peer)
            raise
        finally:
            reader.cancel()
            self._streams.discard(stream)
            if stream.session is not None:
                stream.session.ended(stream)

    async def _read_requests(
        self, stream: Stream, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> None:
        try:
            async for data in requests:
                big = len(data) >= ON_LOOP_BYTES
                try:
                    decoded = (
                        await self._decoder.run(decode, stream.kind, data)
                        if big
                        else decode(stream.kind, data)
                    )
                    request, method_name, request_name = decoded
                except ConversionError as error:
                    stream.close(Abort(grpc.StatusCode.INVALID_ARGUMENT, str(error)))
                    return
                refusal = await self._admit(stream, request.rm_id, request_name, context)
                if refusal is not None:
                    log.warning("refused a %s stream from %s: %s", stream.kind, stream.peer, refusal.details)
                    stream.close(refusal)
                    return
                try:
                    route = getattr(self._core, method_name)  # a big one's item checks off the loop too
                    await self._decoder.run(route, request) if big else route(request)
                except SchedulerError as error:
                    stream.close(Abort(grpc.StatusCode[error.grpc_status], str(error)))
                    return
                # past korral.actors.in_flight's bound, the RM's next request waits in gRPC's flow control
                caught_up = self._core._in_flight.when_below(request.rm_id)
                if caught_up is not None:
                    await asyncio.wrap_future(caught_up)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the call broke underneath us: end this stream only
            # the stream's kind, not the request's name: the break may come before any request
            log.debug("%s stream from %s ended: %s", stream.kind, stream.peer, error)
            stream.queue.put_nowait(CLOSE)  # a break, not korral's close: what it wrote may be lost
            return
        # The requests end both when the client half-closes (its goodbye) and when it cancels the call
        # or its connection breaks; a cancellation reaches this handler a moment after, as the call's
        # cancellation (CancelledError here). Past GOODBYE_GRACE without one it was a goodbye.
        await asyncio.sleep(GOODBYE_GRACE)
        # the client half-closed: its goodbye. What the stream holds is written, then the call ends
        # with OK, so the client reads every response to the end; later ones wait for its next stream
        stream.client_closed = True
        stream.close()

    async def _admit(
        self, stream: Stream, rm_id: str, request_name: str, context: grpc.aio.ServicerContext
    ) -> Abort | None:
        """May this request go on: the stream's own RM, from a caller that may speak for it?"""
        if stream.first_rm_id is None:
            stream.first_rm_id = rm_id
        elif rm_id != stream.first_rm_id:  # the stream's RM is fixed: the first request chose it
            return Abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"this stream carries RmID={log_text.escaped(stream.first_rm_id)}: a {request_name} for "
                f"RmID={log_text.escaped(rm_id)} is "
                "refused (open a stream of its own for each RM)",
            )
        session = stream.session
        if session is not None:
            if session.resync is not None or stream.generation != session.generation:
                reason = session.resync or f"RmID={rm_id} registered again since this stream opened"
                return Abort(grpc.StatusCode.FAILED_PRECONDITION, reason, resync=True)
            session.bind(stream)
            return None
        refusal = self._auth.refusal(rm_id, context)
        if refusal is not None:
            return Abort(grpc.StatusCode.UNAUTHENTICATED, refusal)
        session = self._sessions.get(rm_id)
        if session is None:
            # not registered over gRPC: the core answers (not registered, or an RM registered in-process)
            return None
        if session.resync is not None:
            return Abort(grpc.StatusCode.FAILED_PRECONDITION, session.resync, resync=True)
        foreign = self._foreign(session, context, registering=False)
        if foreign is not None:
            return foreign
        session.attach(stream)  # before routing: the responses must find this stream
        return None
