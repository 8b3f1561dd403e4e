"""``korral simulate``: watch korral schedule a small simulated cluster (``--compare A B``: two configs)."""

from __future__ import annotations

from pathlib import Path

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
