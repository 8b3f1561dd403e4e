"""``korral bench --workload multi-rm``: K RMs, each with YuniKorn's benchmark shape in its own partition.

Every RM registers, adds its nodes and its two applications; then all of them submit their asks at
once. Timed from just before the first ask is submitted until the last allocation reached its RM:
the aggregate allocations/s is every RM's allocations over that span; each RM's own rate and latency
(ask submitted -> allocation received) are reported too. With engine="threads" the partitions share
this process and its GIL; with engine="ray" each runs in its own process.
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any

import attrs

import korral
from korral import si
from korral.harness.benchmark.runner import CORE_SETTINGS, BenchRM, percentile
from korral.harness.benchmark.workloads import yunikorn


@attrs.frozen(kw_only=True)
class RMFigures:
    rm_id: str
    allocations: int
    allocations_per_second: float
    latency_ms_p50: float
    latency_ms_p99: float


@attrs.frozen(kw_only=True)
class MultiRMResult:
    engine: str
    rms: int
    nodes_per_rm: int
    asks_per_rm: int
    allocations: int
    seconds: float
    allocations_per_second: float
    per_rm: tuple[RMFigures, ...]
    # CPU time over the timed span: this process (the driver), and each partition's process (ray)
    driver_cpu_seconds: float
    host_cpu_seconds: tuple[float, ...]
    # the machine's 1-minute load average when the run started (others' work on a shared machine)
    load_average: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _for_rm(request: object, rm_id: str) -> object:
    return attrs.evolve(request, rm_id=rm_id)  # type: ignore[misc]


def run_multi_rm(
    rms: int, nodes: int = 1000, asks: int = 10_000, engine: str = "threads", timeout: float = 600.0
) -> MultiRMResult:
    workload = yunikorn(nodes, asks)
    gc.collect()
    with korral.start(engine=engine, **CORE_SETTINGS) as core:
        recorders: dict[str, BenchRM] = {}
        for index in range(rms):
            rm_id = f"bench-{index}"
            rm = BenchRM(workload.node_count)
            core.register_resource_manager(
                si.RegisterResourceManagerRequest(rm_id=rm_id, config=workload.config), rm
            )
            core.update_node(_for_rm(workload.nodes, rm_id))  # type: ignore[arg-type]
            recorders[rm_id] = rm
        for rm_id, rm in recorders.items():
            if not rm.nodes_done.wait(timeout):
                raise TimeoutError(f"{rm_id}: nodes were not registered in time")
            core.update_application(_for_rm(workload.applications, rm_id))  # type: ignore[arg-type]
        core.wait_until_idle(timeout)
        for rm in recorders.values():
            rm.target = workload.asks
        requests = {
            rm_id: [_for_rm(request, rm_id) for wave in workload.waves for request in wave.requests]
            for rm_id in recorders
        }
        hosts = core._ray.partitions() if core._ray is not None else []
        host_cpu = [host.cpu_seconds() for host in hosts]
        submitted: dict[str, float] = {}
        load_average = os.getloadavg()[0]
        driver_cpu = time.process_time()
        start = time.perf_counter()
        # all at once: the RMs' requests interleaved, one request each in turn
        for turn in range(max(len(r) for r in requests.values())):
            for rm_id, rm_requests in requests.items():
                if turn < len(rm_requests):
                    submitted.setdefault(rm_id, time.perf_counter())
                    core.update_allocation(rm_requests[turn])  # type: ignore[arg-type]
        deadline = time.monotonic() + timeout
        for rm_id, rm in recorders.items():
            if not rm.done.wait(max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"{rm_id}: {rm.arrived} of {workload.asks} allocations in time")
        driver_cpu = time.process_time() - driver_cpu
        host_cpu = [host.cpu_seconds() - before for host, before in zip(hosts, host_cpu, strict=True)]
        core.wait_until_idle(timeout)
        if core.tracker.errors:
            raise RuntimeError(f"korral logged {core.tracker.errors} handler errors during the benchmark")
    figures = []
    end = start
    total = 0
    for rm_id, rm in recorders.items():
        with rm.lock:
            arrivals = [arrived for _, arrived in rm.arrivals]
        last = max(arrivals)
        end = max(end, last)
        total += len(arrivals)
        latencies = [(arrived - submitted[rm_id]) * 1000.0 for arrived in arrivals]
        figures.append(
            RMFigures(
                rm_id=rm_id,
                allocations=len(arrivals),
                allocations_per_second=len(arrivals) / (last - submitted[rm_id]),
                latency_ms_p50=percentile(latencies, 0.50),
                latency_ms_p99=percentile(latencies, 0.99),
            )
        )
    seconds = end - start
    return MultiRMResult(
        engine=engine,
        rms=rms,
        nodes_per_rm=nodes,
        asks_per_rm=asks,
        allocations=total,
        seconds=seconds,
        allocations_per_second=total / seconds,
        per_rm=tuple(figures),
        driver_cpu_seconds=driver_cpu,
        host_cpu_seconds=tuple(host_cpu),
        load_average=load_average,
    )
