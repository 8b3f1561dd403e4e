"""What a partition's operations produced for its driver: typed effects, taken in one call.

A partition (``korral.model.partition.composed``) records them as its operations run (its own code and the
parts it calls: preemption, quota preemption, reservations) and hands them over with
``PartitionModel.take_effects()``, which starts a new, empty record (``EffectsRecorder``, one per
partition, shared by its parts). The driver (the reference
scheduler, or the Scheduler actor for its view) acts on each kind; nothing else reads or clears them.
"""

from __future__ import annotations

import attrs

from korral import si
from korral.model.allocation import Allocation


@attrs.frozen(slots=True, kw_only=True)
class CoreRelease:
    """An allocation the core releases itself (TIMEOUT, PLACEHOLDER_REPLACED, PREEMPTED_BY_SCHEDULER):
    reported to the RM, and booked until the RM confirms it."""

    allocation: Allocation
    termination: si.TerminationType
    message: str


@attrs.frozen(slots=True, kw_only=True)
class RequestEvent:
    """A request event (YuniKorn's ask event): a preemption attempt, a reservation cancelled."""

    application_id: str
    allocation_key: str
    message: str


@attrs.frozen(kw_only=True)
class StateChange:
    """An application's state changed (the reference reports it; the actors' owners report theirs)."""

    application_id: str
    state: str
    timestamp: float
    message: str = ""


@attrs.frozen(slots=True, kw_only=True)
class ReleasedAsk:
    """An ask the core removed itself (a placeholder or execution timeout): the RM is told."""

    application_id: str
    allocation_key: str
    message: str


@attrs.frozen(slots=True, kw_only=True)
class QueueEvent:
    """A queue event: quota preemption started, due, cancelled or done."""

    queue_path: str
    message: str


@attrs.frozen(slots=True, kw_only=True)
class RunnableChange:
    """YuniKorn's APP_CANNOTRUN / APP_RUNNABLE: whether an application may run changed, by its
    queues' maxapplications (``by`` "queue") or its user's or group's ("quota")."""

    application_id: str
    runnable: bool
    by: str


@attrs.define(slots=True, kw_only=True)
class PartitionEffects:
    state_changes: list[StateChange] = attrs.Factory(list)
    core_releases: list[CoreRelease] = attrs.Factory(list)
    released_asks: list[ReleasedAsk] = attrs.Factory(list)
    # real allocations swapped in for their placeholder on the RM's confirmation: new to the RM
    swapped_in: list[Allocation] = attrs.Factory(list)
    request_events: list[RequestEvent] = attrs.Factory(list)
    queue_events: list[QueueEvent] = attrs.Factory(list)
    runnable_changes: list[RunnableChange] = attrs.Factory(list)
    # nodes whose reservations changed (the actors publish them)
    reservation_changes: set[str] = attrs.Factory(set)
    # application -> its new backoff deadline (YUNIKORN-3115), on the partition's clock
    backoffs: dict[str, float] = attrs.Factory(dict)
    # the earliest moment a waiting ask's preemption delay, or a queue's quota preemption delay, runs
    # out (None: nothing waits): the driver runs a cycle then rather than at its next tick
    wake_at: float | None = None

    def __bool__(self) -> bool:
        return bool(
            self.state_changes
            or self.core_releases
            or self.released_asks
            or self.swapped_in
            or self.request_events
            or self.queue_events
            or self.runnable_changes
            or self.reservation_changes
            or self.backoffs
            or self.wake_at is not None
        )

    def wake_by(self, due: float) -> None:
        if self.wake_at is None or due < self.wake_at:
            self.wake_at = due


class EffectsRecorder:
    """The record a partition's parts write their effects into as they run, shared by all of them;
    ``take`` hands it over and starts a new one."""

    __slots__ = ("_effects",)

    def __init__(self) -> None:
        self._effects = PartitionEffects()

    def take(self) -> PartitionEffects:
        effects, self._effects = self._effects, PartitionEffects()
        return effects

    def core_release(self, allocation: Allocation, termination: si.TerminationType, message: str) -> None:
        self._effects.core_releases.append(
            CoreRelease(allocation=allocation, termination=termination, message=message)
        )

    def released_ask(self, application_id: str, allocation_key: str, message: str) -> None:
        self._effects.released_asks.append(
            ReleasedAsk(application_id=application_id, allocation_key=allocation_key, message=message)
        )

    def swapped_in(self, allocation: Allocation) -> None:
        self._effects.swapped_in.append(allocation)

    def request_event(self, application_id: str, allocation_key: str, message: str) -> None:
        self._effects.request_events.append(
            RequestEvent(application_id=application_id, allocation_key=allocation_key, message=message)
        )

    def queue_event(self, queue_path: str, message: str) -> None:
        self._effects.queue_events.append(QueueEvent(queue_path=queue_path, message=message))

    def runnable(self, application_id: str, runnable: bool, by: str) -> None:
        self._effects.runnable_changes.append(
            RunnableChange(application_id=application_id, runnable=runnable, by=by)
        )

    def backoff(self, application_id: str, deadline: float) -> None:
        self._effects.backoffs[application_id] = deadline

    def reservation_change(self, node_id: str) -> None:
        self._effects.reservation_changes.add(node_id)

    def state_change(self, application_id: str, state: str, timestamp: float, message: str) -> None:
        self._effects.state_changes.append(
            StateChange(application_id=application_id, state=state, timestamp=timestamp, message=message)
        )

    def wake_by(self, due: float) -> None:
        """The driver must run a cycle no later than ``due`` (a preemption or quota delay runs out)."""
        self._effects.wake_by(due)
