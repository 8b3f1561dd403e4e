"""The actor system against the sequential reference on seeded workloads with headroom-short
preemption (a parent's max full of a sibling's usage) and quota changes that preempt (issue 26).
Same drivers and comparison as ``test_equivalence_preemption``."""

from __future__ import annotations

import random

import attrs
import pytest
from equivalence_helpers import RM, SETTINGS, FakeClock, Pair, advance_both, filler_asks, preempting_asks

import korral
from korral import si
from korral import testing as t
from korral.harness.reference import ReferenceScheduler


def headroom_config(rng: random.Random, quota: bool = False, team_max: int | None = None) -> str:
    """A parent whose max a borrowing child fills, with a starved sibling under its guarantee."""
    maximum = team_max if team_max is not None else rng.choice([3000, 4000])
    switch = "    preemption:\n      quotapreemptionenabled: true\n" if quota else ""
    delay = "              quota.preemption.delay: 30s\n" if quota else ""
    return f"""
partitions:
  - name: default
{switch}    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: team
            resources:
              max: {{memory: {maximum}, vcore: 100000}}
            properties:
              preemption.policy: {rng.choice(["default", "fence"])}
{delay}            queues:
              - name: starved
                resources:
                  guaranteed: {{memory: {rng.choice([1000, 2000])}, vcore: 8}}
                properties:
                  preemption.delay: 10s
              - name: borrow
                properties:
                  priority.offset: "{rng.choice([0, 0, 5])}"
          - name: loose
"""


def run_workload(seed: int, *, quota: bool) -> int:
    rng = random.Random(seed)
    state = rng.getstate()
    config = headroom_config(rng, quota)
    clock = FakeClock()
    with korral.start(**SETTINGS, clock=clock) as core:
        pair = Pair(core, config)
        pair.ref = ReferenceScheduler(config, rm_id=RM, reservation_delay=3600.0, clock=clock)
        for index in range(rng.randint(2, 4)):
            pair.step(t.nodes(RM, [f"node-{index}"], {"memory": 8000, "vcore": 8000}))
        fillers = {"borrow-app": "root.team.borrow", "loose-app": "root.loose"}
        pair.step(t.applications(RM, {**fillers, "starved-app": "root.team.starved"}))
        for app_id in fillers:
            request = filler_asks(rng, app_id, f"{app_id}-", rng.randint(10, 24))
            # low-priority borrowers (the preemptors' priority is 0 to 10), so there are victims
            asks = [attrs.evolve(ask, priority=rng.choice([0, 0, 5])) for ask in request.asks]
            pair.step(attrs.evolve(request, asks=asks))
        pair.compare("filled")
        if quota:
            # the team's max lowered below its usage: enforced after its 30 s
            rng2 = random.Random()
            rng2.setstate(state)
            lowered = headroom_config(rng2, quota, team_max=rng.choice([2000, 2500]))
            pair.core.update_configuration(si.UpdateConfigurationRequest(rm_id=RM, config=lowered))
            pair.ref.update_configuration(lowered)
            pair.core.wait_until_idle()
            pair.ref.schedule()
        else:
            pair.step(preempting_asks(rng, "starved-app", "starved-", rng.randint(1, 4)))
        advance_both(pair, clock, 5.0)
        pair.compare("before the delay")
        for round_ in range(3):
            advance_both(pair, clock, 31.0 if quota else 16.0)
            pair.compare(f"preempted, round {round_}")
            pair.confirm()
            pair.compare(f"victims confirmed, round {round_}")
        assert not pair.rm.foreign, "an allocation was reported twice"
        assert core.tracker.errors == 0
        return sum(
            1 for r in pair.ref_released if r.termination_type == si.TerminationType.PREEMPTED_BY_SCHEDULER
        )


@pytest.mark.parametrize("seed", range(6))
def test_headroom_short_preemption_matches_reference(seed: int) -> None:
    preempted = run_workload(5000 + seed, quota=False)
    if seed in (0, 1):
        assert preempted > 0


@pytest.mark.parametrize("seed", range(6))
def test_quota_changes_match_reference(seed: int) -> None:
    preempted = run_workload(6000 + seed, quota=True)
    if seed in (0, 1):
        assert preempted > 0
