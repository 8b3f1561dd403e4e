"""Light load against saturation on the scale shape: CPU per allocation, and latency, in one process.

Two measures, each run on a fresh core:

- ``paced``: ``korral bench --workload scale``'s run (asks arriving in requests of 20 ms of arrivals)
  at each rate given, alternating, korral only: allocations/s, p50/p99 latency and the process's CPU
  µs per allocation by stage. Its CPU per allocation moves with how far the core falls behind (a
  backlog makes batches larger), so on a busy machine it reads low and its latency high.
- ``waves``: the same requests, each sent alone and waited for until the core is idle: every batch is
  the small one a light load makes, whatever else runs on the machine. The process's CPU µs per
  allocation and the handlers' CPU µs per allocation by message type: the fixed costs a small batch
  pays (intake, wake-ups, flushes) without the pacing's noise.

    .venv/bin/python bench/light_load.py paced [--asks 100000] [--rates 3500,25000] [--rounds 1]
    .venv/bin/python bench/light_load.py waves [--waves 300] [--rate 3500]
"""

from __future__ import annotations

import argparse
import json
import time

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


def waves(count: int, rate: float) -> None:
    per_wave = max(50, int(rate * 0.02))  # the scale workload's requests: 20 ms of arrivals
    workload = workloads.scale(asks=count * per_wave, rate=rate)
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
        messages = core.tracker.sent_total
        core.tracker.timing.start()
        cpu_started, started = time.process_time(), time.perf_counter()
        for wave in workload.waves:
            for request in wave.requests:
                core.update_allocation(request)
            core.wait_until_idle(TIMEOUT)
        cpu, wall = time.process_time() - cpu_started, time.perf_counter() - started
        handlers = core.tracker.timing.stop()
        sent = core.tracker.sent_total - messages
    made = rm.arrived
    per = 1e6 / made
    print(
        json.dumps(
            {
                "waves": count,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("measure", choices=("paced", "waves"))
    parser.add_argument("--asks", type=int, default=100_000)
    parser.add_argument("--rates", default="3500,25000")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--waves", type=int, default=300)
    parser.add_argument("--rate", type=float, default=3500.0)
    arguments = parser.parse_args()
    if arguments.measure == "paced":
        paced(arguments.asks, [float(rate) for rate in arguments.rates.split(",")], arguments.rounds)
    else:
        waves(arguments.waves, arguments.rate)


if __name__ == "__main__":
    main()
