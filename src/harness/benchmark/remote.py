"""``korral bench --remote``: YuniKorn's shape with the RM in another process, talking gRPC to the core.

The bench process runs the core and serves gRPC on loopback; a child process (``python -m
korral.harness.benchmark.remote ADDRESS NODES ASKS``) is the RM: it connects with ``korral.connect``,
registers, creates the nodes and applications, then sends the asks (one AllocationRequest per
application, as in the in-process run) and times, like the in-process run, from just before the asks
are sent until its callback has received the last allocation. It prints its figures as one JSON line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import attrs

import korral
from korral import si
from korral.harness.benchmark import workloads
from korral.harness.benchmark.runner import BenchRM, latencies_ms, percentile, request_index

TIMEOUT = 600.0


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
        if not rm.nodes_done.wait(TIMEOUT):
            raise TimeoutError("nodes were not registered in time")
        remote.update_application(workload.applications)
        if not rm.apps_done.wait(TIMEOUT):
            raise TimeoutError("applications were not accepted in time")
        rm.target = workload.asks
        # which request each ask came in, known before the clock starts (as in the in-process run)
        requests = [request for wave in workload.waves for request in wave.requests]
        request_of = request_index(requests)
        submitted: list[float] = []
        start = time.perf_counter()
        for request in requests:
            submitted.append(time.perf_counter())
            remote.update_allocation(request)
        if not rm.done.wait(TIMEOUT):
            raise TimeoutError(f"only {rm.arrived} of {workload.asks} allocations arrived")
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


class RemoteBenchRM(BenchRM):
    """A BenchRM that also says when the workload's applications are accepted."""

    def __init__(self, expected_nodes: int, expected_apps: int) -> None:
        super().__init__(expected_nodes)
        self.expected_apps = expected_apps
        self.accepted_apps = 0
        self.apps_done = threading.Event()

    def update_application(self, response: si.ApplicationResponse) -> None:
        with self.lock:
            self.accepted_apps += len(response.accepted) + len(response.rejected)
            if self.accepted_apps >= self.expected_apps:
                self.apps_done.set()


def run_remote(nodes: int, asks: int, timeout: float = TIMEOUT) -> RemoteResult:
    """The core here, serving gRPC on loopback; the RM in a child process."""
    with korral.start() as core:
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
