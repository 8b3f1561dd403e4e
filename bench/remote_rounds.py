"""korral bench --remote's two runs, alternating in one process for several rounds: per round the ratio
over gRPC / in-process, and the CPU µs per allocation of the core's process in each run and of the RM's
process over gRPC (sums of ``korral bench --remote``'s stages). Ratios within a round are what count on
a shared machine; the medians over rounds are printed last.

    .venv/bin/python bench/remote_rounds.py [--nodes 1000] [--asks 10000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time

from korral.harness.benchmark import remote, runner, workloads


class CollectorTime:
    """Seconds the cyclic collector ran (this process, every thread) and passes by generation."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.passes = [0, 0, 0]
        self._started = 0.0
        gc.callbacks.append(self._note)

    def _note(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.thread_time()
        else:
            self.seconds += time.thread_time() - self._started
            self.passes[info["generation"]] += 1

    def take(self) -> tuple[float, list[int]]:
        taken = (self.seconds, self.passes)
        self.seconds, self.passes = 0.0, [0, 0, 0]
        return taken


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--asks", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    runner.warm_up(options.nodes, options.asks)
    rows = []
    collector = CollectorTime()
    for number in range(options.rounds):
        collector.take()
        local = runner.run_korral(workloads.yunikorn(options.nodes, options.asks))
        local_gc = collector.take()
        served = remote.run_remote(options.nodes, options.asks)
        served_gc = collector.take()
        stages = served.stage_us
        row = {
            "round": number,
            "ratio": round(served.allocations_per_second / local.allocations_per_second, 3),
            "in_process_per_s": round(local.allocations_per_second),
            "grpc_per_s": round(served.allocations_per_second),
            "in_process_cpu_us": local.stage_us.get("total", 0.0),
            "core_cpu_us": round(sum(v for k, v in stages.items() if k.startswith("server")), 2),
            "rm_cpu_us": round(sum(v for k, v in stages.items() if k.startswith("rm")), 2),
            "gc_ms_in_process": round(local_gc[0] * 1e3, 1),
            "gc_ms_grpc": round(served_gc[0] * 1e3, 1),
            "gc_passes": [local_gc[1], served_gc[1]],
            "stages": stages,
        }
        row["core_cpu_ratio"] = round(row["in_process_cpu_us"] / max(row["core_cpu_us"], 1e-9), 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    summary = {
        key: round(statistics.median(row[key] for row in rows), 3)
        for key in ("ratio", "core_cpu_ratio", "in_process_cpu_us", "core_cpu_us", "rm_cpu_us")
    }
    print(json.dumps({"medians": summary}), flush=True)


if __name__ == "__main__":
    main()
