"""korral stress as part of the suite: a short seeded run finds no violation, and a deliberately
broken invariant is caught, with its seed and a shrunk reproducing sequence."""

from __future__ import annotations

import logging

import pytest

from korral.harness.stress import StressRun


@pytest.fixture(autouse=True)
def quiet_callbacks():
    # the simulated RMs raise from their callbacks on purpose; korral logs and contains each one
    logger = logging.getLogger("korral.callbacks")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_short_stress_run_keeps_every_invariant() -> None:
    result = StressRun(rms=2, duration=30.0, seed=20261121, checkpoint=3.0).run()
    assert result.violations == [], result.violations
    assert result.checkpoints >= 5
    assert result.operations > 1000
    assert result.callback_failures > 0, "the run should have exercised failing RM callbacks"
    assert result.restarts > 0, "the run should have restarted the core and recovered the RMs"
    # gang scheduling and timeouts were exercised: placeholders replaced, allocations timed out
    assert result.core_releases.get("PLACEHOLDER_REPLACED", 0) > 0, result.core_releases
    assert result.core_releases.get("TIMEOUT", 0) > 0, result.core_releases


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_deliberately_broken_invariant_is_caught_and_shrunk() -> None:
    run = StressRun(
        rms=2, duration=3.0, seed=5, checkpoint=1.0, fault="node-keeps-released", minimize_budget=60.0
    )
    result = run.run()
    assert result.seed == 5
    assert any("has no application" in violation for violation in result.violations), result.violations
    assert result.minimal, "no reproducing sequence"
    assert len(result.minimal) < result.operations
    # the shrunk sequence still reproduces the violation on a fresh core
    assert run.replay(result.minimal)
