"""Scripted interleavings of asks, applications, queues and the RM with the scheduler's decisions."""

from __future__ import annotations

import interleavings_helpers
import pytest
from interleavings_helpers import (
    BIG,
    CONFIG,
    PARTITION,
    RM,
    SEEDS,
    SETTINGS,
    SMALL,
    Run,
    place_held_at,
    pooled,
    running,
    to,
)

import korral
from korral import si
from korral import testing as t
from korral.actors.messages import AddAsks, CompletingTimeout, Placed, RemoveApplication, RemoveAsks

# the shared fixtures: pytest finds a fixture by its name in the test module
_view_probe_handler = interleavings_helpers._view_probe_handler
run = interleavings_helpers.run
seed = interleavings_helpers.seed


# ---- ask removed while its allocation is being made --------------------------------------------------------


def test_ask_and_its_release_in_one_request(run: Run) -> None:
    """Any order: an ask released in the request that brings it is never allocated."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    ask = run.asks("app", 1).asks[0]
    release = run.withdraw("app", ask.allocation_key)
    run.core.update_allocation(si.AllocationRequest(rm_id=RM, asks=[ask], releases=release.releases))
    run.core.update_allocation(run.asks("app", 3, start=1))
    run.idle()
    live_keys = {a.allocation_key for a in run.rm.live.values()}
    assert ask.allocation_key not in live_keys, "an ask released in the same request was allocated"
    assert live_keys == {"app-k1", "app-k2", "app-k3"}
    run.check()


def test_ask_then_release_in_consecutive_requests_without_waiting(run: Run) -> None:
    """Any order of asks and their withdrawals in flight together: withdrawn ones never come back."""
    run.nodes(["n1", "n2"])
    run.apps({"app": "root.a", "other": "root.b"})
    for index in range(60):
        run.core.update_allocation(run.asks("app", 1, start=index))
        if index % 3 != 2:
            run.core.update_allocation(run.withdraw("app", f"app-k{index}"))
        run.core.update_allocation(run.asks("other", 1, start=index))
        if index % 7 == 0:
            run.simulation.step()  # some of the work lands between the requests
    run.idle()
    info = run.core.application(PARTITION, "app")
    assert info is not None
    kept = {f"app-k{i}" for i in range(60) if i % 3 == 2}
    allocated = {a.allocation_key for a in info.allocations}
    assert kept <= allocated, "asks that were never withdrawn must be allocated"
    assert not info.pending_asks, "a withdrawn ask came back"
    run.check()


def test_ask_withdrawn_while_its_placement_is_in_flight(run: Run) -> None:
    """Pinned: the scheduler is deciding the ask when its withdrawal reaches the application, which has
    handled it before the Placed arrives: the application refuses the placement, the view rolls it
    back (its node shows nothing), and the RM never hears of an allocation."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    run.idle()

    def withdraw(args: si.PredicatesArgs) -> None:
        run.core.update_allocation(run.withdraw("app", "app-k0"))
        run.run_others()
        assert run.was_delivered("app/app", RemoveAsks)

    run.during_decision(withdraw)
    run.core.update_allocation(run.asks("app", 1))
    run.idle()
    assert run.acted is True, f"the decision the test pins never happened: {run.acted!r}"
    assert not run.rm.live and run.rm.allocated_total == 0, "a withdrawn ask was allocated"
    assert run.rollbacks() == 1
    node = run.core.node(PARTITION, "n1")
    assert node is not None and not node.allocations and node.allocated == {}
    # the application goes on normally
    run.core.update_allocation(run.asks("app", 2, start=1))
    run.idle()
    assert len(run.rm.live) == 2
    run.check()


def test_ask_withdrawn_just_after_its_placement_was_confirmed(run: Run) -> None:
    """Pinned, the other order: the Placed reaches the application first and is confirmed, then the
    withdrawal: the allocation stays."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    place_held_at(run, "n1", "app", 1)
    with run.script.holding(pooled):
        run.tick()
        assert run.queued(to("app/app"), Placed)
    run.idle()  # the application confirms, then the withdrawal arrives
    run.core.update_allocation(run.withdraw("app", "app-k0"))
    run.idle()
    assert len(run.rm.live) == 1
    info = run.core.application(PARTITION, "app")
    assert info is not None and len(info.allocations) == 1 and not info.pending_asks
    run.check()


def test_ask_replaced_while_its_placement_is_in_flight(run: Run) -> None:
    """Pinned: the scheduler is deciding the old ask when the same key comes again with new resources
    and reaches the application first. The stale placement is refused; the new ask is placed once."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    run.idle()

    def replace(args: si.PredicatesArgs) -> None:
        run.core.update_allocation(run.asks("app", 1, {"memory": 200, "vcore": 200}))
        run.run_others()
        assert run.was_delivered("app/app", AddAsks)

    run.core.update_allocation(run.asks("app", 1))
    run.during_decision(replace)
    run.idle()
    assert run.acted is True, f"the decision the test pins never happened: {run.acted!r}"
    info = run.core.application(PARTITION, "app")
    assert info is not None
    assert [(a.allocation_key, a.resource) for a in info.allocations] == [
        ("app-k0", {"memory": 200, "vcore": 200})
    ], "the stale placement of the replaced ask was kept"
    assert [a.resource_per_alloc for a in run.rm.live.values()] == [{"memory": 200, "vcore": 200}]
    assert run.rm.allocated_total == 1
    run.check()


# ---- application removed while being scheduled -----------------------------------------------------------


def test_application_removed_during_a_decision(run: Run) -> None:
    """Pinned: two asks placed, the scheduler deciding the third when the application is removed and
    has handled its removal. Its proposals are refused and undone; the node has its room back."""
    run.nodes(["n1"])
    run.apps({"app": "root.a", "other": "root.a"})
    run.idle()

    def remove(args: si.PredicatesArgs) -> None:
        run.remove_app("app")
        run.run_others()
        assert run.was_delivered("app/app", RemoveApplication)

    run.during_decision(remove, let_through=2)
    run.core.update_allocation(run.asks("app", 5))
    run.idle()
    assert run.acted is True, f"the decision the test pins never happened: {run.acted!r}"
    assert run.core.application(PARTITION, "app") is None
    assert not [a for a in run.rm.live.values() if a.application_id == "app"]
    node = run.core.node(PARTITION, "n1")
    assert node is not None and node.allocations == []
    run.core.update_allocation(run.asks("other", 3))
    run.idle()
    assert len(run.rm.live) == 3
    run.check()


def test_application_removed_with_placements_waiting_at_it(run: Run) -> None:
    """Pinned: the Placed waits at the application and its removal queues behind it: the placements
    are confirmed (the RM hears of them), then released with the application; the node ends empty."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    place_held_at(run, "n1", "app", 4)
    with run.script.holding(pooled):
        run.tick()
        assert run.queued(to("app/app"), Placed)
        run.remove_app("app")
        run.idle()
        assert run.queued(to("app/app"), RemoveApplication)
    run.idle()
    assert run.core.application(PARTITION, "app") is None
    assert not run.rm.live
    assert {r.allocation_key for r in run.rm.released} == {f"app-k{i}" for i in range(4)}
    node = run.core.node(PARTITION, "n1")
    assert node is not None and node.allocations == [] and node.allocated == {}
    run.check()


def test_application_removed_before_its_placements_are_booked(run: Run) -> None:
    """Pinned: the removal waits at the application while the scheduler, not told yet, proposes for it."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    place_held_at(run, "n1", "app", 4)
    with run.script.holding(pooled):
        run.remove_app("app")
        run.idle()
        assert run.queued(to("app/app"), RemoveApplication)
        run.tick()  # the scheduler has not heard of the removal yet: it proposes
        assert run.queued(to("app/app"), Placed)
    run.idle()
    assert not run.rm.live and run.rm.allocated_total == 0
    node = run.core.node(PARTITION, "n1")
    assert node is not None and node.allocations == []
    run.check()


# ---- queue removed by a config reload while applications run in it ----------------------------------------


WITHOUT_B = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
"""


def test_queue_removed_by_reload_while_applications_run(run: Run) -> None:
    """Any order: a reload removes a queue under a running application; it drains, then goes."""
    run.nodes(["n1"], {"memory": 1000, "vcore": 1000})
    run.apps({"app": "root.b", "keep": "root.a"})
    run.core.update_allocation(run.asks("keep", 1))
    run.idle()
    run.core.update_allocation(run.asks("app", 15))  # more than the node holds
    run.idle()
    assert len(run.rm.live) == 10
    run.core.update_configuration(si.UpdateConfigurationRequest(rm_id=RM, config=WITHOUT_B))
    run.idle()
    queue = run.core.queue(PARTITION, "root.b")
    assert queue is not None and queue.state == "Draining"
    assert queue.allocated == {"memory": 900, "vcore": 900}
    # no new applications in a draining queue; the running one goes on
    run.core.update_application(t.applications(RM, {"late": "root.b"}))
    run.idle()
    assert "late" in run.rm.rejected_apps
    run.check()
    # it finishes: allocations released, asks withdrawn -> completed -> the queue goes away
    run.core.update_allocation(t.release(RM, "app", allocation_key="app-k0"))
    run.idle()
    info = run.core.application(PARTITION, "app")
    assert info is not None and len(info.allocations) == 9, "the draining queue's app still gets room"
    for key in list(info.pending_asks):
        run.core.update_allocation(run.withdraw("app", key))
    run.core.update_allocation(t.release(RM, "app"))
    run.settle()
    assert run.core.queue(PARTITION, "root.b") is None, "the drained queue did not go"
    run.check()
    assert run.core.application(PARTITION, "app").state == "Completed"
    # the queue comes back with the next reload, and works
    run.core.update_configuration(si.UpdateConfigurationRequest(rm_id=RM, config=CONFIG))
    run.apps({"again": "root.b"})
    run.core.update_allocation(run.asks("again", 2))
    run.idle()
    assert len(run.core.application(PARTITION, "again").allocations) == 2
    run.check()


def test_queue_removed_and_restored_while_asks_are_in_flight(run: Run) -> None:
    """Any order: asks in flight while a reload removes their queue and the next restores it."""
    run.nodes(["n1"])
    run.apps({"app": "root.b"})
    run.idle()
    for index in range(20):
        run.core.update_allocation(run.asks("app", 1, start=index))
        if index == 5:
            run.core.update_configuration(si.UpdateConfigurationRequest(rm_id=RM, config=WITHOUT_B))
        if index == 12:
            run.core.update_configuration(si.UpdateConfigurationRequest(rm_id=RM, config=CONFIG))
    run.idle()
    queue = run.core.queue(PARTITION, "root.b")
    assert queue is not None and queue.state == "Active"
    assert len(run.rm.live) == 20
    run.check()


# ---- RM re-registered mid-stream ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_rm_reregistered_with_requests_in_flight(seed: int) -> None:
    """Any order: the registration comes in behind requests still in flight (none waited for)."""
    core = korral.start(runtime="simulated", seed=seed, **SETTINGS)
    try:
        old = t.RecordingRM(RM)
        core.register_resource_manager(t.register(RM, CONFIG), old)
        core.update_node(t.nodes(RM, [f"n{i}" for i in range(5)], BIG))
        core.update_application(t.applications(RM, {f"app{i}": "root.a" for i in range(5)}))
        for i in range(5):
            core.update_allocation(t.asks(RM, f"app{i}", 50, SMALL))
        new = t.RecordingRM(RM)
        core.register_resource_manager(t.register(RM, CONFIG), new)
        core.update_node(t.nodes(RM, ["m1"], BIG))
        core.update_application(t.applications(RM, {"fresh": "root.a"}))
        core.update_allocation(t.asks(RM, "fresh", 5, SMALL))
        core.wait_until_idle()
        nodes = core.nodes(PARTITION)
        assert [n.node_id for n in nodes] == ["m1"], "the old registration's nodes survived"
        apps = core.applications(PARTITION)
        assert [a.application_id for a in apps] == ["fresh"]
        assert len(apps[0].allocations) == 5
        assert {a.application_id for a in new.live.values()} == {"fresh"}, "old allocations leaked"
        assert not new.rejected_asks and not new.rejected_apps
        core.advance(2.0)
        assert core.tracker.in_flight() == 0, "a message count leaked for the stopped registration"
        assert len([p for p in core.partitions() if p.rm_id == RM]) == 1
    finally:
        core.stop()


def test_rm_reregistered_while_the_scheduler_is_mid_decision(run: Run) -> None:
    """Pinned: the RM registers again while the old partition's scheduler is inside a decision. The
    registration completes (the old scheduler's stop waits its bounded time, virtual here) and the
    old decision's placements are refused; the new registration works."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    run.idle()
    new = t.RecordingRM(RM)

    def reregister(args: si.PredicatesArgs) -> None:
        run.core.register_resource_manager(t.register(RM, CONFIG), new)

    run.during_decision(reregister, let_through=1)
    run.core.update_allocation(t.asks(RM, "app", 5, SMALL))
    run.idle()
    assert run.acted is True, f"the decision the test pins never happened: {run.acted!r}"
    assert run.passed, "the scheduler never asked the predicate"
    run.rm = new
    run.asked.clear()
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    run.core.update_allocation(run.asks("app", 2))
    run.idle()
    assert len(new.live) == 2
    run.check()


# ---- release racing the completing timeout -----------------------------------------------------------------


def test_release_then_new_ask_racing_the_completing_timeout(seed: int) -> None:
    """Pinned both ways: everything released (-> Completing), then at the application either the new
    ask before the completing timeout (it runs again) or the timeout first (Completed: the ask is
    rejected). A completed application's id can then be used again."""
    with running(seed, {"completing_timeout": 0.01}) as run:
        release_then_ask_racing_the_timeout(run)


def release_then_ask_racing_the_timeout(run: Run) -> None:
    run.nodes(["n1"])
    for round_, ask_first in enumerate([True, False, True, False]):
        app_id = f"app{round_}"
        run.apps({app_id: "root.a"})
        run.core.update_allocation(run.asks(app_id, 1))
        run.idle()
        assert len(run.core.application(PARTITION, app_id).allocations) == 1
        run.core.update_allocation(t.release(RM, app_id))  # -> Completing, the timer starts
        run.idle()
        with run.script.holding(to(f"app/{app_id}")):
            if ask_first:
                run.core.update_allocation(run.asks(app_id, 1, start=1))
                run.core.advance(0.01)
            else:
                run.core.advance(0.01)
                run.core.update_allocation(run.asks(app_id, 1, start=1))
                run.idle()
            order = [type(p.message) for p in run.simulation.queued() if to(f"app/{app_id}")(p)]
            timeout_at = order.index(CompletingTimeout)
            assert (order.index(AddAsks) < timeout_at) == ask_first, order
        run.idle()
        info = run.core.application(PARTITION, app_id)
        key = (app_id, f"{app_id}-k1")
        live = {(a.application_id, a.allocation_key) for a in run.rm.live.values()}
        rejected = {(r.application_id, r.allocation_key) for r in run.rm.rejected_asks}
        if ask_first:
            assert key in live and info is not None and info.state == "Running"
        else:
            assert key in rejected, "the ask for a completed application was neither allocated nor rejected"
            assert info is not None and info.state == "Completed" and not info.allocations
    run.check()
    run.apps({"app1": "root.a"})  # completed: its id can be used again
    run.core.update_allocation(run.asks("app1", 1, start=5))
    run.idle()
    info = run.core.application(PARTITION, "app1")
    assert info is not None and info.state in ("Starting", "Running") and len(info.allocations) == 1
    run.check()


def test_release_and_ask_in_one_request_with_an_instant_completing_timeout(seed: int) -> None:
    """Any order: everything released and a new ask in one request; the ask comes first, so the
    application never has nothing left and must not complete under the new ask."""
    with running(seed, {"completing_timeout": 0.0}) as run:
        release_and_ask_in_one_request(run)


def release_and_ask_in_one_request(run: Run) -> None:
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    run.core.update_allocation(run.asks("app", 1))
    run.idle()
    for index in range(1, 30):
        release = t.release(RM, "app")
        ask = run.asks("app", 1, start=index).asks[0]
        run.core.update_allocation(si.AllocationRequest(rm_id=RM, asks=[ask], releases=release.releases))
        run.core.advance(0.001)  # the instant timeout, if one was started, fires
        info = run.core.application(PARTITION, "app")
        assert info is not None and info.state == "Running", f"round {index}: {info and info.state}"
        assert [a.allocation_key for a in info.allocations] == [f"app-k{index}"]
    run.check()


# ---- application removed and added again ------------------------------------------------------------------


def test_application_removed_and_added_again_before_the_old_one_said_it_is_gone() -> None:
    """Found by seed search: the new incarnation's AppAdded (from the partition) reaches the scheduler
    before the old incarnation's AppGone (from the old application actor, once it handled its removal).
    The scheduler must not drop the new one when the old one's AppGone arrives: its asks get placed."""
    pinned = []
    for seed in range(20):
        with running(seed) as run:
            run.nodes(["n1"])
            run.apps({"x": "root.a"})
            run.core.update_allocation(run.asks("x", 3))
            run.remove_app("x")
            run.apps({"x": "root.a"})
            run.removed_apps.discard("x")
            run.asked.clear()  # the first incarnation's asks went with it
            run.core.update_allocation(run.asks("x", 2, prefix="again-"))
            run.idle()
            at_scheduler = [
                kind.__name__
                for actor, kind in run.delivered
                if actor == f"{PARTITION}/scheduler" and kind.__name__ in ("AppAdded", "AppGone")
            ]
            if at_scheduler == ["AppAdded", "AppAdded", "AppGone"]:
                pinned.append(seed)
            info = run.core.application(PARTITION, "x")
            assert info is not None and sorted(a.allocation_key for a in info.allocations) == [
                "again-0",
                "again-1",
            ], f"seed {seed} ({at_scheduler}): the re-added application's asks were not placed"
            run.check()
    assert pinned, "no seed delivered the new AppAdded before the old AppGone"
