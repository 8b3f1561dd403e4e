"""Node registration cost: N identical nodes in one NodeRequest, through ``korral.start()``.

Prints the rate the RM sees (nodes accepted per second), the process's CPU µs per node until the core
is idle (the scheduler's view included; less sensitive to a loaded machine than wall time) and the
handlers' CPU µs per node.

    .venv/bin/python bench/node_registration.py [nodes]
"""

from __future__ import annotations

import gc
import sys
import time

import korral
from korral import si
from korral.harness.benchmark import workloads
from korral.harness.benchmark.runner import CORE_SETTINGS, BenchRM

TIMEOUT = 600.0


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    workload = workloads.yunikorn(nodes=count, asks=10)
    rm = BenchRM(workload.node_count)
    gc.collect()
    with korral.start(**CORE_SETTINGS) as core:  # as korral serve and korral bench run it
        core.register_resource_manager(
            si.RegisterResourceManagerRequest(rm_id=workload.rm_id, config=workload.config), rm
        )
        core.tracker.timing.start()
        cpu_started = time.process_time()
        started = time.perf_counter()
        core.update_node(workload.nodes)
        if not rm.nodes_done.wait(TIMEOUT):
            raise TimeoutError("nodes were not registered in time")
        accepted = time.perf_counter()
        core.wait_until_idle(TIMEOUT)
        cpu_seconds = time.process_time() - cpu_started
        handlers = core.tracker.timing.stop()
    top = sorted(handlers.items(), key=lambda item: -item[1])[:4]
    print(
        f"nodes={count} registrations/s={count / (accepted - started):,.0f} "
        f"cpu_us/node={cpu_seconds / count * 1e6:.1f} "
        + " ".join(f"{name}={seconds / count * 1e6:.1f}" for name, seconds in top)
    )


if __name__ == "__main__":
    main()
