"""The ``korral`` command line: validate-config, simulate, bench, stress, serve."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

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
@click.option("--workload", type=click.Choice(["yunikorn", "scale"]), default="yunikorn", show_default=True)
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
    "--remote",
    is_flag=True,
    help="yunikorn shape with the RM in another process over gRPC, against in-process in the same run",
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
    remote: bool,
) -> None:
    """Measure korral (actors, through korral.Core) against the sequential reference, same input."""
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
    if remote:
        _bench_remote(console, chosen, json_file)
        return
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


def _bench_remote(console: Any, chosen: Any, json_file: Path | None) -> None:
    """korral bench --remote: the same workload in-process, then with the RM in a child process."""
    from korral.benchmark import remote, runner

    if chosen.name != "yunikorn":
        raise click.UsageError("--remote runs YuniKorn's shape: use --workload yunikorn")
    console.print(f"[bold]remote[/bold]: {chosen.node_count:,} nodes, {chosen.asks:,} asks, in-process first")
    local = runner.run_korral(chosen)
    over_grpc = remote.run_remote(chosen.node_count, chosen.asks)
    ratio = over_grpc.allocations_per_second / local.allocations_per_second
    console.print(
        f"  in-process {local.allocations_per_second:>10,.0f} allocations/s"
        f"  ({local.allocations:,} in {local.seconds:.3f}s)\n"
        f"  over gRPC  {over_grpc.allocations_per_second:>10,.0f} allocations/s"
        f"  ({over_grpc.allocations:,} in {over_grpc.seconds:.3f}s, RM in another process)\n"
        f"  ratio      {ratio:.2f}x in-process\n"
        f"  latency    p50 {over_grpc.latency_ms_p50:,.1f} ms, p99 {over_grpc.latency_ms_p99:,.1f} ms"
    )
    document = {
        "workload": chosen.name,
        "nodes": chosen.node_count,
        "asks": chosen.asks,
        "in_process": {
            "allocations": local.allocations,
            "seconds": local.seconds,
            "allocations_per_second": local.allocations_per_second,
        },
        "remote": {
            "allocations": over_grpc.allocations,
            "seconds": over_grpc.seconds,
            "allocations_per_second": over_grpc.allocations_per_second,
            "latency_ms": {"p50": over_grpc.latency_ms_p50, "p99": over_grpc.latency_ms_p99},
        },
        "ratio_to_in_process": ratio,
    }
    if _write_json(json_file, document):
        console.print(f"written: {json_file}")


DEFAULT_GRPC_ADDRESS = "127.0.0.1:9090"


@main.command()
@click.option(
    "--config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="a queues.yaml: validated at start-up, then the config of an RM that registers with an empty one",
)
@click.option(
    "--grpc",
    "grpc_address",
    default=DEFAULT_GRPC_ADDRESS,
    show_default=True,
    help="HOST:PORT of the gRPC SI (port 0: any free port)",
)
@click.option("--rest", "rest_address", default=None, help="HOST:PORT of the REST API /ws/v1 (default: off)")
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
)
def serve(config: Path | None, grpc_address: str, rest_address: str | None, log_level: str) -> None:
    """A standalone korral core serving the SI over gRPC; SIGINT or SIGTERM stops it cleanly."""
    import contextlib
    import signal
    import threading

    import korral

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    default_config = ""
    if config is not None:
        try:
            default_config = _read_config(config)
            korral.load_config(default_config)
        except ConfigError as error:
            click.echo(f"invalid configuration: {error}", err=True)
            sys.exit(1)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    core = korral.start()
    try:
        bound = core.serve_grpc(grpc_address, default_config=default_config)
        click.echo(f"korral: gRPC SI listening on {bound}")
        if rest_address is not None:
            serve_rest = getattr(core, "serve_rest", None)
            if serve_rest is None:
                raise click.ClickException("--rest: this korral has no REST API (core.serve_rest)")
            click.echo(f"korral: REST API at {serve_rest(rest_address)}")
        sys.stdout.flush()
        while not stop.wait(1.0):
            pass
        click.echo("korral: stopping")
        # deliver what the core has decided before the streams close
        with contextlib.suppress(TimeoutError):
            core.wait_until_idle(timeout=10.0)
    except (OSError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    finally:
        core.stop()
    click.echo("korral: stopped")


if __name__ == "__main__":  # pragma: no cover
    main()
