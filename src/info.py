"""Read-only snapshots returned by ``korral.Core`` queries (api.md: Waiting and reading state).

Each is consistent for the object it describes; resources are plain dicts with zero entries left out.
"""

from __future__ import annotations

import attrs

from korral import resource as res
from korral.model.allocation import Allocation
from korral.model.ugm import QueueUsage
from korral.records import frozen


@frozen
class AllocationInfo:
    allocation_key: str
    uuid: str
    application_id: str
    node_id: str
    resource: dict[str, int]
    priority: int = 0
    placeholder: bool = False
    task_group_name: str = ""
    # the termination type name of a release the core made and the RM has not confirmed yet ("": none)
    releasing: str = ""
    tags: dict[str, str] = attrs.field(factory=dict)
    # Unix ns (0: not known): when its ask came in (its placeholder's, if it replaced one), when made
    request_time_ns: int = 0
    allocation_time_ns: int = 0
    placeholder_used: bool = False  # it replaced a placeholder

    @classmethod
    def of(cls, allocation: Allocation, releasing: str = "", wall_offset_ns: int = 0) -> AllocationInfo:
        """``wall_offset_ns``: Unix ns less core clock ns, to give the allocation's times as Unix ns."""
        request, created = allocation.request_time, allocation.create_time
        return cls(
            allocation_key=allocation.allocation_key,
            uuid=allocation.uuid,
            application_id=allocation.application_id,
            node_id=allocation.node_id,
            resource=res.prune(allocation.resource),
            priority=allocation.priority,
            placeholder=allocation.placeholder,
            task_group_name=allocation.task_group_name,
            releasing=releasing,
            tags=dict(allocation.tags),
            request_time_ns=wall_offset_ns + int(request * 1e9) if request else 0,
            allocation_time_ns=wall_offset_ns + int(created * 1e9) if created else 0,
            placeholder_used=bool(allocation.replaces),
        )


@frozen
class PartitionInfo:
    name: str
    rm_id: str
    state: str
    capacity: dict[str, int]
    allocated: dict[str, int]
    node_sort_policy: str
    node_count: int
    application_count: int
    # the partition's preemption.enabled (YuniKorn's default: on)
    preemption_enabled: bool = True
    # the partition's preemption.quotapreemptionenabled (YuniKorn's default: off)
    quota_preemption_enabled: bool = False


@frozen
class QueueInfo:
    path: str
    is_leaf: bool
    is_managed: bool
    state: str
    guaranteed: dict[str, int]
    max: dict[str, int]
    allocated: dict[str, int]
    pending: dict[str, int]
    max_applications: int
    properties: dict[str, str]
    children: list[str]
    applications: list[str]
    # the queue's effective application sorting (its own or inherited): fifo, fair, stateaware
    sort_policy: str = "fifo"
    priority_sorting: bool = True
    # the queue's effective preemption.policy: default, fence or disabled (inherited as YuniKorn does)
    preemption_policy: str = "default"
    # applications in state Running in the queue and its descendants (YuniKorn's runningApps)
    running_applications: int = 0
    # YuniKorn's currentPriority: the highest pending priority below it, adjusted by the queue's
    # priority offset and fence (-2**31: nothing pending), as the scheduler last published it
    current_priority: int = -(1 << 31)
    # YuniKorn's preemptingResource: what preemption victims in it and below hold until confirmed
    preempting: dict[str, int] = attrs.field(factory=dict)
    # YuniKorn's allocatingAcceptedApps: Accepted applications in it and below holding allocations
    allocating_accepted: list[str] = attrs.field(factory=list)
    # YuniKorn's maxResource: the queue's own configured max (the root's: the cluster capacity), empty
    # when it has none; ``max`` is the limit that applies, the smallest along the path
    own_max: dict[str, int] = attrs.field(factory=dict)


@frozen
class AskInfo:
    """An ask with allocations still to make, as its application holds it."""

    allocation_key: str
    application_id: str
    resource: dict[str, int]  # of each allocation
    pending: int  # allocations still to make
    priority: int = 0
    tags: dict[str, str] = attrs.field(factory=dict)
    required_node: str = ""
    placeholder: bool = False
    task_group_name: str = ""
    originator: bool = False
    request_time_ns: int = 0  # when the core took it in (epoch nanoseconds)


@frozen
class ApplicationInfo:
    application_id: str
    partition: str
    queue: str
    user: str
    state: str
    allocated: dict[str, int]
    pending: dict[str, int]
    placeholder: dict[str, int]
    allocations: list[AllocationInfo]
    pending_asks: list[str]
    asks: list[AskInfo] = attrs.field(factory=list)  # pending_asks in full, in the same order
    groups: list[str] = attrs.field(factory=list)
    # Unix ns: when it was submitted; (when, state entered) of each state change, oldest first
    submission_time_ns: int = 0
    state_log: list[tuple[int, str]] = attrs.field(factory=list)
    max_allocated: dict[str, int] = attrs.field(factory=dict)  # the most it held at once
    # resource-seconds of released allocations: resourceUsage, preemptedResource, placeholderResource,
    # each per instance type (YuniKorn's tracked resources)
    resource_seconds: dict[str, dict[str, dict[str, int]]] = attrs.field(factory=dict)
    # YUNIKORN-3115: not scheduled before this moment (epoch seconds) since too many of its asks fit no
    # node in one pass; None: never backed off
    backoff_deadline: float | None = None
    placeholder_data: list[PlaceholderDataInfo] = attrs.field(factory=list)  # per task group, by name
    reservations: list[str] = attrs.field(factory=list)  # allocation keys of its asks holding a node


@frozen
class PlaceholderDataInfo:
    """YuniKorn's placeholder data of one task group of an application."""

    task_group_name: str
    count: int  # placeholders asked for
    min_resource: dict[str, int]  # the resource of its first placeholder
    replaced: int  # replaced by a real allocation
    timed_out: int  # ended otherwise: timed out, released by the RM, removed at the timeout


@frozen
class NodeInfo:
    node_id: str
    partition: str
    capacity: dict[str, int]
    allocated: dict[str, int]
    occupied: dict[str, int]
    available: dict[str, int]
    schedulable: bool
    attributes: dict[str, str]
    allocations: list[AllocationInfo]
    reservations: list[str]  # the applications holding a reservation on it
    reserved_asks: list[str] = attrs.field(factory=list)  # their asks' keys, in the same order


@frozen
class LimitUsageInfo:
    """A user's or group's usage at one queue (its whole subtree) and the limit that applies there.

    ``max_resources`` empty and ``max_applications`` 0 mean no such limit at this queue."""

    queue_path: str
    resource: dict[str, int]
    running_applications: list[str]
    max_resources: dict[str, int]
    max_applications: int


@frozen
class UserUsageInfo:
    user: str
    partition: str
    queues: list[LimitUsageInfo]  # root first, then by path
    # application id -> the group it is tracked against, for the user's applications that have one
    groups: dict[str, str] = attrs.field(factory=dict)


@frozen
class GroupUsageInfo:
    group: str
    partition: str
    queues: list[LimitUsageInfo]  # root first, then by path


def limit_usage_infos(rows: list[QueueUsage]) -> list[LimitUsageInfo]:
    return [
        LimitUsageInfo(
            queue_path=row.queue_path,
            resource=dict(row.resource),
            running_applications=list(row.running_applications),
            max_resources=dict(row.max_resources),
            max_applications=row.max_applications,
        )
        for row in rows
    ]
