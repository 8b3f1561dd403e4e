"""``korral simulate``: the same seed gives the same run, two configs compared, fairness among siblings,
and the chart of usage against guarantee."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_helpers import BUNDLED_EXAMPLE, flat, table_rows, write_config
from click.testing import CliRunner

from korral.cli import main

SHORT = ["--duration", "4", "--arrival-rate", "6"]

# leaves under a guaranteed parent: the parent's usage is its children's sum, so an index over the
# parent and its children together (the old figure) measured the tree, not how the children shared
NESTED = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: org
            resources: {guaranteed: {memory: 64Gi, vcore: 32}}
            queues:
              - name: a
                resources: {guaranteed: {memory: 32Gi, vcore: 16}}
              - name: b
                resources: {guaranteed: {memory: 32Gi, vcore: 16}}
          - name: other
            resources: {guaranteed: {memory: 32Gi, vcore: 16}}
"""


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={"FORCE_COLOR": None, "COLUMNS": "200"})


def test_the_same_seed_gives_the_same_summary(runner: CliRunner) -> None:
    runs = [runner.invoke(main, ["simulate", "--seed", "7", *SHORT]) for _ in range(3)]
    assert all(run.exit_code == 0 for run in runs), runs[0].output
    assert runs[0].output == runs[1].output == runs[2].output
    other = runner.invoke(main, ["simulate", "--seed", "8", *SHORT])
    assert other.exit_code == 0 and other.output != runs[0].output  # the seed is what chooses


def test_fairness_is_among_siblings_never_a_parent_with_its_children(
    runner: CliRunner, tmp_path: Path
) -> None:
    config = write_config(tmp_path, NESTED)
    result = runner.invoke(main, ["simulate", "--config", str(config), "--seed", "3", *SHORT])
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    line = re.search(
        r"fairness: Jain's index of used/guar\. among siblings with a guarantee, "
        r"per parent: (.*?); 1\.0 = all",
        text,
    )
    assert line, text
    groups = dict(re.findall(r"(root[\w.]*): [\d.]+ \(([^)]*)\)", line[1]))
    assert groups == {"root": "org, other", "root.org": "a, b"}, line[1]


def test_compare_runs_the_same_workload_on_two_configs_side_by_side(
    runner: CliRunner, tmp_path: Path
) -> None:
    nested = write_config(tmp_path, NESTED, "nested.yaml")
    chart = tmp_path / "compare.png"
    result = runner.invoke(
        main,
        [
            "simulate",
            "--compare",
            str(BUNDLED_EXAMPLE),
            str(nested),
            "--seed",
            "5",
            *SHORT,
            "--plot",
            str(chart),
        ],
    )
    assert result.exit_code == 0, result.output
    usage = table_rows(result.output, "mean used and pending, per queue")
    shares = table_rows(result.output, "used against guarantee, and fairness among its children")
    waits = table_rows(result.output, "asks' wait (s) per queue")
    # the union of both configs' queues, each with A's and B's figures ("-" where a config has none)
    for queue in ("root", "root.production", "root.development", "root.org", "root.org.a", "root.other"):
        for table in (usage, shares, waits):
            assert queue in table and len(table[queue]) == 4, (queue, list(table))
    assert usage["root.production"][1] == "-" and usage["root.org"][0] == "-"
    assert shares["root.org"][3] != "-"  # fairness among org's children, in B
    assert shares["root.org"][2] == "-"  # org is not in A
    # A's column is exactly what a run of A alone reports: the comparison is the runs themselves
    alone = runner.invoke(main, ["simulate", "--config", str(BUNDLED_EXAMPLE), "--seed", "5", *SHORT])
    summary = table_rows(alone.output, "summary: every queue over the same")
    assert {path: cells[0] for path, cells in summary.items()} == {
        path: cells[0] for path, cells in usage.items() if cells[0] != "-"
    }
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 10_000
    assert f"chart: {chart}" in result.output


def test_plot_writes_the_usage_chart(runner: CliRunner, tmp_path: Path) -> None:
    chart = tmp_path / "usage.png"
    result = runner.invoke(main, ["simulate", "--seed", "2", *SHORT, "--plot", str(chart)])
    assert result.exit_code == 0, result.output
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 10_000


def test_compare_refuses_config_beside_it_and_a_bad_config(runner: CliRunner, tmp_path: Path) -> None:
    both = runner.invoke(
        main,
        [
            "simulate",
            "--config",
            str(BUNDLED_EXAMPLE),
            "--compare",
            str(BUNDLED_EXAMPLE),
            str(BUNDLED_EXAMPLE),
        ],
    )
    assert both.exit_code == 2 and "--config does not apply with --compare" in both.output
    broken = write_config(
        tmp_path,
        "partitions:\n  - name: default\n    queues:\n      - name: root\n        queues:\n"
        "          - name: a\n            resources: {guaranteed: {vcore: lots}}\n",
        "bad.yaml",
    )
    bad = runner.invoke(main, ["simulate", "--compare", str(BUNDLED_EXAMPLE), str(broken)])
    assert bad.exit_code == 1 and bad.output.startswith("invalid configuration: "), bad.output
    assert str(broken) in bad.output


def test_compare_fits_80_columns_without_cutting_a_cell(tmp_path: Path) -> None:
    narrow = CliRunner(env={"FORCE_COLOR": None, "COLUMNS": "80"})
    nested = write_config(tmp_path, NESTED, "nested.yaml")
    result = narrow.invoke(main, ["simulate", "--compare", str(BUNDLED_EXAMPLE), str(nested), *SHORT])
    assert result.exit_code == 0, result.output
    assert all(len(line) <= 80 for line in result.output.splitlines())
    assert "…" not in result.output  # rich's mark of a cell cut short


def test_a_config_that_denies_every_submission_says_why_in_the_summary(
    runner: CliRunner, tmp_path: Path
) -> None:
    # no submitacl anywhere: YuniKorn denies every submission by default, and so does korral
    config = write_config(
        tmp_path,
        "partitions:\n  - name: default\n    queues:\n      - name: root\n        queues:\n"
        "          - name: a\n",
    )
    result = runner.invoke(main, ["simulate", "--config", str(config), "--duration", "3"])
    assert result.exit_code == 0, result.output
    out = flat(result.output)
    rejected = re.search(r"applications: (\d+) submitted, 0 completed, (\d+) rejected", out)
    assert rejected and rejected.group(1) == rejected.group(2) != "0", out
    assert f"rejected because: {rejected.group(2)} x application rejected" in out, out
    assert "no queue has a submitacl or adminacl: YuniKorn denies every submission by default" in out, out


def test_ctrl_c_prints_the_summary_of_the_part_that_ran_and_exits_130(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    # a run far longer than the test: interrupted once it has started simulating (its first line)
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from korral.cli import main; main()",
            "simulate",
            "--duration",
            "1000000",
            "--compare",
            str(BUNDLED_EXAMPLE),
            str(BUNDLED_EXAMPLE),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    assert first.startswith("simulating "), first
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, (out, err)
    assert "Aborted!" not in out + err and "Traceback" not in err, err
    assert "summary: every queue over the same" in out and "interrupted (Ctrl-C) after " in out, out
    assert re.search(r"applications: +\d+ submitted", flat(out)), out
