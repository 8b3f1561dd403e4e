"""Applications: their asks and allocations, kept with incremental aggregates, and their state machine."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator

from korral.model import resource as res
from korral.model.allocation import Allocation, Ask
from korral.model.resource import Resource
from korral.model.ugm import AppTracking
from korral.policies.ordering import IncrementalOrder

MIN_PRIORITY = -(1 << 31)
MAX_PRIORITY = (1 << 31) - 1

STATE_AWARE_DISABLE_TAG = "application.stateaware.disable"


class ApplicationState(enum.StrEnum):
    NEW = "New"
    ACCEPTED = "Accepted"
    STARTING = "Starting"
    RUNNING = "Running"
    COMPLETING = "Completing"
    COMPLETED = "Completed"
    REJECTED = "Rejected"
    FAILING = "Failing"
    FAILED = "Failed"
    EXPIRED = "Expired"
    RESUMING = "Resuming"


class ApplicationEvent(enum.StrEnum):
    RUN = "runApplication"
    COMPLETE = "completeApplication"
    REJECT = "rejectApplication"
    FAIL = "failApplication"
    RESUME = "resumeApplication"
    EXPIRE = "expireApplication"


S = ApplicationState
# (event, source state) -> destination: the seeds' state machine (YuniKorn 1.x with Starting).
TRANSITIONS: dict[tuple[ApplicationEvent, ApplicationState], ApplicationState] = {
    (ApplicationEvent.RUN, S.NEW): S.ACCEPTED,
    (ApplicationEvent.RUN, S.RESUMING): S.ACCEPTED,
    (ApplicationEvent.RUN, S.ACCEPTED): S.STARTING,
    (ApplicationEvent.RUN, S.STARTING): S.RUNNING,
    (ApplicationEvent.RUN, S.RUNNING): S.RUNNING,
    (ApplicationEvent.RUN, S.COMPLETING): S.RUNNING,
    (ApplicationEvent.COMPLETE, S.ACCEPTED): S.COMPLETING,
    (ApplicationEvent.COMPLETE, S.STARTING): S.COMPLETING,
    (ApplicationEvent.COMPLETE, S.RUNNING): S.COMPLETING,
    (ApplicationEvent.COMPLETE, S.COMPLETING): S.COMPLETED,
    (ApplicationEvent.REJECT, S.NEW): S.REJECTED,
    (ApplicationEvent.FAIL, S.NEW): S.FAILING,
    (ApplicationEvent.FAIL, S.ACCEPTED): S.FAILING,
    (ApplicationEvent.FAIL, S.STARTING): S.FAILING,
    (ApplicationEvent.FAIL, S.RUNNING): S.FAILING,
    (ApplicationEvent.FAIL, S.FAILING): S.FAILED,
    (ApplicationEvent.RESUME, S.NEW): S.RESUMING,
    (ApplicationEvent.RESUME, S.ACCEPTED): S.RESUMING,
    (ApplicationEvent.EXPIRE, S.COMPLETED): S.EXPIRED,
    (ApplicationEvent.EXPIRE, S.FAILED): S.EXPIRED,
    (ApplicationEvent.EXPIRE, S.REJECTED): S.EXPIRED,
}

TERMINAL_STATES = frozenset({S.COMPLETED, S.FAILED, S.REJECTED, S.EXPIRED})
# States in which an application counts against its queues' max applications.
RUNNING_STATES = frozenset({S.STARTING, S.RUNNING})


# States from which recovered allocations (work the RM already runs) carry an application on to Running.
RECOVERY_ADVANCES_FROM = frozenset({S.NEW, S.ACCEPTED, S.STARTING, S.RESUMING, S.COMPLETING})


def advance_for_recovery(app: Application, run: Callable[[], bool]) -> None:
    """Apply ``run`` (one RUN event, True when the state changed) until the application is Running
    or stops moving; each driver passes its own transition so that it records the changes its way."""
    while app.state in RECOVERY_ADVANCES_FROM and run():
        pass


class InvalidTransition(Exception):
    def __init__(self, event: ApplicationEvent, state: ApplicationState) -> None:
        super().__init__(f"event {event.value} inappropriate in current state {state.value}")
        self.event = event
        self.state = state


def next_state(state: ApplicationState, event: ApplicationEvent) -> ApplicationState:
    """The state ``event`` leads to from ``state``; raises InvalidTransition when it is not allowed."""
    try:
        return TRANSITIONS[(event, state)]
    except KeyError:
        raise InvalidTransition(event, state) from None


class PendingKeys:
    """The keys of asks with something pending, unordered: for an owner that never walks its asks in
    request order (the application actor); it has the ordering's interface, without its upkeep."""

    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: dict[str, Ask] = {}

    def add_new(self, name: str, item: Ask, key: tuple) -> None:
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

    ``pending`` (sum of resource x pending repeats over asks), ``allocated`` and ``placeholder_allocated``
    are kept incrementally: nothing is rescanned per allocation. Asks with something still to place are
    kept in request order (priority, then age).
    """

    def __init__(
        self,
        application_id: str,
        *,
        partition: str = "",
        queue_path: str = "",
        user: str = "",
        groups: tuple[str, ...] = (),
        tags: dict[str, str] | None = None,
        submission_seq: int = 0,
        submission_time: float = 0.0,
        placeholder_ask: Resource | None = None,
        execution_timeout_ms: int = 0,
        gang_scheduling_style: str = "Soft",
        ordered_asks: bool = True,
    ) -> None:
        self.application_id = application_id
        self.partition = partition
        self.queue_path = queue_path
        self.user = user
        self.groups = tuple(groups)
        self.tags: dict[str, str] = dict(tags or {})
        self.submission_seq = submission_seq
        self.submission_time = submission_time
        self.placeholder_ask: Resource = res.prune(placeholder_ask or {})
        self.execution_timeout_ms = execution_timeout_ms
        self.gang_scheduling_style = "Hard" if gang_scheduling_style == "Hard" else "Soft"
        self.state = ApplicationState.NEW
        self.state_time = submission_time
        self.asks: dict[str, Ask] = {}
        # request order (priority, then age) for schedulers; an owner that only counts uses PendingKeys
        self.pending_asks: IncrementalOrder[Ask] | PendingKeys = (
            IncrementalOrder() if ordered_asks else PendingKeys()
        )
        self.allocations: dict[str, Allocation] = {}
        self.pending: Resource = {}
        self.allocated: Resource = {}
        self.placeholder_allocated: Resource = {}
        # allocation_key -> node_id of the reservations this application holds
        self.reservations: dict[str, str] = {}
        # the group its usage is tracked against for user/group limits ("" none), resolved when added
        self.limit_group = ""
        # its user/group limits tracking (model.ugm.AppTracking); None while no limit applies to it
        self.user_limits: AppTracking | None = None
        # the partition's resource epoch at which every pending ask was over a queue limit (-1: not)
        self.quota_blocked_at = -1
        self.state_aware_disabled = self.tags.get(STATE_AWARE_DISABLE_TAG, "").lower() == "true"
        self._ask_generation = 0

    # ---- state -------------------------------------------------------------------------------------

    def handle(self, event: ApplicationEvent, now: float = 0.0) -> ApplicationState:
        """Apply an event; a transition to the same state is a no-op. Returns the new state."""
        new = next_state(self.state, event)
        if new is not self.state:
            self.state = new
            self.state_time = now
        return new

    def try_handle(self, event: ApplicationEvent, now: float = 0.0) -> bool:
        """Apply an event if the state machine allows it; True when the state changed."""
        new = TRANSITIONS.get((event, self.state))
        if new is None or new is self.state:
            return False
        self.state = new
        self.state_time = now
        return True

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
        key = ask.allocation_key
        old = self.remove_ask(key) if key in self.asks else None
        if ask.generation == 0:
            self._ask_generation += 1
            ask.generation = self._ask_generation
        self.asks[key] = ask
        if ask.pending > 0:
            res.add_into(self.pending, ask.resource, ask.pending)
            self.pending_asks.add_new(key, ask, (-ask.priority, ask.create_seq))
        return old

    def remove_ask(self, allocation_key: str) -> Ask | None:
        ask = self.asks.pop(allocation_key, None)
        if ask is None:
            return None
        if ask.pending > 0:
            res.sub_into(self.pending, ask.resource, ask.pending)
        self.pending_asks.discard(allocation_key)
        return ask

    def take_pending(self, ask: Ask) -> None:
        """One repeat of the ask is being placed: pending down by one."""
        ask.pending -= 1
        ask.allocated_count += 1
        res.sub_into(self.pending, ask.resource)
        if ask.pending <= 0:
            self.pending_asks.discard(ask.allocation_key)

    def book(self, ask: Ask, allocation: Allocation) -> None:
        """``take_pending`` then ``add_allocation`` in one pass over the resource (once per allocation)."""
        ask.pending -= 1
        ask.allocated_count += 1
        self.allocations[allocation.uuid] = allocation
        res.pending_to_allocated(self.pending, self.allocated, ask.resource_items)
        if allocation.placeholder:
            res.add_into(self.placeholder_allocated, allocation.resource)
        if ask.pending <= 0:
            self.pending_asks.discard(ask.allocation_key)

    def return_pending(self, ask: Ask) -> None:
        """Undo ``take_pending`` (a placement was not confirmed)."""
        ask.pending += 1
        ask.allocated_count -= 1
        res.add_into(self.pending, ask.resource)
        if ask.pending == 1:
            self.pending_asks.update(ask.allocation_key, ask, ask.sort_key)

    def iter_pending_asks(self) -> Iterator[Ask]:
        return iter(self.pending_asks)

    # ---- allocations -------------------------------------------------------------------------------

    def add_allocation(self, allocation: Allocation) -> None:
        self.allocations[allocation.uuid] = allocation
        res.add_into(self.allocated, allocation.resource)
        if allocation.placeholder:
            res.add_into(self.placeholder_allocated, allocation.resource)

    def remove_allocation(self, uuid: str) -> Allocation | None:
        allocation = self.allocations.pop(uuid, None)
        if allocation is not None:
            res.sub_into(self.allocated, allocation.resource)
            if allocation.placeholder:
                res.sub_into(self.placeholder_allocated, allocation.resource)
        return allocation

    def allocations_for_key(self, allocation_key: str) -> list[Allocation]:
        return [a for a in self.allocations.values() if a.allocation_key == allocation_key]

    def is_idle(self) -> bool:
        """Nothing pending and nothing allocated: the point where YuniKorn completes an application."""
        return not self.asks_pending_any() and not self.allocations

    def asks_pending_any(self) -> bool:
        return len(self.pending_asks) > 0
