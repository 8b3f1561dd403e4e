"""Decoding a gRPC stream's requests; the big ones decoded and routed off the event loop.

The loop serves every call of every RM; a request is decoded (and its items checked) before anything
else of its call is known, its rmID and so its token included. On the loop, one message of 1,000,000
nodes held it, and so every other RM's calls, for a minute. A request of ``ON_LOOP_BYTES`` or more is
handled on the decoder's threads instead (the call awaits it, so a stream's order holds); smaller ones
stay on the loop, where they cost less.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from google.protobuf.message import Message

from korral.server.convert import parse, parse_ordered_typed, parse_typed
from korral.server.session import ALLOCATION, APPLICATION, NODE, ORDERED
from korral.si import si_pb2

ON_LOOP_BYTES = 1 << 20
THREADS = 2

# kind -> (request proto, the core's SI method, request name for errors)
_STREAMS: dict[str, tuple[type[Message], str, str]] = {
    ALLOCATION: (si_pb2.AllocationRequest, "update_allocation", "AllocationRequest"),
    APPLICATION: (si_pb2.ApplicationRequest, "update_application", "ApplicationRequest"),
    NODE: (si_pb2.NodeRequest, "update_node", "NodeRequest"),
}


def decode(kind: str, data: bytes) -> tuple[Any, str, str]:
    """(request, the core's SI method for it, its name) of a request read on a stream of ``kind``.

    An AllocationRequest the plain reader decoded goes to the core without its items' type checks
    again (``Core._update_allocation_typed``): the hot path of a served RM."""
    if kind != ORDERED:
        proto_type, method_name, request_name = _STREAMS[kind]
        if kind != ALLOCATION:
            return parse(proto_type, data), method_name, request_name
        request, typed = parse_typed(proto_type, data)
        return request, "_update_allocation_typed" if typed else method_name, request_name
    inner_kind, request, typed = parse_ordered_typed(si_pb2.OrderedRequest, data)
    _, method_name, request_name = _STREAMS[inner_kind]
    if typed and inner_kind == ALLOCATION:
        method_name = "_update_allocation_typed"
    return request, method_name, request_name


class Decoder:
    """The threads a server's big requests are decoded and routed on (``THREADS``, made as needed)."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(THREADS, thread_name_prefix="korral-grpc-decode")

    async def run(self, work: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, work, *args)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
