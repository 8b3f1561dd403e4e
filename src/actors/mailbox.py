"""A pooled actor's mailbox, and deliveries into many mailboxes at once (``korral.actors.runtime``).

``PooledInbox`` puts its actor on its pool's run queue with the first message after being empty;
``put_all`` and ``put_counted`` hand the actors a batch of deliveries made ready to their pools
together, one hand-off per pool.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING, Any

from korral.actors.loop import Envelope, refuse

if TYPE_CHECKING:
    from korral.actors.runtime import ActorPool, PooledActor


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
        actor.lane.schedule(actor)

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
            self._actor.lane.schedule(self._actor)


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
            entry = ready.get(id(actor.lane))
            if entry is None:
                ready[id(actor.lane)] = (actor.lane, [actor])
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
