"""A bounded log of the events the core sent to RMs, for ``/ws/v1/events/batch`` and ``/stream``.

Like YuniKorn's event ring buffer: every event gets the next id; the oldest fall off when it is full.
Listeners (the REST server's streams) are called with each batch as it is logged.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

Listener = Callable[[list[tuple[int, Any]]], None]


class EventLog:
    def __init__(self, capacity: int) -> None:
        self._records: deque[tuple[int, Any]] = deque(maxlen=capacity)
        self._ids = itertools.count(0)
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []

    def extend(self, records: Iterable[Any]) -> None:
        with self._lock:
            batch = [(next(self._ids), record) for record in records]
            self._records.extend(batch)
            listeners = list(self._listeners)
        for listener in listeners:
            listener(batch)

    def since(self, start: int, count: int) -> tuple[list[tuple[int, Any]], int, int]:
        """Up to ``count`` events from id ``start`` on (from the lowest kept if ``start`` is gone), and
        the lowest and highest ids kept (0, 0 when empty, as YuniKorn)."""
        with self._lock:
            if not self._records:
                return [], 0, 0
            lowest = self._records[0][0]
            highest = self._records[-1][0]
            offset = max(start, lowest) - lowest
            picked = list(itertools.islice(self._records, offset, offset + count))
        return picked, lowest, highest

    def latest(self, count: int) -> list[tuple[int, Any]]:
        with self._lock:
            return list(self._records)[-count:] if count > 0 else []

    def highest(self) -> int | None:
        """The id of the newest event kept; None when there is none."""
        with self._lock:
            return self._records[-1][0] if self._records else None

    def listen(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def unlisten(self, listener: Listener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def listeners(self) -> int:
        with self._lock:
            return len(self._listeners)
