"""Applications: their asks and allocations, kept with incremental aggregates, and their timeouts.

The state machine they follow is ``korral.model.app.state``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs

from korral import resource as res
from korral import si
from korral.model.allocation import Allocation, Ask
from korral.model.app.spec import GANG_STYLE_HARD as GANG_STYLE_HARD
from korral.model.app.spec import AppSpec
from korral.model.app.state import (
    RUN_ON_ASK as RUN_ON_ASK,
)
from korral.model.app.state import (
    RUNNING_STATES as RUNNING_STATES,
)
from korral.model.app.state import (
    TERMINAL_STATES as TERMINAL_STATES,
)
from korral.model.app.state import (
    TRANSITIONS as TRANSITIONS,
)

# the state machine lives in app.state; its names stay importable from here
from korral.model.app.state import (
    ApplicationEvent as ApplicationEvent,
)
from korral.model.app.state import (
    ApplicationState as ApplicationState,
)
from korral.model.app.state import (
    InvalidTransition as InvalidTransition,
)
from korral.model.app.state import (
    S as S,
)
from korral.model.app.state import (
    advance_after_allocation as advance_after_allocation,
)
from korral.model.app.state import (
    advance_for_recovery as advance_for_recovery,
)
from korral.model.app.state import (
    next_state as next_state,
)
from korral.model.app.state import (
    settle_event as settle_event,
)
from korral.model.deadlines import reached
from korral.model.order import IncrementalOrder
from korral.model.ugm import AppTracking
from korral.resource import Resource
from korral.si.messages import CREATION_TIME

MIN_PRIORITY = -(1 << 31)
MAX_PRIORITY = (1 << 31) - 1

STATE_AWARE_DISABLE_TAG = "application.stateaware.disable"


# Releases the core makes itself: the allocation stays booked until the RM echoes the release back.
CORE_RELEASES = frozenset(
    {
        si.TerminationType.TIMEOUT,
        si.TerminationType.PREEMPTED_BY_SCHEDULER,
        si.TerminationType.PLACEHOLDER_REPLACED,
    }
)


@attrs.frozen(kw_only=True)
class TimeoutPlan:
    """What the timeouts due now do to an application (one rule for every driver).

    ``release``: allocations to release with TIMEOUT (core-made: they stay booked until confirmed);
    ``remove_asks``: asks to remove and report to the RM as released; ``events``: state transitions
    to apply in order.
    """

    release: tuple[Allocation, ...] = ()
    remove_asks: tuple[str, ...] = ()
    events: tuple[ApplicationEvent, ...] = ()
    reason: str = ""

    def __bool__(self) -> bool:
        return bool(self.release or self.remove_asks or self.events)


@attrs.define(slots=True)
class PlaceholderTally:
    """YuniKorn's placeholder data of one task group: placeholders asked for, the first one's
    resource, how many were replaced by real allocations and how many ended otherwise (timed out)."""

    count: int = 0
    min_resource: Resource = attrs.field(factory=dict)
    replaced: int = 0
    timed_out: int = 0


class PendingKeys:
    """The keys of asks with something pending, unordered: for an owner that never walks its asks in
    request order (the application actor); it has the ordering's interface, without its upkeep."""

    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: dict[str, Ask] = {}

    def add_new(self, name: str, item: Ask, key: tuple[Any, ...]) -> None:
        self.items[name] = item

    update = add_new

    def discard(self, name: str) -> None:
        self.items.pop(name, None)

    def first(self) -> Ask | None:
        return None

    def first_entry(self) -> None:
        return None  # no order: the application's priority is not tracked here

    def __len__(self) -> int:
        return len(self.items)

    def __bool__(self) -> bool:
        return bool(self.items)

    def __contains__(self, name: str) -> bool:
        return name in self.items

    def __iter__(self) -> Iterator[Ask]:
        return iter(self.items.values())


class Application:
    """An application's asks, allocations and state.

    ``allocated`` and ``placeholder_allocated`` are kept incrementally: nothing is rescanned per
    allocation. What it still asks for, ``pending``, is its asks' pending repeats, read only by
    snapshots, so it is summed when read, not kept per ask by every holder; the queues keep their own
    pending totals, which the walk does read. Asks with something still to place are kept in request
    order (priority, then age).
    """

    def __init__(
        self,
        spec: AppSpec,
        *,
        submission_time: float = 0.0,
        ordered_asks: bool = True,
        placeholder_timeout: float = 900.0,
        recorded: bool = True,
    ) -> None:
        """``ordered_asks``: False for a holder that never walks its asks in request order (the
        owner); ``recorded``: False for one that keeps no record of the application (state log,
        placeholder tallies) and runs none of its timeouts (the scheduler's view: its owner does)."""
        # what the application is (shared, immutable); everything below is this holder's own
        self.spec = spec
        # lowered when a recovered allocation is older (YUNIKORN-2772)
        self.submission_time = submission_time
        self.state = ApplicationState.NEW
        self.state_time = submission_time
        # (core clock time, state entered) of every transition: YuniKorn's application state log
        self.state_log: list[tuple[float, str]] = []
        # the most allocated at once, per resource (YuniKorn's maxAllocatedResource)
        self.max_allocated: Resource = {}
        # resource-seconds of released allocations: used, preempted, placeholder, each per instance type
        # (YuniKorn's tracked resources: the application summary and the REST resourceHistory)
        self.resource_seconds: dict[str, dict[str, dict[str, int]]] = {}
        self.asks: dict[str, Ask] = {}
        # request order (priority, then age) for schedulers; an owner that only counts uses PendingKeys
        self.pending_asks: IncrementalOrder[Ask] | PendingKeys = (
            IncrementalOrder() if ordered_asks else PendingKeys()
        )
        self.allocations: dict[str, Allocation] = {}
        self.allocated: Resource = {}
        self.placeholder_allocated: Resource = {}
        # task group -> its placeholder data (YuniKorn's placeholderData), kept once counted
        self.placeholder_data: dict[str, PlaceholderTally] = {}
        # allocation_key -> node_id of the reservations this application holds
        self.reservations: dict[str, str] = {}
        # the group its usage is tracked against for user/group limits ("" none), resolved when added
        self.limit_group = ""
        # its user/group limits tracking (model.ugm.AppTracking); None while no limit applies to it
        self.user_limits: AppTracking | None = None
        # the partition's resource epoch at which every pending ask was over a queue limit (-1: not)
        self.quota_blocked_at = -1
        # YUNIKORN-3115: no scheduling from this application before this moment (the partition's
        # clock); set when its queue's application.unschedasks.backoff asks in a row fit no node
        self.backoff_deadline: float | None = None
        # may it run under its queues' and its user's and group's maxapplications, as last found
        self.runnable_in_queue = True
        self.runnable_by_quota = True
        self.state_aware_disabled = spec.tags.get(STATE_AWARE_DISABLE_TAG, "").lower() == "true"
        self._ask_generation = 0
        # ---- gang scheduling and timeouts ----
        # allocated placeholders free for replacement, per task group (uuid -> allocation)
        self.placeholders: dict[str, dict[str, Allocation]] = {}
        # allocations the core released (termination type), booked until the RM confirms
        self.releasing: dict[str, si.TerminationType] = {}
        # placeholder uuid -> the real allocation made on its node once the RM confirms the release
        self.replacements: dict[str, Allocation] = {}
        # the placeholder timeout: the application's execution timeout, else the core's setting
        self.placeholder_timeout = (
            spec.execution_timeout_ms / 1000 if spec.execution_timeout_ms > 0 else placeholder_timeout
        )
        self.placeholder_deadline: float | None = None
        self.run_deadline: float | None = None
        self.allocation_deadlines: dict[str, float] = {}
        self._timers_started: set[str] = set()
        # deadlines set since the driver last looked (an actor starts a timer for each); None: not kept
        self.deadline_requests: list[float] | None = None
        self.recorded = recorded
        # a real ask of a task group has been asked for: placeholders may be replaced from now on
        self.real_group_asks = False

    @classmethod
    def new(
        cls,
        application_id: str,
        *,
        submission_time: float = 0.0,
        ordered_asks: bool = True,
        placeholder_timeout: float = 900.0,
        **spec: Any,
    ) -> Application:
        """An application of a spec built from ``spec``'s fields (``AppSpec``'s names)."""
        return cls(
            AppSpec(application_id=application_id, **spec),
            submission_time=submission_time,
            ordered_asks=ordered_asks,
            placeholder_timeout=placeholder_timeout,
        )

    # ---- the spec's fields, read through ----------------------------------------------------------

    @property
    def application_id(self) -> str:
        return self.spec.application_id

    @property
    def partition(self) -> str:
        return self.spec.partition

    @property
    def queue_path(self) -> str:
        return self.spec.queue_path

    @property
    def user(self) -> str:
        return self.spec.user

    @property
    def groups(self) -> tuple[str, ...]:
        return self.spec.groups

    @property
    def tags(self) -> dict[str, str]:
        return self.spec.tags

    @property
    def submission_seq(self) -> int:
        return self.spec.submission_seq

    @property
    def placeholder_ask(self) -> Resource:
        return self.spec.placeholder_ask

    @property
    def execution_timeout_ms(self) -> int:
        return self.spec.execution_timeout_ms

    @property
    def gang_scheduling_style(self) -> str:
        return self.spec.gang_scheduling_style

    # ---- state -------------------------------------------------------------------------------------

    def handle(self, event: ApplicationEvent, now: float = 0.0) -> ApplicationState:
        """Apply an event; a transition to the same state is a no-op. Returns the new state."""
        new = next_state(self.state, event)
        if new is not self.state:
            self._enter(new, now)
        return new

    def try_handle(self, event: ApplicationEvent, now: float = 0.0) -> bool:
        """Apply an event if the state machine allows it; True when the state changed."""
        new = TRANSITIONS.get((event, self.state))
        if new is None or new is self.state:
            return False
        self._enter(new, now)
        return True

    def _enter(self, new: ApplicationState, now: float) -> None:
        self.state = new
        self.state_time = now
        if not self.recorded:
            return
        self.state_log.append((now, new.value))
        # a non-gang application's execution timeout starts when it first runs (the seed's meaning)
        if (
            new is S.RUNNING
            and self.execution_timeout_ms > 0
            and not self.placeholder_ask
            and "app" not in self._timers_started
        ):
            self._timers_started.add("app")
            self.run_deadline = self._deadline(now + self.execution_timeout_ms / 1000)

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def priority(self) -> int:
        """The highest priority among asks with something to place; MIN_PRIORITY when none."""
        # pending asks are keyed (-priority, age): the first entry holds the highest priority
        first = self.pending_asks.first_entry()
        return -first[0] if first is not None else MIN_PRIORITY

    def has_pending(self) -> bool:
        return len(self.pending_asks) > 0

    # ---- asks --------------------------------------------------------------------------------------

    def next_generation(self) -> int:
        self._ask_generation += 1
        return self._ask_generation

    def add_ask(self, ask: Ask) -> Ask | None:
        """Add an ask, replacing one with the same key (its allocations stay). Returns the replaced ask."""
        spec = ask.spec  # read once: this runs once per ask received by each holder
        key = spec.allocation_key
        old = self.remove_ask(key) if key in self.asks else None
        if spec.generation == 0:
            self._ask_generation += 1
            spec = ask.spec = spec.with_generation(self._ask_generation)
        self.asks[key] = ask
        if spec.placeholder and old is None and self.recorded:
            tally = self.placeholder_data.get(spec.task_group_name)
            if tally is None:
                tally = self.placeholder_data[spec.task_group_name] = PlaceholderTally(
                    min_resource=dict(spec.resource)
                )
            tally.count += ask.pending
        if spec.task_group_name and not spec.placeholder:
            self.real_group_asks = True
        if ask.pending > 0:
            pending_asks = self.pending_asks
            if type(pending_asks) is PendingKeys:
                pending_asks.items[key] = ask  # the owner's: no sort key to build, once per ask
            else:
                pending_asks.add_new(key, ask, (-spec.priority, spec.create_time, ask.create_seq))
        if spec.tags and CREATION_TIME in spec.tags and spec.create_time < self.submission_time:
            self.submission_time = spec.create_time  # an older re-sent ask (YUNIKORN-2772)
        return old

    def remove_ask(self, allocation_key: str) -> Ask | None:
        ask = self.asks.pop(allocation_key, None)
        if ask is None:
            return None
        self.pending_asks.discard(allocation_key)
        return ask

    def take_pending(self, ask: Ask) -> None:
        """One repeat of the ask is being placed: pending down by one."""
        ask.pending -= 1
        ask.allocated_count += 1
        if ask.pending <= 0:
            self.pending_asks.discard(ask.allocation_key)

    def book(self, ask: Ask, allocation: Allocation) -> None:
        """``take_pending`` then ``add_allocation`` (once per allocation)."""
        ask.pending -= 1
        ask.allocated_count += 1
        self.allocations[allocation.uuid] = allocation
        allocated = self.allocated
        for name, quantity in ask.spec.layout[0]:  # its resource_items, positive: only grows
            allocated[name] = allocated.get(name, 0) + quantity
        if allocation.placeholder:
            res.add_into(self.placeholder_allocated, allocation.resource)
            self.placeholders.setdefault(allocation.task_group_name, {})[allocation.uuid] = allocation
        if ask.pending <= 0:
            self.pending_asks.discard(allocation.allocation_key)

    def return_pending(self, ask: Ask) -> None:
        """Undo ``take_pending`` (a placement was not confirmed)."""
        ask.pending += 1
        ask.allocated_count -= 1
        if ask.pending == 1:
            self.pending_asks.update(ask.allocation_key, ask, ask.sort_key)

    @property
    def pending(self) -> Resource:
        """What its asks still ask for: each one's resource times its pending repeats (pruned; a new
        dict per read)."""
        pending: Resource = {}
        for ask in self.asks.values():
            if ask.pending > 0:
                res.add_into(pending, ask.resource, ask.pending)
        return pending

    def iter_pending_asks(self) -> Iterator[Ask]:
        return iter(self.pending_asks)

    # ---- allocations -------------------------------------------------------------------------------

    def add_allocation(self, allocation: Allocation) -> None:
        self.allocations[allocation.uuid] = allocation
        res.add_into(self.allocated, allocation.resource)
        if allocation.placeholder:
            res.add_into(self.placeholder_allocated, allocation.resource)
            self.placeholders.setdefault(allocation.task_group_name, {})[allocation.uuid] = allocation

    def remove_allocation(self, uuid: str, replaced: bool = False) -> Allocation | None:
        """Remove an allocation (and its releasing mark and deadline). A replacement waiting on it is
        the caller's to drop (``drop_replacement``): the ask it took a repeat from must get it back.
        A placeholder counts as ``replaced`` or else (as YuniKorn counts it) as timed out."""
        allocation = self.allocations.pop(uuid, None)
        if allocation is not None:
            res.sub_into(self.allocated, allocation.resource)
            if allocation.placeholder:
                tally = self.placeholder_data.get(allocation.task_group_name)
                if tally is not None:
                    if replaced:
                        tally.replaced += 1
                    else:
                        tally.timed_out += 1
                res.sub_into(self.placeholder_allocated, allocation.resource)
                self._unindex_placeholder(allocation)
            if self.releasing:
                self.releasing.pop(uuid, None)
            if self.allocation_deadlines:
                self.allocation_deadlines.pop(uuid, None)
        return allocation

    def allocations_for_key(self, allocation_key: str) -> list[Allocation]:
        return [a for a in self.allocations.values() if a.allocation_key == allocation_key]

    def is_idle(self) -> bool:
        """Nothing pending and nothing allocated: the point where YuniKorn completes an application."""
        return not self.asks_pending_any() and not self.allocations

    def asks_pending_any(self) -> bool:
        return len(self.pending_asks) > 0

    # ---- core-made releases, replacement and timeouts ----------------------------------------------

    def _unindex_placeholder(self, allocation: Allocation) -> None:
        group = self.placeholders.get(allocation.task_group_name)
        if group is not None:
            group.pop(allocation.uuid, None)
            if not group:
                del self.placeholders[allocation.task_group_name]

    def mark_releasing(self, uuid: str, termination: si.TerminationType) -> Allocation | None:
        """The core releases an allocation: it stays booked until the RM confirms. None when it is
        not allocated or already being released."""
        allocation = self.allocations.get(uuid)
        if allocation is None or uuid in self.releasing:
            return None
        self.releasing[uuid] = termination
        if allocation.placeholder:
            self._unindex_placeholder(allocation)
        return allocation

    def unmark_releasing(self, uuid: str) -> None:
        """Undo ``mark_releasing`` (a replacement its owner refused)."""
        if self.releasing.pop(uuid, None) is None:
            return
        allocation = self.allocations.get(uuid)
        if allocation is not None and allocation.placeholder:
            self.placeholders.setdefault(allocation.task_group_name, {})[uuid] = allocation

    def is_confirmation(self, uuid: str, termination: si.TerminationType) -> bool:
        """An RM release of ``uuid`` with this termination confirms a release the core made."""
        return self.releasing.get(uuid) == termination

    def placeholder_for(self, ask: Ask) -> Allocation | None:
        """An allocated placeholder of the ask's task group the (real) ask fits in, oldest first."""
        group = self.placeholders.get(ask.task_group_name) if not ask.placeholder else None
        if not group:
            return None
        for placeholder in group.values():
            if res.fits_in(ask.resource, placeholder.resource):
                return placeholder
        return None

    def begin_replacement(self, placeholder: Allocation, real: Allocation) -> None:
        """``real`` will replace ``placeholder`` once the RM confirms its PLACEHOLDER_REPLACED release."""
        self.mark_releasing(placeholder.uuid, si.TerminationType.PLACEHOLDER_REPLACED)
        self.replacements[placeholder.uuid] = real

    def drop_replacement(self, placeholder_uuid: str) -> Allocation | None:
        """Forget the replacement waiting on a placeholder (confirmed, refused or the placeholder gone)."""
        return self.replacements.pop(placeholder_uuid, None) if self.replacements else None

    def swap_in(
        self, placeholder_uuid: str, real: Allocation, now: float, ask_timeout_ms: int
    ) -> Allocation | None:
        """The RM confirmed the replacement: the placeholder leaves, the real allocation takes its
        place. Returns the placeholder (None if it is gone: nothing changes)."""
        placeholder = self.remove_allocation(placeholder_uuid, replaced=True)
        if placeholder is None:
            return None
        self.add_allocation(real)
        if ask_timeout_ms > 0:
            self.after_booking(real, ask_timeout_ms, now)
        return placeholder

    def _deadline(self, when: float) -> float:
        if self.deadline_requests is not None:
            self.deadline_requests.append(when)
        return when

    def after_booking(self, allocation: Allocation, ask_timeout_ms: int, now: float) -> None:
        """Start the timers an allocation starts: the placeholder timeout at the first placeholder,
        the ask's execution timeout for each of its allocations. Callers skip this when neither applies."""
        if not self.recorded:
            return
        if allocation.placeholder:
            if "placeholder" not in self._timers_started:
                self._timers_started.add("placeholder")
                self.placeholder_deadline = self._deadline(now + self.placeholder_timeout)
        elif ask_timeout_ms > 0:
            self.allocation_deadlines[allocation.uuid] = self._deadline(now + ask_timeout_ms / 1000)

    def next_deadline(self) -> float | None:
        candidates = [d for d in (self.placeholder_deadline, self.run_deadline) if d is not None]
        if self.allocation_deadlines:
            candidates.append(min(self.allocation_deadlines.values()))
        return min(candidates) if candidates else None

    def due_timeouts(self, now: float) -> TimeoutPlan:
        """Take the timeouts due at ``now`` and say what they do (reference 2.12; api.md execution
        timeouts). Each deadline fires once."""
        release: dict[str, Allocation] = {}
        remove: list[str] = []
        events: list[ApplicationEvent] = []
        reasons: list[str] = []
        state = self.state
        if self.placeholder_deadline is not None and reached(now, self.placeholder_deadline):
            self.placeholder_deadline = None
            unused = [a for group in self.placeholders.values() for a in group.values()]
            # asks with nothing left to place stay: their allocations tell the rest of the story
            waiting = [key for key, ask in self.asks.items() if ask.placeholder and ask.pending > 0]
            for allocation in unused:
                release[allocation.uuid] = allocation
            if state in (S.STARTING, S.RUNNING, S.COMPLETING):
                remove.extend(waiting)
            elif state in (S.NEW, S.ACCEPTED):
                if self.gang_scheduling_style == GANG_STYLE_HARD:
                    events.append(ApplicationEvent.FAIL)
                    remove.extend(key for key, ask in self.asks.items() if ask.pending > 0)
                else:
                    events.append(ApplicationEvent.RESUME)
                    remove.extend(waiting)
                    if any(not ask.placeholder and ask.pending > 0 for ask in self.asks.values()):
                        events.append(ApplicationEvent.RUN)  # on as a normal application
            if release or remove or events:
                reasons.append(f"placeholder timeout of application {self.application_id}")
        if self.run_deadline is not None and reached(now, self.run_deadline):
            self.run_deadline = None
            if state in RUNNING_STATES:
                for uuid, allocation in self.allocations.items():
                    if uuid not in self.releasing:
                        release[uuid] = allocation
                remove.extend(key for key, ask in self.asks.items() if ask.pending > 0)
                events.append(ApplicationEvent.FAIL)
                reasons.append(f"execution timeout of application {self.application_id}")
        if self.allocation_deadlines:
            for uuid, deadline in list(self.allocation_deadlines.items()):
                if reached(now, deadline):
                    del self.allocation_deadlines[uuid]
                    expiring = self.allocations.get(uuid)
                    if expiring is not None and uuid not in self.releasing:
                        release[uuid] = expiring
                        if not reasons:
                            reasons.append(f"execution timeout of allocation {uuid}")
        return TimeoutPlan(
            release=tuple(release.values()),
            remove_asks=tuple(dict.fromkeys(remove)),
            events=tuple(events),
            reason="; ".join(reasons),
        )

    def may_fail_finally(self) -> bool:
        """Failing with nothing left booked: the second failApplication makes it Failed."""
        return self.state is S.FAILING and not self.allocations
