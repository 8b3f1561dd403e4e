"""The simulated runtime's own cost per delivery, against the pooled threads runtime.

Pairs of pooled actors bounce a trivial message back and forth; the same actor class runs on a
partition-style ``ActorPool`` (threads) and on a ``Simulation`` (plain, then perturbed). Reported per
CPU-second of this process as well as by the wall clock (the shared machines are often loaded).

    .venv/bin/python bench/simulated_overhead.py
"""

from __future__ import annotations

import time
from typing import Any

import attrs

from korral.actors.base import Handle, PoolActor
from korral.actors.clocks import Clocks
from korral.actors.simulated import Simulation
from korral.actors.starting import start_actor, start_pool
from korral.actors.tracker import SimulatedTracker, Tracker

MESSAGES = 200_000
PAIRS = 4


@attrs.frozen
class Ping:
    left: int
    to: str


class Bouncer(PoolActor):
    def __init__(self, tracker: Tracker, name: str, peers: dict[str, Handle], *, pool: Any) -> None:
        super().__init__(tracker, name, pool=pool)
        self.peers = peers

    def on_Ping(self, message: Ping) -> None:
        if message.left > 0:
            self.peers[message.to].tell(Ping(message.left - 1, self.name))


def run(mode: str) -> tuple[float, float]:
    simulation = None
    if mode != "pooled":
        simulation = Simulation(1)
        if mode == "perturbed":
            simulation.perturb()
    tracker = SimulatedTracker(Clocks.simulated(simulation)) if simulation is not None else Tracker()
    pool = start_pool(tracker, "bench")
    peers: dict[str, Handle] = {}
    for index in range(2 * PAIRS):
        peers[f"b{index}"] = start_actor(Bouncer, tracker, f"b{index}", peers, pool=pool)
    cpu, wall = time.process_time(), time.perf_counter()
    for index in range(PAIRS):
        peers[f"b{2 * index}"].tell(Ping(MESSAGES // PAIRS, f"b{2 * index + 1}"))
    if simulation is not None:
        simulation.run_until_idle()
    else:
        tracker.wait_idle(600)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    pool.stop()
    return MESSAGES / cpu, MESSAGES / wall


def main() -> None:
    for mode in ("pooled", "simulated", "perturbed") * 2:
        per_cpu, per_wall = run(mode)
        print(f"{mode:<10} {per_cpu:>10,.0f} deliveries per CPU-second  {per_wall:>10,.0f} per wall second")


if __name__ == "__main__":
    main()
