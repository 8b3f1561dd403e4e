"""``korral stress --simulated`` keeps a partition's read while its actors take nothing but reads.

A kept read must be exactly what a fresh read gives (``simulated.reads.VERIFY`` reads afresh and
compares at every reuse), a run must be the same with and without keeping (the same operations,
steps, callbacks and verdict), and a change in the partition must show at the next read.
All on the virtual clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import korral
from korral import testing as t
from korral.actors.messages import Snapshot
from korral.harness.simulated import checks as simulated_checks
from korral.harness.simulated import reads
from korral.harness.simulated.scenarios import scenario_config
from korral.harness.simulated.stress import SimulatedOutcome, SimulatedStress

pytestmark = pytest.mark.usefixtures("quiet_simulation")


@pytest.fixture(autouse=True)
def _reads_restored() -> Iterator[None]:
    yield
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


@pytest.mark.no_cover  # a long run over code other tests cover (pyproject.toml: no_cover)
def test_planted_bugs_show_the_same_violation_at_the_same_step_with_reads_kept_or_read_afresh() -> None:
    """A kept read never hides or delays a violation: with a planted bug, the seeds up to the first
    that violates give the same verdicts, at the same step, with reads kept (each reuse verified
    against a fresh read) and with every read made afresh."""
    for fault in ("release-after-release-counted", "reservation-outlives-ask"):
        harness = SimulatedStress(rms=2, operations=30, fault=fault)
        reads.VERIFY = True
        kept, _, _ = harness.search(range(1, 41), budget=None)
        reads.VERIFY, reads.ENABLED = False, False
        fresh, _, _ = harness.search(range(1, 41), budget=None)
        reads.ENABLED = True
        assert kept is not None and fresh is not None, fault
        assert kept.violations, fault
        assert (kept.seed, _seen(kept)) == (fresh.seed, _seen(fresh)), fault


def test_a_node_or_application_that_changed_is_read_afresh_and_one_that_did_not_is_kept() -> None:
    """Within a partition whose group changed (a scheduling tick), a node or an application whose
    actor took nothing but reads is kept, and the queue tree while its board stayed; what took a
    change is read again."""
    rm = t.RecordingRM("rm0")
    with korral.start(runtime="simulated", seed=5) as core:
        simulation = core.simulation
        assert simulation is not None
        simulation.repeatable_reads = frozenset({Snapshot})  # as the simulated stress declares
        core.register_resource_manager(t.register("rm0", scenario_config(0)), rm)
        core.update_node(t.nodes("rm0", ["n1", "n2"], {"memory": 8000, "vcore": 8000}))
        core.update_application(t.applications("rm0", {"app-1": "root.a"}))
        core.wait_until_idle()
        with simulation.frozen():
            first = simulated_checks.collect_direct(core, "[rm0]default")
        core.advance(1.0)  # ticks only: the group changed, no node nor application did
        asked: list[str] = []  # the actors a read delivered a snapshot ask to
        simulation.on_deliver = lambda actor, message: asked.append(actor)
        with simulation.frozen():
            ticked = simulated_checks.collect_direct(core, "[rm0]default")
        kept, asked[:] = list(asked), []
        core.update_allocation(t.asks("rm0", "app-1", 1, {"memory": 1000, "vcore": 1000}, prefix="ask-"))
        core.wait_until_idle()
        asked.clear()
        with simulation.frozen():
            placed = simulated_checks.collect_direct(core, "[rm0]default")
        read_again = sorted(asked)
    assert first is not None and ticked is not None and placed is not None
    assert kept == []  # nothing asked: every node and the application kept
    # the application took the ask, the node it was placed on has it on the board: read again
    assert read_again == ["[rm0]default/app/app-1", f"[rm0]default/node/{node_with(placed)}"]
    assert ticked.nodes == first.nodes and ticked.applications == first.applications
    # the queue tree too: the board held the same values, the very same records are given again
    assert ticked.queues["root.a"] is first.queues["root.a"]
    assert placed.queues["root.a"].allocated == {"memory": 1000, "vcore": 1000}
    (app,) = placed.applications
    assert [a.allocation_key for a in app.allocations] == ["ask-0"]
    node = next(n for n in placed.nodes if n.node_id == node_with(placed))
    assert node.allocated == {"memory": 1000, "vcore": 1000}


def node_with(state: Any) -> str:
    """The node holding the one allocation of the state's one application."""
    (app,) = state.applications
    (allocation,) = app.allocations
    return str(allocation.node_id)
