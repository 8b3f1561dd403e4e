"""Per-ask rules of ``korral stress --simulated``, checked from the RM's side at every quiescent point.

- **no more than maxAllocations**: an ask the RM sent once (never updated, never resent) is told to
  the RM as new in no more allocations than its ``max_allocations``. An ask sent again is left out:
  a resend replaces the ask with a fresh repeat count (YuniKorn's semantics), so more allocations
  under one key are then legitimate.
- **nothing for a released ask after its release**: once the RM released an ask and the core was
  quiet since (so the release was handled: an allocation that crossed it on the way is legitimate and
  told by then), the RM is told of no new allocation under that key, until it sends the ask again.
  One allocation is decided before the release and told only later: a gang's real allocation that
  replaces a placeholder, told once the RM confirms the placeholder's release (YuniKorn's
  ``ReplaceAllocation`` does not look for the ask either). So a released task-group ask may still be
  told of as many allocations as its application had placeholder replacements waiting for the RM's
  confirmation when the release was handled (seed 2076 of the first 5,000-seed run: the check's own
  false positive).

Both read what the RM was told (``StressRM.keys_of``: every allocation uuid told as new, with its
key), so they hold across core releases, preemption and node removal alike. A re-registration or a
core restart gives the RM a new callback object and starts the rules afresh.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from korral import si
from korral.harness.stress import StressRM


class AskRules:
    """One RM's asks as it sent them, and the asks it released."""

    def __init__(self) -> None:
        self.max_allocations: dict[str, int] = {}  # key -> max, of the last send
        self.sends: Counter[str] = Counter()
        self.released_unsettled: set[str] = set()  # released; the core has not been quiet since
        self.released_told: dict[str, int] = {}  # released and handled: allocations told by then
        self.task_group_asks: dict[str, str] = {}  # key -> application, of a gang's real asks
        self.replacing: dict[str, int] = {}  # released key -> replacements waiting when it was handled
        # across core restarts: allocations told to the callback objects before, by key, and the
        # uuids recovered since (told again by the new core: counted once)
        self.told_earlier: Counter[str] = Counter()
        self.recovered: set[str] = set()
        # uuids told of before the RM's latest registration (its earlier partition's)
        self.before_registration: set[str] = set()

    def reset(self, rm: StressRM | None = None) -> None:
        """Afresh (a registration): what ``rm`` was told of before is no longer this RM's business."""
        if rm is not None:
            with rm.lock:
                self.before_registration = set(rm.keys_of)
        self.max_allocations.clear()
        self.sends.clear()
        self.released_unsettled.clear()
        self.released_told.clear()
        self.task_group_asks.clear()
        self.replacing.clear()
        self.told_earlier.clear()
        self.recovered.clear()

    def restarted(self, rm: StressRM, recovered: set[str]) -> None:
        """A core restart: ``rm`` (the callback object being replaced) was told of what it was told;
        ``recovered`` is told again by the new core as it recovers them."""
        skipped = self.recovered | self.before_registration
        with rm.lock:
            self.told_earlier.update(key for uuid, (_, key) in rm.keys_of.items() if uuid not in skipped)
        self.recovered = set(recovered)
        self.before_registration = set()  # the new callback object has been told nothing yet

    def _told(self, rm: StressRM) -> Counter[str]:
        skipped = self.recovered | self.before_registration
        with rm.lock:
            told = Counter(key for uuid, (_, key) in rm.keys_of.items() if uuid not in skipped)
        told.update(self.told_earlier)
        return told

    def sent(self, kind: str, request: Any) -> None:
        """An SI request the RM sent (its asks and ask releases matter)."""
        if kind != "allocations" or not isinstance(request, si.AllocationRequest):
            return
        for ask in request.asks:
            key = ask.allocation_key
            self.max_allocations[key] = ask.max_allocations
            self.sends[key] += 1
            self.released_unsettled.discard(key)  # asked again: allocations are legitimate again
            self.released_told.pop(key, None)
            self.replacing.pop(key, None)
            if ask.task_group_name and not ask.placeholder:
                self.task_group_asks[key] = ask.application_id
        if request.releases is not None:
            for release in request.releases.allocation_asks_to_release:
                if release.allocation_key:
                    self.released_unsettled.add(release.allocation_key)

    def check(self, rm: StressRM) -> list[str]:
        """At a quiescent point: both rules (see the module's docstring)."""
        told = self._told(rm)
        problems = []
        for key, count in sorted(told.items()):
            limit = self.max_allocations.get(key)
            if limit is not None and self.sends[key] == 1 and count > max(limit, 1):
                problems.append(
                    f"{rm.rm_id}: ask {key} (maxAllocations {limit}, sent once) was told of {count} "
                    "allocations"
                )
        for key, before in sorted(self.released_told.items()):
            allowed = self.replacing.get(key, 0)
            if told[key] > before + allowed:
                problems.append(
                    f"{rm.rm_id}: ask {key} got {told[key] - before} allocation(s) after its release "
                    "was handled"
                    + (f" ({allowed} placeholder replacement(s) were waiting then)" if allowed else "")
                )
        if self.released_unsettled:
            with rm.lock:
                replacing = Counter(
                    r.application_id
                    for r in rm.to_confirm
                    if r.termination_type is si.TerminationType.PLACEHOLDER_REPLACED
                )
        for key in sorted(self.released_unsettled):  # quiet now: the release was handled
            app_id = self.task_group_asks.get(key)
            # a replacement decided before the release, told once the RM confirms its placeholder's
            self.released_told[key] = told[key]
            self.replacing[key] = replacing[app_id] if app_id is not None else 0
        self.released_unsettled.clear()
        return problems
