"""The process's GIL switch interval, lowered while a REST server that asks for it runs and restored
after the last such server stops.

The interval is the whole process's, so a server leaves it alone unless asked (``serve_rest(
switch_interval=...)``); ``korral serve`` asks for ``SERVING_SWITCH_INTERVAL``.
"""

from __future__ import annotations

import sys
import threading

# What korral serve asks for while REST serves (RestServer's switch_interval; Python's default is 5 ms):
# each time the server's event loop wakes it would otherwise wait that long behind a scheduler batch.
# Measured on the yunikorn shape: the same CPU time per allocation at 1 ms as at 5 ms (bench/README.md).
SERVING_SWITCH_INTERVAL = 0.001


class SwitchInterval:
    """The process's switch interval lowered while any REST server runs, restored after the last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._previous: float | None = None
        self._set: float | None = None

    def acquire(self, interval: float) -> None:
        with self._lock:
            self._users += 1
            current = sys.getswitchinterval()
            if current > interval:
                if self._previous is None:
                    self._previous = current
                sys.setswitchinterval(interval)
                self._set = interval

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._previous is not None:
                if sys.getswitchinterval() == self._set:  # nobody else changed it meanwhile
                    sys.setswitchinterval(self._previous)
                self._previous = self._set = None


switch_interval = SwitchInterval()
