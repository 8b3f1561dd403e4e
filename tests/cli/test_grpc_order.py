"""One RM's requests of different kinds over gRPC reach the core in the order sent (UpdateInOrder), as
the in-process SI calls do: korral.connect and raw stubs, over real loopback sockets."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from core_helpers import FAST, NODE, SMALL, TWO_LEAVES

import korral
from korral import si
from korral import testing as t
from korral.server.convert import to_pb
from korral.server.session import frame
from korral.si import si_pb2

METHOD = "/si.v1.Scheduler/UpdateInOrder"


@pytest.fixture
def served() -> Iterator[tuple[korral.Core, str]]:
    with korral.start(**FAST) as core:
        yield core, core.serve_grpc("127.0.0.1:0")


def test_asks_sent_right_after_their_application_are_never_refused_for_a_missing_application(served) -> None:
    # On three streams (one per kind) an ask could overtake its application's add and be rejected with
    # "failed to find application"; one ordered stream keeps the RM's order, as in-process
    _, address = served
    rm = t.RecordingRM("rm")
    apps = [f"app-{i}" for i in range(60)]
    with korral.connect(address) as remote:
        remote.register_resource_manager(t.register("rm", TWO_LEAVES), rm)
        remote.update_node(t.nodes("rm", [f"n{i}" for i in range(6)], NODE))  # room for 60
        for app in apps:  # no waiting in between: each ask right behind its application
            remote.update_application(t.applications("rm", {app: "root.a"}))
            remote.update_allocation(t.asks("rm", app, 1, SMALL))
        assert rm.wait_for_allocations(len(apps))
    assert rm.rejected_asks == []
    assert sorted(a.application_id for a in rm.live.values()) == sorted(apps)


def _ordered(kind: str, message: object) -> bytes:
    return frame(kind, to_pb(message).SerializeToString())


def test_raw_stubs_on_the_ordered_stream_get_every_kind_of_response_in_order(served) -> None:
    _, address = served
    with grpc.insecure_channel(address) as channel:
        register = channel.unary_unary("/si.v1.Scheduler/RegisterResourceManager")
        register(to_pb(t.register("raw", TWO_LEAVES)).SerializeToString(), timeout=30)
        requests = [
            _ordered("node", t.nodes("raw", ["n1"], NODE)),
            _ordered("application", t.applications("raw", {"app": "root.a"})),
            _ordered("allocation", t.asks("raw", "app", 1, SMALL)),
        ]
        call = channel.stream_stream(METHOD)(iter(requests), timeout=30)
        kinds = []
        for data in call:
            response = si_pb2.OrderedResponse.FromString(data)
            kinds.append(response.WhichOneof("response"))
            if response.HasField("allocation") and response.allocation.new:
                call.cancel()
                break
    assert kinds[0] == "node" and "application" in kinds and kinds[-1] == "allocation"


def test_the_frame_is_protobufs_own_encoding_of_the_oneof() -> None:
    # korral frames serialized responses without re-encoding them: the bytes must be what protobuf
    # writes for OrderedResponse, for small and multi-byte lengths. (Deterministic serialization on
    # both sides: protobuf may write a map's entries in another order each time.)
    for count in (1, 400):
        inner = to_pb(t.asks("rm", "app", count, SMALL))
        assert frame("allocation", inner.SerializeToString(deterministic=True)) == (
            si_pb2.OrderedRequest(allocation=inner).SerializeToString(deterministic=True)
        )
    node = to_pb(si.NodeResponse())
    assert frame("node", node.SerializeToString(deterministic=True)) == si_pb2.OrderedResponse(
        node=node
    ).SerializeToString(deterministic=True)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"", "has none"),
        (b"\x0a\x05\xff\xff", "malformed OrderedRequest"),
    ],
)
def test_a_bad_ordered_request_is_invalid_argument_and_changes_nothing(served, payload, reason) -> None:
    core, address = served
    with grpc.insecure_channel(address) as channel:
        call = channel.stream_stream(METHOD)(iter([payload]), timeout=30)
        with pytest.raises(grpc.RpcError) as raised:
            list(call)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason in (raised.value.details() or "")
    assert core.partitions() == []


def test_the_ordered_stream_carries_one_rm(served) -> None:
    _, address = served
    with grpc.insecure_channel(address) as channel:
        register = channel.unary_unary("/si.v1.Scheduler/RegisterResourceManager")
        for rm_id in ("a", "b"):
            register(to_pb(t.register(rm_id, TWO_LEAVES)).SerializeToString(), timeout=30)
        requests = [
            _ordered("node", t.nodes("a", ["n1"], NODE)),
            _ordered("application", t.applications("b", {"app": "root.a"})),
        ]
        call = channel.stream_stream(METHOD)(iter(requests), timeout=30)
        with pytest.raises(grpc.RpcError) as raised:
            list(call)
    assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "carries RmID=a" in (raised.value.details() or "")


def test_a_request_of_many_asks_reaches_the_core_in_parts_in_order_and_all_are_placed(served) -> None:
    # korral.connect sends asks alone in parts of ASKS_PER_MESSAGE: the core starts on the first part
    # while the rest is on its way, and takes them in the order of the one request
    from korral.server.client import ASKS_PER_MESSAGE

    core, address = served
    received: list[list[str]] = []
    # what the server calls for a request its plain reader decoded (the checks hold by construction)
    route = core._update_allocation_typed

    def counting(request: si.AllocationRequest) -> None:
        received.append([ask.allocation_key for ask in request.asks])
        route(request)

    core._update_allocation_typed = counting  # type: ignore[method-assign]
    count = 2 * ASKS_PER_MESSAGE + 7
    rm = t.RecordingRM("rm")
    request = t.asks("rm", "app", count, {"memory": 1, "vcore": 1})
    with korral.connect(address) as remote:
        remote.register_resource_manager(t.register("rm", TWO_LEAVES), rm)
        remote.update_node(t.nodes("rm", ["n1"], {"memory": 100_000, "vcore": 100_000}))
        remote.update_application(t.applications("rm", {"app": "root.a"}))
        remote.update_allocation(request)
        assert rm.wait_for_allocations(count)
    assert [len(part) for part in received] == [ASKS_PER_MESSAGE, ASKS_PER_MESSAGE, 7]
    assert [key for part in received for key in part] == [ask.allocation_key for ask in request.asks]
    assert rm.rejected_asks == []
