"""A range of ``korral stress --simulated`` seeds, on this process or spread over ``--jobs`` processes.

Either way the report is the same: the first violating seed of the range (every seed before it was
run, so it is the one a single process finds), the seeds and steps run, the CPU time they took (this
process's, or the sum of the workers'), and the coverage of the seeds run. Worker ``i`` of ``N`` runs
the range's positions ``i, i + N, ...`` in order and stops at its first violation, or at a position
past the first violation any worker found (a shared number), or at the time budget.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import attrs

from korral.actors import gc_tuning
from korral.harness.simulated.coverage import Coverage
from korral.harness.simulated.stress import SimulatedOutcome, SimulatedStress

Run = int | tuple[int, int]  # a workload seed (its own schedule), or (workload seed, schedule seed)
NONE_FOUND = 1 << 62


@attrs.frozen(kw_only=True)
class RangeResult:
    """What a range of seeds gave: the first violation (its position in the range) or None."""

    found: SimulatedOutcome | None
    position: int  # of ``found`` in the range; NONE_FOUND when none
    count: int  # seeds run
    steps: int
    cpu_seconds: float  # process time of the seeds (summed over the workers)
    coverage: Coverage | None


def _run_share(
    settings: dict[str, Any],
    runs: Sequence[Run],
    start: int,
    stride: int,
    deadline: float | None,
    first: Any,
    coverage: bool,
    progress: Callable[[int, int], None] | None = None,
) -> RangeResult:
    """Positions ``start, start + stride, ...`` of ``runs``; ``first`` (a shared integer, or a plain
    holder in one process) is the lowest violating position any share found so far."""
    harness = SimulatedStress(**settings)
    harness.coverage = Coverage() if coverage else None
    with _collector_for_seeds():
        return _run_seeds(harness, runs, start, stride, deadline, first, progress)


@contextlib.contextmanager
def _collector_for_seeds() -> Iterator[None]:
    """The cyclic collector's thresholds raised for the whole range (each core raises them only
    while it runs: between seeds they fell back), and what the process holds before the first seed
    (modules, the harness) frozen out of its full collections: a seed leaves next to nothing behind,
    yet each full collection traversed the whole heap. Unfrozen and restored after."""
    thresholds = gc_tuning.tune()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        gc_tuning.restore(thresholds)


def _run_seeds(
    harness: SimulatedStress,
    runs: Sequence[Run],
    start: int,
    stride: int,
    deadline: float | None,
    first: Any,
    progress: Callable[[int, int], None] | None,
) -> RangeResult:
    cpu_started = time.process_time()
    count = steps = 0
    found: SimulatedOutcome | None = None
    position = NONE_FOUND
    for index in range(start, len(runs), stride):
        if index > first.value:
            break
        run = runs[index]
        workload, schedule = run if isinstance(run, tuple) else (run, run)
        outcome = harness.run_seed(workload, schedule_seed=schedule)
        count += 1
        steps += outcome.steps
        if progress is not None:
            progress(count, steps)
        if outcome.violations:
            found, position = outcome, index
            if hasattr(first, "get_lock"):
                with first.get_lock():
                    first.value = min(first.value, index)
            else:
                first.value = min(first.value, index)
            break
        if deadline is not None and time.monotonic() >= deadline:
            break
    return RangeResult(
        found=found,
        position=position,
        count=count,
        steps=steps,
        cpu_seconds=time.process_time() - cpu_started,
        coverage=harness.coverage,
    )


@attrs.define
class _Holder:
    value: int = NONE_FOUND


_shared_first: Any = None  # a worker's view of the shared lowest violating position


def _init_worker(first: Any) -> None:
    global _shared_first
    _shared_first = first
    import logging

    logging.getLogger("korral").setLevel(logging.CRITICAL)  # violations are reported, not logged


def _worker(
    settings: dict[str, Any],
    runs: Sequence[Run],
    start: int,
    stride: int,
    deadline: float | None,
    coverage: bool,
) -> RangeResult:
    return _run_share(settings, runs, start, stride, deadline, _shared_first, coverage)


def search_range(
    settings: dict[str, Any],
    runs: Sequence[Run],
    *,
    jobs: int = 1,
    budget: float | None = None,
    coverage: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> RangeResult:
    """Run ``runs`` (``SimulatedStress(**settings)``) until the first violation, on ``jobs`` processes;
    ``budget``: wall seconds (None: every seed)."""
    deadline = None if budget is None else time.monotonic() + budget
    if jobs <= 1:
        return _run_share(settings, runs, 0, 1, deadline, _Holder(), coverage, progress)
    context = multiprocessing.get_context("fork")
    first = context.Value("q", NONE_FOUND)
    with ProcessPoolExecutor(
        max_workers=jobs, mp_context=context, initializer=_init_worker, initargs=(first,)
    ) as pool:
        shares = [
            pool.submit(_worker, settings, runs, index, jobs, deadline, coverage) for index in range(jobs)
        ]
        results = [share.result() for share in shares]
    winner = min(results, key=lambda result: result.position)
    total = Coverage() if coverage else None
    for result in results:
        if total is not None and result.coverage is not None:
            total = total + result.coverage
    return RangeResult(
        found=winner.found,
        position=winner.position,
        count=sum(result.count for result in results),
        steps=sum(result.steps for result in results),
        cpu_seconds=sum(result.cpu_seconds for result in results),
        coverage=total,
    )
