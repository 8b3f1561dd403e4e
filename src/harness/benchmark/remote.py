"""``korral bench --remote``: YuniKorn's shape with the RM in another process, talking gRPC to the core.

The bench process runs the core and serves gRPC on loopback; a child process (``python -m
korral.harness.benchmark.remote ADDRESS NODES ASKS``) is the RM: it connects with ``korral.connect``,
registers, creates the nodes and applications, then sends the asks (one AllocationRequest per
application, as in the in-process run) and times, like the in-process run, from just before the asks
are sent until its callback has received the last allocation. It prints its figures as one JSON line.
"""

from __future__ import annotations

import faulthandler
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import attrs

import korral
from korral import si
from korral.harness.benchmark import workloads
from korral.harness.benchmark.runner import CORE_SETTINGS, BenchRM, latencies_ms, percentile, request_index

TIMEOUT = 600.0
# The RM gives up when nothing it waits for has moved on for this long (a normal run finishes in
# seconds): it says how far it got, why the core cut it off if it did, and where its threads were,
# rather than sitting out TIMEOUT with nothing printed.
STALL_SECONDS = 60.0


@attrs.frozen(kw_only=True)
class RemoteResult:
    allocations: int
    seconds: float
    allocations_per_second: float
    latency_ms_p50: float
    latency_ms_p99: float


def run_rm(address: str, nodes: int, asks: int) -> RemoteResult:
    """The RM side, in the child process."""
    workload = workloads.yunikorn(nodes, asks)
    rm = RemoteBenchRM(workload.node_count, len(workload.applications.new))
    with korral.connect(address) as remote:
        remote.register_resource_manager(
            si.RegisterResourceManagerRequest(rm_id=workload.rm_id, config=workload.config), rm
        )
        remote.update_node(workload.nodes)
        wait_for(rm.nodes_done, lambda: rm.accepted_nodes, workload.node_count, "nodes registered", rm)
        remote.update_application(workload.applications)
        wait_for(rm.apps_done, lambda: rm.accepted_apps, rm.expected_apps, "applications accepted", rm)
        rm.target = workload.asks
        # which request each ask came in, known before the clock starts (as in the in-process run)
        requests = [request for wave in workload.waves for request in wave.requests]
        request_of = request_index(requests)
        submitted: list[float] = []
        start = time.perf_counter()
        for request in requests:
            submitted.append(time.perf_counter())
            remote.update_allocation(request)
        wait_for(rm.done, lambda: rm.arrived, workload.asks, "allocations arrived", rm)
    arrivals = rm.arrivals
    seconds = rm.last_arrival - start
    latencies = latencies_ms(arrivals, request_of, submitted)
    return RemoteResult(
        allocations=len(arrivals),
        seconds=seconds,
        allocations_per_second=len(arrivals) / seconds,
        latency_ms_p50=percentile(latencies, 0.50),
        latency_ms_p99=percentile(latencies, 0.99),
    )


def wait_for(
    done: threading.Event,
    progress: Callable[[], int],
    target: int,
    what: str,
    rm: RemoteBenchRM,
    stall_seconds: float = STALL_SECONDS,
    timeout: float = TIMEOUT,
) -> None:
    """Wait until ``done``; fail as soon as the core cut the RM off, or when ``progress`` (how many of
    ``target`` so far) has not moved for ``stall_seconds`` or ``timeout`` has passed."""
    deadline = time.monotonic() + timeout
    last, moved = progress(), time.monotonic()
    while not done.wait(min(1.0, stall_seconds)):
        if rm.resync_reason is not None:
            raise RuntimeError(
                f"{what}: {progress()} of {target}; the core cut the RM off: {rm.resync_reason}"
            )
        now, seen = time.monotonic(), progress()
        if seen != last:
            last, moved = seen, now
        stalled = now - moved >= stall_seconds
        if stalled or now >= deadline:
            faulthandler.dump_traceback(all_threads=True)  # to stderr, which the bench prints
            why = f"none more for {now - moved:.0f}s" if stalled else f"not done within {timeout:.0f}s"
            raise TimeoutError(f"{what}: {seen} of {target}, {why}")


class RemoteBenchRM(BenchRM):
    """A BenchRM that also says when the workload's applications are accepted, and why the core cut it
    off if it did (``resync_required``)."""

    def __init__(self, expected_nodes: int, expected_apps: int) -> None:
        super().__init__(expected_nodes)
        self.expected_apps = expected_apps
        self.accepted_apps = 0
        self.apps_done = threading.Event()
        self.resync_reason: str | None = None

    def resync_required(self, reason: str) -> None:
        self.resync_reason = reason

    def update_application(self, response: si.ApplicationResponse) -> None:
        with self.lock:
            self.accepted_apps += len(response.accepted) + len(response.rejected)
            if self.accepted_apps >= self.expected_apps:
                self.apps_done.set()


def run_remote(nodes: int, asks: int, timeout: float = TIMEOUT) -> RemoteResult:
    """The core here, serving gRPC on loopback; the RM in a child process."""
    with korral.start(**CORE_SETTINGS) as core:
        address = core.serve_grpc("127.0.0.1:0")
        child = subprocess.run(
            [sys.executable, "-m", "korral.harness.benchmark.remote", address, str(nodes), str(asks)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if child.returncode != 0:
            raise RuntimeError(f"the remote RM failed:\n{child.stderr}")
        errors = core.tracker.errors
    if errors:
        raise RuntimeError(f"korral logged {errors} handler errors during the benchmark")
    return RemoteResult(**json.loads(child.stdout.strip().splitlines()[-1]))


def main() -> None:
    address, nodes, asks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(attrs.asdict(run_rm(address, nodes, asks))), flush=True)


if __name__ == "__main__":
    main()
