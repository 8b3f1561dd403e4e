"""Requests of each RM accepted by the core and not yet handled by its actors, bounded per RM.

An RM can send requests faster than its partitions and applications handle them; what it sent then
waits in their mailboxes, and nothing else bounds it. Each request entering the core gets a
``Receipt`` weighing its items (asks, releases, nodes, applications); the receipt travels with the
messages the request becomes (RMProxy -> partition -> application) and is let go when the last of them
has been handled and the application's burst has sent what they produced, or dropped with a stopped
actor's mailbox. Its ``__del__`` (CPython frees an object
when its last reference goes) takes its weight off the RM's count: no actor has to report anything.

Past the bound (the core's ``max_in_flight`` setting, ``MAX_IN_FLIGHT`` by default) for an RM, it
waits: an in-process caller of ``update_*`` blocks until the core has caught up, and the gRPC server
takes that RM's next request off its stream only then (HTTP/2 flow control holds the client back).
Nothing is refused or lost; other RMs are not affected.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any

from korral import si

MAX_IN_FLIGHT = 50_000  # items (asks, releases, nodes, applications) per RM
WAIT_STEP = 1.0  # an in-process caller re-checks that the core still runs this often while it waits


class Receipt:
    """Held by the messages a request became; its weight leaves the RM's count when they are gone."""

    __slots__ = ("_count", "_in_flight", "_rm_id", "_weight")

    def __init__(self, in_flight: InFlight, rm_id: str, count: list[int], weight: int) -> None:
        self._in_flight = in_flight
        self._rm_id = rm_id
        self._count = count
        self._weight = weight

    def __del__(self) -> None:
        self._in_flight.handled(self._rm_id, self._count, self._weight)

    def __reduce__(self) -> Any:
        # sent to another process (engine="ray"): it is handled here once sent; there it is nothing
        return (type(None), ())


def weight(request: Any) -> int:
    """How many items a request carries (at least one)."""
    if isinstance(request, si.AllocationRequest):
        releases = request.releases
        items = len(request.asks)
        if releases is not None:
            items += len(releases.allocations_to_release) + len(releases.allocation_asks_to_release)
        return max(1, items)
    if isinstance(request, si.NodeRequest):
        return max(1, len(request.nodes))
    if isinstance(request, si.ApplicationRequest):
        return max(1, len(request.new) + len(request.remove))
    return 1


class InFlight:
    """Items in flight per RM, and who waits for an RM to get back under the bound (any thread)."""

    def __init__(self, bound: int = MAX_IN_FLIGHT, *, blocking: bool = True) -> None:
        """blocking: whether an in-process caller waits (False for a simulated core: its one thread
        runs the actors that would let it go on)."""
        self.bound = bound
        self.blocking = blocking
        # RMs whose requests come through a server that waits itself (``when_below``) before taking
        # the next one: the gRPC server's, whose callback says ``flow_controlled``
        self._flow_controlled: set[str] = set()
        # reentrant, and each count a list changed in place: a receipt's __del__ may run on this very
        # thread in the middle of an update (the cyclic collector runs on allocations)
        self._lock = threading.RLock()
        self._below = threading.Condition(self._lock)
        self._counts: dict[str, list[int]] = {}
        self._waiters: dict[str, list[Future[None]]] = {}
        self._blocked = 0  # in-process callers waiting in wait_below

    def receipt(self, request: Any) -> Receipt:
        rm_id, items = request.rm_id, weight(request)
        with self._lock:
            count = self._counts.get(rm_id)
            if count is None:
                count = self._counts.setdefault(rm_id, [0])
            count[0] += items
        return Receipt(self, rm_id, count, items)

    def handled(self, rm_id: str, count: list[int], items: int) -> None:
        with self._lock:
            count[0] -= items
            if count[0] >= self.bound or self._counts.get(rm_id) is not count:
                return  # still at the bound, or a previous registration's count
            waiters = self._waiters.pop(rm_id, ())
            if self._blocked:
                self._below.notify_all()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def count(self, rm_id: str) -> int:
        with self._lock:
            return self._counts.get(rm_id, [0])[0]

    def when_below(self, rm_id: str) -> Future[None] | None:
        """None if the RM is under the bound; else a future done once it is (for an event loop)."""
        with self._lock:
            if self.count(rm_id) < self.bound:
                return None
            waiter: Future[None] = Future()
            self._waiters.setdefault(rm_id, []).append(waiter)
            return waiter

    def registered(self, rm_id: str, callback: object) -> None:
        """The RM (re)registered: it starts from nothing in flight (what its previous registration
        sent is counted apart, never against it), and whoever waited for it goes on."""
        with self._lock:
            if getattr(callback, "flow_controlled", False):
                self._flow_controlled.add(rm_id)
            else:
                self._flow_controlled.discard(rm_id)
            self._counts[rm_id] = [0]
            waiters = self._waiters.pop(rm_id, ())
            self._below.notify_all()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def wait_below(self, rm_id: str, running: Any) -> None:
        """An in-process caller's wait: block while the RM is at the bound and ``running()`` says the
        core still runs. Never on a thread running an event loop (a server's: it waits with
        ``when_below``), nor for an RM whose server waits itself."""
        if not self.blocking or self.count(rm_id) < self.bound or rm_id in self._flow_controlled:
            return
        try:
            asyncio.get_running_loop()
            return
        except RuntimeError:
            pass
        with self._below:
            self._blocked += 1
            try:
                while self.count(rm_id) >= self.bound and running():
                    self._below.wait(WAIT_STEP)
            finally:
                self._blocked -= 1
