"""A partition's registry: its queue tree and configuration, its nodes and their total capacity.

One part of a ``PartitionModel`` (``korral.model.partition.composed`` composes the parts and wires them). It
owns the structure every other part reads: the queues (by path), the nodes (by id), the partition's
capacity, and the *resource epoch*, which moves on whenever node room or a limit may have eased, so
the scheduling walk's "nothing fits here" marks stay valid only while nothing changed. Every operation
either completes or raises ``ModelError`` before changing anything.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Mapping
from typing import Any

import attrs

from korral import resource as res
from korral.config.schema import PartitionConfig, QueueConfig
from korral.model.node import Node, NodeChange, NodeSpec
from korral.model.node_order import NodeOrder
from korral.model.queue import ROOT, Queue, QueueState
from korral.model.queue_spec import LocalQueueSpecs, QueueSpecWriter, templated, unconfigured
from korral.policies.placement import PlacementManager
from korral.policies.usergroups import UserGroupCache
from korral.resource import Resource


class ModelError(Exception):
    """A request the partition rejects; the message is the reason given to the RM."""


@attrs.frozen(kw_only=True)
class UnschedulableAsk:
    """An ask that fits its queue's headroom but no node: the RM may want to scale up."""

    application_id: str
    allocation_key: str


class PartitionRegistry:
    """Queues, nodes, capacity and the configuration they were built from."""

    def __init__(
        self,
        name: str,
        config: PartitionConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        node_order: Callable[[Mapping[str, Node]], NodeOrder] | None,
        queue_specs: QueueSpecWriter | None = None,
    ) -> None:
        """``node_order`` makes the node order the walk takes nodes from (None: nothing walks here);
        ``queue_specs`` makes each queue's next configuration and state (None: the rules, here)."""
        self.name = name
        self.queue_specs: QueueSpecWriter = queue_specs if queue_specs is not None else LocalQueueSpecs()
        self.clock = clock
        self.config = config
        self.placement = PlacementManager.build(())
        # resolves the groups of a user submitted without any (the partition's usergroupresolver)
        self.user_groups = UserGroupCache(config.user_group_resolver, clock)
        self.root = Queue(ROOT, None, leaf=False, managed=True)
        self.queues: dict[str, Queue] = {ROOT: self.root}
        self.nodes: dict[str, Node] = {}
        # where the nodes added here note each booking and freeing, for a reader on another thread
        # (the scheduler's view sets it: ``SchedulingView.node_changes``); None: nobody reads them
        self.node_journal: list[NodeChange] | None = None
        self.capacity: Resource = {}
        # the order the walk takes nodes in, told of every node change (None: nothing walks here)
        self.node_ordering = node_order(self.nodes) if node_order is not None else None
        # the queues' limits and orders need rebuilding before the next walk (``refresh_limits``)
        self.limits_dirty = True
        # Resource shapes that fit no node; valid while nothing frees or adds node resources.
        # (cleared whenever the epoch moves on, so it holds only shapes known unfit right now)
        self.unfit_shapes: set[tuple[Any, ...]] = set()
        self.resource_epoch = 0
        # (kind, seconds) of the sort latencies, while a reader wants them (``PartitionModel.latencies``)
        self.latencies: list[tuple[str, float]] | None = None

    # ---- configuration -----------------------------------------------------------------------------

    def configure(self, config: PartitionConfig, placement: PlacementManager) -> None:
        """Create or update queues from config; queues no longer configured are marked Draining."""
        self.placement = placement
        if config.user_group_resolver != self.user_groups.kind:
            self.user_groups = UserGroupCache(config.user_group_resolver, self.clock)
        self.config = config
        self.queue_specs.prepare(config.root, {path: queue.spec for path, queue in self.queues.items()})
        seen: set[str] = set()
        self._apply_queue_config(self.root, config.root, seen)
        for path, queue in list(self.queues.items()):
            if path not in seen and queue.is_managed and queue.state is not QueueState.DRAINING:
                queue.apply_spec(self.queue_specs.drain(queue.spec))
        self.limits_dirty = True
        if self.node_ordering is not None:
            policy = config.node_sort_policy
            self.node_ordering.configure(policy.type, policy.resource_weights)

    @property
    def node_sort_policy(self) -> str:
        return self.config.node_sort_policy.type or "fair"

    def _apply_queue_config(self, queue: Queue, config: QueueConfig, seen: set[str]) -> None:
        queue.apply_spec(self.queue_specs.configure(queue.path, config, queue.spec))
        seen.add(queue.path)
        for child_config in config.queues:
            name = child_config.name.lower()
            child = queue.children.get(name)
            if child is None:
                child = Queue(name, queue, leaf=not child_config.is_parent, managed=True)
                queue.children[name] = child
                self.queues[child.path] = child
            self._apply_queue_config(child, child_config, seen)

    def get_queue(self, path: str) -> Queue | None:
        return self.queues.get(path.lower())

    def create_queue(self, path: str, *, leaf: bool = True) -> Queue:
        """Create a dynamic queue and any missing parents (as parents); the last part is a leaf unless
        ``leaf`` is False. The one rule for the shape of a dynamic branch: the partition applies it when
        placement creates a queue, the scheduler's view when told of each queue created."""
        parts = path.lower().split(".")
        if parts[0] != ROOT:
            raise ModelError(f"queue {path} is not fully qualified")
        queue = self.root
        for depth, part in enumerate(parts[1:], start=1):
            child = queue.children.get(part)
            last = depth == len(parts) - 1
            if child is None:
                if queue.is_leaf:
                    raise ModelError(f"cannot create queue {path}: {queue.path} is a leaf queue")
                if queue.state is QueueState.DRAINING:
                    raise ModelError(f"cannot create queue {path}: {queue.path} is draining")
                child = Queue(part, queue, leaf=last and leaf, managed=False)
                if child.is_leaf:
                    child.apply_spec(templated(child.path, queue.child_template()))
                else:
                    child.apply_spec(unconfigured(child.path, leaf=False))
                queue.children[part] = child
                self.queues[child.path] = child
                child.refresh_limits()
            queue = child
        return queue

    def remove_queue(self, queue: Queue) -> None:
        parent = queue.parent
        if parent is None:
            return
        parent.children.pop(queue.name, None)
        parent.order.discard(queue.name)
        self.queues.pop(queue.path, None)

    def cleanup_queues(self, occupied: Container[str] = ()) -> list[str]:
        """Remove empty dynamic queues and empty draining queues, bottom-up. Returns removed paths.
        ``occupied``: leaves holding applications that their queues here do not list (a partition
        whose applications are owned elsewhere: ``PartitionMembers``)."""
        removed: list[str] = []
        for queue in sorted(self.queues.values(), key=lambda q: -q.path.count(".")):
            if (
                queue.is_root
                or not queue.is_empty()
                or queue.path in occupied
                or res.strictly_greater_than_zero(queue.allocated)
            ):
                continue
            if not queue.is_managed or queue.state is QueueState.DRAINING:
                self.remove_queue(queue)
                removed.append(queue.path)
        return removed

    def refresh_limits(self) -> None:
        if self.limits_dirty:
            self.limits_dirty = False
            self.resources_changed()  # limits may have grown: quota-blocked asks get another look
            self.root.refresh_limits(self.capacity, self.latencies)

    # ---- nodes -------------------------------------------------------------------------------------

    def add_node(
        self,
        node_id: str,
        capacity: Mapping[str, int],
        *,
        occupied: Mapping[str, int] | None = None,
        attributes: Mapping[str, str] | None = None,
        schedulable: bool = True,
    ) -> Node:
        """Add a node from what the RM reported (``add_node_spec`` for a spec made already)."""
        if res.has_negative(capacity):
            raise ModelError(f"node {node_id} has negative capacity")
        return self.add_node_spec(NodeSpec.of(node_id, capacity, occupied, attributes, schedulable))

    def add_node_spec(self, spec: NodeSpec) -> Node:
        """Add a node whose RM facts are ``spec``, held by reference."""
        node_id = spec.node_id
        if not node_id:
            raise ModelError("node ID must not be empty")
        if node_id in self.nodes:
            raise ModelError(f"node {node_id} already exists in partition {self.name}")
        if res.has_negative(spec.capacity):
            raise ModelError(f"node {node_id} has negative capacity")
        node = Node.of(spec, self.name)
        node.journal = self.node_journal
        self.nodes[node_id] = node
        res.add_into(self.capacity, spec.capacity)
        self.limits_dirty = True
        self.resources_changed()
        self.node_changed(node)
        return node

    def set_node(self, spec: NodeSpec) -> Node | None:
        """Hold the node's new spec, as its owner published it. None, changing nothing, when no node of
        that id and incarnation is here (it left, or a later one of the same id took its place)."""
        node = self.nodes.get(spec.node_id)
        if node is None or node.spec.incarnation != spec.incarnation:
            return None
        if node.spec is spec:
            return node
        old = node.spec
        delta = node.set_spec(spec)
        if delta:
            res.add_into(self.capacity, delta)
            self.limits_dirty = True
        if (
            old.schedulable != spec.schedulable
            or not res.equals(old.capacity, spec.capacity)
            or not res.equals(old.occupied, spec.occupied)
        ):
            self.resources_changed()  # room or schedulable changed: the walk's marks are stale
            self.node_changed(node)
        return node

    def update_node(
        self,
        node_id: str,
        *,
        capacity: Mapping[str, int] | None = None,
        occupied: Mapping[str, int] | None = None,
        attributes: Mapping[str, str] | None = None,
    ) -> Node:
        """The RM's update of a node (what it reports replaces what it was; None: unchanged)."""
        node = self.node(node_id)
        if capacity is not None and res.has_negative(capacity):
            raise ModelError(f"node {node_id} has negative capacity")
        self.set_node(node.spec.updated(capacity=capacity, occupied=occupied, attributes=attributes))
        return node

    def set_node_schedulable(self, node_id: str, schedulable: bool) -> Node:
        node = self.node(node_id)
        self.set_node(attrs.evolve(node.spec, schedulable=schedulable))
        return node

    def drop_node(self, node: Node) -> None:
        """Take an emptied node out (its allocations and reservations are gone already)."""
        if self.node_ordering is not None:
            self.node_ordering.discard(node.node_id)
        del self.nodes[node.node_id]
        res.sub_into(self.capacity, node.capacity)
        self.limits_dirty = True
        self.resources_changed()

    def node(self, node_id: str) -> Node:
        node = self.nodes.get(node_id)
        if node is None:
            raise ModelError(f"node {node_id} not found in partition {self.name}")
        return node

    def node_changed(self, node: Node) -> None:
        """The node's room, reservations or schedulable flag changed: its place in the node order."""
        if self.node_ordering is not None:
            self.node_ordering.update(node)

    def resources_changed(self) -> None:
        """Room or a limit may have eased: the walk's marks of what fits nowhere are stale."""
        self.resource_epoch += 1
        if self.unfit_shapes:
            self.unfit_shapes.clear()
