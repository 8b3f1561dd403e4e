"""A pooled pykka runtime: many actors, one worker thread.

pykka's ``ThreadingActor`` gives every actor its own OS thread. With thousands of node and application
actors, every message becomes a thread hand-off that fights for the GIL (measured: ~150 µs per
allocation at 1,000 nodes). ``PooledActor`` is a pykka actor type built on the hooks pykka documents for
implementors of new actor types (``_create_actor_inbox``, ``_create_future``, ``_start_actor_loop``)
whose mailboxes are served by an ``ActorPool`` worker thread: the same actor semantics (one message at
a time per actor, in order, state private to the actor, ``tell``/``ask``/``stop`` through an
``ActorRef``, registered in pykka's ``ActorRegistry``), without a thread per actor. Each partition has
its own pool, so partitions still run independently.

pykka's own message loop cannot serve many actors from one thread, so the loop is korral's
(``korral.actors.loop.OwnLoop``, shared with the simulated runtime). Nothing here names a private
pykka module, class or attribute.

A pooled actor must never block: an ``ask`` to another actor of the same pool would wait for a
message that only this very worker could process. korral's pooled actors (nodes, applications,
queues) only ``tell``; ``KorralActor.ask`` refuses an ask inside one pool.
"""

from __future__ import annotations

import itertools
import sys
import threading
import uuid
from collections import deque
from typing import Any

import pykka
from pykka import ActorRegistry

from korral import log_text
from korral.actors.loop import Envelope, KorralRef, OwnLoop, receive_envelope, refuse

log = log_text.logger("korral.runtime")

# Messages one actor may handle before the worker moves on to the next ready actor (fairness).
SLICE = 64
# Slices a worker runs before it delivers what its actors sent meanwhile, if it is not idle before.
FLUSH_AFTER_SLICES = 128


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
        return actor_id in self._held or any(handle.actor_id == actor_id for _, handle, _ in self._due)

    def at_end(self, actor: PooledActor, handle: Any, message: Any) -> None:
        """``actor`` handles ``message`` once the worker's run is over (a self-tell, coalescing a burst)."""
        handle._tracker.held(handle.actor_id)  # counted at once: it is handled on this thread, in this run
        self._due.append((actor, handle, message))

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
    """A worker thread that runs ready pooled actors, each for a slice of its mailbox.

    The pool owns the ``Outbox`` its actors send through: a pooled actor sends with ``send`` (its
    ``KorralActor.tell``), never through the receiver's handle, so what a send does depends on who
    sends (an actor of this pool), not on which thread the code happens to run on.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        # what this pool's actors sent during the worker's run, delivered when the run is over
        self.outbox = Outbox()
        self._ready: deque[PooledActor] = deque()
        self._wake = threading.Condition(threading.Lock())
        self._stopped = False
        # the worker has ended: what is made ready from now on is stopped, not queued (``_orphaned``)
        self._exited = False
        self._thread = threading.Thread(target=self._run, name=f"korral-pool-{name}", daemon=True)
        self._thread.start()

    def schedule(self, actor: PooledActor) -> None:
        with self._wake:
            if not self._exited:
                self._ready.append(actor)
                if len(self._ready) == 1:
                    self._wake.notify()
                return
        self._orphaned([actor])

    def _orphaned(self, actors: list[PooledActor]) -> None:
        """Actors made ready after the worker ended (their partition stopped the pool while a thread
        still told them something): nobody will run them, so they stop here, their mailboxes are
        answered and their counts forgotten, and the core can still become idle."""
        for actor in actors:
            if not actor.actor_stopped.is_set():
                actor.stop_now()
            actor._teardown()

    def schedule_all(self, actors: list[PooledActor]) -> None:
        """``schedule`` for many actors at once: one hand-off to the worker."""
        with self._wake:
            if not self._exited:
                idle = not self._ready
                self._ready.extend(actors)
                if idle:
                    self._wake.notify()
                return
        self._orphaned(actors)

    def send(self, handle: Any, message: Any) -> bool:
        """A tell from one of this pool's actors, which run only on the worker: held in the outbox
        until the worker has run its ready actors (False: the receiver has stopped). A stand-in
        with no mailbox behind it (``mailbox`` False: a Ray host's dispatcher) is told at once."""
        if not handle.mailbox:
            return bool(handle.tell(message))
        return self.outbox.hold(handle, message)

    def at_end(self, actor: PooledActor, handle: Any, message: Any) -> None:
        """``actor`` (of this pool) handles ``message`` once the worker's run is over (``Outbox.at_end``)."""
        self.outbox.at_end(actor, handle, message)

    def holds(self, actor_id: int) -> bool:
        """Whether a message for this actor waits in the outbox (sent, not yet in its mailbox)."""
        return self.outbox.holds(actor_id)

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5.0)

    @property
    def is_worker_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def _run(self) -> None:
        ready = self._ready
        outbox = self.outbox
        slices = 0
        while True:
            # deliver what the actors sent before going idle (or after a long run of slices)
            if outbox and (not ready or slices >= FLUSH_AFTER_SLICES):
                slices = 0
                outbox.flush()
            with self._wake:
                while not ready and not self._stopped:
                    self._wake.wait()
                if self._stopped and not ready:
                    self._exited = True
                    break
                actor = ready.popleft()
            actor._run_slice()
            del actor  # not kept alive while the worker waits (a stopped one is freed at once)
            slices += 1
        outbox.flush()


class PooledInbox:
    """A mailbox that, on the first message after being empty, puts its actor on the pool's run queue."""

    __slots__ = ("_actor", "_closed", "_lock", "_messages", "_scheduled")

    def __init__(self) -> None:
        # created with the first message that has to wait here: an actor whose messages are all
        # handed to it by its pool's outbox (``Outbox._handled_here``) never needs one (~600 B each)
        self._messages: deque[Any] | None = None
        self._lock = threading.Lock()
        self._scheduled = False
        # the actor, while it may still have messages to answer: the strong reference that keeps a
        # pooled actor alive (its ActorRef holds it weakly), dropped once it stopped (``_close``)
        self._actor: PooledActor | None = None
        self._closed = False

    def bind(self, actor: PooledActor) -> None:
        self._actor = actor

    def put(self, envelope: Any, /) -> None:
        with self._lock:  # put_unscheduled, inlined: one call less per message
            if self._messages is None:
                self._messages = deque()
            self._messages.append(envelope)
            actor = self._actor
            if self._scheduled or actor is None or not actor._started:
                if not self._closed:
                    return
                actor = None
            else:
                self._scheduled = True
        if actor is None:
            self._refuse_all()
            return
        actor.pool.schedule(actor)

    def put_unscheduled(self, envelope: Any, /) -> PooledActor | None:
        """``put`` that leaves scheduling to the caller: the actor to put on its pool's run queue, if
        this message made it ready (the caller hands many to the pool at once, ``put_all``)."""
        with self._lock:
            if self._messages is None:
                self._messages = deque()
            self._messages.append(envelope)
            actor = self._actor
            if self._scheduled or actor is None or not actor._started:
                if not self._closed:
                    return None
            else:
                self._scheduled = True
                return actor
        self._refuse_all()
        return None

    def get(self) -> Any:
        if not self._messages:
            raise IndexError("get from an empty mailbox")
        return self._messages.popleft()

    def empty(self) -> bool:
        return not self._messages

    def _refuse_all(self) -> None:
        """Messages that reached a closed mailbox (their sender saw the actor alive just before it
        stopped): answered as the actor's own teardown answers them, then dropped."""
        while True:
            with self._lock:
                if not self._messages:
                    return
                envelope = self._messages.popleft()
            refuse(envelope, "an actor")

    def _close(self) -> bool:
        """After the stopped actor's last message: let go of the actor (see ``PooledActor._teardown``).
        False when a message came in meanwhile (the caller goes on answering it) or it was closed."""
        with self._lock:
            if self._messages or self._actor is None:
                return False
            self._actor = None
            self._closed = True
            return True

    def _take(self) -> Any | None:
        """Next message, or None after clearing the scheduled flag (atomically with emptiness)."""
        with self._lock:
            if self._messages:
                return self._messages.popleft()
            self._scheduled = False
            return None

    def _start(self) -> None:
        with self._lock:
            if self._messages and not self._scheduled and self._actor is not None:
                self._scheduled = True
                start = True
            else:
                start = False
        if start and self._actor is not None:
            self._actor.pool.schedule(self._actor)


def put_all(deliveries: list[tuple[Any, Envelope]]) -> None:
    """Put each envelope in its mailbox, and hand the actors this made ready to their pools together:
    one hand-off per pool rather than one per message (the pool's lock and wake-up are shared with
    every other sender)."""
    ready: dict[int, tuple[ActorPool, list[PooledActor]]] = {}
    for inbox, envelope in deliveries:
        if type(inbox) is not PooledInbox:
            inbox.put(envelope)  # a thread's own mailbox, or a simulated one
            continue
        actor = inbox.put_unscheduled(envelope)
        if actor is not None:
            entry = ready.get(id(actor.pool))
            if entry is None:
                ready[id(actor.pool)] = (actor.pool, [actor])
            else:
                entry[1].append(actor)
    for pool, actors in ready.values():
        pool.schedule_all(actors)


def put_counted(tracker: Any, deliveries: list[tuple[Any, Any, int]]) -> list[bool]:
    """Put each (handle, message, messages it stands for) in its receiver's mailbox, and whether it was
    delivered: counted in flight under one lock, then handed to the pools together (``put_all``).

    Counted before the look at the receiver, as ``Handle.tell`` does: a receiver on another thread
    that stops meanwhile forgets the count itself, and one seen stopped is uncounted here. Looking
    first would leave a window in which a stop forgets before the count is added, and the core would
    never be idle again."""
    tracker.sent_each([(handle.actor_id, count) for handle, _, count in deliveries])
    delivered: list[bool] = []
    envelopes: list[tuple[Any, Envelope]] = []
    for handle, message, count in deliveries:
        ref = handle.ref
        if ref.actor_stopped.is_set():
            tracker.done(handle.actor_id, count)
            delivered.append(False)
        else:
            envelopes.append((ref.actor_inbox, Envelope(message)))
            delivered.append(True)
    put_all(envelopes)
    return delivered


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
    """A pykka actor whose mailbox is served by an ``ActorPool`` instead of its own thread."""

    pool: ActorPool
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

    def bind_pool(self, pool: ActorPool) -> None:
        self.pool = pool
        self.actor_inbox.bind(self)  # type: ignore[attr-defined]

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
            self.pool.schedule(self)

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
