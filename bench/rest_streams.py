"""Event stream readers while the core schedules: what 100 of them cost the scheduler.

    python bench/rest_streams.py [--readers 100] [--nodes 1000] [--asks 50000] [--rounds 3] [--in-loop]
                                 [--readers-nice N]

Runs YuniKorn's shape with the REST API served and an RM that takes events (the core then makes three
per allocation and the stream sends them all; ``--no-events``: an RM that takes none), alternating: no
stream reader, one, then ``--readers`` readers of ``/ws/v1/events/stream`` in another process (as real
ones would be, 15 per client address as max_streams_per_host allows), each reading as fast as it can.
``--in-loop`` adds the same readers written to by the server's loop (``stream_process=False``);
``--readers-nice`` runs the readers' process at a lower priority, as if it were on other machines.
Reports the medians of allocations/s and of the process's CPU time per allocation (and the REST
thread's share of it, and the CPU of the stream sender process beside it), the ratio to no readers
(the bar: scheduling slowed by at most 10 %), and what the readers received: lines, bytes, and how
many the server ended (cut off).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import korral
from korral import si
from korral.harness.benchmark import workloads
from korral.harness.benchmark.runner import CORE_SETTINGS, BenchRM
from korral.server.switch_interval import SERVING_SWITCH_INTERVAL

STREAM = "/ws/v1/events/stream"


IDLE_SECONDS = 5.0  # the readers connect before the asks go in


class EventsRM(BenchRM):
    """BenchRM that takes events: the core then makes them (ask added, allocation added, usage: about
    four per allocation) and logs them for the REST API, as for an RM over gRPC."""

    def send_event(self, events: list[si.EventRecord]) -> None:
        pass


def schedule(
    workload: workloads.Workload, client: Callable[[str], Any] | None, events: bool = True, **rest: Any
) -> dict[str, Any]:
    """Run the workload with REST served (and the readers started); allocations/s and CPU."""
    rm = EventsRM(workload.node_count) if events else BenchRM(workload.node_count)
    with korral.start(**CORE_SETTINGS) as core:  # as korral serve and korral bench run it
        core.register_resource_manager(
            si.RegisterResourceManagerRequest(rm_id=workload.rm_id, config=workload.config), rm
        )
        core.update_node(workload.nodes)
        assert rm.nodes_done.wait(120)
        core.update_application(workload.applications)
        core.wait_until_idle(120)
        url = core.serve_rest("127.0.0.1:0", **{"switch_interval": SERVING_SWITCH_INTERVAL, **rest})
        process = client(url) if client is not None else None
        if process is not None:
            time.sleep(IDLE_SECONDS)
        events_before = core.metrics.events.since(0, 0)[2]
        rm.target = workload.asks
        cpu_start = time.process_time()
        rest_start = _rest_thread_cpu(core)
        start = time.perf_counter()
        for wave in workload.waves:
            for request in wave.requests:
                core.update_allocation(request)
        assert rm.done.wait(600), "not every ask was allocated"
        with rm.lock:
            end = rm.last_arrival
            made = rm.arrived
        cpu = time.process_time() - cpu_start
        rest_cpu = _rest_thread_cpu(core) - rest_start
        sender_cpu = _sender_cpu()  # the stream sender process started with the readers
        logged = (core.metrics.events.since(0, 0)[2]) - events_before
        if process is not None:
            time.sleep(IDLE_SECONDS)  # the readers take the tail the server still holds for them
            process.terminate()
            process.communicate(timeout=30)
    return {
        "allocations_per_second": made / (end - start),
        "cpu_us_per_allocation": cpu * 1e6 / made,
        "events": logged,
        "rest_cpu_us_per_allocation": rest_cpu * 1e6 / made,
        "sender_cpu_us_per_allocation": sender_cpu * 1e6 / made,
    }


def _sender_cpu() -> float:
    """CPU seconds so far of this process's stream sender children (Linux: /proc), 0 if none."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as command:
                name = command.read()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and b"stream_worker" in name:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _rest_thread_cpu(core: korral.Core) -> float:
    """CPU seconds of the REST server's event loop thread so far (Linux: /proc), 0 if unknown."""
    for server in getattr(core, "_servers", []):
        thread = getattr(server, "_thread", None)
        if thread is not None and thread.native_id is not None:
            try:
                with open(f"/proc/self/task/{thread.native_id}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                return 0.0
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def start_readers(readers: int, nice: int = 0) -> Callable[[str], subprocess.Popen]:
    def start(url: str) -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, __file__, "readers", url, "--readers", str(readers)],
            stdout=subprocess.PIPE,
            text=True,
        )
        if nice:  # the readers as if on other machines: they take only the CPU nothing else wants
            os.setpriority(os.PRIO_PROCESS, process.pid, nice)
        return process

    return start


async def _read_streams(url: str, readers: int) -> dict[str, int]:
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    totals = {"opened": 0, "refused": 0, "events": 0, "bytes": 0, "ended_by_server": 0}
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

    async def one(index: int) -> None:
        # from 127.0.0.2, .3, ...: 15 readers per address, the default max_streams_per_host
        source = (f"127.0.0.{2 + index // 15}", 0)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port, local_addr=source)
        writer.write(f"GET {STREAM} HTTP/1.1\r\nHost: {parts.hostname}\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            totals["refused"] += 1
            writer.close()
            return
        totals["opened"] += 1
        while not stop.is_set():
            chunk = await reader.read(1 << 16)
            if not chunk:
                totals["ended_by_server"] += 1
                return
            totals["bytes"] += len(chunk)
            totals["events"] += chunk.count(b'"timestampNano"')  # one per event (a split one is missed)
        writer.close()

    tasks = [asyncio.create_task(one(index)) for index in range(readers)]
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return totals


def readers_main(url: str, readers: int) -> None:
    print(json.dumps(asyncio.run(_read_streams(url, readers))))


def run(
    readers: int,
    nodes: int,
    asks: int,
    rounds: int,
    events: bool,
    in_loop: bool,
    readers_nice: int = 0,
    **rest: Any,
) -> None:
    workload = workloads.yunikorn(nodes, asks)
    # name -> (the readers' process, serve_rest's settings for the mode)
    modes: dict[str, tuple[Callable[[str], Any] | None, dict[str, Any]]] = {
        "no readers": (None, rest),
        "1 reader": (start_readers(1, readers_nice), rest),
        f"{readers} readers": (start_readers(readers, readers_nice), rest),
    }
    if in_loop:  # the same readers written to by the server's loop (stream_process=False)
        in_loop_settings = {**rest, "stream_process": False}
        modes[f"{readers} in loop"] = (start_readers(readers, readers_nice), in_loop_settings)
    results: dict[str, list[dict]] = {name: [] for name in modes}
    received: list[dict] = []
    for _ in range(rounds):
        for name, (starter, settings) in modes.items():
            print(f"-- {name}", file=sys.stderr, flush=True)  # what the server logs below is this mode's
            outcome = schedule(workload, _capture(starter, received, name), events, **settings)
            results[name].append(outcome)
    base = statistics.median(r["allocations_per_second"] for r in results["no readers"])
    base_cpu = statistics.median(r["cpu_us_per_allocation"] for r in results["no readers"])
    taking = "an RM taking events" if events else "an RM taking no events (the core makes none)"
    niced = f", readers at nice {readers_nice}" if readers_nice else ""
    print(
        f"yunikorn shape, {nodes:,} nodes, {asks:,} asks, REST served, {taking}, {rounds} rounds "
        f"alternating{niced}"
    )
    for name, runs in results.items():
        rate = statistics.median(r["allocations_per_second"] for r in runs)
        cpu = statistics.median(r["cpu_us_per_allocation"] for r in runs)
        every = ", ".join(f"{r['allocations_per_second']:,.0f}" for r in runs)
        rest = statistics.median(r["rest_cpu_us_per_allocation"] for r in runs)
        sender = statistics.median(r["sender_cpu_us_per_allocation"] for r in runs)
        print(
            f"  {name:<16} {rate:>9,.0f} allocations/s ({rate / base:.3f}x), CPU {cpu:.1f} us/allocation"
            f" ({cpu / base_cpu:.3f}x) of which the REST thread {rest:.1f}; sender process {sender:.1f}"
            f"   runs: {every}"
        )
    events = statistics.median(r["events"] for runs in results.values() for r in runs)
    print(f"  events logged per run: {events:,.0f}")
    for totals in received:
        print(f"  readers: {json.dumps(totals)}")


def _capture(
    starter: Callable[[str], subprocess.Popen] | None, received: list[dict], mode: str
) -> Callable[[str], Any] | None:
    """The readers' process, its summary kept when ``schedule`` ends it (it reads stdout as JSON)."""
    if starter is None:
        return None

    def start(url: str) -> Any:
        return _Summary(starter(url), received, mode)

    return start


class _Summary:
    """A readers' process as ``rest_load.schedule`` drives a client: terminate, then communicate."""

    def __init__(self, process: subprocess.Popen, received: list[dict], mode: str) -> None:
        self.process = process
        self.received = received
        self.mode = mode

    def terminate(self) -> None:
        self.process.terminate()

    def communicate(self, timeout: float) -> tuple[str, str]:
        output, errors = self.process.communicate(timeout=timeout)
        if output.strip():
            self.received.append({"mode": self.mode, **json.loads(output)})
        return output, errors


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command")
    reading = commands.add_parser("readers")
    reading.add_argument("url")
    reading.add_argument("--readers", type=int, default=100)
    parser.add_argument("--readers", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--asks", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-events", action="store_true", help="an RM that takes no events")
    parser.add_argument("--flush", type=float, default=None, help="serve_rest's stream_flush_interval")
    parser.add_argument(
        "--readers-nice",
        type=int,
        default=0,
        help="run the readers' process at this nice value (as if on other machines)",
    )
    parser.add_argument(
        "--in-loop",
        action="store_true",
        help="also the readers written to by the server's loop (stream_process=False), interleaved",
    )
    args = parser.parse_args()
    if args.command == "readers":
        readers_main(args.url, args.readers)
    else:
        rest = {} if args.flush is None else {"stream_flush_interval": args.flush}
        run(
            args.readers,
            args.nodes,
            args.asks,
            args.rounds,
            not args.no_events,
            args.in_loop,
            args.readers_nice,
            **rest,
        )


if __name__ == "__main__":
    main()
