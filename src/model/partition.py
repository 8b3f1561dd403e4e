"""A partition: queue tree, applications and nodes, and YuniKorn's scheduling walk over them.

Plain synchronous code. The sequential reference scheduler drives one of these directly; the actor
system's Scheduler actor holds one as its decision view. Every operation either completes or raises
``ModelError`` before changing anything, so a rejected request leaves no partial state behind.
"""

from __future__ import annotations

import itertools
import json
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from itertools import islice

import attrs

from korral import si
from korral.config.schema import PartitionConfig, QueueConfig
from korral.model import resource as res
from korral.model.allocation import Allocation, Ask, recovery_rejection
from korral.model.app_owner import ask_rejection
from korral.model.application import (
    RUNNING_STATES,
    Application,
    ApplicationEvent,
    ApplicationState,
    advance_after_allocation,
    advance_for_recovery,
)
from korral.model.node import Node
from korral.model.preempting import try_preempt, try_required_node, try_reserved_required_node
from korral.model.queue import ROOT, SORT_FIFO, SORT_STATE_AWARE, Queue, QueueState
from korral.model.resource import Resource
from korral.model.ugm import AppUsage, QueueUsage, UserGroupTracker
from korral.policies.ordering import IncrementalOrder
from korral.policies.placement import (
    Placement,
    PlacementError,
    PlacementManager,
    PlacementRequest,
    PlacementRuleError,
)

_new_tuple = tuple.__new__

# ask, node, allocate (True) or reserve (False) -> may the ask go there
Predicate = Callable[[str, str, bool], bool]

TAG_RESOURCE_QUOTA = "namespace.resourcequota"
TAG_RESOURCE_GUARANTEED = "namespace.resourceguaranteed"
TAG_RESOURCE_MAX_APPS = "namespace.resourcemaxapps"
TAG_CREATE_FORCE = "application.create.force"


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


def node_usage_score(node: Node, weights: Mapping[str, float]) -> float:
    """Weighted average share of the node in use (capacity - available), 0.0 empty to 1.0 full.

    The fair node order's key (binpacking: 1 - this). ``_reorder_node`` inlines it for speed; the
    tests' model invariants check the node order against this definition."""
    capacity = node.capacity
    available = node.available
    total_weight = 0.0
    weighted = 0.0
    for name, weight in weights.items():
        cap = capacity.get(name, 0)
        if weight <= 0 or cap <= 0:
            continue
        weighted += weight * ((cap - available.get(name, 0)) / cap)
        total_weight += weight
    return weighted / total_weight if total_weight else 0.0


class PartitionModel:
    def __init__(
        self,
        name: str,
        config: PartitionConfig,
        *,
        rm_id: str = "",
        reservation_delay: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        predicate: Predicate | None = None,
        placeholder_timeout: float = 900.0,
        uuid_token: str | None = None,
    ) -> None:
        self.name = name
        self.placeholder_timeout = placeholder_timeout
        self.rm_id = rm_id
        self.clock = clock
        self.reservation_delay = reservation_delay
        self.predicate = predicate
        self.config = config
        self.root = Queue(ROOT, None, leaf=False, managed=True)
        self.queues: dict[str, Queue] = {ROOT: self.root}
        self.applications: dict[str, Application] = {}
        self.nodes: dict[str, Node] = {}
        # schedulable, unreserved nodes with room left, in node-sort-policy order
        self.node_order: IncrementalOrder[Node] = IncrementalOrder()
        self.capacity: Resource = {}
        self.reservations: dict[tuple[str, str], str] = {}
        # nodes whose reservation changed since the driver last looked (the actors publish them)
        self.reservation_changes: set[str] = set()
        # nodes kept out of the node order for now (the actor view cools a node that refused a proposal)
        self.cooling: set[str] = set()
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
        self._unfit_shapes: set[tuple] = set()
        self._resource_epoch = 0
        # Outputs drained by the driver (reference scheduler or actors).
        self.state_changes: list[StateChange] = []
        # the scheduler's view reports nothing from here (the owners tell the RM): it keeps none
        self.records_state_changes = True
        self.unschedulable: dict[tuple[str, str], UnschedulableAsk] = {}
        # releases the core made (allocation, termination, message): booked until the RM confirms
        self.core_releases: list[tuple[Allocation, si.TerminationType, str]] = []
        # request events of preemption attempts (application, allocation key, message)
        self.preemption_events: list[tuple[str, str, str]] = []
        # asks the core removed (timeouts): (application, allocation key, message)
        self.released_asks: list[tuple[str, str, str]] = []
        # real allocations swapped in for a placeholder on the RM's confirmation, to report as new
        self.swapped_in: list[Allocation] = []
        # applications that may have a real ask to put in an allocated placeholder of its task group
        self.replace_candidates: dict[str, Application] = {}
        # user and group usage and limits (YuniKorn's user/group manager)
        self.ugm = UserGroupTracker(config)
        self.apply_config(config, initial=True)

    # ---- configuration -----------------------------------------------------------------------------

    def apply_config(self, config: PartitionConfig, *, initial: bool = False) -> None:
        """Create or update queues from config; queues no longer configured are marked Draining.

        Raises ModelError when the placement rules cannot be built on a reload (the old rules stay);
        at creation a broken rule set leaves placement inactive, as YuniKorn does.
        """
        try:
            placement = PlacementManager.build(config.placement_rules)
        except PlacementRuleError as error:
            if not initial:
                raise ModelError(f"placement rules rejected: {error}") from error
            placement = PlacementManager.build(())
        self.placement = placement
        self.config = config
        self.node_sort_policy = config.node_sort_policy.type or "fair"
        self.resource_weights = dict(config.node_sort_policy.resource_weights)
        self._positive_weights = tuple((n, w) for n, w in self.resource_weights.items() if w > 0)
        seen: set[str] = set()
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
            for queue in self.queues.values():
                queue.rebuild_order()
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
        if node.reservation is not None:
            self.unreserve(*node.reservation)
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

    # ---- applications ------------------------------------------------------------------------------

    def add_application(
        self,
        application_id: str,
        *,
        queue_name: str = "",
        user: str = "",
        groups: Iterable[str] = (),
        tags: Mapping[str, str] | None = None,
        placeholder_ask: Mapping[str, int] | None = None,
        execution_timeout_ms: int = 0,
        gang_scheduling_style: str = "",
    ) -> Application:
        """Place and add an application; raises ModelError with the rejection reason."""
        if not application_id:
            raise ModelError("application ID must not be empty")
        if application_id in self.applications:
            raise ModelError(f"application {application_id} already exists in partition {self.name}")
        tags = dict(tags or {})
        forced = tags.get(TAG_CREATE_FORCE, "").lower() == "true"
        if not user:
            if not forced:
                raise ModelError(f"application {application_id} rejected: empty user cannot resolve")
            user, groups = "nobody", ("nogroup",)
        request = PlacementRequest(
            application_id=application_id, queue_name=queue_name, user=user, groups=tuple(groups), tags=tags
        )
        try:
            placement: Placement = self.placement.place(request, self)
        except PlacementError as error:
            raise ModelError(str(error)) from error
        queue = self.queues.get(placement.queue_path)
        if queue is None:
            queue = self.create_queue(placement.queue_path)
        if not queue.is_leaf:
            raise ModelError(f"application {application_id} rejected: queue {queue.path} is not a leaf queue")
        if queue.state is not QueueState.ACTIVE:
            raise ModelError(
                f"application {application_id} rejected: queue {queue.path} is {queue.state.value}"
            )
        if not queue.is_managed:
            self._apply_namespace_tags(queue, tags)
        self._check_gang_admission(application_id, queue, res.prune(placeholder_ask or {}))
        now = self.clock()
        app = Application(
            application_id,
            partition=self.name,
            queue_path=queue.path,
            user=user,
            groups=tuple(groups),
            tags=tags,
            submission_seq=next(self._app_seq),
            submission_time=now,
            placeholder_ask=dict(placeholder_ask or {}),
            execution_timeout_ms=execution_timeout_ms,
            gang_scheduling_style=gang_scheduling_style,
            placeholder_timeout=self.placeholder_timeout,
        )
        self.applications[application_id] = app
        queue.applications[application_id] = app
        self.track_user(app)
        return app

    def _check_gang_admission(self, application_id: str, queue: Queue, placeholder_ask: Resource) -> None:
        """A gang (an application with a placeholder ask) only goes to a FIFO leaf whose max along the
        path holds the whole placeholder ask (YuniKorn's partition AddApplication, its reasons)."""
        if not placeholder_ask:
            return
        if queue.sort_policy != SORT_FIFO:
            raise ModelError(
                f"queue {queue.path} cannot run application {application_id} with task group request: "
                "unsupported sort type"
            )
        self.refresh_limits()
        limit = queue.effective_max
        if limit is not None and not res.fits_in_max(placeholder_ask, limit):
            raise ModelError(
                f"queue {queue.path} cannot fit application {application_id}: task group request "
                f"{res.to_string(placeholder_ask)} larger than max queue allocation {res.to_string(limit)}"
            )

    def track_user(self, app: Application, group: str | None = None, *, resolve: bool = True) -> None:
        """Start tracking the application's usage for its user and for its group, resolved here
        from the limits on its queue path unless given (``resolve=False``)."""
        if resolve:
            group = self.ugm.resolve_group(app.queue_path, app.groups)
        app.limit_group = group or ""
        app.user_limits = self.ugm.add_application(app.application_id, app.queue_path, app.user, group)

    def user_group_usage(self, kind: str, name: str) -> list[QueueUsage] | None:
        """What ``name`` (kind "user" or "group") uses per queue path of its applications, with the
        limits that apply there; None if no application here is its."""
        return self.ugm.usage_rows(
            kind,
            name,
            [
                AppUsage(
                    application_id=app.application_id,
                    queue_path=app.queue_path,
                    allocated=app.allocated,
                    running=bool(app.allocations),
                )
                for app in self.applications.values()
                if (app.user if kind == "user" else app.limit_group) == name
            ],
        )

    def add_si_application(self, request: si.AddApplicationRequest) -> Application:
        """``add_application`` for an SI request (every driver's entry point)."""
        ugi = request.ugi or si.UserGroupInformation()
        return self.add_application(
            request.application_id,
            queue_name=request.queue_name,
            user=ugi.user,
            groups=ugi.groups,
            tags=request.tags,
            placeholder_ask=request.placeholder_ask,
            execution_timeout_ms=request.execution_timeout_milliseconds,
            gang_scheduling_style=request.gang_scheduling_style,
        )

    def _apply_namespace_tags(self, queue: Queue, tags: Mapping[str, str]) -> None:
        """Quota tags on an application set limits on its queue when that queue is dynamic."""
        quota = _parse_resource_tag(tags.get(TAG_RESOURCE_QUOTA))
        guaranteed = _parse_resource_tag(tags.get(TAG_RESOURCE_GUARANTEED))
        if quota:
            queue.max = quota
        if guaranteed:
            queue.guaranteed = guaranteed
        max_apps = tags.get(TAG_RESOURCE_MAX_APPS)
        if max_apps and max_apps.isdigit():
            queue.max_applications = int(max_apps)
        if quota or guaranteed:
            self._limits_dirty = True

    def application(self, application_id: str) -> Application:
        app = self.applications.get(application_id)
        if app is None:
            raise ModelError(f"failed to find application {application_id}")
        return app

    def remove_application(self, application_id: str) -> list[Allocation]:
        """Remove an application: asks removed, reservations cancelled, allocations released (returned)."""
        app = self.application(application_id)
        for key in list(app.asks):
            self.remove_ask(application_id, key, complete=False)
        released = [
            a
            for a in (
                self.release_allocation(application_id, uuid, complete=False)
                for uuid in list(app.allocations)
            )
            if a is not None
        ]
        queue = self.queues.get(app.queue_path)
        if app.state in RUNNING_STATES and queue is not None:
            queue.add_running_app(-1)
        if queue is not None:
            queue.applications.pop(application_id, None)
            queue.update_app(app)
        del self.applications[application_id]
        self.replace_candidates.pop(application_id, None)
        self.ugm.remove_application(application_id)
        return released

    def _transition(self, app: Application, event: ApplicationEvent, message: str = "") -> bool:
        was_running = app.state in RUNNING_STATES
        now = self.clock()
        if not app.try_handle(event, now):
            return False
        running = app.state in RUNNING_STATES
        if running != was_running:
            queue = self.queues.get(app.queue_path)
            if queue is not None:
                queue.add_running_app(1 if running else -1)
        if self.records_state_changes:
            self.state_changes.append(
                StateChange(
                    application_id=app.application_id, state=app.state.value, timestamp=now, message=message
                )
            )
        return True

    def _maybe_complete(self, app: Application) -> None:
        if app.is_idle() and app.state in (
            ApplicationState.ACCEPTED,
            ApplicationState.STARTING,
            ApplicationState.RUNNING,
        ):
            self._transition(app, ApplicationEvent.COMPLETE)
        elif app.may_fail_finally():
            # Failing with nothing left: Failed, and the application leaves the partition
            self._transition(app, ApplicationEvent.FAIL)
            self.remove_application(app.application_id)

    def expire_completing(self, completing_timeout: float) -> list[str]:
        """Completing applications idle for ``completing_timeout`` become Completed and leave their queue."""
        now = self.clock()
        done: list[str] = []
        for app in list(self.applications.values()):
            if app.state is ApplicationState.COMPLETING and now - app.state_time >= completing_timeout:
                self._transition(app, ApplicationEvent.COMPLETE)
                queue = self.queues.get(app.queue_path)
                if queue is not None:
                    queue.applications.pop(app.application_id, None)
                    queue.update_app(app)
                del self.applications[app.application_id]
                self.ugm.remove_application(app.application_id)
                done.append(app.application_id)
        return done

    # ---- asks --------------------------------------------------------------------------------------

    def add_ask(
        self,
        application_id: str,
        allocation_key: str,
        resource: Mapping[str, int],
        *,
        max_allocations: int = 1,
        priority: int = 0,
        tags: Mapping[str, str] | None = None,
        placeholder: bool = False,
        task_group_name: str = "",
        originator: bool = False,
        allow_preempt_self: bool = False,
        allow_preempt_other: bool = False,
        execution_timeout_ms: int = 0,
    ) -> Ask:
        """Add or replace an ask; raises ModelError with the rejection reason."""
        app = self.applications.get(application_id)
        if app is None:
            raise ModelError(f"failed to find application {application_id}")
        reason = ask_rejection(app, allocation_key, resource, max_allocations)
        if reason:
            raise ModelError(reason)
        queue = self.queues[app.queue_path]
        ask = Ask(
            allocation_key,
            application_id,
            res.prune(resource),
            max_allocations=max_allocations or 1,
            priority=priority,
            create_seq=next(self._ask_seq),
            create_time=self.clock(),
            tags=dict(tags or {}),
            placeholder=placeholder and bool(task_group_name),
            task_group_name=task_group_name,
            originator=originator,
            allow_preempt_self=allow_preempt_self,
            allow_preempt_other=allow_preempt_other,
            execution_timeout_ms=execution_timeout_ms,
        )
        self._insert_ask(app, queue, ask)
        queue.update_app(app)
        return ask

    def _insert_ask(self, app: Application, queue: Queue, ask: Ask, pending: Resource | None = None) -> None:
        """Add or replace an ask; the caller re-keys the application once for a whole batch.

        With ``pending`` given, the queue's pending increase is collected there for the caller to
        apply once, instead of a walk up the queue path per ask.
        """
        allocation_key = ask.allocation_key
        old = app.asks.get(allocation_key)
        if old is not None:
            self._drop_ask_reservation(app, allocation_key)
            if old.pending > 0:
                queue.add_pending(old.resource, -old.pending)
            # the new ask has not failed yet: its outstanding entry (if any) belonged to the old one
            self.unschedulable.pop((app.application_id, allocation_key), None)
        app.add_ask(ask)
        if ask.task_group_name and not ask.placeholder and app.placeholders:
            self.replace_candidates[app.application_id] = app
        app.quota_blocked_at = -1  # a new ask may fit where the others did not
        q: Queue | None = queue
        while q is not None:  # every ancestor: one may be marked while a child below is not
            q.quota_blocked_at = -1
            q = q.parent
        if pending is None:
            queue.add_pending(ask.resource, ask.pending)
        else:
            for name, quantity in ask.resource_items:
                pending[name] = pending.get(name, 0) + quantity * ask.pending
        if app.state in (ApplicationState.NEW, ApplicationState.COMPLETING):
            self._transition(app, ApplicationEvent.RUN)

    def remove_ask(self, application_id: str, allocation_key: str, *, complete: bool = True) -> Ask | None:
        app = self.applications.get(application_id)
        if app is None:
            return None
        ask = app.asks.get(allocation_key)
        if ask is None:
            return None
        self._drop_ask_reservation(app, allocation_key)
        queue = self.queues[app.queue_path]
        if ask.pending > 0:
            queue.add_pending(ask.resource, -ask.pending)
        app.remove_ask(allocation_key)
        self.unschedulable.pop((application_id, allocation_key), None)
        queue.update_app(app)
        if complete:
            self._maybe_complete(app)
        return ask

    # ---- allocations -------------------------------------------------------------------------------

    def new_uuid(self) -> str:
        return f"{self._uuid_prefix}{next(self._uuid_seq)}"

    def recover_allocation(self, allocation: Allocation) -> Allocation:
        """Add an allocation the RM already runs (registration/recovery): no fit or quota check."""
        app = self.applications.get(allocation.application_id)
        if app is None:
            raise ModelError(f"failed to find application {allocation.application_id}")
        node = self.nodes.get(allocation.node_id)
        if node is None:
            raise ModelError(f"failed to find node {allocation.node_id}")
        rejection = recovery_rejection(
            allocation, issued_prefix=self._uuid_prefix, live_recovered=self._recovered_uuids
        )
        if rejection:
            raise ModelError(rejection)
        uuid = allocation.uuid or self.new_uuid()
        if uuid in app.allocations or uuid in node.allocations:
            raise ModelError(f"allocation {uuid} already exists")
        if allocation.uuid:
            self._recovered_uuids.add(uuid)
        recovered = allocation._replace(
            uuid=uuid,
            partition=self.name,
            queue_path=app.queue_path,
            resource=res.prune(allocation.resource),
            recovered=True,
        )
        queue = self.queues[app.queue_path]
        app.add_allocation(recovered)
        if recovered.placeholder:
            app.after_booking(recovered, 0, self.clock())
            self.replace_candidates[app.application_id] = app
        queue.add_allocated(recovered.resource)
        if app.user_limits is not None:
            self.ugm.allocated(app.user_limits, recovered.resource)  # counted even above a limit
        node.add_allocation(recovered)
        self._reorder_node(node)
        advance_for_recovery(app, lambda: self._transition(app, ApplicationEvent.RUN))
        queue.update_app(app)
        return recovered

    def release_allocation(
        self, application_id: str, uuid: str, *, complete: bool = True
    ) -> Allocation | None:
        app = self.applications.get(application_id)
        if app is None:
            return None
        allocation = app.remove_allocation(uuid)
        if allocation is None:
            return None
        if app.user_limits is not None:
            self.ugm.released(app.user_limits, allocation.resource)
        if allocation.recovered:
            self._recovered_uuids.discard(uuid)
        queue = self.queues.get(app.queue_path)
        if queue is not None:
            queue.add_allocated(allocation.resource, -1)
            queue.update_app(app)
        node = self.nodes.get(allocation.node_id)
        if node is not None:
            node.remove_allocation(uuid)
            self._reorder_node(node)
        self._resources_changed()
        if app.replacements:
            real = app.drop_replacement(uuid)
            if real is not None:
                self._return_repeat(app, real)  # the placeholder went another way: the ask waits again
        if complete:
            self._maybe_complete(app)
        return allocation

    def release_allocations(
        self,
        application_id: str,
        *,
        uuid: str = "",
        allocation_key: str = "",
        termination: si.TerminationType = si.TerminationType.STOPPED_BY_RM,
    ) -> list[Allocation]:
        """RM releases by uuid, else every allocation of the key, else all of the application's.

        A release of an allocation the core is releasing, with the same termination type, is the RM's
        confirmation: the allocation goes (and a waiting replacement comes in) but is not returned, as
        the RM is not told again. A second confirmation finds nothing.
        """
        app = self.applications.get(application_id)
        if app is None:
            return []
        if uuid:
            targets = [uuid] if uuid in app.allocations else []
        elif allocation_key:
            targets = [a.uuid for a in app.allocations_for_key(allocation_key)]
        else:
            targets = list(app.allocations)
        released: list[Allocation] = []
        for target in targets:
            if app.releasing and app.is_confirmation(target, termination):
                self.confirm_release(app, target)
                continue
            done = self.release_allocation(application_id, target, complete=False)
            if done is not None:
                released.append(done)
        if application_id in self.applications:
            self._maybe_complete(app)
        return released

    def confirm_release(self, app: Application, uuid: str) -> None:
        """The RM confirmed a release the core made: free it, or swap in the replacement waiting on it."""
        real = app.drop_replacement(uuid) if app.replacements else None
        if real is None:
            self.release_allocation(app.application_id, uuid, complete=False)
        else:
            self.swap_in(app, uuid, real)

    def swap_in(self, app: Application, placeholder_uuid: str, real: Allocation) -> Allocation | None:
        """Replace an allocated placeholder by the real allocation on its node: node, queue and
        application usage move by the difference. Returns the real allocation (None: nothing done)."""
        ask = app.asks.get(real.allocation_key)
        timeout_ms = ask.execution_timeout_ms if ask is not None else 0
        placeholder = app.swap_in(placeholder_uuid, real, self.clock(), timeout_ms)
        if placeholder is None:
            return None
        queue = self.queues.get(app.queue_path)
        if queue is not None:
            queue.add_allocated(placeholder.resource, -1)
            queue.add_allocated(real.resource)
            queue.update_app(app)
        node = self.nodes.get(real.node_id)
        if node is not None:
            node.remove_allocation(placeholder_uuid)
            node.add_allocation(real)
            self._reorder_node(node)
        self._resources_changed()
        if app.state is _ACCEPTED or app.state is _STARTING:
            advance_after_allocation(app, False, lambda: self._transition(app, ApplicationEvent.RUN))
        self.swapped_in.append(real)
        return real

    def _return_repeat(self, app: Application, allocation: Allocation) -> None:
        """The repeat an undone allocation or replacement took goes back to its ask (same generation)."""
        ask = app.asks.get(allocation.allocation_key)
        if ask is None or ask.generation != allocation.ask_generation:
            return
        app.return_pending(ask)
        queue = self.queues[app.queue_path]
        queue.add_pending(ask.resource)
        queue.update_app(app)
        if ask.task_group_name and app.placeholders:
            self.replace_candidates[app.application_id] = app
        # the returned repeat is new work: drop what the walk learnt while it was away
        self._resources_changed()

    def core_release(
        self, application_id: str, uuid: str, termination: si.TerminationType, message: str
    ) -> Allocation | None:
        """The core releases an allocation (TIMEOUT, PLACEHOLDER_REPLACED, preemption): it is reported
        to the RM and stays booked on node, queue and application until the RM confirms."""
        app = self.applications.get(application_id)
        allocation = app.mark_releasing(uuid, termination) if app is not None else None
        if allocation is not None:
            self.core_releases.append((allocation, termination, message))
        return allocation

    # ---- gang replacement --------------------------------------------------------------------------

    def _try_replacements(self, now: float) -> Allocation | None:
        """YuniKorn's placeholder step, between reserved asks and the queue walk: a real ask of a task
        group that fits an allocated placeholder of its group replaces it instead of searching nodes.

        The result is the real allocation (``replaces`` names the placeholder); it is booked on the
        node only once the RM confirms the placeholder's PLACEHOLDER_REPLACED release.
        """
        candidates = self.replace_candidates
        for application_id, app in list(candidates.items()):
            refused = False  # by the RM's predicates: time (or the RM) may change that
            if app.placeholders and app.state not in _TERMINAL_OR_FAILING:
                for ask in app.iter_pending_asks():
                    if ask.placeholder or not ask.task_group_name:
                        continue
                    placeholder = app.placeholder_for(ask)
                    if placeholder is None or placeholder.node_id not in self.nodes:
                        continue
                    # the RM's predicates still have their say on the placeholder's node
                    if self.predicate is not None and not self._predicate(
                        ask.allocation_key, placeholder.node_id, True
                    ):
                        refused = True
                        continue
                    return self.replace(app, ask, placeholder)
            if not refused:
                del candidates[application_id]  # nothing to replace until an ask or placeholder arrives
        return None

    def replace(self, app: Application, ask: Ask, placeholder: Allocation) -> Allocation:
        """Decide that one repeat of ``ask`` replaces ``placeholder``: the ask's repeat is taken, the
        placeholder is released to the RM (PLACEHOLDER_REPLACED) and kept until the RM confirms."""
        queue = self.queues[app.queue_path]
        real = _new_tuple(
            Allocation,
            (
                f"{self._uuid_prefix}{next(self._uuid_seq)}",
                ask.allocation_key,
                app.application_id,
                placeholder.node_id,
                ask.resource,
                self.name,
                queue.path,
                ask.priority,
                False,
                ask.task_group_name,
                ask.tags,
                ask.generation,
                False,
                placeholder.uuid,
            ),
        )
        app.take_pending(ask)
        queue.add_pending(ask.resource, -1)
        if ask.failed_since is not None:
            ask.failed_since = None
            self.unschedulable.pop((app.application_id, ask.allocation_key), None)
        app.begin_replacement(placeholder, real)
        self.core_releases.append(
            (placeholder, si.TerminationType.PLACEHOLDER_REPLACED, f"replaced by allocation {real.uuid}")
        )
        queue.update_app(app)
        return real

    def undo_replacement(self, real: Allocation) -> None:
        """A replacement its owner refused: the placeholder is free again and the ask gets its repeat."""
        app = self.applications.get(real.application_id)
        recorded = app.replacements.get(real.replaces) if app is not None else None
        if recorded is None or recorded.uuid != real.uuid:
            return  # undone already, or a later replacement of the same placeholder
        app.drop_replacement(real.replaces)
        if app.releasing.get(real.replaces) == si.TerminationType.PLACEHOLDER_REPLACED:
            app.unmark_releasing(real.replaces)
        self._return_repeat(app, real)

    # ---- timeouts ----------------------------------------------------------------------------------

    def expire_timeouts(self) -> None:
        """Apply every timeout due now (placeholder, application and allocation execution timeouts).

        The reference calls this; the actors run each application's timers on the core's timer
        service and apply the same ``Application.due_timeouts`` plan in the application's owner."""
        now = self.clock()
        for app in list(self.applications.values()):
            deadline = app.next_deadline()
            if deadline is None or now < deadline - 1e-9:
                continue
            plan = app.due_timeouts(now)
            for allocation in plan.release:
                self.core_release(
                    app.application_id, allocation.uuid, si.TerminationType.TIMEOUT, plan.reason
                )
            for key in plan.remove_asks:
                if self.remove_ask(app.application_id, key, complete=False) is not None:
                    self.released_asks.append((app.application_id, key, plan.reason))
            for event in plan.events:
                self._transition(app, event, plan.reason)
            self._maybe_complete(app)

    def commit(self, app: Application, queue: Queue, ask: Ask, node: Node) -> Allocation:
        """Book one allocation of ``ask`` on ``node`` everywhere it counts."""
        # positional tuple construction: the keyword form of a NamedTuple costs a Python-level __new__
        allocation = _new_tuple(
            Allocation,
            (
                f"{self._uuid_prefix}{next(self._uuid_seq)}",
                ask.allocation_key,
                app.application_id,
                node.node_id,
                ask.resource,
                self.name,
                queue.path,
                ask.priority,
                ask.placeholder,
                ask.task_group_name,
                ask.tags,
                ask.generation,
                False,
                "",
            ),
        )
        app.book(ask, allocation)
        if app.user_limits is not None:
            self.ugm.allocated(app.user_limits, ask.resource)
        if ask.failed_since is not None:
            ask.failed_since = None
            self.unschedulable.pop((app.application_id, ask.allocation_key), None)
        items = ask.resource_items
        # one walk up the path for both aggregates (pending down, allocated up)
        q: Queue | None = queue
        while q is not None:
            res.pending_to_allocated(q.pending, q.allocated, items)
            q = q.parent
        node.add_allocation(allocation)
        self._reorder_node(node)
        state = app.state
        if state is _ACCEPTED or state is _STARTING:
            advance_after_allocation(
                app, ask.placeholder, lambda: self._transition(app, ApplicationEvent.RUN)
            )
        if ask.placeholder or ask.execution_timeout_ms > 0:
            app.after_booking(allocation, ask.execution_timeout_ms, self.clock())
            if ask.placeholder and app.real_group_asks:
                self.replace_candidates[app.application_id] = app
        queue.app_allocated(app, ask)
        return allocation

    # ---- reservations ------------------------------------------------------------------------------

    def reserve(self, app: Application, ask: Ask, node: Node) -> None:
        self.reservation_changes.add(node.node_id)
        node.reservation = (app.application_id, ask.allocation_key)
        app.reservations[ask.allocation_key] = node.node_id
        self.reservations[(app.application_id, ask.allocation_key)] = node.node_id
        self._reorder_node(node)

    def unreserve(self, application_id: str, allocation_key: str) -> None:
        node_id = self.reservations.pop((application_id, allocation_key), None)
        app = self.applications.get(application_id)
        if app is not None:
            app.reservations.pop(allocation_key, None)
        if node_id is not None:
            node = self.nodes.get(node_id)
            if node is not None and node.reservation == (application_id, allocation_key):
                self.reservation_changes.add(node_id)
                node.reservation = None
                self._reorder_node(node)
                self._resources_changed()

    def _drop_ask_reservation(self, app: Application, allocation_key: str) -> None:
        if allocation_key in app.reservations:
            self.unreserve(app.application_id, allocation_key)

    def _try_reserve(self, app: Application, ask: Ask, now: float) -> None:
        if ask.allocation_key in app.reservations:
            return
        best: Node | None = None
        best_key: tuple[float, str] | None = None
        for node in self.nodes.values():
            if not node.schedulable or node.reservation is not None or not node.capacity_fits(ask.resource):
                continue
            if self.predicate is not None and not self._predicate(ask.allocation_key, node.node_id, False):
                continue
            key = (res.fit_score(ask.resource, node.available), node.node_id)
            if best_key is None or key < best_key:
                best, best_key = node, key
        if best is not None:
            self.reserve(app, ask, best)

    # ---- scheduling --------------------------------------------------------------------------------

    def schedule(self, limit: int | None = None) -> list[Allocation]:
        """Run scheduling cycles until nothing more can be allocated (or ``limit`` allocations)."""
        made: list[Allocation] = []
        remaining = -1 if limit is None else limit  # -1 counts down forever
        while remaining:
            allocation = self.schedule_one()
            if allocation is None:
                break
            made.append(allocation)
            remaining -= 1
        return made

    def schedule_one(self) -> Allocation | None:
        """One YuniKorn scheduling cycle: reserved asks first, then the queue walk; one allocation."""
        if self._limits_dirty:
            self.refresh_limits()
        if not self.root.max:
            return None
        now = self.clock()
        if self.reservations:
            allocation = self._try_reserved(now)
            if allocation is not None:
                return allocation
        if self.replace_candidates:
            allocation = self._try_replacements(now)
            if allocation is not None:
                return allocation
        return self._walk(self.root, now)

    def _walk(self, queue: Queue, now: float) -> Allocation | None:
        epoch = self._resource_epoch
        if queue.quota_blocked_at == epoch:
            # Everything pending below this queue was over a queue limit, and no limit or usage has
            # eased since: skip it whole (capped queues with a backlog would cost a visit per cycle).
            return None
        all_blocked = True
        if queue.is_leaf:
            order = queue.order
            apps = order.items
            if queue.sort_policy == SORT_STATE_AWARE:
                walk: Iterable[tuple] = self._state_aware_entries(queue)
                all_blocked = False  # admission depends on states, not only on limits
            else:
                # order.live_entries(), inlined here and in the loops below; walked lazily, which is
                # safe: nothing below changes this order unless it allocates, and then we return
                entries = order.entries
                walk = islice(entries, order.head, None) if order.head else entries
            for entry in walk:
                app = apps[entry[-1]]
                if app.state not in RUNNING_STATES and not queue.can_run_app(app):
                    all_blocked = False
                    continue
                if app.user_limits is not None and not self._user_limits_admit(app):
                    continue  # blocked until one of its user's or group's applications ends (epoch)
                allocation = self._try_app(app, queue, now)
                if allocation is not None:
                    return allocation
                if app.quota_blocked_at != epoch:
                    all_blocked = False
        else:
            order = queue.order
            children = order.items
            entries = order.entries
            for entry in islice(entries, order.head, None) if order.head else entries:
                child = children[entry[-1]]
                if child.state is _STOPPED:
                    continue
                allocation = self._walk(child, now)
                if allocation is not None:
                    return allocation
                if child.quota_blocked_at != epoch:
                    all_blocked = False
        if all_blocked:
            queue.quota_blocked_at = epoch
        return None

    @staticmethod
    def _state_aware_entries(queue: Queue) -> list[tuple]:
        """The order's entries of the applications stateaware admits: all Running ones, plus one
        Starting one, or else one Accepted one."""
        starting = [a for a in queue.applications.values() if a.state is ApplicationState.STARTING]
        admitted: set[str] = {
            a.application_id for a in queue.applications.values() if a.state is ApplicationState.RUNNING
        }
        if starting:
            admitted.add(min(starting, key=lambda a: a.submission_seq).application_id)
        else:
            accepted = [a for a in queue.applications.values() if a.state is ApplicationState.ACCEPTED]
            if accepted:
                admitted.add(min(accepted, key=lambda a: a.submission_seq).application_id)
        return [entry for entry in queue.order.live_entries() if entry[-1] in admitted]

    def _try_app(self, app: Application, queue: Queue, now: float) -> Allocation | None:
        epoch = self._resource_epoch
        if app.quota_blocked_at == epoch:
            # Every pending ask was over a queue limit and no limit or usage has eased since:
            # skip the rescan (it would make a capped queue with a long backlog quadratic).
            return None
        only_quota_blocked = True
        user_limits = app.user_limits
        pending_asks = app.pending_asks
        asks = pending_asks.items
        entries = pending_asks.entries
        for entry in islice(entries, pending_asks.head, None) if pending_asks.head else entries:
            ask = asks[entry[-1]]
            if app.reservations and ask.allocation_key in app.reservations:
                only_quota_blocked = False
                continue
            over = queue.over_quota(ask.resource)
            if over is not None:
                # Only the cluster's size (root's max) in the way: the ask is outstanding, so the RM
                # may scale up (YuniKorn's getMaxHeadRoom ignores the root limit for this).
                if over.parent is None and ask.failed_since is None:
                    self._mark_unschedulable(app, ask, now)
                if ask.required_node and over.parent is None:
                    # the cluster's size is no limit for an ask that can only run on one node
                    only_quota_blocked = False
                    allocation = try_required_node(self, app, queue, ask, now)
                    if allocation is not None:
                        return allocation
                elif ask.allow_preempt_other:
                    # preemption may make room (YuniKorn tries it when the headroom is short too);
                    # time alone can make it due, so the application is never skipped as blocked
                    only_quota_blocked = False
                    try_preempt(self, app, queue, ask, now)
                continue
            if user_limits is not None and self.ugm.over_limit(user_limits, ask.resource):
                continue  # over its user's or group's maxresources: quota-blocked like a queue limit
            only_quota_blocked = False
            if ask.required_node:
                allocation = try_required_node(self, app, queue, ask, now)
                if allocation is not None:
                    return allocation
                continue
            node = self._find_node(ask)
            if node is not None:
                return self.commit(app, queue, ask, node)
            if ask.allow_preempt_other and try_preempt(self, app, queue, ask, now):
                continue  # its node is reserved for it until the victims are gone
            if now - self._mark_unschedulable(app, ask, now) >= self.reservation_delay:
                self._try_reserve(app, ask, now)
        if only_quota_blocked:
            app.quota_blocked_at = epoch
        return None

    def _user_limits_admit(self, app: Application) -> bool:
        """May the application get an allocation at all under its user's and group's
        ``maxapplications``? (One already running always may.)"""
        return app.user_limits is None or self.ugm.can_run_app(app.user_limits)

    def _mark_unschedulable(self, app: Application, ask: Ask, now: float) -> float:
        """The ask fits its queue but no node: remember since when (returned), report it as outstanding."""
        since = ask.failed_since
        if since is None:
            since = ask.failed_since = now
        key = (app.application_id, ask.allocation_key)
        if key not in self.unschedulable:
            self.unschedulable[key] = UnschedulableAsk(
                application_id=app.application_id, allocation_key=ask.allocation_key
            )
        return since

    def _find_node(self, ask: Ask) -> Node | None:
        """First node in policy order with room for the ask that the RM's predicates accept."""
        shape = ask.shape
        unfit = self._unfit_shapes
        if unfit and shape in unfit:
            return None
        predicate = self.predicate
        any_fit = False
        items = ask.resource_items
        node_order = self.node_order
        nodes = node_order.items
        entries = node_order.entries
        for entry in islice(entries, node_order.head, None) if node_order.head else entries:
            node = nodes[entry[-1]]
            available = node.available
            for name, quantity in items:
                if quantity > available.get(name, 0):
                    break
            else:
                any_fit = True
                if predicate is not None and not self._predicate(ask.allocation_key, node.node_id, True):
                    continue
                return node
        if not any_fit:
            # Nothing has room: skip this shape until some node gains room.
            unfit.add(shape)
        return None

    def _predicate(self, allocation_key: str, node_id: str, allocate: bool) -> bool:
        try:
            return bool(self.predicate(allocation_key, node_id, allocate))  # type: ignore[misc]
        except Exception:  # a failing RM plugin means "not this node", never a crash
            return False

    def _try_reserved(self, now: float) -> Allocation | None:
        for (application_id, allocation_key), node_id in list(self.reservations.items()):
            app = self.applications.get(application_id)
            node = self.nodes.get(node_id)
            ask = app.asks.get(allocation_key) if app is not None else None
            if app is None or node is None or ask is None or ask.pending <= 0:
                self.unreserve(application_id, allocation_key)
                continue
            queue = self.queues[app.queue_path]
            if not queue.can_run_app(app):
                continue
            over = queue.over_quota(ask.resource)
            if over is not None:
                if ask.allow_preempt_other and not ask.required_node:
                    try_preempt(self, app, queue, ask, now)  # a reservation does not stop it preempting
                if not ask.required_node or over.parent is not None:
                    continue
                # a required-node ask: only its node's room counts, not the cluster's size
            if app.user_limits is not None and (
                not self._user_limits_admit(app) or self.ugm.over_limit(app.user_limits, ask.resource)
            ):
                continue
            if ask.required_node:
                allocation = try_reserved_required_node(self, app, queue, ask, node, now)
                if allocation is not None:
                    return allocation
                continue  # only its own node will do
            target: Node | None = None
            if (
                node.schedulable
                and node.fits(ask.resource)
                and (self.predicate is None or self._predicate(allocation_key, node_id, True))
            ):
                target = node
            else:
                target = self._find_node(ask)
            if target is not None:
                self.unreserve(application_id, allocation_key)
                return self.commit(app, queue, ask, target)
            if ask.allow_preempt_other:
                try_preempt(self, app, queue, ask, now)  # a reservation does not stop it preempting
        return None

    # ---- outputs -----------------------------------------------------------------------------------

    def drain_state_changes(self) -> list[StateChange]:
        changes, self.state_changes = self.state_changes, []
        return changes


# enum members the scheduling loop reads: a module global is several times cheaper than Enum.MEMBER
_ACCEPTED = ApplicationState.ACCEPTED
_STARTING = ApplicationState.STARTING
_STOPPED = QueueState.STOPPED
_TERMINAL_OR_FAILING = frozenset(
    {
        ApplicationState.FAILING,
        ApplicationState.FAILED,
        ApplicationState.COMPLETED,
        ApplicationState.REJECTED,
        ApplicationState.EXPIRED,
    }
)


def _parse_resource_tag(value: str | None) -> Resource | None:
    """Tag values are JSON si.Resource: {"resources": {"memory": {"value": 1000}}}; bad JSON is ignored."""
    if not value:
        return None
    try:
        data = json.loads(value)
        quantities = data.get("resources", data)
        parsed = {name: int(q["value"] if isinstance(q, dict) else q) for name, q in quantities.items()}
    except (ValueError, TypeError, AttributeError, KeyError):
        return None
    return res.prune(parsed) or None
