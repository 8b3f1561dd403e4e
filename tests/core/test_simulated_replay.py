"""``korral stress --simulated``: replay and shrinking, and a harness that reports only what it did.

Violations print in one order in every process, ``--seeds N`` runs N seeds or says why it stopped,
a check never lets virtual time pass, a schedule seed apart from the workload seed, and shrinking that
keeps the very violation it started from. Everything runs on a virtual clock: nothing here depends on
the machine's speed.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from korral import testing as t
from korral.harness.simulated.stress import SimulatedOutcome, SimulatedStress
from korral.harness.stress import Op

pytestmark = pytest.mark.usefixtures("quiet_simulation")


def run_python(script: str, hash_seed: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONHASHSEED": hash_seed},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr
    return result.stdout


# The first seed whose check finds three orphans at once (a node keeps every released allocation whose
# uuid ends in 0), then that seed replayed by the command line: its violations come out of a set
# difference, which iterates in an order string hashing decides.
THREE_ORPHANS = """
import logging, sys
logging.disable(logging.CRITICAL)
from click.testing import CliRunner
from korral.cli import main
from korral.harness.simulated.stress import SimulatedStress
harness = SimulatedStress(rms=1, operations=60, fault="node-keeps-released")
seed = next(s for s in range(1, 400) if len(harness.run_seed(s).violations) >= 3)
print(seed)
print("\\n".join(harness.run_seed(seed).violations))
args = ["stress", "--simulated", "--rms", "1", "--operations", "60", "--seed", str(seed)]
args += ["--inject-fault", "node-keeps-released"]
print(CliRunner().invoke(main, [*args, "--replay"]).output.splitlines()[-4:])
"""


@pytest.mark.slow
def test_the_same_replay_prints_its_violations_in_the_same_order_in_every_process() -> None:
    outputs = [run_python(THREE_ORPHANS, hash_seed) for hash_seed in ("1", "2", "3")]
    lines = outputs[0].splitlines()
    assert sum("has no application" in line for line in lines) >= 3, outputs[0]
    assert outputs[1] == outputs[0] and outputs[2] == outputs[0], (
        "one replay printed its violations in orders that depend on PYTHONHASHSEED"
    )


class SteppingClock:
    """The harness's wall clock, ten seconds on at every reading: a run of seeds "takes" as long on
    every machine."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        self.now += 10.0
        return self.now

    def process_time(self) -> float:
        return self.now


def stress(monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    from click.testing import CliRunner

    from korral.cli import main
    from korral.harness.simulated import jobs as simulated_jobs

    monkeypatch.setattr(simulated_jobs, "time", SteppingClock())
    result = CliRunner().invoke(main, ["stress", "--simulated", "--rms", "1", "--operations", "5", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_seeds_without_a_duration_runs_every_seed_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    # the default --duration (30 s) is three clock readings of this run: it must not cut the seeds
    output = stress(monkeypatch, "--seeds", "6")
    assert "6 seeds 1..6 (no time limit)" in output, output
    assert "6 seeds (1..6) in" in output and "no violation in 6 seeds" in output, output
    assert "STOPPED EARLY" not in output


def test_a_duration_that_cuts_the_seeds_short_says_so_and_claims_no_seed_it_did_not_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    output = stress(monkeypatch, "--seeds", "6", "--duration", "25")
    assert "6 seeds 1..6 (stopping at 25s if not done)" in output, output
    # readings: 10 (deadline 35), after seed 1: 20, after seed 2: 30, after seed 3: 40 - stop
    assert "3 seeds (1..3) in" in output, output
    assert "STOPPED EARLY: ran 3 of the 6 seeds asked for (seeds 4..6 did not run): --duration 25s" in output
    assert "OK" not in output


def test_a_check_never_lets_virtual_time_pass_so_no_timer_fires_between_its_reads() -> None:
    """``--operations 100 --seed 541`` (2 RMs) once reported a placeholder ask "lost" on correct code:
    each delivery of the check's own queries let perturbed virtual time pass, the placeholder timeout
    fell due between the read of the application and the RM's callback, and the check saw the ask gone
    from the core before the RM had heard of it. A check now reads with the clock frozen."""
    from korral.core import Core
    from korral.harness.simulated.stress import SimulatedStress
    from korral.harness.stress import Driver
    from korral.testing import RecordingRM

    moved: list[tuple[float, float]] = []
    checks = [0]

    class Watched(SimulatedStress):
        def _check(self, core: Core, rms: list[RecordingRM], drivers: list[Driver] | None) -> list[str]:
            simulation = core.simulation
            assert simulation is not None
            before = simulation.now
            problems = super()._check(core, rms, drivers)
            checks[0] += 1
            if simulation.now != before:
                moved.append((before, simulation.now))
            return problems

    outcome = Watched(rms=2, operations=100).run_seed(541)
    assert checks[0] > 20
    assert not moved, f"{len(moved)} of {checks[0]} checks let virtual time pass, e.g. {moved[:3]}"
    assert not outcome.violations, outcome.violations


def test_a_frozen_simulation_fires_no_timer_and_refuses_to_advance() -> None:
    import korral
    from korral import testing as t
    from korral.actors.simulated import SimulationError

    config = "partitions: [{name: default, queues: [{name: root, submitacl: '*', queues: [{name: a}]}]}]"

    def start() -> korral.Core:
        """An application whose only allocation was released: Completing for 50 ms of virtual time."""
        core = korral.start(runtime="simulated", seed=3, completing_timeout=0.05)
        assert core.simulation is not None
        core.simulation.perturb(step_time=0.01)
        rm = t.RecordingRM("rm")
        core.register_resource_manager(t.register("rm", config), rm)
        core.update_node(t.nodes("rm", ["n1"], {"memory": 1000}))
        core.update_application(t.applications("rm", {"x": "root.a"}))
        core.update_allocation(t.asks("rm", "x", 1, {"memory": 10}))
        core.wait_until_idle()
        core.update_allocation(t.release("rm", "x"))
        core.wait_until_idle()
        return core

    looked = start()
    simulation = looked.simulation
    assert simulation is not None
    assert looked.application("[rm]default", "x").state == "Completing"  # type: ignore[union-attr]
    now = simulation.now
    with simulation.frozen():
        for _ in range(20):  # 20 reads, each delivery up to 10 ms: the timeout would fall due
            assert looked.application("[rm]default", "x").state == "Completing"  # type: ignore[union-attr]
        with pytest.raises(SimulationError):
            looked.advance(1.0)
    assert simulation.now == now
    looked.advance(0.1)  # thawed: the timeout falls due
    assert looked.application("[rm]default", "x").state == "Completed"  # type: ignore[union-attr]
    looked.stop()


FAULT = "recovery-onto-leaving-node"  # a node leaving before its recovered allocation's owner took it in


@functools.cache
def fault_found() -> SimulatedOutcome:
    """The first seed of 301..600 whose run shows the fault (few do: 325 and 555)."""
    from korral.harness.simulated.stress import SimulatedStress

    found, count, _ = SimulatedStress(rms=1, operations=30, fault=FAULT).search(range(301, 601), budget=None)
    assert found is not None, f"the fault did not show in {count} seeds"
    return found


def test_the_schedule_seed_is_the_seed_unless_given_and_drives_only_the_delivery_order() -> None:
    from korral.harness.simulated.stress import SimulatedStress

    harness = SimulatedStress(rms=2, operations=30)
    default = harness.run_seed(77, full_trace=True)
    same = harness.run_seed(77, schedule_seed=77, full_trace=True)
    assert default.trace == same.trace and default.ops == same.ops and default.schedule_seed == 77
    others = [harness.run_seed(77, schedule_seed=schedule, full_trace=True) for schedule in (1, 2)]
    for other in others:
        assert other.seed == 77 and other.trace != default.trace, "the schedule seed chose nothing"
        # the workload seed chose the same first calls; what an RM does later follows what it heard
        assert other.ops[:4] == default.ops[:4]
    # the other way round: other workloads under one schedule seed make other calls
    assert harness.run_seed(78, schedule_seed=77).ops[:4] != default.ops[:4]


@pytest.mark.no_cover  # a long run over code other tests cover (pyproject.toml: no_cover)
def test_a_failing_workload_reruns_under_other_schedules_and_the_replay_names_both_seeds() -> None:
    from click.testing import CliRunner

    from korral.cli import main
    from korral.harness.simulated.stress import SimulatedStress

    harness = SimulatedStress(rms=1, operations=30, fault=FAULT)
    found = fault_found()
    assert found.schedule_seed == found.seed
    # the same workload under other schedules (up to 300): some show it, some do not
    failing: list[SimulatedOutcome] = []
    passing: list[SimulatedOutcome] = []
    for schedule in range(1000, 1300):
        run = harness.run_seed(found.seed, schedule_seed=schedule)
        (failing if run.violations else passing).append(run)
        if failing and passing:
            break
    assert failing and passing, f"{len(failing)} of {len(failing) + len(passing)} schedules fail"
    pair = ["--seed", str(found.seed), "--schedule-seed", str(failing[0].schedule_seed)]
    common = ["stress", "--simulated", "--rms", "1", "--inject-fault", FAULT]
    runner = CliRunner()
    search = runner.invoke(
        main, [*common, "--seed", str(found.seed), "--schedule-seed", "1000", "--seeds", "300"]
    )
    assert search.exit_code == 1, search.output
    assert f"workload seed {found.seed} under 300 schedule seeds 1000..1299" in search.output
    assert f"VIOLATION at {' '.join(pair)}" in search.output, search.output
    assert f"--inject-fault {FAULT} {' '.join(pair)} --replay" in search.output, search.output
    replayed = runner.invoke(main, [*common, *pair, "--replay"])
    assert replayed.exit_code == 1
    assert f"  - {failing[0].violations[0]}" in replayed.output


def test_a_violation_is_its_kind_and_subject_not_the_uuids_a_shorter_run_renumbers() -> None:
    from korral.harness.repro import shows, signature

    orphan = "[rm0]default: allocation [rm0]default-ea3d71fa-12 on node rm0-node-2 has no application"
    renumbered = "[rm0]default: allocation [rm0]default-0b1c2d3e-4 on node rm0-node-2 has no application"
    assert signature(orphan) == signature(renumbered)
    assert not shows([orphan.replace("rm0-node-2", "rm0-node-3")], orphan), "another node is another subject"
    lost = "rm0: ask rm0-app-4-ph-2 of rm0-app-4 is neither pending, allocated, released nor rejected (lost)"
    assert not shows([lost.replace("ph-2", "ph-1"), orphan], lost)
    assert shows([orphan, lost], lost)
    resized = (
        "[rm0]default queue root.a: allocated {'memory': 5} != sum of its applications {'memory': 3}: {}"
    )
    assert signature(resized) == signature(resized.replace("5", "7"))


def test_a_replay_runs_the_rms_ledger_check_too() -> None:
    """The RM-side ledger (every ask it sent is pending, allocated, released or rejected) is checked in
    a replay as in the run: here rm0 sends an ask into rm1's namespace, which rm0 never hears of."""
    ops = [
        Op(
            seq=1,
            rm=0,
            kind="apps",
            request=t.applications("rm0", {"rm0-app-1": "root.a"}),
            description="app",
        ),
        Op(
            seq=2,
            rm=0,
            kind="allocations",
            request=t.asks("rm1", "rm0-app-1", 1, {"memory": 100, "vcore": 100}, prefix="rm0-app-1-ask-"),
            description="an ask of rm0's application, sent as rm1",
        ),
        Op(seq=3, rm=0, kind="run", request=("idle", 0.0), description="run"),
    ]
    outcome = SimulatedStress(rms=2, operations=3).replay(1, ops)
    lost = "rm0: ask rm0-app-1-ask-0 of rm0-app-1 is neither pending, allocated, released nor rejected (lost)"
    assert lost in outcome.violations, outcome.violations


@pytest.mark.slow
@pytest.mark.timeout(600)  # a CPU-bound run of many seeds: minutes beside CPU hogs
def test_shrinking_keeps_the_violation_and_prints_a_pytest_case_that_fails_with_it(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from korral.cli import main
    from korral.harness import repro

    found = fault_found()
    harness = SimulatedStress(rms=1, operations=30, fault=FAULT)
    minimal = harness.shrink(found.seed, found.ops, violation=found.violations[0])
    assert len(minimal) < len(found.ops)
    assert repro.shows(harness.replay(found.seed, minimal).violations, found.violations[0])
    args = ["stress", "--simulated", "--rms", "1", "--inject-fault", FAULT, "--seed", str(found.seed)]
    result = CliRunner().invoke(main, [*args, "--seeds", "1"])
    assert result.exit_code == 1, result.output
    assert f"--seed {found.seed} --schedule-seed {found.seed} --replay" in result.output
    case = result.output.split("# ---- 8< ----\n", 1)[1].split("# ---- >8 ----", 1)[0]
    (tmp_path / "test_shrunk.py").write_text(case)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_shrunk.py")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        check=False,
    )
    assert run.returncode == 1, run.stdout + run.stderr  # the test fails: the violation shows
    assert "1 failed" in run.stdout and "is on no node" in run.stdout, run.stdout


def _printed_case(output: str) -> str:
    return output.split("# ---- 8< ----\n", 1)[1].split("# ---- >8 ----", 1)[0]


def _pytest_fails(case: str, tmp_path: Path, wanted: str) -> None:
    """Run a printed case as a test module: it must fail, showing ``wanted``."""
    (tmp_path / "test_printed.py").write_text(case)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_printed.py")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        check=False,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 failed" in run.stdout and wanted in run.stdout, run.stdout


@pytest.mark.slow
@pytest.mark.timeout(600)  # a CPU-bound run of many seeds: minutes beside CPU hogs
def test_a_violation_its_operations_do_not_replay_is_said_plainly_with_a_seed_case_that_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When replaying the recorded operations does not show the seed's violation, the command line
    prints no "shortest sequence" and no case from operations: it says so, prints the seed's replay
    command, and a pytest case running the seed itself, which fails."""
    from click.testing import CliRunner

    from korral.cli import main

    found = fault_found()
    replayed: list[int] = []

    def replay_shows_nothing(self: SimulatedStress, seed: int, ops: object, **kwargs: object) -> object:
        replayed.append(seed)  # as if the operations replayed took another way
        return attrs.evolve(found, violations=())

    monkeypatch.setattr(SimulatedStress, "replay", replay_shows_nothing)
    args = ["stress", "--simulated", "--rms", "1", "--inject-fault", FAULT, "--seed", str(found.seed)]
    result = CliRunner().invoke(main, [*args, "--seeds", "1"])
    assert result.exit_code == 1, result.output
    assert replayed
    assert "shortest sequence that still shows" not in result.output
    assert "NOT REPRODUCED BY OPERATIONS" in result.output
    assert f"--seed {found.seed} --schedule-seed {found.seed} --replay" in result.output
    case = _printed_case(result.output)
    assert f"run_seed({found.seed}, schedule_seed={found.seed})" in case
    _pytest_fails(case, tmp_path, "is on no node")
