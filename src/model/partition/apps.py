"""A partition's applications and asks: placement, admission, state transitions and timeouts.

One part of a ``PartitionModel`` (``korral.model.partition.composed`` composes the parts and wires them): it
places applications (``place_application``: the Partition actor's registry does only that) and
owns the applications (by id) with their asks, the asks found unschedulable, and the applications
that may have a real ask for one of their placeholders. It places on the registry's queues
(``partition.registry``); removing an application releases its allocations through the allocations
part and drops its asks' reservations through the reservations part, both wired in by the partition.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Container, Iterable, Mapping
from typing import TYPE_CHECKING

from korral import resource as res
from korral import si
from korral.model.allocation import Allocation, Ask, AskSpec
from korral.model.app.application import RUNNING_STATES, Application, ApplicationEvent, ApplicationState
from korral.model.app.owner import ask_rejection, build_ask
from korral.model.app.spec import AppSpec
from korral.model.app.state import RUN_ON_ASK, settle_event
from korral.model.deadlines import reached
from korral.model.partition.effects import EffectsRecorder
from korral.model.partition.registry import ModelError, PartitionRegistry, UnschedulableAsk
from korral.model.queue import Queue, QueueState
from korral.model.ugm import AppUsage, QueueUsage, UserGroupTracker
from korral.policies.placement import (
    Placement,
    PlacementError,
    PlacementRequest,
    is_create_forced,
)
from korral.policies.sorting import SORT_FIFO
from korral.policies.usergroups import UserGroupError
from korral.resource import Resource

if TYPE_CHECKING:
    from korral.model.partition.allocations import PartitionAllocations
    from korral.model.reservations import Reservations

TAG_CREATE_FORCE = "application.create.force"


class PartitionApplications:
    """The applications of a partition and their asks."""

    def __init__(
        self,
        registry: PartitionRegistry,
        ugm: UserGroupTracker,
        effects: EffectsRecorder,
        *,
        clock: Callable[[], float] = time.monotonic,
        placeholder_timeout: float = 900.0,
    ) -> None:
        self.registry = registry
        self.queues = registry.queues  # the registry's (shared, never replaced)
        self.name = registry.name
        self.ugm = ugm
        self.effects = effects
        self.clock = clock
        self.placeholder_timeout = placeholder_timeout
        self.applications: dict[str, Application] = {}
        self.unschedulable: dict[tuple[str, str], UnschedulableAsk] = {}
        # applications that may have a real ask to put in an allocated placeholder of its task group
        self.replace_candidates: dict[str, Application] = {}
        self._app_seq = itertools.count(1)
        self._ask_seq = itertools.count(1)
        # the next ask's place in the partition's arrival order (ties in the ask order): the counter's
        # own C method, as the view numbers every ask it takes in with it
        self.next_ask_seq: Callable[[], int] = self._ask_seq.__next__

    def wire(self, allocations: PartitionAllocations, reservations: Reservations) -> None:
        """The parts an application's removal and an ask's replacement reach (made after this one)."""
        self.allocations = allocations
        self.reservations = reservations

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
        spec = self.place_application(
            application_id,
            known=self.applications,
            queue_name=queue_name,
            user=user,
            groups=groups,
            tags=tags,
            placeholder_ask=placeholder_ask,
            execution_timeout_ms=execution_timeout_ms,
            gang_scheduling_style=gang_scheduling_style,
        )
        return self.hold(spec)

    def hold(self, spec: AppSpec) -> Application:
        """Hold a placed application here, with its asks, allocations and state from now on."""
        app = Application(spec, submission_time=self.clock(), placeholder_timeout=self.placeholder_timeout)
        self.applications[spec.application_id] = app
        self.queues[spec.queue_path].applications[spec.application_id] = app
        self.track_user(app)
        return app

    def place_application(
        self,
        application_id: str,
        *,
        known: Container[str],
        queue_name: str = "",
        user: str = "",
        groups: Iterable[str] = (),
        tags: Mapping[str, str] | None = None,
        placeholder_ask: Mapping[str, int] | None = None,
        execution_timeout_ms: int = 0,
        gang_scheduling_style: str = "",
    ) -> AppSpec:
        """Place an application with the partition's rules and admit it to its queue (created when
        placement asks for it): what it is, as every holder shares it. ``known``: the ids the
        partition holds already. Raises ModelError with the rejection reason."""
        if not application_id:
            raise ModelError("application ID must not be empty")
        if application_id in known:
            raise ModelError(f"application {application_id} already exists in partition {self.name}")
        tags = dict(tags or {})
        forced = is_create_forced(tags)
        if not user:
            if not forced:
                raise ModelError(f"application {application_id} rejected: empty user cannot resolve")
            user, groups = "nobody", ("nogroup",)
        groups = tuple(groups)
        request = PlacementRequest(
            application_id=application_id, queue_name=queue_name, user=user, groups=groups, tags=tags
        )
        try:
            placement: Placement = self.registry.placement.place(request, self.registry)
        except PlacementError as error:
            raise ModelError(str(error)) from error
        queue = self.queues.get(placement.queue_path)
        if queue is None:
            try:
                queue = self.registry.create_queue(placement.queue_path)
            except ModelError as error:
                raise ModelError(
                    f"failed to create rule based queue {placement.queue_path} for application "
                    f"{application_id}: {error}"
                ) from error
        if not queue.is_leaf:
            raise ModelError(f"application {application_id} rejected: queue {queue.path} is not a leaf queue")
        if queue.state is not QueueState.ACTIVE:
            raise ModelError(
                f"application {application_id} rejected: queue {queue.path} is {queue.state.value}"
            )
        if not queue.is_managed:
            self.apply_namespace_tags(queue, tags)
        self._check_gang_admission(application_id, queue, res.prune(placeholder_ask or {}))
        return AppSpec(
            application_id=application_id,
            partition=self.name,
            queue_path=queue.path,
            user=user,
            groups=groups,
            tags=tags,
            submission_seq=next(self._app_seq),
            placeholder_ask=placeholder_ask,
            execution_timeout_ms=execution_timeout_ms,
            gang_scheduling_style=gang_scheduling_style,
        )

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
        self.registry.refresh_limits()
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
        """``add_application`` for an SI request (the reference's entry point)."""
        return self.hold(self.place_si_application(request, known=self.applications))

    def place_si_application(self, request: si.AddApplicationRequest, *, known: Container[str]) -> AppSpec:
        """``place_application`` for an SI request (every driver's entry point)."""
        ugi = request.ugi or si.UserGroupInformation()
        groups = ugi.groups
        if ugi.user and not groups:
            # YuniKorn resolves only a user sent without groups (korral.policies.usergroups)
            try:
                groups = self.registry.user_groups.groups(ugi.user)
            except UserGroupError as error:
                raise ModelError(f"application {request.application_id} rejected: {error}") from None
        return self.place_application(
            request.application_id,
            known=known,
            queue_name=request.queue_name,
            user=ugi.user,
            groups=groups,
            tags=request.tags,
            placeholder_ask=request.placeholder_ask,
            execution_timeout_ms=request.execution_timeout_milliseconds,
            gang_scheduling_style=request.gang_scheduling_style,
        )

    def apply_namespace_tags(self, queue: Queue, tags: Mapping[str, str]) -> None:
        """Quota tags on an application set limits on its queue when that queue is dynamic (not the
        recovery queue): the queue's next spec (``queue_spec.tagged``), made by its writer."""
        spec = self.registry.queue_specs.tag(queue.spec, tags)
        if spec is queue.spec:
            return
        limits_changed = (spec.max, spec.guaranteed) != (queue.spec.max, queue.spec.guaranteed)
        queue.apply_spec(spec)
        if limits_changed:
            self.registry.limits_dirty = True

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
        release = self.allocations.release_allocation
        released = [
            a
            for a in (release(application_id, uuid, complete=False) for uuid in list(app.allocations))
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

    def transition(self, app: Application, event: ApplicationEvent, message: str = "") -> bool:
        """Apply ``event`` and record the state change for the driver; True when the state changed."""
        was_running = app.state in RUNNING_STATES
        now = self.clock()
        if not app.try_handle(event, now):
            return False
        self.count_running(app, was_running)
        self.effects.state_change(app.application_id, app.state.value, now, message)
        return True

    def count_running(self, app: Application, was_running: bool) -> None:
        """Its queues' running applications (maxapplications) follow a change of its state."""
        running = app.state in RUNNING_STATES
        if running != was_running:
            queue = self.queues.get(app.queue_path)
            if queue is not None:
                queue.add_running_app(1 if running else -1)

    def run_on_ask(self, app: Application) -> None:
        """A new ask runs an application that is New, Completing or Resuming (runApplication)."""
        self.transition(app, ApplicationEvent.RUN)

    def maybe_complete(self, app: Application) -> None:
        event = settle_event(app)
        if event is ApplicationEvent.COMPLETE:
            self.transition(app, event)
        elif event is ApplicationEvent.FAIL:
            # Failing with nothing left: Failed, and the application leaves the partition
            self.transition(app, ApplicationEvent.FAIL)
            self.remove_application(app.application_id)

    def expire_completing(self, completing_timeout: float) -> list[str]:
        """Completing applications idle for ``completing_timeout`` become Completed and leave their queue."""
        now = self.clock()
        done: list[str] = []
        for app in list(self.applications.values()):
            if app.state is ApplicationState.COMPLETING and now - app.state_time >= completing_timeout:
                self.transition(app, ApplicationEvent.COMPLETE)
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
        spec = AskSpec.build(
            allocation_key=allocation_key,
            application_id=application_id,
            resource=res.prune(resource),
            max_allocations=max_allocations,
            priority=priority,
            create_time=self.clock(),
            tags=dict(tags or {}),
            placeholder=placeholder and bool(task_group_name),
            task_group_name=task_group_name,
            originator=originator,
            allow_preempt_self=allow_preempt_self,
            allow_preempt_other=allow_preempt_other,
            execution_timeout_ms=execution_timeout_ms,
            generation=app.next_generation(),
        )
        ask = Ask(spec, next(self._ask_seq))
        self.insert_ask(app, queue, ask)
        queue.update_app(app)
        return ask

    def add_si_asks(self, requests: Iterable[si.AllocationAsk]) -> list[tuple[si.AllocationAsk, str]]:
        """Add or replace the SI asks of one request, in order, each as ``add_ask`` would; every
        application touched is re-keyed in its queue once, not once per ask. Returns the rejected ones
        with their reasons."""
        rejected: list[tuple[si.AllocationAsk, str]] = []
        touched: dict[str, tuple[Application, Resource]] = {}
        now = self.clock()
        for request in requests:
            app_id = request.application_id
            entry = touched.get(app_id)
            app = entry[0] if entry is not None else self.applications.get(app_id)
            if app is None:
                rejected.append((request, f"failed to find application {app_id}"))
                continue
            reason = ask_rejection(app, request.allocation_key, request.resource_ask, request.max_allocations)
            if reason:
                rejected.append((request, reason))
                continue
            if entry is None:
                entry = touched[app_id] = (app, {})
            ask = build_ask(
                request, create_seq=next(self._ask_seq), now=now, generation=app.next_generation()
            )
            self.insert_ask(app, self.queues[app.queue_path], ask, entry[1])
        self.rekey_touched(touched)
        return rejected

    def rekey_touched(self, touched: dict[str, tuple[Application, Resource]]) -> None:
        """After a batch of new asks: each queue's pending grows once by its applications' total, and
        each queue re-keys its touched applications, then itself up the tree once (a request spreads
        over many applications of few queues). New asks may fit where the others did not: each
        application's and queue's mark of being blocked by a limit goes, once per batch."""
        by_queue: dict[str, tuple[Queue, list[Application], Resource]] = {}
        for app, pending in touched.values():
            app.quota_blocked_at = -1
            entry = by_queue.get(app.queue_path)
            if entry is None:
                by_queue[app.queue_path] = (self.queues[app.queue_path], [app], pending)
            else:
                entry[1].append(app)
                res.add_into(entry[2], pending)
        # every pending total first: a queue re-keyed in its parent reads the parent's siblings' too
        for queue, _, pending in by_queue.values():
            queue.add_pending(pending)
            q: Queue | None = queue
            while q is not None:  # every ancestor: one may be marked while a child below is not
                q.quota_blocked_at = -1
                q = q.parent
        for queue, apps, _ in by_queue.values():
            queue.update_apps(apps)

    def insert_ask(self, app: Application, queue: Queue, ask: Ask, pending: Resource | None = None) -> None:
        """Add or replace an ask; the caller re-keys the application once for a whole batch.

        With ``pending`` given (a batch: ``rekey_touched`` follows), the queue's pending increase is
        collected there for the caller to apply once, and the marks of being blocked by a limit go
        there too, instead of a walk up the queue path per ask.
        """
        spec = ask.spec
        allocation_key = spec.allocation_key
        old = app.asks.get(allocation_key)
        if old is not None:
            self.reservations.drop_ask_reservation(app, allocation_key)
            if old.pending > 0:
                queue.add_pending(old.resource, -old.pending)
            # the new ask has not failed yet: its outstanding entry (if any) belonged to the old one
            self.unschedulable.pop((app.application_id, allocation_key), None)
        app.add_ask(ask)
        if spec.task_group_name and not spec.placeholder and app.placeholders:
            self.replace_candidates[app.application_id] = app
        if pending is None:
            app.quota_blocked_at = -1  # a new ask may fit where the others did not
            q: Queue | None = queue
            while q is not None:  # every ancestor: one may be marked while a child below is not
                q.quota_blocked_at = -1
                q = q.parent
            queue.add_pending(spec.resource, ask.pending)
        else:
            repeats = ask.pending
            for name, quantity in spec.layout[0]:  # its resource_items (no property call)
                pending[name] = pending.get(name, 0) + quantity * repeats
        if app.state in RUN_ON_ASK:
            self.run_on_ask(app)

    def remove_ask(self, application_id: str, allocation_key: str, *, complete: bool = True) -> Ask | None:
        app = self.applications.get(application_id)
        if app is None:
            return None
        ask = app.asks.get(allocation_key)
        if ask is None:
            return None
        self.reservations.drop_ask_reservation(app, allocation_key)
        queue = self.queues[app.queue_path]
        if ask.pending > 0:
            queue.add_pending(ask.resource, -ask.pending)
        app.remove_ask(allocation_key)
        self.unschedulable.pop((application_id, allocation_key), None)
        queue.update_app(app)
        if complete:
            self.maybe_complete(app)
        return ask

    # ---- timeouts ----------------------------------------------------------------------------------

    def expire_timeouts(self) -> None:
        """Apply every timeout due now (placeholder, application and allocation execution timeouts).

        The reference calls this; the actors run each application's timers on the core's timer
        service and apply the same ``Application.due_timeouts`` plan in the application's owner."""
        now = self.clock()
        for app in list(self.applications.values()):
            deadline = app.next_deadline()
            if deadline is None or not reached(now, deadline):
                continue
            plan = app.due_timeouts(now)
            for allocation in plan.release:
                self.allocations.core_release(
                    app.application_id, allocation.uuid, si.TerminationType.TIMEOUT, plan.reason
                )
            for key in plan.remove_asks:
                if self.remove_ask(app.application_id, key, complete=False) is not None:
                    self.effects.released_ask(app.application_id, key, plan.reason)
            for event in plan.events:
                self.transition(app, event, plan.reason)
            self.maybe_complete(app)
