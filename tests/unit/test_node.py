"""Node bookkeeping: available = capacity - allocated - occupied, kept incrementally."""

from __future__ import annotations

import pytest

from korral import resource as res
from korral.model.allocation import Allocation
from korral.model.node import Node


def alloc(uuid: str, resource: dict[str, int], node_id: str = "node-1") -> Allocation:
    return Allocation(
        uuid=uuid, allocation_key=f"key-{uuid}", application_id="app-1", node_id=node_id, resource=resource
    )


def assert_invariant(node: Node) -> None:
    """available == capacity - allocated - occupied, with allocated the sum of the allocations."""
    allocated: dict[str, int] = {}
    for allocation in node.allocations.values():
        res.add_into(allocated, allocation.resource)
    assert res.equals(node.allocated, allocated)
    assert res.equals(node.available, res.sub(res.sub(node.capacity, allocated), node.occupied))


@pytest.mark.parametrize(
    ("capacity", "occupied", "available"),
    [
        pytest.param({"memory": 100, "vcore": 10}, None, {"memory": 100, "vcore": 10}, id="no-occupied"),
        pytest.param(
            {"memory": 100, "vcore": 10}, {"memory": 30}, {"memory": 70, "vcore": 10}, id="occupied"
        ),
        pytest.param({"memory": 100}, {"memory": 100}, {}, id="fully-occupied"),
        pytest.param({"memory": 100}, {"gpu": 1}, {"memory": 100, "gpu": -1}, id="occupied-unknown-type"),
        pytest.param({"memory": 100, "vcore": 0}, {"vcore": 0}, {"memory": 100}, id="zero-entries-pruned"),
        pytest.param({}, None, {}, id="empty-capacity"),
    ],
)
def test_available_on_create(capacity, occupied, available):
    node = Node("node-1", capacity, occupied)
    assert res.equals(node.available, available)
    assert node.allocated == {}
    assert 0 not in node.capacity.values() and 0 not in node.occupied.values(), "kept pruned"
    assert_invariant(node)


def test_defaults():
    node = Node("node-1", {"memory": 10}, attributes={"zone": "a"}, partition="[rm]default")
    assert node.node_id == "node-1"
    assert node.partition == "[rm]default"
    assert node.attributes == {"zone": "a"}
    assert node.schedulable is True
    assert node.reservation is None, "no reservation by default"
    assert node.allocations == {}


def test_inputs_are_copied():
    capacity = {"memory": 10}
    attributes = {"zone": "a"}
    node = Node("node-1", capacity, attributes=attributes)
    capacity["memory"] = 1
    attributes["zone"] = "b"
    assert node.capacity == {"memory": 10}
    assert node.attributes == {"zone": "a"}


@pytest.mark.parametrize(
    ("allocations", "available", "allocated"),
    [
        pytest.param([{"memory": 10}], {"memory": 90, "vcore": 10}, {"memory": 10}, id="one"),
        pytest.param(
            [{"memory": 10, "vcore": 1}, {"memory": 20, "vcore": 2}],
            {"memory": 70, "vcore": 7},
            {"memory": 30, "vcore": 3},
            id="two",
        ),
        pytest.param([{"memory": 100, "vcore": 10}], {}, {"memory": 100, "vcore": 10}, id="fills-node"),
        pytest.param([{"gpu": 1}], {"memory": 100, "vcore": 10, "gpu": -1}, {"gpu": 1}, id="unknown-type"),
    ],
)
def test_add_allocation(allocations, available, allocated):
    node = Node("node-1", {"memory": 100, "vcore": 10})
    for index, resource in enumerate(allocations):
        node.add_allocation(alloc(f"u{index}", resource))
    assert res.equals(node.available, available)
    assert res.equals(node.allocated, allocated)
    assert set(node.allocations) == {f"u{index}" for index in range(len(allocations))}
    assert_invariant(node)


def test_add_allocation_with_occupied():
    node = Node("node-1", {"memory": 100}, {"memory": 30})
    node.add_allocation(alloc("u1", {"memory": 50}))
    assert res.equals(node.available, {"memory": 20})
    assert res.equals(node.allocated, {"memory": 50}), "occupied is not part of allocated"
    assert_invariant(node)


@pytest.mark.parametrize(
    ("remove", "available", "returned"),
    [
        pytest.param("u1", {"memory": 80}, "u1", id="known"),
        pytest.param("missing", {"memory": 70}, None, id="unknown-is-none-and-no-change"),
    ],
)
def test_remove_allocation(remove, available, returned):
    node = Node("node-1", {"memory": 100})
    node.add_allocation(alloc("u1", {"memory": 10}))
    node.add_allocation(alloc("u2", {"memory": 20}))
    removed = node.remove_allocation(remove)
    assert (removed.uuid if removed else None) == returned
    assert res.equals(node.available, available)
    assert_invariant(node)


def test_remove_all_allocations_restores_capacity():
    node = Node("node-1", {"memory": 100, "vcore": 4}, {"vcore": 1})
    node.add_allocation(alloc("u1", {"memory": 10, "vcore": 1}))
    node.remove_allocation("u1")
    assert res.equals(node.available, {"memory": 100, "vcore": 3})
    assert node.allocated == {}
    assert node.remove_allocation("u1") is None, "second removal is a no-op"


@pytest.mark.parametrize(
    ("new_capacity", "delta", "available"),
    [
        pytest.param({"memory": 150, "vcore": 10}, {"memory": 50}, {"memory": 110, "vcore": 8}, id="grow"),
        pytest.param({"memory": 80, "vcore": 10}, {"memory": -20}, {"memory": 40, "vcore": 8}, id="shrink"),
        pytest.param(
            {"memory": 100, "vcore": 10}, {}, {"memory": 60, "vcore": 8}, id="unchanged-empty-delta"
        ),
        pytest.param(
            {"memory": 100, "vcore": 10, "gpu": 2},
            {"gpu": 2},
            {"memory": 60, "vcore": 8, "gpu": 2},
            id="new-type",
        ),
        pytest.param({"memory": 100}, {"vcore": -10}, {"memory": 60, "vcore": -2}, id="type-removed"),
        pytest.param(
            {"memory": 20, "vcore": 10}, {"memory": -80}, {"memory": -20, "vcore": 8}, id="below-allocated"
        ),
        pytest.param(
            {"memory": 100, "vcore": 10, "pods": 0}, {}, {"memory": 60, "vcore": 8}, id="zero-entry-pruned"
        ),
    ],
)
def test_a_new_spec_with_another_capacity_keeps_the_allocations(new_capacity, delta, available):
    node = Node("node-1", {"memory": 100, "vcore": 10}, {"memory": 10})
    node.add_allocation(alloc("u1", {"memory": 30, "vcore": 2}))
    assert node.set_spec(node.spec.updated(capacity=new_capacity)) == delta
    assert res.equals(node.capacity, new_capacity)
    assert res.equals(node.available, available)
    assert res.equals(node.allocated, {"memory": 30, "vcore": 2}), "allocations are untouched"
    assert_invariant(node)


@pytest.mark.parametrize(
    ("occupied", "available"),
    [
        pytest.param({"memory": 40}, {"memory": 30, "vcore": 8}, id="more"),
        pytest.param({}, {"memory": 70, "vcore": 8}, id="cleared"),
        pytest.param({"memory": 10, "vcore": 0}, {"memory": 60, "vcore": 8}, id="zero-entry-pruned"),
        pytest.param({"memory": 90}, {"memory": -20, "vcore": 8}, id="overcommitted"),
    ],
)
def test_a_new_spec_with_other_occupied_resources_keeps_the_allocations(occupied, available):
    node = Node("node-1", {"memory": 100, "vcore": 10}, {"memory": 10})
    node.add_allocation(alloc("u1", {"memory": 30, "vcore": 2}))
    node.set_spec(node.spec.updated(occupied=occupied))
    assert res.equals(node.occupied, occupied)
    assert 0 not in node.occupied.values()
    assert res.equals(node.available, available)
    assert res.equals(node.allocated, {"memory": 30, "vcore": 2})
    assert_invariant(node)


def test_sequence_keeps_invariant():
    node = Node("node-1", {"memory": 100, "vcore": 10})
    node.add_allocation(alloc("u1", {"memory": 10, "vcore": 1}))
    node.set_spec(node.spec.updated(occupied={"memory": 5}))
    node.add_allocation(alloc("u2", {"memory": 20}))
    node.set_spec(node.spec.updated(capacity={"memory": 200, "vcore": 10}))
    node.remove_allocation("u1")
    node.set_spec(node.spec.updated(occupied={}))
    assert res.equals(node.available, {"memory": 180, "vcore": 10})
    assert res.equals(node.allocated, {"memory": 20})
    assert_invariant(node)


@pytest.mark.parametrize(
    ("ask", "fits", "capacity_fits"),
    [
        pytest.param({"memory": 50}, True, True, id="fits-available"),
        pytest.param({"memory": 60}, True, True, id="exactly-available"),
        pytest.param({"memory": 61}, False, True, id="over-available-within-capacity"),
        pytest.param({"memory": 100}, False, True, id="exactly-capacity"),
        pytest.param({"memory": 101}, False, False, id="over-capacity"),
        pytest.param({"gpu": 1}, False, False, id="type-node-lacks"),
        pytest.param({"vcore": 8}, True, True, id="other-type"),
        pytest.param({"vcore": 9}, False, True, id="other-type-over-available"),
    ],
)
def test_fits_vs_capacity_fits(ask, fits, capacity_fits):
    node = Node("node-1", {"memory": 100, "vcore": 10}, {"memory": 10})
    node.add_allocation(alloc("u1", {"memory": 30, "vcore": 2}))
    assert node.fits(ask) is fits
    assert node.capacity_fits(ask) is capacity_fits


@pytest.mark.parametrize(
    ("capacity", "occupied", "allocations", "full"),
    [
        pytest.param({"memory": 100}, None, [], False, id="empty-node"),
        pytest.param({"memory": 100}, None, [{"memory": 100}], True, id="allocated-full"),
        pytest.param({"memory": 100}, {"memory": 100}, [], True, id="occupied-full"),
        pytest.param({"memory": 100, "vcore": 1}, None, [{"memory": 100}], False, id="one-type-left"),
        pytest.param({"memory": 100}, {"memory": 60}, [{"memory": 50}], True, id="overcommitted"),
        pytest.param({}, None, [], True, id="no-capacity"),
    ],
)
def test_is_full(capacity, occupied, allocations, full):
    node = Node("node-1", capacity, occupied)
    for index, resource in enumerate(allocations):
        node.add_allocation(alloc(f"u{index}", resource))
    assert node.is_full() is full


def test_reservations_are_held_in_order_and_the_first_is_the_reservation():
    node = Node("node-1", {"memory": 10})
    node.reservations = (("app-1", "ask-1"), ("app-2", "ask-2"))
    assert node.reservation == ("app-1", "ask-1")
    node.reservations = ()
    assert node.reservation is None
