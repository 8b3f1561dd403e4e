"""The scheduler's periodic tick: what it does, and when it would do nothing (``tick_is_idle``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from korral import si
from korral.actors.messages import Deliver, Tick
from korral.model.view import SchedulingView

# How often asks that fit their queue but no node are reported to the RM (YuniKorn: every second).
OUTSTANDING_REPORT_INTERVAL = 1.0


class SchedulerTicks:
    """Mixed into ``SchedulerActor``: the attributes below are the actor's."""

    view: SchedulingView
    dispatcher: Any
    clock: Callable[[], float]
    _wake: Callable[[], None]
    _last_outstanding_report: float

    def on_Tick(self, message: Tick) -> None:
        now = self.clock()
        if self.view.has_timed_work():
            self._wake()
        if self.view.unschedulable and now - self._last_outstanding_report >= OUTSTANDING_REPORT_INTERVAL:
            self._last_outstanding_report = now
            for outstanding in list(self.view.unschedulable.values()):
                self.dispatcher.tell(
                    Deliver(
                        argument=si.UpdateContainerSchedulingStateRequest(
                            application_id=outstanding.application_id,
                            allocation_key=outstanding.allocation_key,
                            state=si.SchedulingState.FAILED,
                            reason="request is waiting for cluster resources become available",
                        ),
                    )
                )

    def tick_is_idle(self, tick: Any) -> bool:
        """A ``Tick`` changes nothing while no ask waits on time (``has_timed_work``: nothing to wake
        for, nothing to report); a subclass that handles ticks its own way is never idle."""
        return (
            type(tick) is Tick
            and not self.view.has_timed_work()
            and type(self).on_Tick is SchedulerTicks.on_Tick
        )
