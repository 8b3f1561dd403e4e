"""What a benchmark's figures may claim: a ratio only between runs that did the same work at the same
pace, and every ask left unallocated accounted for.

korral's run feeds the asks at the workload's arrival pace (``scale``: waves ``rate`` per second); the
sequential reference takes them all at once. A paced korral run's allocations per second are then the
pace, not korral's speed, and a ratio to the reference would be a ratio of two different things: none
is given, with that reason. A run that allocated a different number of asks than the reference did
different work: no ratio either.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import korral
    from korral.harness.benchmark.workloads import Workload

CLUSTER_FULL = "the cluster has no room left for it (root's usage plus the ask exceeds the capacity)"
QUEUE_AT_MAX = "its queue (or a parent) has no room left under its max"
NO_NODE = "no node has room for it"
OTHER = "waiting for another reason (a user or group limit, max applications, a reservation)"


def paced_seconds(workload: Workload) -> float:
    """When the last wave of asks is sent, after the first (0: all at once)."""
    return max((wave.at for wave in workload.waves), default=0.0)


def ratio_or_reason(
    workload: Workload,
    korral_allocations: int,
    korral_rate: float,
    reference_allocations: int,
    reference_rate: float,
) -> tuple[float | None, str]:
    """korral's rate over the reference's, or None and why they cannot be compared."""
    paced = paced_seconds(workload)
    if paced > 0:
        offered = (workload.asks - workload.waves[-1].count) / paced  # the last wave goes at `paced`
        return None, (
            f"korral was fed at the arrival pace ({offered:,.0f} asks/s for {paced:,.1f}s) and the reference "
            "all at once: korral's rate is bounded by that pace, not by its speed (run the yunikorn "
            "shape, all asks at once, for a ratio)"
        )
    if korral_allocations != reference_allocations:
        return None, (
            f"korral made {korral_allocations:,} allocations and the reference {reference_allocations:,}: "
            "not the same work"
        )
    if not reference_rate:
        return None, "the reference made no allocation"
    return korral_rate / reference_rate, ""


def unallocated(core: korral.Core) -> dict[str, int]:
    """Every ask still pending in an idle core, counted by why it waits (one reason per allocation)."""
    reasons: Counter[str] = Counter()
    for partition in core.partition_names():
        queues = {queue.path: queue for queue in core.queues(partition)}
        free = [node.available for node in core.nodes(partition) if node.schedulable]
        for app in core.applications(partition):
            for ask in app.asks:
                if ask.pending <= 0:
                    continue
                reasons[_why(ask.resource, app.queue, queues, free)] += ask.pending
    return dict(reasons)


def _why(
    resource: dict[str, int], queue: str, queues: dict[str, korral.QueueInfo], free: list[dict[str, int]]
) -> str:
    parts = queue.split(".")
    for depth in range(1, len(parts) + 1):
        info = queues.get(".".join(parts[:depth]))
        if info is None or not info.max:
            continue
        for name, quantity in resource.items():
            if name in info.max and info.allocated.get(name, 0) + quantity > info.max[name]:
                return CLUSTER_FULL if depth == 1 else QUEUE_AT_MAX
    if not any(all(node.get(name, 0) >= quantity for name, quantity in resource.items()) for node in free):
        return NO_NODE
    return OTHER


def describe(asks: int, allocations: int, reasons: dict[str, int]) -> str:
    """``28 of 2,000 asks: 20 its queue ...; 8 no node ...`` ("" when all were allocated)."""
    left = asks - allocations
    if left <= 0:
        return ""
    explained = sum(reasons.values())
    parts = [f"{count:,} {reason}" for reason, count in sorted(reasons.items(), key=lambda item: -item[1])]
    if explained != left:  # never silently: what the core still held differs from what is missing
        parts.append(f"{left - explained:,} not pending in the core at the end (rejected, or released)")
    return f"{left:,} of {asks:,} asks: " + "; ".join(parts)
