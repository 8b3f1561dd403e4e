"""The threads a core's actors run on: a fixed number, whatever configs and clients name.

Every actor but the Registrar and the RMProxy lives in an ``ActorPool`` (korral.actors.runtime): a
mailbox run queue that at most one thread serves at a time, so its actors handle one message at a
time, in order, and its outbox batches their sends. A partition's queue, application and node actors
share their partition's pool; a partition actor, a scheduler and an RM's callback dispatcher each have
a pool of their own. No pool owns a thread: a ready pool waits on the run queue of its tier's
``Workers``, and one of at most ``size`` threads takes it for a turn.

Four tiers, one per step of the rank order that may wait on the next: partitions, schedulers, owners
(queues, applications, nodes) and RM callbacks. An actor blocks only in an ask down the rank order
(a partition asking its scheduler or an owner) or in an RM's code (a scheduler in the RM's
``predicates``, a dispatcher in the RM's callbacks), so a blocked worker waits only for a lower tier's
workers or for the RM. Owners never block: their workers always make progress; so a partition's ask of
an owner is answered, and by the same induction every tier's are, at any tier size. Sizes only trade
latency: with ``size`` partitions of one tier busy at once, the next waits for a turn.

What a blocked worker costs: an RM whose callback does not return holds one callbacks worker; ``size``
such RMs hold them all and every RM's callbacks wait (gRPC RMs never block there: their callbacks hand
bytes to the server's event loop). The Registrar and the RMProxy keep a thread each: one per core, a
fixed cost, and the registrar waits on the RMProxy and on partitions.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Protocol

# threads per tier by default: korral.start(actor_threads=N), korral serve --actor-threads N
DEFAULT_ACTOR_THREADS = 4
TIERS = ("partitions", "schedulers", "owners", "callbacks")


class Served(Protocol):
    """What a tier's workers serve: an ``ActorPool``, one turn at a time."""

    def run_turn(self) -> None: ...


class Workers:
    """At most ``size`` threads taking ready pools off one run queue, each for a turn. Threads start
    as they are needed (a pool is waiting and none is idle) and stay until ``stop``."""

    def __init__(self, name: str, size: int) -> None:
        if size < 1:
            raise ValueError(f"a tier needs at least one thread, got {size}")
        self.name = name
        self.size = size
        self._queue: deque[Served] = deque()
        self._wake = threading.Condition(threading.Lock())
        self._threads: list[threading.Thread] = []
        self._idle = 0  # workers waiting for a pool
        self._stopped = False

    @property
    def threads(self) -> int:
        """Worker threads started so far (at most ``size``)."""
        return len(self._threads)

    def others_waiting(self) -> bool:
        """Whether a pool waits for a worker (a turn yields to it). Read without the lock: a hint."""
        return bool(self._queue)

    def submit(self, pool: Served) -> bool:
        """Queue a ready pool for a turn; False once stopped (nobody will serve it)."""
        with self._wake:
            if self._stopped:
                return False
            self._queue.append(pool)
            # a notified worker takes its pool off the queue only when it runs again: more pools
            # waiting than idle workers means a worker is missing
            if len(self._queue) > self._idle and len(self._threads) < self.size:
                name = f"korral-{self.name}" if self.size == 1 else f"korral-{self.name}-{len(self._threads)}"
                thread = threading.Thread(target=self._run, name=name, daemon=True)
                self._threads.append(thread)
                thread.start()
            else:
                self._wake.notify()
        return True

    def _run(self) -> None:
        queue = self._queue
        while True:
            with self._wake:
                while not queue:
                    if self._stopped:
                        return
                    self._idle += 1
                    self._wake.wait()
                    self._idle -= 1
                pool = queue.popleft()
            pool.run_turn()
            del pool  # not kept alive while the worker waits

    def stop(self, timeout: float) -> None:
        """Serve what is queued, then end every worker (waiting at most ``timeout`` for them: one may
        be inside an RM's callback)."""
        with self._wake:
            self._stopped = True
            self._wake.notify_all()
            threads = list(self._threads)
        deadline = time.monotonic() + timeout
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))


class ActorThreads:
    """A core's workers, one ``Workers`` per tier, each of at most ``size`` threads."""

    def __init__(self, size: int = DEFAULT_ACTOR_THREADS) -> None:
        if type(size) is not int or size < 1:
            raise ValueError(f"actor_threads must be a positive whole number, got {size!r}")
        self.size = size
        self.tiers = {tier: Workers(tier, size) for tier in TIERS}

    @property
    def bound(self) -> int:
        """The most threads the tiers run together."""
        return self.size * len(self.tiers)

    def started(self) -> int:
        return sum(workers.threads for workers in self.tiers.values())

    def stop(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for workers in self.tiers.values():
            workers.stop(max(0.0, deadline - time.monotonic()))
