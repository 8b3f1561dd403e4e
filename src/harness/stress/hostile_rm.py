"""Hostile RMs' books: the uuid ledger and the RM that checks everything it is told."""

from __future__ import annotations

import threading
import time

import korral
from korral import si
from korral.harness.stress.common import StressRM

# ---- hostile RMs: invalid input, restarts with recovery, slow and re-registering RMs ---------------------

# Quantities no SI item may carry (korral checks types and int64 ranges at the door); each makes its
# item rejected with a reason while the good items of the same request are applied.
BAD_QUANTITIES: tuple[object, ...] = ("1000", None, 1.5, 0.1, True, 2**64, -(2**63) - 1, 10**30)
# Valid but extreme: accepted, or refused with a reason when a total could not stay exact.
EXTREME_QUANTITIES: tuple[int, ...] = (2**63 - 1, 2**62)
# Configs and rm ids that would name into another RM's partition namespace.
SHADOW_CONFIG = """
partitions:
  - name: "[{victim}]default"
    queues:
      - name: root
"""
REJECTION_ERRORS = (korral.KorralError, ValueError, TypeError)


class UuidLedger:
    """Every allocation uuid one RM was told of, across registrations and core restarts. Told of as
    new while still live (other than the echo of a recovered allocation) is a collision; so is a uuid
    of the core's own series told of twice ever (the core must never reuse one). A uuid the RM chose
    itself may come back after its release: the RM reused it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seen: set[str] = set()
        self.live: set[str] = set()
        self.released_ever: set[str] = set()
        self.expected_echo: set[str] = set()
        self.resent: set[str] = set()  # uuids the RM itself sent back as existing allocations
        self.collisions: list[str] = []

    def told(self, uuid: str) -> None:
        with self._lock:
            if uuid in self.expected_echo:
                self.expected_echo.discard(uuid)
            elif uuid in self.live:
                self.collisions.append(f"{uuid} (still live)")
            elif uuid in self.seen and uuid.startswith("[") and uuid not in self.resent:
                self.collisions.append(f"{uuid} (issued again by the core)")
            self.seen.add(uuid)
            self.live.add(uuid)

    def resend(self, uuid: str) -> None:
        with self._lock:
            self.resent.add(uuid)

    def released(self, uuid: str) -> None:
        with self._lock:
            self.live.discard(uuid)
            self.released_ever.add(uuid)

    def expect_recovery(self, uuids: set[str]) -> None:
        with self._lock:
            self.expected_echo |= uuids
            self.live = set(uuids)


class HostileRM(StressRM):
    """A StressRM that also checks what it is told: nothing of another RM, no uuid twice, and nothing
    at all once its registration was replaced. ``slow`` callbacks sometimes take a long time."""

    def __init__(
        self, rm_id: str, seed: int, misbehave: bool, *, ledger: UuidLedger, slow: bool = False
    ) -> None:
        super().__init__(rm_id, seed, misbehave)
        self.ledger = ledger
        self.slow = slow
        self.retired = False  # set once a later registration of this rm id returned
        self.after_retirement: list[str] = []
        self.crossed: list[str] = []

    def _entered(self, what: str) -> None:
        if self.retired:
            with self.lock:
                self.after_retirement.append(what)

    def _own(self, kind: str, object_id: object) -> None:
        if not (isinstance(object_id, str) and object_id.startswith(self.rm_id + "-")):
            with self.lock:
                self.crossed.append(f"{kind} {object_id!r}")

    def update_allocation(self, response: si.AllocationResponse) -> None:
        self._entered("update_allocation")
        for allocation in response.new:
            self._own("allocation of application", allocation.application_id)
            self.ledger.told(allocation.uuid)
        for release in response.released:
            self._own("release of application", release.application_id)
            self.ledger.released(release.uuid)
        super().update_allocation(response)

    def update_application(self, response: si.ApplicationResponse) -> None:
        self._entered("update_application")
        for accepted in response.accepted:
            self._own("accepted application", accepted.application_id)
        for updated in response.updated:
            self._own("updated application", updated.application_id)
        super().update_application(response)

    def update_node(self, response: si.NodeResponse) -> None:
        self._entered("update_node")
        for accepted in response.accepted:
            self._own("accepted node", accepted.node_id)
        super().update_node(response)

    def send_event(self, events: list[si.EventRecord]) -> None:
        self._entered("send_event")
        super().send_event(events)

    def _misbehave(self) -> None:
        if self.slow and self._rng.random() < 0.02:
            time.sleep(self._rng.uniform(0.05, 0.3))
        super()._misbehave()
