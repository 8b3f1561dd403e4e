"""``korral stress --simulated``'s workload reaches ids reused after removal, queues placement rules
create two and three levels deep, partitions reloads add and drop (a dropped one drains) and quota
preemption. All on the virtual clock."""

from __future__ import annotations

import pytest

from korral.actors.dispatch import ensure_handlers
from korral.actors.messages import PartitionDrained
from korral.actors.rmproxy import RMProxyActor
from korral.harness.simulated.coverage import QUOTA_PREEMPTED, Coverage
from korral.harness.simulated.stress import SimulatedStress
from korral.harness.simulated.workloads import Workloads

pytestmark = pytest.mark.usefixtures("quiet_simulation")


def descriptions(harness: SimulatedStress, seeds: range) -> list[str]:
    found = []
    for seed in seeds:
        outcome = harness.run_seed(seed)
        assert outcome.violations == (), (seed, outcome.violations)
        found += [op.description for op in outcome.ops]
    return found


@pytest.mark.timeout(900)  # 130 seeds: minutes beside CPU hogs, not a hang
def test_the_default_mix_reuses_application_ask_and_node_ids_after_removal() -> None:
    seen = descriptions(SimulatedStress(rms=2, operations=30), range(1, 131))
    assert any("again (its id reused)" in d and d.startswith("add application") for d in seen)
    assert any(d.startswith("asks of") and "again under their old keys" in d for d in seen)
    assert any("again after its release (key reused)" in d for d in seen)
    assert any(d.startswith("create") and "again (its id reused)" in d for d in seen)


def test_without_deep_queues_no_application_is_placed_below_root_c_by_team() -> None:
    harness = SimulatedStress(rms=2, operations=30, workloads=Workloads(deep_queues=False))
    assert not any("placed in root.c." in d for d in descriptions(harness, range(1, 11)))


def test_deep_queues_put_applications_two_and_three_levels_below_root_and_they_run() -> None:
    ops = descriptions(SimulatedStress(rms=2, operations=30), range(1, 21))
    placed = [d for d in ops if "placed in root.c." in d]
    assert any(d.count(".") == 3 for d in placed)  # root.c.<team>.<namespace>
    assert any(d.count(".") == 2 for d in placed)  # root.c.<namespace>


def test_an_ask_resent_after_a_re_registration_is_judged_by_that_registrations_allocations() -> None:
    """Seed 544: rm0's ask (maxAllocations 1) was sent twice and allocated twice, rm0 registered
    again, and the ask was resent once into the new partition. The per-ask rule counted the earlier
    partition's two allocations against the one new send (a false violation): a registration now
    starts the rule afresh, as a core restart does."""
    workloads = Workloads(deep_queues=False)  # the mix seed 544 ran in
    outcome = SimulatedStress(rms=2, operations=30, workloads=workloads).run_seed(544)
    assert not any("sent once) was told of" in v for v in outcome.violations), outcome.violations


def reached(workloads: Workloads, seeds: range) -> Coverage:
    harness = SimulatedStress(rms=2, operations=30, workloads=workloads)
    harness.coverage = Coverage()
    for seed in seeds:
        assert harness.run_seed(seed).violations == (), seed
    return harness.coverage


@pytest.mark.timeout(900)  # 70 seeds: minutes beside CPU hogs, not a hang
def test_the_default_mix_adds_and_drops_a_partition_and_lowers_a_max_into_quota_preemption() -> None:
    seen = reached(Workloads(), range(1, 61))
    # a reload drops partition spare while it holds work: it drains, the RM removes its applications
    assert seen.operations["config reload that drops partition spare: it drains"]
    assert seen.partition_states["Draining"]
    assert seen.operations["apps remove from a dropped partition (it drains)"]
    assert seen.messages["rmproxy: PartitionDrained"]  # empty, it went
    # root.a's max lowered under its usage: the core preempted down to it once the delay passed
    assert seen.operations["config reload that lowers root.a's max: quota preemption"]
    assert seen.outcomes[QUOTA_PREEMPTED]
    without = reached(Workloads(partitions=False, quota_preemption=False), range(1, 11))
    assert not without.partition_states["Draining"] and not without.outcomes[QUOTA_PREEMPTED]


@pytest.mark.timeout(900)  # up to 40 seeds: minutes beside CPU hogs, not a hang
def test_a_dropped_partition_left_behind_once_empty_is_a_violation(monkeypatch: pytest.MonkeyPatch) -> None:
    # a broken core: the routing actor never lets a drained partition go
    ensure_handlers(RMProxyActor)
    handlers = dict(RMProxyActor.handlers)
    handlers[PartitionDrained] = lambda actor, message: None
    monkeypatch.setattr(RMProxyActor, "handlers", handlers)
    harness = SimulatedStress(rms=2, operations=30)
    found, _, _ = harness.search(range(1, 41), budget=None)
    assert found is not None
    assert any("dropped by a reload" in v or "still live" in v for v in found.violations), found.violations


def test_a_reload_while_another_rms_dropped_partition_stops_is_answered() -> None:
    # seed 1474: rm0's reload drops its empty partition spare; while the routing actor, inside that
    # handler, waits for the partition to stop, rm1's reload reaches the registrar. On one stack the
    # registrar ran above the blocked routing actor and asked it: it could never answer (on threads
    # the registrar just waits), and the reload failed after its 60 s virtual timeout
    outcome = SimulatedStress(rms=2, operations=30).run_seed(1474)
    assert outcome.violations == (), outcome.violations
