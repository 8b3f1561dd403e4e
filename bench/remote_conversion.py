"""The gRPC path's conversion on a fixed recorded stream, stage by stage: what ``korral bench --remote``
spends per allocation turning korral's SI messages into wire bytes and back, without the core.

The stream is YuniKorn's shape (1,000 nodes, 10,000 asks): its AllocationRequests as the RM makes them
and the AllocationResponses the core answered with, recorded once from an in-process run (``--record``
FILE writes them, later runs read them; without it each run records anew). Each stage runs over the
whole stream ``--repeat`` times; per stage the least process CPU over the repeats, in µs per allocation:

- ``rm-encode``: the RM's requests to wire bytes as ``korral.connect`` sends them (parts of 500 asks,
  framed for the ordered stream);
- ``server-decode``: the server's decoding of those bytes to the request the core is handed;
- ``server-encode``: the core's responses to the framed bytes the server writes;
- ``rm-decode``: the RM's decoding of those bytes to the responses its callback gets.

Instruction counts, steadier on a shared machine: ``valgrind --tool=callgrind`` of ``--stage S
--repeat 1`` minus that of ``--stage none`` (the recording read alone).

    .venv/bin/python bench/remote_conversion.py [--record /tmp/stream.pickle] [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import pickle
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import korral
from korral import si
from korral.harness.benchmark import workloads
from korral.harness.benchmark.runner import CORE_SETTINGS, BenchRM
from korral.server import convert
from korral.server.client import ASKS_PER_MESSAGE
from korral.server.convert import parse_ordered, to_pb
from korral.server.decoder import decode
from korral.server.session import ALLOCATION, ORDERED, frame
from korral.si import si_pb2

Stream = tuple[list[si.AllocationRequest], list[si.AllocationResponse]]


def _protobuf_bytes(message: Any) -> bytes:
    wire: bytes = to_pb(message).SerializeToString()
    return wire


# what the server and korral.connect write with (through protobuf's objects on code before serialize;
# PYTHONPATH=... runs this against an earlier commit, interleaved)
serialize = getattr(convert, "serialize", _protobuf_bytes)


class RecordingRM(BenchRM):
    def __init__(self, expected_nodes: int) -> None:
        super().__init__(expected_nodes)
        self.responses: list[si.AllocationResponse] = []

    def update_allocation(self, response: si.AllocationResponse) -> None:
        self.responses.append(response)
        super().update_allocation(response)


def record(nodes: int, asks: int) -> Stream:
    workload = workloads.yunikorn(nodes, asks)
    rm = RecordingRM(workload.node_count)
    requests = [request for wave in workload.waves for request in wave.requests]
    with korral.start(**CORE_SETTINGS) as core:
        core.register_resource_manager(
            si.RegisterResourceManagerRequest(rm_id=workload.rm_id, config=workload.config), rm
        )
        core.update_node(workload.nodes)
        rm.nodes_done.wait(120)
        core.update_application(workload.applications)
        core.wait_until_idle(120)
        rm.target = workload.asks
        for request in requests:
            core.update_allocation(request)
        if not rm.done.wait(600):
            raise TimeoutError("the recording run did not finish")
    return requests, rm.responses


def parts(request: si.AllocationRequest) -> list[si.AllocationRequest]:
    """The requests ``korral.connect`` sends for one of asks alone."""
    asks = request.asks
    return [
        si.AllocationRequest(rm_id=request.rm_id, asks=asks[start : start + ASKS_PER_MESSAGE])
        for start in range(0, len(asks), ASKS_PER_MESSAGE)
    ]


def stages(stream: Stream) -> dict[str, Callable[[], Any]]:
    requests = [part for request in stream[0] for part in parts(request)]
    responses = stream[1]
    request_bytes = [frame(ALLOCATION, _protobuf_bytes(part)) for part in requests]
    response_bytes = [frame(ALLOCATION, _protobuf_bytes(response)) for response in responses]

    def rm_encode() -> Any:
        return [frame(ALLOCATION, serialize(part)) for part in requests]

    def server_decode() -> Any:
        return [decode(ORDERED, data) for data in request_bytes]

    def server_encode() -> Any:
        return [frame(ALLOCATION, serialize(response)) for response in responses]

    def rm_decode() -> Any:
        return [parse_ordered(si_pb2.OrderedResponse, data) for data in response_bytes]

    return {
        "rm-encode": rm_encode,
        "server-decode": server_decode,
        "server-encode": server_encode,
        "rm-decode": rm_decode,
        "none": lambda: None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record", type=Path, help="the recorded stream's file (written if absent)")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--asks", type=int, default=10000)
    parser.add_argument("--stage", default="all")
    parser.add_argument("--repeat", type=int, default=20)
    options = parser.parse_args()
    if options.record is not None and options.record.exists():
        stream: Stream = pickle.loads(options.record.read_bytes())
    else:
        stream = record(options.nodes, options.asks)
        if options.record is not None:
            options.record.write_bytes(pickle.dumps(stream))
    allocations = sum(len(response.new) for response in stream[1])
    runs = stages(stream)
    chosen = [name for name in runs if name != "none"] if options.stage == "all" else [options.stage]
    best = dict.fromkeys(chosen, float("inf"))
    for _ in range(options.repeat):
        for name in chosen:  # the stages alternate, so a busy spell touches each alike
            started = time.process_time()
            runs[name]()
            best[name] = min(best[name], time.process_time() - started)
    per = 1e6 / max(1, allocations)
    print(json.dumps({name: round(seconds * per, 3) for name, seconds in best.items()}))


if __name__ == "__main__":
    main()
