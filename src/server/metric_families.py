"""The metric families korral writes at scrape time from plain values the actors keep, and the names
and labels they share with ``korral.server.metrics`` (yunikorn-core's ``pkg/metrics``)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

if TYPE_CHECKING:
    from korral.server.metrics import CoreMetrics

NAMESPACE = "yunikorn"
# yunikorn-core be3bb487: prometheus.ExponentialBuckets(0.0001, 10, 8); YuniKorn observes seconds in
# these "milliseconds" histograms, and so does korral, so that dashboards built for YuniKorn read the same.
LATENCY_BUCKETS = (0.0001, 0.001, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)
# yunikorn-core's resourceUsageRangeBuckets: the range label of <resource>_node_usage_total
NODE_USAGE_RANGES = (
    "[0,10%]",
    "(10%,20%]",
    "(20%,30%]",
    "(30%,40%]",
    "(40%,50%]",
    "(50%,60%]",
    "(60%,70%]",
    "(70%,80%]",
    "(80%,90%]",
    "(90%,100%]",
)
TERMINAL_STATES = frozenset(("completed", "failed", "rejected"))  # queue_app_total's states
EVENT_STAGES = ("created", "channeled", "not_channeled", "processed", "stored", "not_stored", "collected")
# the labels of the queue metrics: YuniKorn's (its queue is a constant label) and the partition
QUEUE_APP_LABELS = ("partition", "queue", "state")
QUEUE_RESOURCE_LABELS = ("partition", "queue", "state", "resource")


def label_value(value: str) -> str:
    """A label value as the text format writes it: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class TerminalApps:
    """Writes ``yunikorn_queue_app_total`` from ``CoreMetrics.queue_app_total``."""

    def __init__(self, metrics: CoreMetrics) -> None:
        self._metrics = metrics

    def describe(self) -> list[Any]:
        return []  # no names claimed: the registry would refuse the gauge queue_app's family name

    def collect(self) -> Iterable[Any]:
        family = CounterMetricFamily(
            f"{NAMESPACE}_queue_app_total",
            "Total number of applications that reached a terminal state. State includes `completed`, "
            "`failed`, `rejected`.",
            labels=QUEUE_APP_LABELS,
        )
        with self._metrics._lock:
            counts = list(self._metrics.queue_app_total.items())
        for labels, value in counts:
            family.add_metric(list(labels), value)
        yield family


class QueueContainers:
    """Writes ``yunikorn_<queue>_queue_container{partition, state}``, one family per queue path's
    metric name. YuniKorn's Go client writes a counter under the name it was given, which has no
    ``_total``; prometheus_client adds one to every counter family it writes, so these are written
    as text by ``CoreMetrics.exposition``."""

    def __init__(self) -> None:
        # metric name of the queue path -> (partition, state) -> allocations made or released
        self.counts: dict[str, dict[tuple[str, str], int]] = {}
        self.lock = threading.Lock()

    def add(self, subsystem: str, partition: str, state: str, count: int) -> None:
        with self.lock:
            counts = self.counts.setdefault(subsystem, {})
            counts[partition, state] = counts.get((partition, state), 0) + count

    def forget(self, partition: str, subsystems: Iterable[str]) -> None:
        """A partition's series of these names leave; a family no partition counts in leaves too."""
        with self.lock:
            for subsystem in subsystems:
                counts = self.counts.get(subsystem)
                if counts is None:
                    continue
                for key in [key for key in counts if key[0] == partition]:
                    del counts[key]
                if not counts:
                    del self.counts[subsystem]

    def text(self) -> str:
        with self.lock:
            families = sorted(
                (subsystem, sorted(counts.items())) for subsystem, counts in self.counts.items()
            )
        lines = []
        for subsystem, counts in families:
            name = f"{NAMESPACE}_{subsystem}_queue_container"
            lines.append(
                f"# HELP {name} Queue container metrics. "
                "State of the attempt includes `allocated`, `released`.\n"
                f"# TYPE {name} counter\n"
            )
            for (partition, state), value in counts:
                lines.append(
                    f'{name}{{partition="{label_value(partition)}",state="{state}"}} {float(value)}\n'
                )
        return "".join(lines)


class QueueResources:
    """Writes ``yunikorn_queue_resource{partition, queue, state, resource}`` from the series each
    ``CoreMetrics.queue_resources`` call left: plain dictionaries on the publishing threads, read
    whole at scrape time (a ``Gauge`` child's look-up and lock on every batch cost a small batch ~5 µs
    per allocation)."""

    def __init__(self) -> None:
        # (partition, queue, state) -> resource name -> value, each entry replaced whole (never changed)
        self.series: dict[tuple[str, str, str], dict[str, int]] = {}

    def describe(self) -> list[Any]:
        return [self._family()]

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            f"{NAMESPACE}_queue_resource",
            "Queue resource metrics. State of the resource includes `guaranteed`, `max`, `allocated`, "
            "`pending`, `preempting`, `maxRunningApps`.",
            labels=QUEUE_RESOURCE_LABELS,
        )

    def collect(self) -> Iterable[Any]:
        family = self._family()
        for (partition, queue, state), values in self.series.copy().items():  # (one step: the GIL's)
            for name, value in values.items():
                family.add_metric([partition, queue, state, name], value)
        yield family


class NodeUsage:
    """Writes ``<resource>_node_usage_total{range}`` from the counts ``CoreMetrics.node_usage`` last
    computed: only resources some node has now, so a name whose nodes all left leaves no family."""

    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}  # metric name -> nodes in each range

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        for name, counts in sorted(self.counts.items()):
            family = GaugeMetricFamily(
                f"{NAMESPACE}_scheduler_{name}_node_usage_total",
                "Total resource usage of node, by resource name.",
                labels=["range"],
            )
            for label, value in zip(NODE_USAGE_RANGES, counts, strict=True):
                family.add_metric([label], value)
            yield family
