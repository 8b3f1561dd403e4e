"""End-to-end tests of the ``korral`` command line: --help, and option values click refuses."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path

import cli_helpers
import pytest
from cli_helpers import KNOWN_FAULT
from click.testing import CliRunner

import korral
from korral.actors.workers import DEFAULT_ACTOR_THREADS
from korral.cli import main
from korral.config import load_config
from korral.harness.benchmark import workloads

# the shared fixture: pytest finds a fixture by its name in the test module
runner = cli_helpers.runner


# ---- korral --help ---------------------------------------------------------------------------------


def test_help_lists_every_command(runner: CliRunner) -> None:
    result = runner.invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    for command in ("validate-config", "simulate", "bench", "stress", "serve"):
        assert re.search(rf"^\s+{command}\s", result.output, re.MULTILINE), result.output


def test_help_describes_every_command_without_cutting_it_short() -> None:
    # click shortens a description that does not fit the line with "..."; 80 columns is the narrowest
    result = CliRunner(env={"COLUMNS": "80"}).invoke(main, ["--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    commands = result.output.split("Commands:")[1].splitlines()[1:]
    assert len(commands) == 5, result.output
    assert all(line.rstrip().endswith(".") and "..." not in line for line in commands), result.output


def test_version_is_the_installed_distributions(runner: CliRunner) -> None:
    expected = importlib.metadata.version("korral")
    assert korral.__version__ == expected
    for option in ("--version", "-V"):
        result = runner.invoke(main, [option])
        assert (result.exit_code, result.output) == (0, f"korral {expected}\n")


def test_python_dash_m_korral_runs_the_command_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "korral", "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (0, f"korral {korral.__version__}\n"), done.stderr
    checked = subprocess.run(
        [sys.executable, "-m", "korral", "validate-config", "-"],
        input="partitions: [{name: default, queues: [{name: root, bogus: 1}]}]\n",
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (checked.returncode, checked.stdout) == (1, "")
    assert checked.stderr.startswith("invalid: ") and "unknown key 'bogus'" in checked.stderr


# ---- option values click refuses -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "option"),
    [
        (["bench", "--nodes", "0"], "--nodes"),
        (["bench", "--asks", "-5"], "--asks"),
        (["bench", "--workload", "kubernetes"], "--workload"),
        (["bench", "--workload", "scale", "--rate", "0.5"], "--rate"),
        (["simulate", "--duration", "0.5"], "--duration"),
        (["simulate", "--nodes", "0"], "--nodes"),
        (["simulate", "--arrival-rate", "0"], "--arrival-rate"),
        (["stress", "--rms", "17"], "--rms"),
        (["stress", "--rms", "0"], "--rms"),
        (["stress", "--duration", "0.1"], "--duration"),
        (["stress", "--checkpoint", "0"], "--checkpoint"),
        (["stress", "--inject-fault", "no-such-fault"], "--inject-fault"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else None,
)
def test_out_of_range_option_values_are_usage_errors(
    runner: CliRunner, arguments: list[str], option: str
) -> None:
    result = runner.invoke(main, arguments)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}'" in result.output, result.output
    assert re.search(rf"^Usage: \S+ {arguments[0]} ", result.output, re.MULTILINE), result.output


def test_inject_fault_usage_error_lists_the_known_faults(runner: CliRunner) -> None:
    result = runner.invoke(main, ["stress", "--inject-fault", "no-such-fault"])
    assert result.exit_code == 2
    assert KNOWN_FAULT in result.output


@pytest.mark.no_cover  # a long run over code other tests cover (pyproject.toml: no_cover)
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_stress_soak_prints_rss_threads_and_actors_and_nothing_piles_up(runner: CliRunner) -> None:
    """``korral stress --soak``: a row per sample; removed actors are retired while the second RM keeps
    the core busy, so the live actors (and threads) do not grow with the cycles; the verdict says so."""
    # the cycles end the run; the duration only bounds it (generous: CI may run beside CPU hogs)
    options = ["stress", "--soak", "--cycles", "2000", "--every", "250", "--duration", "240"]
    result = runner.invoke(main, options)
    assert result.exit_code == 0, result.output
    rows = [
        [float(cell.replace(",", "")) for cell in line.split()]
        for line in result.output.splitlines()
        if re.fullmatch(r"\s*[\d,]+\s+[\d.]+\s+[\d.]+\s+\d+\s+[\d,]+\s+[\d,]+\s*", line)
    ]
    assert [row[0] for row in rows] == [250 * i for i in range(1, 9)], result.output
    assert "RSS MB" in result.output and "threads" in result.output and "actors" in result.output
    assert "RSS +2 MB per 10,000 cycles" in result.output  # the limits are stated
    assert (
        result.output.rstrip().splitlines()[-1].startswith("OK: no measure grew past its limit after warm-up")
    )
    (_, _, _, threads_first, actors_first, busy_first), (_, _, _, threads_last, _, busy_last) = (
        rows[0],
        rows[-1],
    )
    assert busy_last > busy_first > 0, "the second RM did not keep the core busy"
    # threads do not grow with the cycles (the verdict's fitted line says so); the four tiers' workers
    # start as first needed, so a sample may count some more than the first did, never past them
    assert threads_last <= threads_first + 4 * DEFAULT_ACTOR_THREADS, result.output
    # 500 cycles remove 500 applications of this RM and more of the busy one. A sample counts what is
    # live at that instant: the busy RM's work in flight and the removed actors not retired yet (they
    # go on the partition's next tick), 200-900 on a quiet machine, going up and down between
    # samples; a leak keeps every removed actor: +2,255 per 500 cycles before removed actors retired
    # themselves. So the fewest live in the second half of the run, not one sample, is compared.
    fewest_late = min(row[4] for row in rows[len(rows) // 2 :])
    assert fewest_late - actors_first < 500, result.output


@pytest.mark.slow
def test_bench_scale_with_user_limits_checks_them_on_half_the_leaves(
    runner: CliRunner, tmp_path: Path
) -> None:
    nodes, asks, rate = 50, 500, 100_000.0
    workload = workloads.build("scale", nodes, asks, seed=1, rate=rate, user_limits=True)
    root = load_config(workload.config).partitions[0].queues[0]
    leaves = [leaf for division in root.queues for leaf in division.queues]
    assert sum(1 for leaf in leaves if leaf.limits) == len(leaves) // 2
    out = tmp_path / "limited.json"
    sizes = ["--nodes", str(nodes), "--asks", str(asks), "--rate", f"{rate:.0f}", "--seed", "1"]
    result = runner.invoke(
        main, ["bench", "--workload", "scale", *sizes, "--user-limits", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert document["workload"] == "scale-user-limits"
    # set where the workload never reaches them: every ask is placed, as without limits
    assert document["korral"]["allocations"] == document["reference"]["allocations"] == asks


def test_bench_multi_rm_reports_every_rm_on_each_engine(
    runner: CliRunner, tmp_path: Path, engine: str
) -> None:
    out = tmp_path / "multi.json"
    result = runner.invoke(
        main,
        [
            "bench",
            "--workload",
            "multi-rm",
            "--rms",
            "2",
            "--nodes",
            "20",
            "--asks",
            "200",
            "--engine",
            engine,
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "bench-0" in result.output and "bench-1" in result.output
    (run,) = json.loads(out.read_text())["results"]
    assert run["engine"] == engine and run["allocations"] == 400
    assert [rm["allocations"] for rm in run["per_rm"]] == [200, 200]
