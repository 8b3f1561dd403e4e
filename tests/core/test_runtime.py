"""The pooled pykka runtime: the same actor semantics as pykka's threading actors, on one worker thread."""

from __future__ import annotations

import gc
import threading
import time
from types import SimpleNamespace
from typing import Any

import pykka
import pytest

from korral.actors.base import (
    HandlerError,
    PoolActor,
    Rank,
    RankViolation,
    ThreadedActor,
    tell_all,
)
from korral.actors.runtime import SLICE, ActorPool, Outbox
from korral.actors.starting import start_actor
from korral.actors.tracker import Tracker


class Echo(PoolActor):
    rank = Rank.NODE

    def __init__(self, tracker: Tracker, name: str, log: list[Any], *, pool: ActorPool) -> None:
        super().__init__(tracker, name, pool=pool)
        self.log = log

    def on_receive(self, message: Any) -> Any:  # plain messages, no typed dispatch needed here
        try:
            if message == "boom":
                raise ValueError("boom")
            if message == "thread":
                return threading.current_thread().name
            if isinstance(message, threading.Event):  # holds the pool's one worker until it is set
                message.wait(30.0)
                return None
            self.log.append((self.name, message))
            return message
        finally:
            self.tracker.done(self.handle.actor_id)


class Asker(PoolActor):
    rank = Rank.QUEUE

    def on_receive(self, message: Any) -> Any:
        try:
            return self.ask(message, "hello", timeout=1.0)
        finally:
            self.tracker.done(self.handle.actor_id)


@pytest.fixture
def pool():
    pool = ActorPool("test")
    yield pool
    pool.stop()


def test_messages_are_handled_in_order_per_actor_on_the_pool_thread(pool: ActorPool) -> None:
    tracker = Tracker()
    log: list[Any] = []
    a = start_actor(Echo, tracker, "a", log, pool=pool)
    b = start_actor(Echo, tracker, "b", log, pool=pool)
    for index in range(200):
        a.tell(index)
        b.tell(index)
    assert tracker.wait_idle(5.0)
    assert [m for n, m in log if n == "a"] == list(range(200))
    assert [m for n, m in log if n == "b"] == list(range(200))
    assert a.ask("thread", caller=Rank.OUTSIDE) == "korral-pool-test"
    assert b.ask("thread", caller=Rank.OUTSIDE) == "korral-pool-test"


def test_a_busy_actor_yields_the_worker_after_a_slice(pool: ActorPool) -> None:
    tracker = Tracker()
    log: list[Any] = []
    busy = start_actor(Echo, tracker, "busy", log, pool=pool)
    other = start_actor(Echo, tracker, "other", log, pool=pool)
    blocker = start_actor(Echo, tracker, "blocker", log, pool=pool)
    gate = threading.Event()
    # the pool's worker is held while both mailboxes fill (else, on a loaded machine, it could work
    # through the busy actor's messages as they come, before the other actor has any)
    blocker.tell(gate)
    # fill the busy actor's mailbox before the other actor gets anything
    for index in range(SLICE * 3):
        busy.tell(index)
    other.tell("x")
    gate.set()
    assert tracker.wait_idle(5.0)
    position = log.index(("other", "x"))
    assert position < SLICE * 3, "the other actor waited for the whole backlog of the busy one"


def test_ask_returns_values_and_exceptions_and_the_actor_lives_on(pool: ActorPool) -> None:
    tracker = Tracker()
    actor = start_actor(Echo, tracker, "a", [], pool=pool)
    assert actor.ask("value", caller=Rank.OUTSIDE) == "value"
    with pytest.raises(ValueError, match="boom"):
        actor.ask("boom", caller=Rank.OUTSIDE)
    assert actor.ask("still here", caller=Rank.OUTSIDE) == "still here"


def test_stop_answers_queued_asks_with_actor_dead_and_refuses_new_tells(pool: ActorPool) -> None:
    tracker = Tracker()
    actor = start_actor(Echo, tracker, "a", [], pool=pool)
    actor.ref.stop(block=True, timeout=5.0)
    assert not actor.is_alive
    assert actor.tell("late") is False  # counted as not delivered
    with pytest.raises(pykka.ActorDeadError):
        actor.ref.ask("late", timeout=1.0)
    assert tracker.in_flight() == 0


def test_an_ask_to_a_stopped_actor_is_refused_and_leaves_nothing_in_flight(pool: ActorPool) -> None:
    # A query that races an actor's stop (a partition replaced by a re-registration) must not leave
    # its question counted forever: the core would never be idle again.
    tracker = Tracker()
    actor = start_actor(Echo, tracker, "a", [], pool=pool)
    actor.ref.stop(block=True, timeout=5.0)
    with pytest.raises(pykka.ActorDeadError, match="a has stopped"):
        actor.ask("late", caller=Rank.OUTSIDE, timeout=1.0)
    assert tracker.in_flight() == 0
    assert tracker.wait_idle(timeout=1.0)


def test_a_stopped_actors_mailbox_lets_go_of_it_and_answers_a_late_ask(pool: ActorPool) -> None:
    """Issue 22: a stopped pooled actor is freed by reference counting (its mailbox and handle no
    longer hold it in a cycle); a message that still reaches its mailbox (its sender saw it alive just
    before it stopped) is answered as the teardown answers it, not left waiting."""
    import weakref

    from pykka._envelope import Envelope

    tracker = Tracker()
    handle = start_actor(Echo, tracker, "a", [], pool=pool)
    target = handle.pool_target()
    assert target is not None
    alive = weakref.ref(target[1])
    del target
    gc.disable()  # freed by reference counting alone, or not at all
    try:
        handle.ref.stop(block=True, timeout=5.0)
        deadline = time.monotonic() + 5.0
        while alive() is not None and time.monotonic() < deadline:  # the worker finishes its teardown
            time.sleep(0.01)
        assert alive() is None  # nothing holds it, and it is in no cycle
    finally:
        gc.enable()
    assert handle.pool_target() is None
    late = pykka.ThreadingFuture[Any]()
    handle.ref.actor_inbox.put(Envelope("late", reply_to=late))  # as a sender that raced the stop
    with pytest.raises(pykka.ActorDeadError):
        late.get(timeout=5.0)
    assert handle.tell("later") is False


def test_a_pooled_actor_may_not_block_on_its_own_pool(pool: ActorPool) -> None:
    tracker = Tracker()
    target = start_actor(Echo, tracker, "target", [], pool=pool)
    asker = start_actor(Asker, tracker, "asker", pool=pool)
    started = time.monotonic()
    with pytest.raises(RankViolation, match="must not block"):
        asker.ask(target, caller=Rank.OUTSIDE, timeout=5.0)
    assert time.monotonic() - started < 2.0, "the refusal must be immediate, not a timeout"


class Failing(ThreadedActor):
    rank = Rank.SCHEDULER

    def on_Explode(self, message: Explode) -> None:
        raise RuntimeError("handler failure")

    def on_Ping(self, message: Ping) -> str:
        return "pong"


class Explode:
    pass


class Ping:
    pass


def test_a_failing_tell_handler_is_counted_and_does_not_kill_the_actor() -> None:
    tracker = Tracker()
    actor = start_actor(Failing, tracker, "failing")
    try:
        assert actor.tell(Explode())
        assert tracker.wait_idle(5.0)
        assert tracker.errors == 1
        assert actor.is_alive
        assert actor.ask(Ping(), caller=Rank.OUTSIDE) == "pong"
        # a failing ask answers with a HandlerError value rather than killing the actor
        assert isinstance(actor.ask(Explode(), caller=Rank.OUTSIDE), HandlerError)
    finally:
        actor.stop()


# ---- the outbox: what a pool's actors send each other ---------------------------------------------------


class Note:
    def __init__(self, text: str) -> None:
        self.text = text


class Gate:
    """Holds the pool's worker until the test opens it (what the worker runs next is then known)."""

    def __init__(self, opened: threading.Event) -> None:
        self.opened = opened


class StopYourself:
    pass


class Recorder(PoolActor):
    rank = Rank.NODE

    def __init__(self, tracker: Tracker, name: str, log: list[Any], *, pool: ActorPool) -> None:
        super().__init__(tracker, name, pool=pool)
        self.log = log

    def on_Note(self, message: Note) -> None:
        self.log.append((self.name, message.text, threading.current_thread().name))

    def on_Gate(self, message: Gate) -> None:
        assert message.opened.wait(5.0)

    def on_StopYourself(self, message: StopYourself) -> None:
        self.stop_now()


class Forward:
    def __init__(self, target: Any, texts: list[str]) -> None:
        self.target = target
        self.texts = texts


class Relay(PoolActor):
    rank = Rank.APPLICATION

    def on_Forward(self, message: Forward) -> None:
        for text in message.texts:
            self.tell(message.target, Note(text))


def test_the_outbox_hands_an_idle_receiver_of_its_pool_its_messages_by_a_direct_call(pool: ActorPool) -> None:
    tracker = Tracker()
    log: list[Any] = []
    relay = start_actor(Relay, tracker, "relay", pool=pool)
    receivers = [start_actor(Recorder, tracker, f"r{index}", log, pool=pool) for index in range(20)]
    for receiver in receivers:
        relay.tell(Forward(receiver, [f"{receiver.name} a", f"{receiver.name} b"]))
    assert tracker.wait_idle(5.0)
    assert tracker.in_flight() == 0
    for receiver in receivers:
        mine = [(text, thread) for name, text, thread in log if name == receiver.name]
        assert mine == [
            (f"{receiver.name} a", "korral-pool-test"),
            (f"{receiver.name} b", "korral-pool-test"),
        ]
        target = receiver.pool_target()
        assert target is not None
        assert target[1].actor_inbox._messages is None, "handed over through its mailbox"


def test_the_outbox_keeps_a_senders_order_behind_a_receivers_backlog(pool: ActorPool) -> None:
    tracker = Tracker()
    log: list[Any] = []
    opened = threading.Event()
    gate = start_actor(Recorder, tracker, "gate", [], pool=pool)
    busy = start_actor(Recorder, tracker, "busy", log, pool=pool)
    relay = start_actor(Relay, tracker, "relay", pool=pool)
    gate.tell(Gate(opened))
    # more than a slice: the busy actor still has messages queued when the relay's reach it
    for index in range(SLICE * 2):
        busy.tell(Note(str(index)))
    relay.tell(Forward(busy, ["next", "last"]))
    opened.set()
    assert tracker.wait_idle(5.0)
    assert [text for _, text, _ in log] == [*(str(index) for index in range(SLICE * 2)), "next", "last"]


def test_the_outbox_refuses_a_send_to_a_stopped_actor_of_its_pool(pool: ActorPool) -> None:
    tracker = Tracker()
    log: list[Any] = []
    leaving = start_actor(Recorder, tracker, "leaving", log, pool=pool)
    staying = start_actor(Recorder, tracker, "staying", log, pool=pool)
    relay = start_actor(Relay, tracker, "relay", pool=pool)
    leaving.tell(StopYourself())
    assert tracker.wait_idle(5.0)
    relay.tell(Forward(leaving, ["for leaving"]))
    relay.tell(Forward(staying, ["for staying"]))
    assert tracker.wait_idle(5.0)
    assert [(name, text) for name, text, _ in log] == [("staying", "for staying")]
    assert tracker.in_flight() == 0
    assert tracker.in_flight() == 0


def test_a_tell_to_an_actor_of_a_stopped_pool_leaves_nothing_in_flight() -> None:
    """A partition stops its pool while its scheduler may still be deciding: a late Placed must not
    keep the core from ever being idle."""
    pool = ActorPool("stopping")
    tracker = Tracker()
    app = start_actor(Recorder, tracker, "app", [], pool=pool)
    pool.stop()
    app.tell(Note("late"))
    assert tracker.wait_idle(1.0)
    assert tracker.in_flight() == 0


# ---- tell_all: a thread's fan-out to many actors, straight into their mailboxes ----------------------


def test_tell_all_mixes_with_tell_in_one_senders_order(pool: ActorPool) -> None:
    tracker = Tracker()
    log: list[Any] = []
    opened = threading.Event()
    gate = start_actor(Recorder, tracker, "gate", [], pool=pool)
    actors = [start_actor(Recorder, tracker, f"r{index}", log, pool=pool) for index in range(20)]
    gate.tell(Gate(opened))
    actors[0].tell(Note("before"))
    assert (
        tell_all([(actor, Note("batch")) for actor in actors] + [(actors[0], Note("batch again"))])
        == [True] * 21
    )
    actors[0].tell(Note("after"))
    opened.set()
    assert tracker.wait_idle(5.0)
    assert [text for name, text, _ in log if name == "r0"] == ["before", "batch", "batch again", "after"]
    assert sorted(name for name, text, _ in log if text == "batch") == sorted(a.name for a in actors)
    assert {thread for _, _, thread in log} == {"korral-pool-test"}
    assert tracker.in_flight() == 0


def test_tell_all_refuses_what_is_for_a_stopped_actor_and_leaves_nothing_in_flight(pool: ActorPool) -> None:
    tracker = Tracker()
    log: list[Any] = []
    leaving = start_actor(Recorder, tracker, "leaving", log, pool=pool)
    staying = start_actor(Recorder, tracker, "staying", log, pool=pool)
    leaving.tell(StopYourself())
    assert tracker.wait_idle(5.0)
    assert tell_all([(leaving, Note("late")), (staying, Note("for staying"))]) == [False, True]
    assert tracker.wait_idle(5.0)
    assert [(name, text) for name, text, _ in log] == [("staying", "for staying")]
    assert tracker.in_flight() == 0


# ---- the pool's outbox: what a receiver on another thread is sent while it stops ---------------------


class StopsRightAfterALook:
    """``actor_stopped`` of a receiver on its own thread (a scheduler, a partition) that, once armed,
    stops right after the next sender looked at it and saw it running: its ``on_stop`` forgets what
    is counted for it, as ``KorralActor.on_stop`` does."""

    def __init__(self, tracker: Tracker, actor_id: int) -> None:
        self.tracker = tracker
        self.actor_id = actor_id
        self.armed = False
        self.stopped = False

    def is_set(self) -> bool:
        if self.armed and not self.stopped:
            self.stopped = True
            self.tracker.forget(self.actor_id)
            return False  # what the sender saw
        return self.stopped


def test_an_outbox_flushed_while_its_receiver_stops_leaves_nothing_in_flight() -> None:
    tracker = Tracker()
    mailbox: list[Any] = []
    # a receiver on another thread (no pool: its messages go to its mailbox)
    handle = SimpleNamespace(actor_id=1, _tracker=tracker, pool_target=lambda: None)
    handle.ref = SimpleNamespace(
        actor_stopped=StopsRightAfterALook(tracker, 1), actor_inbox=SimpleNamespace(put=mailbox.append)
    )
    outbox = Outbox()
    assert outbox.hold(handle, Note("a")) and outbox.hold(handle, Note("b"))
    handle.ref.actor_stopped.armed = True
    outbox.flush()
    # counted before the look: the stop forgot them; counted after it, they would stay in flight
    assert tracker.in_flight() == 0
    assert len(mailbox) == 1  # put all the same (too late to know): never handled, not counted


# ---- a tell does the same from every thread; an actor's own sends say which way they go ----------------


class Arrived:
    def __init__(self, event: threading.Event) -> None:
        self.event = event


class Signal(ThreadedActor):
    rank = Rank.SCHEDULER

    def on_Arrived(self, message: Arrived) -> None:
        message.event.set()


class SendTo:
    """Tell ``target`` ``Arrived`` through its handle (``own=False``) or the actor's ``tell``, then
    report, still inside the handler, whether it arrived and whether the pool holds it."""

    def __init__(self, target: Any, own: bool) -> None:
        self.target = target
        self.own = own


class Sender(PoolActor):
    rank = Rank.NODE

    def on_SendTo(self, message: SendTo) -> tuple[bool, bool]:
        arrived = threading.Event()
        if message.own:
            self.tell(message.target, Arrived(arrived))
            return arrived.is_set(), self.pool.holds(message.target.actor_id)
        message.target.tell(Arrived(arrived))
        # generous: a direct tell arrives at once; held back until this handler ends, it never would
        return arrived.wait(10.0), self.pool.holds(message.target.actor_id)


def test_a_handle_tell_from_a_pool_worker_goes_straight_to_the_mailbox(pool: ActorPool) -> None:
    """``Handle.tell`` does not look at the calling thread: on a pool's worker it delivers at once, as
    anywhere else. Only the pooled actor's own ``tell`` goes through the pool's outbox, held until the
    worker's run is over (and then delivered)."""
    tracker = Tracker()
    target = start_actor(Signal, tracker, "signal")
    sender = start_actor(Sender, tracker, "sender", pool=pool)
    try:
        assert sender.ask(SendTo(target, own=False), caller=Rank.OUTSIDE, timeout=20.0) == (True, False)
        # the actor's own send waits in its pool's outbox while the worker runs
        assert sender.ask(SendTo(target, own=True), caller=Rank.OUTSIDE, timeout=20.0) == (False, True)
        assert tracker.wait_idle(10.0), "and is delivered once the run is over"
        assert not pool.holds(target.actor_id)
    finally:
        target.stop()
