"""End-to-end: failing or slow RMs, bad input, races between requests, and a clean shutdown."""

from __future__ import annotations

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
    korral_threads,
    part,
    running,
)

import korral
from korral import si
from korral import testing as t

P = part()


class Raising(t.RecordingRM):
    """Records like RecordingRM, then raises from every callback."""

    def update_allocation(self, response):
        super().update_allocation(response)
        raise RuntimeError("RM bug: update_allocation")

    def update_application(self, response):
        super().update_application(response)
        raise RuntimeError("RM bug: update_application")

    def update_node(self, response):
        super().update_node(response)
        raise RuntimeError("RM bug: update_node")

    def send_event(self, events):
        raise RuntimeError("RM bug: send_event")

    def update_container_scheduling_state(self, request):
        raise RuntimeError("RM bug: scheduling state")


def test_callbacks_that_raise_do_not_stop_scheduling():
    with running(SINGLE_LEAF, rm=Raising("rm"), allow_errors=True) as (core, rm):
        add_nodes(core, rm, ["n1", "n2"])
        add_apps(core, rm, {"app1": "root.singleleaf"})
        core.update_allocation(t.asks("rm", "app1", 5, SMALL))
        core.wait_until_idle()
        assert rm.allocated_total == 5
        core.update_allocation(t.release("rm", "app1", uuid=sorted(rm.live)[0]))
        core.update_allocation(t.asks("rm", "app1", 3, SMALL, start=5))
        core.update_allocation(t.asks("rm", "app1", 1, {"memory": 1_000 * MB}, prefix="huge-"))
        core.wait_until_idle()
        assert rm.allocated_total == 8 and len(rm.released) == 1
        assert len(core.application(P, "app1").allocations) == 7
        check_invariants(core, P, rm)
        # contained: the RM's failures are not the core's errors
        assert core.tracker.errors == 0


@pytest.mark.usefixtures("engine")  # both engines: predicates cross the process boundary
def test_predicate_that_raises_means_node_not_usable():
    def predicate(args: si.PredicatesArgs) -> bool:
        if args.node_id == "n1":
            raise RuntimeError("plugin failure")
        return True

    rm = t.RecordingRM("rm", predicate=predicate)
    with running(SINGLE_LEAF, rm=rm) as (core, rm):
        add_nodes(core, rm, ["n1", "n2"])
        add_apps(core, rm, {"app1": "root.singleleaf"})
        core.update_allocation(t.asks("rm", "app1", 4, SMALL))
        core.wait_until_idle()
        assert {a.node_id for a in rm.live.values()} == {"n2"} and rm.allocated_total == 4
        check_invariants(core, P, rm)


def test_a_blocking_rm_does_not_delay_another_rm():
    gate = threading.Event()

    class Blocking(t.RecordingRM):
        def update_allocation(self, response):
            gate.wait(30.0)  # until the test opens it: far longer than anything below may take
            super().update_allocation(response)

    rm1, rm2 = Blocking("rm1"), t.RecordingRM("rm2")
    with korral.start(**FAST) as core:
        core.register_resource_manager(t.register("rm1", TWO_LEAVES), rm1)
        core.register_resource_manager(t.register("rm2", TWO_LEAVES), rm2)
        for rm in (rm1, rm2):
            core.update_node(t.nodes(rm.rm_id, ["n1"], NODE))
            core.update_application(t.applications(rm.rm_id, {"app": "root.a"}))
        assert rm1.wait_for(lambda r: r.accepted_apps == ["app"], 5.0)
        assert rm2.wait_for(lambda r: r.accepted_apps == ["app"], 5.0)
        core.update_allocation(t.asks("rm1", "app", 3, SMALL))
        core.update_allocation(t.asks("rm2", "app", 3, SMALL))
        # rm2 is served while rm1's callback is still blocked (its RM has received nothing): had rm2
        # waited behind rm1, it would wait until the gate opens below
        assert rm2.wait_for_allocations(3, timeout=10.0)
        assert rm1.allocated_total == 0
        # rm1's allocations are made (by its own partition, on its own schedule: rm2 being served
        # first says nothing about when), only its callback is stuck
        eventually(lambda: len(core.application("[rm1]default", "app").allocations) == 3)
        assert rm1.allocated_total == 0
        # more work for rm2 still flows while rm1 blocks
        core.update_allocation(t.asks("rm2", "app", 2, SMALL, start=3))
        assert rm2.wait_for_allocations(5, timeout=10.0)
        assert rm1.allocated_total == 0
        gate.set()
        core.wait_until_idle()
        assert rm1.allocated_total == 3
        check_invariants(core, "[rm1]default", rm1)
        check_invariants(core, "[rm2]default", rm2)
        assert core.tracker.errors == 0


def test_bad_input_is_rejected_and_the_core_keeps_working():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        core.update_node(t.nodes("rm", ["neg"], {"memory": -100, "vcore": 1_000}))
        core.update_node(t.nodes("rm", [""], NODE))
        core.update_node(si.NodeRequest(rm_id="rm"))
        core.update_application(t.applications("rm", {"": "root.singleleaf"}))
        core.update_application(si.ApplicationRequest(rm_id="rm"))
        core.update_allocation(si.AllocationRequest(rm_id="rm"))
        core.update_allocation(si.AllocationRequest(rm_id="rm", releases=si.AllocationReleasesRequest()))
        core.wait_until_idle()
        assert "negative" in rm.rejected_nodes["neg"]
        assert rm.rejected_nodes[""] and rm.rejected_apps[""]
        assert core.node(P, "neg") is None and core.partition(P).capacity == NODE
        add_apps(core, rm, {"app1": "root.singleleaf"})
        core.update_allocation(t.asks("rm", "app1", 1, {"memory": -1, "vcore": -1}, prefix="bad-"))
        core.update_allocation(t.asks("rm", "app1", 1, SMALL, max_allocations=-2, prefix="neg-max-"))
        core.update_allocation(t.asks("rm", "app1", 2, SMALL))
        core.wait_until_idle()
        assert sorted(r.allocation_key for r in rm.rejected_asks) == ["bad-0", "neg-max-0"]
        assert rm.allocated_total == 2
        # an update to negative capacity is refused and the node keeps its capacity
        core.update_node(t.node_action("rm", "n1", si.NodeAction.UPDATE, schedulable_resource={"memory": -5}))
        core.wait_until_idle()
        assert "negative" in rm.rejected_nodes["n1"]
        assert core.node(P, "n1").capacity == NODE
        check_invariants(core, P, rm)


def test_requests_are_handled_in_the_order_they_were_made():
    with running(SINGLE_LEAF) as (core, rm):
        # no waiting in between: node, app, asks, release of some, all in flight together
        core.update_node(t.nodes("rm", ["n1"], NODE))
        core.update_application(t.applications("rm", {"app1": "root.singleleaf"}))
        core.update_allocation(t.asks("rm", "app1", 4, SMALL))
        core.update_allocation(t.release_asks("rm", "app1", allocation_key="app1-ask-3"))
        core.wait_until_idle()
        assert rm.rejected_asks == []
        assert rm.allocated_total in (3, 4)
        check_invariants(core, P, rm)


def test_removing_an_application_while_it_is_being_scheduled():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1", "n2"])
        for round_ in range(5):
            app_id = f"app{round_}"
            add_apps(core, rm, {app_id: "root.singleleaf"})
            core.update_allocation(t.asks("rm", app_id, 15, SMALL))
            core.update_application(t.remove_applications("rm", [app_id]))
            core.wait_until_idle()
            assert app_id not in rm.live_by_app()
            assert core.application(P, app_id) is None
        assert all(n.allocated == {} for n in core.nodes(P))
        assert core.queue(P, "root.singleleaf").allocated == {}
        assert core.queue(P, "root.singleleaf").pending == {}
        assert rm.foreign == []
        check_invariants(core, P, rm)


def test_decommissioning_a_node_while_it_is_being_scheduled():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1", "n2"])
        add_apps(core, rm, {"app1": "root.singleleaf"})
        core.update_allocation(t.asks("rm", "app1", 15, SMALL))
        core.update_node(t.node_action("rm", "n1", si.NodeAction.DECOMISSION))
        core.wait_until_idle()
        assert core.node(P, "n1") is None
        assert all(a.node_id == "n2" for a in rm.live.values())
        assert len(rm.live) == 10
        assert rm.foreign == []
        check_invariants(core, P, rm)


def test_concurrent_submitters_keep_the_books_balanced():
    with running(TWO_LEAVES) as (core, rm):
        add_nodes(core, rm, [f"n{i}" for i in range(4)])
        errors: list[BaseException] = []

        def submitter(index: int) -> None:
            try:
                app_id = f"app{index}"
                queue = "root.a" if index % 2 else "root.b"
                core.update_application(t.applications("rm", {app_id: queue}))
                for batch in range(5):
                    core.update_allocation(t.asks("rm", app_id, 4, SMALL, start=batch * 4))
                    if batch % 2:
                        core.update_allocation(
                            t.release("rm", app_id, allocation_key=f"{app_id}-ask-{batch}")
                        )
                core.update_allocation(t.release_asks("rm", app_id, allocation_key=f"{app_id}-ask-19"))
            except BaseException as error:  # pragma: no cover - reported below
                errors.append(error)

        threads = [threading.Thread(target=submitter, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        core.wait_until_idle()
        assert rm.rejected_asks == [] and rm.foreign == []
        assert len(rm.live) == 40
        check_invariants(core, P, rm)


def test_no_errors_after_a_normal_run():
    with collect_errors() as logged, korral.start(**FAST) as core:
        rm = t.RecordingRM("rm")
        core.register_resource_manager(t.register("rm", SINGLE_LEAF), rm)
        add_nodes(core, rm, ["n1", "n2"])
        add_apps(core, rm, {"app1": "root.singleleaf", "app2": "root.singleleaf"})
        core.update_allocation(t.asks("rm", "app1", 10, SMALL))
        core.update_allocation(t.asks("rm", "app2", 10, SMALL))
        core.wait_until_idle()
        core.update_allocation(t.release("rm", "app1"))
        core.update_node(t.node_action("rm", "n2", si.NodeAction.DECOMISSION))
        core.update_application(t.remove_applications("rm", ["app2"]))
        core.wait_until_idle()
        assert rm.wait_for(lambda r: "Completed" in r.app_states["app1"], 5.0)
        core.wait_until_idle()
        assert core.tracker.errors == 0
        assert logged.messages() == []
        check_invariants(core, P, rm)


def test_stop_leaves_no_korral_threads_and_no_actors():
    before = set(pykka.ActorRegistry.get_all())
    core = korral.start(**FAST)
    rm = t.RecordingRM("rm")
    core.register_resource_manager(t.register("rm", SINGLE_LEAF), rm)
    core.register_resource_manager(t.register("rm2", ""), t.RecordingRM("rm2"))
    add_nodes(core, rm, ["n1", "n2"])
    add_apps(core, rm, {"app1": "root.singleleaf"})
    core.update_allocation(t.asks("rm", "app1", 20, SMALL))
    core.wait_until_idle()
    assert korral_threads()
    core.stop()
    assert korral_threads() == []
    assert set(pykka.ActorRegistry.get_all()) - before == set()


def test_stop_while_work_is_in_flight():
    before = set(pykka.ActorRegistry.get_all())
    core = korral.start(**FAST)
    rm = t.RecordingRM("rm")
    core.register_resource_manager(t.register("rm", TWO_LEAVES), rm)
    core.update_node(t.nodes("rm", [f"n{i}" for i in range(20)], NODE))
    core.update_application(t.applications("rm", {f"app{i}": "root.a" for i in range(20)}))
    for i in range(20):
        core.update_allocation(t.asks("rm", f"app{i}", 20, SMALL))
    core.stop()
    assert korral_threads() == []
    assert set(pykka.ActorRegistry.get_all()) - before == set()


def test_reload_while_the_partition_is_busy_neither_fails_nor_waits():
    """A reload is validated, then applied by the partition in order: it does not wait on a busy one."""
    entered, gate = threading.Event(), threading.Event()

    def predicate(args: si.PredicatesArgs) -> bool:
        entered.set()
        gate.wait(30.0)  # the RM's plugin is slow: the partition's scheduler waits on it
        return True

    rm = t.RecordingRM("rm", predicate=predicate)
    with running(TWO_LEAVES, rm=rm) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": "root.a"})
        core.update_allocation(t.asks("rm", "app1", 1, SMALL))
        assert entered.wait(5.0)
        # a snapshot of the node needs the (blocked) scheduler: the partition waits on it
        reader = threading.Thread(target=core.node, args=(P, "n1"))
        reader.start()
        reader.join(0.2)
        started = time.monotonic()
        core.update_configuration(
            si.UpdateConfigurationRequest(rm_id="rm", config=TWO_LEAVES + "          - name: c\n")
        )
        # waiting on the partition would mean waiting for the gate (30 s); seconds allow a loaded machine
        assert time.monotonic() - started < 5.0
        gate.set()
        reader.join()
        core.wait_until_idle()
        assert core.queue(P, "root.c") is not None
        assert rm.allocated_total == 1
        check_invariants(core, P, rm)


def test_a_slow_predicate_of_one_rm_does_not_delay_another_rm():
    gate = threading.Event()

    def slow(args: si.PredicatesArgs) -> bool:
        gate.wait(30.0)  # until the test opens it
        return True

    rm1, rm2 = t.RecordingRM("rm1", predicate=slow), t.RecordingRM("rm2")
    with korral.start(**FAST) as core:
        core.register_resource_manager(t.register("rm1", TWO_LEAVES), rm1)
        core.register_resource_manager(t.register("rm2", TWO_LEAVES), rm2)
        for rm in (rm1, rm2):
            core.update_node(t.nodes(rm.rm_id, ["n1"], NODE))
            core.update_application(t.applications(rm.rm_id, {"app": "root.a"}))
        assert rm2.wait_for(lambda r: r.accepted_apps == ["app"], 5.0)
        core.update_allocation(t.asks("rm1", "app", 3, SMALL))
        core.update_allocation(t.asks("rm2", "app", 3, SMALL))
        # rm2 is served while rm1's scheduler still waits on its predicate (nothing placed for rm1)
        assert rm2.wait_for_allocations(3, timeout=10.0)
        assert rm1.allocated_total == 0
        gate.set()
        core.wait_until_idle()
        assert rm1.allocated_total == 3
        assert core.tracker.errors == 0


def _asks_of_many_apps(app_ids: list[str], per_app: int, prefix: str) -> si.AllocationRequest:
    """One request spread over many applications, as a shim batches its updates."""
    asks = [ask for app_id in app_ids for ask in t.asks("rm", app_id, per_app, SMALL, prefix=prefix).asks]
    return si.AllocationRequest(rm_id="rm", asks=asks)


def test_a_request_spread_over_many_applications_is_scheduled_whole():
    app_ids = [f"app{index}" for index in range(30)]
    with running(TWO_LEAVES) as (core, rm):
        add_nodes(core, rm, [f"n{index}" for index in range(20)])  # room for 200
        add_apps(
            core, rm, {app_id: ("root.a" if index % 3 else "root.b") for index, app_id in enumerate(app_ids)}
        )
        for round_ in range(3):
            core.update_allocation(_asks_of_many_apps(app_ids, 2, f"r{round_}-"))
        core.wait_until_idle()
        assert rm.allocated_total == 30 * 2 * 3
        for app_id in app_ids:
            assert len(core.application(P, app_id).allocations) == 6
        check_invariants(core, P, rm)


def test_a_failure_while_the_scheduler_takes_asks_in_is_contained(monkeypatch):
    """The view fails once taking new asks in (one application's, or a bundle of many): logged and
    counted, the scheduler lives on and takes later asks in."""
    from korral.model.view import SchedulingView

    original = SchedulingView.put_asks
    failures: list[int] = []

    def failing_once(view, asks):
        if not failures:
            failures.append(len(asks))
            raise RuntimeError("view bug")
        return original(view, asks)

    monkeypatch.setattr(SchedulingView, "put_asks", failing_once)
    app_ids = [f"app{index}" for index in range(10)]
    with collect_errors() as errors, running(TWO_LEAVES, allow_errors=True) as (core, rm):
        add_nodes(core, rm, ["n1", "n2"])
        add_apps(core, rm, dict.fromkeys(app_ids, "root.a"))
        core.update_allocation(_asks_of_many_apps(app_ids, 1, "first-"))
        core.wait_until_idle()
        assert failures and core.tracker.errors == 1
        assert any("ViewOps failed" in message for message in errors.messages())
        lost = failures[0]
        assert rm.allocated_total == len(app_ids) - lost
        core.update_allocation(_asks_of_many_apps(app_ids, 1, "later-"))
        core.wait_until_idle()
        assert rm.allocated_total == 2 * len(app_ids) - lost


def test_not_idle_in_time_names_who_has_messages_in_flight():
    release = threading.Event()

    class Blocking(t.RecordingRM):
        def update_node(self, response):
            super().update_node(response)
            release.wait(10.0)

    with running(TWO_LEAVES, rm=Blocking("rm")) as (core, rm):
        core.update_node(t.nodes("rm", ["n1"], NODE))
        core.update_node(t.nodes("rm", ["n2"], NODE))  # queued behind the blocked callback
        with pytest.raises(
            TimeoutError, match=r"messages in flight \(.*\[rm\]callbacks \(alive, \d+ in its mailbox\): \d"
        ):
            core.wait_until_idle(0.3)
        release.set()
        core.wait_until_idle()
        assert {"n1", "n2"} <= set(rm.accepted_nodes)
