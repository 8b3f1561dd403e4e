"""End-to-end, as a hostile RM: every defect of issue 7 ("nothing lost, nothing crossed") pinned down.

Each test goes through ``korral.Core`` only and failed before its fix.
"""

from __future__ import annotations

import gc
import threading
import time

import pykka
import pytest
from core_helpers import (
    FAST,
    MB,
    NODE,
    SINGLE_LEAF,
    SMALL,
    TWO_LEAVES,
    add_apps,
    add_nodes,
    check_invariants,
    collect_errors,
    eventually,
    part,
    running,
)

import korral
from korral import si
from korral import testing as t

P = part()
MAX_INT64 = (1 << 63) - 1


# ---- 1: recovered uuids never collide with the core's own ----------------------------------------------


def test_after_a_restart_new_allocations_never_reuse_recovered_uuids():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": "root.singleleaf"})
        core.update_allocation(t.asks("rm", "app1", 3, SMALL))
        core.wait_until_idle()
        survivors = list(rm.live.values())
    assert len(survivors) == 3

    # YuniKorn's recovery: a new core, the RM re-registers, re-adds its applications, then its nodes
    # with what runs on them; then it asks for more
    with running(SINGLE_LEAF) as (core, rm):
        add_apps(core, rm, {"app1": "root.singleleaf"})
        add_nodes(core, rm, ["n1"], existing=survivors)
        assert {a.uuid for a in survivors} <= set(rm.live)
        core.update_allocation(t.asks("rm", "app1", 3, SMALL, prefix="more-"))
        core.wait_until_idle()
        # six distinct allocations, all still booked and all releasable
        assert len(rm.live) == 6
        app = core.application(P, "app1")
        assert len(app.allocations) == 6
        assert app.allocated == {"memory": 60 * MB, "vcore": 6_000}
        check_invariants(core, P, rm)
        core.update_allocation(t.release("rm", "app1"))
        core.wait_until_idle()
        assert core.node(P, "n1").allocated == {}
        assert core.queue(P, "root").allocated == {}


def test_one_recovered_uuid_for_two_applications_is_refused_the_second_time():
    with running(TWO_LEAVES) as (core, rm):
        add_apps(core, rm, {"app1": "root.a", "app2": "root.b"})
        first = si.Allocation(
            allocation_key="k1",
            uuid="rm-uuid-1",
            resource_per_alloc=SMALL,
            node_id="n1",
            application_id="app1",
        )
        second = si.Allocation(
            allocation_key="k2",
            uuid="rm-uuid-1",
            resource_per_alloc=SMALL,
            node_id="n2",
            application_id="app2",
        )
        add_nodes(core, rm, ["n1"], existing=[first])
        add_nodes(core, rm, ["n2"], existing=[second])
        assert "already live" in rm.rejected_asks_by_key()["k2"]
        assert core.application(P, "app2").allocations == []
        assert core.node(P, "n2").allocated == {}
        check_invariants(core, P, rm)
        # once released, the uuid is free again
        core.update_allocation(t.release("rm", "app1", uuid="rm-uuid-1"))
        core.wait_until_idle()
        core.update_node(t.nodes("rm", ["n3"], NODE, existing=[attrs_evolve(second, node_id="n3")]))
        core.wait_until_idle()
        assert [a.uuid for a in core.application(P, "app2").allocations] == ["rm-uuid-1"]


def attrs_evolve(allocation: si.Allocation, **changes: object) -> si.Allocation:
    import attrs

    return attrs.evolve(allocation, **changes)


def test_a_recovered_allocation_in_the_cores_own_series_is_refused():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": "root.singleleaf"})
        core.update_allocation(t.asks("rm", "app1", 1, SMALL))
        core.wait_until_idle()
        (live,) = rm.live.values()
        # the RM replays a live allocation as an existing one on another node: a double booking
        replay = attrs_evolve(live, node_id="n2", allocation_key="replayed")
        core.update_node(t.nodes("rm", ["n2"], NODE, existing=[replay]))
        core.wait_until_idle()
        assert "issued by this core" in rm.rejected_asks_by_key()["replayed"]
        assert core.node(P, "n2").allocated == {}
        check_invariants(core, P, rm)


# ---- 2: wrong-typed input is checked at the door, item by item ------------------------------------------


@pytest.mark.parametrize(
    "bad_quantity",
    [
        pytest.param("5", id="string"),
        pytest.param(None, id="none"),
        pytest.param(1.5, id="float"),
        pytest.param(True, id="bool"),
        pytest.param(1 << 64, id="beyond-int64"),
    ],
)
def test_a_bad_quantity_rejects_its_ask_and_the_rest_of_the_request_goes_on(bad_quantity):
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": "root.singleleaf"})
        good = t.asks("rm", "app1", 3, SMALL).asks
        bad = si.AllocationAsk(
            allocation_key="bad", application_id="app1", resource_ask={"memory": bad_quantity}
        )
        core.update_allocation(si.AllocationRequest(rm_id="rm", asks=[good[0], bad, good[1], good[2]]))
        core.wait_until_idle()
        assert "resource_ask[memory]" in rm.rejected_asks_by_key()["bad"]
        assert rm.allocated_total == 3
        check_invariants(core, P, rm)


def test_none_and_foreign_items_are_rejected_one_by_one():
    with running(SINGLE_LEAF) as (core, rm):
        core.update_node(
            si.NodeRequest(
                rm_id="rm",
                nodes=[
                    None,
                    si.NodeInfo(node_id=7, action=si.NodeAction.CREATE, schedulable_resource=NODE),
                    si.NodeInfo(node_id="n1", action=si.NodeAction.CREATE, schedulable_resource=NODE),
                ],
            )
        )
        core.update_application(
            si.ApplicationRequest(
                rm_id="rm",
                new=[
                    {"application_id": "x"},
                    si.AddApplicationRequest(
                        application_id="dict-ugi", queue_name="root.singleleaf", ugi={"user": "u"}
                    ),
                    *t.applications("rm", {"app1": "root.singleleaf"}).new,
                ],
            )
        )
        core.wait_until_idle()
        assert rm.accepted_nodes == ["n1"]
        assert len(rm.rejected_nodes) >= 1 and all("nodes[" in r for r in rm.rejected_nodes.values())
        assert rm.accepted_apps == ["app1"]
        assert "ugi" in rm.rejected_apps["dict-ugi"]
        # a node with an int id never counts in the capacity
        assert core.partition(P).capacity == NODE
        assert core.partition(P).node_count == 1


def test_a_request_of_the_wrong_type_raises_type_error():
    with running(SINGLE_LEAF) as (core, _):
        with pytest.raises(TypeError, match="NodeRequest"):
            core.update_node(si.ApplicationRequest(rm_id="rm"))
        with pytest.raises(TypeError, match="AllocationRequest"):
            core.update_allocation(t.nodes("rm", ["n1"], NODE))
        with pytest.raises(TypeError, match="RegisterResourceManagerRequest"):
            core.register_resource_manager(si.NodeRequest(rm_id="rm"), t.RecordingRM("rm"))


def test_releasing_leaves_no_residue():
    # floats used to leave 5.55e-17 behind: quantities are integers, exactly
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": "root.singleleaf"})
        core.update_allocation(t.asks("rm", "app1", 1, {"memory": 0.1 + 0.2, "vcore": 1}))
        core.update_allocation(t.asks("rm", "app1", 3, {"memory": 3, "vcore": 1}, prefix="int-"))
        core.wait_until_idle()
        assert len(rm.rejected_asks) == 1
        core.update_allocation(t.release("rm", "app1"))
        core.wait_until_idle()
        assert core.queue(P, "root").allocated == {}
        assert core.node(P, "n1").allocated == {}


# ---- 3: totals stay exact ---------------------------------------------------------------------------------


def test_a_huge_node_added_and_removed_leaves_capacity_exact():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1", "n2"])
        add_nodes(core, rm, ["huge"], capacity={"memory": MAX_INT64, "vcore": 1000})
        core.update_node(t.node_action("rm", "huge", si.NodeAction.DECOMISSION))
        core.wait_until_idle()
        expected = {"memory": 2 * NODE["memory"], "vcore": 2 * NODE["vcore"]}
        assert core.partition(P).capacity == expected
        assert core.queue(P, "root").max == expected


def test_two_huge_pending_asks_one_removed_leaves_the_other_pending():
    config = SINGLE_LEAF.replace("memory: 150M", "memory: 1E").replace("vcore: 20", "vcore: 200000")
    with running(config) as (core, rm):
        add_apps(core, rm, {"app1": "root.singleleaf"})
        core.update_allocation(t.asks("rm", "app1", 2, {"memory": MAX_INT64}))
        core.wait_until_idle()
        core.update_allocation(t.release_asks("rm", "app1", "app1-ask-0"))
        core.wait_until_idle()
        assert core.queue(P, "root.singleleaf").pending == {"memory": MAX_INT64}
        assert core.application(P, "app1").pending == {"memory": MAX_INT64}


# ---- 4: partition names are isolated ----------------------------------------------------------------------


def test_a_config_cannot_name_another_rms_partition():
    with korral.start(**FAST) as core:
        core.register_resource_manager(t.register("rm2", SINGLE_LEAF), t.RecordingRM("rm2"))
        shadow = SINGLE_LEAF.replace("name: default", "name: '[rm2]default'")
        with pytest.raises(korral.ConfigError, match=r"\["):
            core.register_resource_manager(t.register("rm1", shadow), t.RecordingRM("rm1"))
        assert [p.name for p in core.partitions()] == ["[rm2]default"]


def test_an_rm_id_with_brackets_is_refused():
    with korral.start(**FAST) as core, pytest.raises(korral.SchedulerError, match="must not contain"):
        core.register_resource_manager(t.register("rm]x", ""), t.RecordingRM("rm]x"))


def test_an_rm_cannot_release_in_another_rms_partition():
    with korral.start(**FAST) as core:
        rm1, rm2 = t.RecordingRM("rm1"), t.RecordingRM("rm2")
        core.register_resource_manager(t.register("rm1", SINGLE_LEAF), rm1)
        core.register_resource_manager(t.register("rm2", SINGLE_LEAF), rm2)
        core.update_node(t.nodes("rm2", ["n1"], NODE))
        core.update_application(t.applications("rm2", {"app": "root.singleleaf"}))
        core.wait_until_idle()
        core.update_allocation(t.asks("rm2", "app", 2, SMALL))
        core.wait_until_idle()
        core.update_allocation(t.release("rm1", "app", partition="[rm2]default"))
        core.wait_until_idle()
        assert len(core.application("[rm2]default", "app").allocations) == 2
        assert rm1.allocated_total == 0 and rm1.released == []


# ---- 5: a slow RM holds up nobody, and a stopped core calls nobody ----------------------------------------


class SlowRM(t.RecordingRM):
    """Blocks in its first callback until the test opens the gate; counts every callback."""

    def __init__(self, rm_id: str) -> None:
        super().__init__(rm_id)
        self.gate = threading.Event()
        self.calls: list[str] = []
        self.calls_lock = threading.Lock()

    def _arrived(self, kind: str) -> None:
        with self.calls_lock:
            self.calls.append(kind)
        self.gate.wait(30)

    def update_allocation(self, response: si.AllocationResponse) -> None:
        self._arrived("allocation")
        super().update_allocation(response)

    def update_node(self, response: si.NodeResponse) -> None:
        self._arrived("node")
        super().update_node(response)


def block_in_first_callback(core: korral.Core, rm: SlowRM) -> None:
    """Get ``rm``'s dispatcher stuck in a callback, then queue one more callback behind it."""
    core.update_node(t.nodes(rm.rm_id, ["n1"], NODE))
    eventually(lambda: rm.calls == ["node"])
    # rejected by the RMProxy itself, so the callback is queued before any later request is handled
    core.update_node(t.nodes(rm.rm_id, ["x"], NODE, partition="no-such-partition"))


def test_re_registering_a_slow_rm_holds_up_no_other_rm_and_ends_its_callbacks():
    with collect_errors(), korral.start(**FAST) as core:
        slow, fast = SlowRM("slow"), t.RecordingRM("fast")
        core.register_resource_manager(t.register("slow", SINGLE_LEAF), slow)
        core.register_resource_manager(t.register("fast", SINGLE_LEAF), fast)
        block_in_first_callback(core, slow)
        replacement = t.RecordingRM("slow")
        # re-registration returns while the old callback is still blocked ...
        core.register_resource_manager(t.register("slow", SINGLE_LEAF), replacement)
        assert not slow.gate.is_set()
        # ... and the other RM is served meanwhile
        add_nodes(core, fast, ["f1"])
        add_apps(core, fast, {"fapp": "root.singleleaf"})
        core.update_allocation(t.asks("fast", "fapp", 1, SMALL))
        assert fast.wait_for_allocations(1)
        assert not slow.gate.is_set()
        slow.gate.set()
        core.wait_until_idle()
        time.sleep(0.2)  # room for a wrongly surviving dispatcher to deliver what was queued
        # the old callback object got nothing after the one in progress
        assert slow.calls == ["node"]


def test_after_stop_returns_no_callback_is_delivered():
    slow = SlowRM("rm")
    core = korral.start(**FAST)
    core.register_resource_manager(t.register("rm", SINGLE_LEAF), slow)
    block_in_first_callback(core, slow)
    core.stop()
    assert not slow.gate.is_set()  # stop returned while the RM's callback was still blocked
    slow.gate.set()
    time.sleep(0.3)  # room for a wrongly surviving dispatcher to deliver what was queued
    assert slow.calls == ["node"]


# ---- 6: predicates may read the core ----------------------------------------------------------------------


class ReadingRM(t.RecordingRM):
    def __init__(self, rm_id: str) -> None:
        super().__init__(rm_id)
        self.core: korral.Core | None = None
        self.seen: list[korral.NodeInfo | None] = []
        self.stats_error = ""

    def predicates(self, args: si.PredicatesArgs) -> bool:
        assert self.core is not None
        self.seen.append(self.core.node(P, args.node_id))
        try:
            self.core.scheduler_stats(P)
        except korral.SchedulerError as error:
            self.stats_error = str(error)
        return True


@pytest.mark.usefixtures("engine")  # both engines: predicates cross the process boundary
def test_predicates_can_read_node_snapshots():
    rm = ReadingRM("rm")
    with running(SINGLE_LEAF, rm=rm, scheduling_interval=0.02) as (core, _):
        rm.core = core
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": "root.singleleaf"})
        core.update_allocation(t.asks("rm", "app1", 2, SMALL))
        assert rm.wait_for_allocations(2, timeout=8)
        assert rm.seen and all(info is not None and info.node_id == "n1" for info in rm.seen)
        assert "inside the predicates" in rm.stats_error


# ---- 7: nothing grows without bound -----------------------------------------------------------------------


def live_actors() -> int:
    return len(pykka.ActorRegistry.get_all())


def test_removed_actors_are_retired_while_another_rm_never_idles():
    with collect_errors(), korral.start(**FAST) as core:
        # a second RM whose callback never returns: the core is never idle again
        stuck = SlowRM("stuck")
        core.register_resource_manager(t.register("stuck", SINGLE_LEAF), stuck)
        block_in_first_callback(core, stuck)
        rm = t.RecordingRM("rm")
        core.register_resource_manager(t.register("rm", SINGLE_LEAF), rm)
        core.update_node(t.nodes("rm", ["n1"], NODE))
        assert rm.wait_for(lambda r: "n1" in r.accepted_nodes)
        before = live_actors()
        for cycle in range(30):
            app = f"app{cycle}"
            core.update_application(t.applications("rm", {app: "root.singleleaf"}))
            core.update_allocation(t.asks("rm", app, 1, SMALL))
            assert rm.wait_for(lambda r, a=app: a in r.live_by_app())
            core.update_node(t.nodes("rm", [f"extra{cycle}"], NODE))
            core.update_node(t.node_action("rm", f"extra{cycle}", si.NodeAction.DECOMISSION))
            core.update_application(t.remove_applications("rm", [app]))
            assert rm.wait_for(lambda r, a=app: a not in r.live_by_app())
        # every removed application and node actor stops although the core is never idle
        eventually(lambda: live_actors() <= before + 1, timeout=20)
        assert core.tracker.in_flight() > 0
        stuck.gate.set()


def test_timer_ticks_coalesce_in_a_blocked_scheduler():
    gate = threading.Event()

    class Blocking(t.RecordingRM):
        def predicates(self, args: si.PredicatesArgs) -> bool:
            gate.wait(30)
            return True

    rm = Blocking("rm")
    with running(SINGLE_LEAF, rm=rm, scheduling_interval=0.005) as (core, _):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": "root.singleleaf"})
        core.update_allocation(t.asks("rm", "app1", 1, SMALL))
        time.sleep(0.5)  # a hundred tick periods with the scheduler blocked in predicates
        in_flight = core.tracker.in_flight()
        gate.set()
        core.wait_until_idle()
        # the blocked scheduler's mailbox holds at most one tick, not one per period
        assert in_flight < 10, in_flight


def test_scheduler_keeps_no_per_batch_history():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1", "n2"])
        add_apps(core, rm, {"app1": "root.singleleaf"})
        for round_ in range(5):
            core.update_allocation(t.asks("rm", "app1", 2, SMALL, prefix=f"r{round_}-"))
            core.wait_until_idle()
            core.update_allocation(t.release("rm", "app1"))
            core.wait_until_idle()
        stats = core.scheduler_stats(P)
        assert stats["batches"] >= 5 and stats["largest_batch"] >= 2
        gc.collect()
        referrers = [o for o in gc.get_objects() if type(o).__name__ == "SchedulingView"]
        for view in referrers:
            assert not view.take_effects(), "the scheduler takes its view's effects after each batch"
