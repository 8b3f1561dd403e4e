"""Victim choice for quota preemption (YuniKorn 1.8's quota preemptor), pure code over plain facts.

When a queue's max is lowered below its usage, ``preemptable`` is how far the usage is over the new
max, per type (only the types over it). A leaf queue frees that itself; a parent hands it down to its
children in proportion to what each uses above its guarantee (all of its usage when it has none;
children at or within their guarantee give nothing), each share rounded down, and so on to the
leaves.

In a leaf the candidates are its allocations that use some preemptable type, are not being released
and are not daemon-set (required-node) allocations, in the order of ``victim_key``: non-originators,
allocations that allow preemption, and those using mostly preemptable types first; then the lowest
priority, the newest, the smallest. Each is taken when, with the victims so far, it frees no more
than the preemptable amount (in its types), and when it leaves every queue from the leaf up to the
queue whose max was lowered at or above its guarantee. So usage never ends below the new max; the
rounding down may leave it a little above, as in YuniKorn.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from korral import resource as res
from korral.resource import Resource


class QuotaCandidate(NamedTuple):
    uuid: str
    application_id: str
    resource: Mapping[str, int]
    priority: int = 0
    allow_preempt_self: bool = True
    originator: bool = False
    # larger is newer
    age: int = 0


class QuotaQueue(NamedTuple):
    """A queue below (or at) the one whose max was lowered: its guarantee and usage (what is being
    released already left out), and its children's paths."""

    path: str
    guaranteed: Mapping[str, int] | None
    allocated: Mapping[str, int]
    children: tuple[str, ...] = ()


def preemptable(maximum: Mapping[str, int] | None, allocated: Mapping[str, int]) -> Resource:
    """How far usage is over the max, for the types over it (the design's table)."""
    if not maximum:
        return {}
    return {
        name: allocated.get(name, 0) - quantity
        for name, quantity in maximum.items()
        if allocated.get(name, 0) > quantity
    }


def above_guarantee(queue: QuotaQueue) -> Resource:
    """What a queue uses above its guarantee (all its usage when it has none); {} when nothing."""
    allocated = {name: quantity for name, quantity in queue.allocated.items() if quantity > 0}
    if not allocated:
        return {}
    guaranteed = queue.guaranteed
    if not guaranteed:
        return allocated
    if all(guaranteed[name] >= allocated.get(name, 0) for name in guaranteed):
        return {}
    # YuniKorn's SubOnlyExisting(guaranteed, allocated): the guaranteed types only, as distances
    return {name: abs(quantity - allocated.get(name, 0)) for name, quantity in guaranteed.items()}


def distribute(path: str, amount: Mapping[str, int], queues: Mapping[str, QuotaQueue]) -> dict[str, Resource]:
    """Each leaf below ``path`` (itself when a leaf) and the share of ``amount`` it must free."""
    queue = queues[path]
    if not queue.children:
        return {path: dict(amount)}
    shares: dict[str, Resource] = {}
    total: Resource = {}
    for child in queue.children:
        above = above_guarantee(queues[child])
        if above:
            shares[child] = above
            res.add_into(total, above)
    result: dict[str, Resource] = {}
    for child, above in shares.items():
        # YuniKorn's share, rounded down: the children together never free more than the parent must
        part = {
            name: math.floor(quantity / total[name] * amount[name])
            for name, quantity in above.items()
            if name in amount and total.get(name)
        }
        result.update(distribute(child, part, queues))
    return result


def victim_key(
    candidate: QuotaCandidate, target: Mapping[str, int]
) -> tuple[bool, bool, float, int, int, int]:
    used = [name for name, quantity in candidate.resource.items() if quantity > 0]
    matching = sum(1 for name in used if name in target)
    share = matching / len(used) if used else 0.0
    size = sum(candidate.resource.get(name, 0) for name in target)
    return (
        candidate.originator,
        not candidate.allow_preempt_self,
        -share,
        candidate.priority,
        -candidate.age,
        size,
    )


def choose_quota_victims(
    leaf: str,
    target: Mapping[str, int],
    candidates: Iterable[QuotaCandidate],
    floors: Sequence[QuotaQueue],
) -> list[QuotaCandidate]:
    """The victims in ``leaf`` that free ``target``; ``floors`` are the queues from the leaf up to
    the one whose max was lowered (none may end below its guarantee)."""
    target = {name: quantity for name, quantity in target.items() if quantity > 0}
    if not target:
        return []
    pool = [c for c in candidates if any(c.resource.get(name, 0) > 0 for name in target)]
    pool.sort(key=lambda c: victim_key(c, target))
    usage = {queue.path: dict(queue.allocated) for queue in floors}
    freed: Resource = {}
    victims: list[QuotaCandidate] = []
    for candidate in pool:
        if not any(freed.get(name, 0) < quantity for name, quantity in target.items()):
            break
        if any(
            freed.get(name, 0) + candidate.resource.get(name, 0) > quantity
            for name, quantity in target.items()
        ):
            continue  # would free more than what must go: usage would end below the max
        after = {path: res.sub(used, candidate.resource) for path, used in usage.items()}
        if any(
            queue.guaranteed
            and any(
                candidate.resource.get(name, 0) > 0 and after[queue.path].get(name, 0) < quantity
                for name, quantity in queue.guaranteed.items()
            )
            for queue in floors
        ):
            continue  # would take a queue below its guarantee
        usage = after
        res.add_into(freed, candidate.resource)
        victims.append(candidate)
    return victims
