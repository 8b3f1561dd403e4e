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
import functools
import math
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)

from korral.server.events import EventLog
from korral.server.histograms import BatchedHistogram
from korral.server.history import MetricsHistory
from korral.server.metric_families import (
    EVENT_STAGES,
    LATENCY_BUCKETS,
    NAMESPACE,
    NODE_USAGE_RANGES,
    QUEUE_APP_LABELS,
    TERMINAL_STATES,
    NodeUsage,
    QueueContainers,
    QueueResources,
    TerminalApps,
)

if TYPE_CHECKING:
    from korral.actors.event_channel import EventChannel

# YuniKorn's Go client emits no ``*_created`` series: neither does korral (process-wide switch of
# prometheus_client, set before any metric of a core is made)
disable_created_metrics()

# Queue paths already formatted: an application's actor formats its queue's path on every flush that
# placed or released (``queue_containers``), and the substitution costs ~2-8 µs, a small batch's in full.
# Bounded: past it, the least recently used name is formatted again when next asked.
METRIC_NAMES_KEPT = 4096


@functools.lru_cache(maxsize=METRIC_NAMES_KEPT)
def metric_name(name: str) -> str:
    """yunikorn-core's formatMetricName: every byte not allowed in a metric name becomes ``_``."""
    return re.sub(r"[^a-zA-Z0-9_:]", "_", name)


class CoreMetrics:
    """The ``yunikorn_*`` metrics of one core and the log of events it sent to RMs."""

    def __init__(self, event_capacity: int = 100_000) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.events = EventLog(event_capacity)
        self._lock = threading.Lock()
        registry = self.registry
        # YuniKorn registers on the Go client's default registry, which also serves the process's own
        # process_* series (CPU, resident memory, open files, start time): so does korral's
        ProcessCollector(registry=registry)
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
        self.scheduling_cycle = Histogram(
            "scheduling_cycle_milliseconds",
            "Time taken for a scheduling cycle, in seconds.",
            namespace=NAMESPACE,
            subsystem="scheduler",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        # yunikorn-core's label is "level" (queue or app): what it times is the sorting of a queue's
        # children or applications, despite the family's name; korral times its re-sorts of them
        self.sorting_latency = Histogram(
            "node_sorting_latency_milliseconds",
            "Latency of all nodes sorting, in seconds.",
            ["level"],
            namespace=NAMESPACE,
            subsystem="scheduler",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.try_node_latency = BatchedHistogram(
            f"{NAMESPACE}_scheduler_trynode_latency_milliseconds",
            "Latency of node condition checks for container allocations, such as placement "
            "constraints, in seconds.",
            LATENCY_BUCKETS,
        )
        registry.register(self.try_node_latency)
        self.try_node_evaluation = BatchedHistogram(
            f"{NAMESPACE}_scheduler_trynode_evaluation_milliseconds",
            "Time taken to evaluate nodes for a pod, in seconds.",
            LATENCY_BUCKETS,
        )
        registry.register(self.try_node_evaluation)
        self.try_preemption_latency = BatchedHistogram(
            f"{NAMESPACE}_scheduler_trypreemption_latency_milliseconds",
            "Latency of preemption condition checks for container allocations, in seconds.",
            LATENCY_BUCKETS,
        )
        registry.register(self.try_preemption_latency)
        # yunikorn_queue_app_total{partition, queue, state}: applications that reached a terminal state.
        # A counter whose family name is the gauge yunikorn_queue_app's: prometheus_client refuses
        # both in one registry, so it is written by a collector of its own (TerminalApps)
        self.queue_app_total: dict[tuple[str, str, str], int] = {}
        registry.register(TerminalApps(self))
        # yunikorn_event_total_<stage>: korral logs every event its event channel takes (those it
        # drops, full, are not_channeled: korral.actors.event_channel), so channeled = processed =
        # stored = collected. Go names these
        # counters without a _total suffix, which prometheus_client always adds: written by
        # exposition() itself
        self.event_stages = dict.fromkeys(EVENT_STAGES, 0)
        self.event_channel: EventChannel | None = None  # the core's, once it has started
        # set once a REST server serves this core: from then on the core makes events for every RM
        # (korral.model.events.Wanted), not only for RMs whose callback takes them
        self.events_read = False
        # korral setting log_events: False keeps events to the RMs that take them, served or not
        self.log_events = True
        # yunikorn_<queue>_queue_container{partition, state}, one family per queue path as
        # YuniKorn names it, made on first use; and <resource>_node_usage_total{range}, one per resource
        # some node has. Names that map to one metric name (root.a-b and root.a_b, gpu-x and gpu_x)
        # share its family: their counts are added up (docs/api.md, "Metrics")
        self._queue_containers = QueueContainers()
        self._node_usage = NodeUsage()
        registry.register(self._node_usage)
        # korral's own: 1 while a partition drains (a reload left it out; it goes once empty)
        self.partition_draining_gauge = Gauge(
            "korral_partition_draining",
            "1 while the partition drains: a configuration update left it out, it takes no new "
            "application and is removed once it holds none.",
            ["partition"],
            registry=registry,
        )
        # yunikorn_queue_resource{partition, queue, state, resource}: published once per batch of
        # cycles (allocated, pending, preempting) or per structure change, written at scrape time
        self._queue_resources = QueueResources()
        registry.register(self._queue_resources)
        # the children used on the hot paths, resolved once
        self._allocated = self.container_allocation.labels("allocated")
        self._rejected = self.container_allocation.labels("rejected")
        self._released = self.container_allocation.labels("released")
        self.container_allocation.labels("error")
        self._accepted_apps = self.application_submission.labels("accepted")
        self._rejected_apps = self.application_submission.labels("rejected")
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
            with self._lock:
                for stage in ("created", "channeled", "processed", "stored", "collected"):
                    self.event_stages[stage] += len(argument)

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
            if new in TERMINAL_STATES:
                key = (partition, queue, new)
                with self._lock:
                    self.queue_app_total[key] = self.queue_app_total.get(key, 0) + 1
            previous = state
        return previous

    def app_removed(self, partition: str, queue: str, previous: str | None) -> str | None:
        """The RM removed an application that had not finished: it leaves through Completing to
        Completed, as YuniKorn's removal of its allocations completes it, so that no count of a
        state it was in stays behind."""
        if previous is None or previous.lower() in TERMINAL_STATES or previous.lower() == "expired":
            return previous
        states = ["Completed"] if previous.lower() == "completing" else ["Completing", "Completed"]
        return self.app_states(partition, queue, previous, states)

    def queue_containers(self, partition: str, queue: str, allocated: int, released: int) -> None:
        """``yunikorn_<queue>_queue_container{state}``: a queue's allocations made and released
        (its applications' actors, once per burst)."""
        subsystem = metric_name(queue)
        if allocated:
            self._queue_containers.add(subsystem, partition, "allocated", allocated)
        if released:
            self._queue_containers.add(subsystem, partition, "released", released)

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
        """A queue's resource of one state, as a scrape then reads it: a resource that drops out is
        published once as 0, as YuniKorn's UpdateQueueResourceMetrics sets it, and its series goes
        at the next publication that still lacks it."""
        key = (partition, queue, state)
        series = self._queue_resources.series
        last = series.get(key)
        values = dict(resource)
        if last is None:  # a new key, under the lock forget_queues removes keys under (other threads)
            with self._lock:
                series[key] = values
            return
        if not last.keys() <= values.keys():
            for name, value in last.items():
                if value != 0 and name not in values:
                    values[name] = 0
        series[key] = values

    def partition_draining(self, partition: str, draining: bool) -> None:
        """The partition started draining (``True``), or became active again or went (``False``)."""
        if draining:
            self.partition_draining_gauge.labels(partition).set(1)
        else:
            with contextlib.suppress(KeyError):
                self.partition_draining_gauge.remove(partition)

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
        for family in self.queue_app.collect():
            for series in family.samples:
                if series.labels["partition"] == partition and series.labels["queue"] in gone:
                    with contextlib.suppress(KeyError):
                        self.queue_app.remove(*(series.labels[name] for name in QUEUE_APP_LABELS))
        resources = self._queue_resources.series
        with self._lock:  # other partitions' actors add keys meanwhile
            for key in [key for key in resources if key[0] == partition and key[1] in gone]:
                del resources[key]
            for key in [key for key in self.queue_app_total if key[0] == partition and key[1] in gone]:
                del self.queue_app_total[key]
        self._queue_containers.forget(partition, {metric_name(path) for path in gone})

    def queue_usage(
        self, partition: str, queue: str, allocated: Mapping[str, int], pending: Mapping[str, int]
    ) -> None:
        self.queue_resources(partition, queue, "allocated", allocated)
        self.queue_resources(partition, queue, "pending", pending)

    # ---- the scheduler (once per batch of cycles) -------------------------------------------------

    def observe_latencies(self, records: Iterable[tuple[str, float]], walks: Sequence[float] = ()) -> None:
        """Latencies the scheduling model timed during a batch of cycles, each (kind, seconds):
        "trynode" (a node tried for an ask: the RM's predicates on it, or without them the walk to the
        node that takes the ask), "trynode_evaluation" (every node walk for an ask, whatever its outcome),
        "trypreemption" (a preemption attempt), "sort_queue" / "sort_app" (a queue's children or
        applications re-sorted); ``walks``: seconds each both a trynode and a trynode_evaluation."""
        if walks:
            self.try_node_latency.observe_all(walks)
            self.try_node_evaluation.observe_all(walks)
        by_kind: dict[str, list[float]] = {}
        for kind, seconds in records:
            values = by_kind.get(kind)
            if values is None:
                by_kind[kind] = [seconds]
            else:
                values.append(seconds)
        for kind, values in by_kind.items():
            if kind == "trynode":
                self.try_node_latency.observe_all(values)
            elif kind == "trynode_evaluation":
                self.try_node_evaluation.observe_all(values)
            elif kind == "trypreemption":
                self.try_preemption_latency.observe_all(values)
            else:
                sorting = self.sorting_latency.labels("queue" if kind == "sort_queue" else "app")
                for seconds in values:
                    sorting.observe(seconds)

    def scheduled(self, seconds: float) -> None:
        """One batch of scheduling cycles of a partition: korral's cycle (YuniKorn times one try per
        partition as the latency and one pass over all partitions as the cycle: both are this)."""
        self.scheduling_latency.observe(seconds)
        self.scheduling_cycle.observe(seconds)

    # ---- node usage (computed when read: YuniKorn's monitor computes it every second) ---------------

    def node_usage(self, nodes: Iterable[tuple[Mapping[str, int], Mapping[str, int]]]) -> None:
        """``<resource>_node_usage_total{range}``: how many nodes (capacity, allocated) of every
        partition fall in each tenth of a resource's use (over-allocated counts as full); resources
        that share a metric name are added up."""
        counts: dict[str, list[int]] = {}
        names: dict[str, str] = {}  # resource name -> its metric name, each found once
        for capacity, allocated in nodes:
            for name, total in capacity.items():
                if total > 0:
                    used = min(allocated.get(name, 0) / total, 1.0)
                    index = max(math.ceil(used * 10) - 1, 0)
                    metric = names.get(name)
                    if metric is None:
                        metric = names[name] = metric_name(name)
                    counts.setdefault(metric, [0] * len(NODE_USAGE_RANGES))[index] += 1
        self._node_usage.counts = counts  # replaced whole: a scrape reads one set or the other

    # ---- the internal metrics history ------------------------------------------------------------

    def totals(self) -> tuple[int, int]:
        """(running applications, running containers) as YuniKorn's history collector reads them."""
        running = int(_sample(self.application, "yunikorn_scheduler_application_total", {"state": "running"}))
        attempts = "yunikorn_scheduler_container_allocation_attempt_total"
        allocation = self.container_allocation
        containers = int(
            _sample(allocation, attempts, {"state": "allocated"})
            - _sample(allocation, attempts, {"state": "released"})
        )
        return running, containers

    def start_history(
        self, wall_clock_ns: Callable[[], int], *, sampler: bool = True, **options: Any
    ) -> MetricsHistory:
        """Sample ``totals()`` into a bounded ring on a period (options: size, period); ``sampler``
        False: the first sample only, no thread (a simulated core's clock is virtual)."""
        if self.history is None:
            self.history = MetricsHistory(self.totals, wall_clock_ns, **options)
            if sampler:
                self.history.start()
            else:
                self.history.sample()
        return self.history

    def close(self) -> None:
        if self.history is not None:
            self.history.stop()

    # ---- reading ----------------------------------------------------------------------------------

    def exposition(self) -> bytes:
        with self._lock:
            stages = dict(self.event_stages)
        if self.event_channel is not None:  # made, then dropped with the event channel full
            dropped = self.event_channel.dropped
            stages["created"] += dropped
            stages["not_channeled"] += dropped
        events = "".join(
            f"# HELP {NAMESPACE}_event_total_{stage} total events {stage.replace('_', ' ')}\n"
            f"# TYPE {NAMESPACE}_event_total_{stage} counter\n"
            f"{NAMESPACE}_event_total_{stage} {float(count)}\n"
            for stage, count in stages.items()
        )
        return generate_latest(self.registry) + (self._queue_containers.text() + events).encode()

    def value(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """A sample's current value (0 if never set): for the health check."""
        found = self.registry.get_sample_value(name, dict(labels or {}))
        return found or 0.0


def _sample(metric: Counter | Gauge, name: str, labels: Mapping[str, str]) -> float:
    """A sample of one metric (0 if never set), collected from that metric alone: collecting the
    registry would read every other one, and the process's own series from /proc."""
    for family in metric.collect():
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0
