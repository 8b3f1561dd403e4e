"""``korral bench --sweep``: YuniKorn's shape over node and ask counts, as a table, JSON and a PNG."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from korral.harness.benchmark import runner, workloads

SWEEP_NODES = (500, 1000, 2000, 5000, 10_000)
SWEEP_ASKS = (10_000, 50_000, 100_000)


def run_sweep(
    nodes: tuple[int, ...] = SWEEP_NODES,
    asks: tuple[int, ...] = SWEEP_ASKS,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    repeat: int = 1,
) -> list[dict[str, Any]]:
    """Each point run ``repeat`` times (korral, then the reference, in turn). A point's result is its
    run with the median ratio (the lower of the two middle ones for an even count), whole, so that
    every figure in it comes from one run; ``ratio_runs`` holds every run's ratio."""
    results = []
    runner.warm_up(nodes[0], asks[0])
    for ask_count in asks:
        for node_count in nodes:
            workload = workloads.yunikorn(node_count, ask_count)
            runs = []
            for _ in range(repeat):
                korral_result = runner.run_korral(workload)
                reference = runner.run_reference(workload)
                runs.append(runner.result_json(workload, korral_result, reference))
            result = _median_run(runs)
            if repeat > 1:
                result["ratio_runs"] = [run["ratio_to_reference"] for run in runs]
                result["undelivered_ratio_runs"] = [run["ratio_to_undelivered_reference"] for run in runs]
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median ratio (a run without one, as none of YuniKorn's shape should be, sorts
    first)."""
    ordered = sorted(runs, key=lambda run: run["ratio_to_reference"] or 0.0)
    return ordered[(len(ordered) - 1) // 2]


def _ratio_cell(
    result: dict[str, Any], field: str = "ratio_to_reference", runs_field: str = "ratio_runs"
) -> str:
    ratio = result.get(field)
    if ratio is None:
        return "-"
    runs = [r for r in result.get(runs_field, ()) if r is not None]
    return f"{ratio:.2f} ({min(runs):.2f}-{max(runs):.2f})" if len(runs) > 1 else f"{ratio:.2f}"


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| nodes | asks | korral allocations/s | wall µs per allocation | reference allocations/s | ratio | "
        "ratio to the reference without its delivery | "
        "p99 latency ms | messages/allocation | node registrations/s | peak RSS MB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        k = result["korral"]
        rate = k["allocations_per_second"]
        cells = [
            f"{result['nodes']:,}",
            f"{result['asks']:,}",
            f"{rate:,.0f}",
            f"{1e6 / rate:.1f}",
            f"{result['reference']['allocations_per_second']:,.0f}",
            _ratio_cell(result),
            _ratio_cell(result, "ratio_to_undelivered_reference", "undelivered_ratio_runs"),
            f"{k['latency_ms']['p99']:,.0f}",
            f"{k['messages_per_allocation']:.2f}",
            f"{k['node_registrations_per_second']:,.0f}",
            f"{k['peak_rss_mb']:,.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# YuniKorn's Go core (yunikorn-core be3bb487, its BenchmarkScheduling on the same shape): published
# measurements, recorded in bench/README.md, taken on this project's machine kind (2 vCPU, shared) in
# November 2026 -- not by the run they are drawn beside, nor on the machine that runs it. Drawn for
# scale, labelled as such, never compared in a test. (nodes, low, high): one figure where low == high,
# else the range of the medians of several runs.
YUNIKORN_SOURCE = "yunikorn-core be3bb487 BenchmarkScheduling, published in bench/README.md"
YUNIKORN_MACHINE = "the project's 2 vCPU machine kind"
YUNIKORN_NOTE = f"{YUNIKORN_SOURCE}, measured on {YUNIKORN_MACHINE} in November 2026"
YUNIKORN_SIDE_BY_SIDE: dict[int, tuple[tuple[int, float, float], ...]] = {
    # run alternately with korral's bench on 23 November 2026, on a loaded machine
    10_000: ((1000, 3355, 3355), (10_000, 2675, 2675)),
    100_000: ((1000, 90, 90), (10_000, 79, 79)),
}
YUNIKORN_EARLIER: dict[int, tuple[tuple[int, float, float], ...]] = {
    # earlier runs, alone on the machine: medians of 5 (500-5,000 nodes) or of 3 (1,000 and 10,000)
    10_000: (
        (500, 3930, 4210),
        (1000, 4070, 4850),
        (2000, 3840, 4440),
        (5000, 4150, 4180),
        (10_000, 4300, 4430),
    ),
    50_000: ((1000, 850, 1040),),
    100_000: ((1000, 300, 340), (10_000, 335, 335)),
}
# bench/README.md, "Targets": the yunikorn shape at 20,000 allocations/s or more at every point
TARGET_ALLOCATIONS_PER_SECOND = 20_000
KORRAL_COLOUR = "#1f5fa8"  # korral and its reference share it: a pair, told apart by line style
YUNIKORN_COLOUR = "#d9730d"
TARGET_COLOUR = "#c0392b"


def yunikorn_sizes(results: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """The (nodes, asks) points of ``results`` for which YuniKorn's published figures exist."""
    published = {
        (nodes, asks)
        for table in (YUNIKORN_SIDE_BY_SIDE, YUNIKORN_EARLIER)
        for asks, points in table.items()
        for nodes, _, _ in points
    }
    return sorted({(r["nodes"], r["asks"]) for r in results} & published)


def plot(results: list[dict[str, Any]], path: Path, source: str = "") -> None:
    """Allocations/s against nodes, one panel per ask count: korral, its reference, YuniKorn, the target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ask_counts = sorted({r["asks"] for r in results})
    node_ticks = sorted({r["nodes"] for r in results})
    figure, axes = plt.subplots(
        1, len(ask_counts), figsize=(max(12.0, 4.6 * len(ask_counts)), 5.2), sharey=True, squeeze=False
    )
    for axis, ask_count in zip(axes[0], ask_counts, strict=True):
        rows = sorted((r for r in results if r["asks"] == ask_count), key=lambda r: r["nodes"])
        nodes = [r["nodes"] for r in rows]
        axis.plot(
            nodes,
            [r["korral"]["allocations_per_second"] for r in rows],
            color=KORRAL_COLOUR,
            marker="o",
            linewidth=2,
            label="korral (actors, through korral.Core)",
        )
        axis.plot(
            nodes,
            [r["reference"]["allocations_per_second"] for r in rows],
            color=KORRAL_COLOUR,
            marker="o",
            markerfacecolor="white",
            linestyle="--",
            linewidth=1.5,
            zorder=3,
            label="korral's sequential reference (one thread, same input)",
        )
        for points, filled, label in (
            (
                YUNIKORN_SIDE_BY_SIDE.get(ask_count, ()),
                True,
                "YuniKorn (Go), published: 23 Nov 2026, alternating with korral, loaded machine",
            ),
            (
                YUNIKORN_EARLIER.get(ask_count, ()),
                False,
                "YuniKorn (Go), published: Nov 2026, alone (range of medians)",
            ),
        ):
            if not points:
                continue
            xs = [n for n, _, _ in points]
            middles = [(low + high) / 2 for _, low, high in points]
            spans = [
                [m - low for (_, low, _), m in zip(points, middles, strict=True)],
                [high - m for (_, _, high), m in zip(points, middles, strict=True)],
            ]
            axis.errorbar(
                xs,
                middles,
                yerr=spans,
                color=YUNIKORN_COLOUR,
                marker="D",
                markersize=6,
                markerfacecolor=YUNIKORN_COLOUR if filled else "white",
                linestyle="none",
                capsize=3,
                label=label,
            )
            if filled:
                for x, y in zip(xs, middles, strict=True):
                    axis.annotate(
                        f"{y:,.0f}/s",
                        (x, y),
                        textcoords="offset points",
                        xytext=(0, -14),
                        ha="center",
                        fontsize=8,
                        color=YUNIKORN_COLOUR,
                    )
        axis.axhline(
            TARGET_ALLOCATIONS_PER_SECOND,
            color=TARGET_COLOUR,
            linestyle=":",
            linewidth=1.5,
            zorder=1,  # beneath the reference, which runs close to it
            label=f"korral's target, {TARGET_ALLOCATIONS_PER_SECOND:,}/s at every point (bench/README.md)",
        )
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.xaxis.set_major_locator(FixedLocator(node_ticks))
        axis.xaxis.set_minor_locator(NullLocator())
        axis.xaxis.set_major_formatter(
            FuncFormatter(lambda x, _: f"{x / 1000:g}k" if x >= 1000 else f"{x:g}")
        )
        axis.set_xlim(node_ticks[0] / 1.4, node_ticks[-1] * 1.4)
        axis.set_xlabel("nodes")
        axis.set_title(f"{ask_count:,} asks")
        axis.grid(True, which="major", alpha=0.3)
    first = axes[0][0]
    first.set_ylim(40, 120_000)
    first.yaxis.set_major_locator(FixedLocator([100, 300, 1000, 3000, 10_000, 30_000, 100_000]))
    first.yaxis.set_minor_locator(NullLocator())
    first.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:,.0f}"))
    first.set_ylabel("allocations per second (log scale; higher is better)")
    figure.suptitle("YuniKorn's benchmark shape: allocations per second against nodes", fontsize=13)
    handles, labels = first.get_legend_handles_labels()
    for axis in axes[0][1:]:  # the YuniKorn range may be drawn only in some panels
        for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    figure.legend(
        handles, labels, loc="lower center", ncol=2, fontsize=9, frameon=False, bbox_to_anchor=(0.5, 0.05)
    )
    figure.text(
        0.5,
        0.01,
        f"korral and its reference: the sweep in {source or 'korral bench --sweep'}. YuniKorn: not "
        f"measured by that sweep -- {YUNIKORN_NOTE}; its rate falls with asks because it rescans every "
        "ask after each allocation.",
        ha="center",
        fontsize=7.5,
        color="#444444",
        wrap=True,
    )
    figure.tight_layout(rect=(0, 0.17, 1, 0.95))
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write(results: list[dict[str, Any]], directory: Path) -> tuple[Path, Path, Path]:
    directory.mkdir(exist_ok=True)  # the folder named: its parent must exist (cli.checks)
    json_path = directory / "sweep.json"
    table_path = directory / "sweep.md"
    png_path = directory / "sweep.png"
    json_path.write_text(json.dumps(results, indent=2) + "\n")
    table_path.write_text(table(results) + "\n")
    plot(results, png_path, str(json_path))
    return json_path, table_path, png_path
