"""Seeded environment faults of ``korral stress --simulated`` (``--env-faults``), all in the default mix.

Unlike the planted bugs (``faults_planted``: broken actors), these are things a correct core must
survive with its books right, drawn from the workload seed so that a run replays exactly:

- ``callbacks``: an RM callback raises after it recorded what it was told (2 % of calls), as a shim
  whose handler fails; the core contains it and goes on;
- ``jumps``: the virtual clock jumps 2 to 20 seconds at once (a stalled process, a suspended VM):
  every timer that fell due in between fires at the new time, in one burst, rather than one by one;
- ``duplicates``: after a simulated reconnect the RM sends its last one to three requests again
  verbatim (a client retrying calls whose answers it never saw).
"""

from __future__ import annotations

import random

from korral import si
from korral.harness.stress import StressRM

ENV_FAULTS = ("callbacks", "jumps", "duplicates")
CALLBACK_FAILURE = 0.02  # the share of RM callbacks that raise
JUMP_PROBABILITY = 0.03  # the share of pauses between calls that are clock jumps
JUMP_SECONDS = (2.0, 20.0)


def parse(text: str) -> frozenset[str]:
    """``--env-faults``: "all", "none" or a comma-separated list of ``ENV_FAULTS``."""
    if text == "all":
        return frozenset(ENV_FAULTS)
    if text in ("none", ""):
        return frozenset()
    kinds = frozenset(part.strip() for part in text.split(","))
    unknown = sorted(kinds - set(ENV_FAULTS))
    if unknown:
        raise ValueError(f"unknown environment fault(s) {', '.join(unknown)}: known {', '.join(ENV_FAULTS)}")
    return kinds


class FailingCallbackRM(StressRM):
    """An RM whose callbacks sometimes raise after recording (never sleeps: the clock is virtual)."""

    def __init__(self, rm_id: str, seed: int, failure: float) -> None:
        super().__init__(rm_id, seed, misbehave=False)
        self._failures = random.Random(f"callbacks-{seed}")
        self.failure = failure

    def update_allocation(self, response: si.AllocationResponse) -> None:
        super().update_allocation(response)
        self._fail()

    def update_application(self, response: si.ApplicationResponse) -> None:
        super().update_application(response)
        self._fail()

    def update_node(self, response: si.NodeResponse) -> None:
        super().update_node(response)
        self._fail()

    def _fail(self) -> None:
        if self.failure and self._failures.random() < self.failure:
            self.raised += 1
            raise RuntimeError("simulated RM callback failure (after recording)")
