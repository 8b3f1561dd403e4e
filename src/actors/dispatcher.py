"""Delivers RM callbacks in order, one dispatcher per RM: a slow or failing RM harms only itself."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from korral.actors.base import Rank, ThreadedActor, Tracker
from korral.actors.messages import Deliver

log = logging.getLogger("korral.callbacks")


class CallbackDispatcher(ThreadedActor):
    rank = Rank.DISPATCHER

    def __init__(
        self,
        tracker: Tracker,
        name: str,
        callback: Any,
        closed: threading.Event,
        observer: Callable[[str, Any], None] | None = None,
    ) -> None:
        super().__init__(tracker, name)
        self.callback = callback
        # set by the RMProxy when the registration ends (re-registration, stop): what is still
        # queued here is dropped, not delivered to an RM that is gone
        self.closed = closed
        self.failures = 0
        self.missing: set[str] = set()
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
        if self.observer is not None:
            try:
                self.observer(message.method, message.argument)
            except Exception:
                log.exception("%s: observing %s failed", self.name, message.method)
        method = getattr(self.callback, message.method, None)
        if method is None:
            # an RM callback that is not a ResourceManagerCallback and lacks this method: said once
            if message.method not in self.missing:
                self.missing.add(message.method)
                log.warning("%s: the RM callback has no %s: not delivered", self.name, message.method)
            return
        try:
            method(message.argument)
        except Exception:
            # The RM's own failure: logged and contained, scheduling goes on.
            self.failures += 1
            log.exception("%s: callback %s raised", self.name, message.method)
