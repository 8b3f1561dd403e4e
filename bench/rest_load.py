"""REST and metrics under load: what serving costs the scheduler, and how fast the REST API answers.

    python bench/rest_load.py overhead [--rounds 5]   # yunikorn shape, metrics on vs off, alternating
    python bench/rest_load.py load [--rounds 3]       # GET /ws/v1/partition/default/queues while scheduling

``overhead`` runs YuniKorn's shape with the actors feeding the metrics and without (korral setting
``metrics=False``), alternating in one process, and reports the medians. ``load`` serves the REST API
and runs the shape three ways, alternating: nobody asking, one request per second, and requests back to
back; the client is another process (as a real one would be), and only the requests that started while
the core was scheduling count. Medians over the rounds; the machine is shared, so look at the ratios.
"""

from __future__ import annotations

import argparse
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
from korral.harness.benchmark.runner import BenchRM

QUEUES = "/ws/v1/partition/default/queues"


def schedule(
    workload: workloads.Workload,
    *,
    serve: bool = False,
    client: Callable[[str], Any] | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """Run the workload (all asks at once); returns allocations/s and the wall-clock window."""
    rm = BenchRM(workload.node_count)
    with korral.start(**settings) as core:
        core.register_resource_manager(
            si.RegisterResourceManagerRequest(rm_id=workload.rm_id, config=workload.config), rm
        )
        core.update_node(workload.nodes)
        assert rm.nodes_done.wait(120)
        core.update_application(workload.applications)
        core.wait_until_idle(120)
        url = core.serve_rest("127.0.0.1:0") if serve else ""
        process = client(url) if client is not None else None
        if process is not None:
            time.sleep(1.5)  # the client is up and asking before the asks go in
        rm.target = workload.asks
        wall_start = time.time()
        start = time.perf_counter()
        for wave in workload.waves:
            for request in wave.requests:
                core.update_allocation(request)
        assert rm.done.wait(600), "not every ask was allocated"
        with rm.lock:
            end = max(arrived for _, arrived in rm.arrivals)
            made = len(rm.arrivals)
        wall_end = wall_start + (end - start)
        latencies: list[float] = []
        if process is not None:
            process.terminate()
            output, _ = process.communicate(timeout=30)
            samples = json.loads(output or "[]")
            latencies = [ms for began, ms in samples if wall_start <= began <= wall_end]
    return {
        "allocations_per_second": made / (end - start),
        "seconds": end - start,
        "latencies_ms": latencies,
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
    print(f"yunikorn shape, {nodes:,} nodes, {asks:,} asks, REST served, {rounds} rounds alternating")
    for name, runs in results.items():
        rate = statistics.median(r["allocations_per_second"] for r in runs)
        latencies = [ms for r in runs for ms in r["latencies_ms"]]
        line = f"  {name:<13} {rate:>9,.0f} allocations/s ({rate / baseline:.3f}x)"
        if latencies:
            line += (
                f"  GET {QUEUES}: {len(latencies)} requests while scheduling,"
                f" p50 {percentile(latencies, 0.5):.1f} ms, p99 {percentile(latencies, 0.99):.1f} ms,"
                f" max {max(latencies):.1f} ms"
            )
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("overhead", "load"):
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
    else:
        load(args.nodes, args.asks, args.rounds)


if __name__ == "__main__":
    main()
