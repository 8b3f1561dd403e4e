"""Conversions between the SI's messages and the model's allocations, shared by every driver."""

from __future__ import annotations

from collections.abc import Iterable

from korral import resource as res
from korral import si
from korral.model.allocation import Allocation
from korral.model.naming import partition_without_rm
from korral.si.messages import slot_setters

# si.Allocation's fields in the order ``to_si_allocations`` sets them (a test checks they are all of
# them). Built through its slots, not its attrs ``__init__``: the frozen class's guarded sets and its
# two converters cost 1.7 µs per allocation reported to the RM, a twentieth of an allocation's whole
# cost in korral at 10,000 nodes; the slots cost 0.9. The converters' copies are made here instead.
SI_ALLOCATION_FIELDS = (
    "allocation_key",
    "allocation_tags",
    "uuid",
    "resource_per_alloc",
    "priority",
    "node_id",
    "application_id",
    "partition_name",
    "task_group_name",
    "placeholder",
)
_new_instance = object.__new__
_SETTERS = slot_setters(si.Allocation)
(
    _set_key,
    _set_tags,
    _set_uuid,
    _set_resource,
    _set_priority,
    _set_node,
    _set_application,
    _set_partition,
    _set_task_group,
    _set_placeholder,
) = (_SETTERS[name] for name in SI_ALLOCATION_FIELDS)


def to_si_allocation(allocation: Allocation, rm_partition: str | None = None) -> si.Allocation:
    """The SI allocation for the RM, with its own copies of the tags and the resource; ``rm_partition``:
    the RM's name of its partition, when the caller knows it already."""
    if rm_partition is None:
        rm_partition = partition_without_rm(allocation.partition)
    return to_si_allocations((allocation,), rm_partition)[0]


def to_si_allocations(allocations: Iterable[Allocation], rm_partition: str) -> list[si.Allocation]:
    """``to_si_allocation`` of each, for one burst of an application's allocations (all in the partition
    the RM calls ``rm_partition``): the same conversion, without a call per allocation."""
    converted_all: list[si.Allocation] = []
    append = converted_all.append
    for allocation in allocations:
        converted: si.Allocation = _new_instance(si.Allocation)
        _set_key(converted, allocation.allocation_key)
        tags = allocation.tags
        _set_tags(converted, dict(tags) if tags else {})
        _set_uuid(converted, allocation.uuid)
        _set_resource(converted, dict(allocation.resource))
        _set_priority(converted, allocation.priority)
        _set_node(converted, allocation.node_id)
        _set_application(converted, allocation.application_id)
        _set_partition(converted, rm_partition)
        _set_task_group(converted, allocation.task_group_name)
        _set_placeholder(converted, allocation.placeholder)
        append(converted)
    return converted_all


def to_si_release(
    allocation: Allocation, termination: si.TerminationType, message: str
) -> si.AllocationRelease:
    return si.AllocationRelease(
        partition_name=partition_without_rm(allocation.partition),
        application_id=allocation.application_id,
        uuid=allocation.uuid,
        termination_type=termination,
        message=message,
        allocation_key=allocation.allocation_key,
    )


def from_si_allocation(allocation: si.Allocation, partition: str) -> Allocation:
    return Allocation(
        uuid=allocation.uuid,
        allocation_key=allocation.allocation_key,
        application_id=allocation.application_id,
        node_id=allocation.node_id,
        resource=res.prune(allocation.resource_per_alloc),
        partition=partition,
        priority=allocation.priority,
        placeholder=allocation.placeholder,
        task_group_name=allocation.task_group_name,
        tags=dict(allocation.allocation_tags),
    )
