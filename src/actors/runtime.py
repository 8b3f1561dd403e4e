"""A pooled pykka runtime: many actors, one worker thread.

pykka's ``ThreadingActor`` gives every actor its own OS thread. With thousands of node and application
actors, every message becomes a thread hand-off that fights for the GIL (measured: ~150 µs per
allocation at 1,000 nodes). ``PooledActor`` is a pykka actor runtime (pykka's documented extension
points: ``_create_actor_inbox``, ``_create_future``, ``_start_actor_loop``) whose mailboxes are served by
an ``ActorPool`` worker thread: the same actor semantics (one message at a time per actor, in order,
state private to the actor, ``tell``/``ask``/``stop`` through the usual ``ActorRef``), without a thread
per actor. Each partition has its own pool, so partitions still run independently.

A pooled actor must never block: an ``ask`` to another actor of the same pool would wait for a
message that only this very worker could process. korral's pooled actors (nodes, applications,
queues) only ``tell``; ``KorralActor.ask`` refuses an ask inside one pool.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections import deque
from typing import Any

import pykka
from pykka import ActorDeadError, ActorRegistry, messages

log = logging.getLogger("korral.runtime")

_PYKKA_MESSAGES = frozenset(
    {messages._ActorStop, messages.ProxyCall, messages.ProxyGetAttr, messages.ProxySetAttr}
)

# Messages one actor may handle before the worker moves on to the next ready actor (fairness).
SLICE = 64


class ActorPool:
    """A worker thread that runs ready pooled actors, each for a slice of its mailbox."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._ready: deque[PooledActor] = deque()
        self._wake = threading.Condition(threading.Lock())
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=f"korral-pool-{name}", daemon=True)
        self._thread.start()

    def schedule(self, actor: PooledActor) -> None:
        with self._wake:
            self._ready.append(actor)
            if len(self._ready) == 1:
                self._wake.notify()

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
        while True:
            with self._wake:
                while not ready and not self._stopped:
                    self._wake.wait()
                if self._stopped and not ready:
                    return
                actor = ready.popleft()
            actor._run_slice()


class PooledInbox:
    """A mailbox that, on the first message after being empty, puts its actor on the pool's run queue."""

    __slots__ = ("_actor", "_lock", "_messages", "_scheduled")

    def __init__(self) -> None:
        self._messages: deque[Any] = deque()
        self._lock = threading.Lock()
        self._scheduled = False
        self._actor: PooledActor | None = None

    def bind(self, actor: PooledActor) -> None:
        self._actor = actor

    def put(self, envelope: Any, /) -> None:
        with self._lock:
            self._messages.append(envelope)
            if self._scheduled or self._actor is None or not self._actor._started:
                return
            self._scheduled = True
        self._actor.pool.schedule(self._actor)

    def get(self) -> Any:
        return self._messages.popleft()

    def empty(self) -> bool:
        return not self._messages

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


class PooledActor(pykka.Actor):
    """A pykka actor whose mailbox is served by an ``ActorPool`` instead of its own thread."""

    pool: ActorPool
    _started = False

    @staticmethod
    def _create_actor_inbox() -> Any:
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
            self._handle_failure(*sys.exc_info())
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
            inbox._messages.appendleft(envelope)
            self.pool.schedule(self)

    def _handle_envelope(self, envelope: Any) -> None:
        # The same contract as pykka's threading loop: replies set on the future, exceptions in an
        # ask go back to the caller, an exception in a tell is a failure of the actor.
        try:
            message = envelope.message
            # pykka's own messages (stop, proxy calls) go through pykka; ours straight to on_receive
            if type(message) in _PYKKA_MESSAGES:
                response = self._handle_receive(message)
            else:
                response = self.on_receive(message)
            if envelope.reply_to is not None:
                envelope.reply_to.set(response)
        except Exception:
            if envelope.reply_to is not None:
                envelope.reply_to.set_exception()
            else:
                self._handle_failure(*sys.exc_info())
                try:
                    self.on_failure(*sys.exc_info())
                except Exception:
                    self._handle_failure(*sys.exc_info())
        except BaseException:
            log.exception("%s: fatal error, stopping all actors", self)
            self._stop()
            ActorRegistry.stop_all()
        if self.actor_stopped.is_set():
            self._teardown()

    def _teardown(self) -> None:
        inbox: PooledInbox = self.actor_inbox  # type: ignore[assignment]
        while True:
            envelope = inbox._take()
            if envelope is None:
                return
            if envelope.reply_to is not None:
                if isinstance(envelope.message, messages._ActorStop):
                    envelope.reply_to.set(None)
                else:
                    envelope.reply_to.set_exception(
                        exc_info=(ActorDeadError, ActorDeadError(f"{self.actor_ref} stopped"), None)
                    )
