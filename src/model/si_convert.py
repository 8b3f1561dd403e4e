"""Conversions between the SI's messages and the model's allocations, shared by every driver."""

from __future__ import annotations

from korral import si
from korral.model import resource as res
from korral.model.allocation import Allocation
from korral.model.naming import partition_without_rm


def to_si_allocation(allocation: Allocation, rm_partition: str | None = None) -> si.Allocation:
    """The SI allocation for the RM; ``rm_partition``: the RM's name of its partition, when the caller
    knows it already (an application converting a burst of its allocations)."""
    # si.Allocation's converters copy the tags and the resource: no copy of our own on top
    return si.Allocation(
        allocation_key=allocation.allocation_key,
        allocation_tags=allocation.tags,
        uuid=allocation.uuid,
        resource_per_alloc=allocation.resource,
        priority=allocation.priority,
        node_id=allocation.node_id,
        application_id=allocation.application_id,
        partition_name=partition_without_rm(allocation.partition) if rm_partition is None else rm_partition,
        task_group_name=allocation.task_group_name,
        placeholder=allocation.placeholder,
    )


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
