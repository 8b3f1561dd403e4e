"""An application's facts have one writer each. What placement made of it (its ``AppSpec``) is one value
that the partition, the application's owner and the scheduler's view hold by reference; its asks,
allocations and state are its owner's. The partition keeps no ``Application`` of its own: its queue
listings, queue cleanup, recovery and user queries follow from the specs it holds."""

from __future__ import annotations

import gc
from typing import Any

from core_helpers import NODE, SMALL, add_apps, add_nodes, check_invariants, eventually, part, running

import korral
from korral import si
from korral import testing as t
from korral.actors.application import ApplicationActor
from korral.actors.base import KorralActor
from korral.actors.partition.actor import PartitionActor
from korral.actors.scheduler.actor import SchedulerActor

P = part()

PROVIDED_CREATE_WITH_LIMITS = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        limits:
          - limit: group cap
            groups: [devs]
            maxapplications: 10
    placementrules:
      - name: provided
        create: true
"""


def _actors(core: korral.Core) -> dict[str, Any]:
    return {
        actor.name: actor
        for actor in gc.get_objects()
        if isinstance(actor, KorralActor)
        and actor.tracker is core.tracker
        and not actor.actor_stopped.is_set()
    }


def test_the_spec_is_one_value_and_the_partition_holds_no_application() -> None:
    with running(PROVIDED_CREATE_WITH_LIMITS, queue_cleanup_interval=0.05) as (core, rm):
        add_nodes(core, rm, ["n1"])
        core.update_application(t.applications("rm", {"app": "root.team.job"}, user="alice", groups=["devs"]))
        core.wait_until_idle()
        assert "app" in rm.accepted_apps, rm.rejected_apps
        core.update_allocation(t.asks("rm", "app", 2, SMALL))
        assert rm.wait_for_allocations(2)
        actors = _actors(core)
        partition, scheduler = actors[P], actors[f"{P}/scheduler"]
        owner = actors[f"{P}/app/app"]
        assert isinstance(partition, PartitionActor) and isinstance(scheduler, SchedulerActor)
        assert isinstance(owner, ApplicationActor)
        assert partition.registry.applications == {}, "the partition holds an Application of its own"
        assert partition.registry.queues["root.team.job"].applications == {}
        held = partition.members.specs["app"]
        assert held is owner.owner.app.spec is scheduler.view.applications["app"].spec, "a second copy"
        assert partition.members.limit_groups["app"] == owner.owner.app.limit_group == "devs"
        # what the partition answers from the spec it holds
        queue = core.queue(P, "root.team.job")
        assert queue is not None and queue.applications == ["app"]
        group = core.group_usage(P, "devs")
        assert group is not None and [q.queue_path for q in group.queues][-1] == "root.team.job"
        # the dynamic leaf stays while the application is in it (cleanup runs every 50 ms)
        core.wait_until_idle()
        assert core.queue(P, "root.team.job") is not None
        core.update_application(t.remove_applications("rm", ["app"]))
        eventually(lambda: core.queue(P, "root.team.job") is None)
        assert "app" not in partition.members
        check_invariants(core, P, rm)


def _existing(application_id: str, allocation_key: str, node_id: str) -> si.Allocation:
    """An allocation the RM already runs, reported with its node (no uuid: the core makes one)."""
    return si.Allocation(
        allocation_key=allocation_key,
        application_id=application_id,
        node_id=node_id,
        resource_per_alloc=dict(SMALL),
    )


def test_a_recovered_allocation_is_routed_by_the_spec_the_partition_holds() -> None:
    with running(PROVIDED_CREATE_WITH_LIMITS) as (core, rm):
        add_apps(core, rm, {"app": "root.team.job"})
        core.update_node(t.nodes("rm", ["n1"], NODE, existing=[_existing("app", "running", "n1")]))
        core.wait_until_idle()
        info = core.application(P, "app")
        assert info is not None and len(info.allocations) == 1
        queue = core.queue(P, "root.team.job")  # booked in the application's queue
        assert queue is not None and queue.allocated == SMALL
        core.update_node(t.nodes("rm", ["n2"], NODE, existing=[_existing("ghost", "lost", "n2")]))
        core.wait_until_idle()
        assert any("failed to find application ghost" in r.reason for r in rm.rejected_asks)
        check_invariants(core, P, rm)
