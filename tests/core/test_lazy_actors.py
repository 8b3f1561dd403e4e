"""Node actors start after the RM's answer or on their first message (``LazyHandle``): the handle
itself, then end to end through ``korral.Core``. ``ActorSetup(node_actor_warmup=0)`` leaves every
node's actor to its first message, so that nodes whose actors never started can be snapshotted,
drained, removed, recovered onto and stopped."""

from __future__ import annotations

import threading
from typing import Any

import pykka
import pytest
from core_helpers import MB, NODE, SINGLE_LEAF, SMALL, add_apps, add_nodes, check_invariants, part, running

import korral
from korral import si
from korral import testing as t
from korral.actors.base import PoolActor, Rank
from korral.actors.runtime import ActorPool, StopFlag
from korral.actors.setup import ActorSetup
from korral.actors.starting import LazyHandle, start_actor_lazily
from korral.actors.tracker import Tracker

P = part()
LEAF = "root.singleleaf"


class Recorder(PoolActor):
    rank = Rank.NODE
    started: list[str] = []

    def __init__(self, tracker: Tracker, name: str, log: list[Any], *, pool: ActorPool) -> None:
        super().__init__(tracker, name, pool=pool)
        self.log = log
        Recorder.started.append(name)

    def on_receive(self, message: Any) -> Any:
        try:
            self.log.append(message)
            return self.handle
        finally:
            self.tracker.done(self.handle.actor_id)


@pytest.fixture
def pool():
    pool = ActorPool("lazy")
    Recorder.started = []
    yield pool
    pool.stop()


def live_actors() -> set[str]:
    """The URNs of every actor alive in the process (earlier tests' actors may still be stopping, so
    compare with ``<=``: nothing new may be left)."""
    return {ref.actor_urn for ref in pykka.ActorRegistry.get_all()}


def new_actors(before: set[str]) -> int:
    """Actors alive now that were not before."""
    return len(live_actors() - before)


def test_stop_flag_is_set_once_stopped() -> None:
    flag = StopFlag()
    assert not flag.is_set()
    flag.set()
    assert flag.is_set()
    flag.clear()
    assert not flag.is_set()


def test_a_lazy_actor_starts_on_its_first_message_and_owns_the_handle(pool: ActorPool) -> None:
    tracker = Tracker()
    log: list[Any] = []
    handle = start_actor_lazily(Recorder, tracker, "n1", log, pool=pool)
    assert isinstance(handle, LazyHandle)
    assert Recorder.started == [] and not handle.started and handle.is_alive
    assert handle.tell("first") is True
    assert handle.started and Recorder.started == ["n1"]
    assert handle.ask("second", caller=Rank.OUTSIDE) is handle  # the actor's own handle is this one
    assert tracker.wait_idle(5.0)
    assert log == ["first", "second"] and Recorder.started == ["n1"]


def test_a_lazy_actor_stopped_before_anything_was_sent_refuses_tells(pool: ActorPool) -> None:
    tracker = Tracker()
    before = live_actors()
    handle = start_actor_lazily(Recorder, tracker, "n1", [], pool=pool)
    handle.stop()
    assert not handle.is_alive and not handle.started
    assert handle.tell("late") is False
    assert tracker.in_flight() == 0
    with pytest.raises(pykka.ActorDeadError):
        handle.ask("late", caller=Rank.OUTSIDE, timeout=1.0)
    assert Recorder.started == [] and new_actors(before) == 0


def test_first_messages_from_several_threads_start_one_actor(pool: ActorPool) -> None:
    tracker = Tracker()
    log: list[Any] = []
    handle = start_actor_lazily(Recorder, tracker, "n1", log, pool=pool)
    gate = threading.Barrier(4)

    def send(sender: int) -> None:
        gate.wait(5.0)
        for index in range(50):
            handle.tell((sender, index))

    threads = [threading.Thread(target=send, args=(sender,)) for sender in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10.0)
    assert tracker.wait_idle(5.0)
    assert Recorder.started == ["n1"]
    assert sorted(log) == sorted((sender, index) for sender in range(4) for index in range(50))
    for sender in range(4):  # each sender's messages in the order sent
        assert [index for who, index in log if who == sender] == list(range(50))


# ---- end to end -----------------------------------------------------------------------------------


def test_registered_nodes_get_their_actors_after_the_answer_and_schedule_as_before() -> None:
    with running(SINGLE_LEAF) as (core, rm):
        add_apps(core, rm, {"app1": LEAF})
        before = live_actors()
        add_nodes(core, rm, [f"n{index}" for index in range(1201)])  # more than one warm-up step
        assert new_actors(before) == 1201
        core.update_allocation(t.asks("rm", "app1", 12, SMALL))  # the leaf's max holds 15
        core.wait_until_idle()
        assert rm.allocated_total == 12 and new_actors(before) == 1201
        core.update_node(t.node_action("rm", "n7", si.NodeAction.DECOMISSION))
        core.wait_until_idle()
        assert core.partition(P).node_count == 1200
        check_invariants(core, P, rm)


def test_registering_nodes_or_placing_on_them_starts_no_node_actor_until_one_is_asked() -> None:
    with running(SINGLE_LEAF, setup=ActorSetup(node_actor_warmup=0)) as (core, rm):
        add_apps(core, rm, {"app1": LEAF})
        before = live_actors()
        add_nodes(core, rm, [f"n{index}" for index in range(20)])
        assert new_actors(before) == 0
        core.update_allocation(t.asks("rm", "app1", 1, SMALL))
        core.wait_until_idle()
        assert rm.allocated_total == 1
        # the scheduler's view records the placement: nothing is sent to its node
        assert new_actors(before) == 0
        (allocation,) = rm.live.values()
        info = core.node(P, allocation.node_id)  # its first message: a snapshot
        assert info is not None and [a.uuid for a in info.allocations] == [allocation.uuid]
        assert new_actors(before) == 1
        check_invariants(core, P, rm)


def test_a_node_that_never_got_a_placement_is_snapshotted_drained_and_removed() -> None:
    with running(SINGLE_LEAF, setup=ActorSetup(node_actor_warmup=0)) as (core, rm):
        add_nodes(core, rm, ["n1", "n2"], capacity={"memory": 50 * MB, "vcore": 20_000})
        info = core.node(P, "n2")
        assert info is not None and info.schedulable and info.allocations == []
        assert info.capacity == {"memory": 50 * MB, "vcore": 20_000} == info.available
        core.update_node(t.node_action("rm", "n2", si.NodeAction.DRAIN_NODE))
        core.wait_until_idle()
        assert core.node(P, "n2").schedulable is False
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(t.asks("rm", "app1", 3, SMALL))
        core.wait_until_idle()
        assert {a.node_id for a in core.application(P, "app1").allocations} == {"n1"}
        core.update_node(t.node_action("rm", "n2", si.NodeAction.DECOMISSION))
        core.wait_until_idle()
        assert core.node(P, "n2") is None
        assert core.partition(P).node_count == 1
        assert core.partition(P).capacity == {"memory": 50 * MB, "vcore": 20_000}
        check_invariants(core, P, rm)


def test_a_never_used_node_is_removed_right_away_and_its_id_can_come_back() -> None:
    with running(SINGLE_LEAF, setup=ActorSetup(node_actor_warmup=0)) as (core, rm):
        add_nodes(core, rm, ["n1"])
        core.update_node(t.node_action("rm", "n1", si.NodeAction.DECOMISSION))
        core.wait_until_idle()
        assert core.node(P, "n1") is None and core.partition(P).capacity == {}
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(t.asks("rm", "app1", 2, SMALL))
        core.wait_until_idle()
        assert rm.allocated_total == 2
        assert len(core.node(P, "n1").allocations) == 2
        check_invariants(core, P, rm)


def test_recovered_allocations_are_booked_on_a_node_whose_actor_starts_for_them() -> None:
    with running(SINGLE_LEAF, setup=ActorSetup(node_actor_warmup=0)) as (core, rm):
        add_apps(core, rm, {"app1": LEAF})
        existing = [
            si.Allocation(
                allocation_key=f"r-{index}",
                uuid=f"uuid-r-{index}",
                resource_per_alloc=dict(SMALL),
                node_id="n1",
                application_id="app1",
            )
            for index in range(3)
        ]
        core.update_node(t.nodes("rm", ["n1", "n2"], NODE, existing=existing))
        core.wait_until_idle()
        assert sorted(rm.accepted_nodes) == ["n1", "n2"]
        assert {a.uuid for a in core.node(P, "n1").allocations} == {a.uuid for a in existing}
        assert core.node(P, "n2").allocations == []
        core.update_node(t.node_action("rm", "n1", si.NodeAction.DECOMISSION))
        core.wait_until_idle()
        assert {uuid for uuid, _, _ in rm.release_reasons()} == {a.uuid for a in existing}
        check_invariants(core, P, rm)


def test_stopping_a_core_with_unused_nodes_leaves_no_actor_behind() -> None:
    before = live_actors()
    with running(SINGLE_LEAF, setup=ActorSetup(node_actor_warmup=0)) as (core, rm):
        add_nodes(core, rm, [f"n{index}" for index in range(10)])
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(t.asks("rm", "app1", 1, SMALL))
        core.wait_until_idle()
    assert new_actors(before) == 0


def test_unused_nodes_on_the_simulated_runtime() -> None:
    with korral.start(runtime="simulated", seed=7, setup=ActorSetup(node_actor_warmup=0)) as core:
        rm = t.RecordingRM("rm")
        core.register_resource_manager(t.register("rm", SINGLE_LEAF), rm)
        core.update_node(t.nodes("rm", ["n1", "n2", "n3"], NODE))
        core.update_application(t.applications("rm", {"app1": LEAF}))
        core.wait_until_idle()
        core.update_allocation(t.asks("rm", "app1", 2, SMALL))
        core.wait_until_idle()
        used = {a.node_id for a in core.application(P, "app1").allocations}
        unused = sorted({"n1", "n2", "n3"} - used)
        assert rm.allocated_total == 2 and unused
        core.update_node(t.node_action("rm", unused[0], si.NodeAction.DECOMISSION))
        core.wait_until_idle()
        assert core.node(P, unused[0]) is None
        assert core.partition(P).node_count == 2
        check_invariants(core, P, rm)


def test_warm_up_on_the_simulated_runtime_races_placements_and_removals() -> None:
    for seed in range(5):
        with korral.start(runtime="simulated", seed=seed, setup=ActorSetup(node_actor_warmup=2)) as core:
            rm = t.RecordingRM("rm")
            core.register_resource_manager(t.register("rm", SINGLE_LEAF), rm)
            core.update_application(t.applications("rm", {"app1": LEAF}))
            core.update_node(t.nodes("rm", [f"n{index}" for index in range(7)], NODE))
            core.update_allocation(t.asks("rm", "app1", 4, SMALL))
            core.update_node(t.node_action("rm", "n5", si.NodeAction.DECOMISSION))
            core.wait_until_idle()
            assert rm.allocated_total + len(rm.released) >= 4
            assert core.partition(P).node_count == 6
            check_invariants(core, P, rm)


class FailingNodeRM(t.RecordingRM):
    def update_node(self, response: si.NodeResponse) -> None:
        super().update_node(response)
        raise RuntimeError("the RM fails on its node answer")


def test_node_actors_start_after_the_answer_even_when_the_rm_fails_on_it() -> None:
    rm = FailingNodeRM("rm")
    with running(SINGLE_LEAF, rm=rm, allow_errors=True) as (core, _):
        before = live_actors()
        core.update_node(t.nodes("rm", ["n1", "n2", "n3"], NODE))
        core.wait_until_idle()
        assert sorted(rm.accepted_nodes) == ["n1", "n2", "n3"]
        assert new_actors(before) == 3
        add_apps(core, rm, {"app1": LEAF})
        core.update_allocation(t.asks("rm", "app1", 3, SMALL))
        core.wait_until_idle()
        assert rm.allocated_total == 3
        check_invariants(core, P, rm)
