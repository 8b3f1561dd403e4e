"""korral's own actor loop on pykka's public surface: what pykka's loop does besides calling
``on_receive``, for the actors whose mailboxes korral's runtimes serve (pooled and simulated).

pykka's loop serves one actor per thread, and reaches stops and failures through private methods and
a private stop message. An actor on ``OwnLoop`` is still a pykka actor (pykka's ``start``,
``ActorRegistry``, an ``ActorRef``, the hooks pykka documents for new actor types), but its stop is
korral's ``Stop``, sent by its ``KorralRef``, and its loop calls ``stop_now`` and ``fail`` where
pykka's calls its private ``_stop`` and ``_handle_failure``. Threaded actors keep pykka's loop, with
a mailbox that lets go of a handled message (``ReleasingInbox``).
"""

from __future__ import annotations

import queue
import sys
from types import TracebackType
from typing import Any

import pykka
from pykka import ActorDeadError, ActorRegistry, messages

from korral import log_text

log = log_text.logger("korral.runtime")

_PROXY_MESSAGES = (messages.ProxyCall, messages.ProxyGetAttr, messages.ProxySetAttr)


class Envelope:
    """A message in a mailbox, with the future its answer goes to (None for a tell).

    The shape of the envelopes pykka's ``ActorRef`` puts in a mailbox (``message``, ``reply_to``), so
    every loop reads both alike; korral builds its own for its tells, and may let go of a handled
    message (``ReleasingInbox``)."""

    __slots__ = ("message", "reply_to")

    def __init__(self, message: Any, reply_to: pykka.Future[Any] | None = None) -> None:
        self.message = message
        self.reply_to = reply_to


class Stop:
    """Stop once the messages sent before this one are handled (what ``KorralRef.stop`` sends)."""

    __slots__ = ()


class KorralRef(pykka.ActorRef[Any]):
    """The ``ActorRef`` of an actor on korral's own loop: ``stop`` sends korral's ``Stop`` (pykka's
    stop message is pykka's private), with pykka's contract (True if the actor stopped or was
    stopping, False if it was already dead; a future of that when not blocking)."""

    def stop(self, *, block: bool = True, timeout: float | None = None) -> Any:
        asked = self.ask(Stop(), block=False)

        def stopped(timeout: float | None) -> bool:
            try:
                asked.get(timeout=timeout)
            except ActorDeadError:
                return False
            return True

        converted = asked.__class__()
        converted.set_get_hook(stopped)
        return converted.get(timeout=timeout) if block else converted


class OwnLoop(pykka.Actor):
    """An actor whose messages korral's own loop hands out (the pooled and the simulated runtimes)."""

    korral_ref: KorralRef

    @property
    def actor_ref(self) -> Any:
        """This actor's ``KorralRef`` (pykka's ``start`` registers it; handles hold it)."""
        ref: KorralRef | None = self.__dict__.get("korral_ref")
        if ref is None:
            ref = self.korral_ref = KorralRef(self)
        return ref

    def stop(self) -> None:
        """As pykka's ``Actor.stop``: stop once what is queued now is handled."""
        self.actor_ref.stop(block=False)

    def stop_now(self) -> None:
        """Stop at once, whatever is still queued (the runtime answers it): unregistered, marked
        stopped (tells are refused from now on), ``on_stop`` run."""
        ActorRegistry.unregister(self.actor_ref)
        self.actor_stopped.set()
        try:
            self.on_stop()
        except Exception:
            self.fail(*sys.exc_info())

    def fail(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """A failure that escaped the actor's handling: logged, and the actor stops (as in pykka)."""
        if exception_type is not None and exception_value is not None:
            log.error(
                "Unhandled exception in %s:", self, exc_info=(exception_type, exception_value, traceback)
            )
        else:
            log.error("Unhandled failure in %s", self)
        ActorRegistry.unregister(self.actor_ref)
        self.actor_stopped.set()

    def answer_dead(self, envelope: Any) -> None:
        """A message left in the mailbox of a stopped actor: its asker hears so (a stop, that it did)."""
        refuse(envelope, self.actor_ref)


def refuse(envelope: Any, actor: Any) -> None:
    """A message its stopped receiver never handles: an ask is answered (a stop with None, anything
    else with ``ActorDeadError``), a tell dropped."""
    if envelope.reply_to is not None:
        if isinstance(envelope.message, Stop):
            envelope.reply_to.set(None)
        else:
            envelope.reply_to.set_exception(
                exc_info=(ActorDeadError, ActorDeadError(f"{actor} stopped"), None)
            )


def receive_envelope(actor: OwnLoop, envelope: Any) -> None:
    """Handle one envelope with the contract of pykka's threading loop, for korral's own loops (pooled,
    simulated): the reply set on the future, an exception in an ask returned to the caller, an
    exception in a tell a failure of the actor. A BaseException (a fatal error) is the runtime's to
    handle: it propagates."""
    try:
        message = envelope.message
        if type(message) is Stop:
            actor.stop_now()
            response = None
        elif isinstance(message, _PROXY_MESSAGES):
            raise TypeError(f"{actor} takes messages, not proxy calls")
        else:
            response = actor.on_receive(message)
        if envelope.reply_to is not None:
            envelope.reply_to.set(response)
    except Exception:
        if envelope.reply_to is not None:
            log.info("Exception returned from %s to caller:", actor, exc_info=sys.exc_info())
            envelope.reply_to.set_exception()
        else:
            actor.fail(*sys.exc_info())
            try:
                actor.on_failure(*sys.exc_info())
            except Exception:
                actor.fail(*sys.exc_info())


class ReleasingInbox(queue.Queue[Any]):
    """A threaded actor's mailbox (pykka's ``_create_actor_inbox`` hook) that lets go of a handled
    message when its loop comes back for the next one. pykka's loop keeps the last envelope until the
    next arrives, and for the RM proxy and a partition that can be an RM's request of 50,000 asks,
    held (and counted in the peak RSS) long after it was taken in. Only korral's own envelopes are
    emptied (what ``Handle.tell`` sends); an ask's envelope is pykka's and left as it is."""

    def __init__(self) -> None:
        super().__init__()
        self._handed: Envelope | None = None

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        handed = self._handed
        if handed is not None:
            self._handed = None
            handed.message = None  # handled: pykka's loop asks for the next only once it is done
        envelope = super().get(block, timeout)
        if type(envelope) is Envelope:
            self._handed = envelope
        return envelope
