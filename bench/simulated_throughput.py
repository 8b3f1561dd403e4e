"""Throughput of ``korral stress --simulated``: seeds per CPU-minute, deliveries per CPU-second, and the
share of deliveries that are the workload's (not a check's own queries, not timer ticks).

    PYTHONPATH=build/pp python bench/simulated_throughput.py [SEEDS] [OPERATIONS]

Runs seeds 1..SEEDS (default 200) of ``SimulatedStress(rms=1, operations=OPERATIONS)`` (default 30)
and counts every delivery by its message type (bench/README.md, "The simulated runtime"). Works on
older trees too (it only needs ``Core._traced`` and ``SimulatedStress``).
"""

from __future__ import annotations

import collections
import logging
import sys
import time
from typing import Any

from korral.core import Core
from korral.harness.simulated.stress import SimulatedStress

CHECK_TYPES = ("Snapshot", "FindPartitions")  # and every *Query


def main() -> None:
    logging.disable(logging.CRITICAL)
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    operations = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    counts: collections.Counter[str] = collections.Counter()
    traced = Core._traced

    def counting(self: Core, actor: str, message: Any) -> None:
        counts[type(message).__name__] += 1
        traced(self, actor, message)

    Core._traced = counting  # type: ignore[method-assign]
    harness = SimulatedStress(rms=1, operations=operations)
    wall, cpu = time.perf_counter(), time.process_time()
    violating = sum(bool(harness.run_seed(seed).violations) for seed in range(1, seeds + 1))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    total = sum(counts.values())
    checks = sum(n for kind, n in counts.items() if "Query" in kind or kind in CHECK_TYPES)
    ticks = counts["Periodic"]
    print(
        f"{seeds} seeds, {operations} operations each, {violating} violating: {seeds / cpu * 60:,.0f} seeds "
        f"per CPU-minute ({seeds / wall * 60:,.0f} per wall minute)"
    )
    print(
        f"{total:,} deliveries, {total / seeds:,.0f} per seed, {total / cpu:,.0f} per CPU-second; check "
        f"queries {checks / total:.1%}, timer ticks {ticks / total:.1%}, workload "
        f"{(total - checks - ticks) / total:.1%}"
    )
    print("by type:", counts.most_common(20))


if __name__ == "__main__":
    main()
