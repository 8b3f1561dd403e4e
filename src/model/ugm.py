"""User and group limits: usage per user and per group along the queue path, and the limits that apply.

YuniKorn's user/group manager (reference 2.7), as plain code. A partition owns one tracker; the scheduling
walk asks it whether an allocation fits (``over_limit``) and whether an application may start
(``can_run_app``), and the partition books every allocation into it (``allocated`` / ``released``).

- Usage is kept per user and per group at every queue of an application's path (root down to its
  leaf): the resources in use (placeholders and recovered allocations included) and the applications
  running there (those with at least one allocation).
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

from korral.config.schema import PartitionConfig, QueueConfig
from korral.model import resource as res
from korral.model.resource import Resource

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

    __slots__ = ("resource", "running")

    def __init__(self) -> None:
        self.resource: Resource = {}
        self.running: set[str] = set()


class AppTracking:
    """What the tracker keeps of one application: where its usage is counted and which limits apply."""

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
        # the user's and then the group's usage at every level of the path
        self.usages: tuple[Usage, ...] = ()
        # the levels that limit it: (usage there, max resources) and (usage there, max applications)
        self.resource_limits: tuple[tuple[Usage, Resource], ...] = ()
        self.app_limits: tuple[tuple[Usage, int], ...] = ()


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
    """Per partition: usage per user and per group along queue paths, and the limits on them."""

    def __init__(self, config: PartitionConfig) -> None:
        self.limits: dict[str, QueueLimits] = collect_limits(config)
        # name -> queue path -> usage
        self.users: dict[str, dict[str, Usage]] = {}
        self.groups: dict[str, dict[str, Usage]] = {}
        self.apps: dict[str, AppTracking] = {}
        # name -> how many of the tracked applications are the user's / resolved to the group
        self._user_apps: dict[str, int] = {}
        self._group_apps: dict[str, int] = {}

    # ---- configuration -----------------------------------------------------------------------------

    def apply_config(self, config: PartitionConfig) -> None:
        """New limits for what is already tracked: usage is kept, every application's limits redone."""
        self.limits = collect_limits(config)
        for tracking in self.apps.values():
            self._bind_limits(tracking)

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
    ) -> AppTracking:
        tracking = self.apps.get(application_id)
        if tracking is not None:
            return tracking
        tracking = self.apps[application_id] = AppTracking(application_id, user, group, queue_path)
        levels = path_levels(queue_path)
        by_user = self.users.setdefault(user, {})
        usages = [by_user.setdefault(level, Usage()) for level in levels]
        if group is not None:
            by_group = self.groups.setdefault(group, {})
            usages.extend(by_group.setdefault(level, Usage()) for level in levels)
        tracking.usages = tuple(usages)
        self._user_apps[user] = self._user_apps.get(user, 0) + 1
        if group is not None:
            self._group_apps[group] = self._group_apps.get(group, 0) + 1
        self._bind_limits(tracking)
        return tracking

    def _bind_limits(self, tracking: AppTracking) -> None:
        resource_limits: list[tuple[Usage, Resource]] = []
        app_limits: list[tuple[Usage, int]] = []
        by_user = self.users[tracking.user]
        by_group = self.groups.get(tracking.group) if tracking.group is not None else None
        for level in path_levels(tracking.queue_path):
            for usage, limit in (
                (by_user[level], self.user_limit(level, tracking.user)),
                (by_group[level] if by_group is not None else None, self.group_limit(level, tracking.group)),
            ):
                if usage is None or limit is None:
                    continue
                if limit.max_resources:
                    resource_limits.append((usage, limit.max_resources))
                if limit.max_applications:
                    app_limits.append((usage, limit.max_applications))
        tracking.resource_limits = tuple(resource_limits)
        tracking.app_limits = tuple(app_limits)

    def remove_application(self, application_id: str) -> None:
        """Forget an application (its allocations were released first); drop users and groups left
        with nothing tracked."""
        tracking = self.apps.pop(application_id, None)
        if tracking is None:
            return
        for usage in tracking.usages:
            usage.running.discard(application_id)  # in case allocations were not all released
        self._drop_if_idle(self.users, self._user_apps, tracking.user)
        if tracking.group is not None:
            self._drop_if_idle(self.groups, self._group_apps, tracking.group)

    @staticmethod
    def _drop_if_idle(table: dict[str, dict[str, Usage]], app_counts: dict[str, int], name: str) -> None:
        left = app_counts.get(name, 0) - 1
        if left > 0:
            app_counts[name] = left
            return
        app_counts.pop(name, None)
        by_path = table.get(name)
        if by_path is not None and all(
            not usage.running and not res.strictly_greater_than_zero(usage.resource)
            for usage in by_path.values()
        ):
            del table[name]

    # ---- usage -------------------------------------------------------------------------------------

    def allocated(self, application_id: str, resource: Resource) -> None:
        """An allocation of the application is booked (placed, proposed or recovered)."""
        tracking = self.apps.get(application_id)
        if tracking is None:
            return
        if not tracking.allocations:
            for usage in tracking.usages:
                usage.running.add(application_id)
        tracking.allocations += 1
        for usage in tracking.usages:
            in_use = usage.resource
            for name, quantity in resource.items():
                in_use[name] = in_use.get(name, 0) + quantity

    def released(self, application_id: str, resource: Resource) -> None:
        """An allocation of the application is gone (released, rolled back, its node removed)."""
        tracking = self.apps.get(application_id)
        if tracking is None or not tracking.allocations:
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
                usage.running.discard(application_id)

    # ---- checks (the scheduling walk) --------------------------------------------------------------

    def is_limited(self, application_id: str) -> bool:
        """Does any limit apply to the application at all? (The walk skips the checks otherwise.)"""
        tracking = self.apps.get(application_id)
        return tracking is not None and bool(tracking.resource_limits or tracking.app_limits)

    def over_limit(self, application_id: str, resource: Resource) -> bool:
        """Would one more allocation of ``resource`` take the application's user or group over a
        ``maxresources`` anywhere on its path?"""
        tracking = self.apps.get(application_id)
        if tracking is None:
            return False
        for usage, maximum in tracking.resource_limits:
            in_use = usage.resource
            for name, cap in maximum.items():
                quantity = resource.get(name)
                if quantity is not None and in_use.get(name, 0) + quantity > cap:
                    return True
        return False

    def can_run_app(self, application_id: str) -> bool:
        """May the application run (get its first allocation) without taking its user or group over a
        ``maxapplications`` on its path? One already running always may."""
        tracking = self.apps.get(application_id)
        if tracking is None or tracking.allocations:
            return True
        for usage, maximum in tracking.app_limits:
            if len(usage.running) + 1 > maximum:
                return False
        return True

    def headroom(self, application_id: str) -> Resource | None:
        """What the application's user and group may still use along its path (None: unlimited)."""
        tracking = self.apps.get(application_id)
        if tracking is None:
            return None
        result: Resource | None = None
        for usage, maximum in tracking.resource_limits:
            result = res.min_of_limits(result, res.headroom(maximum, usage.resource))
        return result

    # ---- reading -----------------------------------------------------------------------------------

    def user_usage(self, user: str) -> list[QueueUsage] | None:
        """Per queue path of the user's applications (sorted), its usage and the limit that applies
        there; None for a user without applications here."""
        return self._rows("user", user, self.users.get(user))

    def group_usage(self, group: str) -> list[QueueUsage] | None:
        """As ``user_usage``, for a group applications resolved to; None if none did."""
        return self._rows("group", group, self.groups.get(group))

    def _rows(self, kind: str, name: str, by_path: dict[str, Usage] | None) -> list[QueueUsage] | None:
        if by_path is None:
            return None
        paths: set[str] = set()
        for tracking in self.apps.values():
            if (tracking.user if kind == "user" else tracking.group) == name:
                paths.update(path_levels(tracking.queue_path))
        limit_of = self.user_limit if kind == "user" else self.group_limit
        return [self._queue_usage(path, by_path[path], limit_of(path, name)) for path in sorted(paths)]

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
