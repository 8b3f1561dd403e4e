"""A PCT-style delivery order for the simulated runtime (``korral stress --simulated --explore pct``).

Probabilistic concurrency testing (Burckhardt, Kothari, Musuvathi, Nagarakatte, ASPLOS 2010) over
mailboxes instead of threads: each actor gets a random priority the first time it has a message ready,
and the ready actor with the highest priority is delivered next, so one actor runs ahead of the others
for long stretches (the uniform chooser interleaves them finely and rarely lets a message get far
ahead). At ``depth - 1`` change points, steps drawn uniformly from the first ``horizon`` deliveries,
the actor just chosen drops below every other. A bug that needs d ordering constraints between
messages is found with probability at least 1 / (n * k^(d-1)) per run (n actors, k steps), whatever
the bug, where uniform random choice gives no such bound.

The chooser draws from its own RNG (seeded by the schedule seed), so a seed replays exactly. While an
observer reads (``Simulation.frozen``) it counts nothing and leaves the choice to the simulation's
RNG, which ``frozen`` restores: how many reads a check makes does not shift the schedule.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from korral.actors.simulated import Pending, Simulation

EXPLORERS = ("uniform", "pct")
DEPTH = 3  # d: the ordering constraints a bug may need (2 change points)
HORIZON = 3000  # k: the change points fall in a seed's first k deliveries (a seed takes a few thousand)


class PCTChooser:
    """``Simulation.chooser``: the ready actor of highest priority; d - 1 priority change points."""

    def __init__(self, simulation: Simulation, seed: int, depth: int = DEPTH, horizon: int = HORIZON) -> None:
        self.simulation = simulation
        self.rng = random.Random(f"pct-{seed}")
        self.priority: dict[str, float] = {}
        self.change_points = sorted(self.rng.sample(range(1, horizon), max(0, depth - 1)))
        self.steps = 0
        self.lowest = 0.0  # demoted actors go below every initial priority (those are in (0, 1))

    def __call__(self, candidates: Sequence[Pending]) -> int | None:
        if self.simulation._frozen:
            return None  # an observer's reads: the simulation's RNG, restored after them
        self.steps += 1
        priority = self.priority
        best, best_priority = 0, -1e18
        for index, pending in enumerate(candidates):
            value = priority.get(pending.actor)
            if value is None:
                value = priority[pending.actor] = self.rng.random()
            if value > best_priority:
                best, best_priority = index, value
        if self.change_points and self.steps >= self.change_points[0]:
            self.change_points.pop(0)
            self.lowest -= 1.0
            priority[candidates[best].actor] = self.lowest
        return best


def install(simulation: Simulation, explore: str, seed: int) -> None:
    """Put the ``explore`` strategy's chooser on the simulation (uniform: the simulation's own)."""
    if explore not in EXPLORERS:
        raise ValueError(f"unknown exploration {explore!r}: one of {', '.join(EXPLORERS)}")
    if explore == "pct":
        simulation.chooser = PCTChooser(simulation, seed)
