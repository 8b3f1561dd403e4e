"""``korral bench`` says only what its runs support: a ratio between runs that did the same work at
the same pace (or none, and why), every ask left unallocated accounted for, a sweep of the sizes asked
for written where --out says (by default outside the repository), YuniKorn's figures labelled as the
published measurements they are."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from korral.cli import main


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={"FORCE_COLOR": None, "COLUMNS": "80"})


@pytest.mark.slow
def test_a_paced_run_gets_no_ratio_and_says_why(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "paced.json"
    sizes = ["--nodes", "50", "--asks", "500", "--rate", "1000"]
    result = runner.invoke(main, ["bench", "--workload", "scale", *sizes, "--json", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert document["ratio_to_reference"] is None
    assert "arrival pace (1,000 asks/s" in document["no_ratio_because"]
    line = next(line for line in result.output.splitlines() if line.strip().startswith("ratio"))
    assert line.strip().startswith("ratio      none: korral was fed at the arrival pace")
    assert "x the sequential reference" not in result.output


def test_every_unallocated_ask_is_explained(runner: CliRunner, tmp_path: Path) -> None:
    # two nodes for 600 asks of up to 8 vcores: most cannot be placed, and the output says why
    out = tmp_path / "full.json"
    sizes = ["--nodes", "2", "--asks", "600", "--rate", "100000"]
    result = runner.invoke(main, ["bench", "--workload", "scale", *sizes, "--json", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    left = 600 - document["korral"]["allocations"]
    assert left > 0
    text = document["unallocated"]
    assert text.startswith(f"{left:,} of 600 asks: "), text
    counts = [int(n.replace(",", "")) for n in re.findall(r"(?:: |; )([\d,]+) ", text)]
    assert sum(counts) == left, text  # every one of them, by reason
    assert "the cluster has no room left for it" in text or "no node has room for it" in text
    assert f"unallocated {text}" in " ".join(result.output.split())
    # the same asks, the same pace (all at once), a different number allocated: no ratio, and why
    if document["korral"]["allocations"] != document["reference"]["allocations"]:
        assert document["ratio_to_reference"] is None
        assert "not the same work" in document["no_ratio_because"]


def test_the_yunikorn_shape_gets_its_ratio_and_nothing_unexplained(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "y.json"
    result = runner.invoke(main, ["bench", "--nodes", "20", "--asks", "400", "--json", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert document["ratio_to_reference"] is not None and document["no_ratio_because"] is None
    assert document["unallocated"] is None and "unallocated" not in result.output


@pytest.mark.slow
def test_bench_lines_are_never_wrapped_when_piped(runner: CliRunner) -> None:
    # CliRunner's output is not a terminal, as a file is not; at 80 columns the ratio line is longer
    result = runner.invoke(
        main, ["bench", "--workload", "scale", "--nodes", "50", "--asks", "500", "--rate", "1000"]
    )
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if line.strip().startswith("ratio"))
    assert len(line) > 80 and line.rstrip().endswith("for a ratio)")


@pytest.mark.slow
def test_sweep_honours_the_sizes_and_writes_where_out_says(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(main, ["bench", "--sweep", "--nodes", "20", "--asks", "200"])
    assert result.exit_code == 0, result.output
    default = tmp_path / "korral-sweep"  # the current directory, never the repository's bench/results
    assert sorted(p.name for p in default.iterdir()) == ["sweep.json", "sweep.md", "sweep.png"]
    points = json.loads((default / "sweep.json").read_text())
    assert [(p["nodes"], p["asks"]) for p in points] == [(20, 200)]
    text = " ".join(result.output.split())
    # YuniKorn never published a figure for 20 nodes and 200 asks: none is announced, none drawn
    assert "YuniKorn published no figures for these sizes" in text and "be3bb487" not in text
    elsewhere = tmp_path / "there"
    again = runner.invoke(
        main, ["bench", "--sweep", "--nodes", "10", "--asks", "100", "--out", str(elsewhere)]
    )
    assert again.exit_code == 0, again.output
    assert [(p["nodes"], p["asks"]) for p in json.loads((elsewhere / "sweep.json").read_text())] == [
        (10, 100)
    ]


@pytest.mark.slow
def test_a_repeated_sweep_reports_the_median_run_and_the_range(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    result = runner.invoke(
        main, ["bench", "--sweep", "--nodes", "10", "--asks", "100", "--repeat", "3", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    (point,) = json.loads((out / "sweep.json").read_text())
    ratios = point["ratio_runs"]
    assert len(ratios) == 3
    # the point is its median run, whole: its own ratio is the middle one of the three
    assert point["ratio_to_reference"] == sorted(ratios)[1]
    row = next(line for line in (out / "sweep.md").read_text().splitlines() if line.startswith("| 10 |"))
    assert f"{sorted(ratios)[1]:.2f} ({min(ratios):.2f}-{max(ratios):.2f})" in row
    # and the same runs against the reference without its delivery to the RM (the earlier method)
    undelivered = point["undelivered_ratio_runs"]
    assert len(undelivered) == 3 and all(u <= r for u, r in zip(undelivered, ratios, strict=True))
    assert (
        f"{point['ratio_to_undelivered_reference']:.2f} ({min(undelivered):.2f}-{max(undelivered):.2f})"
        in row
    )


def test_repeat_without_a_sweep_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(main, ["bench", "--nodes", "2", "--asks", "10", "--repeat", "3"])
    assert result.exit_code == 2, result.output
    assert "--repeat applies to --sweep" in result.output
    scale = runner.invoke(main, ["bench", "--workload", "scale", "--repeat", "3"])
    assert scale.exit_code == 2, scale.output


def test_out_without_a_sweep_is_a_usage_error(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(main, ["bench", "--nodes", "2", "--asks", "10", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2, result.output
    assert "--out applies to --sweep and --plot-only only" in result.output
    assert not (tmp_path / "x").exists()


def test_yunikorns_figures_are_announced_only_for_the_sizes_it_published() -> None:
    from korral.harness.benchmark import sweep

    results = [{"nodes": 1000, "asks": 10_000}, {"nodes": 20, "asks": 200}, {"nodes": 1000, "asks": 50_000}]
    assert sweep.yunikorn_sizes(results) == [(1000, 10_000), (1000, 50_000)]
    assert sweep.yunikorn_sizes([{"nodes": 20, "asks": 200}]) == []
