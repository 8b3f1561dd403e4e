"""Unschedulable-ask backoff (YUNIKORN-3115): the actor system against the sequential reference on
seeded workloads, one shared fake clock, compared after every step (equivalence_helpers' Pair)."""

from __future__ import annotations

import random

import pytest
from equivalence_helpers import PARTITION, RM, SETTINGS, FakeClock, Pair, advance_both

import korral
from korral import si
from korral import testing as t
from korral.harness.reference import ReferenceScheduler


def backoff_config(rng: random.Random) -> str:
    queues = []
    for index in range(3):
        lines = [f"          - name: q{index}", "            properties:"]
        lines.append(f"              application.sort.policy: {rng.choice(['fifo', 'fair'])}")
        if index < 2 or rng.random() < 0.5:  # q2 sometimes never backs off
            lines.append(f"              application.unschedasks.backoff: '{rng.randint(1, 3)}'")
            lines.append(f"              application.unschedasks.backoff.delay: {rng.choice([7, 12, 25])}s")
        queues.extend(lines)
    head = ["partitions:", "  - name: default", "    queues:", "      - name: root", '        submitacl: "*"']
    return "\n".join([*head, "        queues:", *queues])


def mixed_asks(rng: random.Random, app_id: str, prefix: str, count: int) -> si.AllocationRequest:
    """Small asks and asks too big for any node (each node has 4000) but not for the cluster."""
    asks = [
        si.AllocationAsk(
            allocation_key=f"{prefix}{index}",
            application_id=app_id,
            resource_ask={
                "memory": rng.choice([300, 800, 1500, 5000, 6000]),
                "vcore": rng.choice([100, 500]),
            },
            priority=rng.choice([0, 0, 5, 10]),
            max_allocations=rng.choice([1, 1, 2]),
        )
        for index in range(count)
    ]
    return si.AllocationRequest(rm_id=RM, asks=asks)


def compare_backoff(pair: Pair, where: str) -> None:
    for app_id, app in pair.model.applications.items():
        info = pair.core.application(PARTITION, app_id)
        assert info is not None
        # the core shows the deadline on the wall clock: whether there is one must agree
        assert (info.backoff_deadline is None) == (app.backoff_deadline is None), f"{where}: {app_id} backoff"


def run_backoff_workload(seed: int) -> int:
    """Returns how many applications backed off (the same in both drivers)."""
    rng = random.Random(seed)
    config = backoff_config(rng)
    clock = FakeClock()
    with korral.start(**SETTINGS, clock=clock) as core:
        pair = Pair(core, config)
        pair.ref = ReferenceScheduler(config, rm_id=RM, reservation_delay=3600.0, clock=clock)
        for index in range(rng.randint(2, 4)):
            pair.step(t.nodes(RM, [f"node-{index}"], {"memory": 4000, "vcore": 4000}))
        apps = {f"app-{index}": f"root.q{rng.randrange(3)}" for index in range(rng.randint(3, 6))}
        pair.step(t.applications(RM, apps))
        for app_id in sorted(apps):
            pair.step(mixed_asks(rng, app_id, f"{app_id}-a", rng.randint(3, 8)))
        pair.compare("asks")
        compare_backoff(pair, "asks")
        for round_ in range(6):
            # room comes and goes: a new node, or some allocations released
            if round_ % 2 == 0:
                pair.step(
                    t.nodes(RM, [f"late-{round_}"], {"memory": rng.choice([4000, 8000]), "vcore": 4000})
                )
            else:
                for app_id, app in sorted(pair.model.applications.items()):
                    if app.allocations and rng.random() < 0.5:
                        victim = sorted(app.allocations.values(), key=lambda a: a.uuid)[0]
                        pair.step(t.release(RM, app_id, allocation_key=victim.allocation_key))
            advance_both(pair, clock, rng.choice([4.0, 9.0, 15.0]))
            pair.compare(f"round {round_}")
            compare_backoff(pair, f"round {round_}")
        assert not pair.rm.foreign, "an allocation was reported twice"
        return sum(1 for app in pair.model.applications.values() if app.backoff_deadline is not None)


@pytest.mark.parametrize("seed", range(6))
def test_backoff_matches_reference(seed: int) -> None:
    backed_off = run_backoff_workload(7000 + seed)
    if seed == 0:
        assert backed_off > 0  # the workload does exercise the backoff
