"""Another RM's latency while one RM registers a big configuration.

RM B is registered with a root queue; RM A then registers N queues (default 100,000: parents of 99
leaves) on another thread. Meanwhile B runs rounds of a node update (answered through its callback)
and a node query, for as long as A's registration lasts. Prints A's registration time, B's rounds and
their latency percentiles, and the cyclic GC's longest pauses (the process-wide stalls left).

    .venv/bin/python bench/config_stall.py [queues]
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from typing import Any

import korral
from korral import testing as t
from korral.harness.benchmark.runner import CORE_SETTINGS

NODE = {"memory": 100_000_000, "vcore": 20_000}
ROOT_ONLY = "partitions:\n  - name: default\n    queues:\n      - name: root\n        submitacl: '*'\n"


def many_queues(count: int) -> str:
    lines = ["partitions:", "  - name: default", "    queues:", "      - name: root", "        queues:"]
    made = parent = 0
    while made < count:
        lines += [f"          - name: p{parent}", "            queues:"]
        leaves = min(99, count - made - 1) or 1
        lines += [f"              - name: q{parent}x{leaf}" for leaf in range(leaves)]
        made += 1 + leaves
        parent += 1
    return "\n".join(lines) + "\n"


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    text = many_queues(count)
    pauses: list[tuple[int, float]] = []
    began: dict[str, float] = {}

    def watch_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began["gc"] = time.perf_counter()
        elif "gc" in began:
            pauses.append((info["generation"], time.perf_counter() - began["gc"]))

    gc.callbacks.append(watch_gc)
    with korral.start(**CORE_SETTINGS) as core:  # as korral serve and korral bench run it
        rm_b = t.RecordingRM("b")
        core.register_resource_manager(t.register("b", ROOT_ONLY), rm_b)
        busy = threading.Event()
        busy.set()
        took: dict[str, float] = {}

        def register_a() -> None:
            start = time.perf_counter()
            core.register_resource_manager(t.register("a", text), t.RecordingRM("a"))
            took["a"] = time.perf_counter() - start
            busy.clear()

        thread = threading.Thread(target=register_a)
        thread.start()
        latencies: list[float] = []
        while busy.is_set():
            node_id = f"b{len(latencies)}"
            start = time.perf_counter()
            core.update_node(t.nodes("b", [node_id], NODE))
            rm_b.wait_for(lambda r, n=node_id: n in r.accepted_nodes, timeout=600)
            assert core.node("[b]default", node_id) is not None
            latencies.append(time.perf_counter() - start)
        thread.join()
    gc.callbacks.remove(watch_gc)
    latencies.sort()

    def ms(quantile: float) -> float:
        return latencies[min(len(latencies) - 1, int(quantile * len(latencies)))] * 1000

    print(f"A registered {count:,} queues in {took['a']:.1f} s; B ran {len(latencies)} rounds meanwhile")
    print(
        f"B's round (node update + its answer + a node query), ms: median {ms(0.5):.1f}, p90 {ms(0.9):.1f}, "
        f"p99 {ms(0.99):.1f}, max {latencies[-1] * 1000:.1f}; over 100 ms: "
        f"{sum(1 for x in latencies if x > 0.1)}"
    )
    longest = sorted(pauses, key=lambda p: -p[1])[:3]
    print("longest GC pauses (generation, ms):", [(g, round(d * 1000, 1)) for g, d in longest])


if __name__ == "__main__":
    main()
