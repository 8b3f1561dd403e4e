"""``korral simulate``'s runs from start to summary: one config, or two compared on the same workload.

A run stopped by Ctrl-C still prints its summary, over the part that ran, and says so; the caller
learns of it from ``RunFigures.interrupted`` (the command line then exits 130, as a shell expects).
"""

from __future__ import annotations

import signal
import threading

from rich.console import Console

from korral.harness.simulate.cluster import SAMPLE_INTERVAL, SimulateRun, bundled_config
from korral.harness.simulate.history import History, HistoryRun
from korral.harness.simulate.report import RunFigures, print_comparison, print_summary


def interrupted_note(console: Console, run: SimulateRun, planned: float) -> None:
    console.print(
        f"interrupted (Ctrl-C) after {run.duration:g}s of the {planned:g}s of virtual time: the figures "
        "cover the part that ran"
    )


def simulate(
    config: str | None,
    nodes: int,
    duration: float,
    seed: int,
    arrival_rate: float,
    plot: str | None = None,
    console: Console | None = None,
) -> RunFigures:
    """Run the simulation on a queues.yaml text (None: the bundled example), live, then its summary."""
    console = console or Console()
    text = config if config is not None else bundled_config()
    simulation = SimulateRun(text, nodes, duration, seed, arrival_rate)
    return show(console, [simulation], plot)


def compare(
    configs: list[tuple[str, str]],
    nodes: int,
    duration: float,
    seed: int,
    arrival_rate: float,
    plot: str | None = None,
    console: Console | None = None,
) -> RunFigures:
    """The same workload on two configs ((label, queues.yaml text) each), summaries side by side;
    returns B's figures (interrupted: whichever run Ctrl-C stopped)."""
    runs = [SimulateRun(text, nodes, duration, seed, arrival_rate, label=label) for label, text in configs]
    return show(console or Console(), runs, plot)


def show(console: Console, runs: list[SimulateRun], plot: str | None) -> RunFigures:
    """Run one (live) or two (quietly, then side by side), print the figures, draw the chart if asked."""
    planned = runs[0].duration
    current = runs[0]

    def stop(*_: object) -> None:  # Ctrl-C asks the runs to stop at their next event
        for run in runs:
            run.stop_requested = True

    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, stop) if on_main_thread else None
    try:
        if len(runs) == 1:
            current.run(console)
        else:
            for current in runs:
                console.print(
                    f"simulating {current.label} ({planned:g}s of virtual time, seed {current.seed})"
                )
                current.run(None)
                if current.interrupted or current.stop_requested:
                    current.interrupted = True
                    break
            else:
                console.print()
    except KeyboardInterrupt:  # without the handler above (not the main thread)
        if not current.interrupted:
            current.interrupted, current.duration = True, SAMPLE_INTERVAL
    finally:
        if on_main_thread:
            signal.signal(signal.SIGINT, previous)
    if len(runs) > 1 and current.interrupted:  # the rest never ran: this run's summary, nothing to compare
        stopped = current.figures()
        print_summary(console, stopped, SAMPLE_INTERVAL)
        interrupted_note(console, current, planned)
        return stopped
    figures = [run.figures() for run in runs]
    if len(runs) == 1:
        print_summary(console, figures[0], SAMPLE_INTERVAL)
        if runs[0].interrupted:
            interrupted_note(console, runs[0], planned)
            return figures[0]
    else:
        print_comparison(console, figures[0], figures[1])
    if plot is not None:
        from korral.harness.simulate.plot import plot_usage

        plot_usage(plot, runs)
        console.print(f"chart: {plot}")
    return figures[-1]


def replay(
    history: History,
    configs: list[tuple[str, str]],
    nodes: int,
    seed: int,
    plot: str | None = None,
    console: Console | None = None,
) -> RunFigures:
    """A recorded history replayed against one config or two ((label, queues.yaml text) each)."""
    console = console or Console()
    runs: list[SimulateRun] = [HistoryRun(text, history, nodes, seed, label=label) for label, text in configs]
    cluster = runs[0].node_list()
    console.print(
        f"replaying {history.source}: {len(history.apps):,} applications, {history.ask_count:,} asks over "
        f"{history.span:,.1f}s, on {len(cluster):,} nodes"
        + (f" ({history.skipped:,} asks without a recorded resource left out)" if history.skipped else "")
    )
    return show(console, runs, plot)
