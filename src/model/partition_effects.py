"""What a partition's operations produced for its driver: typed effects, taken in one call.

A partition (``korral.model.partition``) records them as its operations run (its own code and the
parts it calls: preemption, quota preemption, reservations) and hands them over with
``PartitionModel.take_effects()``, which starts a new, empty record. The driver (the reference
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
