"""End-to-end tests of the ``korral`` command line (``korral.cli.main``) through click's CliRunner.

Each test runs a command as a user would (options, files, exit code, what is printed or written) on
the smallest input that still shows the behaviour, so the whole module takes a few seconds plus one
stress run with an injected fault (which shrinks its reproducing sequence before reporting).
"""

from __future__ import annotations

import json
import logging
import re
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner

import korral
from korral.benchmark import workloads
from korral.cli import main
from korral.config import QueueConfig, load_config

BUNDLED_EXAMPLE = Path(korral.__file__).with_name("examples") / "queues.yaml"
KNOWN_FAULT = "node-keeps-released"


@pytest.fixture
def runner() -> CliRunner:
    # rich decides colour and width from the environment: no colour codes, and lines wide enough that
    # the output is not wrapped in the middle of a phrase
    return CliRunner(env={"FORCE_COLOR": None, "COLUMNS": "200"})


def flat(text: str) -> str:
    """The text with every run of whitespace made one space (rich may still wrap long lines)."""
    return " ".join(text.split())


def number(text: str) -> int:
    """An integer as printed with thousands separators: ``"2,552"`` -> 2552."""
    return int(text.replace(",", ""))


def write_config(directory: Path, text: str, name: str = "queues.yaml") -> Path:
    path = directory / name
    path.write_text(text)
    return path


# ---- korral --help ---------------------------------------------------------------------------------


def test_help_lists_every_command(runner: CliRunner) -> None:
    result = runner.invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    for command in ("validate-config", "simulate", "bench", "stress"):
        assert re.search(rf"^\s+{command}\s", result.output, re.MULTILINE), result.output


# ---- validate-config -------------------------------------------------------------------------------


def test_validate_config_accepts_the_bundled_example(runner: CliRunner) -> None:
    result = runner.invoke(main, ["validate-config", str(BUNDLED_EXAMPLE)])
    assert result.exit_code == 0, result.output
    # the README promises exactly this: `OK` and exit 0 (the command prints no summary of the queues)
    assert result.output == "OK\n"


BROKEN_CONFIGS = {
    "bad-quantity": (
        """
partitions:
  - name: default
    queues:
      - name: root
        queues:
          - name: production
            resources:
              guaranteed: {memory: 48Gx, vcore: 24}
""",
        ["queue 'root.production'", "guaranteed", "'48Gx'", "'memory'"],
    ),
    "duplicate-queue-names": (
        """
partitions:
  - name: default
    queues:
      - name: root
        queues:
          - name: team
            parent: true
            queues:
              - name: alpha
              - name: Alpha
""",
        ["queue 'root.team'", "duplicate child name", "'alpha'"],
    ),
    "guaranteed-above-max": (
        """
partitions:
  - name: default
    queues:
      - name: root
        queues:
          - name: a
            resources:
              guaranteed: {memory: 10Gi}
              max: {memory: 5Gi}
""",
        ["queue 'root.a'", "guaranteed resource", "larger than maximum resource"],
    ),
    "misspelt-key": (
        """
partitions:
  - name: default
    queues:
      - name: root
        queues:
          - name: a
            maxaplications: 3
""",
        ["queue 'root.a'", "unknown key 'maxaplications'"],
    ),
    "resources-on-root": (
        """
partitions:
  - name: gpu
    queues:
      - name: root
        resources:
          max: {memory: 1Gi}
""",
        ["partition 'gpu'", "root queue must not have resource limits"],
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN_CONFIGS))
def test_validate_config_rejects_a_broken_file_and_names_what_is_wrong(
    runner: CliRunner, tmp_path: Path, case: str
) -> None:
    text, expected_fragments = BROKEN_CONFIGS[case]
    result = runner.invoke(main, ["validate-config", str(write_config(tmp_path, text))])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("invalid: "), result.output
    assert "OK" not in result.output
    for fragment in expected_fragments:
        assert fragment in result.output, (fragment, result.output)


def test_validate_config_reports_a_yaml_syntax_error_with_its_line(runner: CliRunner, tmp_path: Path) -> None:
    broken = write_config(
        tmp_path,
        "partitions:\n  - name: default\n    queues:\n      - name: root\n"
        "        resources: {max: {memory: 1\n",
    )
    result = runner.invoke(main, ["validate-config", str(broken)])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("invalid: invalid YAML"), result.output
    assert "line 5" in result.output, result.output


def test_validate_config_refuses_a_missing_file_before_reading_it(runner: CliRunner, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-queues.yaml"
    result = runner.invoke(main, ["validate-config", str(missing)])
    assert result.exit_code == 2, result.output  # click's usage error, not the validator's exit 1
    assert "Usage: " in result.output
    assert "does not exist" in result.output
    assert "invalid: " not in result.output


def test_validate_config_refuses_a_directory(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(main, ["validate-config", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "is a directory" in result.output


def test_validate_config_reports_a_file_that_is_not_text_as_invalid(
    runner: CliRunner, tmp_path: Path
) -> None:
    binary = tmp_path / "queues.yaml"
    binary.write_bytes(b"\xff\xfe\x00partitions: []\n")
    result = runner.invoke(main, ["validate-config", str(binary)])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 1, result.output
    assert result.output.startswith("invalid: "), result.output


# ---- bench -----------------------------------------------------------------------------------------


def test_bench_yunikorn_writes_the_documented_json_and_prints_both_schedulers(
    runner: CliRunner, tmp_path: Path
) -> None:
    out = tmp_path / "yunikorn.json"
    result = runner.invoke(
        main, ["bench", "--workload", "yunikorn", "--nodes", "20", "--asks", "400", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())

    assert (document["workload"], document["nodes"], document["asks"]) == ("yunikorn", 20, 400)
    ours, reference = document["korral"], document["reference"]
    # the yunikorn shape sizes its nodes so that every ask fits: both schedulers place all of them
    assert ours["allocations"] == 400
    assert reference["allocations"] == 400
    assert ours["allocations_per_second"] > 0
    assert reference["allocations_per_second"] > 0
    # scheduling alone excludes taking the asks in, over the same allocations: it cannot be slower
    assert reference["scheduling_only_allocations_per_second"] >= reference["allocations_per_second"]
    ratio = document["ratio_to_reference"]
    assert ratio == round(ratio, 3)
    # the document's rates are themselves rounded to 0.1/s, hence the tolerance beyond the 3 places:
    # each rounding moves the ratio by up to 0.05/rate of itself
    ours_rate, reference_rate = ours["allocations_per_second"], reference["allocations_per_second"]
    rounding = 5e-4 + ratio * (0.05 / ours_rate + 0.05 / reference_rate)
    assert ratio == pytest.approx(ours_rate / reference_rate, abs=rounding)
    assert 0 <= ours["latency_ms"]["p50"] <= ours["latency_ms"]["p99"]
    assert ours["messages_per_allocation"] > 0
    assert ours["seconds"] > 0 and reference["seconds"] > 0

    lines = result.output.splitlines()
    assert any(re.match(r"^yunikorn: 20 nodes, 400 asks$", line) for line in lines), result.output
    korral_line = next(line for line in lines if line.strip().startswith("korral "))
    reference_line = next(line for line in lines if line.strip().startswith("reference "))
    assert "allocations/s" in korral_line and "(400 in " in korral_line, korral_line
    assert "allocations/s" in reference_line and "once the asks are in" in reference_line, reference_line
    # the printed rates are the ones written to the file
    printed_rate = number(re.search(r"([\d,]+) allocations/s", korral_line)[1])
    assert abs(printed_rate - ours["allocations_per_second"]) <= 1
    printed_reference_rate = number(re.search(r"([\d,]+) allocations/s", reference_line)[1])
    assert abs(printed_reference_rate - reference["allocations_per_second"]) <= 1
    assert f"written: {out}" in flat(result.output)


def _fits_without_contention(workload: workloads.Workload) -> bool:
    """True when every ask of the workload is certain to be allocated, whatever the order.

    Node capacity: an ask of at most ``largest`` per type fails only if every node is blocked, a node
    being blocked when some type r has more than ``capacity_r - largest_r`` in use; so if the demand,
    summed over types as a fraction of ``capacity_r - largest_r``, is at most the node count, no ask
    can fail for want of a node. Queue quotas: every queue's max covers all the demand beneath it.
    """
    capacities = [node.schedulable_resource for node in workload.nodes.nodes]
    capacity = capacities[0]
    assert all(c == capacity for c in capacities), "the shapes use identical nodes"
    asks = [ask for wave in workload.waves for request in wave.requests for ask in request.asks]
    largest: dict[str, int] = defaultdict(int)
    demand: dict[str, int] = defaultdict(int)
    for ask in asks:
        for name, quantity in ask.resource_ask.items():
            largest[name] = max(largest[name], quantity)
            demand[name] += quantity
    if sum(demand[name] / (capacity[name] - largest[name]) for name in demand) > len(capacities):
        return False

    maximum: dict[str, Mapping[str, int]] = {}

    def walk(queue: QueueConfig, path: str) -> None:
        maximum[path] = queue.resources.max
        for child in queue.queues:
            walk(child, f"{path}.{child.name}")

    walk(load_config(workload.config).partitions[0].queues[0], "root")
    queue_of_app = {app.application_id: app.queue_name for app in workload.applications.new}
    queue_demand: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for ask in asks:
        parts = queue_of_app[ask.application_id].split(".")
        for depth in range(1, len(parts) + 1):
            for name, quantity in ask.resource_ask.items():
                queue_demand[".".join(parts[:depth])][name] += quantity
    return all(
        total <= maximum[path][name]
        for path, totals in queue_demand.items()
        for name, total in totals.items()
        if name in maximum[path]
    )


def test_bench_scale_allocates_every_ask_when_the_cluster_has_room(runner: CliRunner, tmp_path: Path) -> None:
    nodes, asks, rate = 50, 500, 100_000.0
    # the scale shape does not promise that everything fits (at its defaults the leaves with a max
    # cannot hold their share, and few nodes run out): check this size does, on the workload it builds
    assert _fits_without_contention(workloads.build("scale", nodes, asks, seed=1, rate=rate))
    out = tmp_path / "scale.json"
    sizes = ["--nodes", str(nodes), "--asks", str(asks), "--rate", f"{rate:.0f}", "--seed", "1"]
    result = runner.invoke(main, ["bench", "--workload", "scale", *sizes, "--json", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert (document["workload"], document["nodes"], document["asks"]) == ("scale", nodes, asks)
    assert document["korral"]["allocations"] == asks
    assert document["reference"]["allocations"] == asks
    assert document["korral"]["allocations_per_second"] > 0
    assert document["reference"]["allocations_per_second"] > 0
    assert f"scale: {nodes} nodes, {asks} asks" in result.output


def test_bench_scale_paces_the_asks_at_the_given_rate(runner: CliRunner, tmp_path: Path) -> None:
    # What --rate does, not how fast anything ran: 500 asks at 1,000/s go in waves of 50 (the smallest
    # wave), one every 50 ms of schedule, so korral's run cannot end before the last wave is due
    # (0.45 s: a lower bound only sleeping sets, whatever the machine's load).
    workload = workloads.build("scale", nodes=50, asks=500, rate=1000)
    assert [wave.count for wave in workload.waves] == [50] * 10
    assert [wave.at for wave in workload.waves] == pytest.approx([index * 0.05 for index in range(10)])
    out = tmp_path / "paced.json"
    sizes = ["--nodes", "50", "--asks", "500", "--rate", "1000"]
    result = runner.invoke(main, ["bench", "--workload", "scale", *sizes, "--json", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert document["korral"]["allocations"] == 500
    assert document["korral"]["seconds"] >= 0.45


def test_bench_reference_only_measures_the_sequential_scheduler_alone(
    runner: CliRunner, tmp_path: Path
) -> None:
    out = tmp_path / "reference.json"
    sizes = ["--nodes", "20", "--asks", "400"]
    result = runner.invoke(main, ["bench", "--reference-only", *sizes, "--json", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert (document["workload"], document["nodes"], document["asks"]) == ("yunikorn", 20, 400)
    assert "korral" not in document  # the actor system did not run
    reference = document["reference"]
    assert reference["allocations"] == 400
    # scheduling alone is a part of the whole span, so it cannot be the slower rate
    assert reference["scheduling_seconds"] <= reference["seconds"]
    assert reference["scheduling_only_allocations_per_second"] >= reference["allocations_per_second"] > 0
    text = flat(result.output)
    assert "reference only" in text and "scheduling" in text and "with asks" in text


def test_bench_json_goes_into_a_directory_it_creates(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "not" / "yet" / "there.json"
    result = runner.invoke(main, ["bench", "--nodes", "2", "--asks", "10", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["korral"]["allocations"] == 10


def test_bench_without_json_only_prints(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(main, ["bench", "--nodes", "2", "--asks", "10"])
    assert result.exit_code == 0, result.output
    assert list(tmp_path.iterdir()) == []  # no JSON, and no bench/results either (that is --sweep's)
    assert "yunikorn: 2 nodes, 10 asks" in result.output
    assert "written:" not in result.output


# ---- simulate --------------------------------------------------------------------------------------


def test_simulate_schedules_the_bundled_example_and_summarises(runner: CliRunner) -> None:
    duration = 1.0  # the smallest --duration allows
    result = runner.invoke(
        main, ["simulate", "--duration", str(duration), "--seed", "3", "--arrival-rate", "10"]
    )
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    assert "summary: time-averaged queue usage" in text
    # the bundled example's queues appear in the tables
    for queue in ("root.production", "root.development", "root.default"):
        assert queue in result.output, queue

    submitted = re.search(r"applications: (\d+) submitted, (\d+) completed, (\d+) rejected", text)
    assert submitted, text
    assert int(submitted[1]) >= 1
    assert int(submitted[2]) <= int(submitted[1])
    made = re.search(r"allocations: (\d+) made, (\d+) released, ([\d,.]+) per second", text)
    assert made, text
    allocations, released = int(made[1]), int(made[2])
    assert allocations > 0
    assert released <= allocations
    assert float(made[3].replace(",", "")) == pytest.approx(allocations / duration, abs=0.05)
    wait = re.search(r"p50 ([\d,]+) ms, p99 ([\d,]+) ms", text)
    assert wait and number(wait[1]) <= number(wait[2]), text
    assert "scheduler errors: 0" in text


def test_simulate_refuses_an_invalid_config(runner: CliRunner, tmp_path: Path) -> None:
    broken = write_config(
        tmp_path,
        "partitions:\n  - name: default\n    queues:\n      - name: root\n        queues:\n"
        "          - name: a\n            resources: {guaranteed: {vcore: lots}}\n",
    )
    result = runner.invoke(main, ["simulate", "--config", str(broken), "--duration", "1"])
    assert result.exit_code == 1, result.output
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
    ok = re.search(r"OK: ([\d,]+) operations, (\d+) checkpoints, (\d+) RM callback failures contained", text)
    assert ok, text
    assert number(ok[1]) > 0
    assert int(ok[2]) >= 1
    assert text.endswith("no violation"), text
    assert "VIOLATION" not in text


@pytest.mark.timeout(300)  # the shrinking has a 120 s budget; it takes a few seconds in practice
def test_stress_catches_an_injected_fault_and_prints_how_to_replay_it(runner: CliRunner) -> None:
    # The run stops at the first checkpoint that finds a violation, so a long --duration costs nothing
    # once the fault shows. Checkpoints come often because a single 1 s window (the default --checkpoint
    # is 2 s) caught this fault in only 4 of 12 runs with this seed; 0.5 s checkpoints caught it in 30 of
    # 30, nearly always at the first one.
    options = ["--duration", "5", "--checkpoint", "0.5", "--seed", "1", "--rms", "1"]
    result = runner.invoke(main, ["stress", *options, "--inject-fault", KNOWN_FAULT])
    assert result.exit_code == 1, result.output
    text = flat(result.output)
    assert f"injected fault '{KNOWN_FAULT}'" in text
    violation = re.search(r"VIOLATION \(seed 1, after ([\d,]+) operations\):", text)
    assert violation, text
    # the fault leaves released allocations on their nodes: orphans the invariant check names
    assert re.search(r"allocation \S+ on node \S+ has no application", text), text
    shrunk = re.search(r"shortest sequence found that reproduces it \((\d+) operations\)", text)
    assert shrunk, text
    assert 0 < int(shrunk[1]) < number(violation[1])
    assert f"replay with: korral stress --seed 1 --rms 1 --inject-fault {KNOWN_FAULT}" in text
    listed = [line for line in result.output.splitlines() if re.match(r"^\s+\d+\s+rm0\s+\S", line)]
    assert len(listed) == min(int(shrunk[1]), 200), result.output


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
