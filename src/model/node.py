"""A node: capacity, what runs on it, and whether new work may go there."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from korral import resource as res
from korral.model.allocation import Allocation
from korral.resource import Resource

# What most nodes have: nothing occupied, no attributes. Shared rather than an empty dict per node and
# copy (registry, scheduler's view, node actor: ~4 MB at 10,000 nodes); a Node replaces these two
# whole (set_occupied, attributes =) and never changes them in place.
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
    """A node's facts as its owner (the Node actor) last reported them: an immutable value, sent to
    the partition and the scheduler's view by reference."""

    node_id: str
    capacity: dict[str, int]
    occupied: dict[str, int] = attrs.field(factory=dict)
    attributes: dict[str, str] = attrs.field(factory=dict)
    schedulable: bool = True


class Node:
    """available = capacity - allocated - occupied, kept incrementally.

    ``occupied`` is what other schedulers use on the node (reported by the RM); ``allocated`` is the sum
    of korral's allocations on it. A node holds one reservation, or several when every one of them
    is for an ask that requires this node (YuniKorn 1.8, YUNIKORN-2976: several daemon-set asks may
    wait on one node; a normal reservation is made only on a node with none).
    """

    __slots__ = (
        "allocations",
        "attributes",
        "available",
        "capacity",
        "journal",
        "node_id",
        "occupied",
        "partition",
        "reservations",
        "schedulable",
        "score_terms",
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
        self.node_id = node_id
        self.partition = partition
        self.capacity: Resource = res.prune(capacity)
        self.occupied: Resource = res.prune(occupied) if occupied else _NOTHING_OCCUPIED
        # allocated is derived (capacity - occupied - available): one aggregate less to keep per allocation
        self.available: Resource = res.sub(self.capacity, self.occupied) if occupied else dict(self.capacity)
        self.attributes: dict[str, str] = dict(attributes) if attributes else _NO_ATTRIBUTES
        self.schedulable = schedulable
        self.allocations: dict[str, Allocation] = {}
        # (application_id, allocation_key) of each ask holding this node, in the order they reserved it
        self.reservations: tuple[tuple[str, str], ...] = ()
        # the partition's cache for its node order: (capacity, weights, terms, total weight)
        self.score_terms: tuple[Any, ...] | None = None
        # where each booking and freeing is noted for readers on other threads (the registry that
        # adds the node hands its ``node_journal`` over); None: nobody reads this node's allocations
        self.journal: list[NodeChange] | None = None

    @property
    def reservation(self) -> tuple[str, str] | None:
        """The first ask holding this node (the only one unless they all require this node)."""
        return self.reservations[0] if self.reservations else None

    @property
    def allocated(self) -> Resource:
        used = res.sub(self.capacity, self.available)
        res.sub_into(used, self.occupied)
        return res.prune(used)

    def _recompute_available(self, allocated: Resource) -> None:
        available = res.sub(self.capacity, allocated)
        res.sub_into(available, self.occupied)
        self.available = available

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

    def set_capacity(self, capacity: Mapping[str, int]) -> Resource:
        """Replace the capacity; returns the delta (new - old) for the partition total."""
        new_capacity = res.prune(capacity)
        delta = res.sub(new_capacity, self.capacity)
        allocated = self.allocated
        self.capacity = new_capacity
        self._recompute_available(allocated)
        return res.prune(delta)

    def set_occupied(self, occupied: Mapping[str, int]) -> None:
        allocated = self.allocated
        self.occupied = res.prune(occupied)
        self._recompute_available(allocated)

    def is_full(self) -> bool:
        """Nothing positive left: no ask (asks are strictly positive) can fit."""
        for quantity in self.available.values():
            if quantity > 0:
                return False
        return True
