"""Hostile RMs' books: the uuid ledger and the RM that checks everything it is told."""

from __future__ import annotations

import threading
import time
from collections import Counter

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
    itself may come back after its release: the RM reused it.

    Bounded over a run's length: each registration's partition issues uuids ``<partition>-<token>-<n>``
    with a token of its own and tells nothing more once a later registration returned, so the uuids
    are kept one registration at a time (``new_registration``, called once it returned); of the
    earlier registrations' series only the highest number told under each prefix is kept, and a uuid
    of such a series at or below it, told as new other than as a recovered allocation's echo or a uuid
    the RM resent, is a collision all the same."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seen: set[str] = set()
        self.live: set[str] = set()
        self.released_ever: set[str] = set()  # this registration's: what its twins' check needs
        self.expected_echo: set[str] = set()
        self.resent: set[str] = set()  # uuids the RM itself sent back as existing allocations
        self.collisions: list[str] = []
        self.earlier: dict[str, int] = {}  # prefix of an earlier registration's series -> highest told

    def told(self, uuid: str) -> None:
        with self._lock:
            if uuid in self.expected_echo:
                self.expected_echo.discard(uuid)
            elif uuid in self.live:
                self.collisions.append(f"{uuid} (still live)")
            elif uuid.startswith("[") and uuid not in self.resent and self._issued_before(uuid):
                self.collisions.append(f"{uuid} (issued again by the core)")
            self.seen.add(uuid)
            self.live.add(uuid)

    def _issued_before(self, uuid: str) -> bool:
        if uuid in self.seen:
            return True
        prefix, _, number = uuid.rpartition("-")
        return number.isdigit() and int(number) <= self.earlier.get(prefix, -1)

    def new_registration(self, live: set[str]) -> None:
        """The RM registered again (the core started its partition afresh, with a new uuid token; the
        replaced one tells nothing more) and believes ``live`` live: the core echoes those back as it
        recovers them."""
        with self._lock:
            for uuid in self.seen:
                prefix, _, number = uuid.rpartition("-")
                if number.isdigit():
                    self.earlier[prefix] = max(self.earlier.get(prefix, -1), int(number))
            self.seen = set()
            self.resent = set()
            self.released_ever = set()
            self.expected_echo = set(live)
            self.live = set(live)

    def resend(self, uuid: str) -> None:
        with self._lock:
            self.resent.add(uuid)

    def released(self, uuid: str) -> None:
        with self._lock:
            self.live.discard(uuid)
            self.released_ever.add(uuid)


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
        # set once the core it was registered with stopped: after one more check, nothing can reach it
        self.core_stopped = False
        self.after_retirement: list[str] = []
        self.crossed: list[str] = []

    def retire(self) -> Counter[str]:
        """A later registration of this rm id returned: from now on any callback is a violation. Its
        books are dropped (what it was told of was checked while it was the RM's), so that a long run
        holds only its live RM's; returns the releases the core made that it was told of."""
        releases = self.core_release_counts()
        with self.lock:
            self.retired = True
            self.live.clear()
            self.allocation_times.clear()
            self.rejected_apps.clear()
            self.app_states.clear()
            self.released.clear()
            self.rejected_asks.clear()
            self.accepted_apps.clear()
            self.accepted_nodes.clear()
            self.rejected_nodes.clear()
            self.scheduling_states.clear()
            self.released_asks.clear()
            self.to_confirm.clear()
            self.events.clear()
            self.keys_of.clear()
            self.told.clear()
        return releases

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
