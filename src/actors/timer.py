"""One timer thread for the whole core: periodic ticks and one-shot timeouts, delivered as tells."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from korral.actors.base import Handle, Periodic, PeriodicEntry


class TimerService:
    """Deadlines are read on ``clock`` (injectable: a test drives a fake clock and calls ``poke``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.now = clock
        self._heap: list[tuple[float, int, Handle, Any, float]] = []
        self._seq = itertools.count()
        self._wake = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="korral-timer", daemon=True)
        self._thread.start()

    def once(self, delay: float, target: Handle, message: Any) -> None:
        self._push(self.now() + delay, target, message, 0.0)

    def every(self, interval: float, target: Handle, message: Any) -> None:
        """Tell ``message`` every ``interval`` seconds while the target lives.

        Ticks coalesce: while the last one is still queued (a busy or blocked target), the next is
        skipped instead of piling up in its mailbox.
        """
        self._push(self.now() + interval, target, Periodic(message, PeriodicEntry()), interval)

    def poke(self) -> None:
        """The clock moved (a test's fake clock): tell what is due now before returning, so that a
        wait for idle right after covers it. Each entry due is told once, even a periodic one whose
        next tick is due too (the clock jumped past several): ticks coalesce as they do on time."""
        with self._wake:
            due = []
            while not self._stopped and self._heap and self._heap[0][0] <= self.now():
                due.append(heapq.heappop(self._heap))
            self._wake.notify()
        for entry in due:
            self._deliver(entry)

    def _push(self, due: float, target: Handle, message: Any, interval: float) -> None:
        with self._wake:
            heapq.heappush(self._heap, (due, next(self._seq), target, message, interval))
            self._wake.notify()

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._heap.clear()
            self._wake.notify()
        self._thread.join(timeout=2.0)

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._stopped and (not self._heap or self._heap[0][0] > self.now()):
                    timeout = self._heap[0][0] - self.now() if self._heap else None
                    self._wake.wait(timeout)
                if self._stopped:
                    return
                entry = heapq.heappop(self._heap)
            self._deliver(entry)

    def _deliver(self, entry: tuple[float, int, Handle, Any, float]) -> None:
        due, _, target, message, interval = entry
        if interval > 0 and message.entry.queued:
            delivered = target.is_alive  # the last tick is still waiting: skip this one
        else:
            if interval > 0:
                message.entry.queued = True
            delivered = target.tell(message) if target.is_alive else False
        if delivered and interval > 0:
            self._push(max(due + interval, self.now()), target, message, interval)
