"""The actor system against the sequential reference scheduler on seeded random workloads."""

from __future__ import annotations

import random
from typing import Any

import pytest
from equivalence_helpers import RM, SEEDS, SETTINGS, Pair, random_asks, random_config, random_node

import korral
from korral import resource as res
from korral import si
from korral import testing as t

# ---- the two drivers -------------------------------------------------------------------------------


def run_workload(seed: int, *, burst: bool) -> None:
    rng = random.Random(seed)
    config, leaves = random_config(rng, depth=2 + seed % 2)
    with korral.start(**SETTINGS) as core:
        pair = Pair(core, config)
        node_ids = [f"node-{index}" for index in range(rng.randint(2, 8))]
        for node_id in node_ids:
            pair.step(random_node(rng, node_id))
        apps = {f"app-{index}": rng.choice(leaves) for index in range(rng.randint(3, 10))}
        pair.step(t.applications(RM, apps))
        assert sorted(pair.rm.accepted_apps) == sorted(apps)

        # 1: asks, often more than the cluster holds
        first = [random_asks(rng, app_id, f"{app_id}-a", rng.randint(2, 12)) for app_id in apps]
        pair.feed(first, burst=burst)
        pair.compare("first asks")
        assert pair.rm.allocated_total > 0

        # 2: the RM releases some allocations (by key, by uuid, or all of an application's) and
        #    withdraws some asks; what is freed goes to what still waits
        steps: list[Any] = []
        for app_id, app in sorted(pair.model.applications.items()):
            roll = rng.random()
            if roll < 0.15 and app.allocations:
                steps.append(t.release(RM, app_id))
            elif roll < 0.6 and app.allocations:
                victim = rng.choice(sorted(app.allocations.values(), key=lambda a: a.uuid))
                if rng.random() < 0.5:
                    steps.append(t.release(RM, app_id, uuid=victim.uuid))
                else:
                    steps.append(t.release(RM, app_id, allocation_key=victim.allocation_key))
            if rng.random() < 0.3 and app.asks:
                steps.append(t.release_asks(RM, app_id, rng.choice(sorted(app.asks))))
        pair.feed(steps, burst=burst)
        pair.compare("releases")

        # 3: more asks, a new node, an ask replaced under the same key, a removed application
        more = [random_asks(rng, app_id, f"{app_id}-b", rng.randint(1, 5)) for app_id in sorted(apps)]
        pair.feed(more, burst=burst)
        pair.compare("more asks")
        pair.step(random_node(rng, "node-late"))
        pair.compare("late node")
        app_id = rng.choice(sorted(apps))
        pair.step(random_asks(rng, app_id, f"{app_id}-a", 1))  # replaces {app_id}-a0
        victim = rng.choice(sorted(apps))
        pair.step(t.remove_applications(RM, [victim]))
        pair.compare("replaced ask, removed application")

        # 4: a node leaves; what ran there is released and placed elsewhere if it fits
        pair.step(t.node_action(RM, node_ids[0], si.NodeAction.DECOMISSION))
        pair.compare("decommissioned node")
        assert not pair.rm.foreign, "an allocation was reported twice"


@pytest.mark.parametrize("seed", SEEDS)
def test_matches_reference_step_by_step(seed: int) -> None:
    run_workload(seed, burst=False)


@pytest.mark.parametrize("seed", SEEDS[:6])
def test_matches_reference_in_bursts(seed: int) -> None:
    run_workload(1000 + seed, burst=True)


def test_more_demand_than_capacity_fills_the_cluster_like_the_reference() -> None:
    """A fixed case: one small node, far more demand than it holds, fifo and fair leaves."""
    config = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: fifo
            resources: {guaranteed: {memory: 1000, vcore: 1}, max: {memory: 3000, vcore: 3}}
            properties: {application.sort.policy: fifo}
          - name: fair
            resources: {guaranteed: {memory: 2000, vcore: 2}}
            properties: {application.sort.policy: fair}
"""
    with korral.start(**SETTINGS) as core:
        pair = Pair(core, config)
        pair.step(t.nodes(RM, ["n1"], {"memory": 4000, "vcore": 4000}))
        pair.step(
            t.applications(RM, {"f1": "root.fifo", "f2": "root.fifo", "g1": "root.fair", "g2": "root.fair"})
        )
        for app_id in ("f1", "f2", "g1", "g2"):
            pair.step(t.asks(RM, app_id, 10, {"memory": 300, "vcore": 300}))
        pair.compare("full")
        model = pair.model
        assert res.prune(model.root.allocated) != {}
        assert sum(len(a.pending_asks) for a in model.applications.values()) > 0, (
            "demand must exceed capacity"
        )
        pair.step(t.release(RM, "g1"))
        pair.compare("after release")


DYNAMIC = """
partitions:
  - name: default
    placementrules:
      - name: provided
        create: true
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: dyn
            parent: true
            resources: {max: {memory: 6000, vcore: 6}}
            childtemplate:
              resources:
                max: {memory: 2000, vcore: 2}
              properties:
                application.sort.policy: fair
          - name: fixed
            properties: {application.sort.policy: fair}
"""


@pytest.mark.parametrize("seed", range(4))
def test_dynamic_queues_match_reference(seed: int) -> None:
    """Queues created by placement (with the parent's child template) schedule like the reference."""
    rng = random.Random(500 + seed)
    with korral.start(**SETTINGS) as core:
        pair = Pair(core, DYNAMIC)
        for index in range(3):
            pair.step(random_node(rng, f"n{index}"))
        leaves = ["root.dyn.x", "root.dyn.y", "root.dyn.z", "root.fixed"]
        apps = {f"app{index}": rng.choice(leaves) for index in range(6)}
        for app_id, queue in apps.items():
            pair.step(t.applications(RM, {app_id: queue}))
        for app_id in apps:
            pair.step(random_asks(rng, app_id, f"{app_id}-a", rng.randint(2, 8)))
        pair.compare("dynamic queues")
        victim = sorted(apps)[0]
        pair.step(t.release(RM, victim))
        pair.compare("dynamic queues after a release")


def test_recovery_on_a_new_node_matches_reference() -> None:
    """A node registers with allocations the RM already runs while asks wait for room. The reference
    adds the node and its allocations in one step (as YuniKorn does), so the node is full at once."""
    with korral.start(**SETTINGS) as core:
        pair = Pair(core, CONFIG_SMALL)
        pair.step(t.nodes(RM, ["n0"], {"memory": 2000, "vcore": 2000}))
        pair.step(t.applications(RM, {"old": "root.a", "new": "root.b"}))
        pair.step(t.asks(RM, "new", 30, {"memory": 200, "vcore": 200}))  # more than n0 holds
        pair.compare("before")
        existing = [
            si.Allocation(
                allocation_key=f"running-{index}",
                uuid=f"rec-{index}",
                application_id="old",
                node_id="n1",
                resource_per_alloc={"memory": 1000, "vcore": 1000},
            )
            for index in range(4)
        ]
        pair.step(t.nodes(RM, ["n1"], {"memory": 4000, "vcore": 4000}, existing=existing))
        pair.compare("node with existing allocations")
        pair.step(t.release(RM, "old", uuid="rec-0"))
        pair.compare("one recovered allocation released")


CONFIG_SMALL = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
          - name: b
"""
