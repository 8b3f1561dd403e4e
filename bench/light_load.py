"""Light load against saturation on the scale shape: CPU per allocation, and latency, in one process.

Two measures, each run on a fresh core:

- ``paced``: ``korral bench --workload scale``'s run (asks arriving in requests of 20 ms of arrivals)
  at each rate given, alternating, korral only: allocations/s, p50/p99 latency and the process's CPU
  µs per allocation by stage. Its CPU per allocation moves with how far the core falls behind (a
  backlog makes batches larger), so on a busy machine it reads low and its latency high.
- ``waves``: the same requests, each sent alone and waited for until the core is idle: every batch is
  the small one a light load makes, whatever else runs on the machine. The process's CPU µs per
  allocation and the handlers' CPU µs per allocation by message type: the fixed costs a small batch
  pays (intake, wake-ups, flushes) without the pacing's noise. ``--callgrind``: machine instructions
  per allocation instead, counted by valgrind's callgrind over the waves alone (every thread's; the
  machine's load does not move them): needs valgrind, gcc and valgrind's headers.

    .venv/bin/python bench/light_load.py paced [--asks 100000] [--rates 3500,25000] [--rounds 1]
    .venv/bin/python bench/light_load.py waves [--waves 300] [--rate 3500] [--warm 100] [--callgrind]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import time
from collections.abc import Callable

import korral
from korral import si
from korral.harness.benchmark import runner, workloads

TIMEOUT = 600.0


def paced(asks: int, rates: list[float], rounds: int) -> None:
    for round_number in range(rounds):
        for rate in rates:
            result = runner.run_korral(workloads.scale(asks=asks, rate=rate))
            line = {
                "round": round_number,
                "rate": rate,
                "allocations": result.allocations,
                "allocations_per_second": round(result.allocations_per_second),
                "p50_ms": round(result.latency_ms_p50, 1),
                "p99_ms": round(result.latency_ms_p99, 1),
                "messages_per_allocation": round(result.messages_per_allocation, 2),
                "cpu_us_per_allocation": result.stage_us,
            }
            print(json.dumps(line), flush=True)


def waves(
    count: int,
    rate: float,
    warm: int = 0,
    around: tuple[Callable[[], object], Callable[[], object]] | None = None,
) -> None:
    """``around``: called just before the measured waves and just after (callgrind's counting)."""
    per_wave = max(50, int(rate * 0.02))  # the scale workload's requests: 20 ms of arrivals
    workload = workloads.scale(asks=(warm + count) * per_wave, rate=rate)
    rm = runner.BenchRM(workload.node_count)
    with korral.start(**runner.CORE_SETTINGS) as core:
        core.register_resource_manager(
            si.RegisterResourceManagerRequest(rm_id=workload.rm_id, config=workload.config), rm
        )
        core.update_node(workload.nodes)
        if not rm.nodes_done.wait(TIMEOUT):
            raise TimeoutError("nodes were not registered in time")
        core.update_application(workload.applications)
        core.wait_until_idle(TIMEOUT)
        for index, wave in enumerate(workload.waves):
            if index == warm:
                messages, made_before = core.tracker.sent_total, rm.arrived
                if around is not None:
                    around[0]()
                core.tracker.timing.start()
                cpu_started, started = time.process_time(), time.perf_counter()
            for request in wave.requests:
                core.update_allocation(request)
            core.wait_until_idle(TIMEOUT)
        cpu, wall = time.process_time() - cpu_started, time.perf_counter() - started
        handlers = core.tracker.timing.stop()
        if around is not None:
            around[1]()
        sent = core.tracker.sent_total - messages
    made = rm.arrived - made_before
    per = 1e6 / made
    print(
        json.dumps(
            {
                "waves": count,
                "warm_waves": warm,
                "asks_per_wave": per_wave,
                "allocations": made,
                "cpu_us_per_allocation": round(cpu * per, 1),
                "wall_ms_per_wave": round(wall / count * 1e3, 2),
                "messages_per_allocation": round(sent / made, 2),
                "handlers_us_per_allocation": {
                    name: round(seconds * per, 1)
                    for name, seconds in sorted(handlers.items(), key=lambda item: -item[1])
                    if seconds * per >= 0.05
                },
            }
        ),
        flush=True,
    )


def callgrind(count: int, rate: float, warm: int) -> None:
    """Run ``waves`` under callgrind, counting the waves alone; print instructions per allocation."""
    from callgrind_window import count_window  # bench/ is the script's directory: on sys.path

    arguments = ["waves", "--waves", str(count), "--rate", str(rate), "--warm", str(warm)]
    instructions, printed = count_window(__file__, arguments)
    made = json.loads(printed.strip().splitlines()[-1])["allocations"]
    print(
        json.dumps({"waves": count, "allocations": made, "instructions_per_allocation": instructions // made})
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("measure", choices=("paced", "waves"))
    parser.add_argument("--asks", type=int, default=100_000)
    parser.add_argument("--rates", default="3500,25000")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--waves", type=int, default=300)
    parser.add_argument("--rate", type=float, default=3500.0)
    parser.add_argument("--warm", type=int, default=100, help="waves sent before measuring")
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--under-callgrind", metavar="LIBRARY", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.under_callgrind:
        toggle = ctypes.CDLL(arguments.under_callgrind)
        waves(arguments.waves, arguments.rate, arguments.warm, (toggle.cg_start, toggle.cg_stop))
    elif arguments.callgrind:
        callgrind(arguments.waves, arguments.rate, arguments.warm)
    elif arguments.measure == "paced":
        paced(arguments.asks, [float(rate) for rate in arguments.rates.split(",")], arguments.rounds)
    else:
        waves(arguments.waves, arguments.rate, arguments.warm)


if __name__ == "__main__":
    main()
