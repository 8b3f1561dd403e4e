"""End-to-end: live configuration reload through ``core.update_configuration`` (TestConfigScheduler)."""

from __future__ import annotations

import pytest
from core_helpers import (
    MB,
    SMALL,
    add_apps,
    add_nodes,
    check_invariants,
    eventually,
    mem,
    part,
    release_kinds,
    running,
)

import korral
from korral import si
from korral import testing as t

# the tests marked with the engine fixture run on both engines (conftest.py: engine)
BOTH_ENGINES = pytest.mark.usefixtures("engine")

P = part()

BASE = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: base
            resources:
              guaranteed: {memory: 100M, vcore: 10}
              max: {memory: 150M, vcore: 20}
          - name: tobedeleted
"""

RELOADED = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: base
            resources:
              guaranteed: {memory: 500M, vcore: 250m}
              max: {memory: 1G, vcore: 500m}
          - name: tobeadded
            properties:
              something: withAvalue
  - name: gpu
    queues:
      - name: production
      - name: test
        properties:
          gpu: test queue property
"""


def reload(core: korral.Core, config: str, rm_id: str = "rm") -> None:
    core.update_configuration(
        si.UpdateConfigurationRequest(rm_id=rm_id, policy_group="queues", config=config)
    )
    core.wait_until_idle()


@BOTH_ENGINES
def test_config_scheduler_reload():
    """YuniKorn's TestConfigScheduler: queues added, updated, marked Draining; a partition added."""
    # the empty Draining queue is removed at the next cleanup: not before the test has read it
    with running(BASE, queue_cleanup_interval=60.0) as (core, rm):
        assert core.partition(P).capacity == {}
        assert core.queue(P, "root").max == {}
        assert mem(core.queue(P, "root.base").max) == 150 * MB
        assert core.queue(P, "root.tobedeleted").state == "Active"
        reload(core, RELOADED)
        base = core.queue(P, "root.base")
        assert mem(base.max) == 1_000_000_000 and base.guaranteed["vcore"] == 250
        added = core.queue(P, "root.tobeadded")
        assert added is not None and added.is_managed and added.properties["something"] == "withAvalue"
        assert core.queue(P, "root.tobedeleted").state == "Draining"
        gpu = core.partition("[rm]gpu")
        assert gpu is not None and gpu.capacity == {} and gpu.rm_id == "rm"
        assert core.queue("[rm]gpu", "root").max == {}
        assert core.queue("[rm]gpu", "root.production") is not None
        assert core.queue("[rm]gpu", "root.test").properties["gpu"] == "test queue property"
        assert [p.name for p in core.partitions()] == ["[rm]default", "[rm]gpu"]
        # the new partition takes nodes
        add_nodes(core, rm, ["g1"], partition="gpu")
        assert core.partition("[rm]gpu").capacity == core.node("[rm]gpu", "g1").capacity
        assert core.partition(P).capacity == {}
        # its root has no submitacl: nobody may submit (YuniKorn's default ACL)
        core.update_application(t.applications("rm", {"train": "root.production"}, partition="gpu"))
        core.wait_until_idle()
        assert rm.rejected_apps["train"]
        check_invariants(core, "[rm]gpu", rm)


def test_queue_added_takes_applications():
    with running(BASE) as (core, rm):
        core.update_application(t.applications("rm", {"early": "root.tobeadded"}))
        core.wait_until_idle()
        assert "early" in rm.rejected_apps
        reload(core, RELOADED)
        add_apps(core, rm, {"late": "root.tobeadded"})
        assert core.queue(P, "root.tobeadded").applications == ["late"]


@BOTH_ENGINES
def test_queue_max_update_takes_effect_on_scheduling():
    with running(BASE) as (core, rm):
        add_nodes(core, rm, ["n1", "n2", "n3"])
        add_apps(core, rm, {"app1": "root.base"})
        core.update_allocation(t.asks("rm", "app1", 25, SMALL))
        core.wait_until_idle()
        assert rm.allocated_total == 15
        reload(core, BASE.replace("max: {memory: 150M, vcore: 20}", "max: {memory: 200M, vcore: 20}"))
        assert mem(core.queue(P, "root.base").max) == 200 * MB
        assert rm.allocated_total == 20
        check_invariants(core, P, rm)
        # lowering the max preempts nothing but stops new allocations
        reload(core, BASE.replace("max: {memory: 150M, vcore: 20}", "max: {memory: 100M, vcore: 20}"))
        assert mem(core.queue(P, "root.base").max) == 100 * MB
        assert rm.released == [] and len(rm.live) == 20
        for uuid in sorted(rm.live)[:12]:
            core.update_allocation(t.release("rm", "app1", uuid=uuid))
        core.wait_until_idle()
        # 8 left (80M): two more fit under 100M
        assert len(rm.live) == 10 and rm.allocated_total == 22
        check_invariants(core, P, rm)


@BOTH_ENGINES
def test_removed_queue_drains_keeps_its_apps_rejects_new_ones_and_goes_when_empty():
    with running(BASE) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": "root.tobedeleted"})
        core.update_allocation(t.asks("rm", "app1", 2, SMALL))
        core.wait_until_idle()
        reload(core, RELOADED)
        queue = core.queue(P, "root.tobedeleted")
        assert queue.state == "Draining" and queue.applications == ["app1"]
        # its application keeps running
        assert rm.released == [] and len(rm.live) == 2
        assert core.application(P, "app1").state == "Running"
        # a cleanup interval passes and the queue is not empty: it stays
        eventually(lambda: core.queue(P, "root.tobeadded") is not None)
        core.update_allocation(t.asks("rm", "app1", 1, SMALL, start=2))
        core.wait_until_idle()
        # a draining queue still schedules for the applications it has
        assert rm.allocated_total == 3
        # no new application is accepted there
        core.update_application(t.applications("rm", {"app2": "root.tobedeleted"}))
        core.wait_until_idle()
        assert rm.rejected_apps.get("app2")
        assert core.queue(P, "root.tobedeleted") is not None
        check_invariants(core, P, rm)
        # once empty it is removed
        core.update_allocation(t.release_asks("rm", "app1"))
        core.update_allocation(t.release("rm", "app1"))
        core.wait_until_idle()
        assert set(release_kinds(rm)) == {si.TerminationType.STOPPED_BY_RM}
        eventually(lambda: core.queue(P, "root.tobedeleted") is None)
        assert "root.tobedeleted" not in core.queue(P, "root").children
        check_invariants(core, P, rm)


def test_queue_back_in_config_is_active_again():
    with running(BASE) as (core, rm):
        add_apps(core, rm, {"app1": "root.tobedeleted"})
        reload(core, RELOADED)
        assert core.queue(P, "root.tobedeleted").state == "Draining"
        reload(core, BASE)
        assert core.queue(P, "root.tobedeleted").state == "Active"
        add_apps(core, rm, {"app2": "root.tobedeleted"})


def test_placement_rules_are_replaced():
    provided = BASE.replace(
        "    queues:\n      - name: root",
        "    placementrules:\n      - name: provided\n    queues:\n      - name: root",
        1,
    )
    tagged = BASE.replace(
        "    queues:\n      - name: root",
        "    placementrules:\n      - name: tag\n"
        "        value: namespace\n        create: true\n    queues:\n      - name: root",
        1,
    )
    with running(provided) as (core, rm):
        add_apps(core, rm, {"app1": "root.base"}, tags={"namespace": "dev"})
        assert core.application(P, "app1").queue == "root.base"
        reload(core, tagged)
        add_apps(core, rm, {"app2": "root.base"}, tags={"namespace": "dev"})
        assert core.application(P, "app2").queue == "root.dev"
        assert not core.queue(P, "root.dev").is_managed
        # the earlier application stays where it was placed
        assert core.application(P, "app1").queue == "root.base"


def test_node_sort_policy_is_replaced():
    binpacking = BASE.replace(
        "    queues:\n      - name: root",
        "    nodesortpolicy:\n      type: binpacking\n    queues:\n      - name: root",
        1,
    )
    with running(BASE) as (core, rm):
        add_nodes(core, rm, ["n1", "n2"])
        add_apps(core, rm, {"app1": "root.base"})
        core.update_allocation(t.asks("rm", "app1", 4, SMALL))
        core.wait_until_idle()
        assert sorted(len(n.allocations) for n in core.nodes(P)) == [2, 2]
        reload(core, binpacking)
        assert core.partition(P).node_sort_policy == "binpacking"
        core.update_allocation(t.asks("rm", "app1", 4, SMALL, start=4))
        core.wait_until_idle()
        # packed onto one node (either: they are equally used)
        assert sorted(len(n.allocations) for n in core.nodes(P)) == [2, 6]
        check_invariants(core, P, rm)


@BOTH_ENGINES
def test_partition_removed_from_config_goes_away():
    with running(RELOADED) as (core, rm):
        assert core.partition("[rm]gpu") is not None
        reload(core, BASE)
        assert core.partition("[rm]gpu") is None
        assert [p.name for p in core.partitions()] == [P]
        core.update_node(t.nodes("rm", ["g1"], {"memory": 10}, partition="gpu"))
        core.wait_until_idle()
        assert "gpu" in rm.rejected_nodes["g1"]


@pytest.mark.parametrize(
    ("config", "named"),
    [
        (BASE.replace("submitacl", "submitacls"), "submitacls"),
        (BASE.replace("max: {memory: 150M, vcore: 20}", "max: {memory: 50M, vcore: 20}"), "guaranteed"),
        (BASE + "  - name: DEFAULT\n    queues:\n      - name: root\n", "default"),
        ("partitions: {", ""),
    ],
)
def test_invalid_reload_raises_and_nothing_changes(config, named):
    with running(BASE) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": "root.base"})
        core.update_allocation(t.asks("rm", "app1", 2, SMALL))
        core.wait_until_idle()
        before_partitions = core.partitions()
        before_queues = [core.queue(P, q) for q in ("root", "root.base", "root.tobedeleted")]
        with pytest.raises(korral.ConfigError) as error:
            core.update_configuration(si.UpdateConfigurationRequest(rm_id="rm", config=config))
        assert named.lower() in str(error.value).lower()
        core.wait_until_idle()
        assert core.partitions() == before_partitions
        assert [core.queue(P, q) for q in ("root", "root.base", "root.tobedeleted")] == before_queues
        # and the core goes on as before
        core.update_allocation(t.asks("rm", "app1", 1, SMALL, start=5))
        core.wait_until_idle()
        assert rm.allocated_total == 3
        check_invariants(core, P, rm)


def test_reload_with_the_same_config_changes_nothing():
    with running(BASE) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": "root.base"})
        core.update_allocation(t.asks("rm", "app1", 2, SMALL))
        core.wait_until_idle()
        before = (core.partitions(), core.queue(P, "root.base"), core.application(P, "app1"))
        reload(core, BASE)
        assert (core.partitions(), core.queue(P, "root.base"), core.application(P, "app1")) == before


def test_empty_reload_is_the_default_config():
    with running(BASE) as (core, rm):
        reload(core, "")
        assert core.queue(P, "root.base").state == "Draining"
        add_apps(core, rm, {"app1": ""}, tags={"namespace": "ns"})
        assert core.application(P, "app1").queue == "root.ns"


def test_queue_max_is_effective_along_the_path():
    config = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
          - name: p
            resources: {max: {memory: 150M}}
            queues:
              - name: c
              - name: d
                resources: {max: {memory: 100M, vcore: 5}}
"""
    with running(config) as (core, rm):
        assert core.queue(P, "root.p.c").max == {"memory": 150 * MB}
        add_nodes(core, rm, ["n1", "n2"])
        cluster = {"memory": 200 * MB, "vcore": 40_000}
        assert core.queue(P, "root").max == cluster
        assert core.queue(P, "root.a").max == cluster
        assert core.queue(P, "root.p").max == {"memory": 150 * MB, "vcore": 40_000}
        assert core.queue(P, "root.p.c").max == {"memory": 150 * MB, "vcore": 40_000}
        assert core.queue(P, "root.p.d").max == {"memory": 100 * MB, "vcore": 5_000}
        add_apps(core, rm, {"app-c": "root.p.c", "app-d": "root.p.d"})
        core.update_allocation(t.asks("rm", "app-d", 1, SMALL, max_allocations=10))
        core.wait_until_idle()
        # vcore 5 is the tighter limit for d
        assert rm.allocated_total == 5
        core.update_allocation(t.asks("rm", "app-c", 1, SMALL, max_allocations=20))
        core.wait_until_idle()
        # the parent's 150M caps c and d together
        assert mem(core.queue(P, "root.p").allocated) == 150 * MB
        check_invariants(core, P, rm)
