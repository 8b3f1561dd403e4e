"""``korral bench --workload preemption``: urgent asks in a starved queue, victims from a full cluster;
the latency from an urgent ask's delay expiring to its allocation, victims chosen per second."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

import korral
from korral import si
from korral.harness.benchmark.runner import CORE_SETTINGS, AnsweringRM, peak_rss_mb, percentile
from korral.harness.benchmark.workloads import PreemptionWorkload


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


class PreemptionBenchRM(AnsweringRM):
    """Records fill allocations, victims and urgent allocations apart; confirms each victim's release
    at once, as a shim does when the preempted pod has stopped."""

    def __init__(self, expected_nodes: int) -> None:
        super().__init__(expected_nodes)
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
            fill: list[str] = []
            for allocation in response.new:
                if allocation.application_id == "urgent":
                    self.urgent[allocation.allocation_key] = now
                else:
                    fill.append(allocation.allocation_key)
            self.record(fill, now)
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
    with korral.start(**CORE_SETTINGS) as core:
        rm.set_up(core, workload, timeout)
        rm.target = workload.allocations
        fill_started = time.perf_counter()
        for request in workload.fill:
            core.update_allocation(request)
        if not rm.done.wait(timeout):
            raise TimeoutError(f"the cluster did not fill: {rm.arrived:,} of {workload.allocations:,}")
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
        latency_ms_p50=percentile(latency.latencies, 0.50),
        latency_ms_p99=percentile(latency.latencies, 0.99),
        latency_ms_max=max(latency.latencies, default=0.0),
        seconds=latency.seconds,
        burst=len(workload.burst),
        burst_allocated=burst.allocated,
        burst_victims=burst.victims,
        burst_victims_per_second=burst.victims_per_second,
        burst_latency_ms_p50=percentile(burst.latencies, 0.50),
        burst_latency_ms_p99=percentile(burst.latencies, 0.99),
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
