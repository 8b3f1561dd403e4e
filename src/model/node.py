"""A node: the RM's facts of it (``NodeSpec``, its node actor's), and what the scheduler decides on it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from korral import resource as res
from korral.model.allocation import Allocation
from korral.resource import Resource

# What most nodes have: nothing occupied, no attributes. Shared rather than an empty dict per node; a
# NodeSpec is immutable and replaced whole, so nothing changes these in place.
_NOTHING_OCCUPIED: Resource = {}
_NO_ATTRIBUTES: dict[str, str] = {}

NodeChange = Allocation | tuple[str, str]
"""An allocation booked on its node (the allocation itself: one per allocation, and not tracked by the
cyclic collector, where a tuple would be while a batch lasts), or (node id, uuid): freed from that
node; with an empty uuid, the node left with everything on it."""


def removal_reason(node_id: str) -> str:
    """What the owners of a removed node's allocations report to the RM (YuniKorn's wording)."""
    return f"Node {node_id} Removed"


@attrs.frozen(slots=True, kw_only=True)
class NodeSpec:
    """What the RM says of a node (capacity, occupied, attributes, schedulable), as its owner, the node
    actor, last published it: an immutable value, replaced whole on each change and read by reference
    by the partition's registry and the scheduler's view (``Node.spec``), never copied. Its dicts are
    pruned and never changed in place.

    ``incarnation`` tells apart two nodes of one id (removed, then created again): a publication of
    the earlier one that arrives late is not applied to the later one."""

    node_id: str
    capacity: dict[str, int]
    occupied: dict[str, int] = attrs.field(factory=dict)
    attributes: dict[str, str] = attrs.field(factory=dict)
    schedulable: bool = True
    incarnation: int = 0

    @classmethod
    def of(
        cls,
        node_id: str,
        capacity: Mapping[str, int],
        occupied: Mapping[str, int] | None = None,
        attributes: Mapping[str, str] | None = None,
        schedulable: bool = True,
        incarnation: int = 0,
    ) -> NodeSpec:
        """A node's first spec, from what the RM reported (pruned; empties shared)."""
        return cls(
            node_id=node_id,
            capacity=res.prune(capacity),
            occupied=res.prune(occupied) if occupied else _NOTHING_OCCUPIED,
            attributes=dict(attributes) if attributes else _NO_ATTRIBUTES,
            schedulable=schedulable,
            incarnation=incarnation,
        )

    def updated(
        self,
        *,
        capacity: Mapping[str, int] | None = None,
        occupied: Mapping[str, int] | None = None,
        attributes: Mapping[str, str] | None = None,
    ) -> NodeSpec:
        """The spec after an RM update: what it reports replaces what it was (None: unchanged)."""
        return attrs.evolve(
            self,
            capacity=res.prune(capacity) if capacity is not None else self.capacity,
            occupied=res.prune(occupied) if occupied is not None else self.occupied,
            attributes=dict(attributes) if attributes is not None else self.attributes,
        )


class Node:
    """A node as a partition model holds it: the RM's facts (``spec``, its owner's immutable value, held
    by reference) and what the scheduler decides on it: what runs there, its free room
    (available = capacity - allocated - occupied, kept incrementally) and its reservations.

    ``occupied`` is what other schedulers use on the node (reported by the RM); ``allocated`` is the sum
    of korral's allocations on it. A node holds one reservation, or several when every one of them
    is for an ask that requires this node (YuniKorn 1.8, YUNIKORN-2976: several daemon-set asks may
    wait on one node; a normal reservation is made only on a node with none).
    """

    __slots__ = (
        "allocations",
        "available",
        "journal",
        "node_id",
        "partition",
        "reservations",
        "score_terms",
        "spec",
    )

    def __init__(
        self,
        node_id: str,
        capacity: Mapping[str, int],
        occupied: Mapping[str, int] | None = None,
        attributes: Mapping[str, str] | None = None,
        schedulable: bool = True,
        partition: str = "",
    ) -> None:
        self._hold(NodeSpec.of(node_id, capacity, occupied, attributes, schedulable), partition)

    @classmethod
    def of(cls, spec: NodeSpec, partition: str = "") -> Node:
        """The node whose RM facts are ``spec`` (held, not copied)."""
        node = cls.__new__(cls)
        node._hold(spec, partition)
        return node

    def _hold(self, spec: NodeSpec, partition: str) -> None:
        self.spec = spec
        self.node_id = spec.node_id  # its key: the same for every spec it is given
        self.partition = partition
        occupied = spec.occupied
        # allocated is derived (capacity - occupied - available): one aggregate less to keep per allocation
        self.available: Resource = res.sub(spec.capacity, occupied) if occupied else dict(spec.capacity)
        self.allocations: dict[str, Allocation] = {}
        # (application_id, allocation_key) of each ask holding this node, in the order they reserved it
        self.reservations: tuple[tuple[str, str], ...] = ()
        # the partition's cache for its node order: (capacity, weights, terms, total weight)
        self.score_terms: tuple[Any, ...] | None = None
        # where each booking and freeing is noted for readers on other threads (the registry that
        # adds the node hands its ``node_journal`` over); None: nobody reads this node's allocations
        self.journal: list[NodeChange] | None = None

    # ---- the RM's facts, read through the spec -----------------------------------------------------

    @property
    def capacity(self) -> Resource:
        return self.spec.capacity

    @property
    def occupied(self) -> Resource:
        return self.spec.occupied

    @property
    def attributes(self) -> dict[str, str]:
        return self.spec.attributes

    @property
    def schedulable(self) -> bool:
        return self.spec.schedulable

    def set_spec(self, spec: NodeSpec) -> Resource:
        """Hold the owner's new spec (same node); returns the capacity's delta (new - old) for the
        partition's total. The free room follows capacity and occupied; what runs here stays."""
        old = self.spec
        if (old.capacity is spec.capacity and old.occupied is spec.occupied) or (
            res.equals(old.capacity, spec.capacity) and res.equals(old.occupied, spec.occupied)
        ):
            self.spec = spec
            return {}
        allocated = self.allocated  # of the old spec
        self.spec = spec
        available = res.sub(spec.capacity, allocated)
        res.sub_into(available, spec.occupied)
        self.available = available
        return res.prune(res.sub(spec.capacity, old.capacity))

    @property
    def reservation(self) -> tuple[str, str] | None:
        """The first ask holding this node (the only one unless they all require this node)."""
        return self.reservations[0] if self.reservations else None

    @property
    def allocated(self) -> Resource:
        used = res.sub(self.capacity, self.available)
        res.sub_into(used, self.occupied)
        return res.prune(used)

    def fits(self, ask: Mapping[str, int]) -> bool:
        return res.fits_in(ask, self.available)

    def capacity_fits(self, ask: Mapping[str, int]) -> bool:
        return res.fits_in(ask, self.capacity)

    def add_allocation(self, allocation: Allocation) -> None:
        """Book an allocation, whatever the room: the caller decided it fits (the scheduler's view), or it
        already runs (a recovery, or the record a node actor keeps of what the view decided)."""
        self.allocations[allocation.uuid] = allocation
        if self.journal is not None:
            self.journal.append(allocation)  # its node_id is this node's
        available = self.available
        for name, quantity in allocation.resource.items():
            try:
                available[name] -= quantity
            except KeyError:  # only a recovered allocation can use a type the node does not have
                available[name] = -quantity

    def remove_allocation(self, uuid: str) -> Allocation | None:
        allocation = self.allocations.pop(uuid, None)
        if allocation is not None:
            if self.journal is not None:
                self.journal.append((self.node_id, uuid))
            available = self.available
            for name, quantity in allocation.resource.items():
                available[name] = available.get(name, 0) + quantity
        return allocation

    def is_full(self) -> bool:
        """Nothing positive left: no ask (asks are strictly positive) can fit."""
        for quantity in self.available.values():
            if quantity > 0:
                return False
        return True
