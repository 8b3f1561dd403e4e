"""Node actors own what the RM says of a node (capacity, occupied resources, attributes, schedulable)
and its decommission.

A node actor is the one writer of its node's ``NodeSpec``: each RM change (``UpdateNode``,
``SetNodeSchedulable``) makes a new immutable spec, which it publishes whole (``NodeChanged``) to the
scheduler, whose view decides with it, and to the partition, whose registry sums the capacity; both
hold the spec by reference. When the RM decommissions the node, the actor tells the scheduler
``NodeGone`` after every change it published, so the scheduler hears of its node in the order the
node changed; the scheduler then tells the owners of what ran there (``NodeRemoved``).

What runs on the node is not theirs: the scheduler's view is the one record of a node's allocations
(it books what it decides and drops what the owners release or refuse) and publishes it on the
partition's ``NodeBoard``, which a node's snapshot reads. A change the view had not heard of yet when
it decided counts as coming after the allocation, as YuniKorn orders them (a shrink or more occupied
resources leave the node over-committed, a drain leaves the allocation on it).
"""

from __future__ import annotations

import attrs

from korral import resource as res
from korral.actors.base import Handle, Rank, RetiringActor
from korral.actors.messages import (
    Decommission,
    NodeChanged,
    NodeGone,
    SetNodeSchedulable,
    Snapshot,
    UpdateNode,
)
from korral.actors.node_board import NodeBoard
from korral.actors.runtime import ActorPool
from korral.actors.tracker import Tracker
from korral.info import AllocationInfo, NodeInfo
from korral.model.node import NodeSpec


class NodeActor(RetiringActor):
    rank = Rank.NODE
    # only its partition sends it anything (no SchedulerDone to wait for)
    scheduler_sends = False

    def __init__(
        self,
        tracker: Tracker,
        name: str,
        spec: NodeSpec,
        partition: str,
        scheduler: Handle,
        *,
        partition_actor: Handle,
        board: NodeBoard,
        pool: ActorPool,
    ) -> None:
        super().__init__(tracker, name, pool=pool)
        # the RM's facts, as last reported: an immutable value, replaced whole on each change and
        # published as it is (``NodeChanged``)
        self.spec = spec
        self.partition = partition
        self.partition_actor = partition_actor
        self.scheduler = scheduler
        self.board = board

    def _publish(self, spec: NodeSpec) -> None:
        self.spec = spec
        changed = NodeChanged(spec=spec)
        self.tell(self.scheduler, changed)
        self.tell(self.partition_actor, changed)

    def on_UpdateNode(self, message: UpdateNode) -> None:
        capacity, occupied, attributes = message.capacity, message.occupied, message.attributes
        self._publish(self.spec.updated(capacity=capacity, occupied=occupied, attributes=attributes))

    def on_SetNodeSchedulable(self, message: SetNodeSchedulable) -> None:
        if message.schedulable != self.spec.schedulable:
            self._publish(attrs.evolve(self.spec, schedulable=message.schedulable))

    def on_Decommission(self, message: Decommission) -> None:
        self.tell(self.scheduler, NodeGone(node_id=self.spec.node_id, incarnation=self.spec.incarnation))

    def on_Snapshot(self, message: Snapshot) -> NodeInfo:
        spec = self.spec
        allocations = self.board.allocations(spec.node_id)
        allocated: res.Resource = {}
        for allocation in allocations:
            res.add_into(allocated, allocation.resource)
        available = res.sub(spec.capacity, allocated)
        res.sub_into(available, spec.occupied)
        offset_ns = self.tracker.clocks.wall_offset_ns()  # the allocations' times as Unix ns
        return NodeInfo(
            node_id=spec.node_id,
            partition=self.partition,
            capacity=res.prune(spec.capacity),
            allocated=res.prune(allocated),
            occupied=res.prune(spec.occupied),
            available=res.prune(available),
            schedulable=spec.schedulable,
            attributes=dict(spec.attributes),
            allocations=[AllocationInfo.of(a, "", offset_ns) for a in allocations],
            reservations=[],
        )
