"""The ``creationTime`` tag (YUNIKORN-2772): an ask or a recovered allocation an RM re-sends after a
restart carries the unix time (seconds) its pod was created, so the work keeps its age and its order.

Its ask's age (preemption delay, order among the application's asks of one priority) runs from that
moment, and an application's submission time, by which fifo orders applications, is the earliest of
its own and its asks' and allocations' creation times. A tag that is not an integer is ignored, as
YuniKorn's ParseInt failure is.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping

from korral.si.messages import CREATION_TIME

_INT = re.compile(r"[+-]?[0-9]+")


def created_at(tags: Mapping[str, str], now: float) -> float | None:
    """The tag's moment on the partition's clock (``now`` is that clock's present), or None."""
    text = tags.get(CREATION_TIME) if tags else None
    if text is None or _INT.fullmatch(text) is None:
        return None
    return now - (time.time() - int(text))
