"""The conversion between korral.si and the wire's protobuf, both ways, for every message; and the proto's
generated code is what `make proto` generates."""

from __future__ import annotations

import enum
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from korral import si
from korral.server import convert, session
from korral.si import si_pb2
from korral.si.validate import check_allocation_request

ROOT = Path(__file__).resolve().parents[2]
MESSAGE_TYPES = [
    getattr(si, name)
    for name in si.__all__
    if isinstance(getattr(si, name), type) and attrs.has(getattr(si, name))
]
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=8)
RESOURCE = st.dictionaries(TEXT, INT64, max_size=3)


def _field_strategy(owner: type, field: attrs.Attribute) -> st.SearchStrategy[Any]:
    proto_name = convert._SPECIAL_NAMES.get((owner.__name__, field.name), convert._camel(field.name))
    descriptor = getattr(si_pb2, owner.__name__).DESCRIPTOR.fields_by_name[proto_name]
    kind, extra = convert._field_kind(descriptor)
    if kind == convert._ENUM:
        return st.sampled_from(list(extra))
    if kind == convert._RESOURCE:
        return RESOURCE
    if kind == convert._MAP:
        return st.dictionaries(TEXT, TEXT, max_size=3)
    if kind == convert._REPEATED_SCALAR:
        return st.lists(TEXT, max_size=3).map(tuple)
    if kind == convert._REPEATED_MESSAGE:
        return st.lists(st.deferred(lambda: message_strategy(getattr(si, extra))), max_size=2).map(tuple)
    if kind == convert._MESSAGE:
        return st.none() | st.deferred(lambda: message_strategy(getattr(si, extra)))
    return {
        descriptor.TYPE_STRING: TEXT,
        descriptor.TYPE_BOOL: st.booleans(),
        descriptor.TYPE_INT32: INT32,
        descriptor.TYPE_INT64: INT64,
    }[descriptor.type]


def message_strategy(message_type: type) -> st.SearchStrategy[Any]:
    return st.builds(
        message_type,
        **{field.name: _field_strategy(message_type, field) for field in attrs.fields(message_type)},
    )


@pytest.mark.parametrize("message_type", MESSAGE_TYPES, ids=lambda t: t.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_message_round_trips_through_the_wire(message_type: type, data: st.DataObject) -> None:
    message = data.draw(message_strategy(message_type))
    proto = convert.to_pb(message)
    assert type(proto) is getattr(si_pb2, message_type.__name__)
    # korral -> protobuf -> bytes -> protobuf -> korral gives the message back ...
    wire = proto.SerializeToString()
    assert convert.parse(type(proto), wire) == message
    # ... and protobuf -> korral -> protobuf gives the protobuf back
    assert convert.to_pb(convert.from_pb(proto)) == proto


@pytest.mark.parametrize("message_type", MESSAGE_TYPES, ids=lambda t: t.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_bytes_without_unknown_fields_decode_as_the_field_by_field_reading_does(
    message_type: type, data: st.DataObject
) -> None:
    # parse reads such bytes plainly (no look for mistyped fields per message); the result must be
    # the one the careful reading of every field gives, types and defaults included
    wire = convert.to_pb(data.draw(message_strategy(message_type))).SerializeToString()
    proto = getattr(si_pb2, message_type.__name__)()
    proto.ParseFromString(wire)
    plain = convert.parse(type(proto), wire)
    careful = convert.from_pb(proto)
    assert plain == careful
    assert [type(getattr(plain, f.name)) for f in attrs.fields(message_type)] == [
        type(getattr(careful, f.name)) for f in attrs.fields(message_type)
    ]


def test_the_seed_names_and_numbers_are_what_korral_fields_map_to() -> None:
    ask = si_pb2.AllocationAsk(
        allocationKey="k",
        applicationID="app",
        partitionName="default",
        maxAllocations=2,
        executionTimeoutMilliSeconds=5,
        Originator=True,
        preemptionPolicy=si_pb2.PreemptionPolicy(allowPreemptOther=True),
    )
    ask.resourceAsk.resources["memory"].value = 10
    request = si_pb2.AllocationRequest(rmID="rm", asks=[ask])
    assert convert.from_pb(request) == si.AllocationRequest(
        rm_id="rm",
        asks=[
            si.AllocationAsk(
                allocation_key="k",
                application_id="app",
                partition_name="default",
                resource_ask={"memory": 10},
                max_allocations=2,
                execution_timeout_milliseconds=5,
                originator=True,
                preemption_policy=si.PreemptionPolicy(allow_preempt_other=True),
            )
        ],
    )
    assert convert.from_pb(si_pb2.Allocation(UUID="u", nodeID="n")) == si.Allocation(uuid="u", node_id="n")
    state = si_pb2.UpdateContainerSchedulingStateRequest(applicartionID="a", state=4)
    assert convert.from_pb(state) == si.UpdateContainerSchedulingStateRequest(
        application_id="a", state=si.SchedulingState.FAILED
    )
    numbers = {f.name: f.number for f in si_pb2.Allocation.DESCRIPTOR.fields}
    assert numbers["UUID"] == 3 and numbers["nodeID"] == 8 and numbers["placeholder"] == 12
    assert {f.name: f.number for f in si_pb2.UpdateConfigurationRequest.DESCRIPTOR.fields} == {
        "rmID": 2,
        "policyGroup": 3,
        "config": 4,
        "extraConfig": 5,
    }


def test_an_empty_sub_message_is_kept_and_an_absent_one_stays_absent() -> None:
    with_policy = si.AllocationAsk(preemption_policy=si.PreemptionPolicy())
    assert convert.to_pb(with_policy).HasField("preemptionPolicy")
    assert convert.from_pb(convert.to_pb(with_policy)) == with_policy
    assert not convert.to_pb(si.AllocationAsk()).HasField("preemptionPolicy")
    assert convert.from_pb(si_pb2.AllocationAsk()).preemption_policy is None


@pytest.mark.parametrize(
    ("proto", "reason"),
    [
        (
            si_pb2.AllocationRelease(terminationType=99),
            "AllocationRelease.terminationType: unknown TerminationType",
        ),
        (
            si_pb2.NodeRequest(nodes=[si_pb2.NodeInfo(action=42)]),
            "NodeRequest.nodes[0].action: unknown NodeAction",
        ),
        (si_pb2.EventRecord(eventChangeDetail=7), "unknown EventChangeDetail value 7"),
    ],
)
def test_an_unknown_enum_value_is_a_conversion_error_naming_the_field(proto: Any, reason: str) -> None:
    with pytest.raises(convert.ConversionError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        convert.parse(type(proto), proto.SerializeToString())


def test_a_known_field_with_the_wrong_wire_type_is_a_conversion_error_and_an_unknown_one_is_ignored() -> None:
    with pytest.raises(convert.ConversionError, match=r"AllocationRequest\.rmID: wrong wire type 0"):
        convert.parse(si_pb2.AllocationRequest, b"\x18\x05")  # rmID (3) as a varint
    two_asks = si_pb2.AllocationRequest(
        asks=[si_pb2.AllocationAsk(), si_pb2.AllocationAsk()]
    ).SerializeToString()
    third_ask_bad = b"\x0a\x02\x08\x07"  # an ask whose allocationKey (1) is a varint
    with pytest.raises(
        convert.ConversionError, match=r"AllocationRequest\.asks\[2\]\.allocationKey: wrong wire"
    ):
        convert.parse(si_pb2.AllocationRequest, two_asks + third_ask_bad)
    # field 99 is not in the SI: ignored, as proto3 ignores what a newer client adds
    assert convert.parse(si_pb2.AllocationRequest, b"\x98\x06\x01\x1a\x02rm") == si.AllocationRequest(
        rm_id="rm"
    )


@pytest.mark.parametrize("data", [b"\xff\xff\xff", b"\x0a\x05ab", b"\x1a\x80"])
def test_garbage_and_truncated_bytes_are_a_conversion_error(data: bytes) -> None:
    with pytest.raises(convert.ConversionError, match="malformed AllocationRequest"):
        convert.parse(si_pb2.AllocationRequest, data)


def test_every_korral_enum_has_the_same_members_as_its_proto_enum() -> None:
    for full_name, korral_enum in convert._ENUMS.items():
        proto_enum = si_pb2.DESCRIPTOR.pool.FindEnumTypeByName(full_name)
        assert {v.name: v.number for v in proto_enum.values} == {
            member.name: member.value for member in korral_enum
        }, full_name
    assert issubclass(si.TerminationType, enum.IntEnum)


def test_the_committed_generated_code_is_what_the_proto_generates(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--out", str(tmp_path)], check=True
    )
    for name in ("si_pb2.py", "si_pb2_grpc.py"):
        assert (tmp_path / name).read_text() == (ROOT / "src" / "si" / name).read_text(), (
            f"src/si/{name} is stale: run make proto"
        )


def test_the_proto_ships_inside_the_package() -> None:
    import importlib.resources

    proto = importlib.resources.files("korral.si").joinpath("si.proto").read_text()
    assert "package si.v1;" in proto and "rpc UpdateConfiguration" in proto


def test_decoded_resources_are_private_copies_and_the_kept_ones_are_bounded() -> None:
    from korral.server import convert_code

    def ask_bytes(memory: int) -> bytes:
        request = si.AllocationRequest(
            rm_id="rm",
            asks=[
                si.AllocationAsk(allocation_key="a", application_id="app", resource_ask={"memory": memory})
            ],
        )
        return convert.to_pb(request).SerializeToString()

    first = convert.parse(si_pb2.AllocationRequest, ask_bytes(5))
    first.asks[0].resource_ask["memory"] = 999  # the caller's own copy: the next decoding is not moved
    again = convert.parse(si_pb2.AllocationRequest, ask_bytes(5))
    assert again.asks[0].resource_ask == {"memory": 5}
    for memory in range(convert_code.RESOURCE_CACHE + 50):  # more distinct resources than are kept
        decoded = convert.parse(si_pb2.AllocationRequest, ask_bytes(memory + 1))
        assert decoded.asks[0].resource_ask == {"memory": memory + 1}
    assert len(convert_code._resources) <= convert_code.RESOURCE_CACHE


@settings(max_examples=60, deadline=None)
@given(request=message_strategy(si.AllocationRequest))
def test_what_the_plain_reader_decodes_passes_every_check_the_core_runs_on_a_request(
    request: si.AllocationRequest,
) -> None:
    # The gRPC server routes an AllocationRequest the plain reader made without the core's per-item
    # checks (Core._update_allocation_typed): they must find nothing in anything it can make.
    wire = convert.to_pb(request).SerializeToString()
    decoded, typed = convert.parse_typed(si_pb2.AllocationRequest, wire)
    assert typed
    checked = check_allocation_request(decoded)
    assert checked.request is decoded and not checked.ask_rejections
    ordered = session.frame(session.ALLOCATION, wire)
    kind, _, typed = convert.parse_ordered_typed(si_pb2.OrderedRequest, ordered)
    assert (kind, typed) == (session.ALLOCATION, True)


def test_a_request_holding_an_unknown_field_is_read_field_by_field_and_so_checked() -> None:
    wire = convert.to_pb(si.AllocationRequest(rm_id="rm")).SerializeToString() + bytes([0xF8, 0x01, 0x01])
    decoded, typed = convert.parse_typed(si_pb2.AllocationRequest, wire)
    assert decoded == si.AllocationRequest(rm_id="rm") and not typed
