"""Which applications a partition holds, for a partition whose applications are owned elsewhere.

The Partition actor's registry places applications (``PartitionApplications.place_application``) but
owns none of their asks, allocations or state: each application's actor does. What the partition
keeps of one is what placement made of it, the ``AppSpec`` shared by reference with its owner and the
scheduler's view, and the group its usage is tracked against: enough to route to it, list its queue's
applications, keep that queue from cleanup, and answer user and group queries.
"""

from __future__ import annotations

from collections.abc import Iterator, KeysView

from korral.model.app.spec import AppSpec


class PartitionMembers:
    """Application id -> its ``AppSpec`` (by reference) and limit group, and each leaf's members."""

    def __init__(self) -> None:
        self.specs: dict[str, AppSpec] = {}
        # the group its usage is tracked against under ``limits`` ("" none), resolved at placement
        self.limit_groups: dict[str, str] = {}
        # leaf queue path -> the ids of its applications
        self._by_queue: dict[str, set[str]] = {}

    def add(self, spec: AppSpec, limit_group: str) -> None:
        application_id = spec.application_id
        self.specs[application_id] = spec
        self.limit_groups[application_id] = limit_group
        self._by_queue.setdefault(spec.queue_path, set()).add(application_id)

    def remove(self, application_id: str) -> AppSpec | None:
        """Forget the application; its spec (None when it is not here)."""
        spec = self.specs.pop(application_id, None)
        if spec is None:
            return None
        del self.limit_groups[application_id]
        members = self._by_queue[spec.queue_path]
        members.discard(application_id)
        if not members:
            del self._by_queue[spec.queue_path]
        return spec

    def in_queue(self, path: str) -> list[str]:
        """The ids of the applications in the leaf ``path``, sorted."""
        return sorted(self._by_queue.get(path, ()))

    def occupied_queues(self) -> KeysView[str]:
        """The leaves holding at least one application (queue cleanup leaves them)."""
        return self._by_queue.keys()

    def __contains__(self, application_id: object) -> bool:
        return application_id in self.specs

    def __iter__(self) -> Iterator[str]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)
