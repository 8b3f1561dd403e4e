"""Seeded environment faults of ``korral stress --simulated`` (``--env-faults``), all in the default mix.

Unlike the planted bugs (``faults_planted``: broken actors), these are things a correct core must
survive with its books right, drawn from the workload seed so that a run replays exactly:

- ``callbacks``: an RM callback raises after it recorded what it was told (2 % of calls), as a shim
  whose handler fails; the core contains it and goes on;
- ``jumps``: the virtual clock jumps 2 to 20 seconds at once (a stalled process, a suspended VM):
  every timer that fell due in between fires at the new time, in one burst, rather than one by one;
- ``duplicates``: after a simulated reconnect the RM sends its last one to three requests again
  verbatim (a client retrying calls whose answers it never saw);
- ``handlers``: an actor's handler raises, at the points korral promises to survive (at exit of a
  told message's handler; at entry of a message the protocol repeats: the scheduler's tick, a
  ``Retire``), through the product's own containment (``korral.harness.simulated.injected``);
- ``cutoffs``: a scheduling batch ends early, after a seeded allocation (``simulated.injected``);
- ``restarts``: the core stops between two SI calls and a new one starts; each RM registers again and
  recovers its applications, nodes and the allocations it believes live (``simulated.restart``).
"""

from __future__ import annotations

import zlib

from korral import si
from korral.harness.stress import StressRM

ENV_FAULTS = ("callbacks", "jumps", "duplicates", "handlers", "cutoffs", "restarts")
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
    """An RM whose callbacks sometimes raise after recording (never sleeps: the clock is virtual).

    Whether a callback fails depends on the seed and on what it says (its method and the keys the RM
    chose: allocation keys, application and node ids), not on how many came before: a replay that
    sends one registration more still fails on the same answers."""

    def __init__(self, rm_id: str, seed: int, failure: float) -> None:
        super().__init__(rm_id, seed, misbehave=False)
        self.seed = seed
        self.failure = failure

    def update_allocation(self, response: si.AllocationResponse) -> None:
        super().update_allocation(response)
        keys = [a.allocation_key for a in response.new] + [r.allocation_key for r in response.released]
        keys += [r.allocation_key for r in response.rejected] + [
            r.allocation_key for r in response.released_asks
        ]
        self._fail("allocation", keys)

    def update_application(self, response: si.ApplicationResponse) -> None:
        super().update_application(response)
        ids = [a.application_id for a in response.accepted] + [a.application_id for a in response.rejected]
        ids += [f"{a.application_id}={a.state}" for a in response.updated]
        self._fail("application", ids)

    def update_node(self, response: si.NodeResponse) -> None:
        super().update_node(response)
        ids = [n.node_id for n in response.accepted] + [n.node_id for n in response.rejected]
        self._fail("node", ids)

    def _fail(self, method: str, keys: list[str]) -> None:
        text = f"{self.seed}|{method}|{','.join(sorted(keys))}"
        if self.failure and zlib.crc32(text.encode()) % 10_000 < self.failure * 10_000:
            self.raised += 1
            raise RuntimeError("simulated RM callback failure (after recording)")
