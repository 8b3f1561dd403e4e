"""Event records (reference 2.18) and partition naming, as an RM receiving them sees them."""

from __future__ import annotations

import time

import attrs
import pytest

from korral import si
from korral.model import events
from korral.model.allocation import Allocation
from korral.model.app.application import ApplicationState
from korral.model.naming import DEFAULT_PARTITION, normalize_partition_name, partition_without_rm

Kind = si.EventRecordType
Change = si.EventChangeType
Detail = si.EventChangeDetail

ALLOCATION = Allocation(
    uuid="[rm]default-7",
    allocation_key="pod-1",
    application_id="app-1",
    node_id="node-3",
    resource={"vcore": 500, "memory": 64},
    queue_path="root.a",
)


# ---- record ------------------------------------------------------------------------------------------


def test_record_fields():
    resource = {"vcore": 1}
    before = time.time_ns()
    record = events.record(
        Kind.NODE,
        "node-1",
        "hello",
        Change.SET,
        Detail.NODE_CAPACITY,
        reference_id="ref",
        resource=resource,
        group_id="grp",
    )
    after = time.time_ns()

    assert isinstance(record, si.EventRecord)
    assert record.type is Kind.NODE
    assert (record.object_id, record.message, record.reference_id, record.group_id) == (
        "node-1",
        "hello",
        "ref",
        "grp",
    )
    assert record.event_change_type is Change.SET
    assert record.event_change_detail is Detail.NODE_CAPACITY
    assert record.resource == {"vcore": 1} and record.resource is not resource
    assert before <= record.timestamp_nano <= after
    assert record.reason == ""


def test_record_defaults():
    record = events.record(Kind.QUEUE, "root.a", "msg")
    assert record.event_change_type is Change.NONE
    assert record.event_change_detail is Detail.DETAILS_NONE
    assert (record.reference_id, record.group_id, record.resource) == ("", "", {})
    assert record.timestamp_nano > 0


def test_records_are_immutable():
    record = events.record(Kind.APP, "app-1", "msg")
    with pytest.raises(AttributeError):
        record.message = "changed"  # type: ignore[misc]


# ---- application state -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "detail"),
    [pytest.param(state, detail, id=state) for state, detail in events.APP_STATE_DETAIL.items()],
)
def test_app_state_detail_per_state(state, detail):
    record = events.app_state("app-1", state, "root.a")
    assert record.type is Kind.APP
    assert record.object_id == "app-1" and record.group_id == "root.a"
    assert record.event_change_type is Change.SET
    assert record.event_change_detail is detail
    assert record.message == f"application app-1 is {state}"
    assert record.reference_id == "" and record.resource == {}


@pytest.mark.parametrize(
    ("state", "detail"),
    [
        pytest.param("New", 203, id="New"),
        pytest.param("Accepted", 204, id="Accepted"),
        pytest.param("Starting", 205, id="Starting"),
        pytest.param("Running", 206, id="Running"),
        pytest.param("Completing", 207, id="Completing"),
        pytest.param("Completed", 208, id="Completed"),
        pytest.param("Rejected", 202, id="Rejected"),
        pytest.param("Failing", 209, id="Failing"),
        pytest.param("Failed", 210, id="Failed"),
        pytest.param("Resuming", 211, id="Resuming"),
        pytest.param("Expired", 212, id="Expired"),
    ],
)
def test_app_state_detail_numbers_are_the_si_ones(state, detail):
    assert int(events.APP_STATE_DETAIL[state]) == detail


def test_every_application_state_has_a_detail():
    assert set(events.APP_STATE_DETAIL) == {state.value for state in ApplicationState}


@pytest.mark.parametrize("state", ["", "Unknown", "running"], ids=["empty", "unknown", "wrong-case"])
def test_app_state_unknown_state_has_no_detail(state):
    assert events.app_state("app-1", state, "root.a").event_change_detail is Detail.DETAILS_NONE


# ---- application allocations ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        pytest.param(Change.ADD, Detail.APP_ALLOC, id="add"),
        pytest.param(Change.REMOVE, Detail.ALLOC_CANCEL, id="remove"),
    ],
)
@pytest.mark.parametrize(
    ("message", "expected_message"),
    [
        pytest.param("", "allocation [rm]default-7 on node node-3", id="default-message"),
        pytest.param("Node node-3 Removed", "Node node-3 Removed", id="given-message"),
    ],
)
def test_app_allocation(change, detail, message, expected_message):
    record = events.app_allocation(ALLOCATION, change, message)
    assert record.type is Kind.APP
    assert record.object_id == "app-1"
    assert record.event_change_type is change
    assert record.event_change_detail is detail
    assert record.reference_id == "[rm]default-7"
    assert record.resource == {"vcore": 500, "memory": 64}
    assert record.resource is not ALLOCATION.resource, "the record never shares the allocation's dict"
    assert record.message == expected_message


@pytest.mark.parametrize(
    ("termination", "detail"),
    [
        pytest.param(si.TerminationType.TIMEOUT, Detail.ALLOC_TIMEOUT, id="timeout"),
        pytest.param(si.TerminationType.PREEMPTED_BY_SCHEDULER, Detail.ALLOC_PREEMPT, id="preempted"),
        pytest.param(si.TerminationType.PLACEHOLDER_REPLACED, Detail.ALLOC_REPLACED, id="replaced"),
    ],
)
def test_app_allocation_remove_detail_follows_the_termination_type(termination, detail):
    record = events.app_allocation(ALLOCATION, Change.REMOVE, termination=termination)  # type: ignore[call-arg]
    assert record.event_change_detail is detail


# ---- requests, nodes, queues --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        pytest.param(Change.ADD, Detail.APP_REQUEST, id="add"),
        pytest.param(Change.REMOVE, Detail.REQUEST_CANCEL, id="remove"),
    ],
)
def test_request(change, detail):
    record = events.request("app-1", "pod-1", change, "ask added")
    assert record.type is Kind.REQUEST
    assert record.object_id == "pod-1" and record.group_id == "app-1"
    assert record.event_change_type is change
    assert record.event_change_detail is detail
    assert record.message == "ask added"


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        pytest.param(Change.ADD, Detail.DETAILS_NONE, id="add"),
        pytest.param(Change.SET, Detail.NODE_SCHEDULABLE, id="schedulable"),
        pytest.param(Change.SET, Detail.NODE_CAPACITY, id="capacity"),
        pytest.param(Change.SET, Detail.NODE_OCCUPIED, id="occupied"),
        pytest.param(Change.REMOVE, Detail.NODE_DECOMISSION, id="decommission"),
    ],
)
def test_node_record(change, detail):
    record = events.node("node-1", change, detail, "node changed")
    assert record.type is Kind.NODE
    assert record.object_id == "node-1"
    assert (record.event_change_type, record.event_change_detail) == (change, detail)
    assert record.message == "node changed" and record.group_id == "" and record.reference_id == ""


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        pytest.param(Change.ADD, Detail.QUEUE_CONFIG, id="configured"),
        pytest.param(Change.ADD, Detail.QUEUE_DYNAMIC, id="dynamic"),
        pytest.param(Change.SET, Detail.QUEUE_MAX, id="max"),
        pytest.param(Change.REMOVE, Detail.QUEUE_CONFIG, id="removed"),
    ],
)
def test_queue_record(change, detail):
    record = events.queue("root.a", change, detail, "queue changed")
    assert record.type is Kind.QUEUE
    assert record.object_id == "root.a"
    assert (record.event_change_type, record.event_change_detail) == (change, detail)
    assert record.message == "queue changed"


# ---- naming ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "rm_id", "expected"),
    [
        pytest.param("", "rm1", "[rm1]default", id="empty-means-default"),
        pytest.param("default", "rm1", "[rm1]default", id="default"),
        pytest.param("gpu", "rm-2", "[rm-2]gpu", id="named"),
        pytest.param("GPU", "rm1", "[rm1]gpu", id="lower-cased"),
        pytest.param("[rm1]default", "rm1", "[rm1]default", id="already-normalized"),
        pytest.param("[other]gpu", "rm1", "[other]gpu", id="other-rm-kept"),
        pytest.param("[rm1]GPU", "rm1", "[rm1]GPU", id="bracketed-kept-as-is"),
        pytest.param("[broken", "rm1", "[broken", id="bracket-without-close-kept"),
        pytest.param("", "", "[]default", id="empty-rm-id"),
    ],
)
def test_normalize_partition_name(name, rm_id, expected):
    assert normalize_partition_name(name, rm_id) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("[rm1]default", "default", id="normalized"),
        pytest.param("[rm-2]gpu", "gpu", id="other-rm"),
        pytest.param("[]default", "default", id="empty-rm-id"),
        pytest.param("[rm1]", "", id="no-name"),
        pytest.param("default", "default", id="plain-name"),
        pytest.param("", "", id="empty"),
        pytest.param("[broken", "[broken", id="no-closing-bracket"),
        pytest.param("[a]b]c", "b]c", id="first-bracket-only"),
    ],
)
def test_partition_without_rm(name, expected):
    assert partition_without_rm(name) == expected


@pytest.mark.parametrize("name", ["", "default", "gpu", "Mixed"], ids=["empty", "default", "gpu", "mixed"])
def test_partition_name_round_trip(name):
    core = normalize_partition_name(name, "rm1")
    assert partition_without_rm(core) == (name or DEFAULT_PARTITION).lower()
    assert normalize_partition_name(core, "rm1") == core, "normalizing twice changes nothing"


def test_record_builds_what_the_attrs_constructor_builds() -> None:
    """events.record bypasses si.EventRecord's converters for speed: it must build the same record."""
    ev = events

    made = ev.record(
        ev.Kind.APP,
        "app",
        "msg",
        ev.Change.ADD,
        ev.Detail.APP_ALLOC,
        reference_id="u",
        resource={"memory": 1},
    )
    expected = si.EventRecord(
        type=ev.Kind.APP,
        object_id="app",
        message="msg",
        timestamp_nano=made.timestamp_nano,
        event_change_type=ev.Change.ADD,
        event_change_detail=ev.Detail.APP_ALLOC,
        reference_id="u",
        resource={"memory": 1},
    )
    assert made == expected and repr(made) == repr(expected)
    assert ev.stamped([made], 7) == [attrs.evolve(expected, timestamp_nano=7)]
