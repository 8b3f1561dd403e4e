"""The straight-line wire code (korral.server.convert_wire) against protobuf's own: the same bytes and
the same messages, and every input it does not take left to protobuf, which accepts or refuses it."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from korral import si
from korral.server import convert, convert_wire, session
from korral.si import si_pb2
from tests.unit.test_grpc_convert import MESSAGE_TYPES, message_strategy


def _protobuf_reading(proto_type: type, data: bytes) -> tuple[Any, bool] | str:
    """What the protobuf path makes of the bytes: (message, typed), or its refusal."""
    try:
        return convert._from_decoded(*convert._converted(proto_type, data))
    except convert.ConversionError as error:
        return f"refused: {error}"


def _reading(proto_type: type, data: bytes) -> tuple[Any, bool] | str:
    try:
        return convert.parse_typed(proto_type, data)
    except convert.ConversionError as error:
        return f"refused: {error}"


def _types(message: Any) -> list[type]:
    return [type(getattr(message, field.name)) for field in attrs.fields(type(message))]


@pytest.mark.parametrize("message_type", MESSAGE_TYPES, ids=lambda t: t.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_written_bytes_are_protobufs_and_protobufs_bytes_are_read_straight(
    message_type: type, data: st.DataObject
) -> None:
    message = data.draw(message_strategy(message_type))
    proto = convert.to_pb(message)
    written = convert.serialize(message)
    # what korral writes is the message protobuf makes of it ...
    assert type(proto).FromString(written) == proto
    # ... and protobuf's bytes are read without protobuf, to what its careful reading gives
    spec = convert._BY_KORRAL[message_type]
    straight = convert._read_wire(spec, proto.SerializeToString())
    assert straight is not None, "conforming bytes must take the straight path"
    careful = convert.from_pb(proto)
    assert straight == careful == message
    assert _types(straight) == _types(careful)


_MUTATION = st.tuples(
    st.sampled_from(["flip", "insert", "delete"]), st.integers(0, 10_000), st.integers(0, 255)
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    message=st.one_of(
        message_strategy(si.AllocationRequest),
        message_strategy(si.AllocationResponse),
        message_strategy(si.NodeRequest),
        message_strategy(si.ApplicationRequest),
    ),
    mutations=st.lists(_MUTATION, min_size=1, max_size=3),
)
def test_mangled_bytes_read_as_protobuf_reads_them(
    message: Any, mutations: list[tuple[str, int, int]]
) -> None:
    # whatever the bytes, the reading korral does is protobuf's: the same message and typing, or a
    # refusal (the straight path only ever takes bytes it reads as protobuf does)
    data = bytearray(convert.serialize(message))
    for action, where, value in mutations:
        at = where % (len(data) + 1)
        if action == "insert":
            data.insert(at, value)
        elif data and at < len(data):
            if action == "flip":
                data[at] = value
            else:
                del data[at]
    proto_type = getattr(si_pb2, type(message).__name__)
    got, expected = _reading(proto_type, bytes(data)), _protobuf_reading(proto_type, bytes(data))
    assert got == expected
    if isinstance(got, tuple) and isinstance(expected, tuple):
        assert _types(got[0]) == _types(expected[0])


def _ask_bytes(**fields: Any) -> bytes:
    return si_pb2.AllocationRequest(rmID="rm", asks=[si_pb2.AllocationAsk(**fields)]).SerializeToString(
        deterministic=True  # map entries in key order: the same test ids in every pytest-xdist worker
    )


@pytest.mark.parametrize(
    "data",
    [
        _ask_bytes(allocationKey="a", priority=-5, maxAllocations=-(2**31)),  # sign-extended int32s
        _ask_bytes(allocationKey="a", executionTimeoutMilliSeconds=-(2**63)),
        _ask_bytes(allocationKey="ü" * 200, tags={"k": "v" * 300, "": ""}),  # lengths of two bytes
        _ask_bytes(allocationKey="a", Originator=True, preemptionPolicy=si_pb2.PreemptionPolicy()),
        # fields out of number order, and one given twice (the last one counts): protobuf's reading
        si_pb2.AllocationAsk(applicationID="app").SerializeToString()
        + si_pb2.AllocationAsk(allocationKey="a").SerializeToString(),
        si_pb2.AllocationAsk(allocationKey="a").SerializeToString()
        + si_pb2.AllocationAsk(allocationKey="b").SerializeToString(),
        b"\x0a\x02\xff\xfe",  # not UTF-8
        b"\x0a\x05ab",  # a length past the end
        b"\x28\x02",  # a wire type protobuf keeps as unknown here only by its number's place
        b"\x50\x02",  # a bool sent as 2
        b"\x28" + b"\xff" * 11,  # a varint too long
    ],
)
def test_edge_bytes_read_as_protobuf_reads_them(data: bytes) -> None:
    for proto_type in (si_pb2.AllocationRequest, si_pb2.AllocationAsk):
        assert _reading(proto_type, data) == _protobuf_reading(proto_type, data)


def _ordered(data: bytes) -> Any:
    try:
        return convert.parse_ordered_typed(si_pb2.OrderedRequest, data)
    except convert.ConversionError as error:
        return f"refused: {error}"


def test_an_ordered_request_is_read_straight_and_mangled_frames_as_protobuf_reads_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    request = si.AllocationRequest(
        rm_id="rm", asks=(si.AllocationAsk(allocation_key="a", resource_ask={"m": 1}),)
    )
    wire = session.frame(session.ALLOCATION, convert.serialize(request))
    assert convert._read_ordered_wire(si_pb2.OrderedRequest, wire) == (session.ALLOCATION, request)
    mangled = [
        wire[:-1],
        wire + b"\x12\x00",
        b"",
        b"\x0a",
        b"\x0a\x80",
        b"\x1a\x00",
        wire + wire,
        wire[:1] + b"\xff",
    ]
    got = [_ordered(data) for data in [wire, *mangled]]
    monkeypatch.setattr(convert, "_read_ordered_wire", lambda *_: None)  # protobuf's reading alone
    assert got == [_ordered(data) for data in [wire, *mangled]]
    assert got[0] == (session.ALLOCATION, request, True)


@pytest.mark.parametrize(
    "message",
    [
        si.AllocationAsk(allocation_key="a", priority=2**31),  # past int32
        si.AllocationAsk(allocation_key="a", resource_ask={"memory": 2**63}),  # past int64
        si.NodeInfo(node_id="n", attributes={"k": "\ud800"}),  # not encodable as UTF-8
    ],
)
def test_a_value_protobuf_cannot_hold_is_refused_as_protobuf_refuses_it(message: Any) -> None:
    with pytest.raises((TypeError, ValueError)) as protobuf_error:
        convert.to_pb(message).SerializeToString()
    with pytest.raises(type(protobuf_error.value)):
        convert.serialize(message)


def _written(message: Any, write: Any) -> Any:
    try:
        return si_pb2.AllocationAsk.FromString(write(message))
    except (TypeError, ValueError) as error:
        return type(error)


def test_a_value_of_another_type_is_written_or_refused_as_protobuf_does() -> None:
    # values set past attrs' converters, as a caller's own subclass or mistake would be
    class Name(str):
        pass

    def ask(**fields: Any) -> si.AllocationAsk:
        made = si.AllocationAsk(allocation_key="a")
        for name, value in fields.items():
            object.__setattr__(made, name, value)
        return made

    odd = [
        {"application_id": Name("app")},
        {"application_id": None},
        {"application_id": b"app"},
        {"priority": True},
        {"priority": 1.0},
        {"placeholder": 1},
        {"tags": {"k": 1}},
        {"resource_ask": {"memory": "1"}},
    ]
    for fields in odd:
        expected = _written(ask(**fields), lambda message: convert.to_pb(message).SerializeToString())
        assert _written(ask(**fields), convert.serialize) == expected, fields
    assert _written(ask(application_id=Name("app")), convert.serialize).applicationID == "app"


def test_the_resources_kept_by_their_bytes_are_private_copies_and_bounded() -> None:
    def ask_bytes(memory: int) -> bytes:
        ask = si.AllocationAsk(allocation_key="a", resource_ask={"memory": memory})
        return convert.serialize(si.AllocationRequest(rm_id="rm", asks=(ask,)))

    first = convert.parse(si_pb2.AllocationRequest, ask_bytes(5))
    first.asks[0].resource_ask["memory"] = 999
    assert convert.parse(si_pb2.AllocationRequest, ask_bytes(5)).asks[0].resource_ask == {"memory": 5}
    for memory in range(convert_wire.RESOURCE_CACHE + 50):
        assert convert.parse(si_pb2.AllocationRequest, ask_bytes(memory + 1)).asks[0].resource_ask == {
            "memory": memory + 1
        }
    assert len(convert_wire._resources_read) <= convert_wire.RESOURCE_CACHE
    assert len(convert_wire._resources_written) <= convert_wire.RESOURCE_CACHE
