"""Checks of ``korral stress --simulated`` beyond ``korral.harness.invariants``' partition laws.

- **reservation holders**: a node is reserved only for an ask that is still pending in a live
  application of its partition;
- **unique uuids** across every RM's partition (an allocation booked twice);
- **user limits**: no user or limited group above a ``maxresources`` / ``maxapplications`` that
  applies to it, unless recovered allocations (accepted whatever the limits) put it there;
- **view against owners**: the scheduler's view holds what the owners hold;
- **stuck work** after the final settle: one more scheduling cycle places nothing
  (``check_stuck_work``; the per-ask rules are the RMs' own: ``simulated.ask_rules``).

Each takes the quiescent states read with virtual time frozen and returns violations in a stable
order. ``collect_direct`` reads a partition on the simulation's thread by calling its actor's query
handlers itself (the queue tree in one call): the same ``PartitionState`` as
``korral.harness.invariants.collect``, without a request to the RM proxy and a query message per
queue (a check's own traffic was most of a seed's deliveries). Both are kept while the partition's
actors take nothing but reads (``simulated.reads``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from korral.actors.messages import (
    ApplicationsQuery,
    GroupsUsageQuery,
    GroupUsageQuery,
    NodesQuery,
    PartitionSummary,
    QueueTreeQuery,
    RunCycle,
    UsersUsageQuery,
    UserUsageQuery,
)
from korral.actors.partition.actor import PartitionActor
from korral.core import Core
from korral.harness import invariants
from korral.harness.simulated import books as simulated_books
from korral.harness.simulated.reads import kept_read, kept_verdict, owner_reads
from korral.harness.stress import LIMITED_GROUPS, USERS
from korral.info import GroupUsageInfo, LimitUsageInfo, UserUsageInfo
from korral.resource import fits_in_max

RECOVERED_MARK = "-recovered-"  # in the uuid of every allocation a ScenarioDriver recovers


def live_partition(core: Core, partition: str) -> PartitionActor | None:
    """The live partition actor of that name in a simulated core, None when there is none."""
    return _partition_actor(core, partition)


def _partition_actor(core: Core, partition: str) -> PartitionActor | None:
    """The live partition actor of that name in a simulated core (None: read through queries)."""
    simulation = core.simulation
    actor = simulation.actors.get(partition) if simulation is not None else None
    if not isinstance(actor, PartitionActor) or actor.actor_stopped.is_set():
        return None
    return actor


def collect_direct(core: Core, partition: str) -> invariants.PartitionState | None:
    """``invariants.collect`` read on the simulation's thread from the partition actor itself (at a
    quiescent point: no handler runs); through the core's queries when there is no such actor."""
    actor = _partition_actor(core, partition)
    if actor is None:
        return invariants.collect(core, partition)
    live: PartitionActor = actor

    simulation = core.simulation
    assert simulation is not None

    def read() -> invariants.PartitionState:
        with owner_reads(simulation, live):
            return invariants.PartitionState(
                info=live.on_PartitionSummary(PartitionSummary()),
                nodes=live.on_NodesQuery(NodesQuery()),
                applications=live.on_ApplicationsQuery(ApplicationsQuery()),
                queues={queue.path: queue for queue in live.on_QueueTreeQuery(QueueTreeQuery())},
            )

    return kept_read(simulation, actor, partition, "state", read)


class DirectUsage:
    """``Core.user_usage`` / ``group_usage`` read from the partition actors themselves."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def user_usage(self, partition: str, user: str) -> UserUsageInfo | None:
        actor = _partition_actor(self.core, partition)
        if actor is None:
            return self.core.user_usage(partition, user)
        return actor.on_UserUsageQuery(UserUsageQuery(user=user))

    def group_usage(self, partition: str, group: str) -> GroupUsageInfo | None:
        actor = _partition_actor(self.core, partition)
        if actor is None:
            return self.core.group_usage(partition, group)
        return actor.on_GroupUsageQuery(GroupUsageQuery(group=group))


def check_reservation_holders(state: invariants.PartitionState) -> list[str]:
    """Every node's reservation holder is a pending ask of an application of the partition."""
    pending = {(app.application_id, key) for app in state.applications for key in app.pending_asks}
    problems = []
    for node in sorted(state.nodes, key=lambda n: n.node_id):
        for holder in zip(node.reservations, node.reserved_asks, strict=False):
            if holder not in pending:
                problems.append(
                    f"{state.info.name} node {node.node_id}: reserved for ask {holder[1]} of "
                    f"{holder[0]}, which is not pending there"
                )
    return problems


def recovered_queues(state: invariants.PartitionState) -> set[str]:
    """The queues of applications holding recovered allocations: those may be above a max."""
    return {app.queue for app in state.applications if any(RECOVERED_MARK in a.uuid for a in app.allocations)}


def check_user_limits(
    state: invariants.PartitionState, usage: Usage, lowered: frozenset[str] = frozenset()
) -> list[str]:
    """No user (of an application in the partition) and no limited group is above a
    ``maxresources`` or ``maxapplications`` that applies to it, unless recovered allocations put it
    there (as ``invariants.check_user_limits``, from the usage already read), or a reload lowered the
    limit under what was already used (``lowered``: those queues' rows)."""
    groups_of = dict(USERS)
    recovered = {
        app.user for app in state.applications if any(RECOVERED_MARK in a.uuid for a in app.allocations)
    }
    exempt = {("user", user) for user in recovered}
    exempt |= {("group", group) for user in recovered for group in groups_of.get(user, ())}
    users = {app.user for app in state.applications}
    owners: list[tuple[str, str, list[LimitUsageInfo]]] = [
        ("user", info.user, info.queues) for info in usage.users if info.user in users
    ]
    owners += [("group", info.group, info.queues) for info in usage.groups if info.group in LIMITED_GROUPS]
    problems = []
    name = state.info.name
    for kind, owner, rows in sorted(owners, key=lambda entry: (entry[0], entry[1])):
        if (kind, owner) in exempt:
            continue
        for row in rows:
            if row.queue_path in lowered:
                continue
            if row.max_resources and not fits_in_max(row.resource, row.max_resources):
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


def check_view_against_owners(core: Core, state: invariants.PartitionState) -> list[str]:
    """At a quiescent point the scheduler's view holds what the owners hold: the same applications,
    each with the same allocations and the same pending repeats per ask (read directly from the
    scheduler actor; nothing when there is none to read).

    It found two real defects: seed 67 (one RM, 30 calls: a recovered allocation its owner refused
    stayed in the view; fixed in ``ApplicationOwner.recover``) and seed 280 (one RM: a replacement
    whose placeholder left with its node before the owner refused it never gave its ask the repeat
    back; fixed in ``SchedulingView.undo_replacement``). Both are tested in
    tests/core/test_simulated_faults.py."""
    simulation = core.simulation
    name = state.info.name
    scheduler = simulation.actors.get(f"{name}/scheduler") if simulation is not None else None
    if scheduler is None or scheduler.actor_stopped.is_set():
        return []
    view_apps = scheduler.view.applications
    problems = []
    owners = {app.application_id: app for app in state.applications}
    for app_id in sorted(owners.keys() - view_apps.keys()):
        problems.append(f"{name} application {app_id}: held by its owner, not in the scheduler's view")
    for app_id in sorted(view_apps.keys() - owners.keys()):
        problems.append(f"{name} application {app_id}: in the scheduler's view, not held by an owner")
    for app_id in sorted(owners.keys() & view_apps.keys()):
        owner, view = owners[app_id], view_apps[app_id]
        held, seen = {a.uuid for a in owner.allocations}, set(view.allocations)
        for uuid in sorted(held ^ seen):
            where = "the owner's" if uuid in held else "the view's"
            problems.append(f"{name} application {app_id}: allocation {uuid} only in {where} books")
        pending = {ask.allocation_key: ask.pending for ask in owner.asks}
        viewed = {key: ask.pending for key, ask in view.asks.items() if ask.pending > 0}
        for key in sorted(pending.keys() | viewed.keys()):
            if pending.get(key, 0) != viewed.get(key, 0):
                problems.append(
                    f"{name} application {app_id}: ask {key} has {pending.get(key, 0)} pending at its "
                    f"owner, {viewed.get(key, 0)} in the scheduler's view"
                )
    return problems


@attrs.frozen
class Usage:
    """Every user's and every group's usage of one partition, as published (one query each)."""

    users: list[UserUsageInfo]
    groups: list[GroupUsageInfo]


def read_usage(core: Core, partition: str) -> Usage:
    actor = _partition_actor(core, partition)
    if actor is not None:
        live: PartitionActor = actor

        simulation = core.simulation
        assert simulation is not None

        def read() -> Usage:
            with owner_reads(simulation, live) as kept_usage:
                usage: Usage = kept_usage(
                    lambda: Usage(
                        live.on_UsersUsageQuery(UsersUsageQuery()),
                        live.on_GroupsUsageQuery(GroupsUsageQuery()),
                    )
                )
                return usage

        return kept_read(simulation, actor, partition, "usage", read)
    return Usage(core.users_usage(partition), core.groups_usage(partition))


def check_books(
    core: Core,
    state: invariants.PartitionState,
    rm: Any,
    usage: Usage,
    booked: Mapping[str, Any] | None = None,
) -> list[str]:
    """``simulated.books.check_books`` for one RM's partition: its published books (``usage``) and
    its scheduler's trackers against what the RM knows is booked (``booked``: ``rm_booked(rm)``)."""
    name = state.info.name
    simulation = core.simulation
    scheduler = simulation.actors.get(f"{name}/scheduler") if simulation is not None else None
    view = scheduler.view if scheduler is not None and not scheduler.actor_stopped.is_set() else None
    return simulated_books.check_books(state, rm, usage.users, usage.groups, view, booked)


def judge_partition(
    core: Core, state: invariants.PartitionState, rm: Any, usage: Usage, exempt: frozenset[str] | set[str]
) -> list[str]:
    """``invariants.check_partition`` (``exempt``: the queues that may be above their max) and the
    exact books (``check_books``) of one RM's partition; judged again only when its reads or the
    RM's books changed (``simulated.reads.kept_verdict``)."""
    booked = simulated_books.rm_booked(rm)

    def judge() -> list[str]:
        problems = invariants.check_partition(state, recovered_queues=exempt)
        return problems + check_books(core, state, rm, usage, booked)

    if core.simulation is None:
        return judge()
    inputs = (rm, booked, frozenset(exempt))
    return kept_verdict(core.simulation, state.info.name, "books", (state, usage), inputs, judge)


def check_all(
    core: Core,
    states: Iterable[invariants.PartitionState],
    usages: Mapping[str, Usage],
    lowered: Mapping[str, frozenset[str]] | None = None,
) -> list[str]:
    """The checks above over every RM's partition (``usages``: each one's, by partition name;
    ``lowered``: the queues whose limits a reload lowered, by partition name)."""
    states = list(states)
    problems = invariants.check_unique_uuids(states)
    for state in states:
        usage = usages[state.info.name]
        limits_lowered = (lowered or {}).get(state.info.name, frozenset())

        def judge(
            state: invariants.PartitionState = state,
            usage: Usage = usage,
            limits_lowered: frozenset[str] = limits_lowered,
        ) -> list[str]:
            return (
                check_reservation_holders(state)
                + check_user_limits(state, usage, limits_lowered)
                + check_view_against_owners(core, state)
            )

        if core.simulation is None:
            problems.extend(judge())
            continue
        name = state.info.name
        problems.extend(kept_verdict(core.simulation, name, "limits", (state, usage), limits_lowered, judge))
    return problems


def check_partitions_gone(core: Core, expected: set[str]) -> list[str]:
    """Nothing runs for a partition that is gone: the only live partition actors are the RMs'
    partitions now (a re-registration or a reload stops the one it replaces)."""
    simulation = core.simulation
    if simulation is None:
        return []
    live = sorted(
        name
        for name, actor in simulation.actors.items()
        if isinstance(actor, PartitionActor) and not actor.actor_stopped.is_set()
    )
    return [f"partition {name}: still live, no RM's partition" for name in live if name not in expected]


def check_stuck_work(core: Core, partitions: Iterable[str]) -> list[str]:
    """After the final settle (quiescent, no fault pending): nothing the scheduler would place now is
    left unplaced. Asks stay pending for the scheduler's own reasons (no node with room, a queue's or
    user's headroom, a reservation, an application's backoff, a gang's placeholders, a preemptor
    waiting for its victims), and those are exactly what a scheduling cycle decides: so each
    partition's scheduler runs one more cycle here, on the simulation's thread with virtual time
    frozen, and whatever it places and its owner confirms was stuck work (placeable, yet no cycle
    would have come for it). A scheduler that believes a cycle is queued while none is (it would
    never schedule again) is stuck work too. Run once, at the end of a run: it changes the state."""
    simulation = core.simulation
    if simulation is None:
        return []
    problems: list[str] = []
    probed = []
    schedulers = {}
    # every scheduler's belief first, while nothing runs: reading a partition's state asks its
    # applications, and the simulation's steps meanwhile may deliver a due Tick that queues a cycle
    for name in partitions:
        scheduler = simulation.actors.get(f"{name}/scheduler")
        if scheduler is None or scheduler.actor_stopped.is_set():
            continue
        schedulers[name] = scheduler
        queued = any(type(envelope.message) is RunCycle for envelope in scheduler.actor_inbox.messages)
        if getattr(scheduler, "_cycle_queued", False) and not queued:
            problems.append(f"{name} scheduler: believes a scheduling cycle is queued at quiescence, none is")
    for name, scheduler in schedulers.items():
        state = collect_direct(core, name)
        held = (
            {(a.allocation_key, a.uuid) for app in state.applications for a in app.allocations}
            if state
            else set()
        )
        probed.append((name, scheduler, held))
    if not probed:
        return problems
    with simulation.frozen():
        for _, scheduler, _ in probed:
            scheduler.handle.tell(RunCycle())
        simulation.run_until_idle()
        for name, _, held in probed:
            state = collect_direct(core, name)
            if state is None:
                continue
            now = {(a.allocation_key, a.uuid) for app in state.applications for a in app.allocations}
            placed = sorted(key for key, _ in now - held)
            if placed:
                problems.append(
                    f"{name}: stuck work after the final settle: one more scheduling cycle placed "
                    f"{len(placed)} allocation(s) of asks {', '.join(sorted(set(placed)))}"
                )
    return problems
