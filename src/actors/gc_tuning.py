"""The cyclic garbage collector's thresholds while a core runs (``korral.start(tune_gc=True)``).

A partition holds many long-lived objects (node actors, asks, allocations) and every allocation creates
a few short-lived ones. At Python's defaults (700, 10, 10) young collections run so often, and full
collections traverse the whole heap so often, that they cost a third of the throughput at 10,000
nodes and stop every thread for up to a second at 100,000 asks (a REST request waiting behind one sees
it). Young cycles still die young at these thresholds; what reaches the oldest generation waits for a
full collection, at most one per ~10 million allocations (~70,000 at the defaults). Measured in
bench/README.md ("Process-wide settings").

Full collections must still run: whatever is left in a reference cycle waits for one. At a generation-2
threshold of 1,000 (one full collection per ~100 million allocations: never, in practice) a soak that
made a cycle per removed actor grew from 76 to 1,099 MB in 300 s. Removed actors make no cycles
(``PooledActor._teardown``), and at 100 a full collection may run once per ~10 million allocations
(~1.5 million per 100,000-ask run of ``korral bench``: none during one), and runs only when the oldest
generation grew by a quarter since the last (CPython's own rule): bounded, and amortised over the
allocations that made the heap grow.
"""

from __future__ import annotations

import gc

GENERATION0_THRESHOLD = 10_000
GENERATION2_THRESHOLD = 100
# node actors a partition starts (after registrations) before it promotes them (promote_survivors)
PROMOTE_AFTER_NODES = 1_000


def tuned(current: tuple[int, int, int]) -> tuple[int, int, int]:
    """The thresholds to run with: raised where ``current`` is lower, never lowered."""
    return (
        max(current[0], GENERATION0_THRESHOLD),
        current[1],
        max(current[2], GENERATION2_THRESHOLD),
    )


def tune() -> tuple[int, int, int] | None:
    """Raise the thresholds; returns the ones to restore, or None when nothing changed."""
    current = gc.get_threshold()
    wanted = tuned(current)
    if wanted == current:
        return None
    gc.set_threshold(*wanted)
    return current


def restore(previous: tuple[int, int, int] | None) -> None:
    """Put back what ``tune`` changed, unless someone changed the thresholds since."""
    if previous is not None and gc.get_threshold() == tuned(previous):
        gc.set_threshold(*previous)


def promote_survivors() -> None:
    """Collect the young generations now, so that what survives moves to the oldest one.

    A partition calls this when it has started many new nodes' actors (~10 objects each), before
    asks arrive. Left young, they would be traversed again by the next collection of generation 1,
    which at 10,000 nodes came in the middle of scheduling and took ~50 ms (a tenth of scheduling
    10,000 asks). Collected here, the same work is done once, off the scheduling path, and the
    oldest generation is collected rarely while the core runs (``tune``)."""
    gc.collect(1)
