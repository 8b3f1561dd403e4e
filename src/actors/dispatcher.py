"""Delivers RM callbacks in order, one dispatcher per RM: a failing RM harms only itself. Dispatchers
run on the core's callbacks workers (``korral.actors.workers``): a callback that does not return holds
one of them until it does."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from korral import log_text, si
from korral.actors.base import Rank, ServedActor
from korral.actors.messages import CALLBACK_METHODS, CallbackArgument, Deliver
from korral.actors.tracker import Tracker
from korral.callback import ResourceManagerCallback

log = log_text.logger("korral.callbacks")


class CallbackDispatcher(ServedActor):
    rank = Rank.DISPATCHER

    def __init__(
        self,
        tracker: Tracker,
        name: str,
        callback: ResourceManagerCallback,
        closed: threading.Event,
        observer: Callable[[str, CallbackArgument], None] | None = None,
    ) -> None:
        super().__init__(tracker, name)
        self.callback = callback
        # set by the RMProxy when the registration ends (re-registration, stop): what is still
        # queued here is dropped, not delivered to an RM that is gone
        self.closed = closed
        self.failures = 0
        # an RM callback that is not a ResourceManagerCallback may lack some methods: found once here
        # (and said once, at the first delivery to it), not looked up by name per delivery
        self.missing: frozenset[str] = frozenset(
            method for method in CALLBACK_METHODS if not callable(getattr(callback, method, None))
        )
        self.said_missing: set[str] = set()
        # sees everything the core delivers to this RM (the core's metrics and event log)
        self.observer = observer

    def dispatch_all(self, messages: tuple[Any, ...]) -> None:
        """A bundle: what a pool's applications sent in one run of its worker. A run of responses in
        it that only add (new allocations; application state updates) reaches the RM as one response
        of each kind, the allocations first: at light load every application confirms its allocation
        in a response of its own (and its state change in another), and a call costs the RM nearly as
        much as a batch (a remote RM: a message on the wire each). Each application's responses keep
        their order: a run ends before an allocation of an application whose update it holds."""
        run = _Run()
        for message in messages:
            kind = _joinable(message)
            if kind is None:
                run.flush(self.dispatch)
                self.dispatch(message)
                continue
            if kind is si.AllocationResponse and any(
                allocation.application_id in run.updated_apps for allocation in message.argument.new
            ):
                run.flush(self.dispatch)
            run.add(kind, message)
        run.flush(self.dispatch)

    def on_Deliver(self, message: Deliver) -> None:
        try:
            self._deliver(message)
        finally:
            if type(message.argument) is list:  # events: out of the event channel
                self.tracker.event_channel.release(self.handle.actor_id, len(message.argument))
            if message.then is not None:
                target, follow = message.then
                target.tell(follow)

    def _deliver(self, message: Deliver) -> None:
        if self.closed.is_set():
            return
        method = message.method  # derived from the argument's type: looked up once
        if self.observer is not None:
            try:
                self.observer(method, message.argument)
            except Exception:
                log.exception("%s: observing %s failed", self.name, method)
        if method in self.missing:
            if method not in self.said_missing:
                self.said_missing.add(method)
                log.warning("%s: the RM callback has no %s: not delivered", self.name, method)
            return
        if self.closed.is_set():  # again: the registration may have ended while the delivery was counted
            return
        try:
            message.call(self.callback)
        except Exception:
            # The RM's own failure: logged and contained, scheduling goes on.
            self.failures += 1
            log.exception("%s: callback %s raised", self.name, method)


def _joinable(message: Any) -> type | None:
    """The kind of a delivery that may join others (it only adds, and nothing waits for it), or None."""
    if type(message) is not Deliver or message.then is not None:
        return None
    argument = message.argument
    kind = type(argument)
    if kind is si.AllocationResponse:
        if argument.released or argument.released_asks or argument.rejected:  # type: ignore[union-attr]
            return None
        return kind
    if kind is si.ApplicationResponse:
        return None if argument.rejected or argument.accepted else kind  # type: ignore[union-attr]
    return None


class _Run:
    """Joinable deliveries of a bundle not yet delivered: allocations, then application updates."""

    def __init__(self) -> None:
        self.allocations: list[Deliver] = []
        self.updates: list[Deliver] = []
        self.updated_apps: set[str] = set()

    def add(self, kind: type, message: Deliver) -> None:
        if kind is si.AllocationResponse:
            self.allocations.append(message)
            return
        self.updates.append(message)
        self.updated_apps.update(update.application_id for update in message.argument.updated)  # type: ignore[union-attr]

    def flush(self, deliver: Callable[[Deliver], Any]) -> None:
        allocations, updates = self.allocations, self.updates
        if len(allocations) > 1:
            joined = [a for message in allocations for a in message.argument.new]  # type: ignore[union-attr]
            allocations = [Deliver(argument=si.AllocationResponse(new=joined))]
        if len(updates) > 1:
            changes = [u for message in updates for u in message.argument.updated]  # type: ignore[union-attr]
            updates = [Deliver(argument=si.ApplicationResponse(updated=changes))]
        for message in (*allocations, *updates):
            deliver(message)
        self.allocations, self.updates, self.updated_apps = [], [], set()
