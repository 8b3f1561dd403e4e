"""``korral.connect(address) -> korral.RemoteCore``: the SI calls of ``korral.Core`` over gRPC.

Each RM registered through a RemoteCore gets its own three streams (opened on its first request of
that kind), so the responses on a stream are that RM's. Its callbacks run on one client thread per RM,
in the order the streams delivered them (per stream: the core's order). ``predicates`` and
``update_container_scheduling_state`` are in-process only: the seed's service has no call for them.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from typing import Any

import grpc
from google.protobuf.message import Message

from korral import si
from korral.callback import ResourceManagerCallback
from korral.errors import ConfigError, InvalidRequestError, SchedulerError
from korral.server.convert import ConversionError, parse, to_pb
from korral.server.grpc_server import ALLOCATION, APPLICATION, NODE, SERVICE, channel_options
from korral.si import si_pb2
from korral.si.validate import (
    Checked,
    check_allocation_request,
    check_application_request,
    check_node_request,
)

log = logging.getLogger("korral.remote")

CONNECT_TIMEOUT = 10.0
CALL_TIMEOUT = 60.0
_STOP = object()

# kind -> (RPC method, response proto, callback method)
_KINDS: dict[str, tuple[str, type[Message], str]] = {
    ALLOCATION: ("UpdateAllocation", si_pb2.AllocationResponse, "update_allocation"),
    APPLICATION: ("UpdateApplication", si_pb2.ApplicationResponse, "update_application"),
    NODE: ("UpdateNode", si_pb2.NodeResponse, "update_node"),
}


def _error(error: grpc.RpcError, config: bool = True) -> Exception:
    """The korral error for a failed call: INVALID_ARGUMENT from a config-taking call is a ConfigError."""
    code, details = error.code(), error.details() or ""  # type: ignore[attr-defined]
    if config and code == grpc.StatusCode.INVALID_ARGUMENT:
        return ConfigError(details)
    return SchedulerError(
        f"{code.name}: {details}" if code != grpc.StatusCode.FAILED_PRECONDITION else details
    )


class _RemoteStream:
    """One bidirectional call of one RM: requests written from a queue, responses read on a thread."""

    def __init__(self, channel: grpc.Channel, kind: str, rm_id: str, deliveries: queue.SimpleQueue) -> None:
        method, self._response_type, self._callback_method = _KINDS[kind]
        self.kind = kind
        self._rm_id = rm_id
        self._outgoing: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._deliveries = deliveries
        call = channel.stream_stream(f"/{SERVICE}/{method}")
        self._call = call(self._requests())
        self._reader = threading.Thread(target=self._read, name=f"korral-remote-{kind}-{rm_id}", daemon=True)
        self.failed: grpc.RpcError | None = None
        self._reader.start()

    def _requests(self) -> Iterator[bytes]:
        while True:
            item = self._outgoing.get()
            if item is _STOP:
                return
            yield item

    def send(self, data: bytes) -> None:
        self._outgoing.put(data)

    def _read(self) -> None:
        try:
            for data in self._call:
                try:
                    response = parse(self._response_type, data)
                except ConversionError:
                    log.exception("RmID=%s: undecodable %s from korral", self._rm_id, self.kind)
                    continue
                self._deliveries.put((self._callback_method, response))
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.CANCELLED:  # type: ignore[attr-defined]
                self.failed = error
                log.error("RmID=%s: %s stream ended: %s", self._rm_id, self.kind, error.details())  # type: ignore[attr-defined]

    @property
    def alive(self) -> bool:
        return self.failed is None and self._reader.is_alive()

    def close(self) -> None:
        self._outgoing.put(_STOP)
        self._call.cancel()
        self._reader.join(CONNECT_TIMEOUT)


class _RemoteRM:
    """One registered RM: its streams and the thread that runs its callbacks in order."""

    def __init__(self, channel: grpc.Channel, rm_id: str, callback: ResourceManagerCallback) -> None:
        self._channel = channel
        self.rm_id = rm_id
        self._callback = callback
        self._streams: dict[str, _RemoteStream] = {}
        self._lock = threading.Lock()
        self._deliveries: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._dispatcher = threading.Thread(
            target=self._dispatch, name=f"korral-remote-rm-{rm_id}", daemon=True
        )
        self._dispatcher.start()

    def send(self, kind: str, data: bytes) -> None:
        with self._lock:
            stream = self._streams.get(kind)
            if stream is not None and not stream.alive:
                # a stream korral ended with an error is reported once, on the next call of its kind;
                # one that ended cleanly (korral stopping) is simply opened again
                del self._streams[kind]
                stream.close()
                if stream.failed is not None:
                    raise _error(stream.failed, config=False)
                stream = None
            if stream is None:
                stream = self._streams[kind] = _RemoteStream(
                    self._channel, kind, self.rm_id, self._deliveries
                )
            stream.send(data)

    def reject_locally(self, checked: Checked) -> None:
        if checked.node_rejections:
            self._deliveries.put(("update_node", si.NodeResponse(rejected=checked.node_rejections)))
        if checked.application_rejections:
            response = si.ApplicationResponse(rejected=checked.application_rejections)
            self._deliveries.put(("update_application", response))
        if checked.ask_rejections:
            self._deliveries.put(
                ("update_allocation", si.AllocationResponse(rejected=checked.ask_rejections))
            )

    def _dispatch(self) -> None:
        while True:
            item = self._deliveries.get()
            if item is _STOP:
                return
            method, response = item
            try:
                getattr(self._callback, method)(response)
            except Exception:
                # the RM's own failure: logged and contained, as in-process
                log.exception("RmID=%s: callback %s raised", self.rm_id, method)

    def close(self) -> None:
        with self._lock:
            streams, self._streams = list(self._streams.values()), {}
        for stream in streams:
            stream.close()
        # callbacks already received are still delivered, then the thread ends
        self._deliveries.put(_STOP)
        if threading.current_thread() is not self._dispatcher:
            self._dispatcher.join(CALL_TIMEOUT)


class RemoteCore:
    """A korral core in another process, reached over gRPC; the SI calls of ``korral.Core``."""

    def __init__(self, address: str, *, connect_timeout: float = CONNECT_TIMEOUT) -> None:
        self.address = address
        self._channel = grpc.insecure_channel(address, options=channel_options())
        try:
            grpc.channel_ready_future(self._channel).result(timeout=connect_timeout)
        except grpc.FutureTimeoutError:
            self._channel.close()
            raise SchedulerError(f"cannot reach korral at {address} within {connect_timeout}s") from None
        self._register = self._channel.unary_unary(f"/{SERVICE}/RegisterResourceManager")
        self._update_configuration = self._channel.unary_unary(f"/{SERVICE}/UpdateConfiguration")
        self._rms: dict[str, _RemoteRM] = {}
        self._lock = threading.Lock()
        self._closed = False

    # ---- the SI ------------------------------------------------------------------------------------

    def register_resource_manager(
        self, request: si.RegisterResourceManagerRequest, callback: ResourceManagerCallback | None = None
    ) -> si.RegisterResourceManagerResponse:
        self._check_open()
        if request.rm_id == "":
            raise InvalidRequestError("RegisterResourceManagerRequest needs an rmID: it is empty")
        try:
            self._register(to_pb(request).SerializeToString(), timeout=CALL_TIMEOUT)
        except grpc.RpcError as error:
            raise _error(error) from None
        rm = _RemoteRM(self._channel, request.rm_id, callback or ResourceManagerCallback())
        with self._lock:
            previous, self._rms[request.rm_id] = self._rms.get(request.rm_id), rm
        if previous is not None:  # re-registration resyncs: the old streams' responses are stale
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
        try:
            self._update_configuration(to_pb(request).SerializeToString(), timeout=CALL_TIMEOUT)
        except grpc.RpcError as error:
            raise _error(error) from None

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
        rm.reject_locally(checked)
        if not checked.empty:
            rm.send(kind, to_pb(checked.request).SerializeToString())

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


def connect(address: str, *, connect_timeout: float = CONNECT_TIMEOUT) -> RemoteCore:
    """A RemoteCore for the korral serving gRPC at address ("HOST:PORT")."""
    return RemoteCore(address, connect_timeout=connect_timeout)
