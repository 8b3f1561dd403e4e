"""Benchmark timing: CPU seconds spent in handlers per message type, while a benchmark asks for it.

While a benchmark measures handlers' CPU time (``HandlerTiming.start``), each thread times the first
TIMING_ALWAYS runs of each message type (a rare message may be the heaviest: a request of 50,000
asks), then one run in TIMING_SAMPLE, drawn at random (a fixed stride could fall in step with a
periodic mix of messages) and counted that many times. Reading a thread's CPU clock is a system call
(~1 µs, twice per run): timing every run cost 4-8 of ~40 µs per allocation at 10,000 nodes, where
each allocation is two messages more than at 1,000, and so bent the comparison it was there to show.
"""

from __future__ import annotations

import random
import threading

TIMING_ALWAYS = 64
TIMING_SAMPLE = 8
_sample = random.random


class _ThreadTiming(threading.local):
    """One thread's runs and seconds for the current round of timing."""

    round: int
    runs: dict[type, int]
    seconds: dict[str, float]

    def __init__(self) -> None:
        self.round = -1
        self.runs = {}
        self.seconds = {}


class HandlerTiming:
    """Off (``on`` False) unless a benchmark asks for per-stage costs. Each thread adds to its own
    dict, without the lock every sender of messages takes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.on = False
        self._threads = _ThreadTiming()
        self._round = 0
        self._dicts: list[dict[str, float]] = []

    def start(self) -> None:
        """Start timing handlers per message type (what ``stop`` returns)."""
        with self._lock:
            self._round += 1
            self._dicts = []
            self.on = True

    def stop(self) -> dict[str, float]:
        """Stop timing handlers: CPU seconds per message type since ``start``, every thread's."""
        with self._lock:
            self.on = False
            dicts, self._dicts = self._dicts, []
        total: dict[str, float] = {}
        for seconds in dicts:
            for message_type, value in list(seconds.items()):
                total[message_type] = total.get(message_type, 0.0) + value
        return total

    def _this_thread(self) -> _ThreadTiming:
        """This thread's counts and seconds for the current round of timing (fresh when it began)."""
        local = self._threads
        if local.round != self._round:
            local.round = self._round
            local.runs = {}
            local.seconds = {}
            with self._lock:
                self._dicts.append(local.seconds)
        return local

    def weight(self, kind: type) -> int:
        """How many runs this one stands for if it is to be timed (0: not timed; see TIMING_SAMPLE)."""
        runs = self._this_thread().runs
        count = runs.get(kind, 0) + 1
        runs[kind] = count
        if count <= TIMING_ALWAYS:
            return 1
        return TIMING_SAMPLE if _sample() < 1.0 / TIMING_SAMPLE else 0

    def handled(self, message_type: str, seconds: float) -> None:
        mine = self._this_thread().seconds
        mine[message_type] = mine.get(message_type, 0.0) + seconds
