"""The simulated runtime's mailboxes: what a simulated actor's messages wait in (``SimulatedInbox``),
what an ask's answer comes back on (``SimulatedFuture``, whose ``get`` runs the simulation), the mixin
that puts an actor class's mailbox on the ``Simulation`` (``SimulatedActor``), and the stand-in for a
partition's thread pool (``SimulatedPool``). The ``Simulation`` (actors/simulated.py) chooses what they
deliver and when.
"""

from __future__ import annotations

import sys
from collections import deque
from typing import TYPE_CHECKING, Any

import pykka
from pykka import ActorRegistry, Timeout

from korral import log_text
from korral.actors.loop import OwnLoop
from korral.actors.runtime import PooledActor

if TYPE_CHECKING:
    from korral.actors.simulated import Simulation

log = log_text.logger("korral.simulated")


class SimulatedInbox:
    """An actor's mailbox in the simulation: FIFO, and on the ready list while it can deliver."""

    __slots__ = ("_index", "actor", "busy", "changes", "group", "messages", "rank", "simulation", "started")

    def __init__(self) -> None:
        self.messages: deque[Any] = deque()
        self.actor: SimulatedActor | None = None
        self.simulation: Simulation | None = None
        self.started = False
        self.busy = False  # in a handler: not eligible until it returns
        self.group = ""  # its actor's name up to the first "/": a partition and its actors share one
        self.changes = 0  # deliveries other than reads (Simulation.repeatable_reads)
        self.rank = 0  # its actor's (``KorralActor.rank``), read at each step under a blocked handler
        self._index = -1  # position in the simulation's ready list, -1 when not on it

    def bind(self, actor: Any) -> None:
        self.actor = actor

    def put(self, envelope: Any, /) -> None:
        reply_to = envelope.reply_to
        if reply_to is not None and isinstance(reply_to, SimulatedFuture):
            reply_to.asked_rank = getattr(self.actor, "rank", None)
            simulation = reply_to.simulation = self.simulation
            if (
                simulation is not None
                and simulation._frozen
                and self.started
                and not self.busy
                and not self.messages
                and self._index == -1
            ):
                # an observer's read while nothing else may run: answered now, as the next step would
                simulation.deliver_now(self, envelope)
                return
        self.messages.append(envelope)
        if self.started and not self.busy and self._index == -1 and self.simulation is not None:
            self.simulation._make_ready(self)

    def get(self) -> Any:
        return self.messages.popleft()

    def empty(self) -> bool:
        return not self.messages


class SimulatedFuture(pykka.Future[Any]):
    """A future whose ``get`` runs the simulation until the answer is there (virtual timeout)."""

    def __init__(self) -> None:
        super().__init__()
        self.simulation: Simulation | None = None
        self.asked_rank: int | None = None  # the rank of the actor asked: what the wait depends on
        self.hooked = False
        self._value: Any = None
        self._exc_info: Any = None
        self._done = False

    def set_get_hook(self, func: Any) -> None:
        self.hooked = True  # pykka's get runs the hook (ActorRef.stop's converter)
        super().set_get_hook(func)

    def get(self, *, timeout: float | None = None) -> Any:
        if self.hooked:
            return super().get(timeout=timeout)
        if not self._done:
            if self.simulation is None:
                raise Timeout(f"{timeout} seconds (the message was never sent)")
            self.simulation.run_until(lambda: self._done, timeout, self.asked_rank)
        if self._exc_info is not None:
            exc_type, exc_value, exc_traceback = self._exc_info
            if exc_value is None:
                exc_value = exc_type()
            raise exc_value.with_traceback(exc_traceback)
        return self._value

    def set(self, value: Any | None = None) -> None:
        if self._done:
            raise RuntimeError("future already set")
        self._value = value
        self._done = True

    def set_exception(self, exc_info: Any = None) -> None:
        if self._done:
            raise RuntimeError("future already set")
        self._exc_info = exc_info if exc_info is not None else sys.exc_info()
        self._done = True


class SimulatedActor(OwnLoop):
    """Mixed in front of a korral actor class: its mailbox is served by the core's ``Simulation``."""

    @staticmethod
    def _create_actor_inbox() -> Any:
        return SimulatedInbox()

    def new_inbox(self) -> Any:
        """A pooled actor's constructor's mailbox (``PooledActor.new_inbox``), simulated."""
        return SimulatedInbox()

    @staticmethod
    def _create_future() -> pykka.Future[Any]:
        return SimulatedFuture()

    def _start_actor_loop(self) -> None:
        simulation: Simulation = self.tracker.clocks.simulation  # type: ignore[attr-defined]
        inbox: SimulatedInbox = self.actor_inbox  # type: ignore[assignment]
        inbox.actor = self
        inbox.simulation = simulation
        inbox.group = self.name.partition("/")[0]  # type: ignore[attr-defined]
        inbox.rank = getattr(self, "rank", 0)
        simulation.actors[self.name] = self  # type: ignore[attr-defined]
        for envelope in inbox.messages:  # asks queued before the start learn whom to run
            if isinstance(envelope.reply_to, SimulatedFuture):
                envelope.reply_to.simulation = simulation
        try:
            self.on_start()
        except Exception:
            self.fail(*sys.exc_info())
        inbox.started = True
        if inbox.messages:
            simulation._make_ready(inbox)

    def fatal(self) -> None:
        """A fatal error (a BaseException) escaped a handler: every actor stops, the run ends."""
        log.exception("%s: fatal error, stopping all actors", self)
        self.stop_now()
        ActorRegistry.stop_all()

    def _simulated_teardown(self) -> None:
        inbox: SimulatedInbox = self.actor_inbox  # type: ignore[assignment]
        while inbox.messages:
            self.answer_dead(inbox.messages.popleft())
        # emptied: off the ready list, or a later step would take it (a parked one drops at its delay's end)
        if inbox._index >= 0 and inbox.simulation is not None:
            inbox.simulation._take(inbox._index)


_simulated_classes: dict[type, type] = {}


def simulated_class(actor_class: type) -> type:
    """``actor_class`` with a simulated mailbox (one class per actor class, made once)."""
    simulated = _simulated_classes.get(actor_class)
    if simulated is None:
        # (``runs``: the class it runs, whose handler table it shares, ``ensure_handlers``)
        simulated = type(
            actor_class.__name__, (SimulatedActor, actor_class), {"__module__": __name__, "runs": actor_class}
        )
        _simulated_classes[actor_class] = simulated
    return simulated


class SimulatedPool:
    """Stands in for a partition's ``ActorPool``: its actors are simply mailboxes of the simulation."""

    def __init__(self, name: str, simulation: Simulation) -> None:
        self.name = name
        self._simulation = simulation

    @property
    def is_worker_thread(self) -> bool:
        """Whether a pooled actor is running (the threads runtime: on the pool's worker thread)."""
        return isinstance(self._simulation.running, PooledActor)

    def send(self, handle: Any, message: Any) -> bool:
        """A tell from one of its actors: straight to the receiver's mailbox (the simulation decides
        the order messages are handled in)."""
        return bool(handle.tell(message))

    def at_end(self, actor: Any, handle: Any, message: Any) -> None:
        """A pooled actor's message to itself: a plain tell here."""
        handle.tell(message)

    def holds(self, actor_id: int) -> bool:
        """Nothing is ever held back from a mailbox here."""
        return False

    def stop(self) -> None:
        pass
