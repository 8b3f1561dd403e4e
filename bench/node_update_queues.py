"""What one node update costs a partition with many queues (the root's max is the capacity a node
changes; no queue's limit should make every node update a pass over every queue).

For each queue count (parents of 99 leaves, as ``bench/config_stall.py`` builds them) an RM registers
the queues, then adds nodes one at a time, each waited for until the core is idle again: the wall time
and the process's CPU time per node update. The core runs with metrics on (``serve_rest``), as a
served core does.

    .venv/bin/python bench/node_update_queues.py [queue counts...]   (default: 300 3000 20000)
"""

from __future__ import annotations

import sys
import time

from config_stall import NODE, many_queues

import korral
from korral import testing as t
from korral.harness.benchmark.runner import CORE_SETTINGS
from korral.server.switch_interval import SERVING_SWITCH_INTERVAL

UPDATES = 10
TIMEOUT = 600.0


def one_count(queues: int) -> tuple[float, float]:
    """Milliseconds of wall and of CPU time per node update, the median of ``UPDATES``."""
    with korral.start(**CORE_SETTINGS) as core:  # as korral serve and korral bench run it
        core.serve_rest("127.0.0.1:0", switch_interval=SERVING_SWITCH_INTERVAL)  # metrics on, as served
        core.register_resource_manager(t.register("rm", many_queues(queues)), t.RecordingRM("rm"))
        core.wait_until_idle(TIMEOUT)
        walls: list[float] = []
        cpus: list[float] = []
        for node in range(UPDATES):
            wall, cpu = time.perf_counter(), time.process_time()
            core.update_node(t.nodes("rm", [f"node-{node}"], NODE))
            core.wait_until_idle(TIMEOUT)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
    return sorted(walls)[UPDATES // 2] * 1e3, sorted(cpus)[UPDATES // 2] * 1e3


def main() -> None:
    counts = [int(arg) for arg in sys.argv[1:]] or [300, 3_000, 20_000]
    for queues in counts:
        wall, cpu = one_count(queues)
        print(
            f"queues={queues:>7,} node update: wall {wall:8.1f} ms  cpu {cpu:8.1f} ms (medians of {UPDATES})"
        )


if __name__ == "__main__":
    main()
