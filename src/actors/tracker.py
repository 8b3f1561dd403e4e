"""``Tracker``: messages sent and not yet handled, per receiving actor, and the handlers that failed.

The core is idle when every live actor's count is zero. Counting per receiver means an actor that
stops with messages still queued does not leave a count behind forever. Every actor of a core holds
its tracker, so the tracker also carries the core's other shared parts, each a job of its own: the
``Clocks`` (clocks, tokens, the simulation: ``korral.actors.clocks``) and the benchmark's
``HandlerTiming`` (``korral.actors.timing``).
"""

from __future__ import annotations

import threading
import time

from korral.actors.clocks import Clocks
from korral.actors.event_channel import EventChannel
from korral.actors.timing import HandlerTiming
from korral.actors.workers import ActorThreads


class Tracker:
    """Counts messages sent and not yet handled, per receiving actor; counts handler failures."""

    def __init__(self, clocks: Clocks | None = None) -> None:
        self.clocks: Clocks = clocks if clocks is not None else Clocks()
        self.timing = HandlerTiming()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._counts: dict[int, int] = {}
        self._total = 0
        self.sent_total = 0  # every message ever sent: the benchmarks' messages-per-allocation
        self.errors = 0
        # events on their way to the RMs' dispatchers, bounded (``korral.actors.event_channel``)
        self.event_channel = EventChannel()
        # the threads of this core's threaded actors, joined by Core.stop (dead ones pruned as they go)
        self._actor_threads: list[threading.Thread] = []
        # the bounded workers every other actor runs on (``korral.actors.workers``): made when first
        # used, with the default size unless the core gave its own (``use_workers``)
        self._workers: ActorThreads | None = None

    @property
    def workers(self) -> ActorThreads:
        with self._lock:
            if self._workers is None:
                self._workers = ActorThreads()
            return self._workers

    def use_workers(self, workers: ActorThreads) -> None:
        """The core's workers, sized by its ``actor_threads`` setting (before any actor starts)."""
        with self._lock:
            self._workers = workers

    def thread_started(self, thread: threading.Thread) -> None:
        with self._lock:
            self._actor_threads = [t for t in self._actor_threads if t.is_alive()]
            self._actor_threads.append(thread)

    def join_threads(self, timeout: float) -> None:
        """Wait (bounded overall) until every threaded actor's thread has ended (an actor that answered
        its stop still has a few lines of pykka's loop to run, longer on a loaded machine), then end
        the workers once they have served what is queued (the stops of the pooled actors)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            threads, self._actor_threads = self._actor_threads, []
            workers = self._workers
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
        if workers is not None:
            workers.stop(max(0.0, deadline - time.monotonic()))

    def sent(self, actor_id: int) -> None:
        with self._lock:
            self._counts[actor_id] = self._counts.get(actor_id, 0) + 1
            self._total += 1
            self.sent_total += 1

    def held(self, actor_id: int) -> None:
        """A message held in a pool's ``Outbox`` for this actor: in flight, its envelope not sent yet."""
        with self._lock:
            self._counts[actor_id] = self._counts.get(actor_id, 0) + 1
            self._total += 1

    def sent_each(self, counts: list[tuple[int, int]], wakeups: int | None = None) -> None:
        """Envelopes sent together, one per (actor, messages in it): one wake-up each, unless told."""
        with self._lock:
            get = self._counts.get
            for actor_id, messages in counts:
                self._counts[actor_id] = get(actor_id, 0) + messages
                self._total += messages
            self.sent_total += len(counts) if wakeups is None else wakeups

    def done(self, actor_id: int, messages: int = 1) -> None:
        with self._lock:
            count = self._counts.get(actor_id, 0)
            if count <= 0:
                return
            messages = min(messages, count)
            self._counts[actor_id] = count - messages
            self._total -= messages
            if self._total == 0:
                self._idle.notify_all()

    def forget(self, actor_id: int) -> None:
        """The actor stopped: what was queued for it will never be handled."""
        self.event_channel.forget(actor_id)
        with self._lock:
            count = self._counts.pop(actor_id, 0)
            self._total -= count
            if self._total == 0:
                self._idle.notify_all()

    def pending(self, actor_id: int) -> int:
        """Messages sent to one actor and not yet handled (the one being handled included)."""
        with self._lock:
            return self._counts.get(actor_id, 0)

    def in_flight(self) -> int:
        with self._lock:
            return self._total

    def in_flight_by_receiver(self) -> dict[int, int]:
        """Messages in flight per tracker id (an actor's, or a pool's outbox or batch): a diagnosis."""
        with self._lock:
            return {key: count for key, count in self._counts.items() if count > 0}

    def wait_idle(self, timeout: float) -> bool:
        """Block until nothing is in flight; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._total == 0, timeout)

    def record_error(self) -> None:
        with self._lock:
            self.errors += 1


class SimulatedTracker(Tracker):
    """The ``Tracker`` of a simulated core: the same counts, kept without locks, since every actor of
    the core runs on the simulation's one thread (``Simulation`` refuses any other)."""

    def sent(self, actor_id: int) -> None:
        counts = self._counts
        counts[actor_id] = counts.get(actor_id, 0) + 1
        self._total += 1
        self.sent_total += 1

    def done(self, actor_id: int, messages: int = 1) -> None:
        counts = self._counts
        count = counts.get(actor_id, 0)
        if count <= 0:
            return
        messages = min(messages, count)
        counts[actor_id] = count - messages
        self._total -= messages
