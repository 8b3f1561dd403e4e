"""``korral stress``: random SI operations from several RMs with the invariants checked; its modes
(threads, ``--soak``, ``--preemption``; ``--simulated`` is ``korral.cli.simulated``'s)."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

import click

from korral.cli.checks import refuse_inapplicable, stress_mode
from korral.cli.group import main, plural
from korral.cli.options import count_option, flag_option, real_option, seed_option
from korral.harness import faults

if TYPE_CHECKING:  # rich is imported when a command runs, not for --help
    from rich.console import Console

    from korral.harness.stress.flatness import FlatnessVerdict


@main.command(short_help="Random SI operations from several RMs; invariants checked.")
@count_option("--rms", "simulated resource managers, one thread each", default=2, maximum=16)
@real_option("--duration", "seconds", default=30.0, minimum=0.5)
@seed_option(None, "replay a run (default: a fresh random seed)")
@real_option("--checkpoint", "seconds between invariant checks", default=2.0, minimum=0.1)
@click.option(
    "--inject-fault",
    "fault",
    type=click.Choice(sorted(faults.KNOWN)),
    default=None,
    help="test only: break an invariant on purpose; the run must catch it",
)
@flag_option(
    "--soak",
    "instead: application cycles beside a never-idle second RM, printing RSS, threads and live "
    "actors every --every cycles (runs --duration seconds or --cycles cycles); exit 1 when one grows "
    "after warm-up past its limit (RSS 2 MB, threads 0.5, live actors 200 per 10,000 cycles)",
)
@count_option("--cycles", "--soak: stop after this many cycles")
@count_option("--every", "--soak: cycles per sample", default=1000)
@flag_option("--simulated", "run many seeds of a small scenario on the deterministic simulated runtime")
@count_option(
    "--seeds",
    "with --simulated: seeds to run; given without --duration, all of them (no time limit)",
    default=1000,
)
@count_option("--operations", "SI calls per seed", default=30)
@click.option(
    "--schedule-seed",
    type=int,
    default=None,
    help="with --simulated: the delivery order's seed apart from the workload's (--seed); with "
    "--seeds N: workload --seed under schedule seeds X..X+N-1 (default: each seed its own schedule)",
)
@flag_option("--replay", "with --simulated --seed S: re-run that seed, full trace")
@flag_option("--no-perturb", "with --simulated: no mailbox delays, no timer skew")
@click.option(
    "--explore",
    type=click.Choice(["uniform", "pct"]),
    default="uniform",
    show_default=True,
    help="with --simulated: the delivery order, uniform among ready mailboxes or PCT (priorities, "
    "2 change points)",
)
@click.option(
    "--env-faults",
    default="all",
    show_default=True,
    help="with --simulated: the environment's seeded faults, all, none or a comma-separated list of "
    "callbacks (RM callbacks that raise), jumps (virtual clock jumps), duplicates (requests resent "
    "after a reconnect), handlers (actor handlers that raise), cutoffs (scheduling batches cut short), "
    "restarts (core restarts with recovery)",
)
@count_option(
    "--jobs",
    "with --simulated: processes the seed range is spread over (the same report: the first violating "
    "seed, the seeds, steps and CPU time summed, the coverage)",
    default=1,
    maximum=64,
)
@flag_option(
    "--coverage",
    "with --simulated: the coverage report with how often each message kind, state and SI operation "
    "was reached (without it: only what was never reached)",
)
@flag_option(
    "--no-deep-queues",
    "with --simulated: leave out of the workload mix the applications the placement rules put three "
    "levels deep (root.c.TEAM.NS)",
)
@flag_option(
    "--preemption",
    "instead: guaranteed queues, borrowers, urgent and required-node asks that preempt; the "
    "preemption laws checked for every victim (with --simulated: seeds on the simulated runtime)",
)
@click.pass_context
def stress(
    ctx: click.Context,
    rms: int,
    duration: float,
    seed: int | None,
    checkpoint: float,
    fault: str | None,
    soak: bool,
    cycles: int | None,
    every: int,
    simulated: bool = False,
    seeds: int = 1000,
    operations: int = 30,
    schedule_seed: int | None = None,
    replay: bool = False,
    no_perturb: bool = False,
    preemption: bool = False,
    explore: str = "uniform",
    env_faults: str = "all",
    jobs: int = 1,
    coverage: bool = False,
    no_deep_queues: bool = False,
) -> None:
    """Hammer one core from several RMs with random SI operations and check its invariants.

    Exit 0 when no invariant was violated and RSS and threads stayed flat; 1 with the violation, the
    seed and the shortest sequence of operations that reproduces it, and the command line that
    replays it. RSS and threads are sampled at every checkpoint and printed at the start, after
    warm-up (the first quarter of the run, at least two minutes) and at the end; exit 1 too when one
    grows after warm-up (a fitted line over RSS 2 MB or threads 0.5 a minute, and by more than 10% of
    the RSS at warm-up + 5 MB or 4 threads over the run; a run with fewer than 10 samples after
    warm-up is not judged).
    The harness's own memory does not grow with the run's length: its recorded operations spill to
    disk, and each RM keeps the records of its live registration only.
    """
    from rich.console import Console

    refuse_inapplicable(ctx, stress_mode(soak, preemption, simulated or replay))
    # never wrapped: a CI log (80 columns when piped) must keep the replay command on one line
    console = Console(soft_wrap=True)
    if soak:
        _soak(console, cycles, duration, every)
        return
    if preemption:
        _stress_preemption(console, rms, duration, seed, checkpoint, simulated, seeds, operations)
        return
    if simulated or replay:
        from korral.cli.simulated import stress_simulated

        # --seeds N without --duration runs all N seeds: no default time limit cuts them short
        only_seeds = ctx.get_parameter_source("duration") is click.core.ParameterSource.DEFAULT and (
            ctx.get_parameter_source("seeds") is not click.core.ParameterSource.DEFAULT
        )
        budget = None if only_seeds else duration
        stress_simulated(
            console,
            rms,
            budget,
            seed,
            fault,
            seeds,
            operations,
            replay,
            not no_perturb,
            schedule_seed,
            explore,
            env_faults,
            jobs,
            coverage,
            not no_deep_queues,
        )
        return
    _stress_threads(console, rms, duration, seed, checkpoint, fault)


def _stress_threads(
    console: Console, rms: int, duration: float, seed: int | None, checkpoint: float, fault: str | None
) -> None:
    """``korral stress``: RMs on threads for --duration seconds, invariants at every checkpoint; on a
    violation, the shortest sequence that reproduces it and the command that replays it (exit 1)."""
    import random
    import time

    from korral.harness.stress import REPRODUCTIONS, StressRun

    seed = seed if seed is not None else random.SystemRandom().randrange(1, 10**6)
    console.print(
        f"korral stress: {plural(rms, 'RM')}, {duration:g}s, seed {seed}"
        + (f", injected fault {fault!r}" if fault else "")
    )
    last = [0.0]

    def progress(remaining: float, operations: int, checkpoints: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 5.0 or remaining <= 0:
            last[0] = now
            console.print(
                f"  {plural(operations, 'operation')}, {plural(checkpoints, 'checkpoint')} passed, "
                f"{remaining:.0f}s left"
            )

    # the simulated RMs raise from their callbacks on purpose: korral contains and counts those
    callbacks_log = logging.getLogger("korral.callbacks")
    level = callbacks_log.level
    callbacks_log.setLevel(logging.CRITICAL)
    try:
        result = StressRun(rms, duration, seed, checkpoint=checkpoint, fault=fault, progress=progress).run()
    finally:
        callbacks_log.setLevel(level)
    if not result.violations:
        if result.core_releases:
            made = ", ".join(f"{count:,} {kind}" for kind, count in sorted(result.core_releases.items()))
            console.print(f"releases the core made (the RMs confirm them): {made}")
        grown = _print_flatness(console, result.flatness)
        console.print(
            ("[red]GROWTH[/red]" if grown else "[green]OK[/green]")
            + f": {plural(result.operations, 'operation')}, "
            f"{plural(result.checkpoints, 'checkpoint')}, "
            f"{plural(result.callback_failures, 'RM callback failure')} injected on purpose and contained, "
            f"{plural(result.restarts, 'core restart')} recovered, no violation"
            + (f"; {' and '.join(grown)} grew after warm-up" if grown else "")
        )
        if grown:
            sys.exit(1)
        return
    console.print(
        f"[red]VIOLATION[/red] (seed {result.seed}, after {plural(result.operations, 'operation')}):"
    )
    for violation in result.violations[:20]:
        console.print(f"  - {violation}", markup=False)
    if result.reproduced:
        console.print(
            f"shortest sequence found that reproduces it ({plural(len(result.minimal), 'operation')}, "
            f"failing on each of {REPRODUCTIONS} fresh replays), replay with:"
        )
    else:
        console.print(
            "replayed one operation at a time, the operations do not show it every time (a race that "
            f"depends on timing); all {plural(len(result.minimal), 'operation')}, replay with:"
        )
    console.print(
        f"korral stress --seed {result.seed} --rms {rms}" + (f" --inject-fault {fault}" if fault else ""),
        markup=False,
    )
    for op in result.minimal[:200]:
        console.print(f"  {op.seq:>6}  rm{op.rm}  {op.description}", markup=False)
    if result.reproduced:
        from korral.harness.repro import threaded_pytest_case

        case = threaded_pytest_case(
            result.minimal, seed=result.seed, rms=rms, fault=fault, recorded_keys=result.recorded_keys
        )
        console.print("the shortest sequence as a pytest case (it fails while a replay shows a violation):")
        console.print("# ---- 8< ----", markup=False)
        console.print(case, markup=False, highlight=False)
        console.print("# ---- >8 ----", markup=False)
    sys.exit(1)


def _print_flatness(console: Console, verdict: FlatnessVerdict) -> list[str]:
    """The run's RSS and threads at its start, after warm-up and at its end, and whether either grew
    after warm-up; the names of those that did."""
    from korral.harness.stress.flatness import STRESS_LIMITS, WARMUP_FRACTION, WARMUP_SECONDS

    if verdict.missing:
        console.print(f"RSS and threads not judged: {verdict.missing}", markup=False)
        return []
    console.print(
        f"RSS and threads, {verdict.samples} samples (warm-up: the first {WARMUP_FRACTION:.0%} and at "
        f"least {WARMUP_SECONDS:.0f}s, {verdict.warmup_seconds:.0f}s; a measure grows past "
        + "; ".join(limit.describe() for limit in STRESS_LIMITS)
        + "):",
        markup=False,
    )
    for trend in verdict.trends:
        console.print(f"  {trend.label():<6} {trend.describe()}", markup=False)
    return verdict.grows


def _soak(console: Console, cycles: int | None, duration: float, every: int) -> None:
    """``korral stress --soak``: one line per sample, then the verdict (exit 1: something grows)."""
    from korral.harness.soak import run_soak

    if not run_soak(console.print, cycles, duration, every):
        sys.exit(1)


def _stress_preemption(
    console: Console,
    rms: int,
    duration: float,
    seed: int | None,
    checkpoint: float,
    simulated: bool,
    seeds: int,
    operations: int,
) -> None:
    """``korral stress --preemption``: threads for --duration seconds, or --simulated seeds within it."""
    import random
    import time

    from korral.harness.stress import PreemptionResult, PreemptionStress

    logging.getLogger("korral").setLevel(logging.CRITICAL)  # violations are reported below
    if simulated:
        first = seed if seed is not None else 1
        console.print(
            f"korral stress --preemption --simulated: seeds {first}..{first + seeds - 1}, "
            f"{plural(rms, 'RM')}, {operations} operations each, at most {duration:g}s"
        )
        harness = PreemptionStress(rms=rms)
        result = harness.run_seeds(range(first, first + seeds), operations=operations, budget=duration)
        again = f"korral stress --preemption --simulated --rms {rms} --operations {operations} --seeds 1"
    else:
        seed = seed if seed is not None else random.SystemRandom().randrange(1, 10**6)
        console.print(f"korral stress --preemption: {plural(rms, 'RM')}, {duration:g}s, seed {seed}")
        last = [0.0]

        def progress(remaining: float, so_far: PreemptionResult) -> None:
            now = time.monotonic()
            if now - last[0] >= 10.0 or remaining <= 0:
                last[0] = now
                console.print(
                    f"  {plural(so_far.checkpoints, 'checkpoint')} passed, {so_far.victims:,} victims, "
                    f"{so_far.preemptors_allocated:,} urgent asks allocated, {remaining:.0f}s left"
                )

        harness = PreemptionStress(rms=rms, seed=seed, checkpoint=checkpoint)
        result = harness.run(duration, progress=progress)
        again = f"korral stress --preemption --rms {rms}"
    figures = (
        f"{plural(result.operations, 'operation')}, {plural(result.checkpoints, 'checkpoint')}"
        + (f", {plural(result.seeds, 'seed')}" if simulated else "")
        + f"; {result.victims:,} victims in {plural(result.preemptions, 'preemption')} (RM responses "
        f"carrying victims), {result.preemptors_allocated:,} urgent asks allocated, "
        f"{result.required_node_allocated:,} required-node asks placed, {result.resubmitted:,} victims "
        "submitted again"
    )
    if not result.violations:
        console.print(f"[green]OK[/green]: {figures}, 0 violations")
        return
    console.print(f"[red]VIOLATION[/red] (seed {result.seed}): {figures}")
    for violation in result.violations[:20]:
        console.print(f"  - {violation}", markup=False)
    console.print(f"replay with: {again} --seed {result.seed}", markup=False)
    sys.exit(1)
