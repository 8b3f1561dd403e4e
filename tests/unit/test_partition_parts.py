"""PartitionModel is composed of parts, each a plain class with its own state, wired explicitly; a
role is which parts are composed (docs/architecture.md, "The partition model, by composition")."""

from __future__ import annotations

import pytest

from korral.config import load_config
from korral.model.partition.allocations import PartitionAllocations
from korral.model.partition.apps import PartitionApplications
from korral.model.partition.composed import PART_OPERATIONS, ModelError, PartitionModel, UnscheduledPartition
from korral.model.partition.registry import PartitionRegistry
from korral.model.partition.walk import SchedulingWalk
from korral.model.quota_preempting import QuotaPreemption
from korral.model.reservations import Reservations

CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
"""


def config():
    return load_config(CONFIG).partitions[0]


@pytest.mark.parametrize(
    "part",
    [
        PartitionModel,
        PartitionRegistry,
        PartitionApplications,
        PartitionAllocations,
        Reservations,
        SchedulingWalk,
    ],
)
def test_no_part_is_a_layer_of_another(part: type) -> None:
    assert part.__bases__ == (object,), f"{part.__name__} derives from {part.__bases__}"


def test_each_part_owns_its_state_and_the_partition_reads_the_same_objects() -> None:
    partition = PartitionModel("[rm]default", config(), rm_id="rm")
    assert partition.applications is partition.apps.applications
    assert partition.queues is partition.registry.queues
    assert partition.nodes is partition.registry.nodes
    assert partition.reservations is partition.reserver.reservations
    assert partition.walker is not None and partition.preempt_attempts is partition.walker.preempt_attempts
    assert isinstance(partition.quota_preemption, QuotaPreemption)
    assert partition.quota_timers is partition.quota_preemption.timers
    partition.add_node("n1", {"vcore": 1000})
    partition.add_application("app", queue_name="root.a", user="u")
    partition.add_ask("app", "ask", {"vcore": 100})
    (allocation,) = partition.schedule()
    assert allocation.uuid in partition.nodes["n1"].allocations
    assert partition.apps.applications["app"].allocations[allocation.uuid] is allocation


def test_the_registry_role_is_a_partition_without_the_scheduling_parts() -> None:
    """The Partition actor's registry: no node order, no walk, no quota preemption; its structure
    and membership work as in any partition, and scheduling it is refused with the reason."""
    registry = UnscheduledPartition("[rm]default", config(), rm_id="rm")
    assert registry.node_ordering is None and registry.walker is None and registry.quota_preemption is None
    registry.add_node("n1", {"vcore": 1000})
    registry.add_application("app", queue_name="root.a", user="u")
    assert registry.capacity == {"vcore": 1000}
    assert registry.node_sort_policy == "fair"
    assert registry.quota_timers == {}
    with pytest.raises(ModelError, match="not scheduled here"):
        registry.schedule_one()
    assert registry.remove_node("n1") == []
    assert registry.capacity == {}


def test_the_operations_a_partition_binds_are_the_ones_it_lists() -> None:
    partition = PartitionModel("[rm]default", config(), rm_id="rm")
    parts = (partition.registry, partition.apps, partition.reserver, partition.allocator, partition.walker)
    bound = {
        name
        for name, value in vars(partition).items()
        if callable(value) and getattr(value, "__self__", None) in parts
    }
    assert bound == set(PART_OPERATIONS)


def test_a_subclass_cannot_hide_a_part_s_operation_behind_the_bound_one() -> None:
    with pytest.raises(TypeError, match="remove_ask"):

        class Hiding(PartitionModel):
            def remove_ask(self, application_id: str, allocation_key: str) -> None:
                return None
