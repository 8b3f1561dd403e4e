"""Asks (what an application wants) and allocations (what it got)."""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

import msgspec

from korral import resource as res
from korral import si
from korral.resource import Resource

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


class Allocation(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One placed allocation: an immutable value, defined here once and shared by reference by every
    holder (the scheduler's view, the node, the application's owner, the RM's report).

    Built by keyword only (``Allocation(uuid=..., ...)``): a positional call is refused, so a field
    moved or renamed cannot silently land in another one. A msgspec frozen struct rather than a frozen
    attrs class or a NamedTuple: one is created per allocation on the hot path, and its keyword build
    costs what a positional tuple did (a tenth of attrs', an eighth of a NamedTuple's keyword build).
    Its ``resource`` and ``tags`` dicts are never mutated; ``replace`` derives a changed copy. Not
    tracked by the cyclic collector (``gc=False``): it holds only strings, numbers and flat dicts.
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

    def replace(self, **changes: Any) -> Allocation:
        """The same allocation with the named fields changed."""
        return msgspec.structs.replace(self, **changes)


class AskSpec(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What an ask asks for: an immutable value, built once by the application's owner (or the
    reference partition) from the RM's ask and shared by reference with the scheduler's view.

    Made by ``AskSpec.build``, which also derives what the node search reads per attempt; built by
    keyword only, like ``Allocation``. Each holder keeps its own progress on it (``Ask``).
    """

    allocation_key: str
    application_id: str
    resource: Resource
    max_allocations: int = 1
    priority: int = 0
    # when it was asked for (core clock; a re-sent ask keeps its age through its creationTime tag)
    create_time: float = 0.0
    tags: dict[str, str] = _NO_TAGS
    placeholder: bool = False
    task_group_name: str = ""
    originator: bool = False
    allow_preempt_self: bool = False
    allow_preempt_other: bool = False
    execution_timeout_ms: int = 0
    # an ask replaced under the same key starts a new generation (0: not yet given one by its owner)
    generation: int = 0
    # derived from ``resource`` by ``build`` (``items_and_shape``): what the node search needs per
    # attempt. One field for the two: a msgspec struct built with more than 15 keywords costs three
    # times as much (measured, instructions per build).
    layout: tuple[ResourceItems, ResourceItems]

    @property
    def resource_items(self) -> ResourceItems:
        """The resource's items, in its order."""
        return self.layout[0]

    @property
    def shape(self) -> ResourceItems:
        """The resource's items sorted by name: equal resources have the same shape."""
        return self.layout[1]

    @property
    def required_node(self) -> str:
        """The node a daemon-set style ask must run on (tag yunikorn.apache.org/requiredNode), "" for any."""
        tags = self.tags
        return tags.get(TAG_REQUIRED_NODE, "") if tags else ""

    @classmethod
    def build(
        cls,
        *,
        allocation_key: str,
        application_id: str,
        resource: Resource,
        max_allocations: int = 1,
        priority: int = 0,
        create_time: float = 0.0,
        tags: dict[str, str] | None = None,
        placeholder: bool = False,
        task_group_name: str = "",
        originator: bool = False,
        allow_preempt_self: bool = False,
        allow_preempt_other: bool = False,
        execution_timeout_ms: int = 0,
        generation: int = 0,
    ) -> AskSpec:
        """The spec of an ask, with its derived fields; ``max_allocations`` below 1 counts as 1, as
        YuniKorn's does. (Every field written out: a keyword catch-all costs as much as the build.)"""
        return cls(
            allocation_key=allocation_key,
            application_id=application_id,
            resource=resource,
            max_allocations=max_allocations if max_allocations >= 1 else 1,
            priority=priority,
            create_time=create_time,
            tags=tags or _NO_TAGS,
            placeholder=placeholder,
            task_group_name=task_group_name,
            originator=originator,
            allow_preempt_self=allow_preempt_self,
            allow_preempt_other=allow_preempt_other,
            execution_timeout_ms=execution_timeout_ms,
            generation=generation,
            layout=items_and_shape(resource),
        )

    def with_generation(self, generation: int) -> AskSpec:
        """The same ask, of the given generation (its owner numbers the asks it takes in)."""
        return msgspec.structs.replace(self, generation=generation)


class Ask:
    """One holder's progress on an ``AskSpec``: ``pending`` of its ``max_allocations`` still to place.

    Mutable, owned by one holder (the application's owner, the scheduler's view, the reference): each
    holder builds its own around the one shared spec. The spec's fields read through (``ask.resource``);
    code on the hot path reads ``ask.spec`` once instead.
    """

    __slots__ = (
        "allocated_count",
        "create_seq",
        "failed_since",
        "pending",
        "preempt_checked_at",
        "preempt_victims",
        "spec",
    )

    def __init__(self, spec: AskSpec, create_seq: int = 0) -> None:
        self.spec = spec
        self.pending = spec.max_allocations
        self.allocated_count = 0
        # the order this holder received it in (ties of priority and age)
        self.create_seq = create_seq
        # monotonic time of the first failed attempt to fit any node; None while it has not failed
        self.failed_since: float | None = None
        # preemption: when the ask last tried (rate-limited), and the victims it waits for (app, uuid)
        self.preempt_checked_at: float | None = None
        self.preempt_victims: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, *, create_seq: int = 0, **spec: Any) -> Ask:
        """A new holder's ask of a spec built from ``spec``'s fields (``AskSpec``'s names)."""
        return cls(AskSpec.build(**spec), create_seq)

    @property
    def allocation_key(self) -> str:
        return self.spec.allocation_key

    @property
    def application_id(self) -> str:
        return self.spec.application_id

    @property
    def resource(self) -> Resource:
        return self.spec.resource

    @property
    def resource_items(self) -> ResourceItems:
        return self.spec.resource_items

    @property
    def shape(self) -> ResourceItems:
        return self.spec.shape

    @property
    def max_allocations(self) -> int:
        return self.spec.max_allocations

    @property
    def priority(self) -> int:
        return self.spec.priority

    @property
    def create_time(self) -> float:
        return self.spec.create_time

    @property
    def tags(self) -> dict[str, str]:
        return self.spec.tags

    @property
    def placeholder(self) -> bool:
        return self.spec.placeholder

    @property
    def task_group_name(self) -> str:
        return self.spec.task_group_name

    @property
    def originator(self) -> bool:
        return self.spec.originator

    @property
    def allow_preempt_self(self) -> bool:
        return self.spec.allow_preempt_self

    @property
    def allow_preempt_other(self) -> bool:
        return self.spec.allow_preempt_other

    @property
    def execution_timeout_ms(self) -> int:
        return self.spec.execution_timeout_ms

    @property
    def generation(self) -> int:
        return self.spec.generation

    @property
    def required_node(self) -> str:
        return self.spec.required_node

    @property
    def sort_key(self) -> tuple[int, float, int]:
        """Request ordering: highest priority first, then oldest first (YuniKorn: by creation time,
        which a re-sent ask's creationTime tag sets), then in the order received."""
        spec = self.spec
        return (-spec.priority, spec.create_time, self.create_seq)


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


def release_withdraws_ask(
    uuid: str, allocation_key: str, termination: si.TerminationType, ask: Ask | None
) -> bool:
    """Whether an RM's allocation release also withdraws the pending ask of its key: YuniKorn's release
    names a key alone (today's SI) and withdraws the ask unless it confirms a timeout; the seed's release
    by uuid leaves the ask's other repeats pending."""
    return (
        bool(allocation_key)
        and not uuid
        and termination is not si.TerminationType.TIMEOUT
        and ask is not None
        and ask.pending > 0
    )
