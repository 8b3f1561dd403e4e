"""``korral stress --simulated`` keeps a partition's read while its actors take nothing but reads.

A kept read must be exactly what a fresh read gives (``simulated.reads.VERIFY`` reads afresh and
compares at every reuse), a run must be the same with and without keeping (the same operations,
steps, callbacks and verdict), and a change in the partition must show at the next read.
All on the virtual clock.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

import korral
from korral import testing as t
from korral.harness import faults
from korral.harness.simulated import checks as simulated_checks
from korral.harness.simulated import reads
from korral.harness.simulated.scenarios import scenario_config
from korral.harness.simulated.stress import SimulatedOutcome, SimulatedStress


@pytest.fixture(autouse=True)
def _quiet_and_clean() -> Iterator[None]:
    level = logging.getLogger("korral").level
    logging.getLogger("korral").setLevel(logging.CRITICAL)
    yield
    logging.getLogger("korral").setLevel(level)
    faults.disable_all()
    reads.ENABLED, reads.VERIFY = True, False


def _seen(outcome: SimulatedOutcome) -> tuple[object, ...]:
    return (
        [op.description for op in outcome.ops],
        outcome.violations,
        outcome.steps,
        outcome.virtual_seconds,
        outcome.callbacks,
        outcome.handler_failures,
        outcome.restarts,
    )


@pytest.mark.no_cover  # a long run over code other tests cover (pyproject.toml: no_cover)
def test_every_kept_read_equals_a_fresh_read_and_a_run_is_the_same_without_keeping() -> None:
    harness = SimulatedStress(rms=2, operations=30)
    reads.VERIFY = True  # a kept read that differs from a fresh one raises ReadDiffers
    verified = [harness.run_seed(seed) for seed in range(1, 16)]
    reads.VERIFY, reads.ENABLED = False, False
    fresh = [harness.run_seed(seed) for seed in range(1, 16)]
    reads.ENABLED = True
    kept = [harness.run_seed(seed) for seed in range(1, 16)]
    for seed, (a, b, c) in enumerate(zip(verified, fresh, kept, strict=True), start=1):
        assert a.violations == (), (seed, a.violations)
        assert _seen(a) == _seen(b) == _seen(c), f"seed {seed}"


def test_a_change_in_the_partition_shows_at_the_next_read() -> None:
    rm = t.RecordingRM("rm0")
    with korral.start(runtime="simulated", seed=3) as core:
        simulation = core.simulation
        assert simulation is not None
        core.register_resource_manager(t.register("rm0", scenario_config(0)), rm)
        core.update_node(t.nodes("rm0", ["n1"], {"memory": 8000, "vcore": 8000}))
        core.wait_until_idle()
        with simulation.frozen():
            first = simulated_checks.collect_direct(core, "[rm0]default")
        steps = simulation.steps
        with simulation.frozen():  # nothing delivered since: kept, and counted as the read's steps
            again = simulated_checks.collect_direct(core, "[rm0]default")
        assert again == first and simulation.steps > steps
        core.update_node(t.nodes("rm0", ["n2"], {"memory": 8000, "vcore": 8000}))
        core.wait_until_idle()
        with simulation.frozen():
            after = simulated_checks.collect_direct(core, "[rm0]default")
    assert first is not None and after is not None
    assert sorted(node.node_id for node in first.nodes) == ["n1"]
    assert sorted(node.node_id for node in after.nodes) == ["n1", "n2"]


def test_a_seed_run_after_others_is_the_same_as_run_alone() -> None:
    """Nothing a seed leaves behind in the process (kept reads, caches, the collector's thresholds)
    changes another seed's run."""
    alone = SimulatedStress(rms=2, operations=30).run_seed(9, full_trace=True)
    harness = SimulatedStress(rms=2, operations=30)
    for seed in range(1, 9):
        harness.run_seed(seed)
    after = harness.run_seed(9, full_trace=True)
    assert _seen(after) == _seen(alone)
    assert after.trace == alone.trace
