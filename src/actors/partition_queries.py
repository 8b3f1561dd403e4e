"""The Partition actor's read side: snapshots of the partition, its queues, applications and nodes.

A mixin of ``PartitionActor`` (``korral.actors.partition``): the structure comes from the actor's
registry, usage from the owners (asked, down the rank order) or from what the queues last published.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from korral.actors.base import Handle
from korral.actors.messages import Snapshot
from korral.info import (
    ApplicationInfo,
    GroupUsageInfo,
    NodeInfo,
    PartitionInfo,
    QueueInfo,
    UserUsageInfo,
    limit_usage_infos,
)
from korral.model import resource as res
from korral.model.partition import UnscheduledPartition
from korral.model.ugm import AppUsage


class PartitionQueries:
    """Answers ``Snapshot`` for ``PartitionActor``, whose fields these are."""

    name: str
    rm_id: str
    registry: UnscheduledPartition
    scheduler: Handle
    queues: dict[str, Handle]
    apps: dict[str, Handle]
    nodes: dict[str, Handle]
    completed: dict[str, ApplicationInfo]
    published_usage: dict[str, tuple[dict[str, int], dict[str, int]]]
    node_reservations: dict[str, str]

    if TYPE_CHECKING:  # KorralActor's

        def ask(self, target: Handle, message: Any, timeout: float = ...) -> Any: ...

    # ---- queries -----------------------------------------------------------------------------------

    def on_Snapshot(self, message: Snapshot) -> Any:
        kind, _, key = message.detail.partition(":")
        if kind == "partition":
            return self._partition_info()
        if kind == "queue":
            return self._queue_info(key)
        if kind == "app":
            return self._app_info(key)
        if kind == "apps":
            return [info for app_id in list(self.apps) if (info := self._app_info(app_id)) is not None]
        if kind == "node":
            return self._node_info(key)
        if kind == "queues":
            return self._queue_infos()
        if kind == "completed":
            return list(self.completed.values())
        if kind == "nodes":
            return [info for node_id in list(self.nodes) if (info := self._node_info(node_id)) is not None]
        if kind == "scheduler":
            return self.ask(self.scheduler, Snapshot(detail=""))
        if kind in ("user", "group"):
            return self._user_group_info(kind, key)
        raise ValueError(f"unknown snapshot {message.detail!r}")

    def _user_group_info(self, kind: str, name: str) -> UserUsageInfo | GroupUsageInfo | None:
        """User or group usage as the applications' owners hold it (confirmed allocations), with the
        limits that apply. The scheduler's view keeps its own count for its decisions (proposals
        included); asking it here would wait on a scheduler that may be inside the RM's predicates."""
        if not name:
            return None
        reported = []
        for app in list(self.registry.applications.values()):
            if (app.user if kind == "user" else app.limit_group) != name:
                continue
            info = self._app_info(app.application_id)
            if info is not None:
                reported.append(
                    AppUsage(
                        application_id=app.application_id,
                        queue_path=app.queue_path,
                        allocated=info.allocated,
                        running=bool(info.allocations),
                    )
                )
        rows = self.registry.ugm.usage_rows(kind, name, reported)
        if rows is None:
            return None
        if kind == "user":
            return UserUsageInfo(user=name, partition=self.name, queues=limit_usage_infos(rows))
        return GroupUsageInfo(group=name, partition=self.name, queues=limit_usage_infos(rows))

    def _partition_info(self) -> PartitionInfo:
        root = self.queues.get("root")
        allocated = self.ask(root, Snapshot())[0] if root is not None else {}
        return PartitionInfo(
            name=self.name,
            rm_id=self.rm_id,
            state="Active",
            capacity=res.prune(self.registry.capacity),
            allocated=allocated,
            node_sort_policy=self.registry.node_sort_policy,
            node_count=len(self.nodes),
            application_count=len(self.apps),
        )

    def _queue_info(self, path: str) -> QueueInfo | None:
        path = path.lower()
        queue = self.registry.queues.get(path)
        handle = self.queues.get(path)
        if queue is None or handle is None:
            return None
        self.registry.refresh_limits()
        allocated, pending = self.ask(handle, Snapshot())
        return self._describe_queue(path, allocated, pending)

    def _describe_queue(self, path: str, allocated: dict[str, int], pending: dict[str, int]) -> QueueInfo:
        queue = self.registry.queues[path]
        return QueueInfo(
            path=queue.path,
            is_leaf=queue.is_leaf,
            is_managed=queue.is_managed,
            state=queue.state.value,
            guaranteed=res.prune(queue.guaranteed or {}),
            max=dict(queue.effective_max or {}),
            allocated=allocated,
            pending=pending,
            max_applications=queue.max_applications,
            properties=dict(queue.properties),
            children=sorted(child.path for child in queue.children.values()),
            applications=sorted(queue.applications),
            sort_policy=queue.sort_policy,
            priority_sorting=queue.priority_sort_enabled,
        )

    def _queue_infos(self) -> list[QueueInfo]:
        """Every queue, parents first, with the usage each queue last published: no queue is asked, so
        the answer does not wait behind the scheduling traffic on the partition's pool."""
        self.registry.refresh_limits()
        published = self.published_usage
        return [
            self._describe_queue(path, *published.get(path, ({}, {})))
            for path in sorted(self.registry.queues)
            if path in self.queues
        ]

    def _app_info(self, application_id: str) -> ApplicationInfo | None:
        handle = self.apps.get(application_id)
        if handle is None:
            return self.completed.get(application_id)
        return self.ask(handle, Snapshot())

    def _node_info(self, node_id: str) -> NodeInfo | None:
        handle = self.nodes.get(node_id)
        if handle is None:
            return None
        info: NodeInfo = self.ask(handle, Snapshot())
        holder = self.node_reservations.get(node_id)
        return attrs.evolve(info, reservations=[holder] if holder else [])
