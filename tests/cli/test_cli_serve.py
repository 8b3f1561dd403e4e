"""``korral serve`` as a user runs it: a subprocess serving gRPC, an RM connecting, SIGTERM, a clean exit."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from core_helpers import NODE, SMALL, TWO_LEAVES

import korral
from korral import testing as t

KORRAL = [sys.executable, "-c", "from korral.cli import main; main()"]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator:
    processes: list[subprocess.Popen] = []

    def start(*args: str) -> tuple[subprocess.Popen, str]:
        process = subprocess.Popen(
            [*KORRAL, "serve", "--grpc", "127.0.0.1:0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        processes.append(process)
        line = process.stdout.readline()  # blocks until the server says where it listens (or exits)
        found = re.search(r"gRPC SI listening on (\S+)", line)
        assert found, line + process.stderr.read()
        return process, found.group(1)

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait(30)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_serve_schedules_for_a_remote_rm_and_stops_cleanly_on_a_signal(serve, signum: int) -> None:
    process, address = serve("--log-level", "WARNING")
    rm = t.RecordingRM("rm")
    with korral.connect(address) as remote:
        remote.register_resource_manager(t.register("rm", TWO_LEAVES), rm)
        remote.update_node(t.nodes("rm", ["n1"], NODE))
        remote.update_application(t.applications("rm", {"app": "root.a"}))
        assert rm.wait_for(lambda r: r.accepted_apps == ["app"])
        remote.update_allocation(t.asks("rm", "app", 3, SMALL))
        assert rm.wait_for_allocations(3)
        process.send_signal(signum)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "korral: stopping" in out and "korral: stopped" in out
    assert "Traceback" not in err


def test_serve_config_is_the_default_for_an_rm_that_registers_without_one(serve, tmp_path: Path) -> None:
    config = tmp_path / "queues.yaml"
    config.write_text(TWO_LEAVES.replace("- name: b", "- name: from-file"))
    process, address = serve("--config", str(config))
    rm = t.RecordingRM("rm")
    with korral.connect(address) as remote:
        remote.register_resource_manager(t.register("rm", ""), rm)
        remote.update_application(t.applications("rm", {"app": "root.from-file"}))
        assert rm.wait_for(lambda r: r.accepted_apps == ["app"] or bool(r.rejected_apps))
        assert rm.accepted_apps == ["app"], rm.rejected_apps
    process.terminate()
    assert process.wait(60) == 0


@pytest.mark.slow
def test_serve_refuses_an_invalid_config_and_a_busy_address(tmp_path: Path) -> None:
    config = tmp_path / "queues.yaml"
    config.write_text("partitions: [broken")
    failed = subprocess.run(
        [*KORRAL, "serve", "--config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert failed.returncode == 1 and "invalid configuration" in failed.stderr
    with korral.start() as core:
        busy = core.serve_grpc("127.0.0.1:0")
        refused = subprocess.run(
            [*KORRAL, "serve", "--grpc", busy], capture_output=True, text=True, timeout=60
        )
    assert refused.returncode == 1 and "cannot listen" in refused.stderr
    # korral's one line only: gRPC's C core logs nothing of its own before it (its "E1129 ... add_port.cc")
    assert refused.stderr.count("\n") == 1 and failed.stderr.count("\n") == 1, (refused.stderr, failed.stderr)


def test_serve_with_rest_answers_curl_for_what_a_remote_rm_did(serve) -> None:
    # the README's walk-through: a served core, a remote RM over gRPC, and the REST API beside it
    process, address = serve("--rest", "127.0.0.1:0")
    line = process.stdout.readline()
    found = re.search(r"REST API at (\S+)", line)
    assert found, line
    base = found.group(1)
    rm = t.RecordingRM("rm")
    with korral.connect(address) as remote:
        remote.register_resource_manager(t.register("rm", TWO_LEAVES), rm)
        remote.update_node(t.nodes("rm", ["n1"], NODE))
        remote.update_application(t.applications("rm", {"app": "root.a"}))
        assert rm.wait_for(lambda r: r.accepted_apps == ["app"])
        remote.update_allocation(t.asks("rm", "app", 2, SMALL))
        assert rm.wait_for_allocations(2)
        with urllib.request.urlopen(f"{base}/ws/v1/partition/default/nodes", timeout=30) as response:
            nodes = json.load(response)
    assert [node["nodeID"] for node in nodes] == ["n1"]
    assert len(nodes[0]["allocations"]) == 2
    process.terminate()
    assert process.wait(60) == 0


# korral serve with a probe beside it: a thread that writes the process's GC thresholds and switch
# interval to stderr each time they change (the first line: as the process started)
PROBED = (
    "import gc, sys, threading, time\n"
    "def probe():\n"
    "    seen = None\n"
    "    while True:\n"
    "        state = (gc.get_threshold(), sys.getswitchinterval())\n"
    "        if state != seen:\n"
    "            print('process', *state, file=sys.stderr, flush=True)\n"
    "            seen = state\n"
    "        time.sleep(0.01)\n"
    "threading.Thread(target=probe, daemon=True).start()\n"
    "from korral.cli import main; main()\n"
)


def test_serve_tunes_the_collector_and_the_switch_interval_of_its_own_process() -> None:
    # the library leaves both alone (korral.start(), serve_rest()); korral serve's process is korral's
    process = subprocess.Popen(
        [sys.executable, "-c", PROBED, "serve", "--grpc", "127.0.0.1:0", "--rest", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    tuned = "(10000, 10, 100) 0.001"
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(process.stderr), daemon=True)
    reader.start()
    try:
        assert "gRPC SI listening" in process.stdout.readline()
        assert "REST API at" in process.stdout.readline()
        deadline = time.monotonic() + 60  # the probe samples every 10 ms: wait for it, not for a time
        while not any(tuned in line for line in err) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        process.terminate()
        process.wait(60)
        reader.join(60)
    assert process.returncode == 0, err
    states = [line.strip().split(" ", 1)[1] for line in err if line.startswith("process ")]
    assert states[0] != tuned and states[0].endswith(" 0.005"), states  # as Python starts
    assert tuned in states, states  # while korral serve serves


@pytest.mark.slow
def test_bench_remote_reports_both_rates_and_their_ratio(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from korral.cli import main

    out = tmp_path / "remote.json"
    result = CliRunner(env={"FORCE_COLOR": None, "COLUMNS": "200"}).invoke(
        main, ["bench", "--remote", "--nodes", "20", "--asks", "400", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "over gRPC" in result.output and "x in-process" in result.output
    document = json.loads(out.read_text())
    assert document["in_process"]["allocations"] == document["remote"]["allocations"] == 400
    assert document["ratio_to_in_process"] > 0


def test_the_documented_remote_rm_example_runs_against_a_served_core() -> None:
    example = Path(__file__).resolve().parents[2] / "docs" / "remote-rm.py"
    with korral.start() as core:
        address = core.serve_grpc("127.0.0.1:0")
        finished = subprocess.run(
            [sys.executable, str(example), address], capture_output=True, text=True, timeout=60
        )
        assert finished.returncode == 0, finished.stderr
        assert finished.stdout.count("allocated task-") == 4
        core.wait_until_idle()
        assert core.application("[demo]default", "app-1").allocated["vcore"] == 4_000


def test_serve_max_rms_and_max_partitions_bound_what_remote_rms_register(serve) -> None:
    _, address = serve("--max-rms", "2", "--max-partitions", "3", "--log-level", "WARNING")
    two = TWO_LEAVES + TWO_LEAVES.replace("partitions:\n", "").replace("name: default", "name: other")
    with korral.connect(address) as remote:
        remote.register_resource_manager(t.register("rm1", two), t.RecordingRM("rm1"))
        with pytest.raises(korral.SchedulerError, match=r"RESOURCE_EXHAUSTED.*max_partitions"):
            remote.register_resource_manager(t.register("rm2", two), t.RecordingRM("rm2"))
        remote.register_resource_manager(t.register("rm2", TWO_LEAVES), t.RecordingRM("rm2"))
        with pytest.raises(korral.SchedulerError, match=r"RESOURCE_EXHAUSTED.*max_rms"):
            remote.register_resource_manager(t.register("rm3", ""), t.RecordingRM("rm3"))


def test_serve_refuses_a_bound_below_one() -> None:
    for flag in ("--max-rms", "--max-partitions", "--actor-threads"):
        refused = subprocess.run([*KORRAL, "serve", flag, "0"], capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2, refused.stderr
        assert f"Invalid value for '{flag}': 0 is not in the range" in refused.stderr
