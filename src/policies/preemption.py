"""Victim choice for preemption, YuniKorn 1.x's laws as a pure function (no actors, no model state).

The scheduler hands over what it knows (the ask that may preempt, the queues' guarantees and usage,
the allocations that could make room, each node's free room) and gets back a node and the victims to
release there, or nothing. The laws (YuniKorn's design/preemption and user_guide/preemption):

1. The ask's queue, and every queue above it that has a guarantee, must stay within its guarantee
   once the ask is allocated: preemption gets a queue *to* its guarantee, never beyond.
2. Never a victim from the ask's own application or queue (only inter-queue preemption).
3. A victim's queue must be above its guarantee, and taking the victim must not leave it, or any
   queue above it that the ask's queue does not share, below its guarantee.
4. A victim's priority is at most the ask's (equal is allowed, unlike Kubernetes).
5. A ``fence`` on a queue keeps the ask's victims inside the fenced subtree; ``disabled`` makes a
   queue's allocations non-victims (the caller passes the effective policy of each queue).
6. Victims come from one node: the one that needs the fewest victims, the first in node-id order
   among equals (``choose_on_nodes`` may stop looking a while after its best plan, to bound the cost
   on large clusters). On a node: allocations that allow preemption first, then non-originators, then
   the newest. Allocations that opted out of preemption are taken only when nothing else frees enough.

Required-node asks (daemon sets) have their own rule, ``required_node_victims``: only their node
counts, their own application's allocations may go too, and the lowest priority goes first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

import attrs

from korral.model import resource as res
from korral.model.resource import Resource

POLICY_DEFAULT = "default"
POLICY_FENCE = "fence"
POLICY_DISABLED = "disabled"


@attrs.frozen
class QueueFacts:
    """What preemption needs of one queue: its guarantee, usage and effective preemption policy."""

    path: str
    guaranteed: Mapping[str, int] | None
    allocated: Mapping[str, int]
    policy: str = POLICY_DEFAULT


class Candidate(NamedTuple):
    """An allocation that could make room. (A NamedTuple: one is built per live allocation of the
    eligible queues at each attempt, and a tuple is several times cheaper to build than a frozen class.)"""

    uuid: str
    application_id: str
    queue_path: str
    node_id: str
    resource: Mapping[str, int]
    priority: int = 0
    allow_preempt_self: bool = True
    originator: bool = False
    # larger is newer: the allocation order of the partition
    sequence: int = 0
    # a required-node (daemon set) allocation is never a victim of another required-node ask
    required_node: bool = False


@attrs.frozen
class Preemptor:
    """The ask that may preempt."""

    allocation_key: str
    application_id: str
    queue_path: str
    resource: Mapping[str, int]
    priority: int = 0


@attrs.frozen
class Plan:
    node_id: str
    victims: tuple[str, ...]


def ancestors(path: str) -> list[str]:
    """``root.a.b`` -> ``["root.a.b", "root.a", "root"]``."""
    parts = path.split(".")
    return [".".join(parts[:index]) for index in range(len(parts), 0, -1)]


def _within(guaranteed: Mapping[str, int] | None, usage: Mapping[str, int]) -> bool:
    """Usage within the guarantee, for the guarantee's own types (none set: nothing to stay within)."""
    if not guaranteed:
        return True
    return all(usage.get(name, 0) <= quantity for name, quantity in guaranteed.items())


def _above(guaranteed: Mapping[str, int] | None, usage: Mapping[str, int]) -> bool:
    """Usage above the guarantee in some type (no guarantee: any usage is above it)."""
    if not guaranteed:
        return any(quantity > 0 for quantity in usage.values())
    return any(usage.get(name, 0) > quantity for name, quantity in guaranteed.items()) or any(
        quantity > 0 and name not in guaranteed for name, quantity in usage.items()
    )


def _stays_at_or_above(guaranteed: Mapping[str, int] | None, usage: Mapping[str, int]) -> bool:
    """Usage does not drop below the guarantee in any guaranteed type."""
    if not guaranteed:
        return True
    return all(usage.get(name, 0) >= quantity for name, quantity in guaranteed.items() if quantity > 0)


def preemptor_may_preempt(
    preemptor: Preemptor,
    queues: Mapping[str, QueueFacts],
    relief: Mapping[str, Mapping[str, int]] | None = None,
) -> bool:
    """Law 1: some queue on the ask's path has a guarantee, and none is exceeded once it is allocated.

    ``relief`` is what the chosen victims give back to each queue on the ask's path (victims in a
    sibling of the ask's queue lower their common parent's usage, as YuniKorn's snapshot does)."""
    guaranteed_somewhere = False
    for path in ancestors(preemptor.queue_path):
        facts = queues.get(path)
        if facts is None or not facts.guaranteed:
            continue
        guaranteed_somewhere = True
        usage = res.add(facts.allocated, preemptor.resource)
        if relief and path in relief:
            usage = res.sub(usage, relief[path])
        if not _within(facts.guaranteed, usage):
            return False
    return guaranteed_somewhere


def law_1_possible(preemptor: Preemptor, queues: Mapping[str, QueueFacts]) -> bool:
    """Could any victims satisfy law 1? The ask's own queue gives no victims (law 2), so it must stay
    within its guarantee as it is; a parent may be brought back by victims in its other children."""
    own = queues.get(preemptor.queue_path)
    if (
        own is not None
        and own.guaranteed
        and not _within(own.guaranteed, res.add(own.allocated, preemptor.resource))
    ):
        return False
    return any(
        (facts := queues.get(path)) is not None and facts.guaranteed
        for path in ancestors(preemptor.queue_path)
    )


def fence_root(queue_path: str, queues: Mapping[str, QueueFacts]) -> str:
    """The subtree the ask's victims must come from: below the nearest fence, else the whole tree."""
    for path in ancestors(queue_path):
        facts = queues.get(path)
        if facts is not None and facts.policy == POLICY_FENCE:
            return path
    return "root"


def _inside(path: str, subtree: str) -> bool:
    return path == subtree or path.startswith(subtree + ".")


def eligible(
    preemptor: Preemptor,
    candidates: Iterable[Candidate],
    queues: Mapping[str, QueueFacts],
    fence: str | None = None,
    verdicts: dict[str, bool] | None = None,
) -> list[Candidate]:
    """Laws 2, 4 and 5, and the first half of 3 (the victim's queue is above its guarantee now).
    ``verdicts`` caches each queue's verdict across calls of one attempt."""
    if fence is None:
        fence = fence_root(preemptor.queue_path, queues)
    if verdicts is None:
        verdicts = {}
    result = []
    for candidate in candidates:
        if candidate.application_id == preemptor.application_id or candidate.required_node:
            continue  # daemon-set allocations are left to their own (required-node) rule
        if candidate.priority > preemptor.priority:
            continue
        path = candidate.queue_path
        verdict = verdicts.get(path)
        if verdict is None:
            verdict = verdicts[path] = victim_queue_eligible(preemptor.queue_path, fence, path, queues)
        if verdict:
            result.append(candidate)
    return result


def victim_queue_eligible(
    preemptor_queue: str, fence: str, path: str, queues: Mapping[str, QueueFacts]
) -> bool:
    """May allocations of the queue at ``path`` be victims at all? Not the ask's own queue (law 2),
    inside the fence, not disabled (law 5), above its guarantee now (law 3's first half)."""
    if path == preemptor_queue or not _inside(path, fence):
        return False
    facts = queues.get(path)
    if facts is None or facts.policy == POLICY_DISABLED:
        return False
    return _above(facts.guaranteed, facts.allocated)


def victim_order(candidate: Candidate) -> tuple[bool, bool, int]:
    """Law 6's order on a node: preemptable first, then non-originators, then the newest."""
    return (not candidate.allow_preempt_self, candidate.originator, -candidate.sequence)


def _choose_on_node(
    preemptor: Preemptor,
    available: Mapping[str, int],
    candidates: Sequence[Candidate],
    queues: Mapping[str, QueueFacts],
    limit: int | None = None,
) -> list[Candidate] | None:
    """The victims on one node, in order, until the ask fits and law 1 holds; None if that never
    happens (law 3 kept throughout) or would take more than ``limit`` victims."""
    shared = set(ancestors(preemptor.queue_path))
    if res.fits_in(preemptor.resource, available) and preemptor_may_preempt(preemptor, queues):
        return []
    taken: dict[str, Resource] = {}  # queue path -> what the victims so far take from it
    relief: dict[str, Resource] = {}  # the same for the queues the ask's queue shares with victims
    freed: Resource = dict(available)
    victims: list[Candidate] = []
    for candidate in candidates:
        fits = res.fits_in(preemptor.resource, freed)
        victim_paths = ancestors(candidate.queue_path)
        if fits:
            # room enough: only a victim that brings a shared parent back within its guarantee helps
            if not any(path in shared for path in victim_paths):
                continue
        elif not any(
            candidate.resource.get(name, 0) > 0 and freed.get(name, 0) < quantity
            for name, quantity in preemptor.resource.items()
        ):
            continue  # useless: frees no type the ask still lacks
        after: dict[str, Resource] = {}
        for path in victim_paths:
            if path in shared:
                continue
            facts = queues.get(path)
            if facts is None:
                continue
            usage = res.sub(res.sub(facts.allocated, taken.get(path, {})), candidate.resource)
            if not _stays_at_or_above(facts.guaranteed, usage):
                break
            after[path] = res.add(taken.get(path, {}), candidate.resource)
        else:
            taken.update(after)
            for path in victim_paths:
                if path in shared:
                    relief[path] = res.add(relief.get(path, {}), candidate.resource)
            victims.append(candidate)
            res.add_into(freed, candidate.resource)
            if res.fits_in(preemptor.resource, freed) and preemptor_may_preempt(preemptor, queues, relief):
                return victims
            if limit is not None and len(victims) >= limit:
                return None  # already as many as a plan found elsewhere: this node cannot do better
    return None


def choose_victims(
    preemptor: Preemptor,
    candidates: Iterable[Candidate],
    queues: Mapping[str, QueueFacts],
    available: Mapping[str, Mapping[str, int]],
) -> Plan | None:
    """The node and victims that make room for ``preemptor`` by YuniKorn's laws, or None.

    ``available`` is each schedulable node's free room now; nodes not in it are not considered.
    """
    by_node: dict[str, list[Candidate]] = {}
    for candidate in candidates:
        if candidate.node_id in available:
            by_node.setdefault(candidate.node_id, []).append(candidate)
    nodes = [(node_id, available[node_id], by_node[node_id].__iter__) for node_id in sorted(by_node)]
    return choose_on_nodes(preemptor, queues, nodes)


# one node to consider: its id, its free room, and a function giving the allocations on it
NodeRoom = tuple[str, Mapping[str, int], Callable[[], Iterable[Candidate]]]


def choose_on_nodes(
    preemptor: Preemptor,
    queues: Mapping[str, QueueFacts],
    nodes: Sequence[NodeRoom],
    patience: int | None = None,
) -> Plan | None:
    """``choose_victims`` over nodes given in node-id order, each one's candidates loaded only when it
    is reached: the node needing the fewest victims wins, the first in order among equals (YuniKorn:
    the fewest victims, then the node id), so the search ends at the first node one victim frees.

    With ``patience``, the search also ends that many nodes after the best plan so far was found: on a
    large cluster the cost of an attempt stays bounded (YuniKorn computes every node's victims)."""
    if not law_1_possible(preemptor, queues):
        return None
    fence = fence_root(preemptor.queue_path, queues)
    verdicts: dict[str, bool] = {}
    loaded: dict[str, list[Candidate]] = {}
    for allow_opted_out in (False, True):
        best: tuple[str, list[Candidate]] | None = None
        since_best = 0
        for node_id, room, load in nodes:
            if best is not None:
                since_best += 1
                if patience is not None and since_best > patience:
                    break
            pool = loaded.get(node_id)
            if pool is None:
                pool = eligible(preemptor, load(), queues, fence, verdicts)
                pool.sort(key=victim_order)
                loaded[node_id] = pool
            if not allow_opted_out:
                pool = [c for c in pool if c.allow_preempt_self]
            if not pool:
                continue
            limit = len(best[1]) - 1 if best is not None else None
            if limit == 0:
                break
            victims = _choose_on_node(preemptor, room, pool, queues, limit)
            if not victims:
                continue  # None: not enough here (or no better); []: fits already, no preemption needed
            if best is None or len(victims) < len(best[1]):
                best = (node_id, victims)
                since_best = 0
            if len(victims) == 1:
                break  # nothing later in the order can beat one victim
        if best is not None:
            return Plan(node_id=best[0], victims=tuple(v.uuid for v in best[1]))
    return None


def required_node_victims(
    preemptor: Preemptor, candidates: Iterable[Candidate], node_id: str, available: Mapping[str, int]
) -> Plan | None:
    """Room on the one node a required-node ask must run on: its own application's allocations may go
    too, lowest priority first (then preemptable first, then the newest); other required-node
    allocations never. Opted-out allocations only when nothing else frees enough."""
    on_node = [c for c in candidates if c.node_id == node_id and not c.required_node]
    for allow_opted_out in (False, True):
        pool = on_node if allow_opted_out else [c for c in on_node if c.allow_preempt_self]
        pool.sort(key=lambda c: (c.priority, not c.allow_preempt_self, -c.sequence))
        freed: Resource = dict(available)
        victims: list[str] = []
        for candidate in pool:
            if res.fits_in(preemptor.resource, freed):
                break
            if candidate.priority > preemptor.priority:
                continue
            victims.append(candidate.uuid)
            res.add_into(freed, candidate.resource)
        if victims and res.fits_in(preemptor.resource, freed):
            return Plan(node_id=node_id, victims=tuple(victims))
    return None
