"""Asks (what an application wants) and allocations (what it got)."""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import NamedTuple

from korral.model import resource as res
from korral.model.resource import Resource

_NO_TAGS: dict[str, str] = {}  # shared, as every ask's and allocation's tags: never mutated

ResourceItems = tuple[tuple[str, int], ...]
# An ask's resource items and shape, one canonical pair per distinct resource: most asks come in a
# few sizes, so 100,000 asks of {memory: 10, vcore: 1} share one pair instead of holding 100,000
# (~220 bytes each). Bounded: past _SHAPES_MAX distinct resources, new ones are not remembered.
_SHAPES: dict[ResourceItems, tuple[ResourceItems, ResourceItems]] = {}
_SHAPES_MAX = 4096


def items_and_shape(resource: Resource) -> tuple[ResourceItems, ResourceItems]:
    """The resource's items in its order, and sorted by name (its shape): equal resources written in
    the same order get the same two tuples."""
    items = tuple(resource.items())
    known = _SHAPES.get(items)
    if known is not None:
        return known
    pair = (items, items if len(items) < 2 else tuple(sorted(items)))
    if len(_SHAPES) < _SHAPES_MAX:
        _SHAPES[items] = pair
    return pair


# YuniKorn's tags on asks and allocations (si.DOMAIN_YUNIKORN + si.KEY_...)
TAG_REQUIRED_NODE = "yunikorn.apache.org/requiredNode"
TAG_ALLOW_PREEMPTION = "yunikorn.apache.org/allowPreemption"


def tag_allows_preemption(tags: Mapping[str, str]) -> bool:
    """May work with these tags be preempted, when no preemption policy says? Yes unless the
    allow-preemption tag says "false" (YuniKorn)."""
    return tags.get(TAG_ALLOW_PREEMPTION, "").lower() != "false"


UNKNOWN_INSTANCE_TYPE = "UNKNOWN"  # YuniKorn's instance type of a node without the attribute


class Allocation(NamedTuple):
    """One placed allocation. Immutable, so it crosses mailboxes as is.

    A NamedTuple rather than a frozen attrs class: one is created per allocation on the hot path and a
    tuple is several times cheaper to build. Its ``resource`` and ``tags`` dicts are never mutated.
    """

    uuid: str
    allocation_key: str
    application_id: str
    node_id: str
    resource: Resource
    partition: str = ""
    queue_path: str = ""
    priority: int = 0
    placeholder: bool = False
    task_group_name: str = ""
    tags: dict[str, str] = _NO_TAGS
    # generation of the ask this came from: an ask replaced under the same key starts a new generation
    ask_generation: int = 0
    # recovered from the RM (existing allocation), not decided by the scheduler
    recovered: bool = False
    # the placeholder this real allocation replaces (gang scheduling); "" for a plain allocation
    replaces: str = ""
    # core clock seconds: when its ask came in (a placeholder's, when it replaced one) and when it was
    # made (0.0: not known, as for an allocation recovered from the RM)
    request_time: float = 0.0
    create_time: float = 0.0
    # its node's instance type (si.INSTANCE_TYPE attribute, YuniKorn's "UNKNOWN" without one): the key
    # of the application's resource-seconds
    instance_type: str = ""


class Ask:
    """A request for ``max_allocations`` allocations of ``resource``; ``pending`` of them still to place.

    Mutable, owned by its application. ``generation`` tells a replaced ask (same key) from the old one.
    """

    __slots__ = (
        "allocated_count",
        "allocation_key",
        "allow_preempt_other",
        "allow_preempt_self",
        "application_id",
        "create_seq",
        "create_time",
        "execution_timeout_ms",
        "failed_since",
        "generation",
        "max_allocations",
        "originator",
        "pending",
        "placeholder",
        "preempt_checked_at",
        "preempt_victims",
        "priority",
        "required_node",
        "resource",
        "resource_items",
        "shape",
        "tags",
        "task_group_name",
    )

    def __init__(
        self,
        allocation_key: str,
        application_id: str,
        resource: Resource,
        # positional too: build_ask creates one per ask received, and keywords cost a dict per call
        max_allocations: int = 1,
        priority: int = 0,
        create_seq: int = 0,
        create_time: float = 0.0,
        tags: dict[str, str] | None = None,
        placeholder: bool = False,
        task_group_name: str = "",
        originator: bool = False,
        allow_preempt_self: bool = False,
        allow_preempt_other: bool = False,
        execution_timeout_ms: int = 0,
        generation: int = 0,
    ) -> None:
        self.allocation_key = allocation_key
        self.application_id = application_id
        self.resource = resource
        # the ask's resource never changes: precompute what the node search needs per attempt
        self.resource_items, self.shape = items_and_shape(resource)
        self.max_allocations = max(1, max_allocations)
        self.pending = self.max_allocations
        self.allocated_count = 0
        self.priority = priority
        self.create_seq = create_seq
        self.create_time = create_time
        self.tags = tags or _NO_TAGS
        self.placeholder = placeholder
        self.task_group_name = task_group_name
        self.originator = originator
        self.allow_preempt_self = allow_preempt_self
        self.allow_preempt_other = allow_preempt_other
        self.execution_timeout_ms = execution_timeout_ms
        self.generation = generation
        # monotonic time of the first failed attempt to fit any node; None while it has not failed
        self.failed_since: float | None = None
        # the node a daemon-set style ask must run on (tag yunikorn.apache.org/requiredNode), "" for any
        self.required_node: str = self.tags.get(TAG_REQUIRED_NODE, "") if self.tags else ""
        # preemption: when the ask last tried (rate-limited), and the victims it waits for (app, uuid)
        self.preempt_checked_at: float | None = None
        self.preempt_victims: tuple[tuple[str, str], ...] = ()

    def copy(self) -> Ask:
        """An independent copy (the scheduler's view keeps its own count of what is pending)."""
        twin = Ask.__new__(Ask)
        twin.allocated_count = self.allocated_count
        twin.allocation_key = self.allocation_key
        twin.allow_preempt_other = self.allow_preempt_other
        twin.allow_preempt_self = self.allow_preempt_self
        twin.application_id = self.application_id
        twin.create_seq = self.create_seq
        twin.create_time = self.create_time
        twin.execution_timeout_ms = self.execution_timeout_ms
        twin.failed_since = self.failed_since
        twin.generation = self.generation
        twin.max_allocations = self.max_allocations
        twin.originator = self.originator
        twin.pending = self.pending
        twin.placeholder = self.placeholder
        twin.priority = self.priority
        twin.resource = self.resource
        twin.resource_items = self.resource_items
        twin.shape = self.shape
        twin.tags = self.tags
        twin.task_group_name = self.task_group_name
        twin.required_node = self.required_node
        twin.preempt_checked_at = self.preempt_checked_at
        twin.preempt_victims = self.preempt_victims
        return twin

    @property
    def sort_key(self) -> tuple[int, float, int]:
        """Request ordering: highest priority first, then oldest first (YuniKorn: by creation time,
        which a re-sent ask's creationTime tag sets), then in the order received."""
        return (-self.priority, self.create_time, self.create_seq)


def recovery_rejection(allocation: Allocation, *, issued_prefix: str, live_recovered: Container[str]) -> str:
    """Why an existing allocation the RM reports cannot be recovered; "" when it can.

    One rule for every driver. Recovered allocations keep the uuid the RM gives them (the RM releases
    them by it), so a uuid must neither be live already in the partition (in any application) nor
    belong to the core's own series of this partition's life: booked twice, it could never be freed.
    """
    key = allocation.allocation_key
    if res.has_negative(allocation.resource):
        return f"allocation {key} contains negative resources"
    if res.is_zero(allocation.resource):
        return f"allocation {key} contains no resources"
    uuid = allocation.uuid
    if uuid and uuid.startswith(issued_prefix):
        return f"allocation {key}: uuid {uuid} was issued by this core, it is not an existing allocation"
    if uuid in live_recovered:
        return f"allocation {key}: uuid {uuid} is already live in the partition"
    return ""
