"""End-to-end: node lifecycle through ``core.update_node`` (YuniKorn's TestRMNodeActions, recovery)."""

from __future__ import annotations

from core_helpers import (
    MB,
    NODE,
    SINGLE_LEAF,
    SMALL,
    TWO_LEAVES,
    add_apps,
    add_nodes,
    check_invariants,
    mem,
    part,
    release_kinds,
    running,
)

from korral import si
from korral import testing as t

P = part()
LEAF = "root.singleleaf"


def test_create_is_accepted_and_sets_partition_capacity_and_root_max():
    with running(SINGLE_LEAF) as (core, rm):
        assert core.queue(P, "root").max == {}
        add_nodes(core, rm, ["node-1:1234", "node-2:1234"])
        node = core.node(P, "node-1:1234")
        assert node.capacity == NODE and node.available == NODE
        assert node.allocated == {} and node.occupied == {}
        assert node.schedulable and node.partition == P and node.reservations == []
        info = core.partition(P)
        assert info.capacity == {"memory": 200 * MB, "vcore": 40_000} and info.node_count == 2
        assert core.queue(P, "root").max == info.capacity
        assert sorted(n.node_id for n in core.nodes(P)) == ["node-1:1234", "node-2:1234"]


def test_node_attributes_are_kept():
    with running(SINGLE_LEAF) as (core, rm):
        core.update_node(
            si.NodeRequest(
                rm_id="rm",
                nodes=[
                    si.NodeInfo(
                        node_id="n1",
                        action=si.NodeAction.CREATE,
                        attributes={si.HOST_NAME: "host-1", si.RACK_NAME: "rack-a"},
                        schedulable_resource=NODE,
                    )
                ],
            )
        )
        core.wait_until_idle()
        assert rm.accepted_nodes == ["n1"]
        attributes = core.node(P, "n1").attributes
        assert attributes[si.HOST_NAME] == "host-1" and attributes[si.RACK_NAME] == "rack-a"


def test_duplicate_node_is_rejected_with_a_reason_and_the_first_is_kept():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        core.update_node(t.nodes("rm", ["n1"], {"memory": 5}))
        core.wait_until_idle()
        assert "n1" in rm.rejected_nodes and "exist" in rm.rejected_nodes["n1"]
        assert core.node(P, "n1").capacity == NODE
        assert core.partition(P).capacity == NODE


def test_unknown_node_and_unknown_action_are_rejected():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        core.update_node(t.node_action("rm", "ghost", si.NodeAction.UPDATE, schedulable_resource=NODE))
        core.update_node(t.node_action("rm", "ghost2", si.NodeAction.DRAIN_NODE))
        core.update_node(t.node_action("rm", "ghost3", si.NodeAction.DECOMISSION))
        core.update_node(t.node_action("rm", "n1", si.NodeAction.UNKNOWN_ACTION_FROM_RM))
        core.wait_until_idle()
        for node_id in ("ghost", "ghost2", "ghost3"):
            assert "not found" in rm.rejected_nodes[node_id]
        assert "action" in rm.rejected_nodes["n1"]
        assert core.node(P, "n1").schedulable
        assert core.partition(P).capacity == NODE


def test_update_capacity_changes_partition_capacity_and_root_max():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1", "n2"])
        bigger = {"memory": 300 * MB, "vcore": 30_000}
        core.update_node(t.node_action("rm", "n1", si.NodeAction.UPDATE, schedulable_resource=bigger))
        core.wait_until_idle()
        expected = {"memory": 400 * MB, "vcore": 50_000}
        assert core.node(P, "n1").capacity == bigger
        assert core.partition(P).capacity == expected
        assert core.queue(P, "root").max == expected
        smaller = {"memory": 10 * MB, "vcore": 1_000}
        core.update_node(t.node_action("rm", "n1", si.NodeAction.UPDATE, schedulable_resource=smaller))
        core.wait_until_idle()
        assert core.partition(P).capacity == {"memory": 110 * MB, "vcore": 21_000}
        assert core.queue(P, "root").max == {"memory": 110 * MB, "vcore": 21_000}
        check_invariants(core, P, rm)


def test_shrinking_capacity_below_usage_keeps_the_allocations():
    """YuniKorn keeps what runs on a node whose capacity shrinks; the node is over-allocated."""
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(t.asks("rm", "app1", 5, SMALL))
        core.wait_until_idle()
        small = {"memory": 30 * MB, "vcore": 20_000}
        core.update_node(t.node_action("rm", "n1", si.NodeAction.UPDATE, schedulable_resource=small))
        core.update_allocation(t.asks("rm", "app1", 1, SMALL, start=5))
        core.wait_until_idle()
        node = core.node(P, "n1")
        assert node.capacity == small and len(node.allocations) == 5 and rm.released == []
        assert node.available == {"memory": -20 * MB, "vcore": 15_000}
        assert core.partition(P).capacity == small
        assert rm.allocated_total == 5
        # nothing new fits until the usage is back under the capacity
        for uuid in sorted(rm.live)[:3]:
            core.update_allocation(t.release("rm", "app1", uuid=uuid))
        core.wait_until_idle()
        assert rm.allocated_total == 6
        check_invariants(core, P, rm)


def test_update_capacity_takes_effect_on_scheduling():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"], capacity={"memory": 20 * MB, "vcore": 20_000})
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(t.asks("rm", "app1", 5, SMALL))
        core.wait_until_idle()
        assert rm.allocated_total == 2
        core.update_node(t.node_action("rm", "n1", si.NodeAction.UPDATE, schedulable_resource=NODE))
        core.wait_until_idle()
        assert rm.allocated_total == 5
        check_invariants(core, P, rm)


def test_occupied_resources_reduce_available_and_what_can_be_placed():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"], occupied={"memory": 70 * MB})
        node = core.node(P, "n1")
        assert node.occupied == {"memory": 70 * MB}
        assert node.available == {"memory": 30 * MB, "vcore": 20_000}
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(t.asks("rm", "app1", 5, SMALL))
        core.wait_until_idle()
        assert rm.allocated_total == 3
        assert core.node(P, "n1").available == {"vcore": 17_000}
        # the foreign usage shrinks: room for the rest
        core.update_node(
            t.node_action("rm", "n1", si.NodeAction.UPDATE, occupied_resource={"memory": 10 * MB})
        )
        core.wait_until_idle()
        assert rm.allocated_total == 5
        node = core.node(P, "n1")
        assert node.occupied == {"memory": 10 * MB}
        assert node.available == {"memory": 40 * MB, "vcore": 15_000}
        check_invariants(core, P, rm)


def test_drain_node_places_nothing_new_there_and_drain_to_schedulable_reopens_it():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1", "n2"], capacity={"memory": 50 * MB, "vcore": 20_000})
        core.update_node(t.node_action("rm", "n1", si.NodeAction.DRAIN_NODE))
        core.wait_until_idle()
        assert not core.node(P, "n1").schedulable and core.node(P, "n2").schedulable
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(t.asks("rm", "app1", 8, SMALL))
        core.wait_until_idle()
        assert rm.allocated_total == 5
        assert {a.node_id for a in rm.live.values()} == {"n2"}
        assert core.node(P, "n1").allocations == []
        assert mem(core.application(P, "app1").pending) == 30 * MB
        # draining keeps the node's capacity in the partition
        assert core.partition(P).capacity == {"memory": 100 * MB, "vcore": 40_000}
        core.update_node(t.node_action("rm", "n1", si.NodeAction.DRAIN_TO_SCHEDULABLE))
        core.wait_until_idle()
        assert core.node(P, "n1").schedulable
        assert rm.allocated_total == 8
        assert len(core.node(P, "n1").allocations) == 3
        check_invariants(core, P, rm)


def test_drain_keeps_existing_allocations_running():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(t.asks("rm", "app1", 2, SMALL))
        core.wait_until_idle()
        core.update_node(t.node_action("rm", "n1", si.NodeAction.DRAIN_NODE))
        core.update_allocation(t.asks("rm", "app1", 2, SMALL, start=2))
        core.wait_until_idle()
        node = core.node(P, "n1")
        assert len(node.allocations) == 2 and mem(node.allocated) == 20 * MB
        assert rm.released == []
        assert len(core.application(P, "app1").pending_asks) == 2
        check_invariants(core, P, rm)


def test_create_drain_adds_an_unschedulable_node():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"], action=si.NodeAction.CREATE_DRAIN)
        assert not core.node(P, "n1").schedulable
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(t.asks("rm", "app1", 1, SMALL))
        core.wait_until_idle()
        assert rm.allocated_total == 0


def test_decommission_releases_allocations_to_the_rm_and_removes_the_node():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1", "n2"], capacity={"memory": 50 * MB, "vcore": 20_000})
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(t.asks("rm", "app1", 8, SMALL))
        core.wait_until_idle()
        on_n1 = {a.uuid for a in core.node(P, "n1").allocations}
        assert rm.allocated_total == 8 and len(on_n1) == 4
        core.update_node(t.node_action("rm", "n1", si.NodeAction.DECOMISSION))
        core.wait_until_idle()
        released = rm.release_reasons()
        assert {uuid for uuid, _, _ in released} == on_n1
        assert set(release_kinds(rm)) == {si.TerminationType.STOPPED_BY_RM}
        assert all("n1" in message for _, _, message in released)
        assert core.node(P, "n1") is None
        info = core.partition(P)
        assert info.node_count == 1 and info.capacity == {"memory": 50 * MB, "vcore": 20_000}
        assert core.queue(P, "root").max == info.capacity
        app = core.application(P, "app1")
        assert mem(app.allocated) == 40 * MB and {a.node_id for a in app.allocations} == {"n2"}
        assert app.state == "Running"
        assert on_n1.isdisjoint(rm.live)
        check_invariants(core, P, rm)
        # the node id can come back
        add_nodes(core, rm, ["n1"], capacity={"memory": 50 * MB, "vcore": 20_000})
        assert core.node(P, "n1").allocations == []
        check_invariants(core, P, rm)


def test_decommission_of_the_only_node_completes_an_idle_application():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(t.asks("rm", "app1", 2, SMALL))
        core.wait_until_idle()
        core.update_node(t.node_action("rm", "n1", si.NodeAction.DECOMISSION))
        core.wait_until_idle()
        assert len(rm.released) == 2 and rm.live == {}
        assert core.partition(P).capacity == {} and core.queue(P, "root").max == {}
        assert rm.app_states["app1"][-1] in ("Completing", "Completed")
        check_invariants(core, P, rm)


def _existing(app_id: str, node_id: str, count: int, resource=SMALL, prefix: str = "") -> list[si.Allocation]:
    return [
        si.Allocation(
            allocation_key=f"{prefix or app_id}-{node_id}-{index}",
            uuid=f"uuid-{prefix or app_id}-{node_id}-{index}",
            resource_per_alloc=dict(resource),
            node_id=node_id,
            application_id=app_id,
        )
        for index in range(count)
    ]


def test_existing_allocations_are_recovered_above_queue_max_and_reported_back():
    with running(SINGLE_LEAF) as (core, rm):
        add_apps(core, rm, {"app1": LEAF})
        existing = _existing("app1", "n1", 10) + _existing("app1", "n2", 10)
        core.update_node(t.nodes("rm", ["n1", "n2"], NODE, existing=existing))
        core.wait_until_idle()
        assert sorted(rm.accepted_nodes) == ["n1", "n2"]
        # reported back as new allocations, with the uuids the RM gave
        assert rm.allocated_total == 20
        assert set(rm.live) == {a.uuid for a in existing}
        # above the queue's max of 150M: recovery ignores the limit
        leaf = core.queue(P, LEAF)
        assert mem(leaf.allocated) == 200 * MB and mem(leaf.max) == 150 * MB
        app = core.application(P, "app1")
        assert mem(app.allocated) == 200 * MB and app.state == "Running"
        assert core.node(P, "n1").available == {"vcore": 10_000}
        check_invariants(core, P, rm)
        # the queue is over its max: new asks wait
        core.update_allocation(t.asks("rm", "app1", 1, SMALL))
        core.update_node(t.nodes("rm", ["n3"], NODE))
        core.wait_until_idle()
        assert rm.allocated_total == 20
        assert core.application(P, "app1").pending_asks == ["app1-ask-0"]
        # releasing recovered allocations frees the queue again
        for allocation in existing[:6]:
            core.update_allocation(t.release("rm", "app1", uuid=allocation.uuid))
        core.wait_until_idle()
        assert rm.allocated_total == 21
        assert mem(core.queue(P, LEAF).allocated) == 150 * MB
        check_invariants(core, P, rm)


def test_existing_allocations_for_unknown_app_are_rejected():
    with running(SINGLE_LEAF) as (core, rm):
        add_apps(core, rm, {"app1": LEAF})
        existing = _existing("app1", "n1", 1) + _existing("ghost", "n1", 1)
        core.update_node(t.nodes("rm", ["n1"], NODE, existing=existing))
        core.wait_until_idle()
        assert rm.accepted_nodes == ["n1"]
        assert rm.allocated_total == 1
        [rejected] = rm.rejected_asks
        assert rejected.application_id == "ghost" and "ghost" in rejected.reason
        assert len(core.node(P, "n1").allocations) == 1
        check_invariants(core, P, rm)


def test_recovered_allocation_can_be_released_and_the_app_completes():
    with running(SINGLE_LEAF) as (core, rm):
        add_apps(core, rm, {"app1": LEAF})
        existing = _existing("app1", "n1", 2)
        core.update_node(t.nodes("rm", ["n1"], NODE, existing=existing))
        core.wait_until_idle()
        core.update_allocation(t.release("rm", "app1"))
        core.wait_until_idle()
        assert rm.live == {} and release_kinds(rm) == [si.TerminationType.STOPPED_BY_RM] * 2
        assert core.node(P, "n1").allocated == {}
        assert rm.wait_for(lambda r: "Completed" in r.app_states["app1"], 5.0)
        check_invariants(core, P, rm)


def test_existing_allocation_without_uuid_gets_one_from_the_core():
    with running(SINGLE_LEAF) as (core, rm):
        add_apps(core, rm, {"app1": LEAF})
        existing = [
            si.Allocation(allocation_key="k1", resource_per_alloc=SMALL, node_id="n1", application_id="app1")
        ]
        core.update_node(t.nodes("rm", ["n1"], NODE, existing=existing))
        core.wait_until_idle()
        [allocation] = rm.live.values()
        assert allocation.uuid and allocation.allocation_key == "k1" and allocation.node_id == "n1"
        [info] = core.application(P, "app1").allocations
        assert info.uuid == allocation.uuid
        assert rm.app_states["app1"][-1] == "Running"
        check_invariants(core, P, rm)


def test_node_full_of_existing_allocations_gets_nothing_new_while_asks_wait():
    """YuniKorn adds a node and what runs on it in one step: waiting asks never land on it in between."""
    for _ in range(20):  # the window is a race: repeat it
        with running(TWO_LEAVES) as (core, rm):
            add_apps(core, rm, {"old": "root.a", "new": "root.b"})
            core.update_allocation(t.asks("rm", "new", 5, SMALL))
            core.wait_until_idle()
            half = {"memory": 50 * MB, "vcore": 1_000}
            existing = _existing("old", "n1", 2, resource=half)
            core.update_node(t.nodes("rm", ["n1"], NODE, existing=existing))
            core.wait_until_idle()
            node = core.node(P, "n1")
            assert sorted(a.uuid for a in node.allocations) == sorted(a.uuid for a in existing)
            assert node.available == {"vcore": 18_000}
            assert len(core.application(P, "new").pending_asks) == 5
            assert rm.allocated_total == 2
            check_invariants(core, P, rm)
            # room elsewhere: the waiting asks go there
            add_nodes(core, rm, ["n2"])
            assert {a.node_id for a in rm.live.values() if a.application_id == "new"} == {"n2"}
            check_invariants(core, P, rm)


def test_recovered_allocations_without_uuid_never_collide_with_scheduled_ones() -> None:
    """An existing allocation reported without a uuid gets one from the partition; allocations the
    scheduler makes later must not reuse it (both counters start at 1)."""
    with running(SINGLE_LEAF) as (core, rm):
        add_apps(core, rm, {"app-1": "root.singleleaf"})
        existing = si.Allocation(
            allocation_key="running-0",
            application_id="app-1",
            node_id="n1",
            resource_per_alloc={"memory": 10_000_000, "vcore": 1000},
        )
        core.update_node(t.nodes("rm", ["n1"], NODE, existing=[existing]))
        core.wait_until_idle()
        core.update_allocation(t.asks("rm", "app-1", 3, {"memory": 10_000_000, "vcore": 1000}))
        core.wait_until_idle()
        info = core.application(part("rm"), "app-1")
        uuids = [a.uuid for a in info.allocations]
        assert len(uuids) == 4 and len(set(uuids)) == 4, uuids
        check_invariants(core, part("rm"), rm)


def test_one_request_that_creates_then_changes_its_nodes_acts_in_order():
    """A request's new nodes reach the scheduler together; a later entry about one of them (update,
    drain, removal) still acts on it after it was added, and the node gauges count each once."""
    big = {"memory": 300 * MB, "vcore": 60_000}

    def entry(node_id: str, action: si.NodeAction, **fields: object) -> si.NodeInfo:
        return si.NodeInfo(node_id=node_id, action=action, **fields)  # type: ignore[arg-type]

    with running(SINGLE_LEAF) as (core, rm):
        core.update_node(
            si.NodeRequest(
                rm_id="rm",
                nodes=[
                    entry("n1", si.NodeAction.CREATE, schedulable_resource=NODE),
                    entry("n2", si.NodeAction.CREATE, schedulable_resource=NODE),
                    entry("n3", si.NodeAction.CREATE, schedulable_resource=NODE),
                    entry("n2", si.NodeAction.UPDATE, schedulable_resource=big),
                    entry("n3", si.NodeAction.DRAIN_NODE),
                    entry("n1", si.NodeAction.DECOMISSION),
                ],
            )
        )
        core.wait_until_idle()
        assert sorted(n.node_id for n in core.nodes(P)) == ["n2", "n3"]
        assert core.node(P, "n2").capacity == big and not core.node(P, "n3").schedulable
        value = core.metrics.value
        assert value("yunikorn_scheduler_node", {"state": "active"}) == 1
        assert value("yunikorn_scheduler_node", {"state": "draining"}) == 1
        assert value("yunikorn_scheduler_node", {"state": "decommissioned"}) == 1
        # the scheduler's view has n2 at its new size: an ask bigger than NODE lands there
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(t.asks("rm", "app1", 1, {"memory": 120 * MB, "vcore": 1_000}))
        core.wait_until_idle()
        assert rm.allocated_total == 1 and [a.node_id for a in core.node(P, "n2").allocations] == ["n2"]


CAPPED_LEAF = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: capped
            resources:
              max: {vcore: 4}
"""


def test_recovered_allocations_without_uuid_count_against_the_queue_max() -> None:
    """A uuid-less existing allocation gets its uuid from the partition; the scheduler must count it
    like any other recovered allocation: the queue's max leaves room for one more ask, not two."""
    with running(CAPPED_LEAF) as (core, rm):
        add_apps(core, rm, {"app-1": "root.capped"})
        existing = si.Allocation(
            allocation_key="running-0",
            application_id="app-1",
            node_id="n1",
            resource_per_alloc={"vcore": 3000},
        )
        core.update_node(t.nodes("rm", ["n1"], NODE, existing=[existing]))
        add_nodes(core, rm, ["n2"])
        core.update_allocation(t.asks("rm", "app-1", 2, {"vcore": 1000}))
        core.wait_until_idle()
        info = core.application(P, "app-1")
        assert len(info.allocations) == 2  # the recovered one and one of the two asks
        assert info.pending == {"vcore": 1000}
        assert core.queue(P, "root.capped").allocated == {"vcore": 4000}
        check_invariants(core, P, rm)


def test_a_uuid_the_core_gave_a_recovered_allocation_cannot_be_recovered_twice() -> None:
    """The uuid the core gives an existing allocation reported without one is live like any other: the
    RM reporting it again on another node, for another application (a twin), is rejected, not booked
    and told twice."""
    with running(SINGLE_LEAF) as (core, rm):
        add_apps(core, rm, {"app1": LEAF, "app2": LEAF})
        existing = si.Allocation(
            allocation_key="running-0", application_id="app1", node_id="n1", resource_per_alloc=SMALL
        )
        core.update_node(t.nodes("rm", ["n1"], NODE, existing=[existing]))
        core.wait_until_idle()
        [given] = rm.live
        twin = si.Allocation(
            allocation_key="twin-0", uuid=given, application_id="app2", node_id="n2", resource_per_alloc=SMALL
        )
        core.update_node(t.nodes("rm", ["n2"], NODE, existing=[twin]))
        core.wait_until_idle()
        assert "already live" in rm.rejected_asks_by_key()["twin-0"]
        assert core.application(P, "app2").allocations == []
        assert core.node(P, "n2").allocations == []
        check_invariants(core, P, rm)
