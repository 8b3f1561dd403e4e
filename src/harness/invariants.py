"""Invariants of a quiescent core, checked through the public snapshots (after ``wait_until_idle``).

Each check returns human-readable violations; an empty list means the invariant holds. Used by
``korral stress`` at every checkpoint and by the tests.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import attrs

from korral import resource as res
from korral.core import Core
from korral.info import ApplicationInfo, NodeInfo, PartitionInfo, QueueInfo
from korral.testing import CORE_RELEASES, RecordingRM


@attrs.frozen(kw_only=True)
class PartitionState:
    info: PartitionInfo
    nodes: list[NodeInfo]
    applications: list[ApplicationInfo]
    queues: dict[str, QueueInfo]


def collect(core: Core, partition: str) -> PartitionState | None:
    info = core.partition(partition)
    if info is None:
        return None
    queues: dict[str, QueueInfo] = {}
    pending = ["root"]
    while pending:
        queue = core.queue(partition, pending.pop())
        if queue is not None:
            queues[queue.path] = queue
            pending.extend(queue.children)
    return PartitionState(
        info=info, nodes=core.nodes(partition), applications=core.applications(partition), queues=queues
    )


def _fingerprint(state: PartitionState) -> tuple[object, ...]:
    return (
        sorted((a.uuid, a.node_id) for app in state.applications for a in app.allocations),
        sorted((n.node_id, tuple(sorted(n.allocated.items()))) for n in state.nodes),
        sorted(
            (p, tuple(sorted(q.allocated.items())), tuple(sorted(q.pending.items())))
            for p, q in state.queues.items()
        ),
        sorted((app.application_id, app.state) for app in state.applications),
    )


def stable_collect(
    core: Core, partition: str, attempts: int = 10, idle_timeout: float = 60.0
) -> PartitionState | None:
    """A snapshot taken when nothing moved while it was read.

    The snapshots of a partition are read object by object, and timers (scheduling ticks acting on a
    reservation delay, completing timeouts, queue cleanup) may set work going after ``wait_until_idle``
    returned. Reading twice, idle in between, until both readings agree gives a state in which every
    object was read at the same point of the partition's history.
    """
    core.wait_until_idle(idle_timeout)
    state = collect(core, partition)
    for _ in range(attempts):
        core.wait_until_idle(idle_timeout)
        again = collect(core, partition)
        if state is None or again is None or _fingerprint(state) == _fingerprint(again):
            return again
        state = again
    return state


def _sum(resources: Iterable[dict[str, int]]) -> dict[str, int]:
    """Exact sum (Python ints, no int64 saturation): the harness must see a total the core clamped."""
    total: dict[str, int] = {}
    for resource in resources:
        for name, quantity in resource.items():
            total[name] = total.get(name, 0) + quantity
    return {name: quantity for name, quantity in total.items() if quantity}


def check_partition(state: PartitionState, *, recovered_queues: Iterable[str] = ()) -> list[str]:
    """Resources add up, nothing negative, nothing orphaned, no queue over its max."""
    problems: list[str] = []
    name = state.info.name
    # nodes
    for node in state.nodes:
        for label, resource in (
            ("capacity", node.capacity),
            ("allocated", node.allocated),
            ("occupied", node.occupied),
        ):
            if res.has_negative(resource):
                problems.append(f"{name} node {node.node_id}: negative {label} {resource}")
        total = _sum((node.allocated, node.occupied, node.available))
        if not res.equals(total, node.capacity):
            problems.append(
                f"{name} node {node.node_id}: capacity {node.capacity} != allocated "
                f"{node.allocated} + occupied {node.occupied} + available {node.available}"
            )
        if not res.equals(node.allocated, _sum(a.resource for a in node.allocations)):
            problems.append(
                f"{name} node {node.node_id}: allocated {node.allocated} != sum of its allocations"
            )
    if not res.equals(state.info.capacity, _sum(node.capacity for node in state.nodes)):
        problems.append(f"{name}: partition capacity {state.info.capacity} != sum of node capacities")
    # orphans: every allocation on a node belongs to an application, and the other way round
    on_nodes = {a.uuid: a for node in state.nodes for a in node.allocations}
    on_apps = {a.uuid: a for app in state.applications for a in app.allocations}
    # sorted: a set difference iterates in hash order, and a replay must print the same text
    for uuid in sorted(on_nodes.keys() - on_apps.keys()):
        problems.append(f"{name}: allocation {uuid} on node {on_nodes[uuid].node_id} has no application")
    for uuid in sorted(on_apps.keys() - on_nodes.keys()):
        problems.append(
            f"{name}: allocation {uuid} of application {on_apps[uuid].application_id} is on no node"
        )
    # applications
    for app in state.applications:
        if res.has_negative(app.allocated) or res.has_negative(app.pending):
            problems.append(f"{name} application {app.application_id}: negative usage")
        if not res.equals(app.allocated, _sum(a.resource for a in app.allocations)):
            problems.append(f"{name} application {app.application_id}: allocated != sum of its allocations")
        problems.extend(check_placeholders(name, app))
    # queues
    by_queue: dict[str, list[ApplicationInfo]] = defaultdict(list)
    for app in state.applications:
        by_queue[app.queue].append(app)
    recovered = set(recovered_queues)
    for path, queue in state.queues.items():
        if res.has_negative(queue.allocated) or res.has_negative(queue.pending):
            problems.append(f"{name} queue {path}: negative usage {queue.allocated} / {queue.pending}")
        if queue.is_leaf:
            expected = _sum(app.allocated for app in by_queue.get(path, ()))
        else:
            expected = _sum(
                state.queues[child].allocated for child in queue.children if child in state.queues
            )
        if not res.equals(queue.allocated, expected):
            members = (
                {app.application_id: app.allocated for app in by_queue.get(path, ())}
                if queue.is_leaf
                else {
                    child: state.queues[child].allocated for child in queue.children if child in state.queues
                }
            )
            problems.append(
                f"{name} queue {path}: allocated {queue.allocated} != sum of its "
                f"{'applications' if queue.is_leaf else 'children'} {expected}: {members}"
            )
        # root's max is the cluster's size, which may shrink under running work (node updates); so
        # may a queue's max inherited from root, resource by resource
        root_max = state.queues["root"].max if "root" in state.queues else {}
        own_max = {k: v for k, v in (queue.max or {}).items() if root_max.get(k) != v}
        over_max = path != "root" and own_max and not res.fits_in_max(queue.allocated, own_max)
        if over_max and not any(path == r or r.startswith(path + ".") for r in recovered):
            problems.append(f"{name} queue {path}: allocated {queue.allocated} above max {queue.max}")
    return problems


def check_rm_view(rm: RecordingRM, states: Iterable[PartitionState]) -> list[str]:
    """The RM's view of its allocations equals the core's, and nothing foreign reached it."""
    problems: list[str] = []
    core_allocations = {a.uuid: a for state in states for app in state.applications for a in app.allocations}
    with rm.lock:
        live = dict(rm.live)
        foreign = list(rm.foreign)
        # releases the core made: the RM knows they are going even if the snapshot predates them
        released_by_core = {
            (r.application_id, r.uuid) for r in rm.released if r.termination_type in CORE_RELEASES
        }
    for uuid in sorted(live.keys() - core_allocations.keys()):  # sorted: not hash order
        problems.append(f"RM {rm.rm_id} holds allocation {uuid} the core does not have")
    for uuid in sorted(core_allocations.keys() - live.keys()):
        allocation = core_allocations[uuid]
        if allocation.releasing or (allocation.application_id, uuid) in released_by_core:
            continue  # the core released it and keeps it booked until this RM confirms
        problems.append(f"RM {rm.rm_id} was never told of allocation {uuid}")
    for uuid in sorted(live.keys() & core_allocations.keys()):
        if not res.equals(live[uuid].resource_per_alloc, core_allocations[uuid].resource):
            problems.append(f"RM {rm.rm_id} allocation {uuid}: resources differ from the core's")
    for received in foreign:
        problems.append(f"RM {rm.rm_id} received allocation {received.uuid} twice or not its own")
    return problems


def check_unique_uuids(states: Iterable[PartitionState]) -> list[str]:
    """No allocation is booked twice: a uuid appears once among the applications of every partition
    of the core, and once among its nodes."""
    problems: list[str] = []
    on_apps: dict[str, list[str]] = defaultdict(list)
    on_nodes: dict[str, list[str]] = defaultdict(list)
    for state in states:
        for app in state.applications:
            for allocation in app.allocations:
                on_apps[allocation.uuid].append(f"{state.info.name}/{app.application_id}")
        for node in state.nodes:
            for allocation in node.allocations:
                on_nodes[allocation.uuid].append(f"{state.info.name}/{node.node_id}")
    for label, where in (("applications", on_apps), ("nodes", on_nodes)):
        for uuid, owners in sorted(where.items()):
            if len(owners) > 1:
                problems.append(f"allocation {uuid} is booked {len(owners)} times on {label}: {owners}")
    return problems


def check_placeholders(name: str, app: ApplicationInfo) -> list[str]:
    """Gang scheduling: placeholder usage is the sum of the allocated placeholders (those being
    replaced or timed out included: they stay booked until the RM confirms)."""
    expected = _sum(a.resource for a in app.allocations if a.placeholder)
    if not res.equals(app.placeholder, expected):
        return [
            f"{name} application {app.application_id}: placeholder usage {app.placeholder} != sum of its "
            f"allocated placeholders {expected}"
        ]
    return []


def check_releases_confirmed(state: PartitionState) -> list[str]:
    """After the RM confirmed every release the core made, none is still booked (a confirmed
    replacement or timeout left nothing behind on node, queue or application)."""
    return [
        f"{state.info.name} allocation {a.uuid} of {a.application_id}: release {a.releasing} confirmed "
        "by the RM but still booked"
        for app in state.applications
        for a in app.allocations
        if a.releasing
    ]


def check_user_limits(
    core: Core,
    state: PartitionState,
    groups: Iterable[str] = (),
    *,
    recovered_users: Iterable[str] = (),
    recovered_groups: Iterable[str] = (),
) -> list[str]:
    """No user (of an application in the partition) and none of ``groups`` is above a ``maxresources``
    or ``maxapplications`` that applies to it, unless recovered allocations put it there."""
    problems: list[str] = []
    name = state.info.name
    exempt = {("user", u) for u in recovered_users} | {("group", g) for g in recovered_groups}
    owners = [("user", user) for user in sorted({app.user for app in state.applications})]
    owners += [("group", group) for group in sorted(set(groups))]
    for kind, owner in owners:
        if (kind, owner) in exempt:
            continue
        info = core.user_usage(name, owner) if kind == "user" else core.group_usage(name, owner)
        for row in info.queues if info is not None else ():
            if row.max_resources and not res.fits_in_max(row.resource, row.max_resources):
                problems.append(
                    f"{name} {kind} {owner} at {row.queue_path}: uses {row.resource} above its "
                    f"maxresources {row.max_resources}"
                )
            if row.max_applications and len(row.running_applications) > row.max_applications:
                problems.append(
                    f"{name} {kind} {owner} at {row.queue_path}: runs {len(row.running_applications)} "
                    f"applications, above its maxapplications {row.max_applications}"
                )
    return problems


# ---- preemption (korral stress --preemption) -----------------------------------------------------------

PREEMPTED = "PREEMPTED_BY_SCHEDULER"


@attrs.frozen(kw_only=True)
class PreemptionParty:
    """What the laws need of a victim or a preemptor, as the RM that submitted it knows it.

    ``priority`` is the effective one (the ask's priority plus the ``priority.offset`` of its queue
    path), ``raw_priority`` the ask's own (what YuniKorn's required-node preemptor compares);
    ``required_node`` is the node a required-node ask is pinned to ("" for others)."""

    key: str
    application_id: str
    queue: str
    priority: int
    raw_priority: int = 0
    node_id: str = ""
    required_node: str = ""


@attrs.frozen(kw_only=True)
class QueueLaws:
    """The static preemption facts of a configuration: which queues are disabled (effective) and the
    fence root each preemptor queue's victims must stay under."""

    disabled: frozenset[str] = frozenset()
    fences: tuple[str, ...] = ()  # paths of queues with preemption.policy fence

    def fence_root(self, queue: str) -> str:
        best = "root"
        for fence in self.fences:
            if _inside(queue, fence) and len(fence) > len(best):
                best = fence
        return best

    def is_disabled(self, queue: str) -> bool:
        return any(_inside(queue, path) for path in self.disabled)


def _inside(path: str, subtree: str) -> bool:
    return path == subtree or path.startswith(subtree + ".")


def victim_law_breaches(victim: PreemptionParty, preemptor: PreemptionParty, laws: QueueLaws) -> list[str]:
    """Why ``preemptor`` could not have taken ``victim`` (empty: it could). Laws 2, 4 and 5 of
    YuniKorn's preemption; a required-node ask only on its node, its own application included."""
    reasons = []
    if preemptor.required_node:
        if victim.raw_priority > preemptor.raw_priority:
            reasons.append(
                f"victim priority {victim.raw_priority} above the required-node ask's "
                f"{preemptor.raw_priority}"
            )
        if victim.node_id != preemptor.required_node:
            reasons.append(f"victim on {victim.node_id}, the ask requires {preemptor.required_node}")
        return reasons
    if victim.priority > preemptor.priority:
        reasons.append(
            f"victim priority {victim.priority} above the preemptor's {preemptor.priority} (after offsets)"
        )
    if victim.application_id == preemptor.application_id:
        reasons.append("victim in the preemptor's own application")
    if victim.queue == preemptor.queue:
        reasons.append("victim in the preemptor's own queue")
    if laws.is_disabled(victim.queue):
        reasons.append(f"victim queue {victim.queue} has preemption disabled")
    fence = laws.fence_root(preemptor.queue)
    if not _inside(victim.queue, fence):
        reasons.append(f"victim queue {victim.queue} outside the preemptor's fence {fence}")
    return reasons


def check_victim_justified(
    victim: PreemptionParty, preemptors: Iterable[PreemptionParty], laws: QueueLaws
) -> list[str]:
    """A victim must be one that some preemptor pending when it was chosen may take by the laws.
    (The core does not name the preemptor to the RM, so the check is against every candidate.)"""
    candidates = list(preemptors)
    breaches = {p.key: victim_law_breaches(victim, p, laws) for p in candidates}
    if any(not reasons for reasons in breaches.values()):
        return []
    detail = "; ".join(f"{key}: {', '.join(reasons)}" for key, reasons in sorted(breaches.items())[:4])
    return [
        f"victim {victim.key} ({victim.application_id} in {victim.queue}, priority {victim.priority}, "
        f"node {victim.node_id}) taken, but no pending preemptor may take it"
        + (f" ({len(candidates)} pending: {detail})" if candidates else " (none pending)")
    ]


def queue_subtree_sum(state: PartitionState, path: str, *, preempted_only: bool) -> dict[str, int]:
    """What the applications in ``path``'s subtree hold (only victims awaiting confirmation, or all)."""
    return _sum(
        a.resource
        for app in state.applications
        if _inside(app.queue, path)
        for a in app.allocations
        if not preempted_only or a.releasing == PREEMPTED
    )


def check_guarantee_floor(
    state: PartitionState, queues: Iterable[str], removed: dict[str, dict[str, int]]
) -> list[str]:
    """No preemption took a queue below its guarantee.

    For each queue in ``queues`` (those that lost victims since the previous quiescent check): its
    usage without the victims still awaiting confirmation is at least its guarantee, less what left it
    otherwise in that time (``removed``: the RM's own releases, victims of required-node asks, which
    may ignore guarantees). The latest preemption decision in the queue left usage minus victims at or
    above the guarantee; since then only allocations (up) and those removals (down) moved it, and a
    confirmation takes the same allocation off both terms."""
    problems = []
    for path in sorted(set(queues)):
        queue = state.queues.get(path)
        if queue is None or not queue.guaranteed:
            continue
        usage = queue_subtree_sum(state, path, preempted_only=False)
        victims = queue_subtree_sum(state, path, preempted_only=True)
        lost = removed.get(path, {})
        for name, guaranteed in queue.guaranteed.items():
            left = usage.get(name, 0) - victims.get(name, 0)
            floor = guaranteed - lost.get(name, 0)
            if left < floor:
                problems.append(
                    f"{state.info.name} queue {path}: {name} {left} without its {victims.get(name, 0)} "
                    f"awaiting preemption, below its guarantee {guaranteed} (less {lost.get(name, 0)} "
                    "released otherwise since the last check)"
                )
    return problems


def check_victims_booked(
    state: PartitionState, awaiting: Iterable[str], confirmed: Iterable[str]
) -> list[str]:
    """A victim stays booked (marked as preempted) on its node, queue and application until the RM
    confirms its release, and is gone once the confirmation was taken in."""
    on_apps = {a.uuid: a for app in state.applications for a in app.allocations}
    on_nodes = {a.uuid for node in state.nodes for a in node.allocations}
    problems = []
    for uuid in sorted(set(awaiting)):
        allocation = on_apps.get(uuid)
        if allocation is None or uuid not in on_nodes:
            problems.append(f"{state.info.name}: victim {uuid} no longer booked before the RM confirmed")
        elif allocation.releasing != PREEMPTED:
            problems.append(
                f"{state.info.name}: victim {uuid} booked as {allocation.releasing or 'running'}, "
                f"not {PREEMPTED}"
            )
    for uuid in sorted(set(confirmed)):
        if uuid in on_apps or uuid in on_nodes:
            problems.append(f"{state.info.name}: victim {uuid} still booked after the RM confirmed")
    return problems


def check_nodes_not_overcommitted(state: PartitionState) -> list[str]:
    """Nothing is placed where a victim still holds the room: no node books more than its capacity."""
    return [
        f"{state.info.name} node {node.node_id}: allocated {node.allocated} + occupied {node.occupied} "
        f"above capacity {node.capacity}"
        for node in state.nodes
        if not res.fits_in(res.add(node.allocated, node.occupied), node.capacity)
    ]
