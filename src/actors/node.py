"""Node actors own what the RM says of a node: capacity, occupied resources, attributes, schedulable.

What runs on the node is not theirs: the scheduler's view is the one record of a node's allocations
(it books what it decides and drops what the owners release or refuse) and publishes it on the
partition's ``NodeBoard``, which a node's snapshot reads. The node hears of the RM's changes first and
tells the view their absolute values (``NodeChanged``); a change the view had not heard of yet when it
decided counts as coming after the allocation, as YuniKorn orders them (a shrink or more occupied
resources leave the node over-committed, a drain leaves the allocation on it). When the node leaves,
the scheduler tells the owners of what ran there (``NodeRemoved``).
"""

from __future__ import annotations

import attrs

from korral import resource as res
from korral.actors.base import Handle, Rank, RetiringActor
from korral.actors.messages import NodeChanged, SetNodeSchedulable, Snapshot, UpdateNode
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
        board: NodeBoard,
        pool: ActorPool,
    ) -> None:
        super().__init__(tracker, name, pool=pool)
        # the RM's facts, as last reported: an immutable value, replaced whole on each change and
        # handed to the scheduler's view as it is (``NodeChanged``)
        self.spec = spec
        self.partition = partition
        self.scheduler = scheduler
        self.board = board

    def on_UpdateNode(self, message: UpdateNode) -> None:
        spec = self.spec
        self.spec = attrs.evolve(
            spec,
            capacity=res.prune(message.capacity) if message.capacity is not None else spec.capacity,
            occupied=res.prune(message.occupied) if message.occupied is not None else spec.occupied,
            attributes=dict(message.attributes) if message.attributes is not None else spec.attributes,
        )
        self.tell(self.scheduler, NodeChanged(spec=self.spec))

    def on_SetNodeSchedulable(self, message: SetNodeSchedulable) -> None:
        self.spec = attrs.evolve(self.spec, schedulable=message.schedulable)
        self.tell(self.scheduler, NodeChanged(spec=self.spec))

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
