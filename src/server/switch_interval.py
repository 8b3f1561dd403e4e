"""The process's GIL switch interval, lowered while any REST server runs and restored after the last.

While a REST server runs, the interpreter hands the GIL over at least this often (Python's default is
5 ms): each time the server's event loop wakes (a connection, a request) it waits that long behind a
scheduler batch (korral.server.rest.SWITCH_INTERVAL says what was measured).
"""

from __future__ import annotations

import sys
import threading


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
