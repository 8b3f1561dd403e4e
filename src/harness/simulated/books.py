"""Exact books of ``korral stress --simulated``, judged from the RM's side.

At a quiescent point an RM knows exactly what the core must have booked for it: every allocation it
was told of as new and has not heard released (``RecordingRM.live``), plus every allocation the core
released on its own (a timeout, a preemption, a replaced placeholder) whose release the RM has not
confirmed yet (YuniKorn keeps those booked until the confirmation). From that set alone, with each
application's queue, user and limit group as published, the expected usage follows:

- every application's allocated and placeholder usage, every node's allocated resources, every
  queue's allocated usage (its whole subtree, root included): the sums of the booked allocations;
- every user's and group's usage at each queue of its applications' paths, and the applications
  running there (those holding at least one booked allocation), as the REST user/group usage
  publishes them: no more, no less (a leak below a limit is a violation as much as one above);
- the scheduler's own trackers (the queue usage and the user/group usage it decides with, where a
  limit applies): the same sums, so a count that drifted inside the scheduler shows before it
  blocks or admits the wrong work;
- nothing booked for what is gone: no allocation the RM expects on a node that is not published, of
  an application that is not there, and no usage row or running application for an application the
  partition no longer has.

Nothing here reads the core's own totals to build an expectation; the totals are only compared.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from korral import si
from korral.harness.invariants import PartitionState
from korral.info import GroupUsageInfo, UserUsageInfo
from korral.model.ugm import path_levels
from korral.testing import CORE_RELEASES


def _add(total: dict[str, int], resource: Mapping[str, int]) -> None:
    for name, quantity in resource.items():
        total[name] = total.get(name, 0) + quantity


@functools.lru_cache(maxsize=4096)
def _levels(queue: str) -> tuple[str, ...]:
    """``path_levels``, once per queue path (every check walks every booked allocation's)."""
    return path_levels(queue)


def _pruned(resource: Mapping[str, int]) -> dict[str, int]:
    return {name: quantity for name, quantity in resource.items() if quantity}


def rm_booked(rm: Any) -> dict[str, si.Allocation]:
    """What the RM knows the core books for it now: the allocations live on its side, and the core's
    own releases it has not confirmed (by uuid, each as it was told of)."""
    with rm.lock:
        booked = dict(rm.live)
        told: Mapping[str, si.Allocation] = getattr(rm, "told", {})
        # a release the RM took in after a core release supersedes it (the allocation went otherwise)
        last: dict[str, si.TerminationType] = {}
        for release in rm.released:
            last[release.uuid] = release.termination_type
        for release in rm.to_confirm:
            allocation = told.get(release.uuid)
            if allocation is not None and last.get(release.uuid) in CORE_RELEASES:
                booked.setdefault(release.uuid, allocation)
    return booked


class Expected:
    """The sums the RM's booked allocations give, per application, node, queue, user and group."""

    def __init__(self, state: PartitionState, booked: Mapping[str, si.Allocation], groups: Mapping[str, str]):
        self.apps = {app.application_id: app for app in state.applications}
        self.app_allocated: dict[str, dict[str, int]] = defaultdict(dict)
        self.app_placeholder: dict[str, dict[str, int]] = defaultdict(dict)
        self.node_allocated: dict[str, dict[str, int]] = defaultdict(dict)
        self.queue: dict[str, dict[str, int]] = defaultdict(dict)
        # (kind, name) -> queue path -> (resource, running applications)
        self.owners: dict[tuple[str, str], dict[str, tuple[dict[str, int], set[str]]]] = defaultdict(dict)
        self.orphans: list[si.Allocation] = []
        for allocation in booked.values():
            app = self.apps.get(allocation.application_id)
            if app is None:
                self.orphans.append(allocation)
                continue
            resource = allocation.resource_per_alloc
            _add(self.app_allocated[app.application_id], resource)
            if allocation.placeholder:
                _add(self.app_placeholder[app.application_id], resource)
            _add(self.node_allocated[allocation.node_id], resource)
            owners = [("user", app.user)]
            group = groups.get(app.application_id)
            if group:
                owners.append(("group", group))
            for path in _levels(app.queue):
                _add(self.queue[path], resource)
                for owner in owners:
                    used, running = self.owners[owner].setdefault(path, ({}, set()))
                    _add(used, resource)
                    running.add(app.application_id)


def check_books(
    state: PartitionState,
    rm: Any,
    users: Iterable[UserUsageInfo | None],
    groups: Iterable[GroupUsageInfo | None],
    view: Any = None,
    booked_by_rm: Mapping[str, si.Allocation] | None = None,
) -> list[str]:
    """The partition's published books (and the scheduler ``view``'s trackers, when given) against
    the RM's (see the module's docstring). ``users`` and ``groups``: the published usage of every
    user and group that may hold anything here; ``booked_by_rm``: ``rm_booked(rm)`` when known."""
    name = state.info.name
    users_info = [info for info in users if info is not None]
    groups_info = [info for info in groups if info is not None]
    limit_group = {app: group for info in users_info for app, group in info.groups.items()}
    # the RM's allocations in this partition (an RM may have several: the name the RM gave it, and
    # the default one where an allocation the RM made up names none)
    plain = name.rpartition("]")[2]
    booked = {
        uuid: allocation
        for uuid, allocation in (rm_booked(rm) if booked_by_rm is None else booked_by_rm).items()
        if (allocation.partition_name or "default") == plain
    }
    expected = Expected(state, booked, limit_group)
    problems: list[str] = []
    on_apps = {a.uuid for app in state.applications for a in app.allocations}
    for uuid in sorted(booked.keys() - on_apps):
        allocation = booked[uuid]
        if allocation.application_id in expected.apps:
            problems.append(
                f"{name}: allocation {uuid} of {allocation.application_id} ({allocation.allocation_key}) "
                f"booked on the RM's side, not by the core"
            )
    for allocation in sorted(expected.orphans, key=lambda a: a.uuid):
        problems.append(
            f"{name}: allocation {allocation.uuid} ({allocation.allocation_key}) booked on the RM's side "
            f"for application {allocation.application_id}, which the partition no longer has"
        )
    for uuid in sorted(on_apps - booked.keys()):
        problems.append(
            f"{name}: allocation {uuid} booked by the core, neither live nor awaiting a "
            "confirmation on the RM's side"
        )
    nodes = {node.node_id: node for node in state.nodes}
    for allocation in sorted(booked.values(), key=lambda a: a.uuid):
        if allocation.application_id in expected.apps and allocation.node_id not in nodes:
            problems.append(
                f"{name}: allocation {allocation.uuid} ({allocation.allocation_key}) booked on node "
                f"{allocation.node_id}, which is gone"
            )
    for app in state.applications:
        for label, published, wanted in (
            ("allocated", app.allocated, expected.app_allocated.get(app.application_id, {})),
            ("placeholder", app.placeholder, expected.app_placeholder.get(app.application_id, {})),
        ):
            if _pruned(published) != _pruned(wanted):
                problems.append(
                    f"{name} application {app.application_id}: {label} {published} != {wanted}, the sum of "
                    "its booked allocations"
                )
    for node in state.nodes:
        wanted = expected.node_allocated.get(node.node_id, {})
        if _pruned(node.allocated) != _pruned(wanted):
            problems.append(
                f"{name} node {node.node_id}: allocated {node.allocated} != {wanted}, the sum of the "
                "booked allocations on it"
            )
    for path in sorted(state.queues.keys() | expected.queue.keys()):
        queue = state.queues.get(path)
        wanted = expected.queue.get(path, {})
        if queue is None:
            if _pruned(wanted):
                problems.append(
                    f"{name} queue {path}: not published, yet applications under it hold {wanted}"
                )
            continue
        if _pruned(queue.allocated) != _pruned(wanted):
            problems.append(
                f"{name} queue {path}: allocated {queue.allocated} != {wanted}, the sum of the booked "
                "allocations under it"
            )
    problems.extend(_check_usage(name, expected, [("user", u.user, u) for u in users_info]))
    problems.extend(_check_usage(name, expected, [("group", g.group, g) for g in groups_info]))
    for kind in ("user", "group"):
        published_names = {u.user for u in users_info} if kind == "user" else {g.group for g in groups_info}
        for owner_kind, owner in sorted(expected.owners):
            if owner_kind == kind and owner not in published_names:
                problems.append(f"{name} {kind} {owner}: holds booked allocations, no usage published")
    if view is not None:
        problems.extend(_check_view(name, expected, view))
    return problems


def _check_usage(name: str, expected: Expected, infos: list[tuple[str, str, Any]]) -> list[str]:
    problems = []
    for kind, owner, info in infos:
        wanted = expected.owners.get((kind, owner), {})
        rows = {row.queue_path: row for row in info.queues}
        for path in sorted(rows.keys() | wanted.keys()):
            row = rows.get(path)
            used, running = wanted.get(path, ({}, set()))
            resource = _pruned(row.resource) if row is not None else {}
            listed = set(row.running_applications) if row is not None else set()
            if resource != _pruned(used):
                problems.append(
                    f"{name} {kind} {owner} at {path}: usage {resource} != {_pruned(used)}, the sum of "
                    "its booked allocations"
                )
            for app_id in sorted(listed - expected.apps.keys()):
                problems.append(
                    f"{name} {kind} {owner} at {path}: application {app_id} counted running, the "
                    "partition no longer has it"
                )
            gap = (listed & expected.apps.keys()) ^ running
            if gap:
                problems.append(
                    f"{name} {kind} {owner} at {path}: running applications {sorted(listed)} != "
                    f"{sorted(running)}, those holding booked allocations"
                )
    return problems


def _check_view(name: str, expected: Expected, view: Any) -> list[str]:
    """The scheduler's own trackers: queue usage, and user/group usage where a limit applies."""
    problems = []
    for path, queue in sorted(view.queues.items()):
        wanted = expected.queue.get(path, {})
        if _pruned(queue.allocated) != _pruned(wanted):
            problems.append(
                f"{name} queue {path}: the scheduler counts {queue.allocated} allocated, the booked "
                f"allocations under it sum to {wanted}"
            )
    for kind, table in (("user", view.ugm.users), ("group", view.ugm.groups)):
        for owner, by_path in sorted(table.items()):
            for path, usage in sorted(by_path.items()):
                used, running = expected.owners.get((kind, owner), {}).get(path, ({}, set()))
                if _pruned(usage.resource) != _pruned(used):
                    problems.append(
                        f"{name} {kind} {owner} at {path}: the scheduler's limit tracker counts "
                        f"{_pruned(usage.resource)}, the booked allocations sum to {_pruned(used)}"
                    )
                if set(usage.running) != running:
                    problems.append(
                        f"{name} {kind} {owner} at {path}: the scheduler's limit tracker counts "
                        f"{sorted(usage.running)} running, those holding booked allocations are "
                        f"{sorted(running)}"
                    )
    return problems
