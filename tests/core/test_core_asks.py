"""End-to-end: asks and releases through ``core.update_allocation`` (YuniKorn's TestBasicScheduler)."""

from __future__ import annotations

from core_helpers import (
    MB,
    NODE,
    SINGLE_LEAF,
    SMALL,
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


def _ask(key: str, app_id: str = "app1", resource=SMALL, **fields) -> si.AllocationRequest:
    fields.setdefault("max_allocations", 1)
    return si.AllocationRequest(
        rm_id="rm",
        asks=[
            si.AllocationAsk(allocation_key=key, application_id=app_id, resource_ask=dict(resource), **fields)
        ],
    )


def test_basic_scheduler_asks_allocations_and_releases():
    """YuniKorn's TestBasicScheduler, step by step."""
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["node-1:1234", "node-2:1234"])
        add_apps(core, rm, {"app-1": LEAF})
        core.update_allocation(_ask("alloc-1", "app-1", max_allocations=2))
        core.wait_until_idle()
        assert rm.allocated_total == 2
        leaf, root, app = core.queue(P, LEAF), core.queue(P, "root"), core.application(P, "app-1")
        assert leaf.pending == {} and root.pending == {} and app.pending == {}
        assert mem(leaf.allocated) == mem(root.allocated) == mem(app.allocated) == 20 * MB
        assert app.state == "Running"
        assert [a.allocation_key for a in app.allocations] == ["alloc-1", "alloc-1"]
        assert len({a.uuid for a in app.allocations}) == 2
        check_invariants(core, P, rm)

        request = si.AllocationRequest(
            rm_id="rm",
            asks=[
                si.AllocationAsk(
                    allocation_key="alloc-2",
                    application_id="app-1",
                    resource_ask={"memory": 50 * MB, "vcore": 5_000},
                    max_allocations=2,
                ),
                si.AllocationAsk(
                    allocation_key="alloc-3",
                    application_id="app-1",
                    resource_ask={"memory": 100 * MB, "vcore": 5_000},
                    max_allocations=2,
                ),
            ],
        )
        core.update_allocation(request)
        core.wait_until_idle()
        # queue max 150M: 20 + 2 x 50 fit, the two 100M stay pending
        assert rm.allocated_total == 4
        assert mem(core.queue(P, LEAF).pending) == mem(core.queue(P, "root").pending) == 200 * MB
        assert mem(core.queue(P, LEAF).allocated) == 120 * MB
        assert mem(core.application(P, "app-1").pending) == 200 * MB
        check_invariants(core, P, rm)

        releases = [
            si.AllocationRelease(
                application_id="app-1", uuid=uuid, termination_type=si.TerminationType.STOPPED_BY_RM
            )
            for uuid in list(rm.live)
        ]
        core.update_allocation(
            si.AllocationRequest(
                rm_id="rm", releases=si.AllocationReleasesRequest(allocations_to_release=releases)
            )
        )
        core.wait_until_idle()
        assert len(rm.released) == 4
        assert set(release_kinds(rm)) == {si.TerminationType.STOPPED_BY_RM}
        # room again, but the queue max (150M) takes only one of the two 100M asks
        assert rm.allocated_total == 5
        assert mem(core.queue(P, LEAF).allocated) == 100 * MB
        assert mem(core.queue(P, LEAF).pending) == 100 * MB
        check_invariants(core, P, rm)

        core.update_allocation(t.release_asks("rm", "app-1", partition="default"))
        core.wait_until_idle()
        assert core.queue(P, LEAF).pending == {} and core.queue(P, "root").pending == {}
        assert core.application(P, "app-1").pending_asks == []
        check_invariants(core, P, rm)


def test_auto_allocation_up_to_the_queue_max():
    """YuniKorn's TestBasicSchedulerAutoAllocation: 20 asks, the queue takes 15."""
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["node-1:1234", "node-2:1234"])
        add_apps(core, rm, {"app-1": LEAF})
        core.update_allocation(_ask("alloc-1", "app-1", max_allocations=20))
        core.wait_until_idle()
        assert rm.allocated_total == 15
        for path in (LEAF, "root"):
            queue = core.queue(P, path)
            assert mem(queue.allocated) == 150 * MB and mem(queue.pending) == 50 * MB
        nodes = core.nodes(P)
        assert sum(mem(n.allocated) for n in nodes) == 150 * MB
        check_invariants(core, P, rm)


def test_pending_is_tracked_before_there_is_any_node():
    with running(SINGLE_LEAF) as (core, rm):
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(t.asks("rm", "app1", 3, SMALL))
        core.wait_until_idle()
        app = core.application(P, "app1")
        assert mem(app.pending) == 30 * MB and app.state == "Accepted"
        assert sorted(app.pending_asks) == ["app1-ask-0", "app1-ask-1", "app1-ask-2"]
        assert mem(core.queue(P, "root").pending) == 30 * MB
        add_nodes(core, rm, ["n1"])
        assert rm.allocated_total == 3
        check_invariants(core, P, rm)


def test_updating_an_ask_with_the_same_key_replaces_it():
    with running(SINGLE_LEAF) as (core, rm):
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(_ask("k", max_allocations=3))
        core.wait_until_idle()
        assert mem(core.application(P, "app1").pending) == 30 * MB
        core.update_allocation(_ask("k", resource={"memory": 20 * MB, "vcore": 1_000}, max_allocations=1))
        core.wait_until_idle()
        app = core.application(P, "app1")
        assert mem(app.pending) == 20 * MB and app.pending_asks == ["k"]
        assert mem(core.queue(P, LEAF).pending) == 20 * MB
        assert rm.rejected_asks == []
        add_nodes(core, rm, ["n1"])
        app = core.application(P, "app1")
        assert [(a.allocation_key, mem(a.resource)) for a in app.allocations] == [("k", 20 * MB)]
        assert rm.allocated_total == 1
        check_invariants(core, P, rm)


def test_max_allocations_repeats_the_ask():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(_ask("repeat", max_allocations=5))
        core.wait_until_idle()
        assert rm.allocated_total == 5
        keys = [a.allocation_key for a in rm.live.values()]
        assert keys == ["repeat"] * 5 and len(rm.live) == 5
        assert core.application(P, "app1").pending_asks == []
        check_invariants(core, P, rm)


def test_higher_priority_asks_are_allocated_first():
    with running(SINGLE_LEAF) as (core, rm):
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(t.asks("rm", "app1", 3, SMALL, prefix="low-", priority=1))
        core.update_allocation(t.asks("rm", "app1", 2, SMALL, prefix="high-", priority=10))
        core.update_allocation(t.asks("rm", "app1", 2, SMALL, prefix="mid-", priority=5))
        core.wait_until_idle()
        # room for exactly three
        add_nodes(core, rm, ["n1"], capacity={"memory": 30 * MB, "vcore": 20_000})
        keys = sorted(a.allocation_key for a in rm.live.values())
        assert keys[:2] == ["high-0", "high-1"] and keys[2].startswith("mid-")
        assert {a.priority for a in core.application(P, "app1").allocations} == {10, 5}
        check_invariants(core, P, rm)


def test_invalid_asks_are_rejected_with_a_reason():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(_ask("unknown-app", app_id="ghost"))
        core.update_allocation(_ask("zero", resource={"memory": 0, "vcore": 0}))
        core.update_allocation(_ask("empty", resource={}))
        core.update_allocation(_ask("negative", resource={"memory": -10, "vcore": 1_000}))
        core.update_allocation(_ask("", resource=SMALL))
        # YuniKorn: an ask for no allocations is invalid (it is not an ask for one)
        core.update_allocation(_ask("no-repeat", max_allocations=0))
        core.update_allocation(_ask("good"))
        core.wait_until_idle()
        reasons = {r.allocation_key: r.reason for r in rm.rejected_asks}
        assert set(reasons) == {"unknown-app", "zero", "empty", "negative", "", "no-repeat"}
        assert reasons["no-repeat"] == "invalid ask no-repeat: max allocations 0, it must be at least 1"
        assert "ghost" in reasons["unknown-app"]
        assert "no resources" in reasons["zero"] and "no resources" in reasons["empty"]
        assert "negative" in reasons["negative"]
        assert all(reasons.values())
        assert [a.allocation_key for a in rm.live.values()] == ["good"]
        assert core.application(P, "app1").pending_asks == []
        check_invariants(core, P, rm)


def test_release_by_uuid_by_key_and_all():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(_ask("a", max_allocations=3))
        core.update_allocation(_ask("b", max_allocations=2))
        core.update_allocation(_ask("c", max_allocations=2))
        core.wait_until_idle()
        assert rm.allocated_total == 7
        by_key = {}
        for allocation in rm.live.values():
            by_key.setdefault(allocation.allocation_key, []).append(allocation.uuid)

        one = by_key["c"][0]
        core.update_allocation(t.release("rm", "app1", uuid=one))
        core.wait_until_idle()
        assert [uuid for uuid, _, _ in rm.release_reasons()] == [one]
        assert one not in rm.live and len(core.application(P, "app1").allocations) == 6
        check_invariants(core, P, rm)

        core.update_allocation(t.release("rm", "app1", allocation_key="a"))
        core.wait_until_idle()
        assert {uuid for uuid, _, _ in rm.release_reasons()[1:]} == set(by_key["a"])
        assert {a.allocation_key for a in core.application(P, "app1").allocations} == {"b", "c"}
        check_invariants(core, P, rm)

        core.update_allocation(t.release("rm", "app1"))
        core.wait_until_idle()
        assert len(rm.released) == 7 and rm.live == {}
        assert set(release_kinds(rm)) == {si.TerminationType.STOPPED_BY_RM}
        assert core.application(P, "app1").allocations == []
        assert core.node(P, "n1").allocated == {}
        assert core.queue(P, LEAF).allocated == {} and core.partition(P).allocated == {}
        check_invariants(core, P, rm)


def test_release_reports_the_termination_type_given():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(t.asks("rm", "app1", 2, SMALL))
        core.wait_until_idle()
        first, second = sorted(rm.live)
        core.update_allocation(
            t.release("rm", "app1", uuid=first, termination=si.TerminationType.UNKNOWN_TERMINATION_TYPE)
        )
        core.update_allocation(t.release("rm", "app1", uuid=second, message="pod deleted"))
        core.wait_until_idle()
        reasons = {uuid: (kind, message) for uuid, kind, message in rm.release_reasons()}
        # no type given: the RM stopped it
        assert reasons[first][0] == si.TerminationType.STOPPED_BY_RM
        assert reasons[second] == (si.TerminationType.STOPPED_BY_RM, "pod deleted")
        check_invariants(core, P, rm)


def test_release_of_unknown_allocation_changes_nothing():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(t.asks("rm", "app1", 2, SMALL))
        core.wait_until_idle()
        core.update_allocation(t.release("rm", "app1", uuid="no-such-uuid"))
        core.update_allocation(t.release("rm", "app1", allocation_key="no-such-key"))
        core.update_allocation(t.release("rm", "ghost"))
        core.update_allocation(t.release_asks("rm", "ghost"))
        core.wait_until_idle()
        assert rm.released == [] and len(rm.live) == 2
        assert core.application(P, "app1").state in ("Starting", "Running")
        check_invariants(core, P, rm)


def test_release_frees_room_for_pending_asks():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1", "n2"])
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(t.asks("rm", "app1", 18, SMALL))
        core.wait_until_idle()
        assert rm.allocated_total == 15
        for uuid in sorted(rm.live)[:3]:
            core.update_allocation(t.release("rm", "app1", uuid=uuid))
        core.wait_until_idle()
        assert rm.allocated_total == 18 and len(rm.live) == 15
        assert core.application(P, "app1").pending_asks == []
        check_invariants(core, P, rm)


def test_ask_release_by_key_and_all():
    with running(SINGLE_LEAF) as (core, rm):
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(t.asks("rm", "app1", 4, SMALL))
        core.wait_until_idle()
        core.update_allocation(t.release_asks("rm", "app1", allocation_key="app1-ask-1"))
        core.wait_until_idle()
        app = core.application(P, "app1")
        assert sorted(app.pending_asks) == ["app1-ask-0", "app1-ask-2", "app1-ask-3"]
        assert mem(app.pending) == 30 * MB and mem(core.queue(P, "root").pending) == 30 * MB
        core.update_allocation(t.release_asks("rm", "app1"))
        core.wait_until_idle()
        app = core.application(P, "app1")
        assert app.pending_asks == [] and app.pending == {}
        assert core.queue(P, LEAF).pending == {} and core.queue(P, "root").pending == {}
        # nothing is placed for removed asks once nodes arrive
        add_nodes(core, rm, ["n1"])
        assert rm.allocated_total == 0


def test_ask_release_keeps_existing_allocations():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"], capacity={"memory": 20 * MB, "vcore": 20_000})
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(_ask("k", max_allocations=4))
        core.wait_until_idle()
        assert rm.allocated_total == 2
        core.update_allocation(t.release_asks("rm", "app1", allocation_key="k"))
        core.wait_until_idle()
        app = core.application(P, "app1")
        assert len(app.allocations) == 2 and app.pending == {}
        assert rm.released == []
        core.update_node(t.node_action("rm", "n1", si.NodeAction.UPDATE, schedulable_resource=NODE))
        core.wait_until_idle()
        assert rm.allocated_total == 2
        check_invariants(core, P, rm)


def test_max_allocations_zero_is_an_invalid_ask_and_the_request_goes_on():
    """YuniKorn's TestAddAllocationAsk: a 0 repeat ask is an invalid ask; it was allocated as 1."""
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": LEAF})
        zero, one = (
            si.AllocationAsk(allocation_key=key, application_id="app1", resource_ask=SMALL, max_allocations=n)
            for key, n in (("zero", 0), ("one", 1))
        )
        core.update_allocation(si.AllocationRequest(rm_id="rm", asks=[zero, one]))
        core.wait_until_idle()
        assert [r.allocation_key for r in rm.rejected_asks] == ["zero"]
        assert "invalid ask zero" in rm.rejected_asks[0].reason
        assert [a.allocation_key for a in rm.live.values()] == ["one"]
        assert core.application(P, "app1").pending_asks == []


def test_duplicate_releases_are_carried_out_and_reported_once():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(t.asks("rm", "app1", 2, SMALL))
        core.wait_until_idle()
        uuid = sorted(rm.live)[0]
        release = si.AllocationRelease(application_id="app1", uuid=uuid)
        core.update_allocation(
            si.AllocationRequest(
                rm_id="rm", releases=si.AllocationReleasesRequest(allocations_to_release=[release, release])
            )
        )
        core.update_allocation(t.release("rm", "app1", uuid=uuid))
        core.wait_until_idle()
        assert [u for u, _, _ in rm.release_reasons()] == [uuid]
        assert len(core.application(P, "app1").allocations) == 1
        check_invariants(core, P, rm)


def test_a_release_by_key_alone_withdraws_the_pending_ask_and_one_by_uuid_does_not():
    """Today's SI releases by key, and YuniKorn then drops the pending ask of that key as well; the seed's
    release by uuid frees one allocation and leaves the ask's other repeats pending."""
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["node-1"], capacity={"memory": 20 * MB, "vcore": 20_000})
        add_apps(core, rm, {"app-1": LEAF})
        core.update_allocation(_ask("by-uuid", "app-1", max_allocations=4))
        core.wait_until_idle()
        first = core.application(P, "app-1").allocations[0]
        core.update_allocation(t.release("rm", "app-1", uuid=first.uuid))
        core.wait_until_idle()
        app = core.application(P, "app-1")
        assert [a.allocation_key for a in app.allocations] == ["by-uuid", "by-uuid"], "a repeat took its room"
        core.update_allocation(_ask("by-key", "app-1"))
        core.update_allocation(t.release("rm", "app-1", allocation_key="by-uuid"))
        core.wait_until_idle()
        app = core.application(P, "app-1")
        assert [a.allocation_key for a in app.allocations] == ["by-key"]
        assert app.pending == {} and app.pending_asks == [], "the key's pending repeat is withdrawn"
