"""A bounded log of the events the core sent to RMs, for ``/ws/v1/events/batch`` and ``/stream``.

Like YuniKorn's event ring buffer: every event gets the next id; the oldest fall off when it is full,
in count (YuniKorn's ring size) or in bytes (``MAX_EVENT_LOG_BYTES``: an event holds the IDs and keys a
client chose, and a key may be 64 MiB long). Listeners (the REST server's streams) are called with each
batch as it is logged.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

Listener = Callable[[list[tuple[int, Any]]], None]

MAX_EVENT_LOG_BYTES = 64 * 1024 * 1024
RECORD_OVERHEAD = 256  # an event's object and its fields besides the text, roughly, in bytes
_TEXT_FIELDS = ("object_id", "reference_id", "message", "reason", "group_id")


def record_bytes(record: Any) -> int:
    """What an event holds, estimated from its text (counted once per event even when shared)."""
    size = RECORD_OVERHEAD
    for field in _TEXT_FIELDS:
        size += len(getattr(record, field, ""))
    resource = getattr(record, "resource", None)
    if resource:
        size += sum(len(name) + 64 for name in resource)
    return size


class EventLog:
    def __init__(self, capacity: int, max_bytes: int = MAX_EVENT_LOG_BYTES) -> None:
        self._records: deque[tuple[int, Any, int]] = deque()
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._bytes = 0
        self._ids = itertools.count(0)
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []

    def extend(self, records: Iterable[Any]) -> None:
        with self._lock:
            batch = [(next(self._ids), record) for record in records]
            kept = self._records
            for event_id, record in batch:
                size = record_bytes(record)
                kept.append((event_id, record, size))
                self._bytes += size
            while kept and (len(kept) > self._capacity or self._bytes > self._max_bytes):
                self._bytes -= kept.popleft()[2]
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
            picked = [(e, r) for e, r, _ in itertools.islice(self._records, offset, offset + count)]
        return picked, lowest, highest

    def latest(self, count: int) -> list[tuple[int, Any]]:
        with self._lock:
            if count <= 0:
                return []
            return [(e, r) for e, r, _ in list(self._records)[-count:]]

    def held_bytes(self) -> int:
        """What the kept events hold, as ``record_bytes`` estimates it."""
        with self._lock:
            return self._bytes

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
