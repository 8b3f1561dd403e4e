"""Typed dispatch: handler tables keyed by message class, checked when an actor class first starts."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import korral
from korral import si
from korral import testing as t
from korral.actors.application import ApplicationActor
from korral.actors.base import HandlerError, Rank, ThreadedActor
from korral.actors.dispatch import HandlerTableError, handler_table
from korral.actors.messages import AddAsks, Retire, SchedulerDone
from korral.actors.node import NodeActor
from korral.actors.partition.actor import PartitionActor
from korral.actors.scheduler.actor import SchedulerActor
from korral.actors.starting import start_actor
from korral.actors.tracker import Tracker
from korral.callback import ResourceManagerCallback


class Ping:
    pass


class Pong:
    pass


class Stranger:
    """A message no actor here handles."""


class Answers(ThreadedActor):
    rank = Rank.NODE

    def on_Ping(self, message: Ping) -> str:
        return "pong"


def test_the_table_is_keyed_by_message_class_with_inherited_handlers() -> None:
    table = handler_table(NodeActor)
    assert SchedulerDone in table and Retire in table  # from RetiringActor
    assert all(isinstance(kind, type) for kind in table)
    assert AddAsks in handler_table(ApplicationActor)
    for actor_class in (SchedulerActor, PartitionActor, NodeActor, ApplicationActor):
        for kind, handler in handler_table(actor_class).items():
            assert handler.__name__ == f"on_{kind.__name__}"


def test_an_unhandled_message_is_counted_as_an_error_and_answered_with_one() -> None:
    tracker = Tracker()
    actor = start_actor(Answers, tracker, "answers")
    try:
        assert actor.ask(Ping(), caller=Rank.OUTSIDE) == "pong"
        assert actor.tell(Stranger())
        assert tracker.wait_idle(5.0)
        assert tracker.errors == 1
        answer = actor.ask(Stranger(), caller=Rank.OUTSIDE)
        assert isinstance(answer, HandlerError)
        assert "no handler for Stranger" in answer.message
        assert tracker.errors == 2
        assert actor.is_alive
    finally:
        actor.stop()


def test_a_handler_annotated_with_another_class_is_refused_at_start() -> None:
    class Misnamed(ThreadedActor):
        def on_Ping(self, message: Pong) -> None:
            pass

    with pytest.raises(HandlerTableError, match="on_Ping is annotated to handle Pong"):
        start_actor(Misnamed, Tracker(), "misnamed")


def test_a_handler_without_a_message_class_is_refused_at_start() -> None:
    class Untyped(ThreadedActor):
        def on_Ping(self, message: Any) -> None:
            pass

    with pytest.raises(HandlerTableError, match="must annotate its message"):
        start_actor(Untyped, Tracker(), "untyped")


def test_a_handler_with_extra_arguments_is_refused_at_start() -> None:
    class TooMany(ThreadedActor):
        def on_Ping(self, message: Ping, extra: int) -> None:
            pass

    with pytest.raises(HandlerTableError, match="must take"):
        start_actor(TooMany, Tracker(), "too-many")


CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: leaf
"""


@pytest.mark.parametrize("settings", [{}, {"runtime": "simulated", "seed": 3}])
def test_a_core_schedules_with_every_message_handled(settings: dict[str, Any]) -> None:
    rm = t.RecordingRM("rm")
    with korral.start(**settings) as core:
        core.register_resource_manager(t.register("rm", CONFIG), rm)
        core.update_node(t.nodes("rm", ["n1"], {"memory": 1000, "vcore": 10}))
        core.update_application(t.applications("rm", {"app1": "root.leaf"}))
        core.update_allocation(t.asks("rm", "app1", 3, {"memory": 100, "vcore": 1}))
        core.wait_until_idle()
        assert len(rm.live) == 3
        assert core.tracker.errors == 0


class OnlyAllocations:
    """An RM callback that is not a ResourceManagerCallback and has some of its methods."""

    def __init__(self) -> None:
        self.new: list[si.Allocation] = []
        self.events: list[si.EventRecord] = []

    def send_event(self, events: list[si.EventRecord]) -> None:
        self.events.extend(events)

    def predicates(self, args: si.PredicatesArgs) -> bool:
        return True

    def update_allocation(self, response: si.AllocationResponse) -> None:
        self.new.extend(response.new)


def test_an_rm_without_some_callback_methods_gets_the_ones_it_has(caplog: pytest.LogCaptureFixture) -> None:
    rm = OnlyAllocations()
    with korral.start() as core:
        core.register_resource_manager(t.register("rm", CONFIG), rm)  # type: ignore[arg-type]
        core.update_node(t.nodes("rm", ["n1"], {"memory": 1000, "vcore": 10}))
        core.update_application(t.applications("rm", {"app1": "root.leaf"}))
        core.update_allocation(t.asks("rm", "app1", 2, {"memory": 100, "vcore": 1}))
        core.wait_until_idle()
        assert len(rm.new) == 2
        assert core.tracker.errors == 0
    said = [r.getMessage() for r in caplog.records if "not delivered" in r.getMessage()]
    assert any("update_node" in line for line in said)
    assert len([line for line in said if "update_node" in line]) == 1  # said once


class CountingRM(ResourceManagerCallback):
    """Counts the allocations of each update_allocation call (it takes no events)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls_with_new: list[int] = []

    @property
    def allocated(self) -> int:
        with self.lock:
            return sum(self.calls_with_new)

    def update_allocation(self, response: si.AllocationResponse) -> None:
        if response.new:
            with self.lock:
                self.calls_with_new.append(len(response.new))


def test_the_rm_hears_of_many_applications_one_allocation_each_in_fewer_responses_than_applications() -> None:
    # light load: one request with one ask for each of ten running applications is placed in one
    # batch, and each application confirms its own; the RM gets them joined, not a call each
    apps = {f"app{index}": "root.a" for index in range(10)}
    config = "partitions:\n  - name: default\n    queues:\n      - name: root\n        submitacl: '*'\n"
    config += "        queues:\n          - name: a\n"
    with korral.start() as core:
        rm = CountingRM()
        core.register_resource_manager(t.register("rm", config), rm)
        core.update_node(t.nodes("rm", ["n1"], {"memory": 100_000, "vcore": 100_000}))
        core.update_application(t.applications("rm", apps))
        for app_id in apps:  # each application runs (its state changes go to the RM on their own)
            core.update_allocation(
                t.asks("rm", app_id, 1, {"memory": 1, "vcore": 1}, prefix=f"{app_id}-first-")
            )
        core.wait_until_idle(30)
        assert rm.allocated == 10
        rm.calls_with_new.clear()
        one_each = [ask for app_id in apps for ask in t.asks("rm", app_id, 1, {"memory": 1, "vcore": 1}).asks]
        core.update_allocation(si.AllocationRequest(rm_id="rm", asks=one_each))
        core.wait_until_idle(30)
        assert sum(rm.calls_with_new) == 10
        assert len(rm.calls_with_new) < 10, rm.calls_with_new
