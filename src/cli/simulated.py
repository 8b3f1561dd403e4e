"""``korral stress --simulated``: the command line of ``korral.harness.simulated.stress``."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from typing import Any

import click

from korral.cli import plural


def rerun_command(
    rms: int,
    operations: int,
    fault: str | None,
    perturb: bool,
    explore: str = "uniform",
    env_faults: frozenset[str] | None = None,
    deep_queues: bool = True,
) -> str:
    """The command line that runs the same scenario again (without its seeds)."""
    from korral.harness.simulated.faults import ENV_FAULTS

    kinds = frozenset(ENV_FAULTS) if env_faults is None else env_faults
    listed = ",".join(kind for kind in ENV_FAULTS if kind in kinds) or "none"
    return (
        f"korral stress --simulated --rms {rms} --operations {operations}"
        + ("" if perturb else " --no-perturb")
        + ("" if explore == "uniform" else f" --explore {explore}")
        + ("" if kinds == frozenset(ENV_FAULTS) else f" --env-faults {listed}")
        + (f" --inject-fault {fault}" if fault else "")
        + ("" if deep_queues else " --no-deep-queues")
    )


def listed_name(run: int | tuple[int, int]) -> str:
    """A run of a range as the report names it: its varying seed (the schedule seed of a pair)."""
    return str(run[1] if isinstance(run, tuple) else run)


def replay_command(again: str, seed: int, schedule_seed: int) -> str:
    """The command line a violation report prints: it replays that one run, trace and violations."""
    return f"{again} --seed {seed} --schedule-seed {schedule_seed} --replay"


def stress_simulated(
    console: Any,
    rms: int,
    duration: float | None,
    seed: int | None,
    fault: str | None,
    seeds: int,
    operations: int,
    replay: bool,
    perturb: bool,
    schedule_seed: int | None = None,
    explore: str = "uniform",
    env_faults: str = "all",
    jobs: int = 1,
    show_coverage: bool = False,
    deep_queues: bool = True,
) -> None:
    """``korral stress --simulated``: seeds from ``--seed`` (default 1) on, each its own schedule; with
    ``--schedule-seed X``: the workload ``--seed`` under schedule seeds X on; ``--replay``: one run.

    ``duration`` None: no time limit, every one of ``seeds`` runs (``--seeds`` given without
    ``--duration``); else the run stops after the seed that reaches it, and says so."""
    import time

    from korral.harness import repro
    from korral.harness.repro import pytest_case, seed_pytest_case
    from korral.harness.simulated import faults as simulated_faults
    from korral.harness.simulated.jobs import search_range
    from korral.harness.simulated.stress import SimulatedStress
    from korral.harness.simulated.workloads import Workloads

    try:
        kinds = simulated_faults.parse(env_faults)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--env-faults") from None
    workloads = Workloads(deep_queues=deep_queues)
    harness = SimulatedStress(
        rms=rms,
        operations=operations,
        fault=fault,
        perturb=perturb,
        explore=explore,
        env_faults=kinds,
        workloads=workloads,
    )
    first = seed if seed is not None else 1
    again = rerun_command(rms, operations, fault, perturb, explore, kinds, deep_queues)
    logging.getLogger("korral").setLevel(logging.CRITICAL)  # violations are reported below
    if replay:
        if seed is None:
            raise click.UsageError("--replay needs --seed S")
        outcome = harness.run_seed(seed, schedule_seed=schedule_seed, full_trace=True)
        for line in outcome.trace:  # plain lines, never wrapped: a trace is for diff and grep
            click.echo(line)
        click.echo(
            f"seed {seed}, schedule seed {outcome.schedule_seed}: {len(outcome.ops)} operations, "
            f"{outcome.steps:,} steps, {outcome.virtual_seconds:.3f} virtual seconds"
        )
        for violation in outcome.violations:
            click.echo(f"  - {violation}")
        if outcome.violations:
            sys.exit(1)
        return
    limit = "no time limit" if duration is None else f"stopping at {duration:g}s if not done"
    # the seeds that vary: workload seeds (each its own schedule), or the schedule seeds of one workload
    start = first if schedule_seed is None else schedule_seed
    varying = range(start, start + seeds)
    runs: Iterable[int | tuple[int, int]] = (
        varying if schedule_seed is None else ((first, schedule) for schedule in varying)
    )
    what = f"{plural(seeds, 'seed')} {varying[0]}..{varying[-1]}"
    if schedule_seed is not None:
        what = f"workload seed {first} under {plural(seeds, 'schedule seed')} {varying[0]}..{varying[-1]}"
    console.print(
        f"korral stress --simulated: {what} ({limit}), {rms} RM(s), {operations} operations each"
        + (f", injected fault {fault!r}" if fault else "")
    )
    started = time.perf_counter()
    last = [started]

    def progress(count: int, steps: int) -> None:
        now = time.perf_counter()
        if now - last[0] >= 5.0:
            last[0] = now
            console.print(f"  {count:,} seeds, {steps:,} steps")

    settings = {
        "rms": rms,
        "operations": operations,
        "fault": fault,
        "perturb": perturb,
        "explore": explore,
        "env_faults": kinds,
        "workloads": workloads,
    }
    runs_list = list(runs)
    result = search_range(settings, runs_list, jobs=jobs, budget=duration, progress=progress)
    found, count, steps = result.found, result.count, result.steps
    elapsed = max(time.perf_counter() - started, 1e-9)
    cpu = max(result.cpu_seconds, 1e-9)  # process time of the seeds: this process's or the workers'
    listed = runs_list
    ran = f" ({listed_name(listed[0])}..{listed_name(listed[count - 1])})" if count and jobs == 1 else ""
    console.print(
        f"{count:,} seeds{ran} in {elapsed:.1f}s on {jobs:,} process{'' if jobs == 1 else 'es'} "
        f"({count / elapsed * 60:,.0f} seeds/minute, {steps / elapsed:,.0f} simulated steps/s); "
        f"per CPU-minute: {count / cpu * 60:,.0f} seeds ({steps / cpu:,.0f} steps per CPU-second)"
    )
    if result.coverage is not None:
        for line in result.coverage.report(counts=show_coverage):
            console.print(line, markup=False, highlight=False)
    if found is None and count < seeds:
        left = f" (seeds {varying[count]}..{varying[-1]} did not run)" if jobs == 1 else ""
        console.print(
            f"[yellow]STOPPED EARLY[/yellow]: ran {count:,} of the {seeds:,} seeds asked for{left}: "
            f"--duration {duration:g}s was reached. No violation in the seeds that ran; --seeds N "
            "without --duration runs all N.",
        )
        return
    if found is None:
        console.print(f"[green]OK[/green]: no violation in {count:,} seeds")
        return
    seeds_of = f"--seed {found.seed} --schedule-seed {found.schedule_seed}"
    console.print(f"[red]VIOLATION[/red] at {seeds_of} (after {len(found.ops)} operations):")
    for violation in found.violations[:20]:
        console.print(f"  - {violation}", markup=False)
    violation = found.violations[0]
    replay_seed = replay_command(again, found.seed, found.schedule_seed)
    shrunk = harness.shrink_case(found.seed, found.ops, violation, schedule_seed=found.schedule_seed)
    if shrunk.reproduced:
        console.print(
            f"shortest sequence that still shows the first violation (its kind and subject) with {seeds_of} "
            f"({len(shrunk.ops)} operations; replayed from exactly these operations, with every check, it "
            f"shows the violation); replay the run with: {replay_seed}"
        )
        for op in shrunk.ops[:200]:
            console.print(f"  {op.seq:>6}  rm{op.rm}  {op.description}", markup=False)
        case = pytest_case(
            shrunk.ops,
            seed=found.seed,
            schedule_seed=found.schedule_seed,
            rms=rms,
            operations=operations,
            fault=fault,
            perturb=perturb,
            violation=violation,
            explore=explore,
            env_faults=kinds,
            deep_queues=deep_queues,
        )
        console.print("the shortest sequence as a pytest case (it fails while the violation shows):")
    else:
        shown = "; ".join(shrunk.replayed[:3]) or "no violation"
        console.print(
            f"[yellow]NOT REPRODUCED BY OPERATIONS[/yellow]: replaying the {len(shrunk.ops)} recorded "
            f"operations does not show this violation (the replay shows: {shown}), so no shortest "
            f"sequence is printed. The seed itself shows it; replay the run with: {replay_seed}",
            markup=True,
        )
        again_run = harness.run_seed(found.seed, schedule_seed=found.schedule_seed)
        if not repro.shows(again_run.violations, violation):
            console.print("the seed run again does not show it either (a nondeterministic run): no case")
            sys.exit(1)
        case = seed_pytest_case(
            seed=found.seed,
            schedule_seed=found.schedule_seed,
            rms=rms,
            operations=operations,
            fault=fault,
            perturb=perturb,
            violation=violation,
            explore=explore,
            env_faults=kinds,
            deep_queues=deep_queues,
        )
        console.print("the seed as a pytest case (run again just now: it fails while the violation shows):")
    console.print("# ---- 8< ----", markup=False)
    console.print(case, markup=False, highlight=False)
    console.print("# ---- >8 ----", markup=False)
    sys.exit(1)
