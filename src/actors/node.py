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

from korral.actors.base import Handle, Rank, RetiringActor
from korral.actors.messages import NodeChanged, SetNodeSchedulable, Snapshot, UpdateNode
from korral.actors.node_board import NodeBoard
from korral.actors.runtime import ActorPool
from korral.actors.tracker import Tracker
from korral.info import AllocationInfo, NodeInfo
from korral.model import resource as res
from korral.model.node import Node, NodeSpec


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
        # the RM's facts; its ``allocations`` stay empty (they are the view's, read off the board)
        self.node = Node(
            spec.node_id, spec.capacity, spec.occupied, spec.attributes, spec.schedulable, partition
        )
        self.scheduler = scheduler
        self.board = board

    def _spec(self) -> NodeSpec:
        node = self.node
        return NodeSpec(
            node_id=node.node_id,
            capacity=dict(node.capacity),
            occupied=dict(node.occupied),
            attributes=dict(node.attributes),
            schedulable=node.schedulable,
        )

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

    def on_Snapshot(self, message: Snapshot) -> NodeInfo:
        node = self.node
        allocations = self.board.allocations(node.node_id)
        allocated: res.Resource = {}
        for allocation in allocations:
            res.add_into(allocated, allocation.resource)
        available = res.sub(node.capacity, allocated)
        res.sub_into(available, node.occupied)
        offset_ns = self.tracker.runtime.wall_offset_ns()  # the allocations' times as Unix ns
        return NodeInfo(
            node_id=node.node_id,
            partition=node.partition,
            capacity=res.prune(node.capacity),
            allocated=res.prune(allocated),
            occupied=res.prune(node.occupied),
            available=res.prune(available),
            schedulable=node.schedulable,
            attributes=dict(node.attributes),
            allocations=[AllocationInfo.of(a, "", offset_ns) for a in allocations],
            reservations=[],
        )
