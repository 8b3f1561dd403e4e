"""The event channel: events made and on their way to an RM's dispatcher (which logs them for the REST
API and hands them to the RM's callback), bounded as YuniKorn bounds its event channel.

An RM's requests make events (an "ask added" per ask, and more) at the rate they arrive; the dispatcher
logs them on the callbacks workers. Unbounded, the dispatcher's mailbox would grow without end under an
RM that sends asks faster than that (by gigabytes, from one RM that reads every response). As YuniKorn's
``EventSystem.AddEvent`` does with its channel (``DefaultEventChannelSize``, 100,000 events), events
made while the channel is full are dropped and counted (``yunikorn_event_total_not_channeled``);
scheduling goes on. The count is per core, each dispatcher's share kept apart so that a dispatcher that
stops takes its share with it (``forget``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from korral import log_text
from korral.actors.messages import Deliver
from korral.model import events

if TYPE_CHECKING:
    from korral.actors.tracker import Tracker

log = log_text.logger("korral.events")

EVENT_CHANNEL_SIZE = 100_000  # YuniKorn's DefaultEventChannelSize
DROP_LOG_INTERVAL = 60.0  # seconds between two warnings that events are being dropped


class EventChannel:
    """Events sent to dispatchers and not yet handled by them, at most ``capacity`` in all."""

    def __init__(self, capacity: int = EVENT_CHANNEL_SIZE) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._held: dict[int, int] = {}  # dispatcher's actor_id -> its events on their way
        self._total = 0
        self.dropped = 0
        self._warned_at: float | None = None

    def admit(self, dispatcher_id: int, records: list[Any]) -> list[Any]:
        """The records the channel has room for (the first ones); the rest are dropped and counted."""
        with self._lock:
            room = self.capacity - self._total
            taken = records if len(records) <= room else records[: max(room, 0)]
            dropped = len(records) - len(taken)
            if taken:
                self._held[dispatcher_id] = self._held.get(dispatcher_id, 0) + len(taken)
                self._total += len(taken)
            if not dropped:
                return taken
            self.dropped += dropped
            now = time.monotonic()
            warn = self._warned_at is None or now - self._warned_at >= DROP_LOG_INTERVAL
            if warn:
                self._warned_at = now
            total = self.dropped
        if warn:
            log.warning(
                "the event channel is full (%s events on their way to the RMs' dispatchers): events are "
                "dropped, %s so far (yunikorn_event_total_not_channeled)",
                f"{self.capacity:,}",
                f"{total:,}",
            )
        return taken

    def release(self, dispatcher_id: int, count: int) -> None:
        """The dispatcher has handled ``count`` events."""
        with self._lock:
            held = self._held.get(dispatcher_id, 0)
            count = min(count, held)
            if count <= 0:
                return
            if held == count:
                del self._held[dispatcher_id]
            else:
                self._held[dispatcher_id] = held - count
            self._total -= count

    def forget(self, dispatcher_id: int) -> None:
        """The dispatcher stopped: what was on its way to it will never be handled."""
        with self._lock:
            self._total -= self._held.pop(dispatcher_id, 0)

    def held(self) -> int:
        with self._lock:
            return self._total


def deliver_events(
    tracker: Tracker, dispatcher: Any, records: list[Any], tell: Callable[[Deliver], object]
) -> None:
    """Stamp and send ``records`` to the RM's ``dispatcher`` with ``tell``, as far as the channel has
    room. A dispatcher with no mailbox here (a Ray host's outbox to the driver) is not counted."""
    if not records:
        return
    if not dispatcher.mailbox:
        tell(Deliver(argument=events.stamped(records, tracker.clocks.wall_clock_ns())))
        return
    channel = tracker.event_channel
    taken = channel.admit(dispatcher.actor_id, records)
    if not taken:
        return
    tell(Deliver(argument=events.stamped(taken, tracker.clocks.wall_clock_ns())))
    if not dispatcher.is_alive:  # it stopped meanwhile: what it was sent will never be handled
        channel.forget(dispatcher.actor_id)
