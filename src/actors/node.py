"""Node actors own what the RM says of a node (capacity, occupied, attributes, schedulable) and keep
the record of the allocations on it.

Whether an allocation fits is decided once, by the scheduler's view, the one writer of a node's free
room; the node hears of the RM's changes first and tells the view their absolute values
(``NodeChanged``). An allocation is recorded here when its application confirms it (``BookOnNode``),
whatever the room: a change the view had not heard of yet when it decided counts as coming after the
allocation, as YuniKorn orders them (a shrink or more occupied resources leave the node
over-committed, a drain leaves the allocation on it); nothing is booked twice. The record is what
the node's removal releases and what its snapshot shows.
"""

from __future__ import annotations

from collections import defaultdict

from korral.actors.base import Handle, Rank, RetiringActor
from korral.actors.messages import (
    BookOnNode,
    DecommissionNode,
    FreeOnNode,
    NodeChanged,
    NodeRemoved,
    SetNodeSchedulable,
    Snapshot,
    SwapOnNode,
    UpdateNode,
)
from korral.actors.runtime import ActorPool
from korral.actors.tracker import Tracker
from korral.info import AllocationInfo, NodeInfo
from korral.model import resource as res
from korral.model.node import Node, NodeSpec


class NodeActor(RetiringActor):
    rank = Rank.NODE
    # its owners send it what to record; the scheduler sends it nothing (no SchedulerDone to wait for)
    scheduler_sends = False

    def __init__(
        self,
        tracker: Tracker,
        name: str,
        spec: NodeSpec,
        partition: str,
        scheduler: Handle,
        *,
        pool: ActorPool,
    ) -> None:
        super().__init__(tracker, name, pool=pool)
        self.node = Node(
            spec.node_id, spec.capacity, spec.occupied, spec.attributes, spec.schedulable, partition
        )
        self.scheduler = scheduler
        # the application actor of each allocation booked here, to tell it when the node goes away
        self.owners: dict[str, Handle] = {}
        self.removed = False

    def _spec(self) -> NodeSpec:
        node = self.node
        return NodeSpec(
            node_id=node.node_id,
            capacity=dict(node.capacity),
            occupied=dict(node.occupied),
            attributes=dict(node.attributes),
            schedulable=node.schedulable,
        )

    def on_BookOnNode(self, message: BookOnNode) -> None:
        if self.removed:
            # The node left before the booking arrived: the owner must release these, as it would
            # have had they been booked before the node went.
            self.tell(
                message.app,
                NodeRemoved(
                    node_id=self.node.node_id,
                    uuids=tuple(a.uuid for a in message.allocations),
                    reason=f"Node {self.node.node_id} Removed",
                ),
            )
            return
        node = self.node
        booked = node.allocations
        owners = self.owners
        app = message.app
        for allocation in message.allocations:
            if allocation.uuid not in booked:  # a recovery told twice books once
                node.add_allocation(allocation)
                owners[allocation.uuid] = app

    def on_FreeOnNode(self, message: FreeOnNode) -> None:
        for uuid in message.uuids:
            self.node.remove_allocation(uuid)
            self.owners.pop(uuid, None)

    def on_SwapOnNode(self, message: SwapOnNode) -> None:
        if self.removed:
            # the node left after the application swapped: the real allocations go with the node
            self.tell(
                message.app,
                NodeRemoved(
                    node_id=self.node.node_id,
                    uuids=tuple(real.uuid for _, real in message.swaps),
                    reason=f"Node {self.node.node_id} Removed",
                ),
            )
            return
        for placeholder_uuid, real in message.swaps:
            self.owners.pop(placeholder_uuid, None)
            self.node.remove_allocation(placeholder_uuid)
            self.node.add_allocation(real)  # never larger than the placeholder it replaces
            self.owners[real.uuid] = message.app

    def on_UpdateNode(self, message: UpdateNode) -> None:
        if message.capacity is not None:
            self.node.set_capacity(message.capacity)
        if message.occupied is not None:
            self.node.set_occupied(message.occupied)
        if message.attributes is not None:
            self.node.attributes = dict(message.attributes)
        self.tell(self.scheduler, NodeChanged(spec=self._spec()))

    def on_SetNodeSchedulable(self, message: SetNodeSchedulable) -> None:
        self.node.schedulable = message.schedulable
        self.tell(self.scheduler, NodeChanged(spec=self._spec()))

    def on_DecommissionNode(self, message: DecommissionNode) -> None:
        """The node leaves: every allocation on it is released through its application."""
        self.removed = True
        self.node.schedulable = False
        by_owner: dict[Handle, list[str]] = defaultdict(list)
        orphans: list[str] = []
        for uuid in list(self.node.allocations):
            owner = self.owners.pop(uuid, None)
            if owner is None:
                orphans.append(uuid)
            else:
                by_owner[owner].append(uuid)
            self.node.remove_allocation(uuid)
        for owner, uuids in by_owner.items():
            removed = NodeRemoved(node_id=self.node.node_id, uuids=tuple(uuids), reason=message.reason)
            self.tell(owner, removed)

    def on_Snapshot(self, message: Snapshot) -> NodeInfo:
        node = self.node
        offset_ns = self.tracker.runtime.wall_offset_ns()  # the allocations' times as Unix ns
        return NodeInfo(
            node_id=node.node_id,
            partition=node.partition,
            capacity=res.prune(node.capacity),
            allocated=node.allocated,
            occupied=res.prune(node.occupied),
            available=res.prune(node.available),
            schedulable=node.schedulable,
            attributes=dict(node.attributes),
            allocations=[AllocationInfo.of(a, "", offset_ns) for a in node.allocations.values()],
            reservations=[],
        )
