"""Options that do not apply are usage errors (exit 2), never ignored; ``korral serve`` says who
registered, once each, and where it listens, once."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from core_helpers import TWO_LEAVES

import korral
from korral import testing as t
from korral.cli import main

KORRAL = [sys.executable, "-c", "from korral.cli import main; main()"]


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={"FORCE_COLOR": None, "COLUMNS": "200"})


@pytest.mark.parametrize(
    ("arguments", "refused"),
    [
        (["--seeds", "5"], "--seeds does not apply to korral stress without --simulated"),
        (["--operations", "5", "--replay"], None),  # --replay means simulated: it needs --seed (below)
        (["--cycles", "3"], "--cycles does not apply to korral stress without --simulated"),
        (["--soak", "--seed", "4", "--rms", "3"], "--rms, --seed do not apply to korral stress --soak"),
        (["--soak", "--simulated"], "--soak runs on its own"),
        (["--simulated", "--checkpoint", "1"], "--checkpoint does not apply to korral stress --simulated"),
        (["--preemption", "--no-perturb"], "--no-perturb does not apply to korral stress --preemption"),
        (
            ["--preemption", "--simulated", "--every", "5"],
            "--every does not apply to korral stress --preemption",
        ),
    ],
)
def test_stress_refuses_options_its_mode_does_not_read(
    runner: CliRunner, arguments: list[str], refused: str | None
) -> None:
    result = runner.invoke(main, ["stress", *arguments])
    assert result.exit_code == 2, result.output
    assert (refused or "--replay needs --seed S") in " ".join(result.output.split()), result.output


def test_stress_takes_the_options_its_mode_reads(runner: CliRunner) -> None:
    result = runner.invoke(
        main, ["stress", "--simulated", "--seeds", "2", "--operations", "5", "--seed", "3", "--no-perturb"]
    )
    assert result.exit_code == 0, result.output
    assert "seeds 3..4" in result.output


@pytest.mark.parametrize(
    "arguments",
    [["--grpc", "notanaddress"], ["--grpc", "127.0.0.1:70000"], ["--grpc", ":9090"], ["--rest", "localhost"]],
)
def test_serve_refuses_an_address_that_is_not_host_port_as_a_usage_error(
    runner: CliRunner, arguments: list[str]
) -> None:
    result = runner.invoke(main, ["serve", *arguments])
    assert result.exit_code == 2, result.output
    assert "is not HOST:PORT" in result.output
    assert "listening" not in result.output  # refused before anything started


@pytest.fixture
def served() -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [*KORRAL, "serve", "--grpc", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    yield process
    if process.poll() is None:
        process.kill()
        process.wait(30)


def test_serve_logs_who_registered_and_who_was_refused(served: subprocess.Popen[str]) -> None:
    assert served.stdout is not None
    line = served.stdout.readline()
    found = re.search(r"gRPC SI listening on (\S+)", line)
    assert found, line
    with korral.connect(found.group(1)) as remote:
        remote.register_resource_manager(t.register("rm1", TWO_LEAVES), t.RecordingRM("rm1"))
        remote.register_resource_manager(t.register("rm1", TWO_LEAVES), t.RecordingRM("rm1"))
        with pytest.raises(korral.ConfigError):
            remote.register_resource_manager(t.register("rm2", "partitions: [oops"), t.RecordingRM("rm2"))
    served.send_signal(signal.SIGTERM)
    out, err = served.communicate(timeout=60)
    assert served.returncode == 0, err
    log = [line.split(" ", 3)[3] for line in err.splitlines() if " korral.serve: " in line]
    assert log[0] == "korral.serve: RmID=rm1 registered: partitions [rm1]default", err
    assert (
        log[1] == "korral.serve: RmID=rm1 registered again (its earlier state wiped): partitions [rm1]default"
    )
    assert log[2].startswith("korral.serve: RmID=rm2: registration refused: "), err
    assert all(" INFO " in line or " WARNING " in line for line in err.splitlines() if "korral.serve" in line)
    # where it listens: said once (stdout, where scripts read it), not again in the log
    assert (line + out + err).count("listening on") == 1, line + out + err


@pytest.mark.parametrize(
    ("arguments", "refused"),
    [
        (["--seed", "3"], "--seed does not apply to korral bench --workload yunikorn (the default)"),
        (["--rms", "3", "--rate", "9"], "--rate, --rms do not apply to korral bench --workload yunikorn"),
        (
            ["--workload", "preemption", "--asks", "5"],
            "--asks does not apply to korral bench --workload preemption",
        ),
        (["--workload", "gang", "--sweep"], "--sweep does not apply to korral bench --workload gang"),
        (
            ["--workload", "scale", "--engine", "ray"],
            "--engine does not apply to korral bench --workload scale",
        ),
        (
            ["--workload", "multi-rm", "--user-limits"],
            "--user-limits does not apply to korral bench --workload multi-rm",
        ),
    ],
)
def test_bench_refuses_options_its_workload_does_not_read(
    runner: CliRunner, arguments: list[str], refused: str
) -> None:
    result = runner.invoke(main, ["bench", *arguments])
    assert result.exit_code == 2, result.output
    assert refused in " ".join(result.output.split()), result.output
