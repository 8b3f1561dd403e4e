"""A gRPC client left at its library's defaults (grpc-go, grpc-java, grpc-js and Python's grpc each take
messages of at most 4 MiB) receives every response korral sends it: a response that would encode past
that is sent as several, in order, none over it."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest
from core_helpers import FAST, TWO_LEAVES

import korral
from korral import si
from korral.server import convert
from korral.server.grpc_server import MAX_RESPONSE_BYTES, encoded_parts
from korral.si import si_pb2, si_pb2_grpc

# every gRPC implementation's default limit on a message it receives
GRPC_DEFAULT_RECEIVE = 4 * 1024 * 1024


@pytest.fixture
def served() -> Iterator[tuple[korral.Core, str]]:
    with korral.start(**FAST) as core:
        yield core, core.serve_grpc("127.0.0.1:0")


@pytest.mark.parametrize("ordered", [False, True], ids=["UpdateAllocation", "UpdateInOrder"])
def test_a_client_at_grpc_defaults_receives_thousands_of_rejections_in_parts(served, ordered) -> None:
    core, address = served
    # ~7 MiB of rejections answer this one request: keys as long as a shim's pod UIDs and names
    keys = [f"{index:05d}-" + "k" * 300 for index in range(20_000)]
    request = si_pb2.AllocationRequest(
        rmID="sized",
        asks=[
            si_pb2.AllocationAsk(
                allocationKey=key,
                applicationID="no-such-app",
                resourceAsk=si_pb2.Resource(resources={"memory": si_pb2.Quantity(value=1)}),
                maxAllocations=1,
            )
            for key in keys
        ],
    )
    channel = grpc.insecure_channel(address)  # no options: gRPC's default 4 MiB receive limit
    try:
        stub = si_pb2_grpc.SchedulerStub(channel)
        stub.RegisterResourceManager(
            si_pb2.RegisterResourceManagerRequest(rmID="sized", config=TWO_LEAVES), timeout=30
        )
        done = threading.Event()

        def requests() -> Iterator[object]:
            yield si_pb2.OrderedRequest(allocation=request) if ordered else request
            done.wait(120)  # the stream stays open until every answer came

        call = (stub.UpdateInOrder if ordered else stub.UpdateAllocation)(requests(), timeout=120)
        rejected: list[str] = []
        try:
            while len(rejected) < len(keys):
                response = next(call)
                answer = response.allocation if ordered else response
                rejected.extend(r.allocationKey for r in answer.rejected)
        finally:
            done.set()
            call.cancel()
    finally:
        channel.close()
    assert rejected == keys  # all of them, in the order asked
    assert core.partition_names() == ["[sized]default"]


def test_a_response_past_the_limit_is_split_in_order_and_each_part_fits() -> None:
    allocations = tuple(
        si.Allocation(
            allocation_key=f"pod-{index}",
            allocation_tags={"kubernetes.io/meta/podName": "p" * 200, "kubernetes.io/meta/namespace": "ns"},
            uuid=f"uuid-{index}",
            resource_per_alloc={"memory": 1_000, "vcore": 100},
            node_id="node-1",
            application_id="app",
            partition_name="default",
        )
        for index in range(20_000)
    )
    released = (si.AllocationRelease(partition_name="default", application_id="app", uuid="gone"),)
    response = si.AllocationResponse(new=allocations, released=released)
    assert len(convert.serialize(response)) > MAX_RESPONSE_BYTES
    parts = encoded_parts(response, ("new", "released", "released_asks", "rejected"))
    assert len(parts) > 1 and all(len(part) <= MAX_RESPONSE_BYTES for part in parts)
    read = [convert.parse(si_pb2.AllocationResponse, part) for part in parts]
    assert tuple(a for part in read for a in part.new) == allocations
    assert tuple(r for part in read for r in part.released) == released
    # a response within the limit is one message, as encoded
    small = si.AllocationResponse(new=allocations[:10])
    assert encoded_parts(small, ("new",)) == [convert.serialize(small)]
