"""``korral stress --simulated``'s workload reaches ids reused after removal, and queues placement rules
create two and three levels deep. All on the virtual clock."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from korral.harness import faults
from korral.harness.simulated.stress import SimulatedStress
from korral.harness.simulated.workloads import Workloads


@pytest.fixture(autouse=True)
def _quiet_and_clean() -> Iterator[None]:
    level = logging.getLogger("korral").level
    logging.getLogger("korral").setLevel(logging.CRITICAL)
    yield
    logging.getLogger("korral").setLevel(level)
    faults.disable_all()


def descriptions(harness: SimulatedStress, seeds: range) -> list[str]:
    found = []
    for seed in seeds:
        outcome = harness.run_seed(seed)
        assert outcome.violations == (), (seed, outcome.violations)
        found += [op.description for op in outcome.ops]
    return found


def test_the_default_mix_reuses_application_ask_and_node_ids_after_removal() -> None:
    seen = descriptions(SimulatedStress(rms=2, operations=30), range(1, 81))
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
