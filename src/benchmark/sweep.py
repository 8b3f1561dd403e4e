"""``korral bench --sweep``: YuniKorn's shape over node and ask counts, as a table, JSON and a PNG."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from korral.benchmark import runner, workloads

SWEEP_NODES = (500, 1000, 2000, 5000, 10_000)
SWEEP_ASKS = (10_000, 50_000, 100_000)


def run_sweep(
    nodes: tuple[int, ...] = SWEEP_NODES,
    asks: tuple[int, ...] = SWEEP_ASKS,
    on_result: Callable[[dict], None] | None = None,
) -> list[dict]:
    results = []
    for ask_count in asks:
        for node_count in nodes:
            workload = workloads.yunikorn(node_count, ask_count)
            korral_result = runner.run_korral(workload)
            reference = runner.run_reference(workload)
            result = runner.result_json(workload, korral_result, reference)
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results


def table(results: list[dict]) -> str:
    lines = [
        "| nodes | asks | korral allocations/s | µs per allocation | reference allocations/s | ratio | "
        "p99 latency ms | messages/allocation | node registrations/s | peak RSS MB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
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
            f"{result['ratio_to_reference']:.2f}",
            f"{k['latency_ms']['p99']:,.0f}",
            f"{k['messages_per_allocation']:.2f}",
            f"{k['node_registrations_per_second']:,.0f}",
            f"{k['peak_rss_mb']:,.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (rate_axis, cost_axis) = plt.subplots(1, 2, figsize=(12, 4.5))
    for ask_count in sorted({r["asks"] for r in results}):
        rows = sorted((r for r in results if r["asks"] == ask_count), key=lambda r: r["nodes"])
        node_counts = [r["nodes"] for r in rows]
        rates = [r["korral"]["allocations_per_second"] for r in rows]
        reference = [r["reference"]["allocations_per_second"] for r in rows]
        rate_axis.plot(node_counts, rates, marker="o", label=f"korral, {ask_count:,} asks")
        rate_axis.plot(
            node_counts, reference, marker="x", linestyle="--", label=f"reference, {ask_count:,} asks"
        )
        cost_axis.plot(node_counts, [1e6 / rate for rate in rates], marker="o", label=f"{ask_count:,} asks")
    rate_axis.axhline(4200, color="grey", linestyle=":", label="YuniKorn (Go), ~4,200/s")
    rate_axis.axhline(20_000, color="red", linestyle=":", label="target 20,000/s")
    for axis in (rate_axis, cost_axis):
        axis.set_xscale("log")
        axis.set_xlabel("nodes")
        axis.grid(True, alpha=0.3)
    rate_axis.set_ylabel("allocations per second")
    rate_axis.set_title("YuniKorn benchmark shape: throughput")
    cost_axis.set_ylabel("µs per allocation (korral)")
    cost_axis.set_title("cost per allocation")
    rate_axis.legend(fontsize=7)
    cost_axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write(results: list[dict], directory: Path) -> tuple[Path, Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / "sweep.json"
    table_path = directory / "sweep.md"
    png_path = directory / "sweep.png"
    json_path.write_text(json.dumps(results, indent=2) + "\n")
    table_path.write_text(table(results) + "\n")
    plot(results, png_path)
    return json_path, table_path, png_path
