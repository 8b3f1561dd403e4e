"""Scripted interleavings around nodes: decommissioned while allocations are placed, full under a decision."""

from __future__ import annotations

import interleavings_helpers
from interleavings_helpers import BIG, PARTITION, RM, SETTINGS, SMALL, Run, place_held_at, pooled, to

from korral import si
from korral import testing as t
from korral.actors.messages import (
    CompletingTimeout,
    NodeGone,
    NodeRemoved,
    Placed,
    RecoverAllocations,
    ReleaseAllocations,
    UpdateNode,
)

# the shared fixtures: pytest finds a fixture by its name in the test module
_view_probe_handler = interleavings_helpers._view_probe_handler
run = interleavings_helpers.run
seed = interleavings_helpers.seed


# ---- node decommissioned while allocations are placed on it ------------------------------------------------


def test_node_decommissioned_after_the_placements_were_confirmed(run: Run) -> None:
    """Pinned: the application confirmed its placements (the RM has them), then the node leaves: the
    scheduler's view, the record of what runs on the node, has the application release them all."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    place_held_at(run, "n1", "app", 5)
    run.tick()
    run.idle()
    assert len(run.rm.live) == 5
    node = run.core.node(PARTITION, "n1")
    assert node is not None and len(node.allocations) == 5, "the node shows what the view booked"
    with run.script.holding(to("app/app")):
        run.core.update_node(t.node_action(RM, "n1", si.NodeAction.DECOMISSION))
        run.idle()
        assert run.queued(to("app/app"), NodeRemoved)
    run.idle()
    assert run.core.node(PARTITION, "n1") is None
    assert not run.rm.live, "allocations on a decommissioned node live on"
    released = {r.allocation_key for r in run.rm.released}
    assert released == {f"app-k{i}" for i in range(5)}
    assert all(r.termination_type == si.TerminationType.STOPPED_BY_RM for r in run.rm.released)
    assert run.core.queue(PARTITION, "root.a").allocated == {}
    run.check()


def test_node_decommissioned_before_the_application_confirmed_the_placements(run: Run) -> None:
    """Pinned: the Placed waits at the application while the node is decommissioned; the scheduler's
    NodeRemoved queues behind it. The application confirms (the RM hears of them), then releases them
    with the node."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    place_held_at(run, "n1", "app", 3)
    with run.script.holding(to("app/app")):
        run.tick()
        assert run.queued(to("app/app"), Placed)
        run.core.update_node(t.node_action(RM, "n1", si.NodeAction.DECOMISSION))
        run.idle()
        queued = [p.message for p in run.simulation.queued() if to("app/app")(p)]
        kinds = [type(m) for m in queued]
        assert Placed in kinds and NodeRemoved in kinds
        assert kinds.index(Placed) < kinds.index(NodeRemoved), "the removal overtook the placements"
    run.idle()
    assert run.core.node(PARTITION, "n1") is None
    assert not run.rm.live, "allocations on a decommissioned node live on"
    assert {r.allocation_key for r in run.rm.released} == {f"app-k{i}" for i in range(3)}
    assert run.core.queue(PARTITION, "root.a").allocated == {}
    info = run.core.application(PARTITION, "app")
    assert info is not None and not info.allocations
    run.check()


def test_placeholder_node_decommissioned_as_the_rm_confirms_its_replacement(run: Run) -> None:
    """Pinned: a real ask replaced a placeholder on n1 (the placeholder released to the RM as
    PLACEHOLDER_REPLACED); the RM's confirmation of that release reaches the application before the
    scheduler's NodeRemoved for n1. The application swaps the real allocation in and then hears of
    the removal of a placeholder it no longer holds: the real allocation, which took the
    placeholder's place on n1, must still go with the node."""
    run.nodes(["n1"])
    run.core.update_application(
        si.ApplicationRequest(
            rm_id=RM,
            new=[
                si.AddApplicationRequest(
                    application_id="g",
                    queue_name="root.a",
                    ugi=si.UserGroupInformation(user="u"),
                    placeholder_ask=dict(SMALL),
                )
            ],
        )
    )

    def gang_ask(key: str, placeholder: bool) -> si.AllocationRequest:
        run.asked[("g", key)] = 1
        return si.AllocationRequest(
            rm_id=RM,
            asks=[
                si.AllocationAsk(
                    allocation_key=key,
                    application_id="g",
                    resource_ask=dict(SMALL),
                    max_allocations=1,
                    placeholder=placeholder,
                    task_group_name="tg",
                )
            ],
        )

    run.core.update_allocation(gang_ask("ph-0", True))
    run.idle()
    (placeholder,) = run.rm.live.values()
    run.core.update_allocation(gang_ask("real-0", False))
    run.idle()
    assert [(r.uuid, r.termination_type) for r in run.rm.to_confirm] == [
        (placeholder.uuid, si.TerminationType.PLACEHOLDER_REPLACED)
    ]
    with run.script.holding(to("app/g")):
        run.core.update_allocation(
            t.release(RM, "g", uuid=placeholder.uuid, termination=si.TerminationType.PLACEHOLDER_REPLACED)
        )
        run.idle()
        assert run.queued(to("app/g"), ReleaseAllocations)
        run.core.update_node(t.node_action(RM, "n1", si.NodeAction.DECOMISSION))
        run.idle()
        assert run.queued(to("app/g"), NodeRemoved)
    run.idle()
    assert run.core.node(PARTITION, "n1") is None
    assert not run.rm.live, "the real allocation outlived its placeholder's node"
    assert {(r.allocation_key, r.termination_type) for r in run.rm.released} >= {
        ("real-0", si.TerminationType.STOPPED_BY_RM)
    }
    info = run.core.application(PARTITION, "g")
    assert info is None or not info.allocations
    run.check()


def test_node_decommissioned_during_a_decision(run: Run) -> None:
    """Pinned: the scheduler has placed one ask on a node and is deciding the next when the node is
    removed and has handled its removal, the NodeGone still queued at the scheduler. What the view
    decided on the node before it heard is allocated, then released with the node (YuniKorn's order
    when an allocation comes just before a removal); nothing outlives the node, nothing is lost."""
    run.nodes(["n1"])
    run.nodes(["n2"])
    run.apps({"app": "root.a"})
    run.idle()

    def decommission_first(args: si.PredicatesArgs) -> None:
        first = run.passed[0]
        run.core.update_node(t.node_action(RM, first, si.NodeAction.DECOMISSION))
        run.run_others()
        assert run.queued(lambda p: p.actor == f"{PARTITION}/scheduler", NodeGone)

    run.during_decision(decommission_first, let_through=1)
    run.core.update_allocation(run.asks("app", 2))
    run.idle()
    assert run.acted is True, f"the decision the test pins never happened: {run.acted!r}"
    assert run.passed, "the scheduler never asked the predicate"
    first = run.passed[0]
    other = "n2" if first == "n1" else "n1"
    assert run.core.node(PARTITION, first) is None
    released = {r.allocation_key for r in run.rm.released}
    assert released, "the allocation decided on the leaving node was not released with it"
    assert all(a.node_id == other for a in run.rm.live.values())
    info = run.core.application(PARTITION, "app")
    assert info is not None
    assert not info.pending_asks or set(info.pending_asks).isdisjoint(released)
    assert {a.allocation_key for a in run.rm.live.values()} | released | set(info.pending_asks) == {
        "app-k0",
        "app-k1",
    }
    run.check()


def test_recovered_allocation_on_a_node_removed_before_it_was_booked(run: Run) -> None:
    """Pinned: a node comes with an existing allocation and leaves at once, before the application took
    the recovery in: the scheduler's NodeRemoved queues behind the partition's RecoverAllocations. The
    allocation must not outlive its node."""
    run.apps({"app": "root.b"})
    run.idle()
    existing = si.Allocation(
        allocation_key="running",
        uuid="rec-1",
        application_id="app",
        node_id="n1",
        resource_per_alloc={"memory": 500, "vcore": 500},
    )
    run.asked[("app", "running")] = 1
    with run.script.holding(to("app/app")):  # (the node's actor tells the scheduler of the removal)
        run.core.update_node(t.nodes(RM, ["n1"], BIG, existing=[existing]))
        run.idle()
        assert run.queued(to("app/app"), RecoverAllocations)
        run.core.update_node(t.node_action(RM, "n1", si.NodeAction.DECOMISSION))
        run.idle()
        assert run.queued(to("app/app"), NodeRemoved)
    run.idle()
    assert run.core.node(PARTITION, "n1") is None
    info = run.core.application(PARTITION, "app")
    assert info is None or not info.allocations, "a recovered allocation outlived its node"
    assert "rec-1" not in run.rm.live
    assert run.core.queue(PARTITION, "root.b").allocated == {}
    run.check()


def test_recovered_allocation_for_an_application_completing_at_that_moment(run: Run) -> None:
    """Pinned: the application's completing timeout is queued just before a recovery for it (the
    partition has not yet heard that it completed): the recovery is refused, not booked on the node."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    run.core.update_allocation(run.asks("app", 1))
    run.idle()
    run.core.update_allocation(t.release(RM, "app"))  # -> Completing, the 0.2 s timer starts
    run.idle()
    assert run.core.application(PARTITION, "app").state == "Completing"
    existing = si.Allocation(
        allocation_key="running",
        uuid="rec-1",
        application_id="app",
        node_id="n2",
        resource_per_alloc={"memory": 500, "vcore": 500},
    )
    run.asked[("app", "running")] = 1
    with run.script.holding(to("app/app")):
        run.core.advance(SETTINGS["completing_timeout"])
        assert run.queued(to("app/app"), CompletingTimeout)
        run.core.update_node(t.nodes(RM, ["n2"], BIG, existing=[existing]))
        run.idle()
        assert run.queued(to("app/app"), RecoverAllocations)
    run.idle()
    info = run.core.application(PARTITION, "app")
    assert info is not None and info.state == "Completed"
    assert "rec-1" not in run.rm.live, "recovered onto a completed application"
    assert [r.allocation_key for r in run.rm.rejected_asks] == ["running"]
    node = run.core.node(PARTITION, "n2")
    assert node is not None and node.allocations == [], "the node books an allocation nobody owns"
    run.check()


def test_node_with_existing_allocations_gets_nothing_before_they_are_booked(run: Run) -> None:
    """Pinned: a node registers full of allocations the RM already runs while asks wait, and the
    scheduler decides while the recovery still waits at the application. YuniKorn adds the node and
    its existing allocations in one step, so nothing new goes there: a placement decided before the
    recovered allocations are booked would double-book the node."""
    run.apps({"old": "root.a", "new": "root.a"})
    run.core.update_allocation(run.asks("new", 5))  # waiting: no node yet
    run.idle()
    existing = [
        si.Allocation(
            allocation_key=f"running-{index}",
            uuid=f"rec-{index}",
            application_id="old",
            node_id="n1",
            resource_per_alloc={"memory": 5000, "vcore": 5000},
        )
        for index in range(2)
    ]
    for allocation in existing:
        run.asked[("old", allocation.allocation_key)] = 1
    with run.script.holding(pooled):
        run.core.update_node(t.nodes(RM, ["n1"], BIG, existing=existing))  # exactly full
        run.tick()  # the scheduler decides on the node while the recovery waits
        assert run.queued(to("app/old"), RecoverAllocations)
    run.idle()
    info = run.core.node(PARTITION, "n1")
    assert info is not None
    assert sorted(a.uuid for a in info.allocations) == ["rec-0", "rec-1"], (
        f"placed on a node whose existing allocations fill it: {[a.allocation_key for a in info.allocations]}"
    )
    assert sorted(run.core.application(PARTITION, "new").pending_asks) == [f"new-k{i}" for i in range(5)]
    run.check()


# ---- a node fills up under a decision ----------------------------------------------------------------------


def test_node_fills_up_under_a_decision(run: Run) -> None:
    """Pinned: the scheduler has looked at the node (two placements passed) when the node's room shrinks
    (occupied by someone else) and the node has handled it. The view decided before it heard: what it
    placed stands and the node is over-committed, as YuniKorn's is when a node's occupied resources grow
    after its allocations (one writer of the node's free room, nothing checks it twice). Once the view
    hears of the change (NodeChanged), nothing more goes there."""
    run.nodes(["n1"], {"memory": 1000, "vcore": 1000})
    run.apps({"app": "root.a"})
    run.idle()

    def fill(args: si.PredicatesArgs) -> None:
        run.core.update_node(t.node_action(RM, "n1", si.NodeAction.UPDATE, occupied_resource={"memory": 600}))
        run.run_others()
        assert run.was_delivered("node/n1", UpdateNode)

    run.during_decision(fill, let_through=2)
    run.core.update_allocation(run.asks("app", 4, {"memory": 250, "vcore": 250}))
    run.idle()
    assert run.acted is True, f"the decision the test pins never happened: {run.acted!r}"
    assert run.rollbacks() == 0
    info = run.core.node(PARTITION, "n1")
    assert info is not None and len(info.allocations) == 4
    assert info.available == {"memory": -600}
    run.check(may_overcommit={"n1"})
    run.core.update_allocation(run.asks("app", 2, {"memory": 250, "vcore": 250}, start=4))
    run.nodes(["n2"], {"memory": 1000, "vcore": 1000})
    run.idle()
    assert len(run.rm.live) == 6
    assert sorted(a.node_id for a in run.rm.live.values()) == ["n1"] * 4 + ["n2"] * 2
    run.check(may_overcommit={"n1"})


# ---- a node removed and added again while its actor's publications are on their way ------------------


def test_a_node_added_again_keeps_its_own_facts_whatever_the_earlier_one_published_late(run: Run) -> None:
    """Pinned: one request updates n1 (a much bigger capacity), decommissions it and creates it again,
    small. The earlier node's actor handles the update only after the scheduler has the new node:
    its late publication must not change the new node (nor its partition's capacity), so an ask only
    the bigger capacity could take stays pending, and the scheduler's view, the node's snapshot and
    the partition agree on the small capacity."""
    run.nodes(["n1"], SMALL)
    run.apps({"app": "root.a"})
    run.idle()
    request = si.NodeRequest(
        rm_id=RM,
        nodes=[
            si.NodeInfo(node_id="n1", action=si.NodeAction.UPDATE, schedulable_resource=dict(BIG)),
            si.NodeInfo(node_id="n1", action=si.NodeAction.DECOMISSION),
            si.NodeInfo(node_id="n1", action=si.NodeAction.CREATE, schedulable_resource=dict(SMALL)),
        ],
    )
    with run.script.holding(to("node/n1")):
        run.core.update_node(request)
        run.run_others()
    run.idle()
    assert run.probe(run.core, PARTITION)["nodes"]["n1"][0] == SMALL
    node = run.core.node(PARTITION, "n1")
    partition = run.core.partition(PARTITION)
    assert node is not None and partition is not None
    assert node.capacity == SMALL and partition.capacity == SMALL and partition.node_count == 1
    run.core.update_allocation(run.asks("app", 1, {"memory": 1000, "vcore": 1000}))
    run.tick()
    run.idle()
    assert run.rm.live == {}, "placed on a node that cannot hold it"
    run.check()
