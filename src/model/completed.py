"""The applications a partition keeps after they completed and left, for queries (YuniKorn's
``completedApplications``), bounded in time and in number.

YuniKorn keeps a completed, failed or rejected application until it expires, ``terminatedTimeout``
(3 days) after it ended. korral does the same, and also keeps at most ``max_kept`` of them: a
partition that completes applications faster than they expire would otherwise grow without bound.
The oldest go first either way.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

# YuniKorn's terminatedTimeout: a terminated application expires this long after it ended (seconds)
TERMINATED_TIMEOUT = 3 * 24 * 3600.0
# the most kept per partition; past it the oldest is dropped at once
MAX_KEPT = 10_000

Info = TypeVar("Info")


class CompletedApplications(Generic[Info]):
    """application id -> what it was when it ended, oldest first."""

    def __init__(self, *, timeout: float = TERMINATED_TIMEOUT, max_kept: int = MAX_KEPT) -> None:
        if max_kept < 1:
            raise ValueError(f"max_kept must be at least 1, got {max_kept}")
        self.timeout = timeout
        self.max_kept = max_kept
        self._kept: dict[str, tuple[float, Info]] = {}  # insertion order is the order they ended

    def add(self, application_id: str, info: Info, now: float) -> None:
        self._kept.pop(application_id, None)  # ended again (re-added meanwhile): now its newest
        self._kept[application_id] = (now, info)
        while len(self._kept) > self.max_kept:
            del self._kept[next(iter(self._kept))]

    def discard(self, application_id: str) -> None:
        """The id is live again (an application re-added under it): the ended one no longer shows."""
        self._kept.pop(application_id, None)

    def expire(self, now: float) -> list[str]:
        """Drop those that ended ``timeout`` or longer ago; return their ids, oldest first."""
        expired: list[str] = []
        for application_id, (ended, _) in self._kept.items():
            if now - ended < self.timeout:
                break
            expired.append(application_id)
        for application_id in expired:
            del self._kept[application_id]
        return expired

    def get(self, application_id: str) -> Info | None:
        found = self._kept.get(application_id)
        return None if found is None else found[1]

    def values(self) -> list[Info]:
        return [info for _, info in self._kept.values()]

    def __len__(self) -> int:
        return len(self._kept)

    def __iter__(self) -> Iterator[str]:
        return iter(self._kept)
