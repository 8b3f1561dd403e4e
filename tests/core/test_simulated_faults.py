"""``korral stress --simulated``: the environment's seeded faults and the PCT delivery order.

Each environment fault is in the default mix, off with ``--env-faults``, and seeded by the workload so
that a replay fails where the run did; the PCT order replays exactly too. All on the virtual clock.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from korral.actors.simulated import Simulation
from korral.cli import main
from korral.cli.simulated import rerun_command
from korral.harness.simulated.pct import PCTChooser
from korral.harness.simulated.stress import SimulatedStress

pytestmark = pytest.mark.usefixtures("quiet_simulation")


def descriptions(harness: SimulatedStress, seeds: range) -> list[str]:
    found = []
    for seed in seeds:
        outcome = harness.run_seed(seed)
        assert outcome.violations == (), (seed, outcome.violations)
        found += [op.description for op in outcome.ops]
    return found


@pytest.mark.no_cover  # a long run over code other tests cover (pyproject.toml: no_cover)
def test_every_environment_fault_is_in_the_default_mix_and_off_by_its_flag() -> None:
    seeds = range(1, 41)
    mixed = descriptions(SimulatedStress(rms=1, operations=30), seeds)
    assert any(d.startswith("run ('jump'") for d in mixed), "no clock jump in 40 seeds"
    assert any(d.startswith("resend after reconnect") for d in mixed), "no resend in 40 seeds"
    quiet = descriptions(SimulatedStress(rms=1, operations=30, env_faults=frozenset()), seeds)
    assert not any(d.startswith(("run ('jump'", "resend after reconnect")) for d in quiet)


@pytest.mark.no_cover  # a long run over code other tests cover (pyproject.toml: no_cover)
def test_failing_rm_callbacks_are_contained_and_replay_where_they_failed() -> None:
    harness = SimulatedStress(rms=1, operations=30, env_faults=frozenset({"callbacks"}))
    raised = 0
    for seed in range(1, 31):
        outcome = harness.run_seed(seed)
        assert outcome.violations == (), (seed, outcome.violations)
        raised += outcome.callback_failures
        # the same seed fails the same callbacks (korral stress --simulated --replay runs it again)
        assert harness.run_seed(seed).callbacks == outcome.callbacks, f"seed {seed}"
        assert harness.replay(seed, outcome.ops).violations == ()  # shrinking's replays
    assert raised > 0, "no RM callback failed in 30 seeds"


def test_a_clock_jump_fires_every_timer_due_at_the_new_time_at_once() -> None:
    simulation = Simulation(1)
    fired: list[float] = []

    class Target:
        is_alive = True

        def tell(self, message: object) -> bool:
            fired.append(simulation.now)
            return True

    for delay in (1.0, 2.0, 3.0):
        simulation.add_timer(delay, Target(), object(), 0.0)  # type: ignore[arg-type]
    simulation.jump(2.5)
    assert fired == [2.5, 2.5], fired  # both at the new time, not at 1.0 and 2.0
    simulation.jump(1.0)
    assert fired == [2.5, 2.5, 3.5]


def test_pct_replays_exactly_and_orders_deliveries_differently_from_uniform() -> None:
    pct = SimulatedStress(rms=1, operations=20, explore="pct")
    first = pct.run_seed(5, full_trace=True)
    again = pct.run_seed(5, full_trace=True)
    assert first.trace == again.trace
    assert pct.replay(5, first.ops).violations == ()
    uniform = SimulatedStress(rms=1, operations=20).run_seed(5, full_trace=True)
    assert uniform.trace != first.trace


def test_pct_delivers_the_highest_priority_and_demotes_at_its_change_points() -> None:
    from korral.actors.simulated import Pending

    simulation = Simulation(1)
    chooser = PCTChooser(simulation, seed=3, depth=2, horizon=3)  # one change point, at step 1 or 2
    ready = [Pending(actor="a", message=None), Pending(actor="b", message=None)]
    picks = [ready[chooser(ready) or 0].actor for _ in range(4)]
    # one actor first, then (after its demotion) the other for good
    assert picks[-1] != picks[0] and picks[-1] == picks[-2]
    with simulation.frozen():
        assert chooser(ready) is None  # an observer's reads: the simulation's RNG


def test_the_command_line_names_the_flags_a_rerun_needs_and_refuses_an_unknown_fault() -> None:
    assert rerun_command(1, 30, None, True) == "korral stress --simulated --rms 1 --operations 30"
    assert rerun_command(2, 30, None, True, "pct", frozenset({"jumps"})) == (
        "korral stress --simulated --rms 2 --operations 30 --explore pct --env-faults jumps"
    )
    assert rerun_command(1, 30, None, True, "uniform", frozenset()).endswith("--env-faults none")
    result = CliRunner().invoke(main, ["stress", "--simulated", "--seeds", "1", "--env-faults", "bogus"])
    assert result.exit_code == 2 and "unknown environment fault(s) bogus" in result.output


def test_a_direct_read_of_a_partition_is_what_the_core_s_queries_say() -> None:
    import korral
    from korral import testing as t
    from korral.harness import invariants
    from korral.harness.simulated import checks as simulated_checks
    from korral.harness.simulated.scenarios import scenario_config

    rm = t.RecordingRM("rm0")
    with korral.start(runtime="simulated", seed=3) as core:
        core.register_resource_manager(t.register("rm0", scenario_config(0)), rm)
        core.update_node(t.nodes("rm0", ["n1", "n2"], {"memory": 8000, "vcore": 8000}))
        core.update_application(t.applications("rm0", {"app": "root.a", "other": "root.b"}, user="ann"))
        core.update_allocation(t.asks("rm0", "app", 3, {"memory": 3000, "vcore": 100}))
        core.update_allocation(t.asks("rm0", "other", 2, {"memory": 7000, "vcore": 100}))
        core.advance(1.0)  # a reservation for the large ask
        assert core.simulation is not None
        with core.simulation.frozen():
            queried = invariants.collect(core, "[rm0]default")
            direct = simulated_checks.collect_direct(core, "[rm0]default")
            usage = simulated_checks.DirectUsage(core).user_usage("[rm0]default", "ann")
            assert usage == core.user_usage("[rm0]default", "ann")
    assert queried is not None and direct == queried
    assert len(direct.queues) > 3 and direct.applications and direct.nodes


def test_the_scheduler_s_view_holds_what_the_owners_hold_after_seed_67() -> None:
    """Found by check_view_against_owners (seed 67): the partition adopts a new node's recovered
    allocations in the scheduler's view on their owners' behalf, and an owner that refused one (its
    application no longer live) left it there for good. The owner now tells the view to forget it."""
    from korral.harness.simulated import checks as simulated_checks
    from korral.harness.simulated.stress import SimulatedStress as Harness

    found: list[str] = []
    check = Harness._check_frozen

    def checking(self: Harness, core, rms, drivers):  # type: ignore[no-untyped-def]
        for index in range(len(rms)):
            state = simulated_checks.collect_direct(core, f"[rm{index}]default")
            if state is not None:
                found.extend(simulated_checks.check_view_against_owners(core, state))
        return check(self, core, rms, drivers)

    patch = pytest.MonkeyPatch()
    patch.setattr(Harness, "_check_frozen", checking)
    try:
        Harness(rms=1, operations=30).run_seed(67)
    finally:
        patch.undo()
    assert found == []


def test_a_replacement_refused_after_its_placeholder_left_with_the_node_returns_the_asks_repeat() -> None:
    """Found by check_view_against_owners (seed 280, one RM): a batch placed a gang's placeholders on a
    node and replaced them at once; the node left before the owner confirmed the placeholders, so the
    owner refused the replacements (UndoReplacement), but the view had moved them aside with the node
    and dropped the refusal: three asks pending at their owner stayed at 0 in the view, never placed."""
    from korral.harness.simulated.stress import SimulatedStress as Harness

    assert Harness(rms=1, operations=30).run_seed(280).violations == ()
