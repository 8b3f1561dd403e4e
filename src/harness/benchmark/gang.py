"""``korral bench --workload gang``: placeholders, then their replacement, through korral and through
the sequential reference."""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

import attrs

import korral
from korral import si
from korral.harness.benchmark.runner import (
    CORE_SETTINGS,
    AnsweringRM,
    BenchRM,
    reference_with_asks,
    schedule_and_deliver,
)
from korral.harness.benchmark.workloads import Workload, submit_all


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


class GangBenchRM(AnsweringRM):
    """Counts placeholders and real allocations apart, and confirms every PLACEHOLDER_REPLACED release
    at once, as a shim does when it stops the placeholder's pod."""

    def __init__(self, expected_nodes: int) -> None:
        super().__init__(expected_nodes)
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
            self.record([a.allocation_key for a in placeholders], now)
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


def run_gang_korral(workload: Workload, timeout: float = 600.0) -> GangResult:
    rm = GangBenchRM(workload.node_count)
    gc.collect()
    with korral.start(**CORE_SETTINGS) as core:
        rm.set_up(core, workload, timeout)
        rm.target = workload.asks
        start = time.perf_counter()
        submit_all(workload.waves, core.update_allocation)
        if not rm.done.wait(timeout):
            raise TimeoutError("placeholders were not all allocated in time")
        placeholders_end = rm.last_arrival
        core.wait_until_idle(timeout)
        rm.real_target = sum(wave.count for wave in workload.replacement_waves)
        replacing = time.perf_counter()
        submit_all(workload.replacement_waves, core.update_allocation)
        if not rm.real_done.wait(timeout):
            raise TimeoutError("placeholders were not all replaced in time")
        core.wait_until_idle(timeout)
        errors = core.tracker.errors
    if errors:
        raise RuntimeError(f"korral logged {errors} handler errors during the benchmark")
    placeholder_seconds = placeholders_end - start
    replacement_seconds = max(rm.real) - replacing
    return GangResult(
        placeholders=rm.arrived,
        placeholder_seconds=placeholder_seconds,
        placeholders_per_second=rm.arrived / placeholder_seconds,
        replacements=len(rm.real),
        replacement_seconds=replacement_seconds,
        replacements_per_second=len(rm.real) / replacement_seconds,
    )


def run_gang_reference(workload: Workload) -> GangResult:
    """The same two phases on the sequential reference; the RM's confirmations are sent back as soon
    as the scheduling that released the placeholders has returned. Each phase ends with what the RM
    receives (the placeholders and the real allocations as SI allocations), as korral's do."""
    reference, start = reference_with_asks(workload)
    rm = BenchRM(workload.node_count)
    schedule_and_deliver(reference, rm)
    placeholders_end = time.perf_counter()
    submit_all(workload.replacement_waves, reference.update_allocation)
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
        placeholders=rm.arrived,
        placeholder_seconds=placeholder_seconds,
        placeholders_per_second=rm.arrived / placeholder_seconds,
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
