"""End-to-end tests of ``korral bench`` through click's CliRunner, its preemption workload included."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

import cli_helpers
import pytest
from cli_helpers import flat, number, write_config
from click.testing import CliRunner

from korral.cli import main
from korral.config import QueueConfig, load_config
from korral.harness.benchmark import workloads

# the shared fixture: pytest finds a fixture by its name in the test module
runner = cli_helpers.runner


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
    # the reference's span ends as korral's does, once its RM has the allocations: handing them over
    # is a part of it, and without it the reference is faster, so korral's ratio to it is lower
    assert 0 < reference["delivery_seconds"] < reference["seconds"]
    assert reference["undelivered_allocations_per_second"] > reference["allocations_per_second"]
    assert document["ratio_to_undelivered_reference"] <= ratio
    assert 0 <= ours["latency_ms"]["p50"] <= ours["latency_ms"]["p99"]
    assert ours["messages_per_allocation"] > 0
    assert ours["seconds"] > 0 and reference["seconds"] > 0
    assert ours["node_registrations_per_second"] > 0
    # the cost of an allocation by stage, in CPU µs: each one there, the total is their sum
    stages = ours["cpu_us_per_allocation"]
    assert {"intake", "decision", "confirmation", "delivery", "plumbing and gc", "total"} <= set(stages)
    assert all(value >= 0 for value in stages.values())
    assert stages["decision"] > 0  # the scheduler's threads found and counted: 400 asks were placed
    parts = sum(value for stage, value in stages.items() if stage != "total")
    assert parts == pytest.approx(stages["total"], abs=0.1) or parts > stages["total"]
    assert "CPU µs per allocation (CPU time of each stage over the allocations, not wall time): intake" in (
        result.output
    )
    # each of the reference's three rates printed with what it is, and the ratio says which it divides by
    text = flat(result.output)
    for rate, meaning in (
        (
            "scheduling_only_allocations_per_second",
            "its scheduling cycles alone, timed from when every ask is in",
        ),
        ("undelivered_allocations_per_second", "without the delivery to the RM callback"),
    ):
        assert f"{reference[rate]:,.0f} allocations/s {meaning}" in text, text
    assert "x = korral's allocations/s over the reference's first figure" in text
    assert f"{document['ratio_to_undelivered_reference']:.2f}x over its third" in text

    lines = result.output.splitlines()
    assert any(re.match(r"^yunikorn: 20 nodes, 400 asks$", line) for line in lines), result.output
    korral_line = next(line for line in lines if line.strip().startswith("korral "))
    reference_line = next(line for line in lines if line.strip().startswith("reference "))
    assert "allocations/s" in korral_line and "(400 in " in korral_line, korral_line
    assert "allocations/s" in reference_line and "timed as korral's" in reference_line, reference_line
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


def test_bench_gang_replaces_every_placeholder_and_reports_the_ratio(
    runner: CliRunner, tmp_path: Path
) -> None:
    out = tmp_path / "gang.json"
    result = runner.invoke(
        main, ["bench", "--workload", "gang", "--nodes", "10", "--asks", "200", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert (document["workload"], document["nodes"], document["asks"]) == ("gang", 10, 200)
    for side in ("korral", "reference"):
        assert document[side]["placeholders"] == 200
        assert document[side]["replacements"] == 200  # every placeholder replaced
        assert document[side]["replacement_to_allocation_ratio"] > 0
    assert "replacements/s" in result.output


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
    assert 0 < reference["delivery_seconds"] <= reference["scheduling_seconds"]
    text = flat(result.output)
    assert "reference only" in text and "scheduling" in text and "with asks" in text
    assert "converting the allocations for the RM and handing them over" in text


def test_bench_json_is_written_where_named_and_never_makes_a_folder(
    runner: CliRunner, tmp_path: Path
) -> None:
    out = tmp_path / "there.json"
    result = runner.invoke(main, ["bench", "--nodes", "2", "--asks", "10", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["korral"]["allocations"] == 10
    missing = tmp_path / "not" / "yet" / "there.json"
    refused = runner.invoke(main, ["bench", "--nodes", "2", "--asks", "10", "--json", str(missing)])
    assert refused.exit_code == 1 and "does not exist" in refused.stderr, refused.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["there.json"]


def test_bench_without_json_only_prints(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(main, ["bench", "--nodes", "2", "--asks", "10"])
    assert result.exit_code == 0, result.output
    assert list(tmp_path.iterdir()) == []  # no JSON, and no bench/results either (that is --sweep's)
    assert "yunikorn: 2 nodes, 10 asks" in result.output
    assert "written:" not in result.output


@pytest.mark.slow
def test_bench_plot_only_redraws_the_sweep_chart_from_its_json(runner: CliRunner, tmp_path: Path) -> None:
    sweep_json = Path(__file__).parents[2] / "bench" / "results" / "sweep.json"
    out = tmp_path / "charts"
    result = runner.invoke(main, ["bench", "--plot-only", str(sweep_json), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output == f"written: {out / 'sweep.png'}\n"  # nothing was run, only drawn
    assert sorted(p.name for p in out.iterdir()) == ["sweep.png"]
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    not_a_sweep = write_config(tmp_path, '{"nodes": 5}', "other.json")
    refused = runner.invoke(main, ["bench", "--plot-only", str(not_a_sweep), "--out", str(out)])
    assert refused.exit_code == 1
    assert refused.stdout == "" and refused.stderr.startswith(f"cannot plot {not_a_sweep}: ")


# ---- bench --workload preemption (issue 10) -------------------------------------------------------------


def test_bench_preemption_preempts_for_every_urgent_ask_and_reports_its_figures(
    runner: CliRunner, tmp_path: Path
) -> None:
    out = tmp_path / "preemption.json"
    args = ["--nodes", "10", "--allocations", "100", "--preemptors", "10", "--rate", "100", "--burst", "5"]
    result = runner.invoke(
        main,
        ["bench", "--workload", "preemption", *args, "--preemption-delay", "0.05", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert (document["workload"], document["nodes"], document["running_allocations"]) == (
        "preemption",
        10,
        100,
    )
    assert document["preemptors"] == 10 and document["preemption_delay_seconds"] == 0.05
    korral_side = document["korral"]
    # the cluster is full: every urgent ask (twice a running allocation) got its room by preemption
    assert korral_side["preemptors_allocated"] == 10
    assert korral_side["victims"] == 20
    assert korral_side["victims_per_second"] > 0
    assert (
        0
        <= korral_side["latency_ms"]["p50"]
        <= korral_side["latency_ms"]["p99"]
        <= korral_side["latency_ms"]["max"]
    )
    burst = korral_side["burst"]
    assert (burst["asks"], burst["allocated"], burst["victims"]) == (5, 5, 10)
    assert burst["victims_per_second"] > 0
    assert "victims" in result.output and "p99" in result.output


def test_bench_preemption_refuses_more_urgent_asks_than_the_cluster_can_give(runner: CliRunner) -> None:
    result = runner.invoke(
        main,
        ["bench", "--workload", "preemption", "--nodes", "2", "--allocations", "10", "--preemptors", "5"],
    )
    assert result.exit_code != 0
    assert "more than half" in result.output


def test_stage_costs_split_an_allocation_by_stage_and_leave_the_rest_to_plumbing() -> None:
    from korral.harness.benchmark.runner import stage_costs

    handlers = {"AddAsks": 0.1, "ViewOps": 0.1, "RunCycle": 0.05, "Placed": 0.2, "Deliver": 0.1, "Odd": 0.1}
    stages = stage_costs(
        handlers, submit_seconds=0.1, process_seconds=1.0, allocations=1000, scheduler_seconds=0.4
    )
    # per allocation: the scheduler's thread less its ViewOps is the decision (the sample of RunCycle
    # is replaced by it)
    assert stages["decision"] == pytest.approx(300.0)
    assert stages["intake"] == pytest.approx(300.0)  # AddAsks + ViewOps + the caller's submission
    assert stages["confirmation"] == pytest.approx(200.0)
    assert stages["delivery"] == pytest.approx(100.0)
    assert stages["other handlers"] == pytest.approx(100.0)
    assert stages["plumbing and gc"] == pytest.approx(0.0)
    assert stages["total"] == pytest.approx(1000.0)


def test_validate_config_warns_once_per_value_yunikorn_silently_defaults(
    runner: CliRunner, tmp_path: Path
) -> None:
    """`application.sort.policy: fiar` must not be OK with no word and then run as fifo."""
    text = (
        "partitions:\n  - name: default\n    queues:\n      - name: root\n        queues:\n"
        "          - name: a\n            properties:\n              application.sort.policy: fiar\n"
        "              preemption.delay: '10'\n"
    )
    path = write_config(tmp_path, text)
    result = runner.invoke(main, ["validate-config", str(path)])
    assert result.exit_code == 0 and result.stdout == "OK\n"
    warnings = result.stderr.splitlines()
    assert warnings == [
        f"warning: {path}: partition default: queue root.a: application.sort.policy 'fiar' is not a sort "
        "policy YuniKorn knows (fifo, fair, stateaware): the queue sorts fifo",
        f"warning: {path}: partition default: queue root.a: preemption.delay '10' is not a positive "
        "Go duration up to 2562047h (such as 30s or 1m): it is 30s",
    ]


def test_bench_remote_says_where_the_grpc_paths_cpu_goes_in_both_processes(
    runner: CliRunner, tmp_path: Path
) -> None:
    out = tmp_path / "remote.json"
    result = runner.invoke(main, ["bench", "--remote", "--nodes", "10", "--asks", "200", "--json", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert document["remote"]["allocations"] == document["in_process"]["allocations"] == 200
    assert document["in_process"]["cpu_us_per_allocation"] > 0
    stages = document["remote"]["cpu_us_per_allocation"]
    # every stage of both processes, named by what its thread does, counted over the timed span
    assert set(stages) == {
        "rm: encoding and sending requests (the caller's thread)",
        "rm: reading and decoding the stream",
        "rm: callbacks (the callback thread)",
        "rm: other Python threads",
        "rm: gRPC's own threads",
        "server: decoding and routing requests, writing responses (the event loop)",
        "server: encoding responses (the RM's callback thread)",
        "server: gRPC's own threads and the rest",
        "server: the core (scheduling, its actors)",
    }
    assert all(value >= 0 for value in stages.values())
    # the RM encoded and decoded something, and so did the server, and the core scheduled
    for busy in (
        "rm: encoding and sending requests (the caller's thread)",
        "rm: reading and decoding the stream",
        "server: decoding and routing requests, writing responses (the event loop)",
        "server: encoding responses (the RM's callback thread)",
        "server: the core (scheduling, its actors)",
    ):
        assert stages[busy] > 0, busy
    assert "by stage:" in result.output and "server: the core" in result.output
