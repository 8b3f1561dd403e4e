"""YuniKorn's internal metrics history (``/ws/v1/history/apps`` and ``/ws/v1/history/containers``).

As yunikorn-core's ``pkg/metrics/history``: every period the core's totals are sampled into a bounded
ring - the running applications (the ``application_total{state="running"}`` gauge) and the running
containers (allocated less released attempts) - each stamped with the core's wall clock in Unix
nanoseconds. The oldest record falls off when the ring is full. One sampler thread per core, sleeping
between samples; korral takes the first sample when the core starts (YuniKorn waits a period), so a
dashboard opened at once has a point to draw.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

# yunikorn-core: entrypoint's metricsHistorySize and the collector's one-minute ticker
HISTORY_SIZE = 1440
HISTORY_PERIOD = 60.0


class HistoryRecord(NamedTuple):
    timestamp_ns: int
    total_applications: int
    total_containers: int


class MetricsHistory:
    """A bounded ring of ``HistoryRecord``s, oldest first, and the thread that fills it."""

    def __init__(
        self,
        totals: Callable[[], tuple[int, int]],
        wall_clock_ns: Callable[[], int],
        *,
        size: int = HISTORY_SIZE,
        period: float = HISTORY_PERIOD,
    ) -> None:
        if size <= 0 or period <= 0:
            raise ValueError("the metrics history needs a positive size and period")
        self.size = size
        self.period = period
        self._totals = totals
        self._wall_clock_ns = wall_clock_ns
        self._records: deque[HistoryRecord] = deque(maxlen=size)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> HistoryRecord:
        """Store the totals as they are now (what each tick does)."""
        applications, containers = self._totals()
        record = HistoryRecord(self._wall_clock_ns(), applications, containers)
        with self._lock:
            self._records.append(record)
        return record

    def records(self) -> list[HistoryRecord]:
        with self._lock:
            return list(self._records)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="korral-metrics-history", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.period):
                return

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)
