"""The ``korral`` command line: validate-config, simulate, bench, stress."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click

from korral.errors import ConfigError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """korral: Apache YuniKorn's scheduler core as an actor system."""


@main.command("validate-config")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def validate_config(file: Path) -> None:
    """Check a queues.yaml the way YuniKorn's validator does: prints OK, or the error (exit 1)."""
    from korral.config import load_config

    try:
        load_config(_read_config(file))
    except ConfigError as error:
        click.echo(f"invalid: {error}")
        sys.exit(1)
    click.echo("OK")


def _read_config(file: Path) -> str:
    """The file's text; unreadable or not UTF-8 is a ConfigError (the user gets 'invalid: ...', exit 1)."""
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read {file}: {error}") from error


@main.command()
@click.option(
    "--config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="a queues.yaml (default: the bundled example)",
)
@click.option(
    "--nodes", type=click.IntRange(min=1), default=6, show_default=True, help="64 GiB / 16 vcore each"
)
@click.option("--duration", type=click.FloatRange(min=1.0), default=30.0, show_default=True, help="seconds")
@click.option("--seed", type=int, default=7, show_default=True)
@click.option(
    "--arrival-rate",
    type=click.FloatRange(min=0.1),
    default=1.5,
    show_default=True,
    help="applications submitted per second",
)
def simulate(config: Path | None, nodes: int, duration: float, seed: int, arrival_rate: float) -> None:
    """Watch korral schedule a small cluster: applications arrive, run and finish (the README's main job)."""
    from korral.simulate import simulate as run

    try:
        run(_read_config(config) if config is not None else None, nodes, duration, seed, arrival_rate)
    except ConfigError as error:
        click.echo(f"invalid configuration: {error}")
        sys.exit(1)


@main.command()
@click.option(
    "--workload", type=click.Choice(["yunikorn", "scale", "multi-rm"]), default="yunikorn", show_default=True
)
@click.option(
    "--nodes", type=click.IntRange(min=1), default=None, help="default: 1,000 (yunikorn), 10,000 (scale)"
)
@click.option(
    "--asks", type=click.IntRange(min=1), default=None, help="default: 10,000 (yunikorn), 100,000 (scale)"
)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option(
    "--rate",
    type=click.FloatRange(min=1.0),
    default=None,
    help="scale workload: asks per second (default 25,000)",
)
@click.option(
    "--json",
    "json_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="write the results as JSON",
)
@click.option("--sweep", is_flag=True, help="yunikorn shape over 500-10,000 nodes and 10k-100k asks")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench/results"),
    show_default=True,
    help="where --sweep writes sweep.md, sweep.json and sweep.png",
)
@click.option(
    "--reference-only",
    is_flag=True,
    help="only the sequential reference, in this fresh process (its own speed, one thread)",
)
@click.option(
    "--rms", type=click.IntRange(min=1), default=2, show_default=True, help="multi-rm: how many RMs"
)
@click.option(
    "--engine",
    type=click.Choice(["threads", "ray", "both"]),
    default="threads",
    show_default=True,
    help="multi-rm: where partitions run (both: threads, then ray, and their ratio)",
)
@click.option(
    "--repeat", type=click.IntRange(min=1), default=1, show_default=True, help="multi-rm: runs per engine"
)
def bench(
    workload: str,
    nodes: int | None,
    asks: int | None,
    seed: int,
    rate: float | None,
    json_file: Path | None,
    sweep: bool,
    out: Path,
    reference_only: bool,
    rms: int,
    engine: str,
    repeat: int,
) -> None:
    """Measure korral (actors, through korral.Core) against the sequential reference, same input."""
    if workload == "multi-rm":
        _bench_multi_rm(rms, nodes or 1000, asks or 10_000, engine, repeat, json_file)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from korral.benchmark import runner, workloads
    from korral.benchmark import sweep as sweeps

    console = Console()
    # where the results go must exist before a run of minutes, not only after it
    if json_file is not None:
        json_file.parent.mkdir(parents=True, exist_ok=True)
    if sweep:
        total = len(sweeps.SWEEP_NODES) * len(sweeps.SWEEP_ASKS)
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            task = progress.add_task("sweep", total=total)

            def done(result: dict) -> None:
                progress.advance(task)
                progress.console.print(
                    f"{result['nodes']:>6,} nodes {result['asks']:>7,} asks: "
                    f"{result['korral']['allocations_per_second']:>9,.0f}/s korral, "
                    f"{result['reference']['allocations_per_second']:>9,.0f}/s reference"
                )

            results = sweeps.run_sweep(on_result=done)
        paths = sweeps.write(results, out)
        console.print(sweeps.table(results))
        console.print("written: " + ", ".join(str(p) for p in paths))
        _write_json(json_file, results)
        return
    chosen = workloads.build(workload, nodes, asks, seed, rate)
    if reference_only:
        reference = runner.run_reference(chosen)
        document = runner.reference_json(chosen, reference)
        console.print(
            f"[bold]{chosen.name}[/bold]: {chosen.node_count:,} nodes, {chosen.asks:,} asks, reference only\n"
            f"  scheduling {reference.scheduling_allocations_per_second:>10,.0f} allocations/s"
            f"  ({reference.allocations:,} in {reference.scheduling_seconds:.3f}s once the asks are in)\n"
            f"  with asks  {reference.allocations_per_second:>10,.0f} allocations/s"
            f"  (taking the asks in: {reference.seconds - reference.scheduling_seconds:.3f}s)"
        )
        if _write_json(json_file, document):
            console.print(f"written: {json_file}")
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task(f"korral: {chosen.name}", total=chosen.asks)
        korral_result = runner.run_korral(
            chosen, progress=lambda made, _: progress.update(task, completed=made)
        )
        progress.update(task, description="reference", completed=0)
        reference = runner.run_reference(chosen)
    result = runner.result_json(chosen, korral_result, reference)
    k = result["korral"]
    console.print(
        f"[bold]{chosen.name}[/bold]: {chosen.node_count:,} nodes, {chosen.asks:,} asks\n"
        f"  korral     {k['allocations_per_second']:>10,.0f} allocations/s"
        f"  ({k['allocations']:,} in {k['seconds']:.3f}s)\n"
        f"  reference  {result['reference']['allocations_per_second']:>10,.0f} allocations/s"
        f"  ({result['reference']['scheduling_only_allocations_per_second']:,.0f}/s once the asks are in)\n"
        f"  ratio      {result['ratio_to_reference']:.2f}x the sequential reference\n"
        f"  latency    p50 {k['latency_ms']['p50']:,.1f} ms, p99 {k['latency_ms']['p99']:,.1f} ms"
        " (ask submitted -> allocation received)\n"
        f"  messages   {k['messages_per_allocation']:.2f} per allocation\n"
        f"  nodes      {k['node_registrations_per_second']:,.0f} registrations/s\n"
        f"  memory     peak RSS {k['peak_rss_mb']:,.0f} MB"
    )
    if _write_json(json_file, result):
        console.print(f"written: {json_file}")


def _bench_multi_rm(
    rms: int, nodes: int, asks: int, engine: str, repeat: int, json_file: Path | None
) -> None:
    from statistics import median

    from rich.console import Console

    from korral.benchmark.multi_rm import run_multi_rm

    console = Console()
    engines = ["threads", "ray"] if engine == "both" else [engine]
    ray_started = False
    if "ray" in engines:
        # one local Ray instance for every run, started before the first: its start-up work must not
        # fall inside a measurement
        import ray

        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
            ray_started = True
    results = []
    try:
        for run in range(repeat):
            for chosen in engines:
                console.print(
                    f"multi-rm run {run + 1}/{repeat}: {rms} RMs x ({nodes:,} nodes, {asks:,} asks), "
                    f"engine={chosen}"
                )
                result = run_multi_rm(rms, nodes, asks, engine=chosen)
                results.append(result)
                console.print(
                    f"  [bold]{chosen}[/bold] aggregate {result.allocations_per_second:>10,.0f} allocations/s"
                    f"  ({result.allocations:,} in {result.seconds:.3f}s)"
                )
                per_allocation = 1e6 / result.allocations
                hosts = ", ".join(f"{cpu * per_allocation:.0f}" for cpu in result.host_cpu_seconds)
                console.print(
                    f"    cpu per allocation: driver {result.driver_cpu_seconds * per_allocation:.0f} us"
                    + (f", partition processes {hosts} us" if hosts else "")
                )
                for rm in result.per_rm:
                    console.print(
                        f"    {rm.rm_id}: {rm.allocations_per_second:>10,.0f} allocations/s,"
                        f" latency p50 {rm.latency_ms_p50:,.0f} ms, p99 {rm.latency_ms_p99:,.0f} ms"
                    )
    finally:
        if ray_started:
            ray.shutdown()
    document: dict = {"workload": "multi-rm", "results": [r.as_json() for r in results]}
    if len(engines) == 2:
        # each ray run against the threads run just before it: the machine's load changes over time
        ratios = [
            results[i + 1].allocations_per_second / results[i].allocations_per_second
            for i in range(0, len(results), 2)
        ]
        document["ray_to_threads"] = ratios
        console.print(
            "  ray / threads aggregate: "
            + ", ".join(f"{ratio:.2f}x" for ratio in ratios)
            + f" (median {median(ratios):.2f}x)"
        )
    if _write_json(json_file, document):
        console.print(f"written: {json_file}")


def _write_json(json_file: Path | None, document: object) -> bool:
    """Write ``--json``'s file, if one was asked for; True when written."""
    if json_file is None:
        return False
    json_file.write_text(json.dumps(document, indent=2) + "\n")
    return True


@main.command()
@click.option(
    "--rms",
    type=click.IntRange(min=1, max=16),
    default=2,
    show_default=True,
    help="simulated resource managers, one thread each",
)
@click.option("--duration", type=click.FloatRange(min=0.5), default=30.0, show_default=True, help="seconds")
@click.option("--seed", type=int, default=None, help="replay a run (default: a fresh random seed)")
@click.option(
    "--checkpoint",
    type=click.FloatRange(min=0.1),
    default=2.0,
    show_default=True,
    help="seconds between invariant checks",
)
@click.option(
    "--inject-fault",
    "fault",
    type=click.Choice(sorted(__import__("korral.faults").faults.KNOWN)),
    default=None,
    help="test only: break an invariant on purpose; the run must catch it",
)
def stress(rms: int, duration: float, seed: int | None, checkpoint: float, fault: str | None) -> None:
    """Hammer one core from several RMs with random SI operations and check its invariants."""
    import random

    from rich.console import Console

    from korral.stress import StressRun

    console = Console()
    seed = seed if seed is not None else random.SystemRandom().randrange(1, 10**6)
    console.print(
        f"korral stress: {rms} RMs, {duration:g}s, seed {seed}"
        + (f", injected fault {fault!r}" if fault else "")
    )
    last = [0.0]

    def progress(remaining: float, operations: int, checkpoints: int) -> None:
        now = __import__("time").monotonic()
        if now - last[0] >= 5.0 or remaining <= 0:
            last[0] = now
            console.print(
                f"  {operations:,} operations, {checkpoints} checkpoints passed, {remaining:.0f}s left"
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
        console.print(
            f"[green]OK[/green]: {result.operations:,} operations, {result.checkpoints} checkpoints, "
            f"{result.callback_failures} RM callback failures contained, no violation"
        )
        return
    console.print(f"[red]VIOLATION[/red] (seed {result.seed}, after {result.operations:,} operations):")
    for violation in result.violations[:20]:
        console.print(f"  - {violation}", markup=False)
    console.print(
        f"shortest sequence found that reproduces it ({len(result.minimal)} operations), "
        f"replay with: korral stress --seed {result.seed} --rms {rms}"
        + (f" --inject-fault {fault}" if fault else "")
    )
    for op in result.minimal[:200]:
        console.print(f"  {op.seq:>6}  rm{op.rm}  {op.description}", markup=False)
    sys.exit(1)


if __name__ == "__main__":  # pragma: no cover
    main()
