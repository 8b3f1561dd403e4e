"""One timer thread for the whole core: periodic ticks and one-shot timeouts, delivered as tells."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from typing import Any

from korral.actors.base import Handle, Periodic, PeriodicEntry


class TimerService:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Handle, Any, float]] = []
        self._seq = itertools.count()
        self._wake = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="korral-timer", daemon=True)
        self._thread.start()

    def once(self, delay: float, target: Handle, message: Any) -> None:
        self._push(time.monotonic() + delay, target, message, 0.0)

    def every(self, interval: float, target: Handle, message: Any) -> None:
        """Tell ``message`` every ``interval`` seconds while the target lives.

        Ticks coalesce: while the last one is still queued (a busy or blocked target), the next is
        skipped instead of piling up in its mailbox.
        """
        self._push(time.monotonic() + interval, target, Periodic(message, PeriodicEntry()), interval)

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
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._wake.wait(timeout)
                if self._stopped:
                    return
                due, _, target, message, interval = heapq.heappop(self._heap)
            if interval > 0 and message.entry.queued:
                delivered = target.is_alive  # the last tick is still waiting: skip this one
            else:
                if interval > 0:
                    message.entry.queued = True
                delivered = target.tell(message) if target.is_alive else False
            if delivered and interval > 0:
                self._push(max(due + interval, time.monotonic()), target, message, interval)
