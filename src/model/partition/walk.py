"""The scheduling walk: YuniKorn's cycle over a partition, one allocation at a time.

One part of a ``PartitionModel`` (``korral.model.partition.composed`` composes the parts and wires them): the
cycle takes reserved asks first, then placeholder replacements, then walks the queue tree (queues in
their order, applications in their queue's order, asks by priority, nodes in policy order), checking
headroom and max applications at every level. It decides; the allocations part books
(``PartitionAllocations.commit``) and the reservations part reserves. An ask that fits no node may
preempt, and a required-node ask goes only to its node: those calls (``korral.model.preempting``)
take the whole partition, as they read most of it. It owns the preemption attempts of the cycle.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from korral import resource as res
from korral.model.allocation import Allocation, Ask
from korral.model.app.application import RUNNING_STATES, Application, ApplicationState
from korral.model.deadlines import reached
from korral.model.node import Node
from korral.model.node_order import NodeOrder
from korral.model.order import IncrementalOrder, entries_from
from korral.model.partition.allocations import PartitionAllocations
from korral.model.partition.apps import PartitionApplications
from korral.model.partition.effects import EffectsRecorder
from korral.model.partition.registry import PartitionRegistry, UnschedulableAsk
from korral.model.preempting import try_preempt, try_required_node, try_reserved_required_node
from korral.model.queue import Queue, QueueState
from korral.model.quota_preempting import QuotaPreemption
from korral.model.reservations import Reservations, wait_expired
from korral.model.rm_predicates import MAX_CANDIDATES_PER_CALL, RMPredicates
from korral.model.ugm import UserGroupTracker
from korral.policies.sorting import SORT_STATE_AWARE

if TYPE_CHECKING:
    from korral.model.partition.composed import PartitionModel


class SchedulingWalk:
    """YuniKorn's scheduling cycle over the partition's parts."""

    def __init__(
        self,
        partition: PartitionModel,
        registry: PartitionRegistry,
        apps: PartitionApplications,
        allocations: PartitionAllocations,
        reservations: Reservations,
        ugm: UserGroupTracker,
        predicates: RMPredicates,
        effects: EffectsRecorder,
        quota: QuotaPreemption | None,
        node_ordering: NodeOrder,
        *,
        clock: Callable[[], float] = time.monotonic,
        reservation_delay: float = 2.0,
    ) -> None:
        # the whole partition, for the preemption and required-node calls (they read most of it)
        self.partition = partition
        self.registry = registry
        self.queues = registry.queues  # the registry's (shared, never replaced)
        self.nodes = registry.nodes
        self.root = registry.root
        self.unfit_shapes = registry.unfit_shapes  # cleared in place, never replaced
        self.apps = apps
        self.applications = apps.applications  # the applications part's (shared, never replaced)
        self.unschedulable = apps.unschedulable
        self.replace_candidates = apps.replace_candidates
        self.allocations = allocations
        self.reservations = reservations
        self.ugm = ugm
        self.predicates = predicates
        self.effects = effects
        self.quota = quota
        # the registry's node order, which this walk takes nodes from
        self.node_ordering = node_ordering
        self.clock = clock
        self.reservation_delay = reservation_delay
        # leaf queue path -> preemption attempts in this scheduling cycle (capped, as YuniKorn does)
        self.preempt_attempts: dict[str, int] = {}
        # while a reader wants latencies: the seconds of each node walk without the RM's predicates
        # that looked at nodes, each both a trynode and a trynode_evaluation (the other latencies go
        # to the partition's (kind, seconds) list); a plain float list, as there is one per allocation
        self.walk_latencies: list[float] | None = None

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
                    if not self.predicates.allows(ask.allocation_key, placeholder.node_id):
                        refused = True
                        continue
                    return self.allocations.replace(app, ask, placeholder, now)
            if not refused:
                del candidates[application_id]  # nothing to replace until an ask or placeholder arrives
        return None

    # ---- reservations ------------------------------------------------------------------------------

    def _try_reserve(self, app: Application, ask: Ask, now: float) -> None:
        if ask.allocation_key in app.reservations:
            return
        best: Node | None = None
        best_key: tuple[float, str] | None = None
        candidates = [
            node
            for node in self.nodes.values()
            if node.schedulable and node.reservation is None and node.capacity_fits(ask.resource)
        ]
        if candidates and self.predicates.active:
            # every candidate is asked (the best is chosen among those accepted): one call for all
            node_ids = [node.node_id for node in candidates]
            answers = self.predicates.accepted(ask.allocation_key, node_ids, False, False)
            candidates = [node for node, accepted in zip(candidates, answers, strict=False) if accepted]
        for node in candidates:
            key = (res.fit_score(ask.resource, node.available), node.node_id)
            if best_key is None or key < best_key:
                best, best_key = node, key
        if best is not None:
            self.reservations.reserve(app, ask, best)

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
        registry = self.registry
        if registry.limits_dirty:
            registry.refresh_limits()
        if not self.root.max:
            return None
        now = self.clock()
        if self.preempt_attempts:
            self.preempt_attempts.clear()  # YuniKorn: at most 10 preemption attempts per queue per cycle
        quota = self.quota
        if quota is not None and (quota.timers or quota.running):
            quota.step(self.partition, now)
        if self.reservations.reservations:
            allocation = self._try_reserved(now)
            if allocation is not None:
                return allocation
        if self.replace_candidates:
            allocation = self._try_replacements(now)
            if allocation is not None:
                return allocation
        return self._walk(self.root, now)

    def _walk(self, queue: Queue, now: float) -> Allocation | None:
        epoch = self.registry.resource_epoch
        if queue.quota_blocked_at == epoch:
            # Everything pending below this queue was over a queue limit, and no limit or usage has
            # eased since: skip it whole (capped queues with a backlog would cost a visit per cycle).
            return None
        all_blocked = True
        if queue.is_leaf:
            order = queue.order
            apps = order.items
            if queue.sort_policy == SORT_STATE_AWARE:
                walk: Iterable[tuple[Any, ...]] = self._state_aware_entries(queue)
                all_blocked = False  # admission depends on states, not only on limits
            else:
                # the live entries (order.live_entries(), entries_from inlined: the walk makes three
                # an allocation); walked lazily, which is safe: nothing below changes this order
                # unless it allocates, and then we return
                live: Any = iter(order.entries)
                if order.head:
                    live.__setstate__(order.head)
                walk = live
            for entry in walk:
                app = apps[entry[-1]]
                if app.state not in RUNNING_STATES and not queue.can_run_app(app):
                    if app.runnable_in_queue:
                        self._runnable(app, False, "queue")
                    all_blocked = False
                    continue
                if not app.runnable_in_queue:
                    self._runnable(app, True, "queue")
                if app.user_limits is not None and not self._user_limits_admit(app):
                    if app.runnable_by_quota:
                        self._runnable(app, False, "quota")
                    continue  # blocked until one of its user's or group's applications ends (epoch)
                if not app.runnable_by_quota:
                    self._runnable(app, True, "quota")
                if app.backoff_deadline is not None and not reached(now, app.backoff_deadline):
                    # backing off (YUNIKORN-3115): time alone ends it, so the driver wakes then
                    self.effects.wake_by(app.backoff_deadline)
                    all_blocked = False
                    continue
                allocation = self._try_app(app, queue, now)
                if allocation is not None:
                    return allocation
                if app.quota_blocked_at != epoch:
                    all_blocked = False
        else:
            order = queue.order
            children = order.items
            live_children: Any = iter(order.entries)  # entries_from, inlined
            if order.head:
                live_children.__setstate__(order.head)
            for entry in live_children:
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
    def _state_aware_entries(queue: Queue) -> list[tuple[Any, ...]]:
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
        epoch = self.registry.resource_epoch
        if app.quota_blocked_at == epoch:
            # Every pending ask was over a queue limit and no limit or usage has eased since:
            # skip the rescan (it would make a capped queue with a long backlog quadratic).
            return None
        only_quota_blocked = True
        user_limits = app.user_limits
        # the model's applications order their asks (an annotation, not cast(): no call per allocation)
        pending_asks: IncrementalOrder[Ask] = app.pending_asks  # type: ignore[assignment]
        asks = pending_asks.items
        live_asks: Any = iter(pending_asks.entries)  # entries_from, inlined
        if pending_asks.head:
            live_asks.__setstate__(pending_asks.head)
        if queue.over_quota_epoch != epoch:
            queue.over_quota_epoch = epoch
            queue.over_quota_shapes.clear()
        known_over = queue.over_quota_shapes
        backoff = queue.unsched_backoff
        unschedulable = 0  # asks of this pass that fit its headroom but no node
        for entry in live_asks:
            if backoff and unschedulable >= backoff:
                self._back_off(app, queue, now)
                return None
            ask = asks[entry[-1]]
            spec = ask.spec
            if app.reservations and spec.allocation_key in app.reservations:
                only_quota_blocked = False
                continue
            over = known_over.get(spec.layout[1]) if known_over else None  # its shape (no property call)
            if over is None:
                over = queue.over_quota(spec.resource)
                # A queue's verdict holds for the epoch; the root's (only the cluster's size in the way)
                # is not kept, as a nearer queue may pass its max later in the epoch and that one counts.
                if over is not None and over.parent is not None:
                    known_over[spec.layout[1]] = over
            if over is not None:
                # Only the cluster's size (root's max) in the way: the ask is outstanding, so the RM
                # may scale up (YuniKorn's getMaxHeadRoom ignores the root limit for this).
                if spec.required_node:
                    # the cluster's size is no limit for an ask that can only run on one node; nor is
                    # it outstanding (YuniKorn: a larger cluster would not help it). Its user's limits
                    # still are: YuniKorn checks the user's headroom before anything else.
                    if over.parent is None and not (
                        user_limits is not None and self.ugm.over_limit(user_limits, ask.resource)
                    ):
                        only_quota_blocked = False
                        allocation = try_required_node(self.partition, app, queue, ask, now)
                        if allocation is not None:
                            return allocation
                    continue
                if over.parent is None and ask.failed_since is None:
                    self._mark_unschedulable(app, ask, now)
                if spec.allow_preempt_other:
                    # preemption may make room (YuniKorn tries it when the headroom is short too);
                    # time alone can make it due, so the application is never skipped as blocked
                    only_quota_blocked = False
                    try_preempt(self.partition, app, queue, ask, now)
                continue
            if user_limits is not None and self.ugm.over_limit(user_limits, spec.resource):
                continue  # over its user's or group's maxresources: quota-blocked like a queue limit
            only_quota_blocked = False
            if spec.tags and spec.required_node:  # no tags, no required node (and no property call)
                allocation = try_required_node(self.partition, app, queue, ask, now)
                if allocation is not None:
                    return allocation
                continue
            node = self._find_node(ask)
            if node is not None:
                return self.allocations.commit(app, queue, ask, node, now)
            if ask.allow_preempt_other and try_preempt(self.partition, app, queue, ask, now):
                continue  # its node is reserved for it until the victims are gone
            reservable_at = self._mark_unschedulable(app, ask, now) + self.reservation_delay
            if reached(now, reservable_at):
                self._try_reserve(app, ask, now)
            else:
                self.effects.wake_by(reservable_at)  # time alone makes it reservable
            if ask.allocation_key not in app.reservations:
                unschedulable += 1
        if only_quota_blocked:
            app.quota_blocked_at = epoch
        return None

    def _back_off(self, app: Application, queue: Queue, now: float) -> None:
        """YUNIKORN-3115: ``application.unschedasks.backoff`` asks in a row fit no node; the
        application is not scheduled again until its queue's backoff delay has passed."""
        app.backoff_deadline = now + queue.unsched_backoff_delay
        self.effects.backoff(app.application_id, app.backoff_deadline)
        self.effects.wake_by(app.backoff_deadline)

    def _runnable(self, app: Application, runnable: bool, by: str) -> None:
        """Whether the application may run under its queues' (``by`` "queue") or its user's and
        group's ("quota") maxapplications changed: recorded for YuniKorn's events once per change."""
        if by == "queue":
            app.runnable_in_queue = runnable
        else:
            app.runnable_by_quota = runnable
        self.effects.runnable(app.application_id, runnable, by)

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
        """First node in policy order with room for the ask that the RM's predicates accept; while a
        reader wants latencies, the whole evaluation is timed too (YuniKorn's trynode_evaluation)."""
        predicates = self.predicates
        latencies = predicates.latencies
        if latencies is None:
            return self._walk_nodes(ask) if predicates.active else self._first_with_room(ask)
        started = time.perf_counter()
        if predicates.active:  # the RM's predicates time their own checks (trynode)
            found = self._walk_nodes(ask)
            latencies.append(("trynode_evaluation", time.perf_counter() - started))
            return found
        # Without the RM's predicates, YuniKorn's try is the walk up to the node that takes the ask (or
        # past every node): here that is the whole evaluation, unless the shape is known to fit nowhere.
        unfit = self.unfit_shapes
        if unfit and ask.spec.layout[1] in unfit:
            found = self._first_with_room(ask)
            latencies.append(("trynode_evaluation", time.perf_counter() - started))
            return found
        found = self._first_with_room(ask)
        walks = self.walk_latencies
        if walks is not None:  # set whenever latencies are
            walks.append(time.perf_counter() - started)
        return found

    def _first_with_room(self, ask: Ask) -> Node | None:
        """The first node in order with room (no RM predicates), without the general walk's set-up:
        under fair sorting it is nearly always the first one, looked at before any iterator is made."""
        items, shape = ask.spec.layout  # resource_items and shape, without their property calls
        unfit = self.unfit_shapes
        if unfit and shape in unfit:
            return None
        node_order = self.node_ordering.order
        nodes = node_order.items
        entries = node_order.entries
        head = node_order.head
        if head < len(entries):
            node = nodes[entries[head][-1]]
            available = node.available
            for name, quantity in items:
                if quantity > available.get(name, 0):
                    break
            else:
                return node
            for entry in entries_from(entries, head + 1):
                node = nodes[entry[-1]]
                available = node.available
                for name, quantity in items:
                    if quantity > available.get(name, 0):
                        break
                else:
                    return node
        unfit.add(shape)  # nothing has room: skip this shape until some node gains room
        return None

    def _walk_nodes(self, ask: Ask) -> Node | None:
        """The first node with room that the RM's predicates accept, put to them in growing groups."""
        spec = ask.spec
        shape = spec.shape
        unfit = self.unfit_shapes
        if unfit and shape in unfit:
            return None
        predicates = self.predicates
        candidates: list[Node] = []  # with room, not yet put to the RM's predicates
        per_call = predicates.candidates_per_call
        any_fit = False
        items = spec.resource_items
        node_order = self.node_ordering.order
        nodes = node_order.items
        entries = node_order.entries
        for entry in entries_from(entries, node_order.head):
            node = nodes[entry[-1]]
            available = node.available
            for name, quantity in items:
                if quantity > available.get(name, 0):
                    break
            else:
                any_fit = True
                candidates.append(node)
                if len(candidates) >= per_call:
                    accepted = predicates.first_accepted(spec.allocation_key, candidates)
                    if accepted is not None:
                        return accepted
                    candidates = []
                    per_call = min(2 * per_call, MAX_CANDIDATES_PER_CALL)
        if candidates:
            accepted = predicates.first_accepted(spec.allocation_key, candidates)
            if accepted is not None:
                return accepted
        if not any_fit:
            # Nothing has room: skip this shape until some node gains room.
            unfit.add(shape)
        return None

    def _try_reserved(self, now: float) -> Allocation | None:
        reservations = self.reservations
        for (application_id, allocation_key), node_id in list(reservations.reservations.items()):
            app = self.applications.get(application_id)
            node = self.nodes.get(node_id)
            ask = app.asks.get(allocation_key) if app is not None else None
            if app is None or node is None or ask is None or ask.pending <= 0:
                self.reservations.unreserve(application_id, allocation_key)
                continue
            queue = self.queues[app.queue_path]
            if not queue.can_run_app(app):
                continue
            over = queue.over_quota(ask.resource)
            if over is not None:
                if ask.allow_preempt_other and not ask.required_node:
                    # a reservation does not stop it preempting
                    try_preempt(self.partition, app, queue, ask, now)
                if not ask.required_node or over.parent is not None:
                    wait_expired(self.partition, application_id, allocation_key, now)  # a short headroom
                    continue
                # a required-node ask: only its node's room counts, not the cluster's size
            if app.user_limits is not None and (
                not self._user_limits_admit(app) or self.ugm.over_limit(app.user_limits, ask.resource)
            ):
                wait_expired(self.partition, application_id, allocation_key, now)  # a short user headroom
                continue
            if ask.required_node:
                allocation = try_reserved_required_node(self.partition, app, queue, ask, node, now)
                if allocation is not None:
                    return allocation
                continue  # only its own node will do
            target: Node | None = None
            if (
                node.schedulable
                and node.fits(ask.resource)
                and self.predicates.allows(allocation_key, node_id)
            ):
                target = node
            else:
                target = self._find_node(ask)
            if target is not None:
                self.reservations.unreserve(application_id, allocation_key)
                return self.allocations.commit(app, queue, ask, target, now)
            if ask.allow_preempt_other:
                try_preempt(self.partition, app, queue, ask, now)  # a reservation does not stop it preempting
        return None


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
