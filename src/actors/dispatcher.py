"""Delivers RM callbacks in order, one dispatcher per RM: a slow or failing RM harms only itself."""

from __future__ import annotations

import threading
from collections.abc import Callable

from korral import log_text
from korral.actors.base import Rank, ThreadedActor
from korral.actors.messages import CALLBACK_METHODS, CallbackArgument, Deliver
from korral.actors.tracker import Tracker
from korral.callback import ResourceManagerCallback

log = log_text.logger("korral.callbacks")


class CallbackDispatcher(ThreadedActor):
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

    def on_Deliver(self, message: Deliver) -> None:
        try:
            self._deliver(message)
        finally:
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
        try:
            message.call(self.callback)
        except Exception:
            # The RM's own failure: logged and contained, scheduling goes on.
            self.failures += 1
            log.exception("%s: callback %s raised", self.name, method)
