"""SchedulingView: recovered allocations, node facts, discarded nodes and applications, timed work."""

from __future__ import annotations

import pytest
import view_helpers
from view_helpers import CONFIG, S, allocated_of, ask, insert, one_app, owner_puts, pending_of, recovered

from korral import resource as res
from korral.config import load_config
from korral.model.allocation import Allocation
from korral.model.node import NodeSpec

# the shared fixtures: pytest finds a fixture by its name in the test module
make_view = view_helpers.make_view
view = view_helpers.view


# ---- adopt_recovered ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("allocation", "adopted"),
    [
        pytest.param(recovered("app-1", "r1"), True, id="known-app-and-node"),
        pytest.param(recovered("app-1", "r1", resource={"vcore": 20000}), True, id="above-queue-max"),
        pytest.param(recovered("app-1", "r1", resource={"vcore": 9000}), True, id="above-node-capacity"),
        pytest.param(recovered("ghost", "r1"), False, id="unknown-application"),
        pytest.param(recovered("app-1", "r1", node="ghost"), False, id="unknown-node"),
        pytest.param(recovered("app-1", "r1", resource={"vcore": 0}), False, id="no-resources"),
        pytest.param(recovered("app-1", "r1", resource={"vcore": -5}), False, id="negative-resources"),
    ],
)
def test_adopt_recovered(view, invariants, allocation, adopted):
    view.add_node("n1", {"vcore": 4000})
    insert(view, "app-1", "root.a")
    for _ in range(2):  # a duplicate is ignored
        view.adopt_recovered(allocation)
        app = view.applications["app-1"]
        if adopted:
            assert list(app.allocations) == ["r1"] and app.allocations["r1"].recovered
            assert list(view.nodes["n1"].allocations) == ["r1"]
            assert allocated_of(view, "root.a", "root") == [allocation.resource] * 2
            assert app.state is S.RUNNING
        else:
            assert app.allocations == {} and view.nodes["n1"].allocations == {}
            assert allocated_of(view, "root.a", "root") == [{}, {}]
            assert app.state is S.NEW
        invariants(view)


def test_adopted_allocation_survives_node_removal_without_owing_a_repeat(view):
    one_app(view)
    view.adopt_recovered(recovered("app-1", "r1"))
    view.discard_node("n1")
    view.rollback(recovered("app-1", "r1"))
    assert view.applications["app-1"].asks["k"].pending == 2
    assert view.applications["app-1"].allocations == {}


# ---- set_node ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capacity", "occupied", "attributes", "schedulable", "available", "in_order"),
    [
        pytest.param({"vcore": 8000}, {}, {}, True, {"vcore": 7000}, True, id="capacity-grows"),
        pytest.param({"vcore": 2000}, {}, {}, True, {"vcore": 1000}, True, id="capacity-shrinks"),
        pytest.param({"vcore": 500}, {}, {}, True, {"vcore": -500}, False, id="capacity-below-allocated"),
        pytest.param({"vcore": 4000}, {"vcore": 2500}, {}, True, {"vcore": 500}, True, id="occupied"),
        pytest.param({"vcore": 4000}, {"vcore": 3000}, {}, True, {}, False, id="occupied-fills-node"),
        pytest.param({"vcore": 4000}, {}, {"si/zone": "z2"}, True, {"vcore": 3000}, True, id="attributes"),
        pytest.param({"vcore": 4000}, {}, {}, False, {"vcore": 3000}, False, id="unschedulable"),
    ],
)
def test_set_node_reflects_owner_facts(
    view, capacity, occupied, attributes, schedulable, available, in_order
):
    one_app(view, repeat=3)
    view.set_node(
        NodeSpec(
            node_id="n1",
            capacity={"vcore": 4000},
            occupied={},
            attributes={"si/zone": "z1"},
            schedulable=True,
        )
    )
    view.schedule_one()  # one allocation booked in the view: it stays the view's own

    view.set_node(
        NodeSpec(
            node_id="n1", capacity=capacity, occupied=occupied, attributes=attributes, schedulable=schedulable
        )
    )

    node = view.nodes["n1"]
    assert node.capacity == capacity and res.prune(node.occupied) == occupied
    assert res.prune(node.available) == available
    assert node.attributes == attributes and node.schedulable is schedulable
    assert len(node.allocations) == 1
    assert view.capacity == capacity
    assert ("n1" in view.node_order) is in_order
    view.refresh_limits()
    assert view.root.max == capacity


def test_set_node_unschedulable_and_back(view):
    one_app(view)
    view.set_node(
        NodeSpec(node_id="n1", capacity={"vcore": 4000}, occupied={}, attributes={}, schedulable=False)
    )
    assert view.schedule_one() is None
    view.set_node(
        NodeSpec(node_id="n1", capacity={"vcore": 4000}, occupied={}, attributes={}, schedulable=True)
    )
    assert view.schedule_one() is not None


def test_set_node_unchanged_values_are_a_no_op(view, monkeypatch):
    view.add_node("n1", {"vcore": 4000, "memory": 100}, occupied={"memory": 10}, attributes={"a": "1"})
    calls: list[str] = []
    monkeypatch.setattr(view, "update_node", lambda *a, **k: calls.append("update_node"))
    monkeypatch.setattr(view, "set_node_schedulable", lambda *a, **k: calls.append("set_node_schedulable"))
    epoch = view.registry.resource_epoch

    # the same facts, one with an explicit zero: nothing to change
    view.set_node(
        NodeSpec(
            node_id="n1",
            capacity={"vcore": 4000, "memory": 100, "gpu": 0},
            occupied={"memory": 10},
            attributes={"a": "1"},
            schedulable=True,
        )
    )

    assert calls == []
    assert view.registry.resource_epoch == epoch


def test_set_node_unknown_node_is_ignored(view):
    view.set_node(
        NodeSpec(node_id="ghost", capacity={"vcore": 1}, occupied={}, attributes={}, schedulable=True)
    )
    assert view.nodes == {} and view.capacity == {}


# ---- discard_node / discard_application ---------------------------------------------------------------


def test_discard_node_is_idempotent(view, invariants):
    one_app(view, repeat=3)
    view.add_node("n2", {"vcore": 1000})
    view.adopt_recovered(recovered("app-1", "r1", node="n1"))
    view.schedule()  # proposals on n1 and n2

    for _ in range(2):
        view.discard_node("n1")
        assert "n1" not in view.nodes and "n1" not in view.node_order
        assert view.capacity == {"vcore": 1000}
        app = view.applications["app-1"]
        assert all(a.node_id == "n2" for a in app.allocations.values())
        assert allocated_of(view, "root.a") == [{"vcore": 1000}]
        invariants(view)


def test_discard_node_names_everything_that_ran_there_by_application(view):
    one_app(view, repeat=3)
    view.add_node("n2", {"vcore": 1000})
    insert(view, "app-0", "root.b")
    view.adopt_recovered(recovered("app-0", "r0", node="n1"))
    view.schedule()  # app-1: two proposals on n1 (room for 3, one taken by r0), one on n2
    on_n1 = sorted(u for u, a in view.applications["app-1"].allocations.items() if a.node_id == "n1")
    assert len(on_n1) == 2

    gone = view.discard_node("n1")

    # proposals still on their way count: their owner confirms them first (its mailbox order)
    assert {app: sorted(uuids) for app, uuids in gone.items()} == {"app-0": ["r0"], "app-1": on_n1}
    assert view.discard_node("n1") == {}, "a second removal names nothing"


def test_the_view_notes_each_booking_and_freeing_on_a_node_in_order(view):
    one_app(view, repeat=2)
    first = view.schedule_one()
    second = view.schedule_one()
    assert first is not None and second is not None
    assert view.node_changes == [first, second]  # bookings: the allocations themselves, on n1
    view.node_changes.clear()  # published (the scheduler clears the list in place)

    view.rollback(first)
    view.forget_allocation(second)
    view.adopt_recovered(recovered("app-1", "r1"))
    view.discard_node("n1")

    r1 = view.node_changes[2]
    assert isinstance(r1, Allocation) and (r1.uuid, r1.node_id) == ("r1", "n1")
    assert view.node_changes == [
        ("n1", first.uuid),
        ("n1", second.uuid),
        r1,
        ("n1", "r1"),
        ("n1", ""),  # the node left with whatever it held
    ]


def test_a_models_own_nodes_note_nothing(view):
    """Only the view's nodes keep notes (for the node board): the reference's model writes none."""
    from korral.model.partition.composed import PartitionModel

    model = PartitionModel("[rm]default", load_config(CONFIG).partitions[0], rm_id="rm")
    node = model.add_node("n1", {"vcore": 4000})
    assert node.journal is None
    assert view.add_node("n1", {"vcore": 4000}).journal is view.node_changes


def test_discard_node_cancels_its_reservation(make_view, clock):
    view = make_view(reservation_delay=1.0)
    view.add_node("n1", {"vcore": 4000})
    view.add_node("n2", {"vcore": 2000})  # the cluster is large enough: the ask waits for a node
    insert(view, "app-0", "root.b")
    view.adopt_recovered(recovered("app-0", "r0", resource={"vcore": 2000}))
    insert(view, "app-1", "root.a")
    owner_puts(view, [ask("app-1", "big", {"vcore": 3000})])
    assert view.schedule_one() is None
    clock.advance(5.0)
    assert view.schedule_one() is None
    assert view.reservations == {("app-1", "big"): "n1"}

    view.discard_node("n1")
    assert view.reservations == {} and view.applications["app-1"].reservations == {}


def test_discard_application_is_idempotent(view, invariants):
    one_app(view, repeat=3)
    insert(view, "app-2", "root.a")
    owner_puts(view, [ask("app-2", "k", {"vcore": 500})])
    proposals = view.schedule()
    assert {a.application_id for a in proposals} == {"app-1", "app-2"}

    for _ in range(2):
        view.discard_application("app-1")
        assert "app-1" not in view.applications
        assert "app-1" not in view.queues["root.a"].applications
        assert pending_of(view, "root.a") == [{}]
        assert allocated_of(view, "root.a") == [{"vcore": 500}]
        assert view.nodes["n1"].available == {"vcore": 3500}
        assert all(a.application_id == "app-2" for a in view.nodes["n1"].allocations.values())
        invariants(view)

    for proposal in proposals:  # late messages about it change nothing
        if proposal.application_id == "app-1":
            view.rollback(proposal)
            view.forget_allocation(proposal)
    owner_puts(view, [ask("app-1", "again", generation=9)])
    view.drop_ask("app-1", "k", 1)
    assert "app-1" not in view.applications


def test_discard_application_forgets_what_its_removed_node_owed(view):
    one_app(view)
    proposal = view.schedule_one()
    view.discard_node("n1")
    view.discard_application("app-1")
    # the application comes back under the same id (a new submission): the old proposal owes it nothing
    insert(view, "app-1", "root.a")
    owner_puts(view, [ask("app-1", "k", repeat=2, generation=1)])
    view.rollback(proposal)
    assert view.applications["app-1"].asks["k"].pending == 2


# ---- has_timed_work ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "timed"),
    [
        pytest.param(None, False, id="nothing-pending"),
        pytest.param({"vcore": 1000}, False, id="fits-and-placed"),
        pytest.param({"vcore": 6000}, True, id="fits-no-node-unschedulable"),
        pytest.param({"vcore": 60000}, True, id="larger-than-the-cluster"),
        pytest.param({"memory": 1}, True, id="type-no-node-has"),
    ],
)
def test_has_timed_work(view, resource, timed):
    view.add_node("n1", {"vcore": 4000})
    view.add_node("n2", {"vcore": 4000})
    insert(view, "app-1", "root.b")
    if resource is not None:
        owner_puts(view, [ask("app-1", "k", resource)])
    view.schedule()
    assert view.has_timed_work() is timed
    view.drop_ask("app-1", "k", 1)
    assert view.has_timed_work() is False


def test_has_timed_work_with_a_reservation(make_view, clock):
    view = make_view(reservation_delay=1.0)
    view.add_node("n1", {"vcore": 4000})
    view.add_node("n2", {"vcore": 2000})
    insert(view, "app-1", "root.b")
    view.adopt_recovered(recovered("app-1", "r1", resource={"vcore": 2000}))
    owner_puts(view, [ask("app-1", "k", {"vcore": 3000})])
    view.schedule()
    clock.advance(2.0)
    view.schedule()
    assert view.reservations and view.has_timed_work()
    view.drop_ask("app-1", "k", 1)
    assert view.reservations == {} and not view.has_timed_work()
