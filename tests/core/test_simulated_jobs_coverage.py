"""``korral stress --simulated``: the coverage report of a seed range, and ``--jobs`` spreading the range
over processes with the same report. All on the virtual clock: nothing depends on the machine's speed."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from korral.cli import main
from korral.harness.simulated.coverage import SI_OPERATIONS, Coverage
from korral.harness.simulated.jobs import search_range
from korral.harness.simulated.stress import SimulatedStress

FAULT = "release-after-release-counted"  # found at seed 12 of the default scenario


pytestmark = pytest.mark.usefixtures("quiet_simulation")


def test_the_coverage_report_names_what_seeds_reached_and_what_they_never_did() -> None:
    harness = SimulatedStress(rms=2, operations=30)
    harness.coverage = Coverage()
    for seed in range(1, 11):
        harness.run_seed(seed)
    coverage = harness.coverage
    assert coverage.seeds == 10
    assert coverage.messages["scheduler: RunCycle"] > 0 and coverage.messages["rmproxy: Route"] > 0
    assert coverage.app_states["Running"] > 0
    assert coverage.operations["apps add"] > 0 and coverage.operations["nodes CREATE"] > 0
    report = "\n".join(coverage.report())
    assert "coverage of 10 seeds:" in report
    assert f"SI operations: {sum(1 for name in SI_OPERATIONS if coverage.operations[name])} of " in report
    # what was never reached is listed by name
    never = [line for line in coverage.report() if line.startswith("    never: ")]
    unseen = next(name for name in SI_OPERATIONS if not coverage.operations[name])
    assert any(unseen in line for line in never), never
    # what no input reaches is listed apart, with why, and not as a blind spot
    assert "unreachable by any SI or API input" in report
    assert "    node: SchedulerDone: the scheduler sends a node actor nothing" in report
    assert not any("node: SchedulerDone" in line for line in never), never
    counted = "\n".join(coverage.report(counts=True))
    assert f"{coverage.messages['scheduler: RunCycle']:>9,}  scheduler: RunCycle" in counted


def test_the_command_prints_its_coverage_report_and_with_the_flag_the_counts() -> None:
    args = ["stress", "--simulated", "--seeds", "3", "--operations", "10"]
    plain = CliRunner().invoke(main, args)
    assert plain.exit_code == 0, plain.output
    assert "coverage of 3 seeds:" in plain.output and "per CPU-minute:" in plain.output
    counted = CliRunner().invoke(main, [*args, "--coverage"])
    assert counted.exit_code == 0, counted.output
    assert "scheduler: RunCycle" in counted.output.split("coverage of 3 seeds:", 1)[1]


@pytest.mark.no_cover  # processes: the coverage of the workers is not collected
def test_jobs_find_the_same_first_violation_with_the_same_counts() -> None:
    settings = {"rms": 2, "operations": 30, "fault": FAULT}
    alone = search_range(settings, list(range(1, 41)), jobs=1)
    spread = search_range(settings, list(range(1, 41)), jobs=2)
    assert alone.found is not None and spread.found is not None
    assert (spread.found.seed, spread.found.violations) == (alone.found.seed, alone.found.violations)
    assert spread.count >= alone.count  # every seed before it ran; a worker may have run one past it
    clean = search_range({"rms": 2, "operations": 30}, list(range(1, 9)), jobs=2)
    assert clean.found is None and clean.count == 8 and clean.coverage is not None
    assert clean.coverage.seeds == 8
