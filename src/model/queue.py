"""The queue hierarchy: configuration, inherited properties, usage, limits and the fair order of children."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from time import perf_counter
from typing import Any

from korral import resource as res
from korral.config.quantity import parse_go_duration, parse_go_int32, parse_go_uint64
from korral.config.schema import ChildTemplateConfig
from korral.model.allocation import Ask
from korral.model.app.application import MAX_PRIORITY, MIN_PRIORITY, Application, ApplicationState
from korral.model.order import INSERTED, UNCHANGED, IncrementalOrder
from korral.model.queue_spec import ROOT as ROOT
from korral.model.queue_spec import QueueSpec, unconfigured
from korral.model.queue_spec import QueueState as QueueState
from korral.policies import sorting
from korral.policies.sorting import SORT_FAIR, SORT_FIFO, SORT_STATE_AWARE
from korral.resource import Resource

APPLICATION_SORT_POLICY = "application.sort.policy"
APPLICATION_SORT_PRIORITY = "application.sort.priority"
PRIORITY_POLICY = "priority.policy"
PRIORITY_OFFSET = "priority.offset"
PREEMPTION_POLICY = "preemption.policy"
PREEMPTION_DELAY = "preemption.delay"
# YuniKorn 1.8: how long a queue's usage may stay over a lowered max before quota preemption (own
# property of a managed queue, not inherited; 0 or unset: never)
QUOTA_PREEMPTION_DELAY = "quota.preemption.delay"
# YuniKorn's default preemption.delay: an ask may preempt once it has waited this long
DEFAULT_PREEMPTION_DELAY = 30.0
# YUNIKORN-3115: after this many asks of an application fit no node in one pass, the application is
# not scheduled for the delay (0: never backs off)
UNSCHED_ASKS_BACKOFF = "application.unschedasks.backoff"
UNSCHED_ASKS_BACKOFF_DELAY = "application.unschedasks.backoff.delay"
DEFAULT_BACKOFF_DELAY = 30.0


def inherited_properties(parent_properties: dict[str, str]) -> dict[str, str]:
    """What a child inherits from its parent's properties (YuniKorn's filterParentProperty).

    Priority settings are the parent's own business and reset; a preemption policy is inherited only
    when it disables preemption.
    """
    result: dict[str, str] = {}
    for key, value in parent_properties.items():
        if key == PRIORITY_POLICY:
            result[key] = "default"
        elif key == PRIORITY_OFFSET:
            result[key] = "0"
        elif key == PREEMPTION_POLICY:
            if value.lower() == "disabled":
                result[key] = value
        else:
            result[key] = value
    return result


def _clamp_priority(value: int) -> int:
    return max(MIN_PRIORITY, min(MAX_PRIORITY, value))


def parse_priority_offset(text: str) -> int:
    """``priority.offset`` as YuniKorn reads it (strconv.ParseInt(value, 10, 32)): 0 unless an int32."""
    value = parse_go_int32(text)
    return 0 if value is None else value


def _parse_backoff(text: str | None) -> int:
    """``application.unschedasks.backoff`` as YuniKorn reads it (ParseUint): 0 unless an unsigned int."""
    value = parse_go_uint64(text) if text is not None else None
    return 0 if value is None else value


def _parse_positive_delay(text: str | None, default: float) -> float:
    """A positive Go duration, else ``default`` (YuniKorn's convertDelay)."""
    delay = parse_go_duration(text) if text is not None else None
    return delay if delay is not None and delay > 0 else default


def parse_preemption_delay(text: str | None) -> float:
    """``preemption.delay`` as YuniKorn reads it: a positive Go duration, else the default (30 s)."""
    if text is None:
        return DEFAULT_PREEMPTION_DELAY
    delay = parse_go_duration(text)
    return delay if delay is not None and delay > 0 else DEFAULT_PREEMPTION_DELAY


def _parse_quota_preemption_delay(text: str | None) -> float:
    """``quota.preemption.delay``: a Go duration; unset, 0, negative or not a duration: 0 (never)."""
    delay = parse_go_duration(text) if text is not None else None
    return delay if delay is not None and delay > 0 else 0.0


# read once per allocation (refresh_up): a module global is several times cheaper than Enum.MEMBER
_STOPPED = QueueState.STOPPED


class Queue:
    """A queue of the hierarchy: a parent (children) or a leaf (applications).

    ``allocated`` and ``pending`` of a queue always equal the sums over its children or applications;
    callers change them through ``add_allocated`` / ``add_pending`` which walk up the path. ``order``
    holds the children (parent) or applications (leaf) with something pending, in scheduling order.
    """

    def __init__(self, name: str, parent: Queue | None = None, *, leaf: bool, managed: bool) -> None:
        self.name = name.lower()
        self.parent = parent
        self.path: str = self.name if parent is None else f"{parent.path}.{self.name}"
        self.is_leaf = leaf
        self.is_managed = managed
        self.children: dict[str, Queue] = {}
        self.applications: dict[str, Application] = {}
        # what the queue is (configuration, state): one immutable value, its owner's (in the actor
        # system the queue's actor); the fields below are read from it by reference (``apply_spec``)
        self.spec: QueueSpec = unconfigured(self.path, leaf=leaf)
        self.state = self.spec.state
        self.own_properties: Mapping[str, str] = self.spec.properties
        self.properties: dict[str, str] = {}
        self.guaranteed: Resource | None = None
        self.max: Resource | None = None
        self.max_applications = 0
        self.submit_acl = self.spec.submit_acl
        self.admin_acl = self.spec.admin_acl
        self.own_child_template: ChildTemplateConfig | None = None
        self.allocated: Resource = {}
        self.pending: Resource = {}
        # (pending, allocated) of this queue and every ancestor, nearest first: what one allocation
        # books along its path (the dicts are updated in place, never replaced, and a parent is fixed)
        self.aggregates_up: tuple[tuple[Resource, Resource], ...] = (
            (self.pending, self.allocated),
            *(parent.aggregates_up if parent is not None else ()),
        )
        # where a queue whose usage changed puts itself (its ancestors changed too), shared by the
        # whole tree: the scheduler's view publishes those (``SchedulingView.track_usage``); None: nobody
        self.usage_changed: set[Queue] | None = parent.usage_changed if parent is not None else None
        self.running_apps = 0
        # the partition's resource epoch at which everything pending below was over a limit (-1: not)
        self.quota_blocked_at = -1
        # ask shape -> the queue (not the root) whose max the shape would pass, learnt at the resource
        # epoch ``over_quota_epoch``: within an epoch usage only grows and limits stay, so a verdict of
        # "over" holds until the epoch moves (the walk asks it again for every pending ask each cycle)
        self.over_quota_shapes: dict[Any, Queue] = {}
        self.over_quota_epoch = -1
        self.priority = MIN_PRIORITY
        # a leaf orders its applications, a parent its children
        self.order: IncrementalOrder[Any] = IncrementalOrder()
        # Effective max (own max limited by every ancestor's; root's is the cluster capacity) and the
        # limit used for fair shares of types without a guarantee. Refreshed by refresh_limits().
        self.effective_max: Resource | None = None
        # the denominator of each type's share in the fair order: guaranteed, else effective max
        self.share_base: Resource = {}
        # this queue and its ancestors that have a max, nearest first: the quota check's path
        self.limited_path: tuple[Queue, ...] = ()
        self.sort_policy = SORT_FIFO
        self.priority_sort_enabled = True
        self.priority_fence = False
        self.priority_offset = 0
        # the effective preemption.policy (default, fence, disabled) and preemption.delay in seconds
        self.preemption_policy = "default"
        self.preemption_delay = DEFAULT_PREEMPTION_DELAY
        self.unsched_backoff = 0
        self.unsched_backoff_delay = DEFAULT_BACKOFF_DELAY
        self.quota_preemption_delay = 0.0
        if parent is not None and managed:
            self.properties = inherited_properties(parent.properties)
            self._apply_property_settings()

    # ---- structure ---------------------------------------------------------------------------------

    @property
    def is_draining(self) -> bool:
        return self.state is QueueState.DRAINING

    @property
    def is_root(self) -> bool:
        return self.parent is None

    def ancestors_and_self(self) -> Iterator[Queue]:
        queue: Queue | None = self
        while queue is not None:
            yield queue
            queue = queue.parent

    def walk(self) -> Iterator[Queue]:
        """This queue and every queue below it, parents before children."""
        yield self
        for child in list(self.children.values()):
            yield from child.walk()

    def child_template(self) -> ChildTemplateConfig | None:
        """The template for dynamic children: this queue's own, else the nearest ancestor's."""
        queue: Queue | None = self
        while queue is not None:
            if queue.own_child_template is not None:
                return queue.own_child_template
            queue = queue.parent
        return None

    def is_empty(self) -> bool:
        return not self.children and not self.applications

    # ---- configuration -----------------------------------------------------------------------------

    def apply_spec(self, spec: QueueSpec) -> None:
        """Take the queue's configuration and state from ``spec`` (on creation, on every reload, when
        namespace tags change a dynamic queue). The fields below read the spec's values by reference;
        only this sets them. A queue with children stays a parent whatever its spec says."""
        self.spec = spec
        self.is_managed = spec.managed
        if not self.children:
            self.is_leaf = spec.leaf
        self.state = spec.state
        # An explicit 0 in max means "none of this type" (YuniKorn), so zeros are kept, not pruned.
        self.guaranteed = spec.guaranteed
        if not self.is_root:  # the root's max is the partition's capacity (``refresh_limits``)
            self.max = spec.max
        self.max_applications = spec.max_applications
        self.submit_acl = spec.submit_acl
        self.admin_acl = spec.admin_acl
        self.own_child_template = spec.child_template
        self.own_properties = spec.properties
        # an own property of a configured queue, never inherited nor templated
        delay = spec.properties.get(QUOTA_PREEMPTION_DELAY) if spec.managed else None
        self.quota_preemption_delay = _parse_quota_preemption_delay(delay)
        self._refresh_share_base()
        self.refresh_properties()

    def refresh_properties(self) -> None:
        """Recompute effective properties, then cascade to the children. A configured queue inherits
        its parent's; a queue placement created has only its own (its template's), as in YuniKorn."""
        parent = self.parent
        base = inherited_properties(parent.properties) if parent is not None and self.is_managed else {}
        base.update(self.own_properties)
        self.properties = base
        key_settings = (self.sort_policy, self.priority_sort_enabled)
        self._apply_property_settings()
        if self.order and key_settings != (self.sort_policy, self.priority_sort_enabled):
            # the members' keys change shape: never leave old and new keys mixed in one order
            self.rebuild_order()
        for child in self.children.values():
            child.refresh_properties()

    def _apply_property_settings(self) -> None:
        # case-sensitive, as YuniKorn's SortPolicyFromString: "FAIR" is not a policy and sorts fifo
        policy = self.properties.get(APPLICATION_SORT_POLICY, SORT_FIFO)
        self.sort_policy = policy if policy in (SORT_FIFO, SORT_FAIR, SORT_STATE_AWARE) else SORT_FIFO
        self.priority_sort_enabled = (
            self.properties.get(APPLICATION_SORT_PRIORITY, "enabled").lower() != "disabled"
        )
        self.priority_fence = self.properties.get(PRIORITY_POLICY, "default").lower() == "fence"
        self.priority_offset = parse_priority_offset(self.properties.get(PRIORITY_OFFSET, "0"))
        policy = self.properties.get(PREEMPTION_POLICY, "default").lower()
        self.preemption_policy = policy if policy in ("fence", "disabled") else "default"
        self.preemption_delay = parse_preemption_delay(self.properties.get(PREEMPTION_DELAY))
        self.unsched_backoff = _parse_backoff(self.properties.get(UNSCHED_ASKS_BACKOFF))
        self.unsched_backoff_delay = _parse_positive_delay(
            self.properties.get(UNSCHED_ASKS_BACKOFF_DELAY), DEFAULT_BACKOFF_DELAY
        )

    def refresh_limits(
        self, cluster_capacity: Resource | None = None, latencies: list[tuple[str, float]] | None = None
    ) -> None:
        """Recompute effective max here and below (on config change or cluster capacity change), then
        re-key every order here and below, each queue before its parent: a parent keys a child by the
        priority the child's own order gives it. Once per queue: a cluster's node churn calls this
        for every queue of the partition. ``latencies`` gets the time of each order that held anything."""
        subtree = self._refresh_limits_down(cluster_capacity)
        for queue in reversed(subtree):  # a pre-order reversed: every queue after all its descendants
            if (
                not queue.order
                and queue.priority == MIN_PRIORITY
                and not (queue.applications if queue.is_leaf else queue.pending)
            ):
                continue  # nothing to order: a parent orders children with pending, a leaf its apps
            if latencies is None:
                queue.rebuild_order()
                continue
            started = perf_counter()
            queue.rebuild_order()
            if queue.order:
                latencies.append(("sort_app" if queue.is_leaf else "sort_queue", perf_counter() - started))

    def _refresh_limits_down(self, cluster_capacity: Resource | None) -> list[Queue]:
        """Effective max, share base and limited path here and below, parents first; the queues in
        that order."""
        if self.parent is None:
            self.max = res.prune(cluster_capacity) if cluster_capacity else None
        visited: list[Queue] = []
        pending = [self]
        while pending:
            queue = pending.pop()
            visited.append(queue)
            parent = queue.parent
            if parent is None:
                queue.effective_max = dict(queue.max) if queue.max else None
            else:
                queue.effective_max = res.min_of_limits(queue.max, parent.effective_max)
            queue._refresh_share_base()
            above = parent.limited_path if parent is not None else ()
            queue.limited_path = (queue, *above) if queue.max is not None else above
            pending.extend(queue.children.values())
        return visited

    def _refresh_share_base(self) -> None:
        self.share_base = {**(self.effective_max or {}), **(self.guaranteed or {})}

    # ---- usage -------------------------------------------------------------------------------------

    def add_allocated(self, delta: Resource, times: int = 1) -> None:
        """Allocated usage changes here and in every ancestor."""
        changed = self.usage_changed
        if changed is not None:
            changed.add(self)
        queue: Queue | None = self
        while queue is not None:
            res.add_into(queue.allocated, delta, times)
            queue = queue.parent

    def add_pending(self, delta: Resource, times: int = 1) -> None:
        changed = self.usage_changed
        if changed is not None:
            changed.add(self)
        queue: Queue | None = self
        while queue is not None:
            res.add_into(queue.pending, delta, times)
            queue = queue.parent

    def fits_quota(self, ask: Resource) -> bool:
        """Would ``ask`` keep this queue and every ancestor within max (undefined types unlimited)?"""
        return self.over_quota(ask) is None

    def over_quota(self, ask: Resource) -> Queue | None:
        """The nearest queue on the path (this one or an ancestor) whose max ``ask`` would pass, if any.

        Walks ``limited_path`` (only the queues with a max), as of the last ``refresh_limits``.
        """
        for queue in self.limited_path:
            allocated = queue.allocated
            for name, maximum in queue.max.items():  # type: ignore[union-attr]
                quantity = ask.get(name)
                if quantity is not None and allocated.get(name, 0) + quantity > maximum:
                    return queue
        return None

    def headroom(self) -> Resource | None:
        """Min over this queue and its ancestors of (max - allocated), for the types limited."""
        result: Resource | None = None
        for queue in self.ancestors_and_self():
            result = res.min_of_limits(result, res.headroom(queue.max, queue.allocated))
        return result

    def can_run_app(self, app: Application) -> bool:
        """Max applications, checked at allocation time up the hierarchy (YuniKorn's canRunApp)."""
        if app.state in (ApplicationState.STARTING, ApplicationState.RUNNING):
            return True
        queue: Queue | None = self
        while queue is not None:
            if queue.max_applications and queue.running_apps >= queue.max_applications:
                return False
            queue = queue.parent
        return True

    def add_running_app(self, count: int) -> None:
        queue: Queue | None = self
        while queue is not None:
            queue.running_apps += count
            queue = queue.parent

    # ---- ordering ----------------------------------------------------------------------------------

    # the sort keys are the ordering policies (korral.policies.sorting), bound as methods
    app_key = sorting.app_key
    child_entry = sorting.child_entry

    def child_key(self, child: Queue) -> tuple[Any, ...]:
        """(priority, dominant share, larger pending first); with priority sorting disabled the share
        comes first and the priority only breaks its ties (YuniKorn's sortQueue)."""
        return self.child_entry(child)[:-1]

    def update_app(self, app: Application) -> None:
        """Re-key an application of this leaf after its pending, allocation or priority changed."""
        self.update_apps((app,))

    def update_apps(self, apps: Iterable[Application]) -> None:
        """Re-key applications of this leaf (one, or a request's worth), then this queue once in
        every ancestor, rather than once per application. An application without pending asks, or
        no longer here, leaves the order."""
        order = self.order
        members_changed = False
        for app in apps:
            if app.pending_asks and app.application_id in self.applications:
                change = order.update(app.application_id, app, self.app_key(app))
                # priority sorting on: the key leads with the priority, so an unmoved app kept its
                # priority; off, any change may have moved the highest one
                members_changed = members_changed or change != UNCHANGED or not self.priority_sort_enabled
            elif order.discard(app.application_id):
                members_changed = True
        self.refresh_up(members_changed)

    def app_allocated(self, app: Application, ask: Ask) -> None:
        """One repeat of ``ask`` of ``app`` was placed: the common case of ``update_app``, made cheap.

        Outside fair sorting an application's key is (priority, submission). Its priority (that of its
        highest pending ask) is unchanged while the ask is still pending, or when what is left pending
        has the placed ask's priority: then only this queue's usage moved, so only its place among its
        siblings can change.
        """
        pending_asks: IncrementalOrder[Ask] = app.pending_asks  # type: ignore[assignment]  # ordered
        if (
            self.sort_policy != SORT_FAIR
            and pending_asks.items
            # app.priority, inlined: the first pending ask leads with its priority, negated
            and (ask.pending > 0 or -pending_asks.entries[pending_asks.head][0] == ask.spec.priority)
        ):
            self.refresh_up(False)
        else:
            self.update_app(app)

    def refresh_up(self, members_changed: bool = True) -> None:
        """Re-key this queue in every ancestor up to the root, recomputing priorities on the way.

        A queue's priority depends only on which members its order holds and their priorities, so it
        is recomputed only where membership or a member's priority changed (``members_changed`` says
        so for this queue's own order).
        """
        queue = self
        recompute = members_changed
        while True:
            priority_changed = False
            if recompute:
                before = queue.priority
                if queue.order or before != MIN_PRIORITY:
                    queue._recompute_priority()
                    priority_changed = queue.priority != before
            parent = queue.parent
            if parent is None:
                return
            # pending is kept pruned and never negative: a non-empty dict means something is pending
            if queue.pending and queue.state is not _STOPPED:
                change = parent.order.place(queue.name, queue, parent.child_entry(queue))
                recompute = change == INSERTED or priority_changed
            else:
                recompute = parent.order.discard(queue.name)
            queue = parent

    def _recompute_priority(self) -> None:
        first = self.order.first()
        if first is None:
            self.priority = MIN_PRIORITY
            return
        if self.priority_sort_enabled:
            highest = first.priority
        else:
            highest = max(item.priority for item in self.order)
        if highest == MIN_PRIORITY:
            self.priority = MIN_PRIORITY
        elif self.priority_fence:
            self.priority = self.priority_offset
        elif self.priority_offset:
            self.priority = _clamp_priority(highest + self.priority_offset)
        else:
            self.priority = highest

    def rebuild_order(self) -> None:
        """Re-key every member (after a change to keys of all of them: limits, properties)."""
        self.order.clear()
        if self.is_leaf:
            for app in self.applications.values():
                if app.pending_asks:
                    self.order.update(app.application_id, app, self.app_key(app))
        else:
            for child in self.children.values():
                if child.state is not QueueState.STOPPED and child.pending:
                    self.order.place(child.name, child, self.child_entry(child))
        self._recompute_priority()
