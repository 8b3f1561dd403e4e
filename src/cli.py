"""The ``korral`` command line: validate-config, simulate, bench, stress, serve.

What a command reports goes to stdout; errors go to stderr. Exit codes: 0 done, 1 the input or the
run failed (an invalid config, an invariant violated), 2 a usage error (click's).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

import korral
from korral.cli_checks import BENCH_MODES, host_port, refuse_inapplicable, stress_mode
from korral.errors import ConfigError, ConfigLimitError
from korral.harness import faults

# the key under which YuniKorn's Kubernetes shim keeps queues.yaml in its ConfigMap (yunikorn-configs)
CONFIGMAP_KEY = "queues.yaml"
CONFIG_HELP = (
    'a queues.yaml, or a Kubernetes ConfigMap holding one under data."queues.yaml" '
    "(as YuniKorn's shim deploys it); - reads standard input"
)


def plural(count: int, noun: str) -> str:
    """``1 checkpoint``, ``2 checkpoints``, ``1,024 operations``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def fail(message: str) -> None:
    """An error for the user: on stderr, exit code 1."""
    click.echo(message, err=True)
    sys.exit(1)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    korral.__version__, "-V", "--version", prog_name="korral", message="%(prog)s %(version)s"
)
def main() -> None:
    """korral: Apache YuniKorn's scheduler core as an actor system.

    Also runs as python -m korral. Results go to stdout, errors to stderr; exit code 0 is
    success, 1 an invalid input or a failed run, 2 a usage error.
    """


CONFIG_FILE = click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path)


@main.command("validate-config", short_help="Check a queues.yaml as YuniKorn's validator does.")
@click.argument("file", type=CONFIG_FILE)
def validate_config(file: Path) -> None:
    """Check FILE the way YuniKorn's validator does: prints OK (exit 0), or the error on stderr (exit 1).

    FILE is a queues.yaml, or a Kubernetes ConfigMap holding one under data."queues.yaml" (as
    YuniKorn's shim deploys it); - reads standard input.
    """
    from korral.config import load_config
    from korral.config.defaulted import defaulted_values

    source = source_name(file)
    try:
        text, source = read_config(file)
        config = load_config(text)
    except ConfigError as error:
        fail(f"invalid: {naming(error, source)}")
    for warning in defaulted_values(config):  # accepted as YuniKorn accepts them, but said
        click.echo(f"warning: {source}: {warning}", err=True)
    click.echo("OK")


def read_config(file: Path) -> tuple[str, str]:
    """The queues.yaml text FILE holds (itself, or inside a ConfigMap) and how to name it in errors.

    Unreadable, not UTF-8, or a Kubernetes object that carries no queues.yaml is a ConfigError.
    """
    name = source_name(file)
    try:
        if str(file) == "-":
            text = sys.stdin.read()
        else:
            text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read {name}: {error}") from error
    return unwrap_configmap(text, name)


def source_name(file: Path) -> str:
    return "<stdin>" if str(file) == "-" else str(file)


def unwrap_configmap(text: str, name: str) -> tuple[str, str]:
    """A ConfigMap's data."queues.yaml" (the shim's way to deploy it); any other text unchanged."""
    from korral.config.yaml_reader import read_yaml

    try:
        document = read_yaml(text)  # within the bounds of a config (size, nesting, aliases)
    except ConfigLimitError:
        raise
    except ConfigError:
        return text, name  # not one YAML document: the validator reports where it breaks
    if not isinstance(document, dict) or not ({"apiVersion", "kind"} & document.keys()):
        return text, name
    kind = document.get("kind")
    if kind != "ConfigMap":
        raise ConfigError(
            f"{name} is a Kubernetes {kind or 'object'}, not a queues.yaml: give the queues.yaml, or the "
            f'ConfigMap that holds it under data."{CONFIGMAP_KEY}"'
        )
    data = document.get("data")
    embedded = data.get(CONFIGMAP_KEY) if isinstance(data, dict) else None
    if not isinstance(embedded, str):
        keys = ", ".join(sorted(map(str, data))) if isinstance(data, dict) and data else "none"
        raise ConfigError(
            f'{name} is a Kubernetes ConfigMap without data."{CONFIGMAP_KEY}" (its data keys: {keys}); '
            "YuniKorn's shim reads the queues from that key"
        )
    return embedded, f'{name} (data."{CONFIGMAP_KEY}")'


def naming(error: ConfigError, source: str) -> str:
    """The error with the file named where the YAML parser could only say it read a string."""
    return str(error).replace('"<unicode string>"', f'"{source}"')


@main.command(short_help="Watch korral schedule a small simulated cluster.")
@click.option(
    "--config",
    type=CONFIG_FILE,
    default=None,
    help=CONFIG_HELP + " (default: the bundled example)",
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
@click.option(
    "--compare",
    nargs=2,
    type=CONFIG_FILE,
    default=None,
    metavar="A B",
    help="run the same workload on two configs and print their summaries side by side",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="write a PNG of each guaranteed queue's usage against its guarantee over time",
)
def simulate(
    config: Path | None,
    nodes: int,
    duration: float,
    seed: int,
    arrival_rate: float,
    compare: tuple[Path, Path] | None,
    plot: Path | None,
) -> None:
    """Watch korral schedule a small cluster: applications arrive, run and finish (the README's main job).

    Deterministic: the core runs on the simulated runtime and the workload on its virtual clock, so the
    same --seed gives the same summary. On a terminal the run plays at the wall clock's pace.
    """
    from korral.harness.simulate import compare as run_compare
    from korral.harness.simulate import simulate as run

    if compare is not None and config is not None:
        raise click.UsageError("--config does not apply with --compare A B (the two configs compared)")
    chart = str(plot) if plot is not None else None
    if compare is not None:
        texts: list[tuple[str, str]] = []
        for file in compare:
            try:
                text, source = read_config(file)
                korral.load_config(text)
            except ConfigError as error:  # which of the two it is, always named
                name = source_name(file)
                message = naming(error, name)
                fail(f"invalid configuration: {message if name in message else f'{name}: {message}'}")
            texts.append((source, text))
        run_compare(texts, nodes, duration, seed, arrival_rate, chart)
        return
    source = source_name(config) if config is not None else "the bundled example"
    try:
        given = None
        if config is not None:
            given, source = read_config(config)
        run(given, nodes, duration, seed, arrival_rate, chart)
    except ConfigError as error:
        fail(f"invalid configuration: {naming(error, source)}")


# bench --sweep's results: in the current directory, never into the repository's tracked bench/results
DEFAULT_SWEEP_OUT = "korral-sweep"


@main.command(short_help="Measure korral against its sequential reference.")
@click.option(
    "--workload",
    type=click.Choice(["yunikorn", "scale", "gang", "multi-rm", "preemption"]),
    default="yunikorn",
    show_default=True,
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
@click.option(
    "--sweep",
    is_flag=True,
    help="yunikorn shape over 500-10,000 nodes and 10k-100k asks (--nodes, --asks: that one value instead)",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="where --sweep (and --plot-only) write sweep.md, sweep.json and sweep.png [default: ./korral-sweep]",
)
@click.option(
    "--reference-only",
    is_flag=True,
    help="only the sequential reference, in this fresh process (its own speed, one thread)",
)
@click.option(
    "--plot-only",
    "plot_only",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="draw sweep.png in --out from a sweep.json already written, without running anything",
)
@click.option(
    "--user-limits",
    is_flag=True,
    help="scale workload: user limits on half its leaves (never reached: measures the checks' cost)",
)
@click.option(
    "--remote",
    is_flag=True,
    help="yunikorn shape with the RM in another process over gRPC, against in-process in the same run",
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
@click.option(
    "--allocations",
    type=click.IntRange(min=1),
    default=None,
    help="preemption: low-priority allocations filling the cluster (default 5,000; 100,000 at scale)",
)
@click.option(
    "--preemptors",
    type=click.IntRange(min=1),
    default=None,
    help="preemption: urgent asks that preempt (default 50), arriving at --rate per second (default 10)",
)
@click.option(
    "--burst",
    type=click.IntRange(min=0),
    default=50,
    show_default=True,
    help="preemption: then this many urgent asks at once (victims chosen per second with a backlog)",
)
@click.option(
    "--preemption-delay",
    type=click.FloatRange(min=0.001),
    default=0.5,
    show_default=True,
    help="preemption: the urgent queue's preemption.delay, seconds",
)
@click.pass_context
def bench(
    ctx: click.Context,
    workload: str,
    nodes: int | None,
    asks: int | None,
    seed: int,
    rate: float | None,
    json_file: Path | None,
    sweep: bool,
    out: Path | None,
    reference_only: bool,
    plot_only: Path | None,
    rms: int = 2,
    engine: str = "threads",
    repeat: int = 1,
    remote: bool = False,
    user_limits: bool = False,
    allocations: int | None = None,
    preemptors: int | None = None,
    preemption_delay: float = 0.5,
    burst: int = 50,
) -> None:
    """Measure korral (actors, through korral.Core) against the sequential reference, same input."""
    refuse_inapplicable(ctx, workload, BENCH_MODES)
    if out is not None and not (sweep or plot_only is not None):
        raise click.UsageError("--out applies to --sweep and --plot-only only (use --json for one run)")
    out = out if out is not None else Path(DEFAULT_SWEEP_OUT)
    if workload == "preemption":
        _bench_preemption(nodes, allocations, preemptors, rate, preemption_delay, burst, json_file)
        return
    if workload == "multi-rm":
        _bench_multi_rm(rms, nodes or 1000, asks or 10_000, engine, repeat, json_file)
        return
    if plot_only is not None:
        _plot_only(plot_only, out)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from korral.harness.benchmark import runner, workloads
    from korral.harness.benchmark import sweep as sweeps

    console = Console(soft_wrap=True)  # piped to a file: whole lines, never wrapped mid-phrase
    # where the results go must exist before a run of minutes, not only after it
    if json_file is not None:
        json_file.parent.mkdir(parents=True, exist_ok=True)
    if sweep:
        node_counts = (nodes,) if nodes is not None else sweeps.SWEEP_NODES
        ask_counts = (asks,) if asks is not None else sweeps.SWEEP_ASKS
        total = len(node_counts) * len(ask_counts)
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

            results = sweeps.run_sweep(node_counts, ask_counts, on_result=done)
        paths = sweeps.write(results, out)
        console.print(sweeps.table(results))
        console.print("written: " + ", ".join(str(p) for p in paths))
        console.print(
            f"sweep.png also draws YuniKorn's figures: published measurements ({sweeps.YUNIKORN_NOTE}), "
            "not measured by this sweep"
        )
        _write_json(json_file, results)
        return
    chosen = workloads.build(workload, nodes, asks, seed, rate, user_limits)
    if remote:
        _bench_remote(console, chosen, json_file)
        return
    if workload == "gang":
        _bench_gang(console, chosen, json_file)
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
        # korral runs a workload of its own, let go of as it is submitted (as an RM's requests are), so
        # the one the reference runs afterwards (the same: workloads are seeded) is not counted in
        # korral's peak RSS
        del chosen
        korral_result = runner.run_korral(
            workloads.build(workload, nodes, asks, seed, rate, user_limits),
            progress=lambda made, _: progress.update(task, completed=made),
        )
        progress.update(task, description="reference", completed=0)
        chosen = workloads.build(workload, nodes, asks, seed, rate, user_limits)
        reference = runner.run_reference(chosen)
    result = runner.result_json(chosen, korral_result, reference)
    k = result["korral"]
    console.print(
        f"[bold]{chosen.name}[/bold]: {chosen.node_count:,} nodes, {chosen.asks:,} asks\n"
        f"  korral     {k['allocations_per_second']:>10,.0f} allocations/s"
        f"  ({k['allocations']:,} in {k['seconds']:.3f}s)\n"
        f"  reference  {result['reference']['allocations_per_second']:>10,.0f} allocations/s"
        f"  ({result['reference']['allocations']:,} allocations; "
        f"{result['reference']['scheduling_only_allocations_per_second']:,.0f}/s once the asks are in)\n"
        + (
            f"  ratio      {result['ratio_to_reference']:.2f}x the sequential reference (same asks, same "
            "allocations, both given every ask at once)\n"
            if result["ratio_to_reference"] is not None
            else f"  ratio      none: {result['no_ratio_because']}\n"
        )
        + (f"  unallocated {result['unallocated']}\n" if result["unallocated"] else "")
        + f"  latency    p50 {k['latency_ms']['p50']:,.1f} ms, p99 {k['latency_ms']['p99']:,.1f} ms"
        " (ask submitted -> allocation received)\n"
        f"  messages   {k['messages_per_allocation']:.2f} per allocation\n"
        f"  nodes      {k['node_registrations_per_second']:,.0f} registrations/s\n"
        f"  memory     peak RSS {k['peak_rss_mb']:,.0f} MB\n"
        "  CPU µs per allocation: "
        + ", ".join(f"{stage} {us:.1f}" for stage, us in k["cpu_us_per_allocation"].items())
    )
    if _write_json(json_file, result):
        console.print(f"written: {json_file}")


def _plot_only(sweep_json: Path, out: Path) -> None:
    from korral.harness.benchmark import sweep as sweeps

    try:
        results = json.loads(sweep_json.read_text(encoding="utf-8"))
        if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
            raise ValueError("not a list of sweep points")
        out.mkdir(parents=True, exist_ok=True)
        path = out / "sweep.png"
        sweeps.plot(results, path, str(sweep_json))
    except (OSError, ValueError, KeyError, TypeError) as error:
        fail(f"cannot plot {sweep_json}: {error}")
    click.echo(f"written: {path}")


def _bench_multi_rm(
    rms: int, nodes: int, asks: int, engine: str, repeat: int, json_file: Path | None
) -> None:
    from statistics import median

    from rich.console import Console

    from korral.harness.benchmark.multi_rm import run_multi_rm

    console = Console(soft_wrap=True)
    engines = ["threads", "ray"] if engine == "both" else [engine]
    ray_started = False
    if "ray" in engines:
        # one local Ray instance for every run, started before the first: its start-up work must not
        # fall inside a measurement
        import ray

        if not ray.is_initialized():
            console.print("starting a local Ray instance (its processes take several seconds)...")
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
            console.print("Ray is up")
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
                    f"  ({result.allocations:,} in {result.seconds:.3f}s, load {result.load_average:.1f})"
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


@main.command(short_help="Random SI operations from several RMs; invariants checked.")
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
    type=click.Choice(sorted(faults.KNOWN)),
    default=None,
    help="test only: break an invariant on purpose; the run must catch it",
)
@click.option(
    "--soak",
    is_flag=True,
    help="instead: application cycles beside a never-idle second RM, printing RSS, threads and live "
    "actors every --every cycles (runs --duration seconds or --cycles cycles); exit 1 when one grows "
    "after warm-up past its limit (RSS 2 MB, threads 0.5, live actors 200 per 10,000 cycles)",
)
@click.option(
    "--cycles", type=click.IntRange(min=1), default=None, help="--soak: stop after this many cycles"
)
@click.option(
    "--every", type=click.IntRange(min=1), default=1000, show_default=True, help="--soak: cycles per sample"
)
@click.option(
    "--simulated",
    is_flag=True,
    help="run many seeds of a small scenario on the deterministic simulated runtime",
)
@click.option(
    "--seeds",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="with --simulated: seeds to run; given without --duration, all of them (no time limit)",
)
@click.option(
    "--operations", type=click.IntRange(min=1), default=30, show_default=True, help="SI calls per seed"
)
@click.option(
    "--schedule-seed",
    type=int,
    default=None,
    help="with --simulated: the delivery order's seed apart from the workload's (--seed); with "
    "--seeds N: workload --seed under schedule seeds X..X+N-1 (default: each seed its own schedule)",
)
@click.option("--replay", is_flag=True, help="with --simulated --seed S: re-run that seed, full trace")
@click.option("--no-perturb", is_flag=True, help="with --simulated: no mailbox delays, no timer skew")
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
    "after a reconnect)",
)
@click.option(
    "--preemption",
    is_flag=True,
    help="instead: guaranteed queues, borrowers, urgent and required-node asks that preempt; the "
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
) -> None:
    """Hammer one core from several RMs with random SI operations and check its invariants.

    Exit 0 when no invariant was violated; 1 with the violation, the seed and the shortest sequence
    of operations that reproduces it, and the command line that replays it.
    """
    import random
    import time

    from rich.console import Console

    from korral.harness.stress import REPRODUCTIONS, StressRun

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
        from korral.cli_simulated import stress_simulated

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
        )
        return
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
        console.print(
            f"[green]OK[/green]: {plural(result.operations, 'operation')}, "
            f"{plural(result.checkpoints, 'checkpoint')}, "
            f"{plural(result.callback_failures, 'RM callback failure')} injected on purpose and contained, "
            f"{plural(result.restarts, 'core restart')} recovered, no violation"
        )
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
    sys.exit(1)


def _soak(console: object, cycles: int | None, duration: float, every: int) -> None:
    """``korral stress --soak``: one line per sample, then the verdict (exit 1: something grows)."""
    from korral.harness.soak import run_soak

    if not run_soak(console.print, cycles, duration, every):  # type: ignore[attr-defined]
        sys.exit(1)


def _bench_remote(console: Any, chosen: Any, json_file: Path | None) -> None:
    """korral bench --remote: the same workload in-process, then with the RM in a child process."""
    from korral.harness.benchmark import remote, runner

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


@main.command(short_help="Serve a core: the SI over gRPC, and the REST API.")
@click.option(
    "--config",
    type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path),
    default=None,
    help="a queues.yaml (or ConfigMap, - for stdin): validated at start-up, then the config of an RM "
    "that registers with an empty one",
)
@click.option(
    "--grpc",
    "grpc_address",
    default=DEFAULT_GRPC_ADDRESS,
    show_default=True,
    callback=host_port,
    help="HOST:PORT of the gRPC SI (port 0: any free port)",
)
@click.option(
    "--rest",
    "rest_address",
    default=None,
    callback=host_port,
    help="HOST:PORT of the REST API /ws/v1 (default: off)",
)
@click.option(
    "--rest-tls-cert",
    type=click.Path(exists=True, dir_okay=False),
    help="serve REST over HTTPS: PEM certificate",
)
@click.option(
    "--rest-tls-key", type=click.Path(exists=True, dir_okay=False), help="the certificate's PEM private key"
)
@click.option(
    "--rest-tls-client-ca",
    type=click.Path(exists=True, dir_okay=False),
    help="REST clients need a certificate it signed",
)
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
)
@click.option(
    "--grpc-tls-cert",
    type=click.Path(dir_okay=False, path_type=Path),
    help="gRPC TLS: the server's certificate chain (PEM)",
)
@click.option(
    "--grpc-tls-key",
    type=click.Path(dir_okay=False, path_type=Path),
    help="gRPC TLS: the server's private key (PEM)",
)
@click.option(
    "--grpc-tls-client-ca",
    type=click.Path(dir_okay=False, path_type=Path),
    help="gRPC mutual TLS: clients must present a certificate signed by this CA (PEM)",
)
@click.option(
    "--grpc-token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="YAML/JSON rmID -> secret: every gRPC call for an RM must carry 'authorization: Bearer <secret>'",
)
def serve(
    config: Path | None,
    grpc_address: str,
    rest_address: str | None,
    log_level: str,
    rest_tls_cert: str | None = None,
    rest_tls_key: str | None = None,
    rest_tls_client_ca: str | None = None,
    grpc_tls_cert: Path | None = None,
    grpc_tls_key: Path | None = None,
    grpc_tls_client_ca: Path | None = None,
    grpc_token_file: Path | None = None,
) -> None:
    """A standalone korral core serving the SI over gRPC; SIGINT or SIGTERM stops it cleanly."""
    import contextlib
    import signal
    import threading

    import korral
    from korral.server import serve_log

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve_log.configure()
    rest_tls = None
    if rest_tls_cert or rest_tls_key or rest_tls_client_ca:
        if not (rest_tls_cert and rest_tls_key):
            fail("REST over TLS needs both --rest-tls-cert and --rest-tls-key")
        if rest_address is None:
            fail("the --rest-tls-* options are for the REST API: give --rest HOST:PORT")
        rest_tls = {"cert": rest_tls_cert, "key": rest_tls_key, "client_ca": rest_tls_client_ca}
    default_config = ""
    if config is not None:
        try:
            default_config, _ = read_config(config)
            korral.load_config(default_config)
        except ConfigError as error:
            fail(f"invalid configuration: {naming(error, source_name(config))}")
    security = _grpc_security(grpc_tls_cert, grpc_tls_key, grpc_tls_client_ca, grpc_token_file)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    core = serve_log.logging_registrations(korral.start())
    try:
        bound = core.serve_grpc(grpc_address, default_config=default_config, **security)
        click.echo(f"korral: gRPC SI listening on {bound}")
        if rest_address is not None:
            click.echo(f"korral: REST API at {core.serve_rest(rest_address, tls=rest_tls)}")
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


def _grpc_security(
    cert: Path | None, key: Path | None, client_ca: Path | None, token_file: Path | None
) -> dict[str, Any]:
    """serve_grpc's tls and tokens from korral serve's flags, checked before the core starts."""
    from korral.server.auth import ServerTls, load_tokens

    security: dict[str, Any] = {}
    if (cert is None) != (key is None) or (client_ca is not None and cert is None):
        fail("--grpc-tls-cert and --grpc-tls-key go together (--grpc-tls-client-ca needs both)")
    try:
        if cert is not None and key is not None:
            security["tls"] = ServerTls(cert_file=cert, key_file=key, client_ca_file=client_ca)
            security["tls"].credentials()
        if token_file is not None:
            security["tokens"] = load_tokens(token_file)
    except ValueError as error:
        fail(str(error))
    return security


if __name__ == "__main__":  # pragma: no cover
    main()


def _bench_gang(console: Any, chosen: Any, json_file: Path | None) -> None:
    """``korral bench --workload gang``: placeholders, then all of them replaced; korral and reference."""
    from korral.harness.benchmark import runner

    console.print(
        f"[bold]gang[/bold]: {chosen.node_count:,} nodes, {chosen.asks:,} placeholders, "
        "then as many real asks"
    )
    korral_result = runner.run_gang_korral(chosen)
    reference = runner.run_gang_reference(chosen)
    for label, result in (("korral", korral_result), ("reference", reference)):
        console.print(
            f"  {label:<10} {result.placeholders_per_second:>10,.0f} placeholder allocations/s"
            f"  {result.replacements_per_second:>10,.0f} replacements/s"
            f"  ratio {result.ratio:.2f} (replacements / allocations)"
        )
    if _write_json(json_file, runner.gang_json(chosen, korral_result, reference)):
        console.print(f"written: {json_file}")


def _stress_preemption(
    console: Any,
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


def _bench_preemption(
    nodes: int | None,
    allocations: int | None,
    preemptors: int | None,
    rate: float | None,
    delay: float,
    burst: int,
    json_file: Path | None,
) -> None:
    """``korral bench --workload preemption``: a full cluster of borrowers, then urgent asks that preempt."""
    from rich.console import Console

    from korral.harness.benchmark import runner, workloads

    console = Console(soft_wrap=True)
    try:
        chosen = workloads.preemption(
            nodes or 500, allocations or 5000, preemptors or 50, rate=rate or 10.0, delay=delay, burst=burst
        )
    except ValueError as error:
        raise click.UsageError(str(error)) from error
    if json_file is not None:
        json_file.parent.mkdir(parents=True, exist_ok=True)
    console.print(
        f"[bold]preemption[/bold]: {chosen.node_count:,} nodes full with {chosen.allocations:,} low-priority "
        f"allocations, then {len(chosen.preemptors):,} urgent asks at {chosen.rate:g}/s and "
        f"{len(chosen.burst):,} at once (preemption.delay {chosen.delay:g}s, "
        f"{workloads.PREEMPTION_VICTIMS_PER_ASK} victims each)"
    )
    try:
        result = runner.run_preemption_korral(chosen, progress=lambda line: console.print(f"  {line}"))
    except (TimeoutError, RuntimeError) as error:
        fail(f"preemption benchmark failed: {error}")
    console.print(
        f"  paced      {result.preemptors_allocated:,} of {result.preemptors:,} allocated; latency p50 "
        f"{result.latency_ms_p50:,.1f} ms, p99 {result.latency_ms_p99:,.1f} ms, max "
        f"{result.latency_ms_max:,.1f} ms (the ask's delay expiring -> its allocation)\n"
        f"  burst      {result.burst_allocated:,} of {result.burst:,} allocated in "
        f"{result.burst_seconds:.2f}s; "
        f"victims {result.burst_victims:,} chosen, {result.burst_victims_per_second:,.0f}/s; latency p50 "
        f"{result.burst_latency_ms_p50:,.1f} ms, p99 {result.burst_latency_ms_p99:,.1f} ms\n"
        f"  memory     peak RSS {result.peak_rss_mb:,.0f} MB"
    )
    if _write_json(json_file, runner.preemption_json(chosen, result)):
        console.print(f"written: {json_file}")
