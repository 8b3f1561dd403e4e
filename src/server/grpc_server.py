"""The SI over gRPC: si.v1.Scheduler served by grpc.aio on its own thread and event loop, beside the core.

- Requests are decoded here (raw bytes in, so a malformed message is this call's ``INVALID_ARGUMENT``
  with the reason, never an opaque failure) and routed into the core like in-process SI calls.
- Responses for an RM go back on the latest stream of each kind that its requests (with its rmID)
  arrived on. The core's callbacks for that RM run on its dispatcher thread: they encode the response
  there and hand the bytes to the event loop with ``call_soon_threadsafe``, which never blocks, so the
  server never holds up a scheduling decision or the RM's dispatcher.
- Backlog policy: responses not yet written (no stream of that kind yet, or a client that does not
  read) are held per RM and kind up to ``max_backlog``. Past that the RM's streams are cut with
  ``RESOURCE_EXHAUSTED`` and its held responses dropped; its further requests get
  ``FAILED_PRECONDITION`` until it registers again, which resyncs it as YuniKorn's re-registration does.
  Nothing is dropped silently.
- An RM whose streams close stays registered with its allocations; its responses wait for its next
  stream of that kind. ``maximum_concurrent_rpcs`` bounds open calls (more get ``RESOURCE_EXHAUSTED``),
  and message sizes are bounded both ways.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import grpc
from google.protobuf.message import Message

from korral import si
from korral.callback import ResourceManagerCallback
from korral.errors import ConfigError, KorralError, SchedulerError
from korral.server.convert import ConversionError, parse, to_pb
from korral.si import si_pb2

log = logging.getLogger("korral.grpc")

SERVICE = "si.v1.Scheduler"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
MAX_CONCURRENT_RPCS = 1000
MAX_BACKLOG = 10_000  # responses held per RM and stream kind
START_TIMEOUT = 30.0
# A response with more items than this is sent as several, so no single message nears the size limit.
MAX_ITEMS_PER_RESPONSE = 20_000

ALLOCATION, APPLICATION, NODE = "allocation", "application", "node"
# kind -> (request proto, the core's SI method, request name for errors)
_STREAMS: dict[str, tuple[type[Message], str, str]] = {
    ALLOCATION: (si_pb2.AllocationRequest, "update_allocation", "AllocationRequest"),
    APPLICATION: (si_pb2.ApplicationRequest, "update_application", "ApplicationRequest"),
    NODE: (si_pb2.NodeRequest, "update_node", "NodeRequest"),
}
_CLOSE = object()


def channel_options(max_message_bytes: int = MAX_MESSAGE_BYTES) -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
    ]


class _Abort:
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self.code = code
        self.details = details


class _Stream:
    """One open bidirectional call: what to write on it, in order (loop thread only)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.rm_ids: set[str] = set()

    def close(self, abort: _Abort | None = None) -> None:
        self.queue.put_nowait(abort if abort is not None else _CLOSE)


class _Outbox:
    """Where one RM's responses go (loop thread only): its latest stream of each kind, or held."""

    def __init__(self, rm_id: str, max_backlog: int) -> None:
        self.rm_id = rm_id
        self.max_backlog = max_backlog
        self.streams: dict[str, _Stream | None] = {ALLOCATION: None, APPLICATION: None, NODE: None}
        self.held: dict[str, collections.deque[bytes]] = {kind: collections.deque() for kind in self.streams}
        self.unwritten: dict[str, int] = dict.fromkeys(self.streams, 0)
        self.lost: str | None = None  # why its responses were dropped; cleared by registering again

    def bind(self, stream: _Stream) -> None:
        kind = stream.kind
        if self.streams[kind] is stream:
            return
        self.streams[kind] = stream
        stream.rm_ids.add(self.rm_id)
        held = self.held[kind]
        while held:
            stream.queue.put_nowait((self.rm_id, held.popleft()))

    def unbind(self, stream: _Stream) -> None:
        if self.streams[stream.kind] is stream:
            self.streams[stream.kind] = None

    def deliver(self, kind: str, data: bytes) -> None:
        if self.lost is not None:
            return
        self.unwritten[kind] += 1
        if self.unwritten[kind] > self.max_backlog:
            self.overflow(kind)
            return
        stream = self.streams[kind]
        if stream is None:
            self.held[kind].append(data)
        else:
            stream.queue.put_nowait((self.rm_id, data))

    def written(self, kind: str) -> None:
        self.unwritten[kind] = max(0, self.unwritten[kind] - 1)

    def overflow(self, kind: str) -> None:
        self.lost = (
            f"RmID={self.rm_id}: more than {self.max_backlog} {kind} responses not read by the RM; they "
            "were dropped: register again to resync"
        )
        log.error("%s", self.lost)
        for stream_kind, stream in self.streams.items():
            if stream is not None:
                stream.close(_Abort(grpc.StatusCode.RESOURCE_EXHAUSTED, self.lost))
            self.streams[stream_kind] = None
            self.held[stream_kind].clear()
            self.unwritten[stream_kind] = 0

    def reset(self) -> None:
        """A new registration: start from the core's fresh state, nothing held from before."""
        self.lost = None
        for kind in self.held:
            self.held[kind].clear()
            self.unwritten[kind] = 0


class _RemoteCallback(ResourceManagerCallback):
    """The core's callbacks for a remote RM: encode on the dispatcher thread, hand over without blocking.

    ``predicates`` answers True and events and container scheduling states are not sent: the seed's
    service has no RPC for them (api.md: they are in-process only)."""

    def __init__(self, server: GrpcServer, outbox: _Outbox) -> None:
        self._server = server
        self._outbox = outbox

    def _hand_over(self, kind: str, message: Message) -> None:
        self._server.hand_over(self._outbox, kind, message.SerializeToString())

    def update_allocation(self, response: si.AllocationResponse) -> None:
        for part in _split(response, ("new", "released", "released_asks", "rejected")):
            self._hand_over(ALLOCATION, to_pb(part))

    def update_application(self, response: si.ApplicationResponse) -> None:
        for part in _split(response, ("rejected", "accepted", "updated")):
            self._hand_over(APPLICATION, to_pb(part))

    def update_node(self, response: si.NodeResponse) -> None:
        for part in _split(response, ("rejected", "accepted")):
            self._hand_over(NODE, to_pb(part))


def _split(response: Any, fields: tuple[str, ...]) -> list[Any]:
    """The response as one message, or several when a repeated field is very long (same order)."""
    if all(len(getattr(response, name)) <= MAX_ITEMS_PER_RESPONSE for name in fields):
        return [response]
    parts = []
    for name in fields:
        items = getattr(response, name)
        for start in range(0, len(items), MAX_ITEMS_PER_RESPONSE):
            parts.append(type(response)(**{name: items[start : start + MAX_ITEMS_PER_RESPONSE]}))
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
        default_config: str = "",
    ) -> None:
        """default_config: the queues.yaml of an RM that registers with an empty config (korral serve
        --config); empty: the core's own default, as in-process."""
        self._core = core
        self._default_config = default_config
        self._host, _ = _split_address(address)
        self._requested = address
        self._max_concurrent_rpcs = max_concurrent_rpcs
        self._max_message_bytes = max_message_bytes
        self._max_backlog = max_backlog
        self._outboxes: dict[str, _Outbox] = {}
        self._streams: set[_Stream] = set()
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
        log.info("gRPC SI listening on %s", self.address)
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

    def hand_over(self, outbox: _Outbox, kind: str, data: bytes) -> None:
        """From a core dispatcher thread: never blocks (the loop applies the backlog policy)."""
        try:
            self._loop.call_soon_threadsafe(outbox.deliver, kind, data)
        except RuntimeError:
            log.debug("gRPC server closed: %s response for RmID=%s not sent", kind, outbox.rm_id)

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
            # no SO_REUSEPORT: a second server on a busy port is an error, not a silent share of its calls
            options=[*channel_options(self._max_message_bytes), ("grpc.so_reuseport", 0)],
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
        ):
            handlers[method] = grpc.stream_stream_rpc_method_handler(self._stream_handler(kind))
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        try:
            port = server.add_insecure_port(self._requested)
        except RuntimeError as error:
            raise OSError(f"cannot listen on {self._requested}: {error}") from None
        if port == 0:
            raise OSError(f"cannot listen on {self._requested}")
        await server.start()
        self._server = server
        return port

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

    async def _register(self, data: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            request = parse(si_pb2.RegisterResourceManagerRequest, data)
        except ConversionError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        if not request.config and self._default_config:
            request = attrs.evolve(request, config=self._default_config)
        # kept only once registered, so refused registrations leave nothing behind
        outbox = self._outboxes.get(request.rm_id) or _Outbox(request.rm_id, self._max_backlog)
        callback = _RemoteCallback(self, outbox)
        await self._call_core(context, self._core.register_resource_manager, request, callback)
        self._outboxes[request.rm_id] = outbox
        outbox.reset()
        return si_pb2.RegisterResourceManagerResponse().SerializeToString()

    async def _update_configuration(self, data: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            request = parse(si_pb2.UpdateConfigurationRequest, data)
        except ConversionError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        await self._call_core(context, self._core.update_configuration, request)
        return si_pb2.UpdateConfigurationResponse().SerializeToString()

    async def _call_core(
        self, context: grpc.aio.ServicerContext, method: Callable[..., Any], *args: Any
    ) -> Any:
        # the core's blocking asks run on the loop's executor, so other calls and streams keep flowing
        try:
            return await asyncio.get_running_loop().run_in_executor(None, method, *args)
        except ConfigError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        except SchedulerError as error:
            await context.abort(grpc.StatusCode[error.grpc_status], str(error))
        except KorralError as error:
            await context.abort(grpc.StatusCode.INTERNAL, str(error))

    def _stream_handler(self, kind: str) -> Callable[..., Any]:
        async def handle(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> None:
            await self._serve_stream(kind, requests, context)

        return handle

    async def _serve_stream(
        self, kind: str, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> None:
        stream = _Stream(kind)
        self._streams.add(stream)
        reader = asyncio.ensure_future(self._read_requests(stream, requests))
        try:
            while True:
                item = await stream.queue.get()
                if item is _CLOSE:
                    return
                if isinstance(item, _Abort):
                    await context.abort(item.code, item.details)
                rm_id, data = item
                outbox = self._outboxes.get(rm_id)
                if outbox is not None:
                    outbox.written(kind)
                await context.write(data)
        finally:
            reader.cancel()
            self._streams.discard(stream)
            # what this stream could not write waits, in order, for the RM's next stream of this kind
            unsent: dict[str, list[bytes]] = collections.defaultdict(list)
            while not stream.queue.empty():
                item = stream.queue.get_nowait()
                if isinstance(item, tuple):
                    unsent[item[0]].append(item[1])
            for rm_id in stream.rm_ids:
                outbox = self._outboxes.get(rm_id)
                if outbox is not None and outbox.streams[kind] is stream:
                    outbox.unbind(stream)
                    outbox.held[kind].extendleft(reversed(unsent.get(rm_id, [])))

    async def _read_requests(self, stream: _Stream, requests: AsyncIterator[bytes]) -> None:
        proto_type, method_name, request_name = _STREAMS[stream.kind]
        try:
            async for data in requests:
                try:
                    request = parse(proto_type, data)
                except ConversionError as error:
                    stream.close(_Abort(grpc.StatusCode.INVALID_ARGUMENT, str(error)))
                    return
                outbox = self._outboxes.get(request.rm_id)
                if outbox is not None and outbox.lost is not None:
                    stream.close(_Abort(grpc.StatusCode.FAILED_PRECONDITION, outbox.lost))
                    return
                if outbox is not None:
                    outbox.bind(stream)  # before routing: the responses must find this stream
                try:
                    getattr(self._core, method_name)(request)
                except SchedulerError as error:
                    stream.close(_Abort(grpc.StatusCode[error.grpc_status], str(error)))
                    return
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the call broke underneath us: end this stream only
            log.debug("%s stream ended: %s", request_name, error)
            stream.close()
        # a half-close by the client leaves the stream open for the responses still to come
