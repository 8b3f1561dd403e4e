"""The owner's side of an application: authoritative asks, allocations and state, as plain code.

The Application actor is a thin shell around an ``ApplicationOwner``: each operation returns
``AppEffects`` saying what must be told to whom (the RM, the scheduler's view, the partition). An
operation validates before it changes anything, so a rejected request leaves no partial state.

Placements arrive already booked on a node in the scheduler's view, the one record of what runs on
a node (``confirm``): the owner accepts each one only if its ask still wants it (same ask generation,
something still pending, application still live); otherwise the view undoes it (``RollBack``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from korral import resource as res
from korral import si
from korral.model.allocation import Allocation, Ask, AskSpec, release_withdraws_ask, tag_allows_preemption
from korral.model.app.application import (
    Application,
    ApplicationEvent,
    ApplicationState,
    advance_after_allocation,
    advance_for_recovery,
)
from korral.model.app.spec import AppSpec
from korral.model.app.state import RUN_ON_ASK, TERMINAL_STATES, settle_event
from korral.model.creation import created_at
from korral.model.view_ops import (
    AdoptRecovered,
    DropAsk,
    Forget,
    MarkReleasing,
    OwnerState,
    PutAsks,
    RollBack,
    Swap,
    UndoReplacement,
    Unpreempt,
    ViewOp,
)

LIVE_FOR_ASKS = frozenset(
    {
        ApplicationState.NEW,
        ApplicationState.ACCEPTED,
        ApplicationState.STARTING,
        ApplicationState.RUNNING,
        ApplicationState.COMPLETING,
        ApplicationState.RESUMING,
    }
)


def ask_rejection(
    app: Application, allocation_key: str, resource: Mapping[str, int], max_allocations: int
) -> str:
    """Why an ask cannot be accepted for ``app``; "" when it can. Shared by every driver."""
    if not allocation_key:
        return "allocation key must not be empty"
    positive = False
    for quantity in resource.values():  # one pass: negative and all-zero checks together
        if quantity < 0:
            return f"allocation ask {allocation_key} contains negative resources"
        if quantity > 0:
            positive = True
    if not positive:
        return f"allocation ask {allocation_key} contains no resources"
    if max_allocations <= 0:
        # YuniKorn: an ask for no allocations is an invalid ask, not an ask for one
        return f"invalid ask {allocation_key}: max allocations {max_allocations}, it must be at least 1"
    if app.state not in LIVE_FOR_ASKS:
        return f"application {app.application_id} is {app.state.value}: no new asks accepted"
    return ""


def preemption_flags(request: si.AllocationAsk) -> tuple[bool, bool]:
    """(allow_preempt_self, allow_preempt_other) of an SI ask, as YuniKorn reads them: a missing
    policy may not preempt others and may itself be preempted, unless its allow-preemption tag says
    "false". Shared by every driver."""
    policy = request.preemption_policy
    if policy is None:
        tags = request.tags
        return (tag_allows_preemption(tags) if tags else True), False  # no tags: no call (most asks)
    return policy.allow_preempt_self, policy.allow_preempt_other


def build_ask(request: si.AllocationAsk, *, create_seq: int, now: float, generation: int = 0) -> Ask:
    """The model's ask for an SI ask (already validated); shared by every driver.

    The SI message is immutable and its dicts are private copies, so they are shared, not copied.
    """
    resource = request.resource_ask
    if 0 in resource.values():
        resource = res.prune(resource)
    allow_preempt_self, allow_preempt_other = preemption_flags(request)
    return Ask(
        AskSpec.build(
            allocation_key=request.allocation_key,
            application_id=request.application_id,
            resource=resource,
            max_allocations=request.max_allocations,
            priority=request.priority,
            # a re-sent ask keeps its age (YUNIKORN-2772): the tag, when it has one (plain asks: no tags)
            create_time=(created_at(request.tags, now) or now) if request.tags else now,
            tags=request.tags,
            placeholder=request.placeholder and bool(request.task_group_name),
            task_group_name=request.task_group_name,
            originator=request.originator,
            allow_preempt_self=allow_preempt_self,
            allow_preempt_other=allow_preempt_other,
            execution_timeout_ms=request.execution_timeout_milliseconds,
            generation=generation,
        ),
        create_seq,
    )


class AppEffects:
    """What operations on the owner require others to learn; one accumulates a whole burst.

    ``view_ops`` keeps the changes for the scheduler's view in the order they happened (a recovery
    followed by its release must reach the view in that order). A plain class whose containers
    are built as literals, not by a factory call each: an application's actor makes one per burst,
    two per allocation under a light load.
    """

    __slots__ = (
        "completing",
        "failed",
        "new_allocations",
        "node_removed",
        "recovered_gone",
        "rejected_asks",
        "released",
        "released_asks",
        "state_changes",
        "view_ops",
    )

    def __init__(self) -> None:
        self.new_allocations: list[Allocation] = []
        self.released: list[tuple[Allocation, si.TerminationType, str]] = []
        # uuids of released allocations whose node went away (their events: ALLOC_NODEREMOVED)
        self.node_removed: set[str] = set()
        self.rejected_asks: list[tuple[str, str]] = []
        self.state_changes: list[tuple[str, float]] = []
        self.view_ops: list[ViewOp] = []
        # uuids of recovered allocations no longer live here (released, or refused): the partition
        # checks recovered uuids for clashes and must learn when one is free again
        self.recovered_gone: list[str] = []
        self.completing = False
        # asks the core removed (timeouts), reported to the RM as released asks: (key, message)
        self.released_asks: list[tuple[str, str]] = []
        # the application reached Failed: it leaves the partition
        self.failed = False


# enum members read per allocation: a module global is several times cheaper than Enum.MEMBER
_ACCEPTED = ApplicationState.ACCEPTED
_STARTING = ApplicationState.STARTING


class ApplicationOwner:
    def __init__(self, app: Application) -> None:
        self.app = app
        self.removed = False
        self._ask_seq = 0
        # a state published since the view last booked may have crossed bookings still on their way
        # here (``_transition``): until Running is published, booked transitions are published too
        self._view_may_lag = False
        app.deadline_requests = []  # the actor starts a timer for every deadline the model sets

    def take_deadlines(self) -> list[float]:
        """Deadlines set since the last call (each needs a timer)."""
        requests = self.app.deadline_requests
        if not requests:
            return []
        self.app.deadline_requests = []
        return requests

    # ---- state -------------------------------------------------------------------------------------

    def _transition(
        self,
        event: ApplicationEvent,
        now: float,
        effects: AppEffects,
        *,
        booked: bool = False,
        on_ask: bool = False,
    ) -> bool:
        """Apply ``event``; True when the state changed. Any transition is published to the view
        (``OwnerState``) unless terminal (the view drops the application then) or ``booked``: one
        that follows from an allocation the view booked, and made there as it booked. But a state
        published while bookings were on their way (anything but a new ask running the application:
        the view books nothing for an ask it has not had) may have arrived after the view made them,
        and taken them back there: from then on until Running, booked ones are published too."""
        app = self.app
        if not app.try_handle(event, now):
            return False
        state = app.state
        effects.state_changes.append((state.value, now))
        if state is ApplicationState.COMPLETING:
            effects.completing = True
        if state in TERMINAL_STATES or (booked and not self._view_may_lag):
            return True
        effects.view_ops.append(OwnerState(state=state))
        if state is ApplicationState.RUNNING:
            self._view_may_lag = False
        elif not booked and not on_ask:
            self._view_may_lag = True
        return True

    def _maybe_complete(self, now: float, effects: AppEffects) -> None:
        app = self.app
        if self.removed:
            return  # the RM removed it: late releases must not report Completing / Completed
        event = settle_event(app)
        if event is ApplicationEvent.COMPLETE:
            self._transition(event, now, effects)
        elif event is ApplicationEvent.FAIL and self._transition(event, now, effects):
            effects.failed = True

    def completing_timeout(self, now: float, timeout: float, effects: AppEffects | None = None) -> AppEffects:
        """Completing for ``timeout`` with nothing left: Completed."""
        effects = effects if effects is not None else AppEffects()
        app = self.app
        if (
            not self.removed
            and app.state is ApplicationState.COMPLETING
            and app.is_idle()
            and now - app.state_time >= timeout - 1e-6
        ):
            self._transition(ApplicationEvent.COMPLETE, now, effects)
        return effects

    # ---- asks --------------------------------------------------------------------------------------

    def add_asks(
        self, asks: Iterable[si.AllocationAsk], now: float, effects: AppEffects | None = None
    ) -> AppEffects:
        effects = effects if effects is not None else AppEffects()
        app = self.app
        specs: list[AskSpec] = []  # for the view, as one PutAsks
        take = specs.append
        seq = self._ask_seq
        for request in asks:
            key = request.allocation_key
            reason = (
                "application removed"
                if self.removed
                else ask_rejection(app, key, request.resource_ask, request.max_allocations)
            )
            if reason:
                effects.rejected_asks.append((key, reason))
                continue
            # A replaced ask sends no drop_ask: the view replaces it in place when the put arrives;
            # dropping it first could leave the application idle there for a moment and complete it.
            seq += 1
            ask = build_ask(request, create_seq=seq, now=now, generation=app.next_generation())
            app.add_ask(ask)
            take(ask.spec)  # the view keeps its own progress on the same spec
            if app.state in RUN_ON_ASK:
                self._transition(ApplicationEvent.RUN, now, effects, on_ask=True)
        self._ask_seq = seq
        if specs:
            effects.view_ops.append(PutAsks(asks=tuple(specs)))
        return effects

    def remove_asks(
        self,
        allocation_keys: Iterable[str],
        now: float,
        effects: AppEffects | None = None,
        *,
        complete: bool = True,
    ) -> AppEffects:
        """Remove the named asks (all of them when no key is named)."""
        effects = effects if effects is not None else AppEffects()
        keys = list(allocation_keys) or list(self.app.asks)
        for key in keys:
            ask = self.app.remove_ask(key)
            if ask is None:
                continue
            effects.view_ops.append(DropAsk(allocation_key=key, generation=ask.generation))
        if complete:
            self._maybe_complete(now, effects)
        return effects

    # ---- placements --------------------------------------------------------------------------------

    def confirm(
        self, allocations: Iterable[Allocation], now: float, effects: AppEffects | None = None
    ) -> AppEffects:
        """Accept allocations the scheduler's view decided (and booked there on their nodes), or hand
        one back when its ask no longer wants it (the view undoes it)."""
        effects = effects if effects is not None else AppEffects()
        app = self.app
        asks = app.asks
        # read once: booking only ever moves a live application on to Running, which is live too
        live = not self.removed and app.state in LIVE_FOR_ASKS
        confirmed = effects.new_allocations.append
        for allocation in allocations:
            ask = asks.get(allocation.allocation_key)
            if (
                not live
                or ask is None
                or ask.spec.generation != allocation.ask_generation
                or ask.pending <= 0
            ):
                effects.view_ops.append(RollBack(allocation=allocation))
                continue
            app.book(ask, allocation)
            confirmed(allocation)
            state = app.state
            if state is _ACCEPTED or state is _STARTING:
                advance_after_allocation(
                    app,
                    allocation.placeholder,
                    lambda: self._transition(ApplicationEvent.RUN, now, effects, booked=True),
                )
            timeout_ms = ask.spec.execution_timeout_ms
            if allocation.placeholder or timeout_ms > 0:
                app.after_booking(allocation, timeout_ms, now)
        return effects

    def replace(self, real: Allocation, now: float, effects: AppEffects | None = None) -> AppEffects:
        """The scheduler decided that ``real`` replaces the placeholder it names: release the
        placeholder to the RM (PLACEHOLDER_REPLACED) and keep it booked until the RM confirms; or
        hand the decision back when the ask or the placeholder no longer allows it."""
        effects = effects if effects is not None else AppEffects()
        app = self.app
        ask = app.asks.get(real.allocation_key)
        placeholder = app.allocations.get(real.replaces)
        if (
            self.removed
            or ask is None
            or ask.generation != real.ask_generation
            or ask.pending <= 0
            or app.state not in LIVE_FOR_ASKS
            or placeholder is None
            or not placeholder.placeholder
            or real.replaces in app.releasing
            or not res.fits_in(real.resource, placeholder.resource)
        ):
            effects.view_ops.append(UndoReplacement(allocation=real))
            return effects
        app.take_pending(ask)
        app.begin_replacement(placeholder, real)
        effects.released.append(
            (placeholder, si.TerminationType.PLACEHOLDER_REPLACED, f"replaced by allocation {real.uuid}")
        )
        return effects

    def recover(
        self, allocations: Iterable[Allocation], now: float, effects: AppEffects | None = None
    ) -> AppEffects:
        """Existing allocations reported by the RM: accepted whatever the limits."""
        effects = effects if effects is not None else AppEffects()
        app = self.app
        recovered = 0
        for allocation in allocations:
            # A terminal application (Completed between its completing timeout and the partition
            # learning of it) has left the partition: nothing may be recovered onto it, else its node
            # keeps an allocation that no application owns.
            if self.removed or allocation.uuid in app.allocations or app.state not in LIVE_FOR_ASKS:
                effects.rejected_asks.append(
                    (allocation.allocation_key, f"allocation {allocation.uuid} cannot be recovered")
                )
                effects.recovered_gone.append(allocation.uuid)
                if allocation.uuid not in app.allocations:
                    # the partition adopted it in the scheduler's view with its node: undo that
                    effects.view_ops.append(Forget(allocation=allocation))
                continue
            app.add_allocation(allocation)
            if allocation.placeholder:
                app.after_booking(allocation, 0, now)
            effects.new_allocations.append(allocation)
            effects.view_ops.append(AdoptRecovered(allocation=allocation))
            recovered += 1
        if recovered:
            advance_for_recovery(
                app, lambda: self._transition(ApplicationEvent.RUN, now, effects, booked=True)
            )
        return effects

    # ---- releases ----------------------------------------------------------------------------------

    def _release(
        self,
        uuid: str,
        termination: si.TerminationType,
        message: str,
        effects: AppEffects,
        *,
        report: bool = True,
    ) -> None:
        app = self.app
        allocation = app.remove_allocation(uuid)
        if allocation is None:
            return
        if allocation.recovered:
            effects.recovered_gone.append(uuid)
        if report:
            effects.released.append((allocation, termination, message))
        effects.view_ops.append(Forget(allocation=allocation))  # the view undoes a waiting replacement itself
        real = app.drop_replacement(uuid) if app.replacements else None
        if real is not None:
            # the placeholder went another way than its replacement: the real ask waits again
            ask = app.asks.get(real.allocation_key)
            if ask is not None and ask.generation == real.ask_generation:
                app.return_pending(ask)

    def _swap_in(self, placeholder_uuid: str, real: Allocation, now: float, effects: AppEffects) -> None:
        """The RM confirmed a placeholder's replacement: the real allocation takes its place."""
        app = self.app
        ask = app.asks.get(real.allocation_key)
        placeholder = app.swap_in(placeholder_uuid, real, now, ask.execution_timeout_ms if ask else 0)
        if placeholder is None:
            return
        effects.view_ops.append(Swap(placeholder_uuid=placeholder_uuid, real=real))
        effects.new_allocations.append(real)
        if app.state is ApplicationState.ACCEPTED or app.state is ApplicationState.STARTING:
            advance_after_allocation(
                app, False, lambda: self._transition(ApplicationEvent.RUN, now, effects, booked=True)
            )

    def release(
        self, releases: Iterable[si.AllocationRelease], now: float, effects: AppEffects | None = None
    ) -> AppEffects:
        """RM releases: by uuid, else every allocation of the key (and its pending ask), else all of the
        application's."""
        effects = effects if effects is not None else AppEffects()
        app = self.app
        for release in releases:
            if release.uuid:
                targets = [release.uuid] if release.uuid in app.allocations else []
            elif release.allocation_key:
                targets = [a.uuid for a in app.allocations_for_key(release.allocation_key)]
            else:
                targets = list(app.allocations)
            termination = release.termination_type or si.TerminationType.STOPPED_BY_RM
            for uuid in targets:
                if app.releasing and app.is_confirmation(uuid, termination):
                    # the RM confirms a release the core made: not reported back to it
                    real = app.drop_replacement(uuid) if app.replacements else None
                    if real is not None:
                        self._swap_in(uuid, real, now, effects)
                    else:
                        self._release(uuid, termination, release.message, effects, report=False)
                    continue
                self._release(uuid, termination, release.message, effects)
            key = release.allocation_key
            if release_withdraws_ask(release.uuid, key, termination, app.asks.get(key)):
                self.remove_asks((key,), now, effects, complete=False)
        self._maybe_complete(now, effects)
        return effects

    # ---- timeouts ----------------------------------------------------------------------------------

    def expire(self, now: float, effects: AppEffects | None = None) -> AppEffects:
        """Apply the timeouts due at ``now`` (the application's ``due_timeouts`` plan)."""
        effects = effects if effects is not None else AppEffects()
        if self.removed:
            return effects
        app = self.app
        plan = app.due_timeouts(now)
        if not plan:
            return effects
        for allocation in plan.release:
            if app.mark_releasing(allocation.uuid, si.TerminationType.TIMEOUT) is not None:
                effects.released.append((allocation, si.TerminationType.TIMEOUT, plan.reason))
                effects.view_ops.append(
                    MarkReleasing(uuid=allocation.uuid, termination=int(si.TerminationType.TIMEOUT))
                )
        removed = [key for key in plan.remove_asks if key in app.asks]
        for key in removed:  # pending placeholders removed at the timeout count as timed out
            ask = app.asks[key]
            tally = app.placeholder_data.get(ask.task_group_name) if ask.placeholder else None
            if tally is not None:
                tally.timed_out += ask.pending
        if removed:
            self.remove_asks(removed, now, effects, complete=False)
            effects.released_asks.extend((key, plan.reason) for key in removed)
        for event in plan.events:
            self._transition(event, now, effects)
        self._maybe_complete(now, effects)
        return effects

    def preempt(
        self, uuids: Iterable[str], message: str, now: float, effects: AppEffects | None = None
    ) -> AppEffects:
        """The scheduler chose these allocations as preemption victims: each is released to the RM
        (PREEMPTED_BY_SCHEDULER) and stays booked until it confirms. One this owner does not hold, or
        is releasing already, is handed back to the view (it may not have been confirmed here yet)."""
        effects = effects if effects is not None else AppEffects()
        app = self.app
        termination = si.TerminationType.PREEMPTED_BY_SCHEDULER
        for uuid in uuids:
            allocation = None if self.removed else app.mark_releasing(uuid, termination)
            if allocation is None:
                effects.view_ops.append(Unpreempt(uuid=uuid))
                continue
            effects.released.append((allocation, termination, message))
        return effects

    def node_removed(
        self, node_id: str, uuids: Iterable[str], reason: str, now: float, effects: AppEffects | None = None
    ) -> AppEffects:
        """The node went away: its allocations are released (the view already dropped them; those
        this owner gave back or released meanwhile it no longer holds)."""
        effects = effects if effects is not None else AppEffects()
        for uuid in uuids:
            self._release(uuid, si.TerminationType.STOPPED_BY_RM, reason, effects)
            effects.node_removed.add(uuid)
        self._maybe_complete(now, effects)
        return effects

    def remove(self, reason: str, now: float, effects: AppEffects | None = None) -> AppEffects:
        """The RM removed the application: every ask goes and every allocation is released."""
        effects = self.remove_asks((), now, effects, complete=False)
        for uuid in list(self.app.allocations):
            self._release(uuid, si.TerminationType.STOPPED_BY_RM, reason, effects)
        self.removed = True
        return effects


def owned_application(
    spec: AppSpec, *, limit_group: str, submission_time: float, placeholder_timeout: float
) -> Application:
    """The application's owner's ``Application``: its state, asks and allocations around the spec the
    partition placed (shared, by reference). The owner never walks its asks in order (only the
    scheduler's view does)."""
    owned = Application(
        spec,
        submission_time=submission_time,
        ordered_asks=False,
        placeholder_timeout=placeholder_timeout,
    )
    owned.limit_group = limit_group
    return owned
