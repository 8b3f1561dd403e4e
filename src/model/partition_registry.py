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
from korral.model.order import IncrementalOrder
from korral.model.partition_effects import CoreRelease, PartitionEffects, RequestEvent
from korral.model.queue import ROOT, Queue, QueueState
from korral.model.reservations import RESERVATION_WAIT_TIMEOUT
from korral.model.resource import Resource
from korral.model.rm_predicates import NodesPredicate, Predicate, RMPredicates
from korral.model.ugm import UserGroupTracker
from korral.policies.placement import PlacementManager, PlacementRuleError
from korral.policies.usergroups import UserGroupCache


class ModelError(Exception):
    """A request the partition rejects; the message is the reason given to the RM."""


@attrs.frozen(kw_only=True)
class StateChange:
    application_id: str
    state: str
    timestamp: float
    message: str = ""


@attrs.frozen(kw_only=True)
class UnschedulableAsk:
    """An ask that fits its queue's headroom but no node: the RM may want to scale up."""

    application_id: str
    allocation_key: str


class PartitionRegistry:
    # nodes kept out of the node order for now: only the scheduler's view cools nodes (a node that
    # refused a proposal), and keeps its own set; everyone else reads this empty one
    cooling: Set[str] = frozenset()
    # False for the scheduler's view: it is told where applications went, so it builds no placement rules
    places_applications = True
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
        self.node_order: IncrementalOrder[Node] = IncrementalOrder()
        self.capacity: Resource = {}
        self.reservations: dict[tuple[str, str], str] = {}
        # when each reservation was made (the partition's clock)
        self.reserved_at: dict[tuple[str, str], float] = {}
        # applications whose backoff deadline was set since the driver last looked (YUNIKORN-3115)
        self.backoff_changes: dict[str, float] = {}
        self.node_sort_policy = "fair"
        self.resource_weights: dict[str, float] = {"vcore": 1.0, "memory": 1.0}
        self._positive_weights = tuple(self.resource_weights.items())
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
        # Outputs drained by the driver (reference scheduler or actors).
        self.state_changes: list[StateChange] = []
        # the scheduler's view reports nothing from here (the owners tell the RM): it keeps none
        self.records_state_changes = True
        self.unschedulable: dict[tuple[str, str], UnschedulableAsk] = {}
        # what the operations produced for the driver since it last took them (``take_effects``)
        self._effects = PartitionEffects()
        # asks the core removed (timeouts): (application, allocation key, message)
        self.released_asks: list[tuple[str, str, str]] = []
        # leaf queue path -> preemption attempts in this scheduling cycle (capped, as YuniKorn does)
        self.preempt_attempts: dict[str, int] = {}
        # quota preemption (model.quota_preempting): queue path -> when its lowered max is enforced;
        # queue path -> the victims of its run still being released; (queue path, message) events
        self.quota_timers: dict[str, float] = {}
        self.quota_running: dict[str, tuple[tuple[str, str], ...]] = {}
        self.quota_events: list[tuple[str, str]] = []
        self._latencies: list[tuple[str, float]] | None = None
        # YuniKorn's APP_CANNOTRUN/APP_RUNNABLE records: (application, True when runnable again, by
        # the queue's "queue" or the user's or group's "quota" maxapplications)
        self.runnable_events: list[tuple[str, bool, str]] = []
        # real allocations swapped in for a placeholder on the RM's confirmation, to report as new
        self.swapped_in: list[Allocation] = []
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
        if placement is None and self.places_applications:
            try:
                placement = PlacementManager.build(config.placement_rules)
            except PlacementRuleError as error:
                if not initial:
                    raise ModelError(f"placement rules rejected: {error}") from error
                placement = PlacementManager.build(())
        if placement is not None:
            self.placement = placement
        if config.user_group_resolver != self.user_groups.kind:
            self.user_groups = UserGroupCache(config.user_group_resolver, self.clock)
        self.config = config
        self.node_sort_policy = config.node_sort_policy.type or "fair"
        self.resource_weights = dict(config.node_sort_policy.resource_weights)
        self._positive_weights = tuple((n, w) for n, w in self.resource_weights.items() if w > 0)
        seen: set[str] = set()
        before = self._limits_before_config()
        self._apply_queue_config(self.root, config.root, seen)
        for path, queue in list(self.queues.items()):
            if path not in seen and queue.is_managed and queue.state is not QueueState.DRAINING:
                queue.state = QueueState.DRAINING
        # usage kept (rebuilt from what the applications hold): lowered limits block new work, never evict
        held = {app_id: (app.allocated, len(app.allocations)) for app_id, app in self.applications.items()}
        for app_id, tracking in self.ugm.apply_config(config, held).items():
            self.applications[app_id].user_limits = tracking
        self._limits_dirty = True
        self._rebuild_node_order()
        self._after_config(before)

    def _limits_before_config(self) -> Any:
        """What a config change must compare with (the scheduling model: quota preemption's limits)."""
        return None

    def _after_config(self, before: Any) -> None:
        """A config change was applied (the scheduling model starts or cancels quota preemption)."""

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
        self._reorder_node(node)
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
        self._reorder_node(node)
        return node

    def set_node_schedulable(self, node_id: str, schedulable: bool) -> Node:
        node = self._node(node_id)
        node.schedulable = schedulable
        self._resources_changed()
        self._reorder_node(node)
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
        self.node_order.discard(node_id)
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

    def _reorder_node(self, node: Node) -> None:
        node_id = node.node_id
        if (
            node.schedulable
            and node.reservation is None
            and node_id in self.nodes
            and node_id not in self.cooling
        ):
            available = node.available
            for quantity in available.values():
                if quantity > 0:
                    break
            else:
                self.node_order.discard(node_id)  # full: no ask can fit
                return
            # node_usage_score, inlined (this runs once per allocation), with the terms that depend
            # only on the node's capacity and the weights kept on the node until either changes
            capacity = node.capacity
            weights = self._positive_weights
            cache = node.score_terms
            if cache is None or cache[0] is not capacity or cache[1] is not weights:
                terms = tuple(
                    (name, weight, capacity[name]) for name, weight in weights if capacity.get(name, 0) > 0
                )
                total = 0.0
                for _, weight, _ in terms:
                    total += weight
                cache = node.score_terms = (capacity, weights, terms, total)
            weighted = 0.0
            for name, weight, cap in cache[2]:
                weighted += weight * ((cap - available.get(name, 0)) / cap)
            total = cache[3]
            score = weighted / total if total else 0.0
            if self.node_sort_policy == "binpacking":
                score = 1.0 - score
            self.node_order.place(node_id, node, (score, node_id))
        else:
            self.node_order.discard(node_id)

    def _rebuild_node_order(self) -> None:
        self.node_order.clear()
        for node in self.nodes.values():
            self._reorder_node(node)

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

    def note_request_event(self, application_id: str, allocation_key: str, message: str) -> None:
        self._effects.request_events.append(
            RequestEvent(application_id=application_id, allocation_key=allocation_key, message=message)
        )

    def wake_by(self, due: float) -> None:
        """The driver must run a cycle no later than ``due`` (a preemption or quota delay runs out)."""
        self._effects.wake_by(due)

    def note_reservation_change(self, node_id: str) -> None:
        self._effects.reservation_changes.add(node_id)

    def drain_state_changes(self) -> list[StateChange]:
        changes, self.state_changes = self.state_changes, []
        return changes
