"""Runs a workload through korral (actors, ``korral.Core``) and through the sequential reference.

korral is timed as YuniKorn's benchmark times itself: from just before the asks are submitted until the
RM callback has received the last allocation. The reference scheduler is timed over the same span of
work (taking the asks in, then scheduling cycles until nothing more fits), in the same process.
"""

from __future__ import annotations

import gc
import resource
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

import korral
from korral import si
from korral.callback import ResourceManagerCallback
from korral.harness.benchmark import honesty
from korral.harness.benchmark.workloads import PreemptionWorkload, Workload
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
    "confirmation": ("Place", "Placed", "FlushOut", "RolledBack", "Replace"),
    "delivery": ("Deliver",),
}


# what the scheduler's thread handles besides its batches of cycles
SCHEDULER_HANDLERS = (
    "ViewOps",
    "RolledBack",
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
            if thread.name.startswith("SchedulerActor-") and thread.ident is not None:
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


class BenchRM(ResourceManagerCallback):
    """Records when each allocation arrived; no predicates (the core then skips the call)."""

    def __init__(self, expected_nodes: int) -> None:
        self.lock = threading.Lock()
        self.arrivals: list[tuple[str, float]] = []
        self.accepted_nodes = 0
        self.expected_nodes = expected_nodes
        self.nodes_done = threading.Event()
        self.target = 0
        self.done = threading.Event()
        self.rejected = 0

    def update_allocation(self, response: si.AllocationResponse) -> None:
        now = time.perf_counter()
        with self.lock:
            self.arrivals.extend((allocation.allocation_key, now) for allocation in response.new)
            self.rejected += len(response.rejected)
            if self.target and len(self.arrivals) >= self.target:
                self.done.set()

    def update_node(self, response: si.NodeResponse) -> None:
        with self.lock:
            self.accepted_nodes += len(response.accepted) + len(response.rejected)
            if self.accepted_nodes >= self.expected_nodes:
                self.nodes_done.set()


def _percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


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
    with korral.start() as core:
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
        messages_before = core.tracker.sent_total
        submitted: dict[str, float] = {}
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
                for ask in request.asks:
                    submitted[ask.allocation_key] = now
                submit_started = time.thread_time()
                core.update_allocation(request)
                submit_seconds += time.thread_time() - submit_started
                del request
            if progress is not None:
                progress(len(rm.arrivals), ask_count)
        # Everything may fit (yunikorn shape): wait for the last one; else until the core is idle.
        while not rm.done.wait(0.25):
            if progress is not None:
                progress(len(rm.arrivals), ask_count)
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
        with rm.lock:
            left = ask_count - len(rm.arrivals)
        waiting = honesty.unallocated(core) if left > 0 else {}
    if errors:
        raise RuntimeError(f"korral logged {errors} handler errors during the benchmark")
    with rm.lock:
        arrivals = list(rm.arrivals)
    if not arrivals:
        raise RuntimeError("korral made no allocation")
    end = max(arrived for _, arrived in arrivals)
    seconds = end - start
    latencies = [(arrived - submitted[key]) * 1000.0 for key, arrived in arrivals if key in submitted]
    return KorralResult(
        allocations=len(arrivals),
        seconds=seconds,
        allocations_per_second=len(arrivals) / seconds,
        latency_ms_p50=_percentile(latencies, 0.50),
        latency_ms_p99=_percentile(latencies, 0.99),
        messages_per_allocation=messages / len(arrivals),
        node_registrations_per_second=node_rate,
        peak_rss_mb=peak_rss_mb(),
        stage_us=stage_costs(
            handler_seconds, submit_seconds, process_seconds, len(arrivals), scheduler_seconds
        ),
        unallocated=waiting,
    )


def run_reference(workload: Workload) -> ReferenceResult:
    gc.collect()
    reference = ReferenceScheduler(workload.config, rm_id=workload.rm_id)
    reference.update_node(workload.nodes)
    reference.update_application(workload.applications)
    start = time.perf_counter()
    for wave in workload.waves:
        for request in wave.requests:
            reference.update_allocation(request)
    # The collector's first passes over the objects the asks brought in belong to taking them in:
    # run them here (counted in the total) rather than at random points of the scheduling clock.
    gc.collect()
    asks_in = time.perf_counter()
    made = reference.schedule()
    end = time.perf_counter()
    seconds = end - start
    scheduling = end - asks_in
    return ReferenceResult(
        allocations=len(made),
        seconds=seconds,
        allocations_per_second=len(made) / seconds if seconds else 0.0,
        scheduling_seconds=scheduling,
        scheduling_allocations_per_second=len(made) / scheduling if scheduling else 0.0,
    )


def _reference_fields(reference: ReferenceResult) -> dict[str, Any]:
    return {
        "allocations": reference.allocations,
        "seconds": round(reference.seconds, 4),
        "allocations_per_second": round(reference.allocations_per_second, 1),
        "scheduling_seconds": round(reference.scheduling_seconds, 4),
        "scheduling_only_allocations_per_second": round(reference.scheduling_allocations_per_second, 1),
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
    """The JSON document of ``korral bench --json`` (issue #4's schema)."""
    ratio, reason = honesty.ratio_or_reason(
        workload,
        korral_result.allocations,
        korral_result.allocations_per_second,
        reference.allocations,
        reference.allocations_per_second,
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
        "no_ratio_because": reason or None,
        "unallocated": honesty.describe(workload.asks, korral_result.allocations, korral_result.unallocated)
        or None,
    }


# ---- gang: placeholders, then their replacement -------------------------------------------------------


@attrs.frozen(kw_only=True)
class GangResult:
    """Placeholders are plain allocations; replacements are timed from the real asks' submission to the
    arrival of the last real allocation, the RM confirming each placeholder's release on the way."""

    placeholders: int
    placeholder_seconds: float
    placeholders_per_second: float
    replacements: int
    replacement_seconds: float
    replacements_per_second: float

    @property
    def ratio(self) -> float:
        """Replacements per second over plain allocations per second (>= 0.5: a replacement costs at
        most twice a plain allocation)."""
        return (
            self.replacements_per_second / self.placeholders_per_second
            if self.placeholders_per_second
            else 0.0
        )


class GangBenchRM(BenchRM):
    """Counts placeholders and real allocations apart, and confirms every PLACEHOLDER_REPLACED release
    at once, as a shim does when it stops the placeholder's pod."""

    def __init__(self, expected_nodes: int) -> None:
        super().__init__(expected_nodes)
        self.core: korral.Core | None = None
        self.rm_id = ""
        self.real: list[float] = []
        self.real_target = 0
        self.real_done = threading.Event()

    def update_allocation(self, response: si.AllocationResponse) -> None:
        now = time.perf_counter()
        placeholders = [a for a in response.new if a.placeholder]
        real = len(response.new) - len(placeholders)
        replaced = [
            r for r in response.released if r.termination_type == si.TerminationType.PLACEHOLDER_REPLACED
        ]
        with self.lock:
            self.arrivals.extend((a.allocation_key, now) for a in placeholders)
            if self.target and len(self.arrivals) >= self.target:
                self.done.set()
            self.real.extend([now] * real)
            if self.real_target and len(self.real) >= self.real_target:
                self.real_done.set()
        if replaced and self.core is not None:
            self.core.update_allocation(
                si.AllocationRequest(
                    rm_id=self.rm_id,
                    releases=si.AllocationReleasesRequest(allocations_to_release=replaced),
                )
            )


def _set_up(core: korral.Core, rm: Any, workload: Workload | PreemptionWorkload, timeout: float) -> None:
    """Register ``rm`` (a bench RM that answers the core itself), its nodes and its applications."""
    rm.core = core
    rm.rm_id = workload.rm_id
    core.register_resource_manager(
        si.RegisterResourceManagerRequest(rm_id=workload.rm_id, config=workload.config), rm
    )
    core.update_node(workload.nodes)
    if not rm.nodes_done.wait(timeout):
        raise TimeoutError("nodes were not registered in time")
    core.update_application(workload.applications)
    core.wait_until_idle(timeout)


def run_gang_korral(workload: Workload, timeout: float = 600.0) -> GangResult:
    rm = GangBenchRM(workload.node_count)
    gc.collect()
    with korral.start() as core:
        _set_up(core, rm, workload, timeout)
        rm.target = workload.asks
        start = time.perf_counter()
        for wave in workload.waves:
            for request in wave.requests:
                core.update_allocation(request)
        if not rm.done.wait(timeout):
            raise TimeoutError("placeholders were not all allocated in time")
        placeholders_end = max(arrived for _, arrived in rm.arrivals)
        core.wait_until_idle(timeout)
        rm.real_target = sum(wave.count for wave in workload.replacement_waves)
        replacing = time.perf_counter()
        for wave in workload.replacement_waves:
            for request in wave.requests:
                core.update_allocation(request)
        if not rm.real_done.wait(timeout):
            raise TimeoutError("placeholders were not all replaced in time")
        core.wait_until_idle(timeout)
        errors = core.tracker.errors
    if errors:
        raise RuntimeError(f"korral logged {errors} handler errors during the benchmark")
    placeholder_seconds = placeholders_end - start
    replacement_seconds = max(rm.real) - replacing
    return GangResult(
        placeholders=len(rm.arrivals),
        placeholder_seconds=placeholder_seconds,
        placeholders_per_second=len(rm.arrivals) / placeholder_seconds,
        replacements=len(rm.real),
        replacement_seconds=replacement_seconds,
        replacements_per_second=len(rm.real) / replacement_seconds,
    )


def run_gang_reference(workload: Workload) -> GangResult:
    """The same two phases on the sequential reference; the RM's confirmations are sent back as soon
    as the scheduling that released the placeholders has returned."""
    gc.collect()
    reference = ReferenceScheduler(workload.config, rm_id=workload.rm_id)
    reference.update_node(workload.nodes)
    reference.update_application(workload.applications)
    start = time.perf_counter()
    for wave in workload.waves:
        for request in wave.requests:
            reference.update_allocation(request)
    placeholders = reference.schedule()
    placeholders_end = time.perf_counter()
    for wave in workload.replacement_waves:
        for request in wave.requests:
            reference.update_allocation(request)
    reference.schedule()
    released = reference.take_released().released
    response = reference.update_allocation(
        si.AllocationRequest(
            rm_id=workload.rm_id, releases=si.AllocationReleasesRequest(allocations_to_release=released)
        )
    )
    end = time.perf_counter()
    placeholder_seconds = placeholders_end - start
    replacement_seconds = end - placeholders_end
    return GangResult(
        placeholders=len(placeholders),
        placeholder_seconds=placeholder_seconds,
        placeholders_per_second=len(placeholders) / placeholder_seconds,
        replacements=len(response.new),
        replacement_seconds=replacement_seconds,
        replacements_per_second=len(response.new) / replacement_seconds,
    )


def gang_json(workload: Workload, korral_result: GangResult, reference: GangResult) -> dict[str, Any]:
    """The JSON document of ``korral bench --workload gang --json``."""

    def fields(result: GangResult) -> dict[str, Any]:
        return {
            "placeholders": result.placeholders,
            "placeholders_per_second": round(result.placeholders_per_second, 1),
            "replacements": result.replacements,
            "replacements_per_second": round(result.replacements_per_second, 1),
            "replacement_to_allocation_ratio": round(result.ratio, 3),
        }

    return {
        "workload": workload.name,
        "nodes": workload.node_count,
        "asks": workload.asks,
        "korral": fields(korral_result),
        "reference": fields(reference),
    }


# ---- preemption: urgent asks in a starved queue, victims from a full cluster ---------------------------


@attrs.frozen(kw_only=True)
class PreemptionBenchResult:
    """Latency from an urgent ask's ``preemption.delay`` expiring to its allocation (the RM confirming
    each victim at once), and victims chosen per second over the span in which they were chosen."""

    running: int  # allocations running before the urgent asks came
    fill_seconds: float
    preemptors: int
    preemptors_allocated: int
    victims: int
    victims_per_second: float
    latency_ms_p50: float
    latency_ms_p99: float
    latency_ms_max: float
    seconds: float  # first urgent ask submitted -> last one allocated
    # the burst: all its asks at once, after the paced ones
    burst: int = 0
    burst_allocated: int = 0
    burst_victims: int = 0
    burst_victims_per_second: float = 0.0
    burst_latency_ms_p50: float = 0.0
    burst_latency_ms_p99: float = 0.0
    burst_seconds: float = 0.0
    peak_rss_mb: float = 0.0


class PreemptionBenchRM(BenchRM):
    """Records fill allocations, victims and urgent allocations apart; confirms each victim's release
    at once, as a shim does when the preempted pod has stopped."""

    def __init__(self, expected_nodes: int) -> None:
        super().__init__(expected_nodes)
        self.core: korral.Core | None = None
        self.rm_id = ""
        self.urgent: dict[str, float] = {}
        self.urgent_target = 0
        self.urgent_done = threading.Event()
        self.victim_times: list[float] = []

    def update_allocation(self, response: si.AllocationResponse) -> None:
        now = time.perf_counter()
        victims = [
            r for r in response.released if r.termination_type == si.TerminationType.PREEMPTED_BY_SCHEDULER
        ]
        with self.lock:
            for allocation in response.new:
                if allocation.application_id == "urgent":
                    self.urgent[allocation.allocation_key] = now
                else:
                    self.arrivals.append((allocation.allocation_key, now))
            if self.target and len(self.arrivals) >= self.target:
                self.done.set()
            self.victim_times.extend([now] * len(victims))
            if self.urgent_target and len(self.urgent) >= self.urgent_target:
                self.urgent_done.set()
        if victims and self.core is not None:
            self.core.update_allocation(
                si.AllocationRequest(
                    rm_id=self.rm_id, releases=si.AllocationReleasesRequest(allocations_to_release=victims)
                )
            )


def _wait_with_progress(rm: PreemptionBenchRM, timeout: float, stall: float) -> bool:
    """Wait for every urgent allocation; give up after ``timeout``, or once nothing moved (no victim,
    no urgent allocation) for ``stall`` seconds: a core that does not preempt fails in seconds."""
    deadline = time.monotonic() + timeout
    seen, moved = (-1, -1), time.monotonic()
    while not rm.urgent_done.wait(0.25):
        now = time.monotonic()
        with rm.lock:
            progress = (len(rm.urgent), len(rm.victim_times))
        if progress != seen:
            seen, moved = progress, now
        if now >= deadline or now - moved >= stall:
            return False
    return True


def run_preemption_korral(
    workload: PreemptionWorkload,
    timeout: float = 600.0,
    progress: Callable[[str], None] | None = None,
    stall: float = 30.0,
) -> PreemptionBenchResult:
    rm = PreemptionBenchRM(workload.node_count)
    gc.collect()
    with korral.start() as core:
        _set_up(core, rm, workload, timeout)
        rm.target = workload.allocations
        fill_started = time.perf_counter()
        for request in workload.fill:
            core.update_allocation(request)
        if not rm.done.wait(timeout):
            raise TimeoutError(f"the cluster did not fill: {len(rm.arrivals):,} of {workload.allocations:,}")
        core.wait_until_idle(timeout)
        fill_seconds = time.perf_counter() - fill_started
        if progress is not None:
            progress(f"{workload.allocations:,} allocations running after {fill_seconds:.1f}s")
        latency = _preemption_phase(core, rm, workload, workload.preemptors, workload.rate, timeout, stall)
        if progress is not None:
            progress(f"{len(workload.preemptors):,} paced urgent asks allocated")
        burst = _preemption_phase(core, rm, workload, workload.burst, 0.0, timeout, stall)
        errors = core.tracker.errors
    if errors:
        raise RuntimeError(f"korral logged {errors} handler errors during the benchmark")
    return PreemptionBenchResult(
        running=workload.allocations,
        fill_seconds=fill_seconds,
        preemptors=len(workload.preemptors),
        preemptors_allocated=latency.allocated,
        victims=latency.victims,
        victims_per_second=latency.victims_per_second,
        latency_ms_p50=_percentile(latency.latencies, 0.50),
        latency_ms_p99=_percentile(latency.latencies, 0.99),
        latency_ms_max=max(latency.latencies, default=0.0),
        seconds=latency.seconds,
        burst=len(workload.burst),
        burst_allocated=burst.allocated,
        burst_victims=burst.victims,
        burst_victims_per_second=burst.victims_per_second,
        burst_latency_ms_p50=_percentile(burst.latencies, 0.50),
        burst_latency_ms_p99=_percentile(burst.latencies, 0.99),
        burst_seconds=burst.seconds,
        peak_rss_mb=peak_rss_mb(),
    )


@attrs.frozen(kw_only=True)
class _Phase:
    allocated: int
    victims: int
    victims_per_second: float
    latencies: list[float]
    seconds: float


def _preemption_phase(
    core: korral.Core,
    rm: PreemptionBenchRM,
    workload: PreemptionWorkload,
    asks: tuple[si.AllocationAsk, ...],
    rate: float,
    timeout: float,
    stall: float,
) -> _Phase:
    """Submit ``asks`` (at ``rate`` per second, or all at once when 0) and wait for all of them."""
    if not asks:
        return _Phase(allocated=0, victims=0, victims_per_second=0.0, latencies=[], seconds=0.0)
    with rm.lock:
        rm.urgent.clear()
        rm.victim_times.clear()
        rm.urgent_target = len(asks)
        rm.urgent_done.clear()
    submitted: dict[str, float] = {}
    start = time.perf_counter()
    if rate > 0:
        for index, ask in enumerate(asks):
            delay = start + index / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            submitted[ask.allocation_key] = time.perf_counter()
            core.update_allocation(si.AllocationRequest(rm_id=workload.rm_id, asks=[ask]))
    else:
        submitted = dict.fromkeys((ask.allocation_key for ask in asks), start)
        core.update_allocation(si.AllocationRequest(rm_id=workload.rm_id, asks=list(asks)))
    finished = _wait_with_progress(rm, timeout, stall)
    core.wait_until_idle(timeout)
    with rm.lock:
        urgent = dict(rm.urgent)
        victim_times = list(rm.victim_times)
    if not finished:
        raise TimeoutError(
            f"only {len(urgent):,} of {len(asks):,} urgent asks were allocated "
            f"({len(victim_times):,} victims chosen); nothing moved for {stall:g}s"
        )
    latencies = [
        (urgent[key] - submitted[key] - workload.delay) * 1000.0 for key in urgent if key in submitted
    ]
    # victims are chosen from the first delay's expiry on
    span = max(victim_times) - (start + workload.delay) if victim_times else 0.0
    return _Phase(
        allocated=len(urgent),
        victims=len(victim_times),
        victims_per_second=len(victim_times) / span if span > 0 else 0.0,
        latencies=latencies,
        seconds=max(urgent.values()) - start,
    )


def preemption_json(workload: PreemptionWorkload, result: PreemptionBenchResult) -> dict[str, Any]:
    """The JSON document of ``korral bench --workload preemption --json``."""
    return {
        "workload": workload.name,
        "nodes": workload.node_count,
        "running_allocations": result.running,
        "preemptors": result.preemptors,
        "rate_per_second": workload.rate,
        "preemption_delay_seconds": workload.delay,
        "korral": {
            "fill_seconds": round(result.fill_seconds, 3),
            "preemptors_allocated": result.preemptors_allocated,
            "victims": result.victims,
            "victims_per_second": round(result.victims_per_second, 1),
            "latency_ms": {
                "p50": round(result.latency_ms_p50, 2),
                "p99": round(result.latency_ms_p99, 2),
                "max": round(result.latency_ms_max, 2),
            },
            "latency_measures": "urgent ask's preemption.delay expiring -> its allocation at the RM",
            "seconds": round(result.seconds, 3),
            "burst": {
                "asks": result.burst,
                "allocated": result.burst_allocated,
                "victims": result.burst_victims,
                "victims_per_second": round(result.burst_victims_per_second, 1),
                "latency_ms": {
                    "p50": round(result.burst_latency_ms_p50, 2),
                    "p99": round(result.burst_latency_ms_p99, 2),
                },
                "seconds": round(result.burst_seconds, 3),
            },
            "peak_rss_mb": round(result.peak_rss_mb, 1),
        },
    }
