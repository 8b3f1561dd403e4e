"""The Partition actor's read side: snapshots of the partition, its queues, applications and nodes.

A mixin of ``PartitionActor`` (``korral.actors.partition.actor``): the structure comes from the actor's
registry, usage from the owners (asked, down the rank order) or from what the queues last published.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from korral import resource as res
from korral.actors.base import Handle
from korral.actors.messages import (
    ApplicationQuery,
    ApplicationsQuery,
    CompletedApplicationsQuery,
    GroupsUsageQuery,
    GroupUsageQuery,
    NodeQuery,
    NodesQuery,
    PartitionSummary,
    QueueQuery,
    QueueTreeQuery,
    SchedulerStatsQuery,
    Snapshot,
    UsersUsageQuery,
    UserUsageQuery,
)
from korral.actors.queue_board import QueueBoard
from korral.info import (
    ApplicationInfo,
    GroupUsageInfo,
    LimitUsageInfo,
    NodeInfo,
    PartitionInfo,
    QueueInfo,
    UserUsageInfo,
    limit_usage_infos,
)
from korral.model.completed import CompletedApplications
from korral.model.partition.composed import PartitionModel
from korral.model.partition.members import PartitionMembers
from korral.model.ugm import AppUsage


class PartitionQueries:
    """Answers the typed ``PartitionQuery`` messages for ``PartitionActor``, whose fields these are."""

    name: str
    rm_id: str
    registry: PartitionModel
    scheduler: Handle
    queues: dict[str, Handle]
    apps: dict[str, Handle]
    members: PartitionMembers
    nodes: dict[str, Handle]
    completed: CompletedApplications[ApplicationInfo]
    queue_board: QueueBoard
    _tree_publish_queued: bool
    node_reservations: dict[str, tuple[tuple[str, str], ...]]
    app_backoffs: dict[str, float]
    drain_proxy: Handle | None

    if TYPE_CHECKING:  # KorralActor's

        def ask(self, target: Handle, message: Any, timeout: float = ...) -> Any: ...

        def _publish_queue_tree(self) -> None: ...

    # ---- queries -----------------------------------------------------------------------------------

    def on_PartitionSummary(self, message: PartitionSummary) -> PartitionInfo:
        return self._partition_info()

    def on_QueueQuery(self, message: QueueQuery) -> QueueInfo | None:
        return self._queue_info(message.path)

    def on_QueueTreeQuery(self, message: QueueTreeQuery) -> list[QueueInfo]:
        return self._queue_infos()

    def on_ApplicationQuery(self, message: ApplicationQuery) -> ApplicationInfo | None:
        return self._app_info(message.application_id)

    def on_ApplicationsQuery(self, message: ApplicationsQuery) -> list[ApplicationInfo]:
        return [info for app_id in list(self.apps) if (info := self._app_info(app_id)) is not None]

    def on_CompletedApplicationsQuery(self, message: CompletedApplicationsQuery) -> list[ApplicationInfo]:
        return list(self.completed.values())

    def on_NodeQuery(self, message: NodeQuery) -> NodeInfo | None:
        return self._node_info(message.node_id)

    def on_NodesQuery(self, message: NodesQuery) -> list[NodeInfo]:
        return [info for node_id in list(self.nodes) if (info := self._node_info(node_id)) is not None]

    def on_SchedulerStatsQuery(self, message: SchedulerStatsQuery) -> dict[str, int]:
        stats: dict[str, int] = self.ask(self.scheduler, Snapshot())  # the scheduler's counters
        return stats

    def on_UserUsageQuery(self, message: UserUsageQuery) -> UserUsageInfo | None:
        infos = self._user_infos(message.user) if message.user else []
        return infos[0] if infos else None

    def on_GroupUsageQuery(self, message: GroupUsageQuery) -> GroupUsageInfo | None:
        infos = self._group_infos(message.group) if message.group else []
        return infos[0] if infos else None

    def on_UsersUsageQuery(self, message: UsersUsageQuery) -> list[UserUsageInfo]:
        return self._user_infos()

    def on_GroupsUsageQuery(self, message: GroupsUsageQuery) -> list[GroupUsageInfo]:
        return self._group_infos()

    def _user_infos(self, only: str | None = None) -> list[UserUsageInfo]:
        return [
            UserUsageInfo(user=name, partition=self.name, queues=queues, groups=groups)
            for name, queues, groups in self._usage_infos("user", only)
        ]

    def _group_infos(self, only: str | None = None) -> list[GroupUsageInfo]:
        return [
            GroupUsageInfo(group=name, partition=self.name, queues=queues)
            for name, queues, _ in self._usage_infos("group", only)
        ]

    def _usage_infos(
        self, kind: str, only: str | None = None
    ) -> list[tuple[str, list[LimitUsageInfo], dict[str, str]]]:
        """User or group usage as the applications' owners hold it (confirmed allocations), with the
        limits that apply: of ``only``, or of every user (group) by name. A group is tracked where a
        group limit applies to it (the application's limit group). The scheduler's view keeps its own
        count for its decisions (proposals included); asking it here would wait on a scheduler that
        may be inside the RM's predicates."""
        reported: dict[str, list[AppUsage]] = {}
        linked: dict[str, dict[str, str]] = {}  # user -> application -> its limit group
        limit_groups = self.members.limit_groups
        for spec in list(self.members.specs.values()):
            limit_group = limit_groups.get(spec.application_id, "")
            name = spec.user if kind == "user" else limit_group
            if not name or (only is not None and name != only):
                continue
            info = self._app_info(spec.application_id)
            if kind == "user" and limit_group:
                linked.setdefault(name, {})[spec.application_id] = limit_group
            if info is not None:
                reported.setdefault(name, []).append(
                    AppUsage(
                        application_id=spec.application_id,
                        queue_path=spec.queue_path,
                        allocated=info.allocated,
                        running=bool(info.allocations),
                    )
                )
        # (name, its usage per queue with the limits that apply, a user's applications' limit groups)
        found: list[tuple[str, list[LimitUsageInfo], dict[str, str]]] = []
        for name in sorted(reported):
            rows = self.registry.ugm.usage_rows(kind, name, reported[name])
            if rows is not None:
                found.append((name, limit_usage_infos(rows), linked.get(name, {})))
        return found

    def _partition_info(self) -> PartitionInfo:
        # the root's usage as the scheduler's view last published it (its one owner)
        allocated = dict(self.queue_board.usage.get("root", ({}, {}))[0])
        return PartitionInfo(
            name=self.name,
            rm_id=self.rm_id,
            state="Draining" if self.drain_proxy is not None else "Active",
            capacity=res.prune(self.registry.capacity),
            allocated=allocated,
            node_sort_policy=self.registry.node_sort_policy,
            node_count=len(self.nodes),
            application_count=len(self.apps),
            preemption_enabled=self.registry.config.preemption.enabled,
            quota_preemption_enabled=self.registry.config.preemption.quota_preemption_enabled,
        )

    def _queue_info(self, path: str) -> QueueInfo | None:
        path = path.lower()
        queue = self.registry.queues.get(path)
        if queue is None or path not in self.queues:
            return None
        self.registry.refresh_limits()
        allocated, pending = (dict(r) for r in self.queue_board.usage.get(path, ({}, {})))
        if self._tree_publish_queued:
            self._publish_queue_tree()
        board = self.queue_board
        running = board.running_applications(board.structure).get(path, 0)
        described = self._describe_queue(path, allocated, pending)
        priority = board.priorities.get(path, described.current_priority)
        return attrs.evolve(  # type: ignore[misc]  # (``frozen``)
            described,
            running_applications=running,
            current_priority=priority,
            preempting=dict(board.preempting.get(path, {})),
            allocating_accepted=board.allocating_applications(board.structure).get(path, []),
        )

    def _describe_queue(
        self, path: str, allocated: dict[str, int], pending: dict[str, int], *, for_board: bool = False
    ) -> QueueInfo:
        """The queue's record (limits refreshed); ``for_board``: without the maxima a node changes (the
        root's own and every applying one), which the queue board derives from the capacity when read."""
        queue = self.registry.queues[path]
        if queue.parent is None:
            own = {} if for_board else res.prune(self.registry.capacity)
        else:
            own = dict(queue.max or {})
        maximum = {} if for_board else dict(queue.effective_max or {})
        return QueueInfo(
            path=queue.path,
            is_leaf=queue.is_leaf,
            is_managed=queue.is_managed,
            state=queue.state.value,
            guaranteed=res.prune(queue.guaranteed or {}),
            max=maximum,
            own_max=own,
            allocated=allocated,
            pending=pending,
            max_applications=queue.max_applications,
            properties=dict(queue.properties),
            children=sorted(child.path for child in queue.children.values()),
            applications=self.members.in_queue(queue.path),
            sort_policy=queue.sort_policy,
            priority_sorting=queue.priority_sort_enabled,
            preemption_policy=queue.preemption_policy,
        )

    def _queue_infos(self) -> list[QueueInfo]:
        """Every queue, parents first, with the usage each queue last published: no queue is asked, so
        the answer does not wait behind the scheduling traffic on the partition's pool."""
        if self._tree_publish_queued:
            self._publish_queue_tree()  # asked before the burst's publication: up to date all the same
        return self.queue_board.queues()

    def _app_info(self, application_id: str) -> ApplicationInfo | None:
        handle = self.apps.get(application_id)
        if handle is None:
            return self.completed.get(application_id)
        info: ApplicationInfo = self.ask(handle, Snapshot())
        reserved = [
            key
            for holders in self.node_reservations.values()
            for app, key in holders
            if app == application_id
        ]
        if reserved:  # the reservations the scheduler last published (YuniKorn's keys: allocation keys)
            info = attrs.evolve(info, reservations=sorted(reserved))  # type: ignore[misc]
        deadline = self.app_backoffs.get(application_id)
        if deadline is not None:
            info = attrs.evolve(info, backoff_deadline=deadline)  # type: ignore[misc]
        return info

    def _node_info(self, node_id: str) -> NodeInfo | None:
        handle = self.nodes.get(node_id)
        if handle is None:
            return None
        info: NodeInfo = self.ask(handle, Snapshot())
        holders = self.node_reservations.get(node_id, ())
        # (NodeInfo is an attrs class; ``frozen`` hides that from mypy's attrs plugin)
        return attrs.evolve(  # type: ignore[misc]
            info,
            reservations=[app_id for app_id, _ in holders],
            reserved_asks=[key for _, key in holders],
        )
