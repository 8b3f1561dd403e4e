"""Starting actors: at once (``start_actor``), or when first used (``start_actor_lazily``, a
``LazyHandle``), on the runtime the core's ``Tracker`` carries (threads, a pool, or the simulation);
and a partition's pool of owners (``start_pool``)."""

from __future__ import annotations

import threading
from typing import Any, Literal

import pykka

from korral.actors.base import Handle, KorralActor, Rank, adopting, made_actors
from korral.actors.runtime import ActorPool, PooledActor, StopFlag, pool_on
from korral.actors.tracker import Tracker


def _start(
    actor_class: type[KorralActor], tracker: Tracker, name: str, args: Any, kwargs: Any
) -> KorralActor:
    """pykka's ``Actor.start`` (create, register, start the runtime's loop) on the tracker's runtime,
    returning the actor: the one place where the runtime chooses how an actor runs. The actor is the
    first one made since this start began (an actor's constructor may start others)."""
    if tracker.clocks.simulation is not None:
        from korral.actors.simulated_mailbox import simulated_class

        actor_class = simulated_class(actor_class)
    made = made_actors.actors
    depth = len(made)
    made_actors.starts += 1
    try:
        actor_class.start(tracker, name, *args, **kwargs)
        return made[depth]
    finally:
        made_actors.starts -= 1
        del made[depth:]


def start_actor(
    actor_class: type[KorralActor], tracker: Tracker, name: str, *args: Any, **kwargs: Any
) -> Handle:
    """Start an actor on the tracker's runtime and return its handle (the actor's own)."""
    return _start(actor_class, tracker, name, args, kwargs).handle


# serialises lazy starts: a node's first messages may come from the scheduler's, the partition's and
# the pool's threads at once; one start takes ~10 µs and happens once per actor
_lazy_start_lock = threading.RLock()


class _NeverStarted:
    """The ref of a lazily started actor that was stopped before anything was sent to it."""

    __slots__ = ("actor_stopped",)
    actor_inbox = None  # no mailbox: Handle.pool_target finds no pool

    def __init__(self) -> None:
        self.actor_stopped = StopFlag()
        self.actor_stopped.set()

    def is_alive(self) -> bool:
        return False

    def ask(self, message: Any, **_kwargs: Any) -> Any:
        raise pykka.ActorDeadError("actor stopped before it was started")

    def stop(self, **_kwargs: Any) -> None:
        pass


_NEVER_STARTED = _NeverStarted()


class LazyHandle(Handle):
    """A handle whose actor starts when something is first sent to it (or asked of it).

    A partition with 10,000 nodes registers them ~3x faster when their actors (pykka actor, mailbox,
    model, ~10 µs and ~1 KB each) are not started with them: a node gets its actor from its first
    booking, update, drain or removal, on whichever thread sends it, and the actor takes this
    handle as its own (one ``actor_id`` in the tracker). Until then nothing is in flight to it, so
    stopping it only marks it stopped: later tells are refused as by any stopped actor.
    """

    __slots__ = ("_ref", "_starter")

    def __init__(
        self, rank: Rank, name: str, tracker: Tracker, starter: tuple[type[KorralActor], Any, Any]
    ) -> None:
        self.rank = rank
        self.name = name
        self.actor_id = id(self)
        self._tracker = tracker
        self._pool_target: tuple[ActorPool, PooledActor] | Literal[False] | None = False  # (see Handle)
        self._ref: Any = None
        # (actor class, positional and keyword arguments after the tracker and name) for _start
        self._starter: tuple[type[KorralActor], Any, Any] | None = starter

    @property
    def ref(self) -> Any:  # type: ignore[override]  # (read-only here: set once, by the start)
        ref = self._ref
        return ref if ref is not None else self._start_now()

    def start(self) -> None:
        """Start the actor now, unless it runs already or was stopped before it started."""
        if self._ref is None:
            self._start_now()

    @property
    def started(self) -> bool:
        """Whether the actor runs (or ran): False while nothing was ever sent to it."""
        ref = self._ref
        return ref is not None and ref is not _NEVER_STARTED

    def _start_now(self) -> Any:
        with _lazy_start_lock:
            if self._ref is None:
                starter, self._starter = self._starter, None
                assert starter is not None
                actor_class, args, kwargs = starter
                adopting.handle = self
                try:
                    actor = _start(actor_class, self._tracker, self.name, args, kwargs)
                finally:
                    adopting.__dict__.pop("handle", None)
                self._ref = actor.actor_ref
            return self._ref

    @property
    def is_alive(self) -> bool:
        ref = self._ref
        return True if ref is None else bool(ref.is_alive())

    def stop(self) -> None:
        with _lazy_start_lock:
            if self._ref is None:
                self._ref = _NEVER_STARTED
                self._starter = None
                return
        super().stop()


def start_actor_lazily(
    actor_class: type[KorralActor], tracker: Tracker, name: str, *args: Any, **kwargs: Any
) -> LazyHandle:
    """A handle to an actor that ``start_actor`` starts with these arguments when first used."""
    return LazyHandle(actor_class.rank, name, tracker, (actor_class, args, kwargs))


def start_pool(tracker: Tracker, name: str) -> ActorPool:
    """The pool of a partition's queue, application and node actors, served by the core's owners
    workers (on the threads runtime)."""
    return pool_on(tracker, name, "owners")
