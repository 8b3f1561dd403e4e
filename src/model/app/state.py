"""The application state machine: YuniKorn's states, events and transitions, and the rules that say
which event a change of an application's asks or allocations calls for. One home for every driver
(the reference's partition, the application's owner, the scheduler's view).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING

from korral import resource as res

if TYPE_CHECKING:
    from korral.model.app.application import Application


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


# States in which a new ask runs the application (runApplication): New and Resuming -> Accepted,
# Completing -> Running. Resuming too: a soft gang whose placeholders timed out goes on as a normal
# application once it has a real ask.
RUN_ON_ASK = frozenset({S.NEW, S.COMPLETING, S.RESUMING})
# Idle (nothing pending, nothing allocated) in one of these, an application completes
COMPLETE_WHEN_IDLE = frozenset({S.ACCEPTED, S.STARTING, S.RUNNING})


def settle_event(app: Application) -> ApplicationEvent | None:
    """The event an application's own state calls for after an ask or an allocation went away:
    completeApplication when idle while Accepted, Starting or Running, failApplication when Failing
    with nothing left booked (Failing -> Failed), else None."""
    if app.state in COMPLETE_WHEN_IDLE and app.is_idle():
        return ApplicationEvent.COMPLETE
    if app.may_fail_finally():
        return ApplicationEvent.FAIL
    return None


def advance_after_allocation(app: Application, placeholder: bool, run: Callable[[], bool]) -> None:
    """The state an allocation moves an Accepted or Starting application to (``run`` applies one RUN).

    A plain application: Accepted -> Starting (and on to Running when state awareness is off),
    Starting -> Running. A gang application stays Accepted while its placeholders are allocated and
    runs once all of them are, or at its first real allocation (YuniKorn, reference 2.12).
    """
    state = app.state
    if app.placeholder_ask:
        if placeholder and not res.fits_in(app.placeholder_ask, app.placeholder_allocated):
            return
        while app.state in (S.ACCEPTED, S.STARTING) and run():
            pass
    elif state is S.ACCEPTED:
        run()
        if app.state_aware_disabled:
            run()
    elif state is S.STARTING:
        run()


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
