"""A node's RM facts have one writer, its node actor, and one copy: the ``NodeSpec`` it publishes, which
the partition's registry and the scheduler's view hold by reference. What a user sees of an RM's
update (snapshots, the partition's capacity, the root's max, where the walk places) follows from that
one value."""

from __future__ import annotations

import gc
from typing import Any

from core_helpers import MB, SINGLE_LEAF, add_apps, add_nodes, check_invariants, part, running

import korral
from korral import si
from korral import testing as t
from korral.actors.base import KorralActor
from korral.actors.node import NodeActor
from korral.actors.partition.actor import PartitionActor
from korral.actors.scheduler.actor import SchedulerActor

P = part()
LEAF = "root.singleleaf"
SMALL_NODE = {"memory": 10 * MB, "vcore": 1_000}
BIG_NODE = {"memory": 100 * MB, "vcore": 10_000}
BIG_ASK = {"memory": 50 * MB, "vcore": 1_000}


def _actors(core: korral.Core) -> dict[str, Any]:
    """This core's running actors by name."""
    return {
        actor.name: actor
        for actor in gc.get_objects()
        if isinstance(actor, KorralActor)
        and actor.tracker is core.tracker
        and not actor.actor_stopped.is_set()
    }


def _the_three_specs(core: korral.Core, node_id: str) -> tuple[Any, Any, Any]:
    actors = _actors(core)
    node = actors[f"{P}/node/{node_id}"]
    partition = actors[P]
    scheduler = actors[f"{P}/scheduler"]
    assert isinstance(node, NodeActor) and isinstance(partition, PartitionActor)
    assert isinstance(scheduler, SchedulerActor)
    return node.spec, partition.registry.nodes[node_id].spec, scheduler.view.nodes[node_id].spec


def test_an_rm_update_reaches_snapshots_capacity_and_the_walk_from_the_one_spec() -> None:
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"], capacity=SMALL_NODE)
        add_apps(core, rm, {"app": LEAF})
        core.update_allocation(t.asks("rm", "app", 1, BIG_ASK))
        core.wait_until_idle()
        assert rm.allocated_total == 0  # fits no node yet
        core.update_node(
            t.node_action(
                "rm", "n1", si.NodeAction.UPDATE, schedulable_resource=BIG_NODE, attributes={"zone": "a"}
            )
        )
        core.wait_until_idle()
        assert rm.wait_for(lambda r: r.allocated_total == 1)
        node = core.node(P, "n1")
        partition = core.partition(P)
        assert node is not None and partition is not None
        assert node.capacity == BIG_NODE and node.attributes == {"zone": "a"}
        assert partition.capacity == BIG_NODE == core.queue(P, "root").max
        actor_spec, registry_spec, view_spec = _the_three_specs(core, "n1")
        assert actor_spec is registry_spec is view_spec, "a second copy of the node's facts"
        assert actor_spec.capacity == BIG_NODE
        check_invariants(core, P, rm)


def test_a_drain_and_its_undoing_are_one_spec_the_walk_and_the_snapshot_follow() -> None:
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"], capacity=BIG_NODE)
        add_apps(core, rm, {"app": LEAF})
        core.update_node(t.node_action("rm", "n1", si.NodeAction.DRAIN_NODE))
        core.update_allocation(t.asks("rm", "app", 1, BIG_ASK))
        core.wait_until_idle()
        node = core.node(P, "n1")
        assert node is not None and not node.schedulable and rm.allocated_total == 0
        actor_spec, registry_spec, view_spec = _the_three_specs(core, "n1")
        assert actor_spec is registry_spec is view_spec and not actor_spec.schedulable
        core.update_node(t.node_action("rm", "n1", si.NodeAction.DRAIN_TO_SCHEDULABLE))
        assert rm.wait_for(lambda r: r.allocated_total == 1)
        core.wait_until_idle()
        node = core.node(P, "n1")
        assert node is not None and node.schedulable
        check_invariants(core, P, rm)


def test_a_decommissioned_node_leaves_with_what_ran_there_and_a_new_one_of_its_id_starts_clean() -> None:
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"], capacity=BIG_NODE)
        add_apps(core, rm, {"app": LEAF})
        core.update_allocation(t.asks("rm", "app", 1, BIG_ASK))
        assert rm.wait_for(lambda r: r.allocated_total == 1)
        core.update_node(t.node_action("rm", "n1", si.NodeAction.DECOMISSION))
        core.update_node(t.nodes("rm", ["n1"], SMALL_NODE))
        core.wait_until_idle()
        assert rm.released and rm.live == {}
        node = core.node(P, "n1")
        partition = core.partition(P)
        assert node is not None and partition is not None
        assert node.capacity == SMALL_NODE and node.allocations == []
        assert partition.capacity == SMALL_NODE and partition.node_count == 1
        actor_spec, registry_spec, view_spec = _the_three_specs(core, "n1")
        assert actor_spec is registry_spec is view_spec and actor_spec.capacity == SMALL_NODE
        check_invariants(core, P, rm)
