"""Input the SI refuses, over real loopback gRPC: a resource quantity sent with the wrong wire type
rejects its item (with the reason, through the RM's responses) and the rest of the request goes on; an
empty rmID is INVALID_ARGUMENT. Raw bytes, so nothing on the client side cleans them first."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from core_helpers import FAST, NODE, SMALL, TWO_LEAVES, part

import korral
from korral import si
from korral import testing as t
from korral.server import convert
from korral.si import si_pb2
from korral.si.validate import check_allocation_request

SERVICE = "/si.v1.Scheduler/"


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _delimited(tag: int, body: bytes) -> bytes:
    return bytes([tag]) + _varint(len(body)) + body


def _entry(name: str, quantity: bytes) -> bytes:
    """One ``Resource.resources`` map entry (field 1) whose Quantity message is ``quantity``."""
    return _delimited(0x0A, _delimited(0x0A, name.encode()) + _delimited(0x12, quantity))


GOOD_VCORE = _entry("vcore", b"\x08" + _varint(1000))
# Quantity.value (field 1, an int64 varint) sent length-delimited, as bytes
MEMORY_AS_BYTES = _entry("memory", _delimited(0x0A, b"10M"))
# a map entry whose value (field 2, a Quantity message) is sent as a varint
ENTRY_AS_VARINT = _delimited(0x0A, _delimited(0x0A, b"memory") + b"\x10\x05")


def _ask_bytes(key: str, resource: bytes) -> bytes:
    head = si_pb2.AllocationAsk(allocationKey=key, applicationID="app", maxAllocations=1)
    return head.SerializeToString() + _delimited(0x22, resource)


@pytest.mark.parametrize(
    ("resource", "reason"),
    [
        (MEMORY_AS_BYTES + GOOD_VCORE, "quantity of 'memory' has the wrong wire type"),
        (ENTRY_AS_VARINT + GOOD_VCORE, "a resource map entry has the wrong wire type"),
    ],
)
def test_a_mistyped_quantity_decodes_to_a_marker_the_checks_reject(resource: bytes, reason: str) -> None:
    data = _delimited(0x0A, _ask_bytes("bad", resource)) + _delimited(0x1A, b"rm")
    request = convert.parse(si_pb2.AllocationRequest, data)
    checked = check_allocation_request(request)
    assert list(checked.request.asks) == []
    [rejected] = checked.ask_rejections
    assert rejected.allocation_key == "bad" and reason in rejected.reason
    assert "resource_ask" in rejected.reason


def test_an_unknown_field_number_inside_a_resource_is_still_ignored() -> None:
    quantity_with_extra = b"\x08" + _varint(7) + b"\x10\x01"  # field 2 of Quantity: not in the SI
    data = _delimited(0x22, _entry("memory", quantity_with_extra) + b"\x10\x01")
    assert convert.parse(si_pb2.AllocationAsk, data).resource_ask == {"memory": 7}


@pytest.fixture
def served() -> Iterator[tuple[korral.Core, str]]:
    with korral.start(**FAST) as core:
        yield core, core.serve_grpc("127.0.0.1:0")


def _register(channel: grpc.Channel, rm_id: str) -> None:
    request = si_pb2.RegisterResourceManagerRequest(rmID=rm_id, config=TWO_LEAVES)
    channel.unary_unary(SERVICE + "RegisterResourceManager")(request.SerializeToString(), timeout=30)


def test_a_mistyped_quantity_over_grpc_rejects_its_ask_and_the_rest_goes_on(served) -> None:
    core, address = served
    channel = grpc.insecure_channel(address)
    try:
        _register(channel, "w")
        core.update_node(t.nodes("w", ["n1"], NODE))
        core.update_application(t.applications("w", {"app": "root.a"}))
        core.wait_until_idle()
        good = to_ask_bytes("good")
        request = (
            _delimited(0x0A, _ask_bytes("bad", MEMORY_AS_BYTES + GOOD_VCORE))
            + _delimited(0x0A, good)
            + _delimited(0x1A, b"w")
        )
        call = channel.stream_stream(SERVICE + "UpdateAllocation")(iter([request]), timeout=30)
        rejected: list[si_pb2.RejectedAllocationAsk] = []
        new: list[si_pb2.Allocation] = []
        while not (rejected and new):
            response = si_pb2.AllocationResponse.FromString(next(call))
            rejected.extend(response.rejected)
            new.extend(response.new)
        call.cancel()
    finally:
        channel.close()
    assert [r.allocationKey for r in rejected] == ["bad"]
    assert "memory" in rejected[0].reason and "wrong wire type" in rejected[0].reason
    assert [a.allocationKey for a in new] == ["good"]
    core.wait_until_idle()
    # before: the ask was allocated with its vcore only, its memory dropped as 0
    assert core.application(part("w"), "app").allocated == SMALL


def test_a_mistyped_quantity_rejects_its_node_and_the_other_node_is_accepted(served) -> None:
    core, address = served
    channel = grpc.insecure_channel(address)
    try:
        _register(channel, "w")
        bad_node = si_pb2.NodeInfo(nodeID="bad", action=si_pb2.NodeInfo.CREATE).SerializeToString()
        bad_node += _delimited(0x22, MEMORY_AS_BYTES + GOOD_VCORE)  # schedulableResource
        good_node = si_pb2.NodeInfo(nodeID="good", action=si_pb2.NodeInfo.CREATE)
        convert.resource_to_pb(NODE, good_node.schedulableResource)
        request = (
            _delimited(0x0A, bad_node)
            + _delimited(0x0A, good_node.SerializeToString())
            + _delimited(0x12, b"w")
        )
        call = channel.stream_stream(SERVICE + "UpdateNode")(iter([request]), timeout=30)
        response = si_pb2.NodeResponse()
        while not (response.rejected and response.accepted):
            response.MergeFromString(next(call))
        call.cancel()
    finally:
        channel.close()
    assert [n.nodeID for n in response.rejected] == ["bad"]
    assert "schedulable_resource" in response.rejected[0].reason
    assert [n.nodeID for n in response.accepted] == ["good"]
    assert [n.node_id for n in core.nodes(part("w"))] == ["good"]


def to_ask_bytes(key: str) -> bytes:
    ask = si.AllocationAsk(allocation_key=key, application_id="app", resource_ask=SMALL, max_allocations=1)
    return convert.to_pb(ask).SerializeToString()


@pytest.mark.parametrize("method", ["UpdateAllocation", "UpdateApplication", "UpdateNode"])
def test_an_empty_rm_id_on_a_stream_is_invalid_argument(served, method: str) -> None:
    _, address = served
    channel = grpc.insecure_channel(address)
    request = {
        "UpdateAllocation": si_pb2.AllocationRequest(asks=[si_pb2.AllocationAsk(allocationKey="k")]),
        "UpdateApplication": si_pb2.ApplicationRequest(new=[si_pb2.AddApplicationRequest(applicationID="a")]),
        "UpdateNode": si_pb2.NodeRequest(nodes=[si_pb2.NodeInfo(nodeID="n")]),
    }[method]
    try:
        with pytest.raises(grpc.RpcError) as failed:
            next(channel.stream_stream(SERVICE + method)(iter([request.SerializeToString()]), timeout=30))
    finally:
        channel.close()
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "needs an rmID: it is empty" in failed.value.details()


def test_an_empty_rm_id_at_registration_is_invalid_argument_and_remote_raises_it(served) -> None:
    core, address = served
    channel = grpc.insecure_channel(address)
    try:
        with pytest.raises(grpc.RpcError) as failed:
            _register(channel, "")
    finally:
        channel.close()
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "needs an rmID" in failed.value.details()
    with korral.connect(address) as remote:
        with pytest.raises(korral.InvalidRequestError, match="needs an rmID"):
            remote.register_resource_manager(t.register("", TWO_LEAVES), t.RecordingRM(""))
        with pytest.raises(korral.InvalidRequestError, match="needs an rmID"):
            remote.update_node(t.nodes("", ["n1"], NODE))
    assert core.partitions() == []


def test_an_empty_rm_id_in_process_is_an_invalid_request_error() -> None:
    with korral.start(**FAST) as core:
        with pytest.raises(korral.InvalidRequestError, match="needs an rmID"):
            core.register_resource_manager(t.register("", TWO_LEAVES), t.RecordingRM(""))
        with pytest.raises(korral.InvalidRequestError, match="AllocationRequest needs an rmID"):
            core.update_allocation(t.asks("", "app", 1, SMALL))
        with pytest.raises(korral.InvalidRequestError, match="UpdateConfigurationRequest needs an rmID"):
            core.update_configuration(si.UpdateConfigurationRequest(rm_id="", config=TWO_LEAVES))
        # still a SchedulerError, as it was: callers that catch that are not broken
        with pytest.raises(korral.SchedulerError):
            core.update_node(t.nodes("", ["n1"], NODE))
