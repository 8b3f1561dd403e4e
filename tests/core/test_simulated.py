"""The simulated runtime (api.md, Deterministic simulation) and ``korral stress --simulated``.

Everything here runs on the calling thread on a virtual clock: no sleeps, and nothing depends on the
machine's speed.
"""

from __future__ import annotations

import pytest
from pykka import Timeout

import korral
from korral import si
from korral import testing as t
from korral.actors.base import Periodic, Rank
from korral.actors.messages import Tick
from korral.actors.simulated import Pending
from korral.errors import SchedulerError
from korral.harness.simulated.stress import SimulatedStress

RM = "rm"
PARTITION = "[rm]default"
CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
          - name: b
"""
SMALL = {"memory": 100, "vcore": 100}
BIG = {"memory": 10000, "vcore": 10000}


pytestmark = pytest.mark.usefixtures("quiet_simulation")


def scenario(seed: int) -> tuple[korral.Core, t.RecordingRM]:
    """Two applications, two nodes, asks for both, all submitted without waiting."""
    core = korral.start(runtime="simulated", seed=seed, completing_timeout=1.0)
    rm = t.RecordingRM(RM)
    core.register_resource_manager(t.register(RM, CONFIG), rm)
    core.update_node(t.nodes(RM, ["n1", "n2"], BIG))
    core.update_application(t.applications(RM, {"x": "root.a", "y": "root.b"}))
    core.update_allocation(t.asks(RM, "x", 6, SMALL))
    core.update_allocation(t.asks(RM, "y", 6, SMALL))
    core.update_allocation(t.release_asks(RM, "x", "x-ask-5"))
    return core, rm


def test_same_seed_same_calls_give_the_same_callbacks_byte_for_byte() -> None:
    traces = []
    for _ in range(2):
        core, rm = scenario(7)
        core.wait_until_idle()
        core.update_allocation(t.release(RM, "y"))
        core.advance(2.0)
        traces.append(core.trace())
        # y released everything; x keeps its five asks, six if x-ask-5 was placed before its release
        # reached the core (which the seed decides)
        assert {a.application_id for a in rm.live.values()} == {"x"}
        assert len(rm.live) in (5, 6)
        core.stop()
    assert traces[0] == traces[1]
    assert any("update_allocation" in line and "uuid='[rm]default-" in line for line in traces[0])


def test_different_seeds_interleave_differently_with_the_same_outcome() -> None:
    orders, outcomes = set(), set()
    for seed in range(8):
        core, rm = scenario(seed)
        core.wait_until_idle()
        orders.add(tuple(line.split(" ", 2)[2] for line in core.trace()))
        # x-ask-5 may be placed before its release reaches the core (the seed decides): left out
        outcomes.add(
            tuple(sorted(a.allocation_key for a in rm.live.values() if a.allocation_key != "x-ask-5"))
        )
        core.stop()
    assert len(orders) > 1, "every seed delivered the callbacks in one order: the seed chooses nothing"
    assert outcomes == {tuple(sorted([f"x-ask-{i}" for i in range(5)] + [f"y-ask-{i}" for i in range(6)]))}


def test_si_calls_only_enqueue_and_the_caller_drives_the_simulation() -> None:
    core, rm = scenario(1)
    assert not rm.live, "allocations made before anyone ran the simulation"
    assert core.tracker.in_flight() > 0
    core.wait_until_idle()
    assert core.tracker.in_flight() == 0
    assert len(rm.live) in (11, 12)  # 12 when x-ask-5 was placed before its release arrived
    core.stop()


def test_timers_run_on_the_virtual_clock() -> None:
    core, _ = scenario(3)
    core.wait_until_idle()
    core.update_allocation(t.release(RM, "x"))
    core.wait_until_idle()
    assert core.application(PARTITION, "x").state == "Completing"
    core.advance(0.9)  # completing_timeout is 1.0 virtual seconds
    assert core.application(PARTITION, "x").state == "Completing"
    core.advance(0.2)
    assert core.application(PARTITION, "x").state == "Completed"
    assert core.simulation is not None and core.simulation.now == pytest.approx(1.1)
    core.stop()


def test_a_blocking_call_runs_the_simulation_until_its_answer() -> None:
    core, _ = scenario(5)
    # no wait_until_idle: the snapshot's ask runs whatever it needs (the partition's queue behind the
    # routed requests), and other mailboxes only as far as the seed interleaves them
    info = core.partition(PARTITION)
    assert info is not None and info.node_count == 2
    core.stop()


def test_a_handler_that_blocks_is_not_entered_again_by_the_nested_run() -> None:
    """One message at a time per actor even when an ask nests a run of the simulation under a handler:
    the partition's snapshot asks its scheduler and queues while other messages to the partition wait."""
    core, _ = scenario(11)
    simulation = core.simulation
    assert simulation is not None
    active: list[str] = []
    overlaps: list[str] = []
    original = simulation.on_deliver

    def watch(actor: str, message: object) -> None:
        if original is not None:
            original(actor, message)
        if simulation.running is not None and simulation.running.name == actor:
            overlaps.append(actor)
        active.append(actor)

    simulation.on_deliver = watch
    core.scheduler_stats(PARTITION)  # partition handler asks the scheduler: a nested run
    core.wait_until_idle()
    assert active and not overlaps
    core.stop()


def test_a_scripted_schedule_chooses_every_delivery() -> None:
    """A chooser sees every ready delivery and picks one: here the nodes' mailboxes always go last."""
    core = korral.start(runtime="simulated", seed=0)
    seen: list[tuple[str, ...]] = []

    def nodes_last(ready: list[Pending]) -> int:
        seen.append(tuple(p.actor for p in ready))
        others = [i for i, p in enumerate(ready) if "/node/" not in p.actor]
        return others[0] if others else 0

    assert core.simulation is not None
    core.simulation.chooser = nodes_last
    rm = t.RecordingRM(RM)
    core.register_resource_manager(t.register(RM, CONFIG), rm)
    core.update_node(t.nodes(RM, ["n1"], BIG))
    core.update_application(t.applications(RM, {"x": "root.a"}))
    core.update_allocation(t.asks(RM, "x", 3, SMALL))
    core.wait_until_idle()
    assert len(rm.live) == 3
    assert any(len(choice) > 1 for choice in seen), "never more than one ready mailbox to choose from"
    core.stop()


def test_a_blocking_call_that_cannot_be_answered_times_out_in_virtual_time() -> None:
    core = korral.start(runtime="simulated", seed=0)
    proxy = core._proxy
    proxy.stop()  # a stopped actor: the ask is refused at once
    core.wait_until_idle()
    with pytest.raises((Timeout, Exception)):
        proxy.ask(si.RegisterResourceManagerRequest(rm_id="x"), caller=Rank.OUTSIDE, timeout=1.0)
    core.stop()


def test_simulated_only_calls_refuse_a_threads_core() -> None:
    with korral.start() as core:
        with pytest.raises(SchedulerError):
            core.advance(1.0)
        with pytest.raises(SchedulerError):
            core.trace()
    with pytest.raises(ValueError, match="unknown runtime"):
        korral.start(runtime="processes")


# ---- korral stress --simulated ----------------------------------------------------------------------------

FAULT = "recovery-onto-leaving-node"
# The fault shows in few seeds of this scenario (one RM): 325 and 555 of the first 600 (a node leaving
# before the owner of a recovered allocation on it took the recovery in; the workload's reloads of
# partitions and queue maxes take a share of each seed's operations). Searched in a window that holds
# both, so the test stays short.
SEEDS = range(301, 601)


def test_the_same_stress_scenario_run_twice_with_one_seed_gives_identical_traces() -> None:
    harness = SimulatedStress(rms=2, operations=30)
    first = harness.run_seed(4242, full_trace=True)
    second = harness.run_seed(4242, full_trace=True)
    assert first.trace == second.trace and first.callbacks == second.callbacks
    assert first.ops == second.ops and first.steps == second.steps
    assert len(first.trace) > 100 and not first.violations


@pytest.mark.no_cover  # a long run over code other tests cover (pyproject.toml: no_cover)
def test_a_fault_of_one_rare_message_order_is_found_and_its_seed_replays_it_exactly() -> None:
    harness = SimulatedStress(rms=1, operations=30, fault=FAULT)
    found, count, _ = harness.search(SEEDS, budget=600.0)
    assert found is not None, f"the injected fault was not found in {count} seeds"
    assert any("is on no node" in v for v in found.violations), found.violations
    # replayed twice in a row from the seed alone: the same violation, the same trace
    for _ in range(2):
        again = harness.run_seed(found.seed, full_trace=True)
        assert again.violations == found.violations
        assert again.ops == found.ops
        assert again.callbacks == found.callbacks
    replays = [harness.run_seed(found.seed, full_trace=True).trace for _ in range(2)]
    assert replays[0] == replays[1]
    # without the fault the same seed is clean: it is that order, not the scenario, that breaks it
    assert not SimulatedStress(rms=1, operations=30).run_seed(found.seed).violations
    # the shrunk sequence still shows it with the same seed, and is shorter
    minimal = harness.shrink(found.seed, found.ops, budget=60.0)
    assert len(minimal) < len(found.ops)
    assert harness.replay(found.seed, minimal).violations


@pytest.mark.slow
@pytest.mark.timeout(600)  # a CPU-bound run of many seeds: minutes beside CPU hogs
def test_the_command_line_runs_seeds_and_replays_one_with_its_full_trace() -> None:
    from click.testing import CliRunner

    from korral.cli import main

    runner = CliRunner()
    clean = runner.invoke(main, ["stress", "--simulated", "--rms", "1", "--seeds", "3"])
    assert clean.exit_code == 0, clean.output
    assert "3 seeds" in clean.output and "no violation" in clean.output
    harness = SimulatedStress(rms=1, operations=30, fault=FAULT)
    found, _, _ = harness.search(SEEDS, budget=600.0)
    assert found is not None
    replay = ["stress", "--simulated", "--rms", "1", "--inject-fault", FAULT, "--seed", str(found.seed)]
    outputs = [runner.invoke(main, [*replay, "--replay"]) for _ in range(2)]
    assert all(result.exit_code == 1 for result in outputs), outputs[0].output
    assert "is on no node" in outputs[0].output
    assert outputs[0].output == outputs[1].output, "a replay printed a different trace"
    assert "registrar <- Register(" in outputs[0].output  # the full trace: every delivery


REPLAY_IN_A_PROCESS = """
import hashlib, logging
logging.disable(logging.CRITICAL)
from korral.harness.simulated.stress import SimulatedStress
harness = SimulatedStress(rms=1, operations=30, fault="recovery-onto-leaving-node")
for seed in (3, 9, 21):
    outcome = harness.run_seed(seed, full_trace=True)
    print(seed, hashlib.sha256("\\n".join(outcome.trace).encode()).hexdigest(), len(outcome.violations))
"""


@pytest.mark.slow
def test_a_seed_replays_identically_in_another_process() -> None:
    """No set iteration, memory address or random token decides an order or reaches the trace:
    string hashing differs between processes (PYTHONHASHSEED), the replay does not."""
    import os
    import subprocess
    import sys

    outputs = []
    for hash_seed in ("1", "2"):
        result = subprocess.run(
            [sys.executable, "-c", REPLAY_IN_A_PROCESS],
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1]
    assert len(outputs[0].splitlines()) == 3


def test_the_virtual_clock_never_runs_backwards_when_deliveries_take_time() -> None:
    core, _ = scenario(2)
    assert core.simulation is not None
    core.simulation.perturb(step_time=0.01)  # each delivery takes up to 10 ms of virtual time
    readings = []
    for _ in range(5):
        core.advance(0.001)
        readings.append(core.simulation.now)
    assert readings == sorted(readings) and readings[-1] >= 0.005
    core.stop()


def test_a_stopped_simulated_core_leaves_no_actor_behind() -> None:
    """Found by issue 24's 5,000-seed run (1.5 GB): stopping a simulated core sent each actor its stop,
    but nothing ran the simulation after, so the actors of every stopped core stayed registered."""
    import pykka

    import korral
    from korral import testing as t

    before = set(pykka.ActorRegistry.get_all())
    rm = t.RecordingRM("rm")
    with korral.start(runtime="simulated", seed=2) as core:
        assert core.simulation is not None
        core.simulation.perturb()  # stops held back in their mailboxes a few steps, as in a stress run
        config = "partitions:\n  - name: default\n    queues:\n      - name: root\n        submitacl: '*'\n"
        config += "        queues:\n          - name: a\n"
        core.register_resource_manager(t.register("rm", config), rm)
        core.update_node(t.nodes("rm", ["n1", "n2"], {"memory": 8000, "vcore": 8000}))
        core.update_application(t.applications("rm", {"app": "root.a"}))
        core.update_allocation(t.asks("rm", "app", 2, {"memory": 1000, "vcore": 100}))
        core.wait_until_idle()
        assert len(rm.live) == 2
    left = [ref for ref in pykka.ActorRegistry.get_all() if ref not in before]
    assert left == [], [ref.actor_class.__name__ for ref in left]


def test_an_actor_stopping_with_its_mailbox_ready_leaves_no_empty_mailbox_to_deliver() -> None:
    """Seed 777 (one RM) once stopped an actor whose mailbox was on the ready list: its messages were
    answered as dead, the emptied mailbox stayed on the list, and the next step popped an empty deque."""
    from korral.harness.simulated.stress import SimulatedStress

    outcome = SimulatedStress(rms=1, operations=30).run_seed(777)
    assert outcome.violations == ()


def test_a_tick_with_nothing_due_takes_no_step_and_one_with_work_still_comes() -> None:
    """While nothing waits on time the scheduler's periodic tick is skipped (no delivery, no step);
    an ask that fits no node makes it come again, and the RM hears each second that the ask waits."""
    core = korral.start(runtime="simulated", seed=7)
    simulation = core.simulation
    assert simulation is not None
    rm = t.RecordingRM(RM)
    core.register_resource_manager(t.register(RM, CONFIG), rm)
    core.update_node(t.nodes(RM, ["n1"], SMALL))
    core.update_application(t.applications(RM, {"x": "root.a"}))
    core.wait_until_idle()
    ticks: list[float] = []
    traced = simulation.on_deliver
    assert traced is not None

    def count_ticks(actor: str, message: object) -> None:
        if isinstance(message, Periodic) and isinstance(message.message, Tick):
            ticks.append(simulation.now)
        traced(actor, message)

    simulation.on_deliver = count_ticks
    core.advance(30.0)
    assert ticks == []
    core.update_allocation(t.asks(RM, "x", 1, BIG))  # fits its queue, no node
    core.advance(3.5)
    assert ticks
    waiting = [s for s in rm.scheduling_states if s.state is si.SchedulingState.FAILED]
    assert len(waiting) >= 3 and {s.allocation_key for s in waiting} == {"x-ask-0"}
    core.stop()
