"""End-to-end tests of ``korral simulate`` and ``korral stress`` through click's CliRunner."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import cli_helpers
import pytest
from cli_helpers import KNOWN_FAULT, SHIM_CONFIGMAP, flat, number, table_rows, write_config
from click.testing import CliRunner

from korral.cli import main

# the shared fixture: pytest finds a fixture by its name in the test module
runner = cli_helpers.runner


# ---- simulate --------------------------------------------------------------------------------------


RESOURCE = re.compile(r"^(?:(\d+)G/(\d+)c|0)$")


def resource(cell: str) -> tuple[int, int]:
    """``133G/66c`` -> (133, 66); ``0`` -> (0, 0)."""
    match = RESOURCE.match(cell)
    assert match, cell
    return (int(match[1]), int(match[2])) if match[1] else (0, 0)


def children_of(path: str, paths: list[str]) -> list[str]:
    return [p for p in paths if p.rsplit(".", 1)[0] == path and p != path]


def test_simulate_summary_has_every_queue_over_one_window(runner: CliRunner) -> None:
    duration = 1.0  # the smallest --duration allows
    result = runner.invoke(
        main, ["simulate", "--duration", str(duration), "--seed", "3", "--arrival-rate", "10"]
    )
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    live = table_rows(result.output, "korral simulate:")
    summary = table_rows(result.output, "summary: every queue over the same")
    # every configured queue, the parent root.batch included, and every queue created during the run
    for queue in ("root", "root.production", "root.development", "root.batch", "root.default"):
        assert queue in summary, (queue, list(summary))
    created = [path for path in summary if path.startswith("root.batch.")]
    assert created, list(summary)  # this seed sends applications through the namespace tag rule
    assert set(live) <= set(summary)

    # one window for all: a parent's mean use is its children's sum (each figure rounded to 1G / 1c)
    paths = list(summary)
    for parent in paths:
        children = children_of(parent, paths)
        if not children:
            continue
        memory, vcore = resource(summary[parent][0])
        assert abs(memory - sum(resource(summary[c][0])[0] for c in children)) <= len(children), parent
        assert abs(vcore - sum(resource(summary[c][0])[1] for c in children)) <= len(children), parent

    submitted = re.search(r"applications: (\d+) submitted, (\d+) completed, (\d+) rejected", text)
    assert submitted, text
    assert int(submitted[1]) >= 1
    # root's apps column counts every application beneath it, not only those placed in root itself
    assert int(summary["root"][-1]) == int(submitted[1]) - int(submitted[3]) > 0
    assert int(summary["root"][-1]) == sum(
        int(cells[-1]) for path, cells in summary.items() if not children_of(path, paths)
    )
    asks = re.search(
        r"asks: (\d+) submitted, (\d+) allocated, (\d+) still pending at the end, (\d+) rejected; "
        r"(\d+) allocations released",
        text,
    )
    assert asks, text
    assert int(asks[1]) == int(asks[2]) + int(asks[3]) + int(asks[4])
    assert int(asks[2]) > 0 and int(asks[5]) <= int(asks[2])
    # the rate is labelled as what the simulation offered, not as korral's speed
    assert "offered load:" in text and "not korral's speed" in text
    assert "peak" not in text
    # what each figure means is said under the table
    for legend in ("mean used, mean pending:", "used/guar., used/max:", "apps:"):
        assert legend in text, legend
    wait = re.search(r"allocated asks: p50 ([\d,]+) ms, p99 ([\d,]+) ms", text)
    assert wait and number(wait[1]) <= number(wait[2]), text
    assert "scheduler errors: 0" in text


def test_simulate_waits_count_the_asks_still_pending_at_the_end(runner: CliRunner, tmp_path: Path) -> None:
    # a leaf whose max no ask fits: nothing is ever allocated; applications sent without a queue find
    # no placement rule and are rejected, and their asks with them
    tiny = write_config(
        tmp_path,
        "partitions:\n  - name: default\n    placementrules:\n      - name: provided\n"
        "    queues:\n      - name: root\n        submitacl: '*'\n        queues:\n"
        "          - name: tiny\n            resources: {max: {memory: 1Gi, vcore: 1}}\n",
    )
    arguments = ["simulate", "--config", str(tiny), "--duration", "1", "--arrival-rate", "8", "--seed", "1"]
    result = runner.invoke(main, arguments)
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    asks = re.search(
        r"asks: (\d+) submitted, 0 allocated, (\d+) still pending at the end, (\d+) rejected", text
    )
    assert asks, text
    submitted, pending, rejected = int(asks[1]), int(asks[2]), int(asks[3])
    assert pending > 0 and rejected > 0 and submitted == pending + rejected
    wait = re.search(
        r"every ask, the (\d+) still pending at the end counted with their wait so far: "
        r"p50 ([\d,]+) ms, p99 ([\d,]+) ms",
        text,
    )
    assert wait, text
    # no ask was allocated, yet the asks waited: their wait so far is what the figures show
    assert 0 < number(wait[2]) <= number(wait[3]) <= 60_000
    assert int(wait[1]) == pending
    assert "(no ask was allocated)" in text


def test_simulate_runs_a_shim_configmap_and_summarises_the_queues_it_created(
    runner: CliRunner, tmp_path: Path
) -> None:
    configmap = write_config(tmp_path, SHIM_CONFIGMAP, "yunikorn-configs.yaml")
    result = runner.invoke(
        main,
        ["simulate", "--config", str(configmap), "--duration", "1", "--arrival-rate", "10", "--seed", "5"],
    )
    assert result.exit_code == 0, result.output
    summary = table_rows(result.output, "summary: every queue over the same")
    # no queue but root is configured: every other queue was created by the tag rule during the run
    created = [path for path in summary if path != "root"]
    assert created and all(path.startswith("root.") for path in created), list(summary)
    assert set(created) <= {"root.analytics", "root.etl", "root.ml"}
    assert all(int(summary[path][-1]) > 0 for path in created)
    assert int(summary["root"][-1]) == sum(int(summary[path][-1]) for path in created)
    assert "scheduler errors: 0" in flat(result.output)


@pytest.mark.parametrize("columns", [80, 160])
def test_simulate_screen_fits_the_terminal_without_cutting_a_cell(columns: int) -> None:
    runner = CliRunner(env={"FORCE_COLOR": None, "COLUMNS": str(columns)})
    result = runner.invoke(main, ["simulate", "--duration", "1", "--seed", "3", "--arrival-rate", "10"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert all(len(line) <= columns for line in lines), max(lines, key=len)
    assert "…" not in result.output  # rich's mark of a cell cut short
    live = table_rows(result.output, "korral simulate:")
    summary = table_rows(result.output, "summary: every queue over the same")
    assert all(RESOURCE.match(cells[0]) for cells in live.values())  # "used" is whole, never cut
    assert all(RESOURCE.match(cells[0]) for cells in summary.values())
    # a wide terminal also draws each queue's use against its max, with the guarantee marked
    header = next(line for line in lines if line.split()[:2] == ["queue", "used"])
    assert ("used of max, ┃ guaranteed" in header) == (columns >= 120)


def test_simulate_refuses_an_invalid_config(runner: CliRunner, tmp_path: Path) -> None:
    broken = write_config(
        tmp_path,
        "partitions:\n  - name: default\n    queues:\n      - name: root\n        queues:\n"
        "          - name: a\n            resources: {guaranteed: {vcore: lots}}\n",
    )
    result = runner.invoke(main, ["simulate", "--config", str(broken), "--duration", "1"])
    assert result.exit_code == 1, result.output
    assert result.stdout == ""  # the error is on stderr, and nothing ran
    assert result.output.startswith("invalid configuration: "), result.output
    assert "queue 'root.a'" in result.output and "'lots'" in result.output
    assert "summary" not in result.output


def test_simulate_runs_a_valid_config_without_leaf_queues(runner: CliRunner, tmp_path: Path) -> None:
    lone_root = write_config(
        tmp_path,
        "partitions:\n  - name: default\n    placementrules:\n      - name: tag\n        value: namespace\n"
        "        create: true\n    queues:\n      - name: root\n        submitacl: '*'\n",
    )
    assert runner.invoke(main, ["validate-config", str(lone_root)]).output == "OK\n"
    result = runner.invoke(
        main, ["simulate", "--config", str(lone_root), "--duration", "1", "--arrival-rate", "20"]
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 0, result.output
    assert "scheduler errors: 0" in flat(result.output)


# ---- stress ----------------------------------------------------------------------------------------


def test_stress_short_run_reports_no_violation(runner: CliRunner) -> None:
    callbacks_log = logging.getLogger("korral.callbacks")
    level_before = callbacks_log.level
    result = runner.invoke(main, ["stress", "--duration", "0.5", "--seed", "3", "--rms", "3"])
    assert result.exit_code == 0, result.output
    # it silences the RM callbacks' log while it runs (they fail on purpose), not for the process
    assert callbacks_log.level == level_before
    text = flat(result.output)
    assert text.startswith("korral stress: 3 RMs, 0.5s,"), text
    assert "seed 3" in text
    ok = re.search(
        r"OK: ([\d,]+) operations?, (\d+) (checkpoints?), ([\d,]+) (RM callback failures?) injected on "
        r"purpose and contained",
        text,
    )
    assert ok, text
    assert number(ok[1]) > 0
    assert int(ok[2]) >= 1
    # counted in the singular when there is one
    assert ok[3] == ("checkpoint" if ok[2] == "1" else "checkpoints")
    assert ok[5] == ("RM callback failure" if ok[4] == "1" else "RM callback failures")
    assert text.endswith("no violation"), text
    assert "VIOLATION" not in text


def test_stress_with_one_rm_says_so_in_the_singular(runner: CliRunner) -> None:
    result = runner.invoke(main, ["stress", "--duration", "0.5", "--seed", "4", "--rms", "1"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("korral stress: 1 RM, 0.5s, seed 4"), result.output
    assert not re.search(r"\b1 (RMs|operations|checkpoints|RM callback failures)\b", result.output)


@pytest.mark.slow
@pytest.mark.timeout(300)  # the shrinking has a 120 s budget; it takes a few seconds in practice
def test_stress_catches_an_injected_fault_and_prints_how_to_replay_it() -> None:
    # 80 columns, as a CI log piped from the command: the replay command must not be wrapped
    runner = CliRunner(env={"FORCE_COLOR": None, "COLUMNS": "80"})
    # The run stops at the first checkpoint that finds a violation, so a long --duration costs nothing
    # once the fault shows. Checkpoints come often because a single 1 s window (the default --checkpoint
    # is 2 s) caught this fault in only 4 of 12 runs with this seed; 0.5 s checkpoints caught it in 30 of
    # 30, nearly always at the first one.
    options = ["--duration", "120", "--checkpoint", "0.5", "--seed", "1", "--rms", "1"]
    result = runner.invoke(main, ["stress", *options, "--inject-fault", KNOWN_FAULT])
    assert result.exit_code == 1, result.output
    text = flat(result.output)
    assert f"injected fault '{KNOWN_FAULT}'" in text
    violation = re.search(r"VIOLATION \(seed 1, after ([\d,]+) operations\):", text)
    assert violation, text
    # the fault leaves released allocations on their nodes: orphans the invariant check names
    assert re.search(r"allocation \S+ on node \S+ has no application", text), text
    shrunk = re.search(
        r"shortest sequence found that reproduces it \((\d+) operations,"
        r" failing on each of 3 fresh replays\)",
        text,
    )
    assert shrunk, text
    assert 0 < int(shrunk[1]) < number(violation[1])
    assert f"replay with: korral stress --seed 1 --rms 1 --inject-fault {KNOWN_FAULT}" in text
    replay = f"korral stress --seed 1 --rms 1 --inject-fault {KNOWN_FAULT}"
    assert replay in result.output.splitlines(), result.output  # one whole line, ready to copy
    listed = [line for line in result.output.splitlines() if re.match(r"^\s+\d+\s+rm0\s+\S", line)]
    assert len(listed) == min(int(shrunk[1]), 200), result.output
