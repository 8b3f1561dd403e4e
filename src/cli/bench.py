"""``korral bench``: korral against its sequential reference; its options and which run each asks for
(the runs themselves: ``korral.cli.bench_runs``)."""

from __future__ import annotations

from pathlib import Path

import click

from korral.cli import bench_runs as runs
from korral.cli.checks import BENCH_MODES, output_problem, refuse_inapplicable, writable_folder
from korral.cli.group import fail, main
from korral.cli.options import count_option, flag_option, output_file_option, real_option, seed_option

# bench --sweep's results: in the current directory, never into the repository's tracked bench/results
DEFAULT_SWEEP_OUT = "korral-sweep"


@main.command(short_help="Measure korral against its sequential reference.")
@click.option(
    "--workload",
    type=click.Choice(["yunikorn", "scale", "gang", "multi-rm", "preemption"]),
    default="yunikorn",
    show_default=True,
)
@count_option("--nodes", "default: 1,000 (yunikorn), 10,000 (scale)")
@count_option("--asks", "default: 10,000 (yunikorn), 100,000 (scale)")
@seed_option(1)
@real_option("--rate", "scale workload: asks per second (default 25,000)", default=None, minimum=1.0)
@output_file_option("--json", "write the results as JSON", dest="json_file")
@flag_option(
    "--sweep",
    "yunikorn shape over 500-10,000 nodes and 10k-100k asks (--nodes, --asks: that one value instead)",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    callback=writable_folder,
    help="where --sweep (and --plot-only) write sweep.md, sweep.json and sweep.png [default: ./korral-sweep]",
)
@flag_option(
    "--reference-only", "only the sequential reference, in this fresh process (its own speed, one thread)"
)
@click.option(
    "--plot-only",
    "plot_only",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="draw sweep.png in --out from a sweep.json already written, without running anything",
)
@flag_option(
    "--user-limits",
    "scale workload: user limits on half its leaves (never reached: measures the checks' cost)",
)
@flag_option(
    "--remote", "yunikorn shape with the RM in another process over gRPC, against in-process in the same run"
)
@count_option("--rms", "multi-rm: how many RMs", default=2)
@click.option(
    "--engine",
    type=click.Choice(["threads", "ray", "both"]),
    default="threads",
    show_default=True,
    help="multi-rm: where partitions run (both: threads, then ray, and their ratio)",
)
@count_option(
    "--repeat",
    "multi-rm: runs per engine; --sweep: runs per point (the run with the median ratio, and the range)",
    default=1,
)
@count_option(
    "--allocations",
    "preemption: low-priority allocations filling the cluster (default 5,000; 100,000 at scale)",
)
@count_option(
    "--preemptors",
    "preemption: urgent asks that preempt (default 50), arriving at --rate per second (default 10)",
)
@count_option(
    "--burst",
    "preemption: then this many urgent asks at once (victims chosen per second with a backlog)",
    default=50,
    minimum=0,
)
@real_option(
    "--preemption-delay",
    "preemption: the urgent queue's preemption.delay, seconds",
    default=0.5,
    minimum=0.001,
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
    if repeat != 1 and workload == "yunikorn" and not sweep:
        raise click.UsageError("--repeat applies to --sweep (and to --workload multi-rm) only")
    if out is None:
        out = Path(DEFAULT_SWEEP_OUT)
        if (sweep or plot_only is not None) and (problem := output_problem(out, folder=True)):
            fail(f"{out} (the default of --out): {problem}")
    if workload == "preemption":
        runs.preemption(nodes, allocations, preemptors, rate, preemption_delay, burst, json_file)
        return
    if workload == "multi-rm":
        runs.multi_rm(rms, nodes or 1000, asks or 10_000, engine, repeat, json_file)
        return
    if plot_only is not None:
        runs.plot_only(plot_only, out)
        return
    if sweep:
        runs.sweep(nodes, asks, out, json_file, repeat)
        return
    from korral.harness.benchmark import workloads

    def build() -> workloads.Workload:
        return workloads.build(workload, nodes, asks, seed, rate, user_limits)

    if remote:
        runs.remote(build(), json_file)
    elif workload == "gang":
        runs.gang(build(), json_file)
    elif reference_only:
        runs.reference_only(build(), json_file)
    else:
        runs.against_reference(build, json_file)
