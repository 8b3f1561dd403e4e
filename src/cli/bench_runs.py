"""The runs ``korral bench`` makes: one workload through korral and through the reference (or the
reference alone), the sweep, a remote RM, gang, preemption, several RMs; each prints its figures and
writes ``--json`` when asked."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from korral.cli.group import fail

if TYPE_CHECKING:  # the harness and rich are imported when a run starts, not for --help
    from rich.console import Console

    from korral.harness.benchmark.workloads import Workload


def new_console() -> Console:
    from rich.console import Console

    return Console(soft_wrap=True)  # piped to a file: whole lines, never wrapped mid-phrase


def write_json(json_file: Path | None, document: object) -> bool:
    """Write ``--json``'s file, if one was asked for; True when written."""
    if json_file is None:
        return False
    json_file.write_text(json.dumps(document, indent=2) + "\n")
    return True


def sweep(nodes: int | None, asks: int | None, out: Path, json_file: Path | None, repeat: int = 1) -> None:
    """``korral bench --sweep``: YuniKorn's shape over the sweep's points, a line per point as it ends
    (``repeat`` runs per point: the run with the median ratio)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from korral.harness.benchmark import sweep as sweeps

    screen = new_console()
    node_counts = (nodes,) if nodes is not None else sweeps.SWEEP_NODES
    ask_counts = (asks,) if asks is not None else sweeps.SWEEP_ASKS
    total = len(node_counts) * len(ask_counts)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=screen,
    ) as progress:
        task = progress.add_task("sweep", total=total)

        def done(result: dict[str, Any]) -> None:
            progress.advance(task)
            progress.console.print(
                f"{result['nodes']:>6,} nodes {result['asks']:>7,} asks: "
                f"{result['korral']['allocations_per_second']:>9,.0f}/s korral, "
                f"{result['reference']['allocations_per_second']:>9,.0f}/s reference"
            )

        results = sweeps.run_sweep(node_counts, ask_counts, on_result=done, repeat=repeat)
    paths = sweeps.write(results, out)
    screen.print(sweeps.table(results))
    screen.print("written: " + ", ".join(str(p) for p in paths))
    published = sweeps.yunikorn_sizes(results)
    if published:
        sizes = ", ".join(f"{n:,} nodes/{a:,} asks" for n, a in published)
        screen.print(
            f"sweep.png also draws YuniKorn's figures for {sizes}: published measurements "
            f"({sweeps.YUNIKORN_NOTE}), not measured by this sweep"
        )
    else:
        screen.print(
            "YuniKorn published no figures for these sizes: sweep.png draws korral and its reference"
        )
    write_json(json_file, results)


def reference_only(chosen: Workload, json_file: Path | None) -> None:
    """``korral bench --reference-only``: the sequential reference alone, in this fresh process."""
    from korral.harness.benchmark import runner

    screen = new_console()
    reference = runner.run_reference(chosen)
    document = runner.reference_json(chosen, reference)
    screen.print(
        f"[bold]{chosen.name}[/bold]: {chosen.node_count:,} nodes, {chosen.asks:,} asks, reference only\n"
        f"  scheduling {reference.scheduling_allocations_per_second:>10,.0f} allocations/s"
        f"  ({reference.allocations:,} in {reference.scheduling_seconds:.3f}s,"
        " timed from when every ask is in)\n"
        f"  with asks  {reference.allocations_per_second:>10,.0f} allocations/s"
        f"  (taking the asks in: {reference.seconds - reference.scheduling_seconds:.3f}s;"
        f" converting the allocations for the RM and handing them over: {reference.delivery_seconds:.3f}s)"
    )
    if write_json(json_file, document):
        screen.print(f"written: {json_file}")


def against_reference(build: Callable[[], Workload], json_file: Path | None) -> None:
    """``korral bench``: one workload through korral, then the same (seeded) through the reference."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from korral.harness.benchmark import runner

    screen = new_console()
    chosen = build()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=screen,
        transient=True,
    ) as progress:
        task = progress.add_task(f"korral: {chosen.name}", total=chosen.asks)
        runner.warm_up(chosen.node_count, chosen.asks)
        # korral runs a workload of its own, let go of as it is submitted (as an RM's requests are), so
        # the one the reference runs afterwards (the same: workloads are seeded) is not counted in
        # korral's peak RSS
        del chosen
        korral_result = runner.run_korral(
            build(), progress=lambda made, _: progress.update(task, completed=made)
        )
        progress.update(task, description="reference", completed=0)
        chosen = build()
        reference = runner.run_reference(chosen)
    result = runner.result_json(chosen, korral_result, reference)
    k = result["korral"]
    screen.print(
        f"[bold]{chosen.name}[/bold]: {chosen.node_count:,} nodes, {chosen.asks:,} asks\n"
        f"  korral     {k['allocations_per_second']:>10,.0f} allocations/s"
        f"  ({k['allocations']:,} in {k['seconds']:.3f}s)\n"
        f"  reference  {result['reference']['allocations_per_second']:>10,.0f} allocations/s"
        f"  ({result['reference']['allocations']:,} allocations, timed as korral's: every ask given, "
        "every allocation delivered to an RM callback)\n"
        f"             {result['reference']['scheduling_only_allocations_per_second']:>10,.0f} allocations/s"
        "  its scheduling cycles alone, timed from when every ask is in (as YuniKorn's benchmark times)\n"
        f"             {result['reference']['undelivered_allocations_per_second']:>10,.0f} allocations/s"
        "  without the delivery to the RM callback (the earlier measure)\n"
        + (
            f"  ratio      {result['ratio_to_reference']:.2f}x = korral's allocations/s over the reference's "
            "first figure (same asks, same allocations, same timing); "
            f"{result['ratio_to_undelivered_reference']:.2f}x over its third\n"
            if result["ratio_to_reference"] is not None
            else f"  ratio      none: {result['no_ratio_because']}\n"
        )
        + (f"  unallocated {result['unallocated']}\n" if result["unallocated"] else "")
        + f"  latency    p50 {k['latency_ms']['p50']:,.1f} ms, p99 {k['latency_ms']['p99']:,.1f} ms"
        " (ask submitted -> allocation received)\n"
        f"  messages   {k['messages_per_allocation']:.2f} per allocation\n"
        f"  nodes      {k['node_registrations_per_second']:,.0f} registrations/s\n"
        f"  memory     peak RSS {k['peak_rss_mb']:,.0f} MB\n"
        "  CPU µs per allocation (CPU time of each stage over the allocations, not wall time): "
        + ", ".join(f"{stage} {us:.1f}" for stage, us in k["cpu_us_per_allocation"].items())
    )
    if write_json(json_file, result):
        screen.print(f"written: {json_file}")


def plot_only(sweep_json: Path, out: Path) -> None:
    """``korral bench --plot-only``: sweep.png drawn again from a sweep.json, nothing run."""
    from korral.harness.benchmark import sweep as sweeps

    try:
        results = json.loads(sweep_json.read_text(encoding="utf-8"))
        if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
            raise ValueError("not a list of sweep points")
        out.mkdir(exist_ok=True)  # its parent was checked (cli.checks)
        path = out / "sweep.png"
        sweeps.plot(results, path, str(sweep_json))
    except (OSError, ValueError, KeyError, TypeError) as error:
        fail(f"cannot plot {sweep_json}: {error}")
    click.echo(f"written: {path}")


def multi_rm(rms: int, nodes: int, asks: int, engine: str, repeat: int, json_file: Path | None) -> None:
    """``korral bench --workload multi-rm``: several RMs at once, on threads, Ray or both."""
    from statistics import median

    from korral.harness.benchmark.multi_rm import run_multi_rm

    console = new_console()
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
    document: dict[str, Any] = {"workload": "multi-rm", "results": [r.as_json() for r in results]}
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
    if write_json(json_file, document):
        console.print(f"written: {json_file}")


def remote(chosen: Workload, json_file: Path | None) -> None:
    """korral bench --remote: the same workload in-process, then with the RM in a child process."""
    from korral.harness.benchmark import remote as remote_rm
    from korral.harness.benchmark import runner

    console = new_console()
    if chosen.name != "yunikorn":
        raise click.UsageError("--remote runs YuniKorn's shape: use --workload yunikorn")
    console.print(f"[bold]remote[/bold]: {chosen.node_count:,} nodes, {chosen.asks:,} asks, in-process first")
    runner.warm_up(chosen.node_count, chosen.asks)
    local = runner.run_korral(chosen)
    over_grpc = remote_rm.run_remote(chosen.node_count, chosen.asks)
    ratio = over_grpc.allocations_per_second / local.allocations_per_second
    console.print(
        f"  in-process {local.allocations_per_second:>10,.0f} allocations/s"
        f"  ({local.allocations:,} in {local.seconds:.3f}s)\n"
        f"  over gRPC  {over_grpc.allocations_per_second:>10,.0f} allocations/s"
        f"  ({over_grpc.allocations:,} in {over_grpc.seconds:.3f}s, RM in another process)\n"
        f"  ratio      {ratio:.2f}x in-process\n"
        f"  latency    p50 {over_grpc.latency_ms_p50:,.1f} ms, p99 {over_grpc.latency_ms_p99:,.1f} ms\n"
        f"  CPU µs per allocation in-process: {local.stage_us.get('total', 0.0):,.1f}; over gRPC, by stage:"
    )
    for stage, value in over_grpc.stage_us.items():
        console.print(f"    {value:>8,.1f}  {stage}")
    document = {
        "workload": chosen.name,
        "nodes": chosen.node_count,
        "asks": chosen.asks,
        "in_process": {
            "allocations": local.allocations,
            "seconds": local.seconds,
            "allocations_per_second": local.allocations_per_second,
            "cpu_us_per_allocation": local.stage_us.get("total"),
        },
        "remote": {
            "allocations": over_grpc.allocations,
            "seconds": over_grpc.seconds,
            "allocations_per_second": over_grpc.allocations_per_second,
            "latency_ms": {"p50": over_grpc.latency_ms_p50, "p99": over_grpc.latency_ms_p99},
            "cpu_us_per_allocation": over_grpc.stage_us,
        },
        "ratio_to_in_process": ratio,
    }
    if write_json(json_file, document):
        console.print(f"written: {json_file}")


def gang(chosen: Workload, json_file: Path | None) -> None:
    """``korral bench --workload gang``: placeholders, then all of them replaced; korral and reference."""
    from korral.harness.benchmark import gang as gangs

    console = new_console()
    console.print(
        f"[bold]gang[/bold]: {chosen.node_count:,} nodes, {chosen.asks:,} placeholders, "
        "then as many real asks"
    )
    korral_result = gangs.run_gang_korral(chosen)
    reference = gangs.run_gang_reference(chosen)
    for label, result in (("korral", korral_result), ("reference", reference)):
        console.print(
            f"  {label:<10} {result.placeholders_per_second:>10,.0f} placeholder allocations/s"
            f"  {result.replacements_per_second:>10,.0f} replacements/s"
            f"  ratio {result.ratio:.2f} (replacements / allocations)"
        )
    if write_json(json_file, gangs.gang_json(chosen, korral_result, reference)):
        console.print(f"written: {json_file}")


def preemption(
    nodes: int | None,
    allocations: int | None,
    preemptors: int | None,
    rate: float | None,
    delay: float,
    burst: int,
    json_file: Path | None,
) -> None:
    """``korral bench --workload preemption``: a full cluster of borrowers, then urgent asks that preempt."""
    from korral.harness.benchmark import preemption as preempting
    from korral.harness.benchmark import workloads

    console = new_console()
    try:
        chosen = workloads.preemption(
            nodes or 500, allocations or 5000, preemptors or 50, rate=rate or 10.0, delay=delay, burst=burst
        )
    except ValueError as error:
        raise click.UsageError(str(error)) from error
    console.print(
        f"[bold]preemption[/bold]: {chosen.node_count:,} nodes full with {chosen.allocations:,} low-priority "
        f"allocations, then {len(chosen.preemptors):,} urgent asks at {chosen.rate:g}/s and "
        f"{len(chosen.burst):,} at once (preemption.delay {chosen.delay:g}s, "
        f"{workloads.PREEMPTION_VICTIMS_PER_ASK} victims each)"
    )
    try:
        result = preempting.run_preemption_korral(chosen, progress=lambda line: console.print(f"  {line}"))
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
    if write_json(json_file, preempting.preemption_json(chosen, result)):
        console.print(f"written: {json_file}")
