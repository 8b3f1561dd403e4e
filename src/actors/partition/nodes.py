"""The Partition actor's node side: a node request's creations, updates, drains and removals.

A mixin of ``PartitionActor`` (``korral.actors.partition.actor``), whose fields these are. The partition
decides which nodes exist (membership) and checks each request's items; a node's actor owns the RM's
facts of it (its ``NodeSpec``) and its decommission, and publishes each new spec to the scheduler and
here (``NodeChanged``), where the registry holds it by reference and sums the capacity; the
scheduler's view owns what runs on the node (on the ``NodeBoard`` for readers). The view learns of
new nodes in one message per request (``NodesAdded``), and of every later change from the node's
actor, in the order the node changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import attrs

from korral import resource as res
from korral import si
from korral.actors import gc_tuning
from korral.actors.base import Handle
from korral.actors.messages import (
    CallbackArgument,
    Decommission,
    Deliver,
    NodeAdded,
    NodeChanged,
    NodesAdded,
    RecoverAllocations,
    RouteNodeRequest,
    SetNodeSchedulable,
    StartNodeActors,
    UpdateNode,
    ViewOps,
)
from korral.actors.node_board import NodeBoard
from korral.actors.starting import LazyHandle, start_actor_lazily
from korral.actors.tracker import Tracker
from korral.model import events
from korral.model.allocation import Allocation
from korral.model.events import Wanted
from korral.model.node import NodeSpec
from korral.model.partition.composed import ModelError, PartitionModel
from korral.model.partition.members import PartitionMembers
from korral.model.view_ops import AdoptRecovered

if TYPE_CHECKING:
    from korral.actors.partition.actor import PartitionSettings


# a new node's recovered allocations and rejected asks when it brings no existing allocations
_NONE: tuple[dict[str, list[Allocation]], list[tuple[str, str, str]]] = ({}, [])


class PartitionNodes:
    """Handles ``RouteNodeRequest`` for ``PartitionActor``."""

    name: str
    tracker: Tracker
    settings: PartitionSettings
    registry: PartitionModel
    scheduler: Handle
    node_board: NodeBoard
    pool: Any
    apps: dict[str, Handle]
    members: PartitionMembers
    nodes: dict[str, Handle]
    node_reservations: dict[str, tuple[tuple[str, str], ...]]
    drain_proxy: Handle | None  # set while the partition drains (a reload left it out)
    metrics: Any
    _node_metric_deltas: dict[str, int] | None
    _nodes_added: list[NodeAdded]
    _unstarted_nodes: list[LazyHandle]
    _warmup_queued: bool
    _nodes_started_young: int
    _node_incarnations: Iterator[int]

    handle: Handle
    dispatcher: Handle
    events: bool | Wanted

    if TYPE_CHECKING:  # KorralActor's

        def kick(self, message: Any) -> None: ...

    if TYPE_CHECKING:  # PartitionActor's

        def _deliver(self, argument: CallbackArgument) -> None: ...

        def _event(self, record: Callable[[], si.EventRecord]) -> None: ...

        def _send_events(self) -> None: ...

        def _reject_asks(self, asks: list[tuple[str, str, str]]) -> None: ...

        def _bury(self, handle: Handle | None) -> None: ...

    def _node_metric(self, previous: str | None, state: str | None) -> None:
        if self.metrics is None:
            return
        deltas = self._node_metric_deltas
        if deltas is None:
            self.metrics.node_state(previous, state)
            return
        # within a node request: summed, and the gauges moved once per state at its end
        if previous is not None:
            deltas[previous] = deltas.get(previous, 0) - 1
        if state is not None:
            deltas[state] = deltas.get(state, 0) + 1

    @staticmethod
    def _node_state(schedulable: bool) -> str:
        return "active" if schedulable else "draining"

    # ---- nodes -------------------------------------------------------------------------------------

    def on_RouteNodeRequest(self, message: RouteNodeRequest) -> None:
        accepted: list[si.AcceptedNode] = []
        rejected: list[si.RejectedNode] = []
        self._node_metric_deltas = {}
        try:
            for info in message.request.nodes:
                try:
                    self._node_action(info, accepted)
                except ModelError as error:
                    rejected.append(si.RejectedNode(node_id=info.node_id, reason=str(error)))
            if accepted or rejected:
                # The RM's answer before the scheduler's NodesAdded: the view's work (~7 µs per new
                # node, on the scheduler's thread) then does not hold the GIL while the answer is on
                # its way, and no allocation on a new node can reach the RM before its acceptance.
                # The new nodes' actors start once the RM has its answer (Deliver.then), likewise.
                then = None
                if self._unstarted_nodes and not self._warmup_queued:
                    self._warmup_queued = True
                    then = (self.handle, StartNodeActors())
                response = si.NodeResponse(accepted=accepted, rejected=rejected)
                if not self.dispatcher.tell(Deliver(argument=response, then=then)):
                    self._warmup_queued = False  # no dispatcher (stopping): each starts on its first message
        finally:
            self._flush_nodes_added()
            deltas, self._node_metric_deltas = self._node_metric_deltas, None
            if self.metrics is not None and deltas:
                self.metrics.node_states(deltas)
        self._send_events()

    def on_StartNodeActors(self, message: StartNodeActors) -> None:
        """Start the next step of new nodes' actors. Registration answers the RM without them (a
        pooled actor is ~6 µs and ~1 KB): they start here, behind whatever the partition was asked
        meanwhile, or with their first message if that comes first (LazyHandle), so that a
        placement does not pay for its node's start."""
        step = self.settings.actors.node_actor_warmup
        starting, self._unstarted_nodes = self._unstarted_nodes[:step], self._unstarted_nodes[step:]
        for handle in starting:
            handle.start()  # a node removed meanwhile was stopped unstarted: it stays so
        self._nodes_started_young += len(starting)
        if self._unstarted_nodes:
            self.kick(StartNodeActors())
            return
        self._warmup_queued = False
        if self.settings.tune_gc and self._nodes_started_young >= gc_tuning.PROMOTE_AFTER_NODES:
            self._nodes_started_young = 0
            gc_tuning.promote_survivors()

    def _flush_nodes_added(self) -> None:
        """Tell the scheduler of the new nodes held so far: before anything else this request tells
        the scheduler or a node (whose NodeChanged must find the node in the scheduler's view)."""
        if self._nodes_added:
            added, self._nodes_added = tuple(self._nodes_added), []
            self.scheduler.tell(NodesAdded(added=added))

    def _node_action(self, info: si.NodeInfo, accepted: list[si.AcceptedNode]) -> None:
        action = info.action
        node_id = info.node_id
        if action != si.NodeAction.CREATE or info.existing_allocations:
            self._flush_nodes_added()
        if action in (si.NodeAction.CREATE, si.NodeAction.CREATE_DRAIN):
            if self.drain_proxy is not None:  # YuniKorn's words for a partition marked for deletion
                raise ModelError(f"partition {self.name} is stopped cannot add a new node {node_id}")
            schedulable = action == si.NodeAction.CREATE
            # the node's first spec, handed to its actor (the owner from now on), the registry and
            # the scheduler's view: one value, held by reference by all three
            spec = NodeSpec.of(
                node_id,
                info.schedulable_resource,
                info.occupied_resource,
                info.attributes,
                schedulable,
                incarnation=next(self._node_incarnations),
            )
            self.registry.add_node_spec(spec)
            # started after the RM's answer (StartNodeActors) or by its first message if that comes
            # first (LazyHandle): registering 10,000 nodes starts no actor on the way to the answer
            handle = start_actor_lazily(
                self.settings.actors.node_actor,
                self.tracker,
                f"{self.name}/node/{node_id}",
                spec,
                self.name,
                self.scheduler,
                partition_actor=self.handle,
                board=self.node_board,
                pool=self.pool,
            )
            self.nodes[node_id] = handle
            if self.settings.actors.node_actor_warmup > 0:
                self._unstarted_nodes.append(handle)
            recovered, rejected = (
                self.registry.sort_recovered(info, self.members.specs) if info.existing_allocations else _NONE
            )
            if recovered:
                # YuniKorn adds a node and what already runs on it in one step. The scheduler must
                # never see this node empty: it would place asks where the recovered allocations
                # (booked whatever the room) already are. So it learns of the node unschedulable,
                # then of the recovered allocations, and only then that the node is schedulable; all
                # from this actor, so in this order. (The applications' own "recover" view updates
                # that follow find them already adopted.)
                unschedulable = attrs.evolve(spec, schedulable=False)
                self.scheduler.tell(NodeAdded(spec=unschedulable))
                for app_id, allocations in recovered.items():
                    self.scheduler.tell(
                        ViewOps(
                            application_id=app_id,
                            ops=tuple(AdoptRecovered(allocation=a) for a in allocations),
                        )
                    )
                if schedulable:
                    self.scheduler.tell(NodeChanged(spec=spec))
            else:
                self._nodes_added.append(NodeAdded(spec=spec))
            accepted.append(si.AcceptedNode(node_id=node_id))
            self._node_metric(None, self._node_state(schedulable))
            if self.events:  # (no closure per node otherwise)
                self._event(lambda: events.node_added(node_id))
            for app_id, allocations in recovered.items():
                self.apps[app_id].tell(RecoverAllocations(allocations=tuple(allocations)))
            self._reject_asks(rejected)
            return
        node_handle = self.nodes.get(node_id)
        if node_handle is None:
            raise ModelError(f"node {node_id} not found in partition {self.name}")
        self._existing_node_action(info, node_handle)

    def on_NodeChanged(self, message: NodeChanged) -> None:
        """A node's actor published its new spec: the registry holds it (a node that left, or a later
        one of its id, is not changed) and the node-state gauges follow its schedulable flag."""
        spec = message.spec
        node = self.registry.nodes.get(spec.node_id)
        was = node.schedulable if node is not None else None
        if self.registry.set_node(spec) is not None and was != spec.schedulable:
            self._node_metric(self._node_state(bool(was)), self._node_state(spec.schedulable))

    def _existing_node_action(self, info: si.NodeInfo, handle: Handle) -> None:
        action = info.action
        node_id = info.node_id
        if action == si.NodeAction.UPDATE:
            capacity = dict(info.schedulable_resource) if info.schedulable_resource else None
            occupied = dict(info.occupied_resource) if info.occupied_resource else None
            attributes = dict(info.attributes) if info.attributes else None
            if capacity is not None and res.has_negative(capacity):
                raise ModelError(f"node {node_id} has negative capacity")
            # the node's actor makes the new spec and publishes it (here too: on_NodeChanged)
            handle.tell(UpdateNode(capacity=capacity, occupied=occupied, attributes=attributes))
            self._event(lambda: events.node_updated(node_id))
            if occupied is not None:
                occupied_now = occupied
                self._event(lambda: events.node_occupied(node_id, occupied_now))
        elif action in (si.NodeAction.DRAIN_NODE, si.NodeAction.DRAIN_TO_SCHEDULABLE):
            schedulable = action == si.NodeAction.DRAIN_TO_SCHEDULABLE
            handle.tell(SetNodeSchedulable(schedulable=schedulable))
            self._event(lambda: events.node_schedulable(node_id, schedulable))
        elif action == si.NodeAction.DECOMISSION:
            self._node_metric(self._node_state(self.registry.nodes[node_id].schedulable), "decommissioned")
            self.registry.remove_node(node_id)
            del self.nodes[node_id]
            self.node_reservations.pop(node_id, None)
            # the node's actor tells the scheduler, after the changes it published; the view holds
            # what ran there, and the scheduler has the owners release it (NodeRemoved)
            handle.tell(Decommission())
            self._event(lambda: events.node_removed(node_id))
            self._bury(handle)
        else:
            raise ModelError(f"node {node_id}: unknown action {int(action)}")
