"""User and group limits: usage per user and per group along the queue path, and the limits that apply.

YuniKorn's user/group manager (reference 2.7), as plain code. A partition owns one tracker; the scheduling
walk asks it whether an allocation fits (``over_limit``) and whether an application may start
(``can_run_app``), and the partition books into it every allocation of an application a limit applies
to (``allocated`` / ``released``).

- Usage is the resources in use (placeholders and recovered allocations included) and the
  applications running (those with at least one allocation) of a user or a group under a queue. The
  tracker keeps it where a limit applies (all the walk needs); ``usage_rows`` reports it at every
  queue of the applications' paths, from what the applications hold.
- An application's group is resolved once, when it is added: the first group, walking the path from
  the leaf up, that has a configured limit and that the user belongs to; else the wildcard group ``*``
  where one is configured on the path (and the user is in any group at all); else none (no group usage
  is tracked for it).
- The limit of a user at a queue is its named limit there, else the wildcard user limit there (a
  wildcard user limit applies to each user on its own). The limit of a group at a queue is that
  group's named limit there; the wildcard group ``*`` is tracked as one group, so its limit applies to
  all the applications that resolved to it together. Limits on a queue apply to its whole subtree (the
  usage there sums the subtree), so the headroom along the path is the minimum; user and group limits
  both apply, the lower wins.
- A reload replaces the limits and keeps the usage: lowered limits block new work, they never evict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from korral import resource as res
from korral.config.schema import PartitionConfig, QueueConfig
from korral.resource import Resource

WILDCARD = "*"


@attrs.frozen
class Limit:
    """One user's or group's limit at one queue: ``max_resources`` (undefined types unlimited, None:
    no resource limit) and ``max_applications`` (0: unlimited)."""

    max_resources: Resource | None
    max_applications: int


@attrs.define
class QueueLimits:
    """The limits configured on one queue, by user and by group name (``*`` for the wildcards)."""

    users: dict[str, Limit] = attrs.field(factory=dict)
    groups: dict[str, Limit] = attrs.field(factory=dict)


def collect_limits(config: PartitionConfig) -> dict[str, QueueLimits]:
    """Queue path -> the limits configured there (partition limits are the root's, as validated)."""
    found: dict[str, QueueLimits] = {}

    def visit(queue: QueueConfig, parent_path: str) -> None:
        path = queue.name.lower() if not parent_path else f"{parent_path}.{queue.name.lower()}"
        if queue.limits:
            limits = found[path] = QueueLimits()
            for entry in queue.limits:
                limit = Limit(
                    max_resources=dict(entry.max_resources) if entry.max_resources else None,
                    max_applications=entry.max_applications,
                )
                for user in entry.users:
                    limits.users.setdefault(user, limit)
                for group in entry.groups:
                    limits.groups.setdefault(group, limit)
        for child in queue.queues:
            visit(child, path)

    visit(config.root, "")
    return found


def path_levels(queue_path: str) -> tuple[str, ...]:
    """``root.a.b`` -> (``root``, ``root.a``, ``root.a.b``)."""
    parts = queue_path.split(".")
    return tuple(".".join(parts[: depth + 1]) for depth in range(len(parts)))


def resolve_group(limits: Mapping[str, QueueLimits], queue_path: str, groups: Iterable[str]) -> str | None:
    """The group an application of a user in ``groups`` is tracked against (None: none)."""
    member_of = set(groups)
    if not member_of:
        return None  # a user without groups is never tracked against one (not even the wildcard)
    levels = path_levels(queue_path)
    wildcard = False
    for level in reversed(levels):
        configured = limits.get(level)
        if configured is None:
            continue
        for name in configured.groups:
            if name != WILDCARD and name in member_of:
                return name
        wildcard = wildcard or WILDCARD in configured.groups
    return WILDCARD if wildcard else None


class Usage:
    """One user's or group's usage at one queue (the queue's whole subtree)."""

    __slots__ = ("refs", "resource", "running")

    def __init__(self) -> None:
        self.resource: Resource = {}
        self.running: set[str] = set()
        self.refs = 0  # tracked applications counting into it: dropped at 0 (no growth with churn)


class AppTracking:
    """What the tracker keeps of one application: its user and group, and the usage it counts into
    (the levels of its path where a limit applies to its user or its group) with those limits."""

    __slots__ = (
        "allocations",
        "app_limits",
        "application_id",
        "group",
        "queue_path",
        "resource_limits",
        "usages",
        "user",
    )

    def __init__(self, application_id: str, user: str, group: str | None, queue_path: str) -> None:
        self.application_id = application_id
        self.user = user
        self.group = group
        self.queue_path = queue_path
        self.allocations = 0
        # the user's and the group's usage at the levels of the path where a limit applies to them
        self.usages: tuple[Usage, ...] = ()
        # (usage there, max resources) and (usage there, max applications), per limit that applies
        self.resource_limits: tuple[tuple[Usage, Resource], ...] = ()
        self.app_limits: tuple[tuple[Usage, int], ...] = ()

    @property
    def is_limited(self) -> bool:
        return bool(self.usages)


@attrs.frozen
class QueueUsage:
    """A user's or group's usage at one queue and the limit that applies there (plain data)."""

    queue_path: str
    resource: dict[str, int]
    running_applications: tuple[str, ...]
    max_resources: dict[str, int]
    max_applications: int


@attrs.frozen
class AppUsage:
    """What an application's owner reports of it: where it runs, what it holds, whether it runs."""

    application_id: str
    queue_path: str
    allocated: Resource
    running: bool


class UserGroupTracker:
    """Per partition: the usage of users and groups where limits apply to them, and those limits.

    Usage is kept only at the queues where a limit applies to the user or the group: that is all the
    walk needs, and an application under no limit costs nothing per allocation. A reload rebuilds it
    from what the applications hold (``apply_config``). What a user or group uses everywhere is read
    from the applications themselves (``usage_rows``).
    """

    def __init__(self, config: PartitionConfig) -> None:
        self.limits: dict[str, QueueLimits] = collect_limits(config)
        # name -> queue path -> usage, at the queues where a limit applies to that user or group
        self.users: dict[str, dict[str, Usage]] = {}
        self.groups: dict[str, dict[str, Usage]] = {}
        self.apps: dict[str, AppTracking] = {}

    # ---- configuration -----------------------------------------------------------------------------

    def apply_config(
        self, config: PartitionConfig, held: Mapping[str, tuple[Resource, int]]
    ) -> dict[str, AppTracking | None]:
        """New limits for what is already in use: ``held`` gives each application's allocated
        resources and number of allocations. Usage is rebuilt from it under the new limits (kept,
        never reset); returns every application's tracking (None: no limit applies to it)."""
        self.limits = collect_limits(config)
        self.users = {}
        self.groups = {}
        result: dict[str, AppTracking | None] = {}
        for tracking in self.apps.values():
            self._bind(tracking)
            allocated, count = held.get(tracking.application_id, ({}, 0))
            tracking.allocations = count
            if count:
                for usage in tracking.usages:
                    res.add_into(usage.resource, allocated)
                    usage.running.add(tracking.application_id)
            result[tracking.application_id] = tracking if tracking.is_limited else None
        return result

    def user_limit(self, queue_path: str, user: str) -> Limit | None:
        configured = self.limits.get(queue_path)
        if configured is None:
            return None
        return configured.users.get(user) or configured.users.get(WILDCARD)

    def group_limit(self, queue_path: str, group: str | None) -> Limit | None:
        configured = self.limits.get(queue_path)
        if configured is None or group is None:
            return None
        return configured.groups.get(group)

    def resolve_group(self, queue_path: str, groups: Iterable[str]) -> str | None:
        return resolve_group(self.limits, queue_path, groups)

    # ---- applications ------------------------------------------------------------------------------

    def add_application(
        self, application_id: str, queue_path: str, user: str, group: str | None
    ) -> AppTracking | None:
        """Track a new application (no allocations yet); returns its tracking if a limit applies."""
        tracking = self.apps.get(application_id)
        if tracking is None:
            tracking = self.apps[application_id] = AppTracking(application_id, user, group, queue_path)
            self._bind(tracking)
        return tracking if tracking.is_limited else None

    def _bind(self, tracking: AppTracking) -> None:
        usages: list[Usage] = []
        resource_limits: list[tuple[Usage, Resource]] = []
        app_limits: list[tuple[Usage, int]] = []
        for level in path_levels(tracking.queue_path):
            for table, name, limit in (
                (self.users, tracking.user, self.user_limit(level, tracking.user)),
                (self.groups, tracking.group, self.group_limit(level, tracking.group)),
            ):
                if limit is None or name is None:
                    continue
                usage = table.setdefault(name, {}).setdefault(level, Usage())
                usage.refs += 1
                usages.append(usage)
                if limit.max_resources:
                    resource_limits.append((usage, limit.max_resources))
                if limit.max_applications:
                    app_limits.append((usage, limit.max_applications))
        tracking.usages = tuple(usages)
        tracking.resource_limits = tuple(resource_limits)
        tracking.app_limits = tuple(app_limits)

    def remove_application(self, application_id: str) -> None:
        """Forget an application (its allocations were released first)."""
        tracking = self.apps.pop(application_id, None)
        if tracking is None:
            return
        levels = path_levels(tracking.queue_path)
        for table, name in ((self.users, tracking.user), (self.groups, tracking.group)):
            if name is None:
                continue
            by_path = table.get(name)
            if by_path is None:
                continue
            for level in levels:
                usage = by_path.get(level)
                if usage is None or usage not in tracking.usages:
                    continue
                usage.running.discard(application_id)  # in case allocations were not all released
                usage.refs -= 1
                if usage.refs <= 0:
                    del by_path[level]
            if not by_path:
                del table[name]

    # ---- usage -------------------------------------------------------------------------------------

    @staticmethod
    def allocated(tracking: AppTracking, resource: Resource) -> None:
        """An allocation of a limited application is booked (placed, proposed or recovered)."""
        if not tracking.allocations:
            application_id = tracking.application_id
            for usage in tracking.usages:
                usage.running.add(application_id)
        tracking.allocations += 1
        for usage in tracking.usages:
            in_use = usage.resource
            for name, quantity in resource.items():
                in_use[name] = in_use.get(name, 0) + quantity

    @staticmethod
    def released(tracking: AppTracking, resource: Resource) -> None:
        """An allocation of a limited application is gone (released, rolled back, node removed)."""
        if not tracking.allocations:
            return
        tracking.allocations -= 1
        last = not tracking.allocations
        for usage in tracking.usages:
            in_use = usage.resource
            for name, quantity in resource.items():
                left = in_use.get(name, 0) - quantity
                if left:
                    in_use[name] = left
                else:
                    in_use.pop(name, None)
            if last:
                usage.running.discard(tracking.application_id)

    @staticmethod
    def resized(tracking: AppTracking, before: Resource, after: Resource) -> None:
        """An allocation of a limited application changed size in place (a gang's real allocation
        swapped in for its placeholder): its usage moves by the difference, its count stays."""
        for usage in tracking.usages:
            in_use = usage.resource
            for resource, sign in ((before, -1), (after, 1)):
                for name, quantity in resource.items():
                    left = in_use.get(name, 0) + sign * quantity
                    if left:
                        in_use[name] = left
                    else:
                        in_use.pop(name, None)

    # ---- checks (the scheduling walk) --------------------------------------------------------------

    @staticmethod
    def over_limit(tracking: AppTracking, resource: Resource) -> bool:
        """Would one more allocation of ``resource`` take the application's user or group over a
        ``maxresources`` anywhere on its path?"""
        for usage, maximum in tracking.resource_limits:
            in_use = usage.resource
            for name, cap in maximum.items():
                quantity = resource.get(name)
                if quantity is not None and in_use.get(name, 0) + quantity > cap:
                    return True
        return False

    @staticmethod
    def can_run_app(tracking: AppTracking) -> bool:
        """May the application run (get its first allocation) without taking its user or group over a
        ``maxapplications`` on its path? One already running always may."""
        if tracking.allocations:
            return True
        for usage, maximum in tracking.app_limits:
            if len(usage.running) >= maximum:
                return False
        return True

    @staticmethod
    def headroom(tracking: AppTracking) -> Resource | None:
        """What the application's user and group may still use along its path (None: unlimited)."""
        result: Resource | None = None
        for usage, maximum in tracking.resource_limits:
            result = res.min_of_limits(result, res.headroom(maximum, usage.resource))
        return result

    # ---- reading -----------------------------------------------------------------------------------

    def usage_rows(self, kind: str, name: str, apps: Iterable[AppUsage]) -> list[QueueUsage] | None:
        """The rows of ``user_usage`` / ``group_usage`` from what the applications' owners report
        (the actors' query: confirmed allocations, not the scheduler's proposals)."""
        by_path: dict[str, Usage] = {}
        for app in apps:
            for path in path_levels(app.queue_path):
                usage = by_path.setdefault(path, Usage())
                res.add_into(usage.resource, app.allocated)
                if app.running:
                    usage.running.add(app.application_id)
        if not by_path:
            return None
        limit_of = self.user_limit if kind == "user" else self.group_limit
        return [
            self._queue_usage(path, usage, limit_of(path, name)) for path, usage in sorted(by_path.items())
        ]

    @staticmethod
    def _queue_usage(path: str, usage: Usage, limit: Limit | None) -> QueueUsage:
        return QueueUsage(
            queue_path=path,
            resource=res.prune(usage.resource),
            running_applications=tuple(sorted(usage.running)),
            max_resources=dict(limit.max_resources or {}) if limit is not None else {},
            max_applications=limit.max_applications if limit is not None else 0,
        )

    def violations(self) -> list[str]:
        """Every user or group over a limit right now (for checks; recovered allocations may cause
        some legitimately)."""
        found: list[str] = []
        for kind, table, limit_of in (
            ("user", self.users, self.user_limit),
            ("group", self.groups, self.group_limit),
        ):
            for name, by_path in table.items():
                for path, usage in by_path.items():
                    limit = limit_of(path, name)
                    if limit is None:
                        continue
                    if limit.max_resources and not res.fits_in_max(usage.resource, limit.max_resources):
                        found.append(f"{kind} {name} at {path}: {usage.resource} over {limit.max_resources}")
                    if limit.max_applications and len(usage.running) > limit.max_applications:
                        found.append(
                            f"{kind} {name} at {path}: {len(usage.running)} applications over "
                            f"{limit.max_applications}"
                        )
        return found
