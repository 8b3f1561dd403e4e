"""``korral.connect(address) -> korral.RemoteCore``: the SI calls of ``korral.Core`` over gRPC.

Each RM registered through a RemoteCore gets its own stream (``UpdateInOrder``, opened on its first
request), so the responses on it are that RM's: its node, application and allocation requests go out
on it in the order they are made and the core takes them in that order, as in-process; the core's
responses of every kind come back on it in the core's order, and the RM's callbacks run on one client
thread per RM in that order. ``predicates`` and ``update_container_scheduling_state`` are in-process
only: the seed's service has no call for them.

Resync: when a stream of an RM breaks (its connection dropped) or korral cuts the RM off (a backlog
bound, a registration from elsewhere), responses may have been lost on the way. The RM's callbacks
stop there: after the responses received before the break, its callback's ``resync_required(reason)``
is called (when it has one), nothing more of that registration is delivered, and every SI call for
the RM raises ``ResyncRequired`` until it registers again and re-declares what it runs (its
applications, then its nodes with their existing allocations: the SI's recovery).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import grpc

from korral import log_text, si
from korral.callback import ResourceManagerCallback
from korral.errors import ConfigError, InvalidRequestError, SchedulerError
from korral.server.auth import channel_credentials, token_metadata
from korral.server.convert import ConversionError, parse_ordered, to_pb
from korral.server.grpc_server import ALLOCATION, APPLICATION, NODE, SERVICE, channel_options
from korral.server.session import LEAVE_METADATA, RESYNC_METADATA, frame
from korral.si import si_pb2
from korral.si.validate import (
    Checked,
    check_allocation_request,
    check_application_request,
    check_node_request,
)

log = log_text.logger("korral.remote")

CONNECT_TIMEOUT = 10.0
# How often a channel still not ready is asked again to connect (see _wait_until_ready).
CONNECT_NUDGE_SECONDS = 0.5


def _wait_until_ready(channel: grpc.Channel, timeout: float) -> bool:
    """Whether the channel came up within timeout seconds.

    grpc's readiness watch asks the channel to connect once. A connection that drops the moment it
    comes up (a flaky network, a proxy restarting) leaves the channel IDLE, and nothing asks again:
    one ``channel_ready_future`` would wait out the whole timeout. Each fresh future asks anew."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        future = grpc.channel_ready_future(channel)
        try:
            future.result(timeout=min(CONNECT_NUDGE_SECONDS, remaining))
            return True
        except grpc.FutureTimeoutError:
            future.cancel()


# An AllocationRequest of asks alone goes on the stream as requests of at most this many asks.
ASKS_PER_MESSAGE = 500
# the default deadline of the unary calls (registration, configuration updates): RemoteCore's call_timeout
CALL_TIMEOUT = 60.0
_STOP = object()
_RESYNC = object()
# a stream that ends with one of these says nothing about lost responses: the call itself was refused
_REFUSALS = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)
# the connection is the RM's session (the server binds it there): keep it while the RemoteCore is open,
# idle or not, and notice a dead server by its pings
_KEEPALIVE = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.client_idle_timeout_ms", 2**31 - 1),
]


class ResyncRequired(SchedulerError):
    """Responses of this RM may have been lost (a broken stream, a backlog bound): register it again
    and re-declare its applications and nodes with their existing allocations."""


def _resync_reason(error: grpc.RpcError) -> str | None:
    """Why this failed call means the RM must resync, or None."""
    code, details = error.code(), error.details() or ""
    metadata = error.trailing_metadata() or ()
    if any(key == RESYNC_METADATA for key, _ in metadata):
        return details
    if code in _REFUSALS:
        return None
    return f"{code.name}: {details}; responses may have been lost: register again to resync"


# the kind of an OrderedResponse's field -> the callback method it goes to
_CALLBACKS: dict[str, str] = {
    ALLOCATION: "update_allocation",
    APPLICATION: "update_application",
    NODE: "update_node",
}


def _error(error: grpc.RpcError, config: bool = True) -> Exception:
    """The korral error for a failed call: INVALID_ARGUMENT from a config-taking call is a ConfigError."""
    code, details = error.code(), error.details() or ""
    if any(key == RESYNC_METADATA for key, _ in error.trailing_metadata() or ()):
        return ResyncRequired(details)
    if config and code == grpc.StatusCode.INVALID_ARGUMENT:
        return ConfigError(details)
    return SchedulerError(
        f"{code.name}: {details}" if code != grpc.StatusCode.FAILED_PRECONDITION else details
    )


class _RemoteStream:
    """The RM's ordered call: requests written from a queue in order, responses read on a thread."""

    def __init__(self, channel: grpc.Channel, rm: _RemoteRM) -> None:
        self._rm = rm
        self._rm_id = rm_id = rm.rm_id
        self._outgoing: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._deliveries = rm.deliveries
        self.closing = False
        call = channel.stream_stream(f"/{SERVICE}/UpdateInOrder")
        self._call = call(self._requests(), metadata=rm.metadata)
        self._reader = threading.Thread(target=self._read, name=f"korral-remote-{rm_id}", daemon=True)
        self.failed: grpc.RpcError | None = None
        self._reader.start()

    def _requests(self) -> Iterator[bytes]:
        while True:
            item = self._outgoing.get()
            if item is _STOP:
                return
            yield item

    def send(self, kind: str, data: bytes) -> None:
        self._outgoing.put(frame(kind, data))

    def _read(self) -> None:
        try:
            for data in self._call:
                try:
                    kind, response = parse_ordered(si_pb2.OrderedResponse, data)
                except ConversionError:
                    log.exception("RmID=%s: undecodable response from korral", self._rm_id)
                    continue
                self._deliveries.put((_CALLBACKS[kind], response))
        except grpc.RpcError as error:
            if self.closing:
                return
            self.failed = error
            reason = _resync_reason(error)
            if reason is not None:
                self._rm.must_resync(reason)
            else:
                log.error("RmID=%s: stream ended: %s", self._rm_id, error.details())

    @property
    def alive(self) -> bool:
        return self.failed is None and self._reader.is_alive()

    def close(self) -> None:
        """Say goodbye: end the requests (a half-close), read what korral still writes until it ends
        the call, and only then, or past CONNECT_TIMEOUT, cancel it (korral would log a break)."""
        self.closing = True
        self._outgoing.put(_STOP)
        if threading.current_thread() is not self._reader:
            self._reader.join(CONNECT_TIMEOUT)
        self._call.cancel()


class _RemoteRM:
    """One registered RM: its stream and the thread that runs its callbacks in order."""

    def __init__(
        self,
        channel: grpc.Channel,
        rm_id: str,
        callback: ResourceManagerCallback,
        metadata: tuple[tuple[str, str], ...],
    ) -> None:
        self._channel = channel
        self.rm_id = rm_id
        self.metadata = metadata
        self._callback = callback
        self._stream: _RemoteStream | None = None
        self._lock = threading.Lock()
        self.deliveries: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.resync: str | None = None  # why the RM must register again
        self._closing = False
        self._dispatcher = threading.Thread(
            target=self._dispatch, name=f"korral-remote-rm-{rm_id}", daemon=True
        )
        self._dispatcher.start()

    def must_resync(self, reason: str) -> None:
        """Responses may have been lost: deliver what came before, then tell the RM, then nothing."""
        with self._lock:
            if self.resync is not None or self._closing:
                return
            self.resync = reason
            stream = self._stream
        log.warning("%s", reason)
        if stream is not None:
            stream.closing = True
        self.deliveries.put((_RESYNC, reason))

    def check(self) -> None:
        if self.resync is not None:
            raise ResyncRequired(self.resync)

    def send(self, kind: str, data: bytes) -> None:
        with self._lock:
            self.check()
            stream = self._stream
            if stream is not None and not stream.alive:
                # a stream korral ended with an error is reported once, on the next call; one that
                # ended cleanly (korral stopping) is simply opened again
                self._stream = None
                stream.close()
                if stream.failed is not None:
                    raise _error(stream.failed, config=False)
                stream = None
            if stream is None:
                stream = self._stream = _RemoteStream(self._channel, self)
            stream.send(kind, data)

    def reject_locally(self, checked: Checked) -> None:
        if checked.node_rejections:
            self.deliveries.put(("update_node", si.NodeResponse(rejected=checked.node_rejections)))
        if checked.application_rejections:
            response = si.ApplicationResponse(rejected=checked.application_rejections)
            self.deliveries.put(("update_application", response))
        if checked.ask_rejections:
            self.deliveries.put(("update_allocation", si.AllocationResponse(rejected=checked.ask_rejections)))

    def _dispatch(self) -> None:
        resynced = False
        while True:
            item = self.deliveries.get()
            if item is _STOP:
                return
            method, response = item
            if resynced:
                continue  # after the RM was told to resync, nothing more of this registration
            if method is _RESYNC:
                resynced = True
                hook = getattr(self._callback, "resync_required", None)
                method, response = "resync_required", response
                if hook is None:
                    continue
            try:
                getattr(self._callback, method)(response)
            except Exception:
                # the RM's own failure: logged and contained, as in-process
                log.exception("RmID=%s: callback %s raised", self.rm_id, method)

    def close(self) -> None:
        with self._lock:
            self._closing = True
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()
        # callbacks already received are still delivered, then the thread ends
        self.deliveries.put(_STOP)
        if threading.current_thread() is not self._dispatcher:
            self._dispatcher.join(CALL_TIMEOUT)


class RemoteCore:
    """A korral core in another process, reached over gRPC; the SI calls of ``korral.Core``."""

    def __init__(
        self,
        address: str,
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
        call_timeout: float = CALL_TIMEOUT,
        root_cert: str | Path | None = None,
        client_cert: str | Path | None = None,
        client_key: str | Path | None = None,
        server_name: str | None = None,
        token: str | Mapping[str, str] | None = None,
        tls: bool | None = None,
    ) -> None:
        """TLS when root_cert, client_cert or tls=True is given (root_cert: the CA of the server's
        certificate, None: the system's roots; client_cert/client_key: mutual TLS; server_name: the name
        to check the server's certificate against, default the address's host). token: the secret sent
        with every call (a str for all RMs, or rmID -> secret). call_timeout: seconds a registration or a
        configuration update may take before it fails with DEADLINE_EXCEEDED (a config of tens of
        thousands of queues on a busy core may need more than the default)."""
        if not call_timeout > 0:
            raise ValueError(f"call_timeout must be a positive number of seconds, got {call_timeout!r}")
        self.address = address
        self._call_timeout = call_timeout
        # a connection of its own (grpc shares one between equal channels by default): korral binds
        # an RM's session to the connection it registered on
        options: list[tuple[str, Any]] = [
            *channel_options(),
            *_KEEPALIVE,
            ("grpc.use_local_subchannel_pool", 1),
        ]
        self._tokens = token
        if tls is None:
            tls = root_cert is not None or client_cert is not None or client_key is not None
        if tls:
            if server_name is not None:
                options.append(("grpc.ssl_target_name_override", server_name))
            credentials = channel_credentials(root_cert, client_cert, client_key)
            self._channel = grpc.secure_channel(address, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        if not _wait_until_ready(self._channel, connect_timeout):
            self._channel.close()
            raise SchedulerError(f"cannot reach korral at {address} within {connect_timeout}s")
        self._register = self._channel.unary_unary(f"/{SERVICE}/RegisterResourceManager")
        self._update_configuration = self._channel.unary_unary(f"/{SERVICE}/UpdateConfiguration")
        self._rms: dict[str, _RemoteRM] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _metadata(self, rm_id: str) -> tuple[tuple[str, str], ...]:
        token = self._tokens.get(rm_id) if isinstance(self._tokens, Mapping) else self._tokens
        return token_metadata(token) if token is not None else ()

    # ---- the SI ------------------------------------------------------------------------------------

    def register_resource_manager(
        self, request: si.RegisterResourceManagerRequest, callback: ResourceManagerCallback | None = None
    ) -> si.RegisterResourceManagerResponse:
        """Registering an RM again (a resync) first ends its streams: what they still carry is stale."""
        self._check_open()
        if request.rm_id == "":
            raise InvalidRequestError("RegisterResourceManagerRequest needs an rmID: it is empty")
        with self._lock:
            previous = self._rms.pop(request.rm_id, None) if type(request.rm_id) is str else None
        if previous is not None:
            previous.close()
        metadata = self._metadata(request.rm_id) if type(request.rm_id) is str else ()
        try:
            self._register(to_pb(request).SerializeToString(), timeout=self._call_timeout, metadata=metadata)
        except grpc.RpcError as error:
            raise _error(error) from None
        rm = _RemoteRM(self._channel, request.rm_id, callback or ResourceManagerCallback(), metadata)
        with self._lock:
            previous, self._rms[request.rm_id] = self._rms.get(request.rm_id), rm
        if previous is not None:  # registered again meanwhile from another thread
            previous.close()
        return si.RegisterResourceManagerResponse()

    def update_allocation(self, request: si.AllocationRequest) -> None:
        self._send(ALLOCATION, check_allocation_request(request), "AllocationRequest")

    def update_application(self, request: si.ApplicationRequest) -> None:
        self._send(APPLICATION, check_application_request(request), "ApplicationRequest")

    def update_node(self, request: si.NodeRequest) -> None:
        self._send(NODE, check_node_request(request), "NodeRequest")

    def update_configuration(self, request: si.UpdateConfigurationRequest) -> None:
        self._check_open()
        rm_id = request.rm_id
        with self._lock:
            rm = self._rms.get(rm_id) if type(rm_id) is str else None
        if rm is not None:
            rm.check()
        metadata = self._metadata(rm_id) if type(rm_id) is str else ()
        try:
            self._update_configuration(
                to_pb(request).SerializeToString(), timeout=self._call_timeout, metadata=metadata
            )
        except grpc.RpcError as error:
            failure = _error(error)
            if rm is not None and isinstance(failure, ResyncRequired):
                rm.must_resync(str(failure))
            raise failure from None

    def unregister_resource_manager(self, rm_id: str) -> None:
        """The RM leaves korral (as ``Core.unregister_resource_manager``), asked with its credentials:
        an UpdateConfiguration carrying ``korral-leave`` metadata. Its stream then ends."""
        self._check_open()
        if type(rm_id) is not str:
            raise TypeError(f"rm_id must be a string, got {type(rm_id).__name__}")
        metadata = (*self._metadata(rm_id), (LEAVE_METADATA, "1"))
        request = si_pb2.UpdateConfigurationRequest(rmID=rm_id)
        try:
            self._update_configuration(
                request.SerializeToString(), timeout=self._call_timeout, metadata=metadata
            )
        except grpc.RpcError as error:
            raise _error(error, config=False) from None
        with self._lock:
            rm = self._rms.pop(rm_id, None)
        if rm is not None:
            rm.close()

    def _send(self, kind: str, checked: Checked, name: str) -> None:
        """As in-process: items of a bad shape are rejected through the RM's callback, the rest sent."""
        self._check_open()
        rm_id = checked.request.rm_id
        if rm_id == "":
            raise InvalidRequestError(f"{name} needs an rmID: it is empty")
        with self._lock:
            rm = self._rms.get(rm_id) if type(rm_id) is str else None
        if rm is None:
            raise SchedulerError(f'received {name}, but RmID="{rm_id}" not registered')
        rm.check()
        rm.reject_locally(checked)
        if checked.empty:
            return
        request = checked.request
        if kind == ALLOCATION and request.releases is None and len(request.asks) > ASKS_PER_MESSAGE:
            # Asks alone, many: sent as consecutive requests of ASKS_PER_MESSAGE, which the core takes
            # in order as it would the one. The server decodes and routes the first while this
            # encodes the next, and the core starts on it, rather than all waiting for the whole.
            asks = request.asks
            for start in range(0, len(asks), ASKS_PER_MESSAGE):
                part = si.AllocationRequest(rm_id=rm_id, asks=asks[start : start + ASKS_PER_MESSAGE])
                rm.send(kind, to_pb(part).SerializeToString())
            return
        rm.send(kind, to_pb(request).SerializeToString())

    def _check_open(self) -> None:
        if self._closed:
            raise SchedulerError("the remote core connection is closed")

    # ---- lifecycle ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the streams (the RMs stay registered in the core) and the channel; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            rms, self._rms = list(self._rms.values()), {}
        for rm in rms:
            rm.close()
        self._channel.close()

    def __enter__(self) -> RemoteCore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(
    address: str,
    *,
    connect_timeout: float = CONNECT_TIMEOUT,
    call_timeout: float = CALL_TIMEOUT,
    root_cert: str | Path | None = None,
    client_cert: str | Path | None = None,
    client_key: str | Path | None = None,
    server_name: str | None = None,
    token: str | Mapping[str, str] | None = None,
    tls: bool | None = None,
) -> RemoteCore:
    """A RemoteCore for the korral serving gRPC at address ("HOST:PORT"); the timeouts and the security
    options are RemoteCore's."""
    return RemoteCore(
        address,
        connect_timeout=connect_timeout,
        call_timeout=call_timeout,
        root_cert=root_cert,
        client_cert=client_cert,
        client_key=client_key,
        server_name=server_name,
        token=token,
        tls=tls,
    )
