"""What a core's actors read time and fresh tokens from, and which runtime runs their mailboxes.

One immutable record per core (``Clocks``), built when the core starts and carried by its
``Tracker``: actors never read ``time`` directly, so that a simulated core runs on virtual time and a
test can drive the clock (``korral.start(clock=...)``).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from korral.actors.simulated import Simulation


def random_token() -> str:
    """A fresh token for one life of a partition (its allocation uuids)."""
    return secrets.token_hex(4)


@attrs.define(frozen=True, kw_only=True)
class Clocks:
    """The clocks, the token source and the simulation (None: threads) of one core.

    ``clock``: seconds, for timeouts, ages and budgets; ``wall_clock_ns``: epoch nanoseconds, for event
    stamps; ``unique_token``: a fresh token for each life of a partition, random unless simulated."""

    clock: Callable[[], float] = time.monotonic
    wall_clock_ns: Callable[[], int] = time.time_ns
    unique_token: Callable[[], str] = random_token
    simulation: Simulation | None = None
    # Unix ns less clock ns, taken at the first read (see wall_offset_ns)
    _wall_offset: list[int] = attrs.field(factory=list, init=False, eq=False, repr=False)

    @classmethod
    def simulated(cls, simulation: Simulation) -> Clocks:
        """Every clock and token of the simulation's: a seed replays the same run."""
        return cls(
            clock=simulation.clock,
            wall_clock_ns=simulation.wall_clock_ns,
            unique_token=simulation.unique_token,
            simulation=simulation,
        )

    def wall_offset_ns(self) -> int:
        """Unix ns less ``clock`` ns, taken once: a time on the core's clock as Unix ns, the same in
        every snapshot (the REST API's times)."""
        if not self._wall_offset:
            self._wall_offset.append(self.wall_clock_ns() - int(self.clock() * 1e9))
        return self._wall_offset[0]
