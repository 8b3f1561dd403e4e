"""PartitionModel scenarios: reservations, unschedulable asks and predicates."""

from __future__ import annotations

import pytest
from partition_helpers import by_app, by_node, conf, reservation_setup

# ---- reservations -----------------------------------------------------------------------------------------


def test_reserved_nodes_are_skipped_by_other_asks(make_partition):
    p = reservation_setup(make_partition)
    assert p.schedule() == []
    assert p.reservations == {("app-2", "large-1"): "node-1", ("app-2", "large-2"): "node-2"}
    assert p.applications["app-2"].reservations == {"large-1": "node-1", "large-2": "node-2"}
    assert p.nodes["node-1"].reservation == ("app-2", "large-1")
    # app-3's small asks would fit, but both nodes are held: app-3 is starved
    assert p.applications["app-3"].allocations == {}
    assert ("app-3", "small") in p.unschedulable


def test_reservation_waits_for_the_reservation_delay(make_partition, clock):
    p = reservation_setup(make_partition, delay=2.0)
    p.remove_ask("app-3", "small")
    assert p.schedule() == []
    assert p.reservations == {}
    assert set(p.unschedulable) == {("app-2", "large-1"), ("app-2", "large-2")}

    clock.now = 1.9
    assert p.schedule() == [] and p.reservations == {}
    clock.now = 2.0
    assert p.schedule() == []
    assert set(p.reservations) == {("app-2", "large-1"), ("app-2", "large-2")}


def test_reserved_ask_is_allocated_first_when_room_appears(make_partition):
    p = reservation_setup(make_partition)
    p.schedule()
    # a high priority competitor arrives in the other queue
    p.add_application("app-4", queue_name="root.leaf-1", user="u")
    p.add_ask("app-4", "rival", {"memory": 20, "vcore": 20}, priority=1000)
    on_node_1 = next(a for a in p.applications["app-1"].allocations.values() if a.node_id == "node-1")
    p.release_allocation("app-1", on_node_1.uuid)

    first = p.schedule_one()
    assert (first.application_id, first.allocation_key, first.node_id) == ("app-2", "large-1", "node-1")
    assert ("app-2", "large-1") not in p.reservations
    assert p.nodes["node-1"].reservation is None
    assert ("app-2", "large-1") not in p.unschedulable


def test_removing_the_blocking_application_fills_every_reservation(make_partition):
    p = reservation_setup(make_partition)
    p.schedule()
    p.remove_application("app-1")
    made = p.schedule()
    assert [(a.allocation_key, a.node_id) for a in made[:2]] == [("large-1", "node-1"), ("large-2", "node-2")]
    assert by_app(made) == {"app-2": 2, "app-3": 2}
    assert p.reservations == {}
    assert p.queues["root.leaf-2"].allocated == {"memory": 50, "vcore": 50}
    assert p.unschedulable == {}


def test_reserved_ask_allocated_elsewhere_cancels_its_reservation(make_partition):
    """YuniKorn's TestAddNewNode: a new node takes the reserved asks, both reservations go."""
    p = reservation_setup(make_partition)
    p.schedule()
    p.add_node("node-3", {"memory": 50, "vcore": 50})
    made = p.schedule()
    assert [(a.allocation_key, a.node_id) for a in made[:2]] == [("large-1", "node-3"), ("large-2", "node-3")]
    assert p.reservations == {}
    assert p.nodes["node-1"].reservation is None and p.nodes["node-2"].reservation is None
    # the released nodes are usable again: app-3's small asks land on them
    assert {a.node_id for a in made if a.application_id == "app-3"} <= {"node-1", "node-2", "node-3"}
    assert by_app(made)["app-3"] == 2


@pytest.mark.parametrize(
    "cancel",
    [
        pytest.param(lambda p: p.remove_ask("app-2", "large-1"), id="remove-ask"),
        pytest.param(lambda p: p.add_ask("app-2", "large-1", {"memory": 20, "vcore": 20}), id="replace-ask"),
        pytest.param(lambda p: p.remove_node("node-1"), id="remove-node"),
        pytest.param(lambda p: p.remove_application("app-2"), id="remove-application"),
    ],
)
def test_reservation_is_cancelled_when_its_ask_node_or_application_goes(make_partition, cancel):
    p = reservation_setup(make_partition)
    p.schedule()
    assert p.reservations[("app-2", "large-1")] == "node-1"

    cancel(p)
    assert ("app-2", "large-1") not in p.reservations
    if "node-1" in p.nodes:
        assert p.nodes["node-1"].reservation is None
    app = p.applications.get("app-2")
    if app is not None:
        assert "large-1" not in app.reservations


def test_reservation_picks_the_node_closest_to_fitting(make_partition):
    p = make_partition(conf("- name: leaf"), reservation_delay=0.0)
    p.add_node("almost", {"memory": 100, "vcore": 100}, occupied={"memory": 60, "vcore": 60})
    p.add_node("far", {"memory": 100, "vcore": 100}, occupied={"memory": 90, "vcore": 90})
    p.add_node("tiny", {"memory": 10, "vcore": 10})  # can never hold the ask: not reservable
    p.add_application("app-1", queue_name="root.leaf", user="u")
    p.add_ask("app-1", "x", {"memory": 50, "vcore": 50})
    assert p.schedule() == []
    assert p.reservations == {("app-1", "x"): "almost"}


def test_no_reservation_when_no_node_could_ever_hold_the_ask(make_partition):
    p = make_partition(conf("- name: leaf"), reservation_delay=0.0)
    p.add_node("node-1", {"memory": 10, "vcore": 10})
    p.add_application("app-1", queue_name="root.leaf", user="u")
    p.add_ask("app-1", "huge", {"memory": 50})
    assert p.schedule() == []
    assert p.reservations == {}
    assert set(p.unschedulable) == {("app-1", "huge")}


def test_a_node_holds_one_reservation(make_partition):
    p = make_partition(conf("- name: leaf"), reservation_delay=0.0)
    p.add_node("node-1", {"memory": 10}, occupied={"memory": 5})
    p.add_node("node-2", {"memory": 10}, occupied={"memory": 5})
    p.add_application("app-1", queue_name="root.leaf", user="u")
    for key in ("a", "b", "c"):
        p.add_ask("app-1", key, {"memory": 8})
    p.schedule()
    # one reservation per node: the third ask finds no node to hold
    assert p.reservations == {("app-1", "a"): "node-1", ("app-1", "b"): "node-2"}
    assert set(p.unschedulable) == {("app-1", "a"), ("app-1", "b"), ("app-1", "c")}

    p.update_node("node-1", occupied={})
    made = p.schedule()
    assert [(a.allocation_key, a.node_id) for a in made] == [("a", "node-1")]
    # node-1 is free to be reserved again: the waiting ask takes it
    assert p.reservations == {("app-1", "b"): "node-2", ("app-1", "c"): "node-1"}


# ---- unschedulable asks and predicates ------------------------------------------------------------------


def test_unschedulable_asks_are_recorded_and_cleared(make_partition):
    p = make_partition(conf("- name: q\n  resources:\n    max: {memory: 100}"))
    p.add_node("node-1", {"memory": 40, "vcore": 100})
    p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "too-big-for-nodes", {"memory": 60})
    p.add_ask("app-1", "too-big-for-queue", {"memory": 120})
    assert p.schedule() == []
    assert set(p.unschedulable) == {("app-1", "too-big-for-nodes")}
    entry = p.unschedulable[("app-1", "too-big-for-nodes")]
    assert (entry.application_id, entry.allocation_key) == ("app-1", "too-big-for-nodes")

    p.add_node("node-2", {"memory": 80, "vcore": 100})
    assert [a.allocation_key for a in p.schedule()] == ["too-big-for-nodes"]
    assert p.unschedulable == {}


def test_asks_waiting_in_a_full_cluster_are_outstanding(make_partition):
    """Only the cluster's size is in the way: the RM is told so it may scale up (not a quota matter)."""
    p = make_partition(
        conf(
            """
            - name: q
              resources: {max: {memory: 1000}}
            - name: capped
              resources: {max: {memory: 10}}
            """
        )
    )
    p.add_node("node-1", {"memory": 100})
    p.add_application("app-1", queue_name="root.q", user="u")
    p.add_application("app-2", queue_name="root.capped", user="u")
    p.add_ask("app-2", "fill", {"memory": 10})
    p.add_ask("app-1", "fill", {"memory": 30}, max_allocations=3)
    assert len(p.schedule()) == 4  # the node is full
    p.add_ask("app-1", "wait", {"memory": 20})
    p.add_ask("app-2", "over-max", {"memory": 5})
    assert p.schedule() == []
    # app-1's ask fits its queue but not the cluster; app-2's is over its own queue's max
    assert set(p.unschedulable) == {("app-1", "wait")}

    p.add_node("node-2", {"memory": 100})
    assert [a.allocation_key for a in p.schedule()] == ["wait"]
    assert p.unschedulable == {}


@pytest.mark.parametrize(
    "leave",
    [
        pytest.param(lambda p: p.remove_ask("app-1", "x"), id="ask-removed"),
        pytest.param(lambda p: p.remove_application("app-1"), id="application-removed"),
    ],
)
def test_unschedulable_entry_goes_with_its_ask(make_partition, leave):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 10})
    p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "x", {"memory": 60})
    p.schedule()
    assert ("app-1", "x") in p.unschedulable
    leave(p)
    assert p.unschedulable == {}


def test_replaced_ask_that_fits_clears_its_unschedulable_entry(make_partition):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 10})
    p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "x", {"memory": 60})
    p.schedule()
    assert ("app-1", "x") in p.unschedulable

    p.add_ask("app-1", "x", {"memory": 5})  # the RM shrinks the request
    assert len(p.schedule()) == 1
    assert p.unschedulable == {}


def _reject_node_1(allocation_key, node_id, allocate):
    return node_id != "node-1"


def _raise_on_node_1(allocation_key, node_id, allocate):
    if node_id == "node-1":
        raise RuntimeError("plugin crashed")
    return True


@pytest.mark.parametrize("predicate", [_reject_node_1, _raise_on_node_1], ids=["false", "raises"])
def test_predicate_failure_excludes_the_node(make_partition, predicate):
    p = make_partition(conf("- name: q", partition="nodesortpolicy: {type: binpacking}"), predicate=predicate)
    p.add_node("node-1", {"memory": 100}, occupied={"memory": 50})  # binpacking would pick it first
    p.add_node("node-2", {"memory": 100})
    p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "x", {"memory": 10}, max_allocations=3)
    assert set(by_node(p.schedule())) == {"node-2"}


def test_predicates_see_allocations_and_reservations(make_partition):
    calls: list[tuple[str, str, bool]] = []

    def predicate(allocation_key, node_id, allocate):
        calls.append((allocation_key, node_id, allocate))
        return node_id == "node-2"

    p = make_partition(conf("- name: q"), predicate=predicate, reservation_delay=0.0)
    p.add_node("node-1", {"memory": 100})
    p.add_node("node-2", {"memory": 100}, occupied={"memory": 95})
    p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "x", {"memory": 10})
    assert p.schedule() == []
    assert ("x", "node-1", True) in calls  # node-1 fits but is refused
    assert ("x", "node-2", False) in calls  # reservation check
    assert p.reservations == {("app-1", "x"): "node-2"}
    assert set(p.unschedulable) == {("app-1", "x")}
