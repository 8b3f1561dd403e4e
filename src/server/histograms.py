"""A latency histogram fed a batch of observations at a time.

The scheduler times every node it tries (YuniKorn's ``trynode_latency`` and ``trynode_evaluation``):
two observations per allocation. prometheus-client's ``Histogram.observe`` takes its lock and walks
its buckets per value (13 % of a batch's CPU on YuniKorn's shape); a batch's values are counted here
under one lock and written as the same histogram family when scraped.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString


class BatchedHistogram:
    """A registry collector writing one unlabelled histogram family, ``name``, with ``buckets``'
    upper bounds (and +Inf), fed by ``observe_all``."""

    def __init__(self, name: str, documentation: str, buckets: Sequence[float]) -> None:
        self.name = name
        self.documentation = documentation
        self._bounds = list(buckets)
        self._lock = threading.Lock()
        self._counts = [0] * (len(self._bounds) + 1)  # the last: above every bound
        self._sum = 0.0

    def observe_all(self, values: Iterable[float]) -> None:
        bounds, place = self._bounds, bisect.bisect_left
        with self._lock:
            counts = self._counts
            total = 0.0
            for value in values:
                counts[place(bounds, value)] += 1  # a value equal to a bound is in its bucket (le)
                total += value
            self._sum += total

    def describe(self) -> list[Any]:
        return [HistogramMetricFamily(self.name, self.documentation, buckets=[("+Inf", 0)], sum_value=0)]

    def collect(self) -> Iterable[Any]:
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative, running = [], 0
        for bound, count in zip([*self._bounds, float("inf")], counts, strict=True):
            running += count
            cumulative.append((floatToGoString(bound), running))
        yield HistogramMetricFamily(self.name, self.documentation, buckets=cumulative, sum_value=total)
