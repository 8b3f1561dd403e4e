"""Victim choice for preemption, YuniKorn 1.x's laws as a pure function (no actors, no model state).

The scheduler hands over what it knows (the ask that may preempt, the queues' guarantees, maxes and
usage, the allocations that could make room, each node's free room) and gets back a node and the
victims to release, or nothing. The laws (YuniKorn's design/preemption and user_guide/preemption, and
its preemptor as of 1.8):

1. The ask's queue, and every queue above it, must stay within its guarantee and (below the root)
   its max once the ask is allocated, and some queue on the path has a guarantee: preemption gets a
   queue *to* its guarantee, never beyond, and frees a parent's max a sibling fills.
2. Never a victim from the ask's own application or queue (only inter-queue preemption).
3. A victim's queue must be above its guarantee, not within what is left of the guarantees along
   its path (the parent-guarantee rule), and taking the victim must not leave it, or any queue above
   it that the ask's queue does not share, below its guarantee in a type the victim frees.
4. A victim's priority is at most the ask's as YuniKorn's priority walk sees it (``priority_limits``:
   ``priority.offset`` up the ask's path and down the victim's, ``priority.policy: fence``); equal
   is allowed, unlike Kubernetes.
5. A ``fence`` on a queue keeps the ask's victims inside the fenced subtree, as does a queue on its
   path whose usage is exactly its max; ``disabled`` makes a queue's allocations non-victims (the
   caller passes the effective policy of each queue).
6. The node is the one that needs the fewest victims for the ask to fit (one that fits already needs
   none), the first in node-id order among equals (``choose_on_nodes`` may stop looking a while after
   its best plan, to bound the cost on large clusters). On a node: allocations that allow preemption
   first, then non-originators, then the newest. Allocations that opted out of preemption are taken
   only when nothing else frees enough. When law 1 still fails, ``additional_victims`` from the
   whole cluster, in the same order, bring the ask's path within its limits.

Required-node asks (daemon sets) have their own rule, ``required_node_victims``: only their node
counts, their own application's allocations may go too, and the lowest priority goes first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

import attrs

from korral import resource as res
from korral.resource import Resource

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
    # the queue's own max (None: unlimited) and its usage including what is being preempted already
    # (``allocated`` leaves that out): a queue whose booked usage equals its max fences the victims
    max: Mapping[str, int] | None = None
    booked: Mapping[str, int] | None = None
    # ``priority.offset`` and ``priority.policy: fence`` of the queue (YuniKorn's priority walk)
    priority_offset: int = 0
    priority_fence: bool = False


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
    # larger is newer, across the whole cluster (``sequence`` orders one node's allocations)
    age: int = 0


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
    # each victim's application, in the same order: victims that free a queue's headroom may be on
    # other nodes than ``node_id`` (not part of equality: the uuids say which allocations go)
    owners: tuple[str, ...] = attrs.field(default=(), eq=False)


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


def _over_limits(facts: QueueFacts, usage: Mapping[str, int]) -> Resource:
    """How far ``usage`` is over the queue's guarantee, and over its max below the root (the cluster's
    size is no limit here), per type: what victims inside the queue must give back."""
    over: Resource = {}
    limits = (facts.guaranteed, facts.max) if facts.max and "." in facts.path else (facts.guaranteed,)
    for limit in limits:
        if limit:
            for name, quantity in limit.items():
                excess = usage.get(name, 0) - quantity
                if excess > 0 and excess > over.get(name, 0):
                    over[name] = excess
    return over


def shortfall(
    preemptor: Preemptor,
    queues: Mapping[str, QueueFacts],
    relief: Mapping[str, Mapping[str, int]] | None = None,
) -> dict[str, Resource]:
    """Each queue on the ask's path that would be over its guarantee or its max once the ask is
    allocated, with how much, after what the chosen victims give back (``relief``)."""
    result: dict[str, Resource] = {}
    for path in ancestors(preemptor.queue_path):
        facts = queues.get(path)
        if facts is None or not (facts.guaranteed or facts.max):
            continue
        usage = res.add(facts.allocated, preemptor.resource)
        if relief and path in relief:
            usage = res.sub(usage, relief[path])
        over = _over_limits(facts, usage)
        if over:
            result[path] = over
    return result


def _guaranteed_somewhere(preemptor: Preemptor, queues: Mapping[str, QueueFacts]) -> bool:
    return any(
        (facts := queues.get(path)) is not None and facts.guaranteed
        for path in ancestors(preemptor.queue_path)
    )


def preemptor_may_preempt(
    preemptor: Preemptor,
    queues: Mapping[str, QueueFacts],
    relief: Mapping[str, Mapping[str, int]] | None = None,
) -> bool:
    """Law 1: some queue on the ask's path has a guarantee, and once the ask is allocated none is over
    its guarantee, nor (below the root) over its max.

    ``relief`` is what the chosen victims give back to each queue on the ask's path (victims in a
    sibling of the ask's queue lower their common parent's usage, as YuniKorn's snapshot does)."""
    return _guaranteed_somewhere(preemptor, queues) and not shortfall(preemptor, queues, relief)


def law_1_possible(preemptor: Preemptor, queues: Mapping[str, QueueFacts]) -> bool:
    """Could any victims satisfy law 1? The ask's own queue gives no victims (law 2), so it must stay
    within its guarantee and its max as it is; a parent may be brought back by victims in its other
    children."""
    own = queues.get(preemptor.queue_path)
    if own is not None and _over_limits(own, res.add(own.allocated, preemptor.resource)):
        return False
    return _guaranteed_somewhere(preemptor, queues)


def _full(facts: QueueFacts) -> bool:
    """Is the queue's usage (what is being preempted included) exactly its max?"""
    limit, booked = facts.max, facts.booked
    if not limit or booked is None:
        return False
    return all(booked.get(name, 0) == quantity for name, quantity in limit.items()) and all(
        name in limit for name, quantity in booked.items() if quantity
    )


def fence_root(queue_path: str, queues: Mapping[str, QueueFacts]) -> str:
    """The subtree the ask's victims must come from: below the nearest queue on its path with
    ``preemption.policy: fence`` or whose usage is exactly its max (YuniKorn: only victims inside a
    full queue make room in it), else the whole tree."""
    for path in ancestors(queue_path):
        facts = queues.get(path)
        if facts is not None and (facts.policy == POLICY_FENCE or _full(facts)):
            return path
    return "root"


def _inside(path: str, subtree: str) -> bool:
    return path == subtree or path.startswith(subtree + ".")


def priority_limits(
    preemptor: Preemptor, queues: Mapping[str, QueueFacts], fence: str
) -> dict[str, int | None]:
    """YuniKorn's priority walk: the highest (raw) priority a victim may have in each queue under the
    fence; None: any (a ``priority.policy: fence`` queue at or below the ask's priority lets the ask
    into its whole subtree); a queue missing from the result gives no victims at all.

    Up the ask's path to the fence each queue adds its ``priority.offset`` to the ask's priority (a
    priority fence replaces it by its offset); down another branch each queue subtracts its offset,
    and a priority-fenced queue whose offset is above the ask's priority there is out of reach."""
    along: dict[str, int] = {}
    current = preemptor.priority
    for path in ancestors(preemptor.queue_path):
        facts = queues.get(path)
        if facts is not None:
            current = facts.priority_offset if facts.priority_fence else current + facts.priority_offset
        along[path] = current
        if path == fence:
            break
    if fence not in along:
        return {}
    walked: dict[str, tuple[int, bool]] = {fence: (along[fence], False)}
    for path in sorted(queues):  # a parent's path sorts before its children's
        if path == fence or not _inside(path, fence):
            continue
        above = walked.get(path.rsplit(".", 1)[0])
        if above is None:
            continue  # its parent is out of reach
        if path in along:
            walked[path] = (along[path], above[1])
            continue
        facts = queues[path]
        if facts.priority_fence:
            if facts.priority_offset > above[0]:
                continue
            walked[path] = (above[0], True)
        else:
            walked[path] = (above[0] - facts.priority_offset, above[1])
    del walked[fence]
    return {path: None if fenced else limit for path, (limit, fenced) in walked.items()}


_UNREACHABLE = object()


def eligible(
    preemptor: Preemptor,
    candidates: Iterable[Candidate],
    queues: Mapping[str, QueueFacts],
    fence: str | None = None,
    verdicts: dict[str, bool] | None = None,
    limits: Mapping[str, int | None] | None = None,
) -> list[Candidate]:
    """Laws 2, 4 and 5, and the first half of 3 (the victim's queue is above its guarantee now).
    ``verdicts`` caches each queue's verdict across calls of one attempt; ``limits`` are the
    ``priority_limits`` of the attempt."""
    if fence is None:
        fence = fence_root(preemptor.queue_path, queues)
    if verdicts is None:
        verdicts = {}
    if limits is None:
        limits = priority_limits(preemptor, queues, fence)
    result = []
    for candidate in candidates:
        if candidate.application_id == preemptor.application_id or candidate.required_node:
            continue  # daemon-set allocations are left to their own (required-node) rule
        path = candidate.queue_path
        limit = limits.get(path, _UNREACHABLE)
        if limit is _UNREACHABLE or (limit is not None and candidate.priority > limit):  # type: ignore[operator]
            continue
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
    inside the fence, not disabled (law 5), above its guarantee now (law 3's first half), and not
    within what is left of the guarantees along its path (YuniKorn 1.8's parent-guarantee rule)."""
    if path == preemptor_queue or not _inside(path, fence):
        return False
    facts = queues.get(path)
    if facts is None or facts.policy == POLICY_DISABLED:
        return False
    if not _above(facts.guaranteed, facts.allocated):
        return False
    return not _within_path_guarantees(preemptor_queue, path, queues)


def _within_path_guarantees(preemptor_queue: str, path: str, queues: Mapping[str, QueueFacts]) -> bool:
    """YuniKorn 1.8's parent-guarantee rule: what is left of the guarantees from the root down to the
    queue (the smallest per type) is nowhere negative, so the queue gives no victims: a queue without
    a guarantee of its own under a parent within its guarantee is not taken from. A parent the ask's
    queue shares does not hand its remainder down when the ask's queue has a guarantee of its own
    (then siblings under it may be victims for the ask)."""
    own = queues.get(preemptor_queue)
    ask_guaranteed = own is not None and bool(own.guaranteed)
    remaining: dict[str, int] | None = None
    for step in reversed(ancestors(path)):
        facts = queues.get(step)
        guaranteed = facts.guaranteed if facts is not None else None
        if not guaranteed:
            continue
        assert facts is not None
        if ask_guaranteed and _inside(preemptor_queue, step):
            remaining = None
            continue
        merged = dict(remaining) if remaining else {}
        for name, quantity in guaranteed.items():
            left = quantity - facts.allocated.get(name, 0)
            if name not in merged or left < merged[name]:
                merged[name] = left
        remaining = merged
    return bool(remaining) and all(left >= 0 for left in remaining.values())  # type: ignore[union-attr]


def victim_order(candidate: Candidate) -> tuple[bool, bool, int]:
    """Law 6's order on a node: preemptable first, then non-originators, then the newest."""
    return (not candidate.allow_preempt_self, candidate.originator, -candidate.sequence)


def cluster_order(candidate: Candidate) -> tuple[bool, bool, int]:
    """The same order over the whole cluster (victims that free a queue's headroom): by ``age``."""
    return (not candidate.allow_preempt_self, candidate.originator, -candidate.age)


def _helps(paths: Sequence[str], candidate: Candidate, short: Mapping[str, Resource]) -> bool:
    """Does taking the candidate lower a queue on the ask's path in a type that queue is over by?"""
    for path in paths:
        over = short.get(path)
        if over and any(candidate.resource.get(name, 0) > 0 for name in over):
            return True
    return False


def _take(
    candidate: Candidate,
    paths: Sequence[str],
    shared: set[str],
    taken: dict[str, Resource],
    relief: dict[str, Resource],
    queues: Mapping[str, QueueFacts],
) -> bool:
    """Law 3's second half: take the candidate if it leaves its queue, and every queue above it the
    ask's queue does not share, at or above the guarantee (then ``taken`` / ``relief`` grow)."""
    after: dict[str, Resource] = {}
    for path in paths:
        if path in shared:
            continue
        facts = queues.get(path)
        if facts is None:
            continue
        usage = res.sub(res.sub(facts.allocated, taken.get(path, {})), candidate.resource)
        # resource-wise (YuniKorn 1.8): only the types the victim frees must stay at the guarantee
        guaranteed = facts.guaranteed
        if guaranteed:
            guaranteed = {name: q for name, q in guaranteed.items() if candidate.resource.get(name, 0) > 0}
        if not _stays_at_or_above(guaranteed, usage):
            return False
        after[path] = res.add(taken.get(path, {}), candidate.resource)
    taken.update(after)
    for path in paths:
        if path in shared:
            relief[path] = res.add(relief.get(path, {}), candidate.resource)
    return True


def _choose_on_node(
    preemptor: Preemptor,
    available: Mapping[str, int],
    candidates: Sequence[Candidate],
    queues: Mapping[str, QueueFacts],
    limit: int | None = None,
) -> list[Candidate] | None:
    """The victims on one node, in order, until the ask fits (none when it fits already); None when
    it never fits here (law 3 kept throughout) or would take more than ``limit`` victims. Whether the
    ask's queue path is then within its limits is ``additional_victims``' business (YuniKorn)."""
    if res.fits_in(preemptor.resource, available):
        return []
    shared = set(ancestors(preemptor.queue_path))
    taken: dict[str, Resource] = {}  # queue path -> what the victims so far take from it
    relief: dict[str, Resource] = {}  # the same for the queues the ask's queue shares with victims
    freed: Resource = dict(available)
    victims: list[Candidate] = []
    for candidate in candidates:
        if not any(
            candidate.resource.get(name, 0) > 0 and freed.get(name, 0) < quantity
            for name, quantity in preemptor.resource.items()
        ):
            continue  # useless: frees no type the ask still lacks
        if not _take(candidate, ancestors(candidate.queue_path), shared, taken, relief, queues):
            continue
        victims.append(candidate)
        res.add_into(freed, candidate.resource)
        if res.fits_in(preemptor.resource, freed):
            return victims
        if limit is not None and len(victims) >= limit:
            return None  # already as many as a plan found elsewhere: this node cannot do better
    return None


def additional_victims(
    preemptor: Preemptor,
    queues: Mapping[str, QueueFacts],
    chosen: Sequence[Candidate],
    pool: Iterable[Candidate],
) -> list[Candidate] | None:
    """YuniKorn's additional victims: the ask fits a node once ``chosen`` go, but a queue on its path
    stays over its guarantee or max (a parent's max full of a sibling's usage); victims from anywhere
    in the cluster (``pool``: eligible candidates, in ``cluster_order``) free that, each one lowering
    a queue that is over in a type it is over by, law 3 kept. None when they cannot."""
    shared = set(ancestors(preemptor.queue_path))
    taken: dict[str, Resource] = {}
    relief: dict[str, Resource] = {}
    for victim in chosen:
        _take(victim, ancestors(victim.queue_path), shared, taken, relief, queues)
    short = shortfall(preemptor, queues, relief)
    seen = {victim.uuid for victim in chosen}
    extra: list[Candidate] = []
    for candidate in sorted(pool, key=cluster_order):
        if not short:
            break
        if candidate.uuid in seen:
            continue
        paths = ancestors(candidate.queue_path)
        if not _helps(paths, candidate, short) or not _take(candidate, paths, shared, taken, relief, queues):
            continue
        extra.append(candidate)
        short = shortfall(preemptor, queues, relief)
    return None if short else extra


def choose_victims(
    preemptor: Preemptor,
    candidates: Iterable[Candidate],
    queues: Mapping[str, QueueFacts],
    available: Mapping[str, Mapping[str, int]],
) -> Plan | None:
    """The node and victims that make room for ``preemptor`` by YuniKorn's laws, or None.

    ``available`` is each schedulable node's free room now; nodes not in it are not considered for
    the ask (victims that only free a queue's headroom may be anywhere).
    """
    everything = list(candidates)
    by_node: dict[str, list[Candidate]] = {}
    for candidate in everything:
        by_node.setdefault(candidate.node_id, []).append(candidate)
    nodes = [
        (node_id, available[node_id], by_node.get(node_id, []).__iter__) for node_id in sorted(available)
    ]
    return choose_on_nodes(preemptor, queues, nodes, everyone=everything.__iter__)


# one node to consider: its id, its free room, and a function giving the allocations on it (None: the
# node cannot take the ask at all)
NodeRoom = tuple[str, Mapping[str, int], Callable[[], Iterable[Candidate] | None]]


def choose_on_nodes(
    preemptor: Preemptor,
    queues: Mapping[str, QueueFacts],
    nodes: Sequence[NodeRoom],
    patience: int | None = None,
    everyone: Callable[[], Iterable[Candidate]] | None = None,
) -> Plan | None:
    """``choose_victims`` over nodes given in node-id order, each one's candidates loaded only when it
    is reached: the node needing the fewest victims for the ask to fit wins (one that fits already
    needs none), the first in order among equals (YuniKorn: the fewest victims, then the node id), so
    the search ends at the first node needing none, or one when no queue limit is short.

    When a queue on the ask's path would be over its guarantee or max, ``additional_victims`` from
    ``everyone`` (all allocations of the cluster; not given: none) bring it back (YuniKorn's preemptor).

    With ``patience``, the search also ends that many nodes after the best plan so far was found: on a
    large cluster the cost of an attempt stays bounded (YuniKorn computes every node's victims)."""
    if not law_1_possible(preemptor, queues):
        return None
    fence = fence_root(preemptor.queue_path, queues)
    limits = priority_limits(preemptor, queues, fence)
    # short of headroom or guarantee: a node that fits already is best; else one that fits with one
    short = bool(shortfall(preemptor, queues))
    verdicts: dict[str, bool] = {}
    loaded: dict[str, list[Candidate] | None] = {}
    for allow_opted_out in (False, True):
        best: tuple[str, list[Candidate]] | None = None
        since_best = 0
        for node_id, room, load in nodes:
            if best is not None:
                since_best += 1
                if patience is not None and since_best > patience:
                    break
            if node_id in loaded:
                pool = loaded[node_id]
            else:
                found = load()
                pool = None if found is None else eligible(preemptor, found, queues, fence, verdicts, limits)
                if pool is not None:
                    pool.sort(key=victim_order)
                loaded[node_id] = pool
            if pool is None:
                continue
            if not allow_opted_out:
                pool = [c for c in pool if c.allow_preempt_self]
            fits = res.fits_in(preemptor.resource, room)
            if fits and not short:
                continue  # fits already, no preemption needed
            if not pool and not fits:
                continue
            victims = _choose_on_node(preemptor, room, pool, queues, len(best[1]) - 1 if best else None)
            if victims is None:
                continue
            if best is None or len(victims) < len(best[1]):
                best = (node_id, victims)
                since_best = 0
                if len(victims) <= (0 if short else 1):
                    break  # nothing later in the order can need fewer victims
        if best is None:
            continue
        node_id, victims = best
        if not short and victims:
            return _plan(node_id, victims)
        pool = eligible(preemptor, everyone(), queues, fence, verdicts, limits) if everyone else []
        if not allow_opted_out:
            pool = [c for c in pool if c.allow_preempt_self]
        extra = additional_victims(preemptor, queues, victims, pool)
        if extra is not None and (victims or extra):
            return _plan(node_id, victims + extra)
    return None


def _plan(node_id: str, victims: Sequence[Candidate]) -> Plan:
    return Plan(
        node_id=node_id,
        victims=tuple(v.uuid for v in victims),
        owners=tuple(v.application_id for v in victims),
    )


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
