"""The actor foundation: ranks, handles that count messages, and failure containment.

Every korral actor derives from ``KorralActor`` and is reached through a ``Handle``:
- ``Handle.tell`` counts the message in the core's ``Tracker`` until the receiver has handled it, which
  is how ``Core.wait_until_idle`` knows that nothing is in flight;
- ``Handle.ask`` is the only blocking call, allowed only from a higher rank to a lower one (the actor
  form of YuniKorn's lock order: it rules deadlocks out by construction) and always with a timeout;
- a handler that raises is logged and counted, never allowed to kill its actor (pykka stops an actor
  whose ``tell`` handler raises).
"""

from __future__ import annotations

import contextlib
import enum
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Literal

import pykka

from korral import log_text
from korral.actors.dispatch import Handler, ensure_handlers
from korral.actors.loop import Envelope, ReleasingInbox
from korral.actors.mailbox import PooledInbox, put_counted
from korral.actors.messages import Retire, SchedulerDone
from korral.actors.runtime import ActorPool, Bundle, PooledActor, pool_on
from korral.actors.timing import HandlerTiming
from korral.actors.tracker import Tracker

log = log_text.logger("korral.actors")

DEFAULT_ASK_TIMEOUT = 10.0


class Rank(enum.IntEnum):
    """Higher ranks may block on lower ranks, never the reverse."""

    OUTSIDE = 100  # the caller's own thread (korral.Core): not an actor
    REGISTRAR = 70  # starts and stops an RM's partitions (korral.actors.registrar)
    RM_PROXY = 60
    PARTITION = 50
    SCHEDULER = 40
    QUEUE = 30  # root down to leaf: a queue may ask only its descendants
    APPLICATION = 20
    NODE = 10
    DISPATCHER = 5


_decision = threading.local()


@contextlib.contextmanager
def inside_predicates() -> Iterator[None]:
    """Marks this thread as a scheduler waiting on the RM's ``predicates`` callback meanwhile."""
    _decision.predicates = True
    try:
        yield
    finally:
        _decision.predicates = False


def in_predicates() -> bool:
    """True on a scheduler's thread while it waits on the RM's ``predicates`` callback."""
    return getattr(_decision, "predicates", False)


class RankViolation(RuntimeError):
    """A blocking ask that goes up or sideways in the rank order."""


class Handle:
    """An immutable reference to an actor: its ref, its rank and a readable name."""

    __slots__ = ("_pool_target", "_tracker", "actor_id", "name", "rank", "ref")
    # an actor's mailbox is behind it: a pool may hold its actors' messages for it (``ActorPool.send``)
    mailbox: ClassVar[bool] = True

    def __init__(self, ref: pykka.ActorRef[Any], rank: Rank, name: str, tracker: Tracker) -> None:
        self.ref = ref
        self.rank = rank
        self.name = name
        self.actor_id = id(ref)
        self._tracker = tracker
        self._pool_target: tuple[ActorPool, PooledActor] | Literal[False] | None = (
            False  # False: not looked up
        )

    def pool_target(self) -> tuple[ActorPool, PooledActor] | None:
        """The thread pool and actor behind this handle, if it runs on an ``ActorPool`` (looked up once)."""
        target = self._pool_target
        if target is False:
            inbox = self.ref.actor_inbox
            actor = inbox._actor if type(inbox) is PooledInbox else None
            pool = getattr(actor, "lane", None)
            target = (pool, actor) if actor is not None and type(pool) is ActorPool else None
            self._pool_target = target
        return target

    def tell(self, message: Any) -> bool:
        """Send without waiting, straight to the actor's mailbox, from whichever thread. False when
        the actor has stopped (the message was not delivered). An actor sends with its own
        ``KorralActor.tell`` instead: a pooled actor's sends go through its pool's outbox."""
        self._tracker.sent(self.actor_id)
        ref = self.ref
        # ActorRef.tell, inlined: the same liveness check and envelope, one call less per message
        if ref.actor_stopped.is_set():
            self._tracker.done(self.actor_id)
            return False
        ref.actor_inbox.put(Envelope(message))  # type: ignore[arg-type]  # (pykka's envelope's shape)
        return True

    def ask(self, message: Any, *, caller: Rank, timeout: float = DEFAULT_ASK_TIMEOUT) -> Any:
        """Send and wait for the answer: only from a higher rank, always with a timeout."""
        if caller <= self.rank:
            raise RankViolation(
                f"blocking ask from rank {caller.name} to {self.name} (rank {self.rank.name}) "
                "goes against the rank order; use tell"
            )
        self._tracker.sent(self.actor_id)
        ref = self.ref
        try:
            if not ref.is_alive():
                raise pykka.ActorDeadError(f"{self.name} has stopped")
            return ref.ask(message, timeout=timeout)
        except pykka.ActorDeadError:
            # Refused at the door (pykka puts nothing in a stopped actor's mailbox), or stopped before
            # it answered: either way not in flight. Left counted, the core would never be idle again.
            # (A stopped actor's counts are forgotten, so this takes nothing another message needs.)
            if not ref.is_alive():
                self._tracker.done(self.actor_id)
            raise

    def _ask_later(self, message: Any, *, caller: Rank) -> pykka.Future[Any]:
        """``ask`` without waiting, for ``ask_all`` only (which waits for every answer with a timeout)."""
        if caller <= self.rank:
            raise RankViolation(
                f"blocking ask from rank {caller.name} to {self.name} (rank {self.rank.name}) "
                "goes against the rank order; use tell"
            )
        self._tracker.sent(self.actor_id)
        ref = self.ref
        if not ref.is_alive():
            self._tracker.done(self.actor_id)
            raise pykka.ActorDeadError(f"{self.name} has stopped")
        return ref.ask(message, block=False)

    @property
    def is_alive(self) -> bool:
        return self.ref.is_alive()

    def stop(self) -> None:
        if self.ref.is_alive():
            with contextlib.suppress(pykka.ActorDeadError):
                self.ref.stop(block=False)

    def __repr__(self) -> str:
        return f"<Handle {self.name} ({self.rank.name})>"


def tell_all(deliveries: list[tuple[Handle, Any]]) -> list[bool]:
    """``Handle.tell`` for each message in turn (same order, same mailboxes, same answers), counted
    in flight under one lock and handed to the receivers' pools together: a partition's request for
    hundreds of applications is one tracker update and one wake-up per pool, not one of each per
    application. It mixes freely with ``tell``: every message goes straight into its receiver's
    mailbox before this returns. (A pooled actor sends with ``KorralActor.tell``.)"""
    if len(deliveries) < 2:
        return [handle.tell(message) for handle, message in deliveries]
    tracker = deliveries[0][0]._tracker  # one core's actors
    return put_counted(tracker, [(handle, message, 1) for handle, message in deliveries])


def ask_all(
    asks: list[tuple[Handle, Any]],
    *,
    caller: Rank,
    timeout: float = DEFAULT_ASK_TIMEOUT,
    until_answered: bool = False,
) -> list[Any]:
    """``Handle.ask`` of several actors, every message sent before the first answer is awaited: actors
    sharing a pool answer in one run of its worker, not one thread hand-off each. The answers in the
    order asked; a stopped actor raises ``pykka.ActorDeadError``, as ``ask`` does.

    ``until_answered``: for asks of actors that never block (a partition's owners), whose answer comes
    once their pool gets to it: each wait is ``timeout`` long, logged when it runs out, and waited
    again while the actor runs, so that a slow machine delays the change instead of losing it."""
    for handle, _ in asks:  # all refused, or all sent
        if caller <= handle.rank:
            raise RankViolation(
                f"blocking ask from rank {caller.name} to {handle.name} (rank {handle.rank.name}) "
                "goes against the rank order; use tell"
            )
    futures = [handle._ask_later(message, caller=caller) for handle, message in asks]
    answers: list[Any] = []
    for (handle, _), future in zip(asks, futures, strict=True):
        try:
            waited = 0.0
            while True:
                try:
                    answers.append(future.get(timeout=timeout))
                    break
                except pykka.Timeout:
                    # (simulated: the run is deterministic, a wait that timed out would again)
                    simulated = handle._tracker.clocks.simulation is not None
                    if not until_answered or simulated or not handle.ref.is_alive():
                        raise
                    waited += timeout
                    log.warning("%s has not answered in %.0f s; still waiting", handle.name, waited)
        except pykka.ActorDeadError:
            if not handle.ref.is_alive():  # stopped before it answered: no longer in flight
                handle._tracker.done(handle.actor_id)
            raise
    return answers


class PeriodicEntry:
    """A periodic timer's one piece of shared state: whether its last tick is still queued."""

    __slots__ = ("queued",)

    def __init__(self) -> None:
        self.queued = False


class Periodic:
    """A periodic tick as delivered: the message, and its timer entry to tell when it was handled."""

    __slots__ = ("entry", "message")

    def __init__(self, message: Any, entry: PeriodicEntry) -> None:
        self.message = message
        self.entry = entry


class KorralActor(pykka.Actor):
    """Base of every korral actor: typed dispatch, counted messages, contained failures.

    A message of class ``X`` is handled by ``on_X(self, message: X)``, found in the class's handler
    table (``korral.actors.dispatch``: keyed by message class, built and checked when the first actor
    of the class starts; a message without a handler is counted as an error). Subclasses set ``rank`` and must
    only block (``Handle.ask``) on handles of a lower rank: ``self.ask`` enforces it. Concrete actors
    derive from ``ServedActor`` (a pool of its own on its rank's workers: may block on asks and RM
    callbacks), ``PoolActor`` (runs on its partition's pool: never blocks) or ``ThreadedActor`` (a
    thread of its own: the Registrar and the RMProxy, one each per core).
    """

    rank: Rank = Rank.NODE
    # message class -> handler, this class's own (``ensure_handlers``, at the first start)
    handlers: ClassVar[Mapping[type, Handler]]
    # shares its pool with other actors (``PoolActor``): an ask could wait for its own pool's turn
    never_blocks: ClassVar[bool] = False

    def __init__(self, tracker: Tracker, name: str) -> None:
        super().__init__()
        if made_actors.starts:  # for the start, which has only the ref pykka's start returns
            made_actors.actors.append(self)
        ensure_handlers(type(self))  # built and checked when the class's first actor is made
        self.tracker: Tracker = tracker
        self.timing: HandlerTiming = tracker.timing  # read per message: one attribute away
        self.name: str = name
        # started by a LazyHandle: that handle is this actor's own (one actor_id for the tracker)
        adopted = adopting.__dict__.pop("handle", None)
        self.handle: Handle = (
            adopted if adopted is not None else Handle(self.actor_ref, self.rank, name, tracker)
        )

    def ask(self, target: Handle, message: Any, timeout: float = DEFAULT_ASK_TIMEOUT) -> Any:
        if self.never_blocks:
            raise RankViolation(f"{self.name} runs on an actor pool and must not block on {target.name}")
        return target.ask(message, caller=self.rank, timeout=timeout)

    def tell(self, target: Handle, message: Any) -> bool:
        """Send from this actor without waiting (``Handle.tell``); False when the target has stopped."""
        return target.tell(message)

    def kick(self, message: Any) -> None:
        """Send a message to ourselves (handled after everything already queued)."""
        self.handle.tell(message)

    def on_receive(self, message: Any) -> Any:
        if type(message) is Bundle:
            # Held messages from a pool's outbox, handled in order and counted done together. (A
            # Retire, whose handler reads this actor's count, never comes in one: only the partition,
            # on its own thread, sends it.)
            held = message.messages
            try:
                self.dispatch_all(held)
            finally:
                self.tracker.done(self.handle.actor_id, len(held))
            return None
        try:
            return self.dispatch(message)
        finally:
            self.tracker.done(self.handle.actor_id)

    def handler_failed(self, kind: str, error: Exception) -> HandlerError:
        """A handler raised: logged and counted, the actor lives on (call inside the ``except``)."""
        self.tracker.record_error()
        log.exception("%s: handling %s failed", self.name, kind)
        return HandlerError(f"{self.name}: {kind} failed: {error}")

    def dispatch_all(self, messages: tuple[Any, ...]) -> None:
        """Handle a bundle's messages in order (an actor may handle a run of one kind together)."""
        for message in messages:
            self.dispatch(message)

    def dispatch(self, message: Any) -> Any:
        """Run the message's handler; a failure is logged, counted and returned, never raised. The
        caller accounts for the message in the tracker (``on_receive``, or the pool's outbox when it
        hands a receiver its messages directly)."""
        if type(message) is Periodic:
            message.entry.queued = False
            message = message.message
        kind = type(message)
        handler = self.handlers.get(kind)
        if handler is None:
            # a message this actor has no handler for: a sender's mistake, and counted as one
            self.tracker.record_error()
            log.error("%s: no handler for %r", self.name, message)
            return HandlerError(f"{self.name}: no handler for {kind.__name__}")
        timing = self.timing
        weight = timing.weight(kind) if timing.on else 0
        started = time.thread_time() if weight else 0.0
        try:
            return handler(self, message)
        except Exception as error:
            return self.handler_failed(kind.__name__, error)
        finally:
            if weight:
                timing.handled(kind.__name__, (time.thread_time() - started) * weight)

    def tick_is_idle(self, tick: Any) -> bool:
        """Whether handling the periodic ``tick`` now would change nothing. Asked only by the simulated
        runtime, between two messages of this actor and with its mailbox empty (one thread: nothing
        changes it meanwhile), which then skips the tick: a timer with nothing due costs no step."""
        return False

    def on_stop(self) -> None:
        self.tracker.forget(self.handle.actor_id)

    def on_failure(self, exception_type: Any, exception_value: Any, traceback: Any) -> None:
        # Reached only if a failure escaped on_receive (it catches Exception): account for it.
        self.tracker.forget(self.handle.actor_id)


class ThreadedActor(KorralActor, pykka.ThreadingActor):
    """A korral actor on its own thread: pykka's ``ThreadingActor`` and its loop, with a mailbox that
    lets go of each message once handled (``ReleasingInbox``). The Registrar and the RMProxy, one each
    per core: every other actor runs on the core's bounded workers."""

    use_daemon_thread = True

    @staticmethod
    def _create_actor_inbox() -> ReleasingInbox:
        return ReleasingInbox()

    def on_start(self) -> None:
        # pykka's hook, on the actor's own thread before its first message: the core keeps the thread,
        # so that a stopped core can wait until its threads have ended
        self.tracker.thread_started(threading.current_thread())


# the workers' tier (``korral.actors.workers``) that serves a ``ServedActor`` of each rank: each tier
# waits only on lower ones (partitions ask schedulers and owners, nothing asks a dispatcher)
TIER_OF_RANK: Mapping[Rank, str] = {
    Rank.PARTITION: "partitions",
    Rank.SCHEDULER: "schedulers",
    Rank.DISPATCHER: "callbacks",
}


class ServedActor(KorralActor, PooledActor):
    """A korral actor with a pool of its own, served by the core's bounded workers of its rank's tier
    (``TIER_OF_RANK``; ``korral.actors.workers`` says why that cannot deadlock). It may block, in an
    ask down the rank order or in an RM's code, and holds one worker of its tier meanwhile. Its sends
    go straight into the receivers' mailboxes, as a threaded actor's."""

    def __init__(self, tracker: Tracker, name: str) -> None:
        super().__init__(tracker, name)
        self.bind_lane(pool_on(tracker, name, TIER_OF_RANK[self.rank]))

    def _release_references(self) -> None:
        # its handle's cached (pool, actor) would hold it in a cycle (actor -> handle -> actor)
        self.handle._pool_target = None


class PoolActor(KorralActor, PooledActor):
    """A korral actor served by its partition's ``ActorPool``; takes ``pool=`` when started."""

    never_blocks = True

    def __init__(self, tracker: Tracker, name: str, *, pool: ActorPool) -> None:
        super().__init__(tracker, name)
        self.pool = pool  # where its sends wait (``tell``) and its mailbox is served
        self.bind_lane(pool)

    def tell(self, target: Handle, message: Any) -> bool:
        """Send from this actor: held in its pool's outbox until the worker has run its ready actors,
        then delivered as one envelope per receiver (``Outbox``). Every send of the pool's actors
        goes this way, so each receiver still gets a sender's messages in the order sent."""
        return self.pool.send(target, message)

    def kick(self, message: Any) -> None:
        """Send a message to ourselves: handled when the worker's run is over, by a call rather than
        a message (``ActorPool.at_end``)."""
        if not self.actor_stopped.is_set():
            self.pool.at_end(self, self.handle, message)

    def _release_references(self) -> None:
        # its handle's cached (pool, actor) would hold it in a cycle (actor -> handle -> actor);
        # senders holding the handle now find no pool and are refused as by any stopped actor
        self.handle._pool_target = None


class RetiringActor(PoolActor):
    """A pooled owner that the partition removes while messages may still be on their way to it.

    pykka drops the tells still queued when an actor stops, and a dropped ``Placed`` or ``ViewOps``
    would leak what it carries. So a removed actor stops itself, on its own worker thread, only when
    nothing can reach it any more: every sender that is not on its pool has said it is done (the
    partition by ``Retire``, the scheduler by ``SchedulerDone`` where it sends to this kind), nothing
    is queued for it, and ``quiet()`` holds. Senders on the same pool cannot be mid-send then (one
    thread); whatever they send afterwards finds the actor stopped and takes its refusal path. The
    partition repeats ``Retire`` on its housekeeping tick until the actor has stopped.
    """

    # whether the scheduler sends to this kind of actor (and so must say SchedulerDone first)
    scheduler_sends = True
    _scheduler_done = False

    def on_SchedulerDone(self, message: SchedulerDone) -> None:
        self._scheduler_done = True

    def on_Retire(self, message: Retire) -> None:
        if self.scheduler_sends and not self._scheduler_done:
            return
        if (
            self.tracker.pending(self.handle.actor_id) == 1
            # messages for this actor its pool holds are not counted yet
            and not self.pool.holds(self.handle.actor_id)
            and self.quiet()
        ):
            self.stop_now()  # synchronous: tells from now on return False to their senders

    def quiet(self) -> bool:
        """Nothing this actor owns is still to be passed on (subclasses say what)."""
        return True


class HandlerError:
    """Returned (not raised) by a failed handler, so an ``ask`` caller can tell failure from a value."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message

    def __repr__(self) -> str:
        return f"HandlerError({self.message!r})"


class MadeActors(threading.local):
    """The korral actors made on this thread while starts (this many) are under way, outermost first
    (``korral.actors.starting``: pykka's start returns only a ref)."""

    actors: list[KorralActor]
    starts: int

    def __init__(self) -> None:
        self.actors = []
        self.starts = 0


made_actors = MadeActors()
# the handle a KorralActor being started by a LazyHandle takes as its own (see KorralActor.__init__)
adopting = threading.local()
