"""Faults ``korral stress --simulated`` puts into the actors themselves (``--env-faults handlers,cutoffs``).

Like the planted bugs (``korral.harness.faults_planted``) they reach a core only through the test-only
seam: subclasses of the product's node, application and scheduler actors that the harness hands to
``korral.start`` in an ``ActorSetup``; the product never looks at them. Unlike the planted bugs they
are things a correct core must survive with its books right. Each decision is drawn from the seed
(a handler failure: the injector's own RNG, once per handler call in delivery order; a cut-off: a
hash of the seed, the allocation key and its place in the batch), never from the wall clock, so a
run replays exactly.

- ``handlers``: a handler raises, through the product's own containment (``KorralActor.dispatch``
  catches it, logs it and counts it in ``Tracker.errors``; the actor lives on and takes its next
  message). Two points, chosen because korral promises to survive them:

  * **at exit** of any handler of a told message (one annotated ``-> None``; never an asked query,
    whose asker would get the error as its answer): the handler did its work, the failure only
    reports it. The books must stay exactly right and the next message must be handled as usual.
  * **at entry** of a message whose loss the protocol makes up for by repeating it: the scheduler's
    periodic ``Tick`` (the next tick does what it would have) and ``Retire`` to a removed owner (the
    partition repeats it on its housekeeping tick until the owner has stopped). The message is lost.

  Not at entry of any other message: actors do not acknowledge or resend ``Placed``, ``ViewOps``,
  ``NodeRemoved``, ``RunCycle`` ... to each other, so losing one is an unrecoverable loss by design (a
  lost ``RunCycle`` even leaves the scheduler believing one is queued, and it never schedules again).
  Those points are not promised, so not injected; the checks would report them (a lost ``Placed``
  leaves a decision in the scheduler's view that no application owns). The harness subtracts the
  failures it injected from ``Tracker.errors``: any other handler failure is still a violation.

- ``cutoffs``: a scheduling batch ends early, after a seeded allocation (``SchedulerActor`` ends a
  batch when nothing more fits or its time budget runs out; on the virtual clock the budget never runs
  out within a handler, so without this every batch drains all it can). The rest is scheduled by the
  next ``RunCycle``, which the scheduler queues behind whatever arrived meanwhile: messages land
  between two halves of one batch's work.
"""

from __future__ import annotations

import inspect
import random
import zlib
from collections.abc import Callable
from typing import Any

from korral.actors.dispatch import Handler, handler_table
from korral.actors.messages import Retire, RunCycle, Tick
from korral.actors.scheduler.actor import SchedulerActor
from korral.actors.setup import ActorSetup

HANDLER_EXIT_FAILURE = 0.01  # the share of told messages whose handler raises once it is done
HANDLER_ENTRY_DROP = 0.15  # the share of repeated messages (Tick, Retire) lost at entry
BATCH_CUTOFF = 0.35  # the share of allocations a scheduling batch ends after

# messages whose loss at entry the protocol repeats (see the module's docstring)
REPEATED = frozenset({Tick, Retire})


class InjectedFailure(RuntimeError):
    """A handler failure the harness injected (``--env-faults handlers``)."""


class Injector:
    """One core's injected faults: which are on, their seed, and what they did (counts)."""

    def __init__(self, seed: int, kinds: frozenset[str]) -> None:
        self.seed = seed
        self.handlers = "handlers" in kinds
        self.cutoffs = "cutoffs" in kinds
        self.raised = 0  # handler failures injected (each counted once in Tracker.errors)
        self.dropped = 0  # of those, messages lost at entry
        self.cut = 0  # scheduling batches ended early
        self.entry_points = REPEATED  # the message kinds lost at entry (a test may widen it)
        # its own RNG, drawn in delivery order by told messages' handlers and repeated messages (a
        # check's reads are asked queries: they draw nothing): the same run draws the same failures
        self.rng = random.Random(f"injector-{seed}")

    def _roll(self, text: str, share: float) -> bool:
        return zlib.crc32(f"{self.seed}|{text}".encode()) % 10_000 < share * 10_000

    def at_entry(self, actor: str, kind: type) -> None:
        if kind in self.entry_points and self.rng.random() < HANDLER_ENTRY_DROP:
            self.raised += 1
            self.dropped += 1
            raise InjectedFailure(f"injected: {kind.__name__} lost at entry of {actor}")

    def at_exit(self, actor: str, kind: type) -> None:
        if self.rng.random() < HANDLER_EXIT_FAILURE:
            self.raised += 1
            raise InjectedFailure(f"injected: {kind.__name__} handled by {actor}, then raised")

    def cut_after(self, allocation_key: str, made: int) -> bool:
        """Whether a scheduling batch ends after its ``made``-th allocation, this one."""
        if self.cutoffs and self._roll(f"cut|{allocation_key}|{made}", BATCH_CUTOFF):
            self.cut += 1
            return True
        return False


def _injector(actor: Any) -> Injector | None:
    simulation = actor.tracker.clocks.simulation
    return None if simulation is None else simulation.injector


def _told(function: Handler) -> bool:
    """A handler of a told message: annotated to return None (an asked query returns its answer)."""
    returns = inspect.signature(function).return_annotation
    return returns in (None, "None")


def _wrap(kind: type, function: Handler) -> Handler:
    told = _told(function)

    def handler(actor: Any, message: Any) -> Any:
        injector = _injector(actor)
        if injector is None or not injector.handlers:
            return function(actor, message)
        injector.at_entry(actor.name, kind)
        result = function(actor, message)
        if told:
            injector.at_exit(actor.name, kind)
        return result

    return handler


class CutOffScheduler(SchedulerActor):
    """A scheduler whose batches may end early, after a seeded allocation (``cutoffs``)."""

    def on_RunCycle(self, message: RunCycle) -> None:
        injector = _injector(self)
        if injector is None or not injector.cutoffs:
            super().on_RunCycle(message)
            return
        view = self.view
        schedule_one = view.schedule_one
        made = 0
        ended = False

        def until_cut() -> Any:
            nonlocal made, ended
            if ended:
                self.cut_short = True  # the batch ends with work left: the scheduler queues the next
                return None
            allocation = schedule_one()
            if allocation is not None:
                made += 1
                ended = injector.cut_after(allocation.allocation_key, made)
            return allocation

        view.schedule_one = until_cut
        try:
            super().on_RunCycle(message)
        finally:
            view.schedule_one = schedule_one  # the view's own walk again


_classes: dict[tuple[type, ...], type] = {}


def injected_class(base: type, *mixins: type) -> type:
    """``base`` (a product actor class or a planted bug's) with the mixins in front and every handler
    wrapped by the injector; made once per combination (a class per seed would pile up)."""
    key = (base, *mixins)
    made = _classes.get(key)
    if made is None:
        made = type(f"Injected{base.__name__}", (*mixins, base), {"__module__": __name__})
        table = {kind: _wrap(kind, function) for kind, function in handler_table(made).items()}
        made.handlers = table  # type: ignore[attr-defined]  # the dispatch table ensure_handlers keeps
        _classes[key] = made
    return made


def setup_with_injection(options: dict[str, Any], kinds: frozenset[str]) -> dict[str, Any]:
    """``korral.start`` options (``faults.start_options()``: the planted bugs' classes, if any) with the
    node, application and scheduler actors able to take injected faults, when any of ``kinds`` is on."""
    if not kinds & {"handlers", "cutoffs"}:
        return options
    setup: ActorSetup = options.get("setup") or ActorSetup()
    scheduler_mixins: tuple[type, ...] = (CutOffScheduler,) if "cutoffs" in kinds else ()
    made: Callable[..., type] = injected_class
    return {
        **options,
        "setup": ActorSetup(
            clock=setup.clock,
            node_actor=made(setup.node_actor),
            application_actor=made(setup.application_actor),
            scheduler_actor=made(setup.scheduler_actor, *scheduler_mixins),
            node_actor_warmup=setup.node_actor_warmup,
        ),
    }
