"""``korral simulate``: watch korral schedule a small simulated cluster (``--compare A B``: two configs)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

import korral
from korral.cli.config_input import naming, read_config, source_name
from korral.cli.group import fail, main
from korral.cli.options import (
    CONFIG_FILE,
    CONFIG_HELP,
    config_option,
    count_option,
    output_file_option,
    real_option,
    seed_option,
)
from korral.errors import ConfigError

if TYPE_CHECKING:
    from korral.harness.simulate.report import RunFigures


@main.command(short_help="Watch korral schedule a small simulated cluster.")
@config_option(CONFIG_HELP + " (default: the bundled example)")
@count_option("--nodes", "64 GiB / 16 vcore each", default=6)
@real_option("--duration", "seconds", default=30.0, minimum=1.0)
@seed_option(7)
@real_option("--arrival-rate", "applications submitted per second", default=1.5, minimum=0.1)
@click.option(
    "--compare",
    nargs=2,
    type=CONFIG_FILE,
    default=None,
    metavar="A B",
    help="run the same workload on two configs and print their summaries side by side",
)
@output_file_option("--plot", "write a PNG of each guaranteed queue's usage against its guarantee over time")
@click.option(
    "--replay",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="the workload a cluster recorded (YuniKorn's /ws/v1/events/stream JSON lines, or a .csv; "
    "docs/api.md) instead of a generated one: what-if against --config or --compare A B",
)
@click.pass_context
def simulate(
    ctx: click.Context,
    config: Path | None,
    nodes: int,
    duration: float,
    seed: int,
    arrival_rate: float,
    compare: tuple[Path, Path] | None,
    plot: Path | None,
    replay: Path | None,
) -> None:
    """Watch korral schedule a small cluster: applications arrive, run and finish (the README's main job).

    Deterministic: the core runs on the simulated runtime and the workload on its virtual clock, so the
    same --seed gives the same summary. On a terminal the run plays at the wall clock's pace. Ctrl-C
    stops it with the summary of the part that ran (exit 130).
    """
    if replay is not None:
        given = [
            name
            for name in ("duration", "arrival_rate")
            if ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)
        ]
        if given:
            options = ", ".join("--" + name.replace("_", "-") for name in given)
            raise click.UsageError(
                f"{options} do(es) not apply with --replay: the recording sets the workload"
            )
    try:
        run_simulate(config, nodes, duration, seed, arrival_rate, compare, plot, replay)
    except KeyboardInterrupt:  # before the run's own loop took it: no partial figures to show
        click.echo("korral simulate: interrupted", err=True)
        sys.exit(130)


def run_simulate(
    config: Path | None,
    nodes: int,
    duration: float,
    seed: int,
    arrival_rate: float,
    compare: tuple[Path, Path] | None,
    plot: Path | None,
    replay: Path | None = None,
) -> None:
    from korral.harness.simulate.runs import compare as run_compare
    from korral.harness.simulate.runs import simulate as run

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
        if replay is not None:
            stopped(run_replay(replay, texts, nodes, seed, chart))
            return
        stopped(run_compare(texts, nodes, duration, seed, arrival_rate, chart))
        return
    source = source_name(config) if config is not None else "the bundled example"
    try:
        given = None
        if config is not None:
            given, source = read_config(config)
        if replay is not None:
            from korral.harness.simulate.cluster import bundled_config

            korral.load_config(given or bundled_config())
            figures = run_replay(replay, [(source, given or bundled_config())], nodes, seed, chart)
        else:
            figures = run(given, nodes, duration, seed, arrival_rate, chart)
    except ConfigError as error:
        fail(f"invalid configuration: {naming(error, source)}")
    stopped(figures)


def run_replay(
    path: Path, configs: list[tuple[str, str]], nodes: int, seed: int, chart: str | None
) -> RunFigures:
    """``--replay FILE``: the recording read (one line on a bad one), then replayed."""
    from korral.harness.simulate.history import HistoryError, read_history
    from korral.harness.simulate.runs import replay

    try:
        history = read_history(path)
    except HistoryError as error:
        fail(f"cannot replay: {error}")
    return replay(history, configs, nodes, seed, chart)


def stopped(figures: RunFigures) -> None:
    """Exit 130 after a run Ctrl-C stopped (its partial summary printed), as a shell expects of SIGINT."""
    if figures.interrupted:
        sys.exit(130)
