"""YuniKorn's Prometheus metrics for one core, fed by the core's own events (never by polling).

Names, types and labels follow yunikorn-core's ``pkg/metrics`` (scheduler.go, queue.go); per-queue
metrics carry a ``partition`` label (the core's full name, ``[rm1]default``) so that two RMs' ``root.a``
do not collide. Every core has its own registry: many cores can live in one process.

The actors call in from their own threads: what the core delivers to an RM (one call per delivery, not
per allocation), a queue's usage once per burst, an application's state changes, node lifecycle and
the scheduler's batch timing. Each call is a few dictionary lookups and counter additions.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from korral.server.events import EventLog
from korral.server.history import MetricsHistory

# YuniKorn's Go client emits no ``*_created`` series: neither does korral (process-wide switch of
# prometheus_client, set before any metric of a core is made)
disable_created_metrics()

NAMESPACE = "yunikorn"
# yunikorn-core: prometheus.ExponentialBuckets(0.0001, 10, 6); YuniKorn observes seconds in this
# "milliseconds" histogram, and so does korral, so that dashboards built for YuniKorn read the same.
LATENCY_BUCKETS = (0.0001, 0.001, 0.01, 0.1, 1.0, 10.0)
# the labels of the queue metrics: YuniKorn's (its queue is a constant label) and the partition
QUEUE_APP_LABELS = ("partition", "queue", "state")
QUEUE_RESOURCE_LABELS = ("partition", "queue", "state", "resource")


class CoreMetrics:
    """The ``yunikorn_*`` metrics of one core and the log of events it sent to RMs."""

    def __init__(self, event_capacity: int = 100_000) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.events = EventLog(event_capacity)
        self._lock = threading.Lock()
        registry = self.registry
        self.container_allocation = Counter(
            "container_allocation_attempt",
            "Total number of attempts to allocate containers. State of the attempt includes "
            "`allocated`, `rejected`, `error`, `released`",
            ["state"],
            namespace=NAMESPACE,
            subsystem="scheduler",
            registry=registry,
        )
        self.application_submission = Counter(
            "application_submission",
            "Total number of application submissions. State of the attempt includes `accepted` and "
            "`rejected`.",
            ["result"],
            namespace=NAMESPACE,
            subsystem="scheduler",
            registry=registry,
        )
        self.application = Gauge(
            "application_total",
            "Total number of applications. State of the application includes `running`, `resuming`, "
            "`failing`, `completing`, `completed` and `failed`.",
            ["state"],
            namespace=NAMESPACE,
            subsystem="scheduler",
            registry=registry,
        )
        self.node = Gauge(
            "node",
            "Total number of nodes. State of the node includes `active`, `draining`, `decommissioned` "
            "and `failed`.",
            ["state"],
            namespace=NAMESPACE,
            subsystem="scheduler",
            registry=registry,
        )
        self.scheduling_latency = Histogram(
            "scheduling_latency_milliseconds",
            "Latency of the main scheduling routine, in milliseconds.",
            namespace=NAMESPACE,
            subsystem="scheduler",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.queue_app = Gauge(
            "queue_app",
            "Queue application metrics. State of the application includes `new`, `accepted`, `rejected`, "
            "`running`, `failing`, `failed`, `resuming`, `completing`, `completed`.",
            QUEUE_APP_LABELS,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.queue_resource = Gauge(
            "queue_resource",
            "Queue resource metrics. State of the resource includes `guaranteed`, `max`, `allocated`, "
            "`pending`, `preempting`.",
            QUEUE_RESOURCE_LABELS,
            namespace=NAMESPACE,
            registry=registry,
        )
        # the children used on the hot paths, resolved once
        self._allocated = self.container_allocation.labels("allocated")
        self._rejected = self.container_allocation.labels("rejected")
        self._released = self.container_allocation.labels("released")
        self.container_allocation.labels("error")
        self._accepted_apps = self.application_submission.labels("accepted")
        self._rejected_apps = self.application_submission.labels("rejected")
        # (partition, queue, state) -> resource name -> [its series, the value last set]: a resource
        # that drops to zero is published as 0, as YuniKorn's UpdateQueueResourceMetrics does
        self._published: dict[tuple[str, str, str], dict[str, list[Any]]] = {}
        # applications the RMs were told were rejected, newest last: (rm_id, application id, reason)
        self.rejected_applications: list[tuple[str, str, str]] = []
        self.rejected_capacity = 10_000
        # YuniKorn's internal metrics history (/ws/v1/history/*): started with the core
        self.history: MetricsHistory | None = None

    # ---- what the core delivers to an RM (the dispatcher, once per delivery) ------------------------

    def delivered(self, rm_id: str, method: str, argument: Any) -> None:
        if method == "update_allocation":
            if argument.new:
                self._allocated.inc(len(argument.new))
            if argument.rejected:
                self._rejected.inc(len(argument.rejected))
            if argument.released:
                self._released.inc(len(argument.released))
        elif method == "update_application":
            if argument.accepted:
                self._accepted_apps.inc(len(argument.accepted))
            if argument.rejected:
                self._rejected_apps.inc(len(argument.rejected))
                with self._lock:
                    self.rejected_applications.extend(
                        (rm_id, r.application_id, r.reason) for r in argument.rejected
                    )
                    overflow = len(self.rejected_applications) - self.rejected_capacity
                    if overflow > 0:
                        del self.rejected_applications[:overflow]
        elif method == "send_event":
            self.events.extend(argument)

    # ---- applications (their actors, on each state change) ---------------------------------------

    def app_states(
        self, partition: str, queue: str, previous: str | None, states: Iterable[str]
    ) -> str | None:
        """An application went from ``previous`` through ``states``; returns its last state."""
        for state in states:
            if previous is not None:
                old = previous.lower()
                self.application.labels(old).dec()
                self.queue_app.labels(partition, queue, old).dec()
            new = state.lower()
            self.application.labels(new).inc()
            self.queue_app.labels(partition, queue, new).inc()
            previous = state
        return previous

    # ---- nodes (the partition, on each lifecycle change) -----------------------------------------

    def node_states(self, deltas: Mapping[str, int]) -> None:
        """Several nodes' changes at once: the net change of each state's count."""
        for state, delta in deltas.items():
            self.node.labels(state).inc(delta)

    def node_state(self, previous: str | None, state: str | None) -> None:
        if previous is not None:
            self.node.labels(previous).dec()
        if state is not None:
            self.node.labels(state).inc()

    # ---- queues -----------------------------------------------------------------------------------

    def queue_resources(self, partition: str, queue: str, state: str, resource: Mapping[str, int]) -> None:
        # A queue publishes its usage once per burst: each series' child and last value are kept, and
        # only a changed value is set (``labels()`` builds and looks up the series under a lock, ~5 µs).
        key = (partition, queue, state)
        known = self._published.get(key)
        if known is None:
            known = self._published[key] = {}
        for name, value in resource.items():
            series = known.get(name)
            if series is None:
                child = self.queue_resource.labels(partition, queue, state, name)
                known[name] = [child, value]
                child.set(value)
            elif series[1] != value:
                series[1] = value
                series[0].set(value)
        for name, series in known.items():
            if name not in resource and series[1] != 0:
                series[1] = 0
                series[0].set(0)

    def forget_queues(self, partition: str, paths: Iterable[str], *, with_apps: bool = False) -> None:
        """Queues that are gone (removed, or their partition stopped) leave no series behind;
        ``with_apps``: their applications went with them (a stopped partition), and leave the
        scheduler-wide application counts too."""
        gone = set(paths)
        if with_apps:
            for family in self.queue_app.collect():
                for series in family.samples:
                    if series.labels["partition"] == partition and series.labels["queue"] in gone:
                        self.application.labels(series.labels["state"]).dec(series.value)
        for metric, names in (
            (self.queue_resource, QUEUE_RESOURCE_LABELS),
            (self.queue_app, QUEUE_APP_LABELS),
        ):
            for family in metric.collect():
                for series in family.samples:
                    if series.labels["partition"] == partition and series.labels["queue"] in gone:
                        with contextlib.suppress(KeyError):
                            metric.remove(*(series.labels[name] for name in names))
        for key in [key for key in self._published if key[0] == partition and key[1] in gone]:
            self._published.pop(key, None)

    def queue_usage(
        self, partition: str, queue: str, allocated: Mapping[str, int], pending: Mapping[str, int]
    ) -> None:
        self.queue_resources(partition, queue, "allocated", allocated)
        self.queue_resources(partition, queue, "pending", pending)

    # ---- the scheduler (once per batch of cycles) -------------------------------------------------

    def scheduled(self, seconds: float) -> None:
        self.scheduling_latency.observe(seconds)

    # ---- the internal metrics history ------------------------------------------------------------

    def totals(self) -> tuple[int, int]:
        """(running applications, running containers) as YuniKorn's history collector reads them."""
        running = int(self.value("yunikorn_scheduler_application_total", {"state": "running"}))
        attempts = "yunikorn_scheduler_container_allocation_attempt_total"
        containers = int(
            self.value(attempts, {"state": "allocated"}) - self.value(attempts, {"state": "released"})
        )
        return running, containers

    def start_history(self, wall_clock_ns: Callable[[], int], **options: Any) -> MetricsHistory:
        """Sample ``totals()`` into a bounded ring on a period (options: size, period)."""
        if self.history is None:
            self.history = MetricsHistory(self.totals, wall_clock_ns, **options)
            self.history.start()
        return self.history

    def close(self) -> None:
        if self.history is not None:
            self.history.stop()

    # ---- reading ----------------------------------------------------------------------------------

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def value(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """A sample's current value (0 if never set): for the health check."""
        found = self.registry.get_sample_value(name, dict(labels or {}))
        return found or 0.0
