"""A pooled pykka runtime: many actors, a few worker threads (docs/architecture.md, "The threads
runtime").

``PooledActor`` is a pykka actor type built on the hooks pykka documents for new actor types
(``_create_actor_inbox``, ``_create_future``, ``_start_actor_loop``): pykka's actor semantics (one
message at a time, in order, ``tell``/``ask``/``stop`` through an ``ActorRef``, ``ActorRegistry``)
without a thread per actor. Its mailbox is served in the turns of an ``ActorPool``, run by its tier's
bounded workers (``korral.actors.workers``), one turn at a time per pool; the loop is korral's
(``korral.actors.loop.OwnLoop``). No private pykka name is used. An actor that shares its pool never
blocks (an ask to its pool could only be answered by the turn that waits): ``KorralActor.ask``
refuses it. An actor alone in its pool may block, holding one worker of its tier meanwhile.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
import uuid
from collections import deque
from typing import Any

import pykka
from pykka import ActorRegistry

from korral import log_text
from korral.actors.loop import Envelope, KorralRef, OwnLoop, receive_envelope
from korral.actors.mailbox import PooledInbox, put_counted
from korral.actors.workers import Workers

log = log_text.logger("korral.runtime")

# Messages one actor may handle before the worker moves on to the next ready actor (fairness).
SLICE = 64
# Slices a turn runs before it delivers what its actors sent meanwhile, if it is not idle before.
FLUSH_AFTER_SLICES = 128
# How long a turn goes on while another pool of its tier waits for a worker (then it yields after the
# slice in progress): a scheduler whose batches keep it ready does not keep the others waiting.
TURN_SECONDS = 0.02
# How long stopping a pool waits for the turn in progress to end.
STOP_WAIT = 5.0


class Bundle:
    """Several messages for one actor in one envelope, handled one after the other in their order:
    what a pool's actors sent that actor during one run of the worker (see ``Outbox``)."""

    __slots__ = ("messages",)

    def __init__(self, messages: tuple[Any, ...]) -> None:
        self.messages = messages

    def __repr__(self) -> str:
        return f"Bundle({len(self.messages)} messages)"


class Outbox:
    """What a pool's actors send, held on the worker until it has run its ready actors, then delivered
    as one envelope per receiver (a ``Bundle`` when there are several).

    A thousand node actors confirming placements of one application then wake it once, not a thousand
    times. Order is kept per receiver, and every send of the pool's actors goes through here
    (``ActorPool.send``, which ``PoolActor.tell`` calls), so a sender's messages still reach each
    receiver in the order sent. While anything is held, the outbox
    itself counts as one message in flight (``Tracker``), so the core is never idle with messages held;
    the held messages are counted for their receivers when their envelopes go out, all in one update
    (a count per message, under the tracker's lock, was a third of the cost of a ``Placed``). A
    retiring receiver asks ``holds`` before it stops. A receiver already stopped refuses the tell at
    once, as a direct tell would.
    """

    __slots__ = ("_due", "_held", "_tracker")

    def __init__(self) -> None:
        # receiver's actor id -> (its handle, the messages held for it, in order)
        self._held: dict[int, tuple[Any, list[Any]]] = {}
        # (actor, message) an actor of the pool sent itself to act once the run is over ("flush
        # what this burst produced"): handled by a direct call at the end of the run, not a mailbox
        # round trip through another run
        self._due: list[tuple[PooledActor, Any, Any]] = []
        # the tracker counting this outbox as in flight while it holds anything (None: holds nothing)
        self._tracker: Any = None

    def __bool__(self) -> bool:
        return bool(self._held) or bool(self._due)

    def holds(self, actor_id: int) -> bool:
        """Whether a message for this actor waits here (sent by the pool, not yet in its mailbox)."""
        due = self._due  # (a flush_later entry has no handle: its actor is not quiet meanwhile)
        return actor_id in self._held or any(h is not None and h.actor_id == actor_id for _, h, _ in due)

    def at_end(self, actor: PooledActor, handle: Any, message: Any) -> None:
        """``actor`` handles ``message`` once the worker's run is over (a self-tell, coalescing a burst)."""
        handle._tracker.held(handle.actor_id)  # counted at once: it is handled on this thread, in this run
        self._due.append((actor, handle, message))

    def flush_later(self, actor: PooledActor, tracker: Any) -> None:
        """``actor.flush_due()`` once the worker's run is over: a plain call, no message (the outbox
        counts as in flight meanwhile, as while it holds messages)."""
        if self._tracker is None:
            self._tracker = tracker
            tracker.held(id(self))
        self._due.append((actor, None, None))

    def hold(self, handle: Any, message: Any) -> bool:
        if handle.ref.actor_stopped.is_set():
            return False
        if self._tracker is None:  # the first message held since the last flush: the outbox is in flight
            self._tracker = handle._tracker
            self._tracker.held(id(self))
        entry = self._held.get(handle.actor_id)
        if entry is None:
            self._held[handle.actor_id] = (handle, [message])
        else:
            entry[1].append(message)
        return True

    def flush(self) -> None:
        while self._held or self._due:
            due, self._due = self._due, []
            for actor, handle, message in due:
                if handle is None:  # flush_later's (the actor contains an Exception itself)
                    if not actor.actor_stopped.is_set():
                        try:
                            actor.flush_due()
                        except BaseException:
                            actor._fatal_error()
                    continue
                if actor.actor_stopped.is_set():
                    handle._tracker.done(handle.actor_id)
                    continue
                # the worker runs no actor now: handling it here keeps one message at a time per actor
                actor._handle_envelope(Envelope(message))
            held, self._held = self._held, {}
            if held:
                # A receiver of this pool with nothing in its mailbox is handed its messages here and
                # now (the worker runs no actor now, and nothing sent to it earlier waits, so one
                # message at a time and each sender's order hold): no mailbox, run queue and count
                # per message. Every other receiver gets them in its mailbox; one on another thread
                # (the scheduler, the partition) may be stopping meanwhile. One pool serves one
                # core's partition: one tracker.
                later: list[tuple[Any, Any, int]] = []
                direct = 0
                for handle, queued in held.values():
                    if self._handled_here(handle, queued):
                        direct += 1
                    else:
                        later.append(
                            (handle, queued[0] if len(queued) == 1 else Bundle(tuple(queued)), len(queued))
                        )
                tracker = next(iter(held.values()))[0]._tracker
                if later:
                    put_counted(tracker, later)
                if direct:
                    # each was an envelope delivered, as through a mailbox (the messages per
                    # allocation a benchmark counts), though nothing waits for it
                    tracker.sent_each([], wakeups=direct)
        tracker, self._tracker = self._tracker, None
        if tracker is not None:
            tracker.done(id(self))

    def _handled_here(self, handle: Any, queued: list[Any]) -> bool:
        """Handle ``queued`` (a receiver's held messages) at once if the receiver is an idle, started
        actor of this outbox's pool; False: it must go through the receiver's mailbox."""
        target: tuple[ActorPool, PooledActor] | None = handle.pool_target()
        if target is None or target[0].outbox is not self:
            return False
        actor = target[1]
        inbox: PooledInbox = actor.actor_inbox  # type: ignore[assignment]
        if inbox._messages or not actor._started or actor.actor_stopped.is_set():
            return False
        try:  # dispatch contains an Exception itself; only a fatal error comes through
            if len(queued) == 1:
                actor.dispatch(queued[0])  # type: ignore[attr-defined]
            else:
                actor.dispatch_all(tuple(queued))  # type: ignore[attr-defined]
        except BaseException:
            actor._fatal_error()
        if actor.actor_stopped.is_set():
            actor._teardown()
        return True


class ActorPool:
    """A run queue of ready pooled actors that at most one thread serves at a time: its actors handle
    one message at a time each, and what they send waits in the pool's ``Outbox`` until a turn has run
    its ready actors. The thread is a worker of the pool's tier (``korral.actors.workers``), which takes
    the pool for a turn whenever it has ready actors; a pool made without workers has one thread of
    its own.

    The pool owns the ``Outbox`` its actors send through: a pooled actor sends with ``send`` (its
    ``KorralActor.tell``), never through the receiver's handle, so what a send does depends on who
    sends (an actor of this pool), not on which thread the code happens to run on.
    """

    def __init__(self, name: str, workers: Workers | None = None) -> None:
        self.name = name
        # what this pool's actors sent during a turn, delivered when the turn has run its ready actors
        self.outbox = Outbox()
        self._ready: deque[PooledActor] = deque()
        self._lock = threading.Lock()
        # on the workers' run queue or in a turn: the one way a second thread is kept out
        self._queued = False
        self._stopped = False
        # stopped and served to the end: what is made ready from now on is stopped, not queued
        # (``_orphaned``)
        self._exited = False
        self._ended = threading.Event()
        self._runner: threading.Thread | None = None  # the thread in a turn of this pool, if any
        self._own_workers = workers is None
        self.workers = workers if workers is not None else Workers(f"pool-{name}", 1)

    def schedule(self, actor: PooledActor) -> None:
        with self._lock:
            if not self._exited:
                self._ready.append(actor)
                if self._queued:
                    return
                self._queued = True
                submit = True
            else:
                submit = False
        if submit:
            self._submit()
        else:
            self._orphaned([actor])

    def schedule_all(self, actors: list[PooledActor]) -> None:
        """``schedule`` for many actors at once: one hand-off to the workers."""
        with self._lock:
            if not self._exited:
                self._ready.extend(actors)
                if self._queued:
                    return
                self._queued = True
                submit = True
            else:
                submit = False
        if submit:
            self._submit()
        else:
            self._orphaned(actors)

    def _submit(self) -> None:
        if self.workers.submit(self):
            return
        # the core stopped its workers: nobody will serve what is ready here
        with self._lock:
            self._exited = True
            self._queued = False
            orphans = list(self._ready)
            self._ready.clear()
        self._ended.set()
        self._orphaned(orphans)

    def _orphaned(self, actors: list[PooledActor]) -> None:
        """Actors made ready after the pool ended (their partition stopped it, or the core its
        workers, while a thread still told them something): nobody will run them, so they stop here,
        their mailboxes are answered and their counts forgotten, and the core can still become idle."""
        for actor in actors:
            if not actor.actor_stopped.is_set():
                actor.stop_now()
            actor._teardown()

    def run_turn(self) -> None:
        """Run ready actors, a slice of each mailbox at a time, until none is ready (or, while another
        pool waits for a worker, for a bounded while), then deliver what they sent; called by one
        worker at a time (``_queued``)."""
        ready = self._ready
        lock = self._lock
        outbox = self.outbox
        workers = self.workers
        self._runner = threading.current_thread()
        requeue = False
        try:
            while True:
                slices = 0
                began = time.monotonic()
                while slices < FLUSH_AFTER_SLICES:
                    with lock:
                        if not ready:
                            break
                        actor = ready.popleft()
                    actor._run_slice()
                    del actor  # not kept alive meanwhile (a stopped one is freed at once)
                    slices += 1
                    if time.monotonic() - began > TURN_SECONDS and workers.others_waiting():
                        break
                if outbox:
                    outbox.flush()
                with lock:
                    if not ready:
                        self._queued = False
                        if self._stopped:
                            self._exited = True
                        return
                if workers.others_waiting():
                    requeue = True  # still ready: back of the run queue, after the pools waiting
                    return
        finally:
            self._runner = None
            if self._exited:
                self._ended.set()
                if self._own_workers:
                    self.workers.stop(0.0)
            if requeue:
                self._submit()

    def send(self, handle: Any, message: Any) -> bool:
        """A tell from one of this pool's actors, which run only in its turns: held in the outbox
        until the turn has run its ready actors (False: the receiver has stopped). A stand-in
        with no mailbox behind it (``mailbox`` False: a Ray host's dispatcher) is told at once."""
        if not handle.mailbox:
            return bool(handle.tell(message))
        return self.outbox.hold(handle, message)

    def at_end(self, actor: PooledActor, handle: Any, message: Any) -> None:
        """``actor`` (of this pool) handles ``message`` once the turn's run is over (``Outbox.at_end``)."""
        self.outbox.at_end(actor, handle, message)

    def flush_later(self, actor: PooledActor, tracker: Any) -> None:
        """``actor.flush_due()`` once the turn's run is over (``Outbox.flush_later``)."""
        self.outbox.flush_later(actor, tracker)

    def holds(self, actor_id: int) -> bool:
        """Whether a message for this actor waits in the outbox (sent, not yet in its mailbox)."""
        return self.outbox.holds(actor_id)

    def stop(self) -> None:
        """Serve what is ready, then end: actors made ready later are stopped (``_orphaned``). Waits
        (bounded) until then, unless called in one of this pool's own turns."""
        with self._lock:
            self._stopped = True
            if not self._queued:
                self._exited = True
        if self._exited:
            self._ended.set()
            if self._own_workers:
                self.workers.stop(STOP_WAIT)
            return
        if self._runner is not threading.current_thread():
            self._ended.wait(STOP_WAIT)
            if self._own_workers:
                self.workers.stop(STOP_WAIT)

    @property
    def is_worker_thread(self) -> bool:
        """Whether the calling thread runs a turn of this pool."""
        return self._runner is threading.current_thread()


def pool_on(tracker: Any, name: str, tier: str) -> ActorPool:
    """A new pool served by the workers of ``tier`` of the tracker's core (the simulation's own
    stand-in on the simulated runtime)."""
    simulation = tracker.clocks.simulation
    if simulation is not None:
        return simulation.pool(name)  # type: ignore[no-any-return]
    return ActorPool(name, tracker.workers.tiers[tier])


# Pooled actors' URNs: a random uuid's first 20 hex digits, then a serial number. pykka draws a fresh
# uuid4 per actor, a read of the OS's random source (~10 µs here), for each of thousands of nodes.
_URN_PREFIX = uuid.uuid4().urn[:-12]
_URN_SERIAL = itertools.count()


class StopFlag:
    """A pooled actor's ``actor_stopped``: the calls pykka and korral make on it (``set``, ``is_set``,
    ``clear``) without the ``Condition``, lock, bound methods and waiter deque of a ``threading.Event``
    (~1 KB and ~2 µs per actor, with 10,000 node actors). Nothing waits on a pooled actor's flag: a
    stop is seen by reading it, and under the GIL a plain attribute write is seen by every thread."""

    __slots__ = ("_flag",)

    def __init__(self) -> None:
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        self._flag = True

    def clear(self) -> None:
        self._flag = False


class PooledActor(OwnLoop):
    """A pykka actor whose mailbox is served by an ``ActorPool`` (its ``lane``) instead of its own
    thread."""

    lane: ActorPool
    _started = False

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        # what pykka.Actor.__init__ sets up (its public fields), with a URN that is unique without a
        # random read per actor, and the KorralRef this actor is reached by
        self.actor_urn = f"{_URN_PREFIX}{next(_URN_SERIAL):012x}"
        self.actor_inbox = self.new_inbox()
        self.actor_stopped = StopFlag()  # type: ignore[assignment]  # (see StopFlag)
        self.korral_ref = KorralRef(self)

    @staticmethod
    def _create_actor_inbox() -> Any:
        return PooledInbox()

    def new_inbox(self) -> Any:
        """The mailbox this constructor gives the actor (the simulated runtime's class gives its own)."""
        return PooledInbox()

    @staticmethod
    def _create_future() -> pykka.Future[Any]:
        return pykka.ThreadingFuture()

    def bind_lane(self, pool: ActorPool) -> None:
        """Serve this actor's mailbox in ``pool``'s turns (its ``lane``)."""
        self.lane = pool
        self.actor_inbox.bind(self)  # type: ignore[attr-defined]

    def flush_due(self) -> None:
        """What ``ActorPool.flush_later`` calls at the end of a turn (an actor that asks for it says)."""
        raise NotImplementedError

    def _start_actor_loop(self) -> None:
        try:
            self.on_start()
        except Exception:
            self.fail(*sys.exc_info())
        self._started = True
        self.actor_inbox._start()  # type: ignore[attr-defined]

    def _run_slice(self) -> None:
        inbox: PooledInbox = self.actor_inbox  # type: ignore[assignment]
        for _ in range(SLICE):
            if self.actor_stopped.is_set():
                self._teardown()
                return
            envelope = inbox._take()
            if envelope is None:
                return
            self._handle_envelope(envelope)
        if self.actor_stopped.is_set():
            self._teardown()
            return
        # Slice used up: back of the run queue, unless the mailbox emptied meanwhile.
        envelope = inbox._take()
        if envelope is not None:
            # _take found it in the mailbox, so the mailbox exists
            inbox._messages.appendleft(envelope)  # type: ignore[union-attr]
            self.lane.schedule(self)

    def _handle_envelope(self, envelope: Any) -> None:
        try:
            receive_envelope(self, envelope)
        except BaseException:
            self._fatal_error()
        if self.actor_stopped.is_set():
            self._teardown()

    def _fatal_error(self) -> None:
        """A failure a handler did not contain (not an ``Exception``): as pykka's loop, it stops every
        actor. Called inside the ``except``, wherever this pool runs a handler."""
        log.exception("%s: fatal error, stopping all actors", self)
        self.stop_now()
        ActorRegistry.stop_all()

    def _teardown(self) -> None:
        inbox: PooledInbox = self.actor_inbox  # type: ignore[assignment]
        while True:
            envelope = inbox._take()
            if envelope is None:
                if inbox._close():
                    self._release_references()
                return
            self.answer_dead(envelope)

    def _release_references(self) -> None:
        """The actor stopped and its mailbox let go of it: subclasses drop the references that would
        make it part of a reference cycle (left to the cyclic collector otherwise; see
        ``korral.actors.gc_tuning``)."""
