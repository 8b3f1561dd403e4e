"""The simulated runtime: every actor of a core on the calling thread, in a seeded order, on a virtual
clock (docs/architecture.md, "Runtimes: threads and simulated").

The same actor classes get a simulated mailbox (pykka's hooks for new actor types; the loop is
korral's ``OwnLoop``), and nothing runs until the caller drives the ``Simulation``: each step a seeded
RNG picks one ready mailbox and delivers its next message, with the threads runtime's semantics (one
message at a time per actor, even while its handler blocks on an ask and the simulation runs nested
beneath it, when only actors of its rank or below are picked; each mailbox in send order). Timers
fire on a virtual clock that moves only when nothing is ready. Perturbation holds mailboxes back and
fires timers late, within what threads could do. The same seed and calls give the same steps.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import attrs
from pykka import Timeout

from korral import log_text
from korral.actors.base import Periodic, PeriodicEntry
from korral.actors.loop import receive_envelope
from korral.actors.simulated_mailbox import (
    SimulatedActor,
    SimulatedFuture,
    SimulatedInbox,
    SimulatedPool,
    simulated_class,
)
from korral.actors.starting import LazyHandle

if TYPE_CHECKING:
    from korral.actors.base import Handle

log = log_text.logger("korral.simulated")

# the mailboxes' side lives in actors/simulated_mailbox.py; importers of this module still find it here
__all__ = [
    "HOLD",
    "Pending",
    "SimulatedActor",
    "SimulatedFuture",
    "SimulatedInbox",
    "SimulatedPool",
    "SimulatedTimer",
    "Simulation",
    "SimulationError",
    "simulated_class",
]

# A run that never becomes quiet is a livelock: stop it with a clear error instead of spinning.
MAX_STEPS_PER_RUN = 5_000_000
# virtual wall clock of a simulation's start (event timestamps): 2026-01-01T00:00:00Z
EPOCH_NS = 1_767_225_600_000_000_000


class SimulationError(RuntimeError):
    """The simulation cannot go on: used from another thread, or no quiescence within the step bound."""


@attrs.frozen(slots=True)
class Pending:
    """A delivery the simulation could make next: which actor, and the message at its mailbox's head."""

    actor: str
    message: Any


# Chooses the next delivery among the ready ones: an index, None to let the seeded RNG choose, or HOLD
# to deliver nothing now (a scripted schedule holding every ready message back: the run is quiet).
Chooser = Callable[[Sequence[Pending]], "int | None"]
HOLD = -1


class SimulatedTimer:
    """``TimerService`` on the simulation's virtual clock: due timers fire when nothing else is ready."""

    def __init__(self, simulation: Simulation) -> None:
        self._simulation = simulation

    def now(self) -> float:
        return self._simulation.now

    def poke(self) -> None:
        """Nothing to do: virtual timers fire as the simulation runs."""

    def once(self, delay: float, target: Handle, message: Any) -> None:
        self._simulation.add_timer(delay, target, message, 0.0)

    def every(self, interval: float, target: Handle, message: Any) -> None:
        """Like ``TimerService.every``: ticks coalesce while the last one is still queued."""
        self._simulation.add_timer(interval, target, Periodic(message, PeriodicEntry()), interval)

    def stop(self) -> None:
        """No timer fires any more, and each actor's stop is delivered now (nothing drives the
        simulation after: undelivered, they kept every stopped core's actors alive)."""
        simulation = self._simulation
        simulation.clear_timers()
        if threading.current_thread() is simulation._thread:
            try:
                simulation.run_until_idle()
            except SimulationError:
                log.exception("stopping a simulated core: its actors did not all stop")


class Simulation:
    """Drives every mailbox of one core on the calling thread, in an order chosen by a seeded RNG."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self._tokens = random.Random(f"tokens-{seed}")  # apart from the schedule's choices
        self.now = 0.0  # virtual seconds since the start
        self.steps = 0
        self._ready: list[SimulatedInbox] = []
        self._timers: list[tuple[float, int, Handle, Any, float]] = []
        self._timer_seq = itertools.count()
        self._thread = threading.current_thread()
        self.running: Any = None  # the actor whose handler runs now (innermost, when asks nest)
        self.actors: dict[str, Any] = {}  # by name, the latest of each name: for harnesses and tests
        # harness controls, all off by default
        self.chooser: Chooser | None = None
        self.on_deliver: Callable[[str, Any], None] | None = None
        # what its core delivered (korral.actors.simulated_trace.DeliveryTrace, the on_deliver above)
        self.delivery_trace: Any = None
        # counts what is delivered (korral.harness.simulated.coverage.Coverage: ``delivered``)
        self.coverage: Any = None
        self.delay_probability = 0.0  # chance that a mailbox becomes ready only some steps later
        self.max_delay = 0  # in steps
        self.timer_skew = 0.0  # timers fire up to this many virtual seconds late
        self.step_time = 0.0  # each delivery takes up to this many virtual seconds: timers fire mid-work
        self.injector: Any = None  # a harness's faults, read by its ActorSetup classes (never the product)
        self._delayed: list[tuple[int, int, SimulatedInbox]] = []
        self._delayed_seq = itertools.count()
        self._frozen = False  # see frozen()
        self._rank_floor: int | None = None  # see run_until
        # kinds that only read their actor, answered again while frozen (deliver_now)
        self.repeatable_reads: frozenset[type] = frozenset()
        self._changes = 0
        self.group_changes: dict[str, int] = {}  # deliveries other than reads, per SimulatedInbox.group
        self._answers: dict[SimulatedInbox, tuple[int, Any]] = {}
        self.max_steps_per_run = MAX_STEPS_PER_RUN  # deliveries without quiescence: a livelock

    def perturb(
        self,
        *,
        delay_probability: float = 0.2,
        max_delay: int = 20,
        timer_skew: float = 0.05,
        step_time: float = 0.0001,
    ) -> None:
        """Explore more orders threads could produce: mailboxes held back some steps, timers late by a
        skew, virtual time passing with each delivery (a timer may fall due mid-burst)."""
        self.delay_probability = delay_probability
        self.max_delay = max_delay
        self.timer_skew = timer_skew
        self.step_time = step_time

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """Virtual time stands still while an observer reads: no time passes, no timer fires, nothing
        is held back, and the RNG is restored after, so a check's reads never shift the schedule."""
        if self._frozen:  # nested: the outer read restores
            yield
            return
        state, self._frozen = self.rng.getstate(), True
        try:
            yield
        finally:
            self._frozen = False
            self._answers.clear()
            self.rng.setstate(state)

    @property
    def is_frozen(self) -> bool:
        """Whether an observer reads now (``frozen``): nothing but reads is delivered."""
        return self._frozen

    # ---- clocks ------------------------------------------------------------------------------------

    def clock(self) -> float:
        return self.now

    def wall_clock_ns(self) -> int:
        return EPOCH_NS + int(self.now * 1e9)

    def unique_token(self) -> str:
        return f"{self._tokens.getrandbits(32):08x}"

    # ---- mailboxes ---------------------------------------------------------------------------------

    def _make_ready(self, inbox: SimulatedInbox) -> None:
        if self.delay_probability and not self._frozen and self.rng.random() < self.delay_probability:
            inbox._index = -2  # parked: neither ready nor free to be made ready again
            release = self.steps + self.rng.randint(1, self.max_delay)
            heapq.heappush(self._delayed, (release, next(self._delayed_seq), inbox))
            return
        inbox._index = len(self._ready)
        self._ready.append(inbox)

    def _take(self, index: int) -> SimulatedInbox:
        ready = self._ready
        inbox = ready[index]
        last = ready.pop()
        if last is not inbox:
            ready[index] = last
            last._index = index
        inbox._index = -1
        return inbox

    def _release_delayed(self) -> None:
        delayed, ready = self._delayed, self._ready
        # what is due, or else (nothing ready) the earliest: a delay never stalls the run
        while delayed and (delayed[0][0] <= self.steps or not ready):
            _, _, inbox = heapq.heappop(delayed)
            if not inbox.messages:  # its actor stopped meanwhile and answered what it held
                inbox._index = -1
                continue
            inbox._index = len(ready)
            ready.append(inbox)

    def step(self) -> bool:
        """Deliver one message; False when no mailbox is ready (timers aside)."""
        if self._delayed:
            self._release_delayed()
        ready = self._ready
        if not ready:
            return False
        # under a blocked handler only actors it may be waiting on (its rank or lower) are picked
        floor = self._rank_floor
        eligible = ready if floor is None else [i for i in ready if i.rank <= floor]
        while not eligible and self._delayed:  # a delay never stalls the run (_release_delayed)
            _, _, held = heapq.heappop(self._delayed)
            if not held.messages:
                held._index = -1
                continue
            held._index = len(ready)
            ready.append(held)
            eligible = [held] if held.rank <= (floor or 0) else []
        if not eligible:
            return False
        index = 0
        if self.chooser is not None:
            candidates = [Pending(actor=i.actor.name, message=i.messages[0].message) for i in eligible]  # type: ignore[union-attr]
            chosen = self.chooser(candidates)
            if chosen == HOLD:
                return False
            index = chosen if chosen is not None else self.rng.randrange(len(eligible))
        elif len(eligible) > 1:
            index = self.rng.randrange(len(eligible))
        if eligible is not ready:
            index = eligible[index]._index
        inbox = self._take(index)
        envelope = inbox.messages.popleft()
        actor = inbox.actor
        assert actor is not None
        self.steps += 1
        inbox.busy = True  # a timer falling due now finds it handling this message (_nothing_due)
        if self.step_time and not self._frozen:
            self.now += self.rng.random() * self.step_time  # (uniform(0, step_time), one call less)
            if self._timers and self._timers[0][0] <= self.now:
                self._fire_due()
        self._deliver(inbox, actor, envelope)
        return True

    def deliver_now(self, inbox: SimulatedInbox, envelope: Any) -> None:
        """Deliver an ask to an idle actor with an empty mailbox at once (the clock frozen: an
        observer reads), as a step would. A read (``repeatable_reads``) answered in this frozen spell,
        with only reads delivered since, gets that answer again. It counts as a step all the same, so
        that how a check reads never shifts the schedule."""
        actor = inbox.actor
        assert actor is not None
        self.steps += 1
        read = type(envelope.message) in self.repeatable_reads
        if read:
            answered = self._answers.get(inbox)
            if answered is not None and answered[0] == self._changes:
                known: Any = actor  # a KorralActor: its tracker counted the ask sent
                known.tracker.done(known.handle.actor_id)
                envelope.reply_to.set(answered[1])
                return
        self._deliver(inbox, actor, envelope)
        reply = envelope.reply_to
        if read and reply._done and reply._exc_info is None:
            self._answers[inbox] = (self._changes, reply._value)

    def _deliver(self, inbox: SimulatedInbox, actor: Any, envelope: Any) -> None:
        """A step's or ``deliver_now``'s delivery: traced, counted, the actor marked running meanwhile."""
        message = envelope.message
        if type(message) not in self.repeatable_reads:
            self._changes += 1
            inbox.changes += 1
            changes = self.group_changes
            changes[inbox.group] = changes.get(inbox.group, 0) + 1
        if self.on_deliver is not None:
            self.on_deliver(actor.name, message)
        if self.coverage is not None:
            self.coverage.delivered(actor, message)
        inbox.busy = True
        outer, self.running = self.running, actor
        try:
            receive_envelope(actor, envelope)
        except BaseException:
            actor.fatal()  # (receive_envelope contains every Exception: this one stops the run)
            raise
        finally:
            inbox.busy = False
            self.running = outer
        if actor.actor_stopped.is_set():
            actor._simulated_teardown()
        elif inbox.messages and inbox._index == -1:
            self._make_ready(inbox)

    def queued(self) -> list[Pending]:
        """Every message waiting in a mailbox, actor by actor (a harness's peek)."""
        return [
            Pending(actor=name, message=envelope.message)
            for name, actor in self.actors.items()
            if not actor.actor_stopped.is_set()
            for envelope in actor.actor_inbox.messages
        ]

    # ---- timers ------------------------------------------------------------------------------------

    def pool(self, name: str) -> SimulatedPool:
        """The stand-in for a new ``ActorPool``: its actors are mailboxes of this simulation."""
        return SimulatedPool(name, self)

    def add_timer(self, delay: float, target: Handle, message: Any, interval: float) -> None:
        skew = self.rng.uniform(0.0, self.timer_skew) if self.timer_skew else 0.0
        heapq.heappush(
            self._timers, (self.now + delay + skew, next(self._timer_seq), target, message, interval)
        )

    def clear_timers(self) -> None:
        self._timers.clear()

    def next_deadline(self) -> float | None:
        return self._timers[0][0] if self._timers else None

    def last_one_shot_deadline(self) -> float | None:
        """When the latest one-shot timer (a timeout, a delay: not a periodic tick) falls due; None
        when none is pending."""
        return max((timer[0] for timer in self._timers if timer[4] <= 0), default=None)

    def _fire_due(self) -> None:
        timers = self._timers
        while timers and timers[0][0] <= self.now:
            due, _, target, message, interval = heapq.heappop(timers)
            if interval > 0 and message.entry.queued:
                delivered = target.is_alive  # the last tick is still waiting: skip this one
            elif interval > 0 and self._nothing_due(target, message.message):
                delivered = True  # handled now, it would change nothing: no step for it
            else:
                if interval > 0:
                    message.entry.queued = True
                delivered = target.tell(message) if target.is_alive else False
            if delivered and interval > 0:
                skew = self.rng.uniform(0.0, self.timer_skew) if self.timer_skew else 0.0
                heapq.heappush(
                    timers,
                    (max(due + interval, self.now) + skew, next(self._timer_seq), target, message, interval),
                )

    @staticmethod
    def _nothing_due(target: Handle, tick: Any) -> bool:
        """Whether ``tick``, delivered now, would find its actor idle with nothing queued (the next
        message it handles, on threads too) and change nothing (``KorralActor.tick_is_idle``)."""
        if type(target) is LazyHandle and not target.started:
            return False  # the tell starts it
        inbox: Any = target.ref.actor_inbox
        actor = getattr(inbox, "actor", None)
        return (
            actor is not None
            and inbox.started
            and not inbox.busy
            and not inbox.messages
            and inbox._index == -1
            and not actor.actor_stopped.is_set()
            and actor.tick_is_idle(tick)
        )

    # ---- running -----------------------------------------------------------------------------------

    def _check_thread(self) -> None:
        if threading.current_thread() is not self._thread:
            raise SimulationError("a simulated core runs on the thread that started it; call it from there")

    def run_until_idle(self) -> int:
        """Deliver until no mailbox is ready; the virtual clock does not move. Returns the steps taken."""
        self._check_thread()
        start = self.steps
        while self.step():
            if self.steps - start > self.max_steps_per_run:
                raise SimulationError(f"no quiescence after {self.max_steps_per_run:,} steps (a livelock?)")
        return self.steps - start

    def advance(self, seconds: float) -> None:
        """Move the virtual clock ``seconds`` on, firing timers as they fall due and running to
        quiescence before each jump and at the end."""
        if seconds < 0:
            raise ValueError("the virtual clock only moves forward")
        if self._frozen:
            raise SimulationError("the virtual clock is frozen (an observer is reading): it cannot move")
        target = self.now + seconds
        self.run_until_idle()
        while self._timers and self._timers[0][0] <= target:
            self.now = max(self.now, self._timers[0][0])
            self._fire_due()
            self.run_until_idle()
        self.now = max(self.now, target)  # deliveries may have taken virtual time (perturbed)

    def jump(self, seconds: float) -> None:
        """The virtual clock jumps ``seconds`` at once (a stalled process): every timer due by then
        fires at the new time, in one burst, and the run goes on to quiescence."""
        if seconds < 0:
            raise ValueError("the virtual clock only moves forward")
        if self._frozen:
            raise SimulationError("the virtual clock is frozen (an observer is reading): it cannot move")
        self.run_until_idle()
        self.now += seconds
        self._fire_due()
        self.run_until_idle()

    def run_until(
        self, done: Callable[[], bool], timeout: float | None, asked_rank: int | None = None
    ) -> None:
        """Run until ``done()`` (a blocking ask's answer); the virtual clock may move up to ``timeout``.

        Until an ask is answered, no actor above the rank of the one asked is picked: it would run on
        this one stack above the waiting handler, and one that asked that handler's actor in turn
        could never be answered (on threads it would simply wait). The answer comes from the actor
        asked and what it asks, down the ranks. An ask made from the RM's code inside a handler (a
        predicates callback registering again) is an ask of the actor it names, as on threads."""
        self._check_thread()
        floor = self._rank_floor
        if asked_rank is not None:
            self._rank_floor = asked_rank
        try:
            self._run_until(done, timeout)
        finally:
            self._rank_floor = floor

    def _run_until(self, done: Callable[[], bool], timeout: float | None) -> None:
        deadline = None if timeout is None else self.now + timeout
        start = self.steps
        while not done():
            if self.step():
                if self.steps - start > self.max_steps_per_run:
                    raise SimulationError(f"no answer after {self.max_steps_per_run:,} steps (a livelock?)")
                continue
            due = self.next_deadline()
            if due is None or self._frozen or (deadline is not None and due > deadline):
                if deadline is not None and not self._frozen:
                    self.now = max(self.now, deadline)
                raise Timeout(f"{timeout} seconds (virtual): nothing left to run could answer")
            self.now = max(self.now, due)
            self._fire_due()
