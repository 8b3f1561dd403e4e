"""End-to-end: scheduling decisions as the RM sees them (YuniKorn's smoke and reservation tests)."""

from __future__ import annotations

from collections import Counter

import pytest
from core_helpers import (
    FAST,
    MB,
    NODE,
    SMALL,
    TWO_LEAVES,
    add_apps,
    add_nodes,
    check_invariants,
    eventually,
    mem,
    part,
    running,
)

import korral
from korral import si
from korral import testing as t

# every test here runs on both engines (conftest.py: engine)
pytestmark = pytest.mark.usefixtures("engine")

P = part()

OVER_MAX = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: parent
            resources:
              max: {memory: 100M, vcore: 10}
            queues:
              - name: child-1
              - name: child-2
          - name: default
            resources:
              max: {memory: 100M, vcore: 10}
"""

GUARANTEED = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: big
            resources:
              guaranteed: {memory: 100M, vcore: 10}
          - name: small
            resources:
              guaranteed: {memory: 50M, vcore: 5}
"""

FAIR_APPS = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: leaf
            properties:
              application.sort.policy: fair
"""

FIFO_APPS = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: leaf
            properties:
              application.sort.policy: fifo
"""

BINPACKING = """
partitions:
  - name: default
    nodesortpolicy:
      type: binpacking
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: leaf
"""

LIMITED = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: open
          - name: limited
            resources:
              max: {memory: 50M}
"""

TWO_PARTITIONS = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
  - name: gpu
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: train
"""


def _per_node(rm: t.RecordingRM) -> Counter:
    return Counter(a.node_id for a in rm.live.values())


def _per_app(rm: t.RecordingRM) -> dict[str, int]:
    return {app_id: mem(resource) for app_id, resource in rm.live_by_app().items()}


def test_scheduling_over_leaf_and_parent_max():
    """YuniKorn's TestSchedulingOverMaxCapacity, for a leaf max and for a parent max."""
    for leaf in ("root.default", "root.parent.child-1"):
        with running(OVER_MAX) as (core, rm):
            add_nodes(core, rm, ["node-1"], capacity={"memory": 150 * MB, "vcore": 15_000})
            add_apps(core, rm, {"app-1": leaf})
            core.update_allocation(t.asks("rm", "app-1", 1, SMALL, max_allocations=12))
            core.wait_until_idle()
            assert rm.allocated_total == 10, leaf
            assert mem(core.queue(P, leaf).pending) == 20 * MB
            assert mem(core.application(P, "app-1").allocated) == 100 * MB
            check_invariants(core, P, rm)
            core.update_allocation(t.release("rm", "app-1"))
            core.wait_until_idle()
            assert len(rm.live) == 2 and core.queue(P, leaf).pending == {}
            check_invariants(core, P, rm)


def test_fairness_between_queues_without_guarantees():
    """YuniKorn's TestFairnessAllocationForQueues: 20 slots split evenly."""
    with running(TWO_LEAVES) as (core, rm):
        add_apps(core, rm, {"app-1": "root.a", "app-2": "root.b"})
        core.update_allocation(t.asks("rm", "app-1", 1, SMALL, max_allocations=20))
        core.update_allocation(t.asks("rm", "app-2", 1, SMALL, max_allocations=20))
        core.wait_until_idle()
        assert mem(core.queue(P, "root").pending) == 400 * MB
        add_nodes(core, rm, ["node-1", "node-2"])
        assert rm.allocated_total == 20
        assert _per_app(rm) == {"app-1": 100 * MB, "app-2": 100 * MB}
        assert mem(core.queue(P, "root.a").pending) == mem(core.queue(P, "root.b").pending) == 100 * MB
        check_invariants(core, P, rm)


def test_fairness_between_queues_follows_guarantees():
    with running(GUARANTEED) as (core, rm):
        add_apps(core, rm, {"app-big": "root.big", "app-small": "root.small"})
        core.update_allocation(t.asks("rm", "app-big", 1, SMALL, max_allocations=30))
        core.update_allocation(t.asks("rm", "app-small", 1, SMALL, max_allocations=30))
        core.wait_until_idle()
        add_nodes(core, rm, ["node-1", "node-2", "node-3"], capacity={"memory": 50 * MB, "vcore": 20_000})
        assert rm.allocated_total == 15
        usage = _per_app(rm)
        # shares allocated/guaranteed stay level: big gets twice what small gets
        assert usage == {"app-big": 100 * MB, "app-small": 50 * MB}
        check_invariants(core, P, rm)


def test_fairness_between_applications_with_fair_sort_policy():
    """YuniKorn's TestFairnessAllocationForApplications."""
    with running(FAIR_APPS) as (core, rm):
        add_apps(core, rm, {"app-1": "root.leaf", "app-2": "root.leaf"})
        assert core.queue(P, "root.leaf").properties["application.sort.policy"] == "fair"
        core.update_allocation(t.asks("rm", "app-1", 1, SMALL, max_allocations=20))
        core.update_allocation(t.asks("rm", "app-2", 1, SMALL, max_allocations=20))
        core.wait_until_idle()
        add_nodes(core, rm, ["node-1", "node-2"])
        assert rm.allocated_total == 20
        assert _per_app(rm) == {"app-1": 100 * MB, "app-2": 100 * MB}
        assert mem(core.application(P, "app-1").pending) == 100 * MB
        check_invariants(core, P, rm)


def test_fifo_sort_policy_serves_the_first_application_first():
    with running(FIFO_APPS) as (core, rm):
        add_apps(core, rm, {"app-1": "root.leaf"})
        core.update_allocation(t.asks("rm", "app-1", 1, SMALL, max_allocations=20))
        core.wait_until_idle()
        add_apps(core, rm, {"app-2": "root.leaf"})
        core.update_allocation(t.asks("rm", "app-2", 1, SMALL, max_allocations=20))
        core.wait_until_idle()
        add_nodes(core, rm, ["node-1", "node-2"])
        assert rm.allocated_total == 20
        assert _per_app(rm) == {"app-1": 200 * MB}
        check_invariants(core, P, rm)


def test_fair_node_sorting_spreads_allocations():
    with running(TWO_LEAVES) as (core, rm):
        assert core.partition(P).node_sort_policy == "fair"
        add_nodes(core, rm, ["node-1", "node-2", "node-3"])
        add_apps(core, rm, {"app-1": "root.a"})
        core.update_allocation(t.asks("rm", "app-1", 6, SMALL))
        core.wait_until_idle()
        assert sorted(_per_node(rm).values()) == [2, 2, 2]
        check_invariants(core, P, rm)


def test_binpacking_node_sorting_fills_one_node_first():
    """YuniKorn's TestBinPackingAllocationForApplications."""
    with running(BINPACKING) as (core, rm):
        assert core.partition(P).node_sort_policy == "binpacking"
        add_nodes(core, rm, ["node-1", "node-2", "node-3"])
        add_apps(core, rm, {"app-1": "root.leaf"})
        core.update_allocation(t.asks("rm", "app-1", 14, SMALL))
        core.wait_until_idle()
        assert sorted(_per_node(rm).values()) == [4, 10]
        check_invariants(core, P, rm)


def test_predicates_returning_false_exclude_a_node():
    rm = t.RecordingRM("rm", predicate=lambda args: args.node_id != "node-1")
    with running(TWO_LEAVES, rm=rm) as (core, rm):
        add_nodes(core, rm, ["node-1", "node-2"])
        add_apps(core, rm, {"app-1": "root.a"})
        core.update_allocation(t.asks("rm", "app-1", 12, SMALL))
        core.wait_until_idle()
        assert rm.predicate_calls > 0
        assert _per_node(rm) == {"node-2": 10}
        assert core.node(P, "node-1").allocations == []
        assert mem(core.application(P, "app-1").pending) == 20 * MB
        check_invariants(core, P, rm)


def test_predicates_see_the_ask_and_node():
    seen: list[si.PredicatesArgs] = []

    def predicate(args: si.PredicatesArgs) -> bool:
        seen.append(args)
        return True

    rm = t.RecordingRM("rm", predicate=predicate)
    with running(TWO_LEAVES, rm=rm) as (core, rm):
        add_nodes(core, rm, ["node-1"])
        add_apps(core, rm, {"app-1": "root.a"})
        core.update_allocation(t.asks("rm", "app-1", 1, SMALL))
        core.wait_until_idle()
        assert rm.allocated_total == 1
        assert any(a.allocation_key == "app-1-ask-0" and a.node_id == "node-1" and a.allocate for a in seen)


def test_reservation_holds_a_node_until_room_appears():
    with running(TWO_LEAVES) as (core, rm):
        add_nodes(core, rm, ["node-1", "node-2"], capacity={"memory": 50 * MB, "vcore": 20_000})
        add_apps(core, rm, {"app-1": "root.a", "app-2": "root.b", "app-3": "root.a"})
        core.update_allocation(t.asks("rm", "app-1", 8, SMALL))
        core.wait_until_idle()
        assert sorted(_per_node(rm).values()) == [4, 4]
        # fits no node (10M free on each) but fits a node's capacity: after the delay, a reservation
        core.update_allocation(t.asks("rm", "app-2", 1, {"memory": 20 * MB, "vcore": 1_000}))
        reserved = eventually(lambda: [n for n in core.nodes(P) if n.reservations])
        [node] = reserved
        assert node.reservations == ["app-2"]
        other = "node-2" if node.node_id == "node-1" else "node-1"
        assert core.node(P, other).reservations == []
        # the reserved node takes nothing else
        core.update_allocation(t.asks("rm", "app-3", 2, SMALL))
        core.wait_until_idle()
        assert {a.node_id for a in rm.live.values() if a.application_id == "app-3"} == {other}
        assert len(core.application(P, "app-3").pending_asks) == 1
        # room appears on the reserved node: the reserved ask gets it
        victim = next(a.uuid for a in core.node(P, node.node_id).allocations)
        core.update_allocation(t.release("rm", "app-1", uuid=victim))
        core.wait_until_idle()
        assert rm.wait_for(lambda r: "app-2" in r.live_by_app(), 30.0)
        core.wait_until_idle()
        [placed] = core.application(P, "app-2").allocations
        assert placed.node_id == node.node_id
        # app-2's reservation is gone (app-3's waiting ask may reserve a node of its own by now)
        assert all("app-2" not in n.reservations for n in core.nodes(P))
        check_invariants(core, P, rm)


def test_reservation_is_cancelled_when_the_ask_is_removed():
    with running(TWO_LEAVES) as (core, rm):
        add_nodes(core, rm, ["node-1", "node-2"], capacity={"memory": 30 * MB, "vcore": 20_000})
        add_apps(core, rm, {"app-1": "root.a", "app-2": "root.b"})
        core.update_allocation(t.asks("rm", "app-1", 4, SMALL))
        core.wait_until_idle()
        # 20M free in the cluster, 10M on each node
        core.update_allocation(t.asks("rm", "app-2", 1, {"memory": 20 * MB, "vcore": 1_000}))
        [node] = eventually(lambda: [n for n in core.nodes(P) if n.reservations])
        assert node.reservations == ["app-2"]
        core.update_allocation(t.release_asks("rm", "app-2"))
        core.wait_until_idle()
        eventually(lambda: all(n.reservations == [] for n in core.nodes(P)))
        # the node takes other work again
        core.update_allocation(t.asks("rm", "app-1", 2, SMALL, start=5))
        core.wait_until_idle()
        assert rm.allocated_total == 6
        assert len(core.node(P, node.node_id).allocations) == 3
        check_invariants(core, P, rm)


def test_full_cluster_makes_no_reservation():
    """The cluster as a whole has no room (root headroom): no node is reserved (YuniKorn)."""
    with running(TWO_LEAVES) as (core, rm):
        add_nodes(core, rm, ["node-1"], capacity={"memory": 30 * MB, "vcore": 20_000})
        add_apps(core, rm, {"app-1": "root.a", "app-2": "root.b"})
        core.update_allocation(t.asks("rm", "app-1", 2, SMALL))
        core.wait_until_idle()
        core.update_allocation(t.asks("rm", "app-2", 1, {"memory": 20 * MB, "vcore": 1_000}))
        assert rm.wait_for(lambda r: len(r.scheduling_states) > 0, 5.0)
        assert core.node(P, "node-1").reservations == []
        # the cluster grows: the ask is placed
        add_nodes(core, rm, ["node-2"], capacity={"memory": 30 * MB, "vcore": 20_000})
        assert "app-2" in rm.live_by_app()
        check_invariants(core, P, rm)


def test_ask_that_fits_its_queue_but_no_node_is_reported_failed():
    with running(LIMITED) as (core, rm):
        add_nodes(core, rm, ["node-1"])
        add_apps(core, rm, {"app-big": "root.open", "app-over": "root.limited"})
        core.update_allocation(t.asks("rm", "app-big", 1, {"memory": 150 * MB, "vcore": 1_000}))
        core.update_allocation(t.asks("rm", "app-over", 1, {"memory": 60 * MB, "vcore": 1_000}))
        assert rm.wait_for(lambda r: len(r.scheduling_states) > 0, 5.0)
        core.wait_until_idle()
        states = list(rm.scheduling_states)
        assert {(s.application_id, s.allocation_key) for s in states} == {("app-big", "app-big-ask-0")}
        assert all(s.state == si.SchedulingState.FAILED and s.reason for s in states)
        assert rm.allocated_total == 0


def test_send_event_receives_app_node_and_request_records():
    with running(TWO_LEAVES) as (core, rm):
        add_nodes(core, rm, ["node-1"])
        add_apps(core, rm, {"app-1": "root.a"})
        core.update_allocation(t.asks("rm", "app-1", 2, SMALL))
        core.wait_until_idle()
        core.update_node(t.node_action("rm", "node-1", si.NodeAction.DECOMISSION))
        core.wait_until_idle()
        with rm.lock:
            records = list(rm.events)
        assert all(isinstance(r, si.EventRecord) for r in records)
        kinds = {r.type for r in records}
        assert {si.EventRecordType.APP, si.EventRecordType.NODE, si.EventRecordType.REQUEST} <= kinds
        assert any(r.type == si.EventRecordType.APP and r.object_id == "app-1" for r in records)
        assert any(r.type == si.EventRecordType.NODE and r.object_id == "node-1" for r in records)
        assert any(
            r.type == si.EventRecordType.NODE
            and r.event_change_detail == si.EventChangeDetail.NODE_DECOMISSION
            for r in records
        )
        assert all(r.timestamp_nano > 0 for r in records)


def test_partitions_of_two_rms_schedule_independently():
    rm1, rm2 = t.RecordingRM("rm1"), t.RecordingRM("rm2")
    with korral.start(**FAST) as core:
        core.register_resource_manager(t.register("rm1", OVER_MAX), rm1)
        core.register_resource_manager(t.register("rm2", TWO_LEAVES), rm2)
        add_nodes(core, rm1, ["n1"], capacity={"memory": 150 * MB, "vcore": 15_000})
        add_nodes(core, rm2, ["n1", "n2"])
        add_apps(core, rm1, {"app": "root.default"})
        add_apps(core, rm2, {"app": "root.a"})
        core.update_allocation(t.asks("rm1", "app", 1, SMALL, max_allocations=30))
        core.update_allocation(t.asks("rm2", "app", 1, SMALL, max_allocations=30))
        core.wait_until_idle()
        # rm1: its queue max (100M); rm2: its two nodes (200M)
        assert rm1.allocated_total == 10 and rm2.allocated_total == 20
        assert core.partition("[rm1]default").capacity == {"memory": 150 * MB, "vcore": 15_000}
        assert core.partition("[rm2]default").capacity == {"memory": 200 * MB, "vcore": 40_000}
        assert all(a.node_id == "n1" for a in rm1.live.values())
        check_invariants(core, "[rm1]default", rm1)
        check_invariants(core, "[rm2]default", rm2)
        assert core.tracker.errors == 0


def test_config_with_two_partitions_routes_by_node_attribute():
    with running(TWO_PARTITIONS) as (core, rm):
        assert [p.name for p in core.partitions()] == ["[rm]default", "[rm]gpu"]
        add_nodes(core, rm, ["cpu-1"])
        add_nodes(core, rm, ["gpu-1"], partition="gpu")
        assert core.node("[rm]gpu", "gpu-1").attributes[si.NODE_PARTITION] == "gpu"
        assert core.node(P, "gpu-1") is None and core.node("[rm]gpu", "cpu-1") is None
        assert core.partition("[rm]gpu").capacity == NODE
        add_apps(core, rm, {"train-1": "root.train"}, partition="gpu")
        add_apps(core, rm, {"web-1": "root.a"})
        core.update_allocation(t.asks("rm", "train-1", 1, SMALL, max_allocations=12, partition="gpu"))
        core.update_allocation(t.asks("rm", "web-1", 1, SMALL, max_allocations=3))
        core.wait_until_idle()
        usage = _per_app(rm)
        assert usage == {"train-1": 100 * MB, "web-1": 30 * MB}
        assert {a.node_id for a in rm.live.values() if a.application_id == "train-1"} == {"gpu-1"}
        assert core.application("[rm]gpu", "train-1").partition == "[rm]gpu"
        assert core.application(P, "train-1") is None
        # an app in the default partition cannot name the gpu partition's queue
        core.update_application(t.applications("rm", {"lost": "root.train"}))
        core.wait_until_idle()
        assert "lost" in rm.rejected_apps
        # releases name the partition too
        core.update_allocation(t.release_asks("rm", "train-1", partition="gpu"))
        core.update_allocation(t.release("rm", "train-1", partition="gpu"))
        core.wait_until_idle()
        assert "train-1" not in rm.live_by_app()
        check_invariants(core, P, rm)
        check_invariants(core, "[rm]gpu", rm)
