"""Runs a workload through korral (actors, ``korral.Core``) and through the sequential reference.

korral is timed as YuniKorn's benchmark times itself: from just before the asks are submitted until the
RM callback has received the last allocation. The reference scheduler is timed over the same span of
work, in the same process: taking the asks in, scheduling cycles until nothing more fits, then its
allocations converted for the RM as the core converts them and handed to the same kind of RM callback.
The gang and preemption workloads, whose RMs answer the core, run in gang.py and preemption.py.
"""

from __future__ import annotations

import gc
import resource
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import attrs

import korral
from korral import si
from korral.callback import ResourceManagerCallback
from korral.harness.benchmark import honesty
from korral.harness.benchmark.workloads import PreemptionWorkload, Workload, submit_all, yunikorn
from korral.harness.reference import ReferenceScheduler

Progress = Callable[[int, int], None]


@attrs.frozen(kw_only=True)
class KorralResult:
    allocations: int
    seconds: float
    allocations_per_second: float
    latency_ms_p50: float
    latency_ms_p99: float
    messages_per_allocation: float
    node_registrations_per_second: float
    peak_rss_mb: float
    # CPU µs per allocation by stage (see STAGES): where an allocation's cost goes
    stage_us: dict[str, float] = attrs.field(factory=dict)
    # the asks still pending when the core went idle, by why they wait (honesty.unallocated)
    unallocated: dict[str, int] = attrs.field(factory=dict)


# Handlers by the stage of an allocation's path they belong to. The application's flush (FlushOut)
# sends the confirmed allocations on, converted for the RM, so it counts in confirmation.
STAGES: dict[str, tuple[str, ...]] = {
    "intake": ("Route", "RouteAllocationRequest", "AddAsks", "ViewOps"),
    "decision": ("RunCycle",),
    "confirmation": ("Placed", "FlushOut", "Replace"),
    "delivery": ("Deliver",),
}


# what the scheduler's thread handles besides its batches of cycles
SCHEDULER_HANDLERS = (
    "ViewOps",
    "NodeAdded",
    "NodesAdded",
    "NodeChanged",
    "AppAdded",
    "AppGone",
    "Tick",
)


def _scheduler_cpu_seconds() -> float | None:
    """CPU seconds used so far by the scheduler actors' threads (None where the OS cannot say)."""
    total = 0.0
    try:
        for thread in threading.enumerate():
            if thread.name.startswith("korral-schedulers") and thread.ident is not None:
                total += time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (AttributeError, OSError):
        return None
    return total


def stage_costs(
    handler_seconds: dict[str, float],
    submit_seconds: float,
    process_seconds: float,
    allocations: int,
    scheduler_seconds: float | None = None,
) -> dict[str, float]:
    """µs per allocation by stage: handlers' CPU time, the caller's own time submitting asks (intake),
    and what is left of the process's CPU time: mailboxes, thread hand-offs, the collector.

    A batch of cycles may span a collection pass or a switch of the GIL's holder; when the scheduler
    thread's own CPU time is known, the decision is that time less its other handlers'."""
    per = 1e6 / allocations
    seconds = dict(handler_seconds)
    if scheduler_seconds is not None:
        others = sum(seconds.get(name, 0.0) for name in SCHEDULER_HANDLERS)
        seconds["RunCycle"] = max(0.0, scheduler_seconds - others)
    stages = {stage: sum(seconds.get(name, 0.0) for name in names) * per for stage, names in STAGES.items()}
    stages["intake"] += submit_seconds * per
    named = {name for names in STAGES.values() for name in names}
    stages["other handlers"] = sum(v for k, v in seconds.items() if k not in named) * per
    stages["plumbing and gc"] = max(0.0, process_seconds * per - sum(stages.values()))
    stages["total"] = process_seconds * per
    return {stage: round(value, 2) for stage, value in stages.items()}


@attrs.frozen(kw_only=True)
class ReferenceResult:
    allocations: int
    seconds: float
    allocations_per_second: float
    # the cycles alone, timed from when the asks are in (YuniKorn's BenchmarkScheduling starts its
    # clock once the asks are submitted; for a synchronous scheduler that is once they are taken in,
    # including the collector's pass over them)
    scheduling_seconds: float = 0.0
    scheduling_allocations_per_second: float = 0.0
    # of ``seconds``, the allocations converted and handed to the RM callback (korral's clock has the
    # same work: its applications convert what they confirm, its RM callback records the arrivals)
    delivery_seconds: float = 0.0

    @property
    def undelivered_allocations_per_second(self) -> float:
        """The rate without the delivery to the RM: what this bench measured before 27 November 2026,
        kept so that ratios can be compared with the earlier figures."""
        seconds = self.seconds - self.delivery_seconds
        return self.allocations / seconds if seconds > 0 else 0.0


class BenchRM(ResourceManagerCallback):
    """Records when each allocation arrived; no predicates (the core then skips the call).

    It runs inside the clock, so it keeps the keys in one list and a time per response (a response's
    allocations arrive together), not a tuple per allocation: the recorder's own cost stays out of the
    figures (0.14 -> ~0.04 µs an allocation)."""

    def __init__(self, expected_nodes: int) -> None:
        self.lock = threading.Lock()
        self._keys: list[str] = []
        # (how many keys had arrived with this response, when it arrived), one per response
        self._responses: list[tuple[int, float]] = []
        self.accepted_nodes = 0
        self.expected_nodes = expected_nodes
        self.nodes_done = threading.Event()
        self.target = 0
        self.done = threading.Event()
        self.rejected = 0

    def record(self, keys: Iterable[str], now: float) -> None:
        """Allocations arrived at ``now`` (a response without any notes nothing); sets ``done`` at the
        target (the caller holds the lock)."""
        arrived = self._keys
        before = len(arrived)
        arrived.extend(keys)
        if len(arrived) > before:
            self._responses.append((len(arrived), now))
        if self.target and len(arrived) >= self.target:
            self.done.set()

    @property
    def arrived(self) -> int:
        """How many allocations arrived so far."""
        return len(self._keys)

    @property
    def last_arrival(self) -> float:
        """When the latest allocation so far arrived (0.0 before any)."""
        return max((now for _, now in list(self._responses)), default=0.0)

    @property
    def arrivals(self) -> list[tuple[str, float]]:
        """(allocation key, when it arrived) of each allocation so far, in order (built when read).

        Needs no lock (callers may hold it): ``record`` adds a response's keys before its entry, so
        every entry copied here has its keys in place."""
        responses = list(self._responses)
        keys = self._keys
        pairs: list[tuple[str, float]] = []
        begin = 0
        for end, now in responses:
            pairs.extend((key, now) for key in keys[begin:end])
            begin = end
        return pairs

    def update_allocation(self, response: si.AllocationResponse) -> None:
        now = time.perf_counter()
        with self.lock:
            self.record([allocation.allocation_key for allocation in response.new], now)
            self.rejected += len(response.rejected)

    def update_node(self, response: si.NodeResponse) -> None:
        with self.lock:
            self.accepted_nodes += len(response.accepted) + len(response.rejected)
            if self.accepted_nodes >= self.expected_nodes:
                self.nodes_done.set()


class AnsweringRM(BenchRM):
    """A bench RM that answers the core itself (confirms the releases it is told of, as a shim does), so
    it holds the core and its RM id; ``set_up`` registers it, its nodes and its applications."""

    def __init__(self, expected_nodes: int) -> None:
        super().__init__(expected_nodes)
        self.core: korral.Core | None = None
        self.rm_id = ""

    def set_up(self, core: korral.Core, workload: Workload | PreemptionWorkload, timeout: float) -> None:
        self.core = core
        self.rm_id = workload.rm_id
        core.register_resource_manager(
            si.RegisterResourceManagerRequest(rm_id=workload.rm_id, config=workload.config), self
        )
        core.update_node(workload.nodes)
        if not self.nodes_done.wait(timeout):
            raise TimeoutError("nodes were not registered in time")
        core.update_application(workload.applications)
        core.wait_until_idle(timeout)


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


# korral bench's cores, as a service runs one: the process is the bench's, so the core tunes the cyclic
# collector for its many long-lived objects (korral.actors.gc_tuning; off by default in the library,
# whose host process is not its own). bench/README.md says what it gains.
CORE_SETTINGS: dict[str, Any] = {"tune_gc": True}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_korral(workload: Workload, progress: Progress | None = None, timeout: float = 600.0) -> KorralResult:
    """Run ``workload`` through a core. The run lets go of each request once submitted, as an RM does:
    a caller that holds no other reference to the workload (``korral bench``) does not keep its SI
    objects alive, and counted, in the core's peak RSS."""
    rm = BenchRM(workload.node_count)
    node_count, ask_count = workload.node_count, workload.asks
    waves = list(workload.waves)
    gc.collect()
    with korral.start(**CORE_SETTINGS) as core:
        core.register_resource_manager(
            si.RegisterResourceManagerRequest(rm_id=workload.rm_id, config=workload.config), rm
        )
        started = time.perf_counter()
        core.update_node(workload.nodes)
        if not rm.nodes_done.wait(timeout):
            raise TimeoutError("nodes were not registered in time")
        node_rate = node_count / (time.perf_counter() - started)
        core.update_application(workload.applications)
        del workload
        core.wait_until_idle(timeout)
        rm.target = ask_count
        # which request each ask came in, known before the clock starts: inside it, one time per request
        request_of = request_index(request for wave in waves for request in wave.requests)
        submitted: list[float] = []
        messages_before = core.tracker.sent_total
        core.tracker.timing.start()
        submit_seconds = 0.0
        process_started = time.process_time()
        scheduler_started = _scheduler_cpu_seconds()
        start = time.perf_counter()
        waves.reverse()
        while waves:
            wave = waves.pop()
            delay = start + wave.at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            now = time.perf_counter()
            requests = list(wave.requests)
            del wave
            requests.reverse()
            while requests:
                request = requests.pop()
                submitted.append(now)
                submit_started = time.thread_time()
                core.update_allocation(request)
                submit_seconds += time.thread_time() - submit_started
                del request
            if progress is not None:
                progress(rm.arrived, ask_count)
        # Everything may fit (yunikorn shape): wait for the last one; else until the core is idle.
        while not rm.done.wait(0.25):
            if progress is not None:
                progress(rm.arrived, ask_count)
            if core.tracker.in_flight() == 0:
                core.wait_until_idle(timeout)
                break
        core.wait_until_idle(timeout)
        process_seconds = time.process_time() - process_started
        scheduler_ended = _scheduler_cpu_seconds()
        scheduler_seconds = (
            scheduler_ended - scheduler_started
            if scheduler_started is not None and scheduler_ended is not None
            else None
        )
        messages = core.tracker.sent_total - messages_before
        handler_seconds = core.tracker.timing.stop()
        errors = core.tracker.errors
        left = ask_count - rm.arrived
        waiting = honesty.unallocated(core) if left > 0 else {}
    if errors:
        raise RuntimeError(f"korral logged {errors} handler errors during the benchmark")
    arrivals = rm.arrivals
    if not arrivals:
        raise RuntimeError("korral made no allocation")
    seconds = rm.last_arrival - start
    latencies = latencies_ms(arrivals, request_of, submitted)
    return KorralResult(
        allocations=len(arrivals),
        seconds=seconds,
        allocations_per_second=len(arrivals) / seconds,
        latency_ms_p50=percentile(latencies, 0.50),
        latency_ms_p99=percentile(latencies, 0.99),
        messages_per_allocation=messages / len(arrivals),
        node_registrations_per_second=node_rate,
        peak_rss_mb=peak_rss_mb(),
        stage_us=stage_costs(
            handler_seconds, submit_seconds, process_seconds, len(arrivals), scheduler_seconds
        ),
        unallocated=waiting,
    )


def request_index(requests: Iterable[si.AllocationRequest]) -> dict[str, int]:
    """Which request, by its place in ``requests``, each ask comes in: noted before a clock starts, so
    that inside it one time per request sent is enough (``latencies_ms``)."""
    return {ask.allocation_key: index for index, request in enumerate(requests) for ask in request.asks}


def latencies_ms(
    arrivals: list[tuple[str, float]], request_of: dict[str, int], submitted: list[float]
) -> list[float]:
    """Each arrival's latency in ms: from when its ask's request was sent (``submitted``, one time per
    request in ``request_index``'s order) to when its allocation arrived."""
    return [(arrived - submitted[request_of[key]]) * 1000.0 for key, arrived in arrivals if key in request_of]


def warm_up(node_count: int, ask_count: int) -> None:
    """One korral run and one reference run of YuniKorn's shape (at most 1,000 nodes and 10,000 asks),
    untimed and discarded, before the runs that count.

    A fresh process's first run pays for first touches of memory, which on this project's VMs can cost
    the host's too: korral, which runs first at every point, made 40,600-49,700 allocations/s in its
    first run in 3 of 5 fresh processes against 56,000-61,000 in the runs after (~3,500 page faults
    against 400-700; bench/results/history-2026-11.md)."""
    run_korral(yunikorn(min(node_count, 1_000), min(ask_count, 10_000)))
    run_reference(yunikorn(min(node_count, 1_000), min(ask_count, 10_000)))


def reference_with_asks(workload: Workload) -> tuple[ReferenceScheduler, float]:
    """The sequential reference with the workload's nodes and applications, then its asks taken in;
    and when the clock started (after the set-up, before the asks), as korral's runs count it."""
    gc.collect()
    reference = ReferenceScheduler(workload.config, rm_id=workload.rm_id)
    reference.update_node(workload.nodes)
    reference.update_application(workload.applications)
    start = time.perf_counter()
    submit_all(workload.waves, reference.update_allocation)
    return reference, start


# The reference hands its allocations to the RM every this many cycles: korral's applications answer
# their RM in responses of 1,000-2,300 allocations each on YuniKorn's shape (10,000-100,000 asks), and
# the reference's delivery costs least per allocation in batches of 100-1,000 (bench/results/
# history-2026-11.md, the section on the reference that delivers to its RM).
REFERENCE_DELIVERY_BATCH = 1_000


def schedule_and_deliver(reference: ReferenceScheduler, rm: BenchRM) -> float:
    """Scheduling cycles until nothing more fits, each ``REFERENCE_DELIVERY_BATCH`` of allocations
    handed to ``rm`` as the SI response it receives; returns the seconds spent on the delivery."""
    delivery = 0.0
    while made := reference.schedule(REFERENCE_DELIVERY_BATCH):
        scheduled = time.perf_counter()
        rm.update_allocation(reference.allocation_response(made))
        delivery += time.perf_counter() - scheduled
    return delivery


def run_reference(workload: Workload) -> ReferenceResult:
    reference, start = reference_with_asks(workload)
    # The collector's first passes over the objects the asks brought in belong to taking them in:
    # run them here (counted in the total) rather than at random points of the scheduling clock.
    gc.collect()
    rm = BenchRM(workload.node_count)
    asks_in = time.perf_counter()
    delivery = schedule_and_deliver(reference, rm)
    end = time.perf_counter()
    seconds = end - start
    scheduling = end - asks_in
    return ReferenceResult(
        allocations=rm.arrived,
        seconds=seconds,
        allocations_per_second=rm.arrived / seconds if seconds else 0.0,
        scheduling_seconds=scheduling,
        scheduling_allocations_per_second=rm.arrived / scheduling if scheduling else 0.0,
        delivery_seconds=delivery,
    )


def _reference_fields(reference: ReferenceResult) -> dict[str, Any]:
    return {
        "allocations": reference.allocations,
        "seconds": round(reference.seconds, 4),
        "allocations_per_second": round(reference.allocations_per_second, 1),
        "scheduling_seconds": round(reference.scheduling_seconds, 4),
        "scheduling_only_allocations_per_second": round(reference.scheduling_allocations_per_second, 1),
        "delivery_seconds": round(reference.delivery_seconds, 4),
        "undelivered_allocations_per_second": round(reference.undelivered_allocations_per_second, 1),
    }


def reference_json(workload: Workload, reference: ReferenceResult) -> dict[str, Any]:
    """The JSON document of ``korral bench --reference-only``."""
    return {
        "workload": workload.name,
        "nodes": workload.node_count,
        "asks": workload.asks,
        "reference": _reference_fields(reference),
    }


def result_json(
    workload: Workload, korral_result: KorralResult, reference: ReferenceResult
) -> dict[str, Any]:
    """The JSON document of ``korral bench --json``."""
    ratio, reason = honesty.ratio_or_reason(
        workload,
        korral_result.allocations,
        korral_result.allocations_per_second,
        reference.allocations,
        reference.allocations_per_second,
    )
    # the same runs against the reference without its delivery to the RM (this bench's method before
    # 27 November 2026), for comparison with earlier figures: under the same honesty rules
    undelivered_ratio, _ = honesty.ratio_or_reason(
        workload,
        korral_result.allocations,
        korral_result.allocations_per_second,
        reference.allocations,
        reference.undelivered_allocations_per_second,
    )
    return {
        "workload": workload.name,
        "nodes": workload.node_count,
        "asks": workload.asks,
        "korral": {
            "allocations": korral_result.allocations,
            "seconds": round(korral_result.seconds, 4),
            "allocations_per_second": round(korral_result.allocations_per_second, 1),
            "latency_ms": {
                "p50": round(korral_result.latency_ms_p50, 2),
                "p99": round(korral_result.latency_ms_p99, 2),
            },
            "messages_per_allocation": round(korral_result.messages_per_allocation, 3),
            "node_registrations_per_second": round(korral_result.node_registrations_per_second, 1),
            "peak_rss_mb": round(korral_result.peak_rss_mb, 1),
            "cpu_us_per_allocation": korral_result.stage_us,
        },
        "reference": _reference_fields(reference),
        # only between runs that did the same work at the same pace; else null and why
        "ratio_to_reference": round(ratio, 3) if ratio is not None else None,
        "ratio_to_undelivered_reference": round(undelivered_ratio, 3)
        if undelivered_ratio is not None
        else None,
        "no_ratio_because": reason or None,
        "unallocated": honesty.describe(workload.asks, korral_result.allocations, korral_result.unallocated)
        or None,
    }
