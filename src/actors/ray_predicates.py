"""engine="ray", in the driver: the RM's ``predicates`` callback answered for a partition's process.

The callback object lives in the driver; the host's scheduler sends its calls through the outbox.
The call runs on the poller's thread, marked as inside predicates (so ``scheduler_stats`` fails at once
and node snapshots work, as with threads). One that raises means "not this node", as with threads.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from korral import si
from korral.actors.base import inside_predicates

log = logging.getLogger("korral.ray")


def answer_predicates(
    callback: Any, closed: threading.Event, args: si.PredicatesArgs, partition: str
) -> bool:
    if closed.is_set():
        return False  # the registration ended: its RM is not asked anything any more
    try:
        with inside_predicates():
            return bool(callback.predicates(args))
    except Exception as error:  # a failing RM plugin means "not this node", as with threads
        log.warning("%s: predicates callback raised %r: node refused", partition, error)
        return False
