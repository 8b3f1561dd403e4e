"""Sparse resource maths with YuniKorn's semantics.

A resource is a plain ``dict[str, int]``. Two readings of a missing type matter:
- for *fit* checks (does an ask fit a node's available resources) a missing type is 0;
- for *quota* checks (does usage stay under a queue's max) a missing type in the limit is unlimited.
Arithmetic is exact (Python integers): YuniKorn saturates at the int64 bounds, but a saturated total
loses resources for good (remove a huge node and the partition's capacity loses everything). korral
refuses SI quantities outside int64 at the door instead, and keeps every total exact.

Functions returning a resource always return a new dict; the ``*_into`` variants update their first
argument in place and exist for aggregates owned by one object (hot path, no allocation).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

Resource = dict[str, int]

MAX_INT64 = (1 << 63) - 1
MIN_INT64 = -(1 << 63)


def add(left: Mapping[str, int], right: Mapping[str, int]) -> Resource:
    result = dict(left)
    for name, quantity in right.items():
        result[name] = result.get(name, 0) + quantity
    return result


def sub(left: Mapping[str, int], right: Mapping[str, int]) -> Resource:
    result = dict(left)
    for name, quantity in right.items():
        result[name] = result.get(name, 0) - quantity
    return result


def add_into(target: Resource, delta: Mapping[str, int], times: int = 1) -> None:
    """target += delta * times, dropping entries that become zero (hot path)."""
    for name, quantity in delta.items():
        value = target.get(name, 0) + quantity * times
        if value:
            target[name] = value
        else:
            target.pop(name, None)


def sub_into(target: Resource, delta: Mapping[str, int], times: int = 1) -> None:
    add_into(target, delta, -times)


def pending_to_allocated(
    aggregates: Iterable[tuple[Resource, Resource]], items: Iterable[tuple[str, int]]
) -> None:
    """One placed repeat of an ask: its ``items`` leave each ``pending`` and join each ``allocated``
    of the (pending, allocated) pairs given.

    For the aggregates of every queue on an allocation's path, in one call per allocation. The ask was
    pending, so each of its (positive) types is in every ``pending``; all stay pruned.
    """
    for pending, allocated in aggregates:
        for name, quantity in items:
            left = pending[name] - quantity
            if left:
                pending[name] = left
            else:
                del pending[name]
            try:  # usage only grows here
                allocated[name] += quantity
            except KeyError:
                allocated[name] = quantity


def multiply(resource: Mapping[str, int], factor: int) -> Resource:
    return {name: quantity * factor for name, quantity in resource.items() if quantity * factor}


def prune(resource: Mapping[str, int]) -> Resource:
    """A copy without zero entries: the form every snapshot and message carries."""
    return {name: quantity for name, quantity in resource.items() if quantity}


def is_zero(resource: Mapping[str, int] | None) -> bool:
    return not resource or not any(resource.values())


def has_negative(resource: Mapping[str, int]) -> bool:
    for quantity in resource.values():  # a loop, not any(generator): once per node registered
        if quantity < 0:
            return True
    return False


def strictly_greater_than_zero(resource: Mapping[str, int]) -> bool:
    """At least one positive entry and no negative one (YuniKorn's StrictlyGreaterThanZero)."""
    positive = False
    for quantity in resource.values():
        if quantity < 0:
            return False
        if quantity > 0:
            positive = True
    return positive


def equals(left: Mapping[str, int] | None, right: Mapping[str, int] | None) -> bool:
    """Equality treating a missing type as zero."""
    return prune(left or {}) == prune(right or {})


def fits_in(smaller: Mapping[str, int], larger: Mapping[str, int]) -> bool:
    """Fit check: a type missing from ``larger`` counts as 0, so an ask for it does not fit."""
    for name, quantity in smaller.items():
        if quantity > 0 and quantity > larger.get(name, 0):
            return False
    return True


def fits_in_max(usage: Mapping[str, int], limit: Mapping[str, int] | None) -> bool:
    """Quota check: only the types the limit defines are limited (YuniKorn's FitInMaxUndef)."""
    if not limit:
        return True
    for name, maximum in limit.items():
        if usage.get(name, 0) > maximum:
            return False
    return True


def component_min(left: Mapping[str, int], right: Mapping[str, int]) -> Resource:
    """Per-type minimum over the types either side defines; a type missing from one side counts as 0
    (YuniKorn's ComponentWiseMin)."""
    result: Resource = {}
    for name, quantity in left.items():
        other = right.get(name, 0)
        result[name] = quantity if quantity < other else other
    for name, quantity in right.items():
        if name not in left:
            result[name] = quantity if quantity < 0 else 0
    return result


def component_max(left: Mapping[str, int], right: Mapping[str, int]) -> Resource:
    """Per-type maximum over the types either side defines; a type missing from one side counts as 0
    (YuniKorn's ComponentWiseMax)."""
    result: Resource = {}
    for name, quantity in left.items():
        other = right.get(name, 0)
        result[name] = quantity if quantity > other else other
    for name, quantity in right.items():
        if name not in left:
            result[name] = quantity if quantity > 0 else 0
    return result


def min_of_limits(left: Mapping[str, int] | None, right: Mapping[str, int] | None) -> Resource | None:
    """Combine two quota limits where an undefined type is unlimited: the union, min where both define.

    ``None`` means no limit at all; the result is ``None`` only when both are.
    """
    if left is None:
        return dict(right) if right is not None else None
    if right is None:
        return dict(left)
    result = dict(left)
    for name, quantity in right.items():
        current = result.get(name)
        result[name] = quantity if current is None else min(current, quantity)
    return result


def headroom(limit: Mapping[str, int] | None, usage: Mapping[str, int]) -> Resource | None:
    """What is left under a limit, for the limit's own types (``None`` = unlimited)."""
    if limit is None:
        return None
    result: Resource = {}
    for name, maximum in limit.items():
        result[name] = maximum - usage.get(name, 0)
    return result


def shares(usage: Mapping[str, int], total: Mapping[str, int] | None) -> dict[str, float]:
    """Per-type share usage/total; a type without a (positive) total has share 1.0 when used, else 0."""
    result: dict[str, float] = {}
    total = total or {}
    for name, quantity in usage.items():
        denominator = total.get(name, 0)
        if denominator > 0:
            result[name] = quantity / denominator
        else:
            result[name] = 1.0 if quantity > 0 else 0.0
    return result


def dominant_share(
    usage: Mapping[str, int], guaranteed: Mapping[str, int] | None, fair_max: Mapping[str, int] | None = None
) -> float:
    """Largest share of usage against the guarantee, using ``fair_max`` for unguaranteed types.

    A type with an explicit zero or negative guarantee counts 1.0 when used (YuniKorn's queue fair
    sorting); a type neither guaranteed nor in ``fair_max`` does not count.
    """
    guaranteed = guaranteed or {}
    fair_max = fair_max or {}
    largest = 0.0
    for name, quantity in usage.items():
        if quantity <= 0:
            continue
        if name in guaranteed:
            denominator = guaranteed[name]
        elif name in fair_max:
            denominator = fair_max[name]
        else:
            continue
        share = quantity / denominator if denominator > 0 else 1.0
        if share > largest:
            largest = share
    return largest


def usage_ratio_key(
    usage: Mapping[str, int], total: Mapping[str, int] | None, resource_types: Iterable[str] = ()
) -> tuple[float, ...]:
    """Shares sorted largest first: comparing these tuples is YuniKorn's CompUsageRatio."""
    values = shares(usage, total)
    for name in resource_types:
        values.setdefault(name, 0.0)
    return tuple(sorted(values.values(), reverse=True))


def fit_score(ask: Mapping[str, int], available: Mapping[str, int]) -> float:
    """How badly an ask misses the available resources: 0 when it fits, larger when it misses more.

    Per positive ask type the share missing, between 0 and 1: a negative available counts as 0 (YuniKorn's
    FitInScore), so the score never exceeds the number of types asked for. Used to choose the node to
    reserve (the lowest score wins).
    """
    score = 0.0
    for name, quantity in ask.items():
        if quantity <= 0:
            continue
        free = available.get(name, 0)
        if free <= 0:
            score += 1.0
        elif quantity > free:
            score += (quantity - free) / quantity
    return score


def weighted_usage(
    allocated: Mapping[str, int], capacity: Mapping[str, int], weights: Mapping[str, float]
) -> float:
    """Weighted average of the per-type usage share; types without weight or capacity are ignored."""
    total_weight = 0.0
    weighted = 0.0
    for name, weight in weights.items():
        if weight <= 0:
            continue
        cap = capacity.get(name, 0)
        if cap <= 0:
            continue
        weighted += weight * (allocated.get(name, 0) / cap)
        total_weight += weight
    if total_weight == 0.0:
        return 0.0
    return weighted / total_weight


def to_string(resource: Mapping[str, int] | None) -> str:
    if not resource:
        return "map[]"
    return "map[" + " ".join(f"{name}:{resource[name]}" for name in sorted(resource)) + "]"
