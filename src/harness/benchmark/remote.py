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
import tempfile
import threading
import time
from collections.abc import Callable, Mapping

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


# Where the gRPC path's CPU goes, by thread (a thread's name says what it does), in each process.
# The RM's: its calls encode and send on the caller's thread; one thread reads and decodes the
# ordered stream; one runs the callbacks in order. The core's: the server's event loop decodes
# requests, routes them and writes responses (the session's bookkeeping included); the RM's
# callback thread in the core encodes each response; the rest is the core's own work.
RM_THREADS = {
    "rm: encoding and sending requests (the caller's thread)": "MainThread",
    "rm: reading and decoding the stream": "korral-remote-",
    "rm: callbacks (the callback thread)": "korral-remote-rm-",
}
SERVER_THREADS = {
    "server: decoding and routing requests, writing responses (the event loop)": "korral-grpc",
    "server: encoding responses (the RM's callback thread)": "korral-callbacks",
}
# said on the RM's stdout just before it sends its first ask: the core starts counting its CPU
TIMED = "TIMED"


@attrs.frozen(kw_only=True)
class RemoteResult:
    allocations: int
    seconds: float
    allocations_per_second: float
    latency_ms_p50: float
    latency_ms_p99: float
    # CPU µs per allocation by stage (RM_THREADS, SERVER_THREADS), over the timed span
    stage_us: dict[str, float] = attrs.field(factory=dict)


@attrs.frozen
class ThreadCpu:
    """A reading of this process's CPU: each live thread's so far with its role, and the process's."""

    roles: tuple[str, ...]  # the named roles, then "other"
    by_thread: Mapping[threading.Thread, tuple[str, float]]
    process: float


def thread_cpu(roles: Mapping[str, str]) -> ThreadCpu:
    """CPU seconds so far of this process's threads, each under the role whose name prefix is the
    longest that fits its name (the other Python threads under "other"), and the process's CPU in
    total (gRPC's own threads and what the OS cannot say by thread)."""
    by_thread: dict[threading.Thread, tuple[str, float]] = {}
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        fits = [(len(prefix), role) for role, prefix in roles.items() if thread.name.startswith(prefix)]
        role = max(fits)[1] if fits else "other"
        try:
            by_thread[thread] = (role, time.clock_gettime(time.pthread_getcpuclockid(thread.ident)))
        except (AttributeError, OSError):  # not on this OS, or the thread ended meanwhile
            continue
    return ThreadCpu(roles=(*roles, "other"), by_thread=by_thread, process=time.process_time())


def stage_us(before: ThreadCpu, after: ThreadCpu, allocations: int, rest: str) -> dict[str, float]:
    """µs per allocation by role between two readings, thread by thread: a thread started meanwhile
    counts from nothing; one that ended meanwhile cannot say what it used since ``before`` and is left
    to ``rest``, with what the named roles leave of the process's CPU (the Thread objects are the keys,
    so a thread id the OS reuses is never taken for another thread's)."""
    per = 1e6 / max(1, allocations)
    stages = dict.fromkeys(after.roles, 0.0)
    for thread, (role, seconds) in after.by_thread.items():
        earlier = before.by_thread.get(thread)
        stages[role] += (seconds - (earlier[1] if earlier is not None else 0.0)) * per
    stages[rest] = max(0.0, (after.process - before.process) * per - sum(stages.values()))
    return {role: round(value, 2) for role, value in stages.items()}


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
        print(TIMED, flush=True)
        cpu_before = thread_cpu(RM_THREADS)
        start = time.perf_counter()
        for request in requests:
            submitted.append(time.perf_counter())
            remote.update_allocation(request)
        wait_for(rm.done, lambda: rm.arrived, workload.asks, "allocations arrived", rm)
        cpu_after = thread_cpu(RM_THREADS)
    arrivals = rm.arrivals
    seconds = rm.last_arrival - start
    latencies = latencies_ms(arrivals, request_of, submitted)
    return RemoteResult(
        allocations=len(arrivals),
        seconds=seconds,
        allocations_per_second=len(arrivals) / seconds,
        latency_ms_p50=percentile(latencies, 0.50),
        latency_ms_p99=percentile(latencies, 0.99),
        stage_us={
            ("rm: other Python threads" if role == "other" else role): value
            for role, value in stage_us(
                cpu_before, cpu_after, len(arrivals), "rm: gRPC's own threads"
            ).items()
        },
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
    """The core here, serving gRPC on loopback; the RM in a child process. The core's CPU by stage is
    counted from when the RM says it starts sending asks (``TIMED``) until it has them all back."""
    command = [sys.executable, "-m", "korral.harness.benchmark.remote"]
    with korral.start(**CORE_SETTINGS) as core, tempfile.TemporaryFile("w+") as errors_file:
        address = core.serve_grpc("127.0.0.1:0")
        child = subprocess.Popen(
            [*command, address, str(nodes), str(asks)], stdout=subprocess.PIPE, stderr=errors_file, text=True
        )
        killer = threading.Timer(timeout, child.kill)
        killer.start()
        assert child.stdout is not None
        lines: list[str] = []
        before = after = None
        try:
            for line in child.stdout:
                if line.strip() == TIMED:
                    before = thread_cpu(SERVER_THREADS)
                else:
                    lines.append(line)
            after = thread_cpu(SERVER_THREADS)
            returncode = child.wait()
        finally:
            killer.cancel()
        if returncode != 0 or not lines:
            errors_file.seek(0)
            raise RuntimeError(f"the remote RM failed:\n{errors_file.read()}")
        errors = core.tracker.errors
    if errors:
        raise RuntimeError(f"korral logged {errors} handler errors during the benchmark")
    fields = json.loads(lines[-1])
    result = RemoteResult(**fields)
    if before is None or after is None:
        return result
    server = stage_us(before, after, result.allocations, "server: gRPC's own threads and the rest")
    server["server: the core (scheduling, its actors)"] = server.pop("other")
    return attrs.evolve(result, stage_us={**result.stage_us, **server})


def main() -> None:
    address, nodes, asks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(attrs.asdict(run_rm(address, nodes, asks))), flush=True)


if __name__ == "__main__":
    main()
