"""A partition's structure and registry: the queue tree and its configuration, nodes and the node order.

The first layer of ``PartitionModel`` (see ``korral.model.partition``): it holds every field of the
partition; the layers above it add applications and asks (``partition_apps``), the allocation
bookkeeping (``partition_allocations``) and the scheduling walk (``partition``).
Every operation either completes or raises ``ModelError`` before changing anything.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Callable, Mapping, Set
from time import perf_counter
from typing import TYPE_CHECKING, Any

import attrs

from korral import si
from korral.config.schema import PartitionConfig, QueueConfig
from korral.model import resource as res
from korral.model.allocation import Allocation
from korral.model.application import Application
from korral.model.node import Node
from korral.model.node_order import NodeOrder
from korral.model.order import IncrementalOrder
from korral.model.partition_effects import (
    CoreRelease,
    PartitionEffects,
    QueueEvent,
    ReleasedAsk,
    RequestEvent,
    RunnableChange,
    StateChange,
)
from korral.model.queue import ROOT, Queue, QueueState
from korral.model.quota_preempting import QuotaPreemption
from korral.model.reservations import RESERVATION_WAIT_TIMEOUT
from korral.model.resource import Resource
from korral.model.rm_predicates import NodesPredicate, Predicate, RMPredicates
from korral.model.ugm import UserGroupTracker
from korral.policies.placement import PlacementManager, PlacementRuleError
from korral.policies.usergroups import UserGroupCache


class ModelError(Exception):
    """A request the partition rejects; the message is the reason given to the RM."""


@attrs.frozen(kw_only=True)
class UnschedulableAsk:
    """An ask that fits its queue's headroom but no node: the RM may want to scale up."""

    application_id: str
    allocation_key: str


class PartitionRegistry:
    # YuniKorn's reservation wait time (korral.model.reservations); a test may shorten it per model
    reservation_wait_timeout = RESERVATION_WAIT_TIMEOUT

    def __init__(
        self,
        name: str,
        config: PartitionConfig,
        *,
        rm_id: str = "",
        reservation_delay: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        predicate: Predicate | None = None,
        nodes_predicate: NodesPredicate | None = None,
        candidates_per_call: int = 1,
        placeholder_timeout: float = 900.0,
        uuid_token: str | None = None,
        node_order: Callable[[Mapping[str, Node]], NodeOrder] = NodeOrder,
        quota_preemption: QuotaPreemption | None = None,
    ) -> None:
        self.name = name
        self.placeholder_timeout = placeholder_timeout
        self.rm_id = rm_id
        self.clock = clock
        self.reservation_delay = reservation_delay
        # the RM's say on a node for an ask: a part of its own (model.rm_predicates)
        self.predicates = RMPredicates(predicate, nodes_predicate, candidates_per_call)
        self.config = config
        # resolves the groups of a user submitted without any (the partition's usergroupresolver)
        self.user_groups = UserGroupCache(config.user_group_resolver, clock)
        self.root = Queue(ROOT, None, leaf=False, managed=True)
        self.queues: dict[str, Queue] = {ROOT: self.root}
        self.applications: dict[str, Application] = {}
        self.nodes: dict[str, Node] = {}
        # schedulable, unreserved nodes with room left, in node-sort-policy order
        # quota preemption's timers (model.quota_preempting), started by config changes and recoveries
        self.quota_preemption = quota_preemption if quota_preemption is not None else QuotaPreemption()
        # the node order the walk takes nodes from: a part of its own (model.node_order)
        self.node_ordering = node_order(self.nodes)
        self.capacity: Resource = {}
        self.reservations: dict[tuple[str, str], str] = {}
        # when each reservation was made (the partition's clock)
        self.reserved_at: dict[tuple[str, str], float] = {}
        self.placement = PlacementManager.build(())
        self._app_seq = itertools.count(1)
        self._ask_seq = itertools.count(1)
        self._uuid_seq = itertools.count(1)
        # Allocation uuids are "<partition>-<token>-<n>": the token is new for each life of a partition,
        # so after a core restart the new series can never meet the uuids the RM recovers from the
        # last one (YuniKorn uses random uuids for the same reason).
        self.uuid_token = uuid_token if uuid_token is not None else secrets.token_hex(4)
        self._uuid_prefix = f"{name}-{self.uuid_token}-"
        # uuids of the live recovered allocations: the RM chose them, so they are checked for clashes
        self._recovered_uuids: set[str] = set()
        self._limits_dirty = True
        # Resource shapes that fit no node; valid while nothing frees or adds node resources.
        # (cleared whenever the epoch moves on, so it holds only shapes known unfit right now)
        self._unfit_shapes: set[tuple[Any, ...]] = set()
        self._resource_epoch = 0
        self.unschedulable: dict[tuple[str, str], UnschedulableAsk] = {}
        # what the operations produced for the driver since it last took them (``take_effects``)
        self._effects = PartitionEffects()
        # leaf queue path -> preemption attempts in this scheduling cycle (capped, as YuniKorn does)
        self.preempt_attempts: dict[str, int] = {}
        # quota preemption (model.quota_preempting): queue path -> when its lowered max is enforced;
        # queue path -> the victims of its run still being released
        self.quota_timers: dict[str, float] = {}
        self.quota_running: dict[str, tuple[tuple[str, str], ...]] = {}
        self._latencies: list[tuple[str, float]] | None = None
        # applications that may have a real ask to put in an allocated placeholder of its task group
        self.replace_candidates: dict[str, Application] = {}
        # user and group usage and limits (YuniKorn's user/group manager)
        self.ugm = UserGroupTracker(config)
        self.apply_config(config, initial=True)

    if TYPE_CHECKING:  # defined by the layers above (partition_allocations)

        def release_allocation(
            self, application_id: str, uuid: str, *, complete: bool = True
        ) -> Allocation | None: ...

        def unreserve(self, application_id: str, allocation_key: str) -> None: ...

    # ---- the node order's facts, read through -----------------------------------------------------

    @property
    def node_order(self) -> IncrementalOrder[Node]:
        return self.node_ordering.order

    @property
    def cooling(self) -> Set[str]:
        return self.node_ordering.cooling

    @property
    def node_sort_policy(self) -> str:
        return self.node_ordering.policy

    @property
    def resource_weights(self) -> Mapping[str, float]:
        return self.node_ordering.weights

    @property
    def latencies(self) -> list[tuple[str, float]] | None:
        """(kind, seconds) of the latencies YuniKorn's metrics time, while a reader wants them (None:
        not timed): "trynode", "trypreemption", "sort_queue", "sort_app"."""
        return self._latencies

    @latencies.setter
    def latencies(self, latencies: list[tuple[str, float]] | None) -> None:
        self._latencies = self.predicates.latencies = latencies

    # ---- configuration -----------------------------------------------------------------------------

    def apply_config(
        self, config: PartitionConfig, *, initial: bool = False, placement: PlacementManager | None = None
    ) -> None:
        """Create or update queues from config; queues no longer configured are marked Draining.

        Raises ModelError when the placement rules cannot be built on a reload (the old rules stay);
        at creation a broken rule set leaves placement inactive, as YuniKorn does. ``placement``: the
        config's rules, already built by the caller (who validated them).
        """
        if placement is None:
            try:
                placement = PlacementManager.build(config.placement_rules)
            except PlacementRuleError as error:
                if not initial:
                    raise ModelError(f"placement rules rejected: {error}") from error
                placement = PlacementManager.build(())
        self.placement = placement
        if config.user_group_resolver != self.user_groups.kind:
            self.user_groups = UserGroupCache(config.user_group_resolver, self.clock)
        self.config = config
        seen: set[str] = set()
        before = self.quota_preemption.limits_before(self)  # type: ignore[arg-type]
        self._apply_queue_config(self.root, config.root, seen)
        for path, queue in list(self.queues.items()):
            if path not in seen and queue.is_managed and queue.state is not QueueState.DRAINING:
                queue.state = QueueState.DRAINING
        # usage kept (rebuilt from what the applications hold): lowered limits block new work, never evict
        held = {app_id: (app.allocated, len(app.allocations)) for app_id, app in self.applications.items()}
        for app_id, tracking in self.ugm.apply_config(config, held).items():
            self.applications[app_id].user_limits = tracking
        self._limits_dirty = True
        self.node_ordering.configure(config.node_sort_policy.type, config.node_sort_policy.resource_weights)
        self.quota_preemption.after_config(self, before, self.clock())  # type: ignore[arg-type]

    def _apply_queue_config(self, queue: Queue, config: QueueConfig, seen: set[str]) -> None:
        queue.apply_config(config)
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

    def create_queue(self, path: str) -> Queue:
        """Create a dynamic queue and any missing parents; the last part is a leaf."""
        parts = path.lower().split(".")
        if parts[0] != ROOT:
            raise ModelError(f"queue {path} is not fully qualified")
        queue = self.root
        for depth, part in enumerate(parts[1:], start=1):
            child = queue.children.get(part)
            leaf = depth == len(parts) - 1
            if child is None:
                if queue.is_leaf:
                    raise ModelError(f"cannot create queue {path}: {queue.path} is a leaf queue")
                if queue.state is QueueState.DRAINING:
                    raise ModelError(f"cannot create queue {path}: {queue.path} is draining")
                child = Queue(part, queue, leaf=leaf, managed=False)
                template = queue.child_template()
                if leaf and template is not None:
                    child.apply_template(template)
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

    def cleanup_queues(self) -> list[str]:
        """Remove empty dynamic queues and empty draining queues, bottom-up. Returns removed paths."""
        removed: list[str] = []
        for queue in sorted(self.queues.values(), key=lambda q: -q.path.count(".")):
            if queue.is_root or not queue.is_empty() or res.strictly_greater_than_zero(queue.allocated):
                continue
            if not queue.is_managed or queue.state is QueueState.DRAINING:
                self.remove_queue(queue)
                removed.append(queue.path)
        return removed

    def refresh_limits(self) -> None:
        if self._limits_dirty:
            self._limits_dirty = False
            self._resources_changed()  # limits may have grown: quota-blocked asks get another look
            self.root.refresh_limits(self.capacity)
            latencies = self.latencies
            for queue in self.queues.values():
                if latencies is None:
                    queue.rebuild_order()
                    continue
                started = perf_counter()
                queue.rebuild_order()
                latencies.append(("sort_app" if queue.is_leaf else "sort_queue", perf_counter() - started))
            for queue in sorted(self.queues.values(), key=lambda q: -q.path.count(".")):
                queue.refresh_up()

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
        if not node_id:
            raise ModelError("node ID must not be empty")
        if node_id in self.nodes:
            raise ModelError(f"node {node_id} already exists in partition {self.name}")
        if res.has_negative(capacity):
            raise ModelError(f"node {node_id} has negative capacity")
        node = Node(node_id, capacity, occupied, attributes, schedulable, self.name)
        self.nodes[node_id] = node
        res.add_into(self.capacity, node.capacity)
        self._limits_dirty = True
        self._resources_changed()
        self.node_ordering.update(node)
        return node

    def update_node(
        self,
        node_id: str,
        *,
        capacity: Mapping[str, int] | None = None,
        occupied: Mapping[str, int] | None = None,
        attributes: Mapping[str, str] | None = None,
    ) -> Node:
        node = self._node(node_id)
        if capacity is not None:
            if res.has_negative(capacity):
                raise ModelError(f"node {node_id} has negative capacity")
            delta = node.set_capacity(capacity)
            if delta:
                res.add_into(self.capacity, delta)
                self._limits_dirty = True
        if occupied is not None:
            node.set_occupied(occupied)
        if attributes is not None:
            node.attributes = dict(attributes)
        self._resources_changed()
        self.node_ordering.update(node)
        return node

    def set_node_schedulable(self, node_id: str, schedulable: bool) -> Node:
        node = self._node(node_id)
        node.schedulable = schedulable
        self._resources_changed()
        self.node_ordering.update(node)
        return node

    def remove_node(self, node_id: str, *, complete: bool = True) -> list[Allocation]:
        """Remove a node: its reservation is cancelled and its allocations released (returned).

        ``complete=False`` leaves application states alone (the scheduler's view: the owners decide).
        """
        node = self._node(node_id)
        released: list[Allocation] = []
        for allocation in list(node.allocations.values()):
            done = self.release_allocation(allocation.application_id, allocation.uuid, complete=complete)
            if done is not None:
                released.append(done)
        for holder in node.reservations:
            self.unreserve(*holder)
        self.node_ordering.discard(node_id)
        del self.nodes[node_id]
        res.sub_into(self.capacity, node.capacity)
        self._limits_dirty = True
        self._resources_changed()
        return released

    def _node(self, node_id: str) -> Node:
        node = self.nodes.get(node_id)
        if node is None:
            raise ModelError(f"node {node_id} not found in partition {self.name}")
        return node

    def _resources_changed(self) -> None:
        self._resource_epoch += 1
        if self._unfit_shapes:
            self._unfit_shapes.clear()

    # ---- outputs -----------------------------------------------------------------------------------

    def take_effects(self) -> PartitionEffects:
        """What the operations produced since the last call (core releases, request events, nodes
        whose reservations changed, when to wake); the partition starts a new record."""
        effects, self._effects = self._effects, PartitionEffects()
        return effects

    def note_core_release(
        self, allocation: Allocation, termination: si.TerminationType, message: str
    ) -> None:
        self._effects.core_releases.append(
            CoreRelease(allocation=allocation, termination=termination, message=message)
        )

    def note_released_ask(self, application_id: str, allocation_key: str, message: str) -> None:
        self._effects.released_asks.append(
            ReleasedAsk(application_id=application_id, allocation_key=allocation_key, message=message)
        )

    def note_request_event(self, application_id: str, allocation_key: str, message: str) -> None:
        self._effects.request_events.append(
            RequestEvent(application_id=application_id, allocation_key=allocation_key, message=message)
        )

    def wake_by(self, due: float) -> None:
        """The driver must run a cycle no later than ``due`` (a preemption or quota delay runs out)."""
        self._effects.wake_by(due)

    def note_queue_event(self, queue_path: str, message: str) -> None:
        self._effects.queue_events.append(QueueEvent(queue_path=queue_path, message=message))

    def note_runnable(self, application_id: str, runnable: bool, by: str) -> None:
        self._effects.runnable_changes.append(
            RunnableChange(application_id=application_id, runnable=runnable, by=by)
        )

    def note_backoff(self, application_id: str, deadline: float) -> None:
        self._effects.backoffs[application_id] = deadline

    def note_reservation_change(self, node_id: str) -> None:
        self._effects.reservation_changes.add(node_id)

    def note_state_change(self, application_id: str, state: str, timestamp: float, message: str) -> None:
        self._effects.state_changes.append(
            StateChange(application_id=application_id, state=state, timestamp=timestamp, message=message)
        )
