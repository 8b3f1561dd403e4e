"""``korral stress --simulated``: the command line of ``korral.harness.stress_simulated``."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click


def stress_simulated(
    console: Any,
    rms: int,
    duration: float,
    seed: int | None,
    fault: str | None,
    seeds: int,
    operations: int,
    replay: bool,
    perturb: bool,
) -> None:
    """``korral stress --simulated``: seeds from ``--seed`` (default 1) on; ``--replay``: one seed."""
    import time

    from korral.harness.stress_simulated import SimulatedStress

    harness = SimulatedStress(rms=rms, operations=operations, fault=fault, perturb=perturb)
    first = seed if seed is not None else 1
    again = (
        f"korral stress --simulated --rms {rms} --operations {operations}"
        + ("" if perturb else " --no-perturb")
        + (f" --inject-fault {fault}" if fault else "")
    )
    logging.getLogger("korral").setLevel(logging.CRITICAL)  # violations are reported below
    if replay:
        if seed is None:
            raise click.UsageError("--replay needs --seed S")
        outcome = harness.run_seed(seed, full_trace=True)
        for line in outcome.trace:  # plain lines, never wrapped: a trace is for diff and grep
            click.echo(line)
        click.echo(
            f"seed {seed}: {len(outcome.ops)} operations, {outcome.steps:,} steps, "
            f"{outcome.virtual_seconds:.3f} virtual seconds"
        )
        for violation in outcome.violations:
            click.echo(f"  - {violation}")
        if outcome.violations:
            sys.exit(1)
        return
    console.print(
        f"korral stress --simulated: seeds {first}..{first + seeds - 1}, {rms} RM(s), {operations} "
        f"operations each" + (f", injected fault {fault!r}" if fault else "")
    )
    started, cpu_started = time.perf_counter(), time.process_time()
    last = [started]

    def progress(count: int, steps: int) -> None:
        now = time.perf_counter()
        if now - last[0] >= 5.0:
            last[0] = now
            console.print(f"  {count:,} seeds, {steps:,} steps")

    found, count, steps = harness.search(range(first, first + seeds), budget=duration, progress=progress)
    elapsed = max(time.perf_counter() - started, 1e-9)
    cpu = max(time.process_time() - cpu_started, 1e-9)  # the simulation is single-threaded
    console.print(
        f"{count:,} seeds in {elapsed:.1f}s ({count / elapsed * 60:,.0f} seeds/minute, "
        f"{steps / elapsed:,.0f} simulated steps/s; per CPU-second of this process: "
        f"{count / cpu * 60:,.0f} seeds/minute, {steps / cpu:,.0f} steps/s)"
    )
    if found is None:
        console.print("[green]OK[/green]: no violation")
        return
    console.print(f"[red]VIOLATION[/red] at seed {found.seed} (after {len(found.ops)} operations):")
    for violation in found.violations[:20]:
        console.print(f"  - {violation}", markup=False)
    minimal = harness.shrink(found.seed, found.ops)
    console.print(
        f"shortest sequence that still shows it with seed {found.seed} ({len(minimal)} operations); "
        f"replay with: {again} --seed {found.seed} --replay"
    )
    for op in minimal[:200]:
        console.print(f"  {op.seq:>6}  rm{op.rm}  {op.description}", markup=False)
    sys.exit(1)
