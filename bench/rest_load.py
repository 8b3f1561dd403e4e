"""REST and metrics under load: what serving costs the scheduler, and how fast the REST API answers.

    python bench/rest_load.py overhead [--rounds 5]   # yunikorn shape, metrics on vs off, alternating
    python bench/rest_load.py load [--rounds 3]       # GET /ws/v1/partition/default/queues while scheduling
    python bench/rest_load.py settings [--rounds 3]   # what tune_gc and the switch interval each gain

``overhead`` runs YuniKorn's shape with the actors feeding the metrics and without (korral setting
``metrics=False``), alternating in one process, and reports the medians. ``load`` serves the REST API
and runs the shape three ways, alternating: nobody asking, one request per second, and requests back to
back; the client is another process (as a real one would be), and only the requests that started while
the core was scheduling count. Medians over the rounds; the machine is shared, so look at the ratios.
Also reported: the process's CPU time per allocation (less sensitive than the rate to what else the
machine runs), the garbage collector's pauses in the scheduling window (they stop every thread), the
requests' p99 without those that overlapped a pause, and the same client against the idle core just
before (what the machine itself adds). The core runs as ``korral serve`` runs it (``tune_gc``, REST's
switch interval at 1 ms) unless a mode says otherwise. ``settings`` alternates those two process-wide
settings on and off: the yunikorn shape with and without ``tune_gc``, then REST served with a request
every 0.1 s at Python's switch interval and at korral serve's.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import korral
from korral import si
from korral.harness.benchmark import workloads
from korral.harness.benchmark.runner import CORE_SETTINGS, BenchRM
from korral.server.switch_interval import SERVING_SWITCH_INTERVAL

QUEUES = "/ws/v1/partition/default/queues"
IDLE_SECONDS = 5.0


def schedule(
    workload: workloads.Workload,
    *,
    serve: bool = False,
    client: Callable[[str], Any] | None = None,
    switch_interval: float | None = SERVING_SWITCH_INTERVAL,
    **settings: Any,
) -> dict[str, Any]:
    """Run the workload (all asks at once); returns allocations/s and the wall-clock window."""
    pauses: list[tuple[float, float]] = []  # (wall start, seconds) of every collection
    began: list[float] = []

    def collected(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began.append(time.time())
        elif began:
            start_time = began.pop()
            pauses.append((start_time, time.time() - start_time))

    gc.callbacks.append(collected)
    try:
        return _schedule(workload, serve, client, pauses, switch_interval, **settings)
    finally:
        gc.callbacks.remove(collected)


def _schedule(
    workload: workloads.Workload,
    serve: bool,
    client: Callable[[str], Any] | None,
    pauses: list[tuple[float, float]],
    switch_interval: float | None,
    **settings: Any,
) -> dict[str, Any]:
    rm = BenchRM(workload.node_count)
    with korral.start(**{**CORE_SETTINGS, **settings}) as core:
        core.register_resource_manager(
            si.RegisterResourceManagerRequest(rm_id=workload.rm_id, config=workload.config), rm
        )
        core.update_node(workload.nodes)
        assert rm.nodes_done.wait(120)
        core.update_application(workload.applications)
        core.wait_until_idle(120)
        url = core.serve_rest("127.0.0.1:0", switch_interval=switch_interval) if serve else ""
        process = client(url) if client is not None else None
        idle_start = time.time()
        if process is not None:
            time.sleep(IDLE_SECONDS)  # the client is up, asking the idle core, before the asks go in
        rm.target = workload.asks
        wall_start = time.time()
        cpu_start = time.process_time()
        start = time.perf_counter()
        for wave in workload.waves:
            for request in wave.requests:
                core.update_allocation(request)
        assert rm.done.wait(600), "not every ask was allocated"
        with rm.lock:
            end = rm.last_arrival
            made = rm.arrived
        cpu = time.process_time() - cpu_start
        wall_end = wall_start + (end - start)
        samples: list[tuple[float, float]] = []
        if process is not None:
            process.terminate()
            output, _ = process.communicate(timeout=30)
            samples = [(sent, ms) for sent, ms in json.loads(output or "[]")]
    window = [(at, seconds) for at, seconds in pauses if wall_start <= at <= wall_end]

    def paused(sent: float, ms: float) -> bool:  # the request overlapped a collection of >= 10 ms
        return any(at < sent + ms / 1000 and at + s > sent for at, s in pauses if s >= 0.010)

    return {
        "allocations_per_second": made / (end - start),
        "seconds": end - start,
        "cpu_us_per_allocation": cpu * 1e6 / made,
        "latencies_ms": [ms for sent, ms in samples if wall_start <= sent <= wall_end],
        "unpaused_latencies_ms": [
            ms for sent, ms in samples if wall_start <= sent <= wall_end and not paused(sent, ms)
        ],
        "idle_latencies_ms": [ms for sent, ms in samples if idle_start + 0.5 <= sent < wall_start],
        "gc_seconds": sum(seconds for _, seconds in window),
        "gc_max_ms": max((seconds for _, seconds in window), default=0.0) * 1000,
    }


def start_client(interval: float) -> Callable[[str], subprocess.Popen]:
    def start(url: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, __file__, "client", url + QUEUES, "--interval", str(interval)],
            stdout=subprocess.PIPE,
            text=True,
        )

    return start


def client(url: str, interval: float) -> None:
    """GET ``url`` every ``interval`` seconds (0: back to back) until terminated; print the samples."""
    import signal

    samples: list[tuple[float, float]] = []
    stop = False

    def finish(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, finish)
    next_at = time.monotonic()
    while not stop:
        began = time.time()
        ticked = time.perf_counter()
        with urllib.request.urlopen(url, timeout=60) as response:
            response.read()
        samples.append((began, (time.perf_counter() - ticked) * 1000.0))
        next_at += interval
        pause = next_at - time.monotonic()
        if pause > 0 and not stop:
            time.sleep(pause)
    print(json.dumps(samples))


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def overhead(nodes: int, asks: int, rounds: int) -> None:
    workload = workloads.yunikorn(nodes, asks)
    rates: dict[str, list[float]] = {"metrics on": [], "metrics off": []}
    for _ in range(rounds):
        for name, enabled in (("metrics off", False), ("metrics on", True)):
            rates[name].append(schedule(workload, metrics=enabled)["allocations_per_second"])
    on, off = statistics.median(rates["metrics on"]), statistics.median(rates["metrics off"])
    print(
        f"yunikorn shape, {nodes:,} nodes, {asks:,} asks, {rounds} rounds alternating (median allocations/s)"
    )
    for name, values in rates.items():
        runs = ", ".join(f"{v:,.0f}" for v in values)
        print(f"  {name:<12} {statistics.median(values):>9,.0f}   runs: {runs}")
    print(f"  metrics on / off: {on / off:.3f}")


def load(nodes: int, asks: int, rounds: int) -> None:
    workload = workloads.yunikorn(nodes, asks)
    modes: dict[str, Callable[[str], Any] | None] = {
        "no requests": None,
        "1 request/s": start_client(1.0),
        "back to back": start_client(0.0),
    }
    results: dict[str, list[dict]] = {name: [] for name in modes}
    for _ in range(rounds):
        for name, starter in modes.items():
            results[name].append(schedule(workload, serve=True, client=starter))
    baseline = statistics.median(r["allocations_per_second"] for r in results["no requests"])
    base_cpu = statistics.median(r["cpu_us_per_allocation"] for r in results["no requests"])
    print(f"yunikorn shape, {nodes:,} nodes, {asks:,} asks, REST served, {rounds} rounds alternating")
    for name, runs in results.items():
        rate = statistics.median(r["allocations_per_second"] for r in runs)
        cpu = statistics.median(r["cpu_us_per_allocation"] for r in runs)
        gc_share = sum(r["gc_seconds"] for r in runs) / sum(r["seconds"] for r in runs)
        gc_max = max(r["gc_max_ms"] for r in runs)
        print(
            f"  {name:<13} {rate:>9,.0f} allocations/s ({rate / baseline:.3f}x), CPU {cpu:.1f} us/allocation"
            f" ({cpu / base_cpu:.3f}x); GC {gc_share:.0%} of the window, longest pause {gc_max:.0f} ms"
        )
        for label, key in (
            ("while scheduling", "latencies_ms"),
            ("  of which overlapping no GC pause >= 10 ms", "unpaused_latencies_ms"),
            ("idle core, same client, just before", "idle_latencies_ms"),
        ):
            latencies = [ms for r in runs for ms in r[key]]
            if latencies:
                print(
                    f"      GET {QUEUES} {label}: {len(latencies)} requests,"
                    f" p50 {percentile(latencies, 0.5):.1f} ms, p99 {percentile(latencies, 0.99):.1f} ms,"
                    f" max {max(latencies):.1f} ms"
                )


def settings_gain(nodes: int, asks: int, rounds: int) -> None:
    """What each process-wide setting gains, its two sides alternating in one process."""
    workload = workloads.yunikorn(nodes, asks)
    gc_modes = {"tune_gc off": False, "tune_gc on": True}
    gc_runs: dict[str, list[dict]] = {name: [] for name in gc_modes}
    switch_modes = {"switch interval 5 ms": None, "switch interval 1 ms": SERVING_SWITCH_INTERVAL}
    switch_runs: dict[str, list[dict]] = {name: [] for name in switch_modes}
    for _ in range(rounds):
        for name, tuned in gc_modes.items():
            gc_runs[name].append(schedule(workload, tune_gc=tuned))
        for name, interval in switch_modes.items():
            switch_runs[name].append(
                schedule(workload, serve=True, client=start_client(0.1), switch_interval=interval)
            )
    print(f"yunikorn shape, {nodes:,} nodes, {asks:,} asks, {rounds} rounds alternating (medians)")
    for name, runs in {**gc_runs, **switch_runs}.items():
        rate = statistics.median(r["allocations_per_second"] for r in runs)
        cpu = statistics.median(r["cpu_us_per_allocation"] for r in runs)
        gc_share = sum(r["gc_seconds"] for r in runs) / sum(r["seconds"] for r in runs)
        gc_max = max(r["gc_max_ms"] for r in runs)
        line = (
            f"  {name:<21} {rate:>9,.0f} allocations/s, CPU {cpu:.1f} us/allocation;"
            f" GC {gc_share:.0%} of the window, longest pause {gc_max:.0f} ms"
        )
        latencies = [ms for r in runs for ms in r["latencies_ms"]]
        if latencies:
            line += (
                f"; GET {QUEUES} while scheduling: {len(latencies)} requests,"
                f" p50 {percentile(latencies, 0.5):.1f} ms, p99 {percentile(latencies, 0.99):.1f} ms"
            )
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("overhead", "load", "settings"):
        command = commands.add_parser(name)
        command.add_argument("--nodes", type=int, default=1000)
        command.add_argument("--asks", type=int, default=50_000)
        command.add_argument("--rounds", type=int, default=3)
    command = commands.add_parser("client")
    command.add_argument("url")
    command.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    if args.command == "client":
        client(args.url, args.interval)
    elif args.command == "overhead":
        overhead(args.nodes, args.asks, args.rounds)
    elif args.command == "settings":
        settings_gain(args.nodes, args.asks, args.rounds)
    else:
        load(args.nodes, args.asks, args.rounds)


if __name__ == "__main__":
    main()
