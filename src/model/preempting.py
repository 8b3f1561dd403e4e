"""Preemption and required-node asks in YuniKorn's scheduling walk, over a ``PartitionModel``.

The walk calls in here at two points, so the reference scheduler and the Scheduler actor's view share
every decision: an ask that fits no node may preempt (``try_preempt``), and an ask with a required node
is placed only there (``try_required_node``, ``try_reserved_required_node``). Victims are chosen by
``policies.preemption``; this module only gathers the facts it needs and carries out its plan.

Carrying out a plan is YuniKorn's sequencing: each victim is released by the core with
``PREEMPTED_BY_SCHEDULER`` (``PartitionModel.core_release``: it stays booked on its node, queue and
application until the RM confirms), and the node is reserved for the preemptor, so nothing else can
take the room the victims leave; the reserved-ask step of the cycle places the preemptor there once the
room is free. An ask waits for its victims before it may try again, and tries at most every
``PREEMPT_ATTEMPT_INTERVAL`` seconds (YuniKorn's preemptAttemptFrequency).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING

from korral import resource as res
from korral import si
from korral.model.allocation import TAG_REQUIRED_NODE, Allocation, Ask, tag_allows_preemption
from korral.model.app.application import Application
from korral.model.deadlines import reached
from korral.model.node import Node
from korral.model.queue import Queue
from korral.model.reservations import clear_for_required_node, free_for_preemptor
from korral.policies import preemption as policy

if TYPE_CHECKING:
    from korral.model.partition.composed import PartitionModel

# YuniKorn: an ask re-attempts preemption at most every 15 s, and at most 10 asks of a queue attempt
# it in one scheduling cycle (so a crowd of asks due at once cannot stall a cycle)
PREEMPT_ATTEMPT_INTERVAL = 15.0
PREEMPT_ATTEMPTS_PER_QUEUE = 10
# how many nodes the RM's predicates may turn down before an attempt gives up until the next one
PREDICATE_RETRIES = 5
# how many more nodes an attempt looks at for fewer victims once it has a plan (bounds its cost)
SEARCH_PATIENCE = 128
_PREEMPTED = si.TerminationType.PREEMPTED_BY_SCHEDULER


def preemption_message(ask: Ask) -> str:
    if ask.required_node:
        return f"preempting allocations to free up resources to run daemon set ask: {ask.allocation_key}"
    return f"preempting allocations to free up resources to run ask: {ask.allocation_key}"


def waiting_on_victims(model: PartitionModel, ask: Ask) -> bool:
    """Is a victim the ask chose still being released (booked until the RM confirms)?"""
    applications = model.applications
    for application_id, uuid in ask.preempt_victims:
        app = applications.get(application_id)
        if app is not None and app.releasing.get(uuid) is _PREEMPTED:
            return True
    ask.preempt_victims = ()
    return False


def _may_attempt(model: PartitionModel, ask: Ask, now: float) -> bool:
    """Rate limit and sequencing: not while its victims are still going, at most every 15 s. The
    scheduler is woken for the next attempt (nothing else may wake it: an ask short of headroom is
    neither reserved nor outstanding)."""
    if ask.preempt_victims and waiting_on_victims(model, ask):
        return False
    checked = ask.preempt_checked_at
    if checked is not None and not reached(now, checked + PREEMPT_ATTEMPT_INTERVAL):
        model.effects.wake_by(checked + PREEMPT_ATTEMPT_INTERVAL)
        return False
    ask.preempt_checked_at = now
    model.effects.wake_by(now + PREEMPT_ATTEMPT_INTERVAL)
    return True


def path_priority_offset(queue: Queue | None) -> int:
    """The sum of ``priority.offset`` along a queue's path: priorities compare after the offsets."""
    offset = 0
    while queue is not None:
        offset += queue.priority_offset
        queue = queue.parent
    return offset


def queue_facts(model: PartitionModel) -> dict[str, policy.QueueFacts]:
    """Each queue's guarantee, usage and effective preemption policy. Usage leaves out what is being
    preempted already (YuniKorn's allocated minus preempting): that room is as good as gone."""
    preempting: dict[str, dict[str, int]] = {}
    for app in model.applications.values():
        if not app.releasing:
            continue
        for uuid, termination in app.releasing.items():
            allocation = app.allocations.get(uuid)
            if termination is _PREEMPTED and allocation is not None:
                queue: Queue | None = model.queues.get(app.queue_path)
                while queue is not None:
                    res.add_into(preempting.setdefault(queue.path, {}), allocation.resource)
                    queue = queue.parent
    facts = {}
    for path, queue in model.queues.items():
        allocated = queue.allocated
        gone = preempting.get(path)
        if gone:
            allocated = res.sub(allocated, gone)
        facts[path] = policy.QueueFacts(
            path=path,
            guaranteed=queue.guaranteed,
            allocated=allocated,
            policy=queue.preemption_policy,
            max=queue.max,
            booked=queue.allocated,
            priority_offset=queue.priority_offset,
            priority_fence=queue.priority_fence,
        )
    return facts


def victim_flags(app: Application, allocation: Allocation) -> tuple[bool, bool]:
    """(allow_preempt_self, originator) of an allocation: its ask's, else its allow-preemption tag."""
    ask = app.asks.get(allocation.allocation_key)
    if ask is not None and ask.generation == allocation.ask_generation:
        return ask.allow_preempt_self, ask.originator
    return tag_allows_preemption(allocation.tags), False


def allocation_age(uuid: str) -> int:
    """An allocation's place in the partition's series (larger is newer): the number its uuid ends
    with, as the partition issues them (recovered ones included); 0 for a uuid the RM chose."""
    tail = uuid.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _node_candidates(
    model: PartitionModel, node: Node, allowed: Mapping[str, int | None] | None
) -> list[policy.Candidate]:
    """The allocations on ``node`` that could be victims, not being released: from the queues in
    ``allowed`` with at most the (raw) priority given there (None: any; ``allowed`` None: any queue)."""
    applications = model.applications
    found = []
    # the node books allocations in order (a dict keeps it): the index is the age on the node
    for sequence, (uuid, allocation) in enumerate(node.allocations.items()):
        path = allocation.queue_path
        if allowed is not None:
            if path not in allowed:
                continue
            limit = allowed[path]
            if limit is not None and allocation.priority > limit:
                continue
        app = applications.get(allocation.application_id)
        if app is None or (app.releasing and uuid in app.releasing) or uuid not in app.allocations:
            continue
        allow_self, originator = victim_flags(app, allocation)
        found.append(
            policy.Candidate(
                uuid,
                app.application_id,
                app.queue_path,
                node.node_id,
                allocation.resource,
                allocation.priority,
                allow_self,
                originator,
                sequence,
                bool(allocation.tags.get(TAG_REQUIRED_NODE)),
                allocation_age(uuid),
            )
        )
    return found


class _NodeRooms(Sequence[policy.NodeRoom]):
    """The nodes for the policy, each one's facts looked up only when the search reaches it."""

    def __init__(
        self,
        model: PartitionModel,
        node_ids: list[str],
        load: Callable[[Node], list[policy.Candidate] | None],
    ) -> None:
        self.nodes = model.nodes
        self.node_ids = node_ids
        self.load = load

    def __len__(self) -> int:
        return len(self.node_ids)

    def __getitem__(self, index: int) -> policy.NodeRoom:  # type: ignore[override]
        node = self.nodes[self.node_ids[index]]
        return (node.node_id, node.available, partial(self.load, node))


def _release_victims(model: PartitionModel, ask: Ask, victims: Iterable[tuple[str, str]]) -> None:
    """Release each (application, uuid) victim for the ask: ``ask.preempt_victims`` are those it did."""
    message = preemption_message(ask)
    chosen = []
    for application_id, uuid in victims:
        if model.core_release(application_id, uuid, _PREEMPTED, message) is not None:
            chosen.append((application_id, uuid))
    ask.preempt_victims = tuple(chosen)


def try_preempt(model: PartitionModel, app: Application, queue: Queue, ask: Ask, now: float) -> bool:
    """An ask that fits no node, or whose queue's headroom is short, may preempt (YuniKorn 1.x): it
    allows preempting others, it has waited its queue's ``preemption.delay``, the partition has
    preemption on, and the laws find victims. Then the victims are released and, when the queue's
    headroom takes the ask, the node is reserved for it (else it is placed the usual way once the
    victims are gone, as YuniKorn). True if it did. Only an attempt past these preconditions is
    timed for YuniKorn's trypreemption latency (while a reader wants it), as YuniKorn times it."""
    if not ask.allow_preempt_other or ask.required_node or not model.config.preemption.enabled:
        return False
    due = ask.create_time + queue.preemption_delay
    if not reached(now, due):
        model.effects.wake_by(due)
        return False
    if model.preempt_attempts.get(queue.path, 0) >= PREEMPT_ATTEMPTS_PER_QUEUE or not _may_attempt(
        model, ask, now
    ):
        return False
    model.preempt_attempts[queue.path] = model.preempt_attempts.get(queue.path, 0) + 1
    latencies = model.latencies
    if latencies is None:
        return _attempt(model, app, queue, ask, now)
    started = perf_counter()
    try:
        return _attempt(model, app, queue, ask, now)
    finally:
        latencies.append(("trypreemption", perf_counter() - started))


def _attempt(model: PartitionModel, app: Application, queue: Queue, ask: Ask, now: float) -> bool:
    """One preemption attempt for an ask past the preconditions: victims chosen and released."""
    facts = queue_facts(model)
    preemptor = policy.Preemptor(
        allocation_key=ask.allocation_key,
        application_id=app.application_id,
        queue_path=queue.path,
        resource=ask.resource,
        priority=ask.priority,
    )
    if not policy.law_1_possible(preemptor, facts):
        return False
    fence = policy.fence_root(queue.path, facts)
    limits = policy.priority_limits(preemptor, facts, fence)
    # the leaf queues victims may come from, with the highest (raw) priority a victim there may have
    allowed: dict[str, int | None] = {}
    for path, leaf in model.queues.items():
        if (
            leaf.is_leaf
            and leaf.applications
            and path in limits
            and policy.victim_queue_eligible(queue.path, fence, path, facts)
        ):
            allowed[path] = limits[path]
    if not allowed:
        return False
    mine = (app.application_id, ask.allocation_key)

    def load(node: Node) -> list[policy.Candidate] | None:
        if (
            not node.schedulable
            or (node.reservations and not free_for_preemptor(model, node, mine, ask.priority, now))
            or not node.capacity_fits(ask.resource)
        ):
            return None
        return _node_candidates(model, node, allowed) if node.allocations else []

    def everyone() -> list[policy.Candidate]:
        found: list[policy.Candidate] = []
        for node in model.nodes.values():
            if node.allocations:
                found.extend(_node_candidates(model, node, allowed))
        return found

    node_ids = sorted(model.nodes)  # the policy breaks ties by node id
    for _ in range(PREDICATE_RETRIES):
        plan = policy.choose_on_nodes(
            preemptor, facts, _NodeRooms(model, node_ids, load), SEARCH_PATIENCE, everyone
        )
        if plan is None:
            return False
        if model.predicates.allows(ask.allocation_key, plan.node_id):
            break
        node_ids.remove(plan.node_id)  # the RM's predicates turn this node down: the next best
    else:
        return False
    node = model.nodes[plan.node_id]
    over = queue.over_quota(ask.resource)
    _release_victims(model, ask, zip(plan.owners, plan.victims, strict=True))
    if ask.preempt_victims and (over is None or over.parent is None):
        if ask.allocation_key in app.reservations:
            model.unreserve(app.application_id, ask.allocation_key)
        model.reserve(app, ask, node)
    return bool(ask.preempt_victims)


# ---- required-node asks ----------------------------------------------------------------------------


def _claim(model: PartitionModel, app: Application, ask: Ask, node: Node) -> bool:
    """Make the node free of normal reservations for a required-node ask (the daemon set goes first);
    other required-node asks' reservations stay beside its own (korral.model.reservations)."""
    clear_for_required_node(model, app, ask.allocation_key, node)
    return True


def try_required_node(
    model: PartitionModel, app: Application, queue: Queue, ask: Ask, now: float
) -> Allocation | None:
    """A required-node ask in the queue walk: placed on its node if it fits there, else the node is
    reserved for it at once (no reservation delay). It waits while its node does not exist."""
    node = model.nodes.get(ask.required_node)
    if node is None or not node.schedulable or not node.capacity_fits(ask.resource):
        return None
    if node.fits(ask.resource) and (model.predicates.allows(ask.allocation_key, node.node_id)):
        if not _claim(model, app, ask, node):
            return None
        return model.commit(app, queue, ask, node, now)
    if _claim(model, app, ask, node):
        model.reserve(app, ask, node)
    return None


def try_reserved_required_node(
    model: PartitionModel, app: Application, queue: Queue, ask: Ask, node: Node, now: float
) -> Allocation | None:
    """A reserved required-node ask: placed when its node has room, else it preempts there."""
    if (
        node.schedulable
        and node.fits(ask.resource)
        and model.predicates.allows(ask.allocation_key, node.node_id)
    ):
        model.unreserve(app.application_id, ask.allocation_key)
        return model.commit(app, queue, ask, node, now)
    if node.schedulable and _may_attempt(model, ask, now):
        preempt_on_required_node(model, app, ask, node)
    return None


def preempt_on_required_node(model: PartitionModel, app: Application, ask: Ask, node: Node) -> bool:
    """YuniKorn's required-node preemptor: victims only on the ask's node, its own application's
    allocations included, lowest priority first; other daemon-set allocations never."""
    candidates = _node_candidates(model, node, None)
    preemptor = policy.Preemptor(
        allocation_key=ask.allocation_key,
        application_id=app.application_id,
        queue_path=app.queue_path,
        resource=ask.resource,
        priority=ask.priority,
    )
    plan = policy.required_node_victims(preemptor, candidates, node.node_id, node.available)
    if plan is None:
        model.effects.request_event(
            app.application_id,
            ask.allocation_key,
            f"Unschedulable request '{ask.allocation_key}' with required node '{node.node_id}', "
            "no preemption victim found",
        )
        return False
    _release_victims(model, ask, [(node.allocations[uuid].application_id, uuid) for uuid in plan.victims])
    return bool(ask.preempt_victims)
