"""A partition's queue tree as its actors last published it, read without any actor message.

Monitoring (the REST API's queue routes, ``Core.queues``) reads it from any thread, so a read never
waits behind the scheduling traffic in an actor's mailbox or for a thread hand-off. Two kinds of writer,
each only ever replacing whole values (never changing one in place), so a reader sees every entry
either before or after a change:

- the partition actor publishes the structure (every queue's ``QueueInfo`` with its usage left empty)
  once per burst of messages that may have changed it (``PartitionActor``, ``PublishQueueTree``);
- each queue actor publishes its own ``(allocated, pending)`` once per burst of usage messages;
- each application actor publishes its own state (its entry gone once the application has ended),
  and whether it is Accepted while holding allocations;
- the scheduler publishes each queue's current priority (YuniKorn's currentPriority) and what its
  preemption victims hold (preemptingResource) once per burst.

Plain Python: no pykka, no locks.
"""

from __future__ import annotations

import attrs

from korral.info import QueueInfo
from korral.model.resource import Resource

_NO_USAGE: tuple[Resource, Resource] = ({}, {})
RUNNING = "Running"
_MIN_PRIORITY = -(1 << 31)
_NO_RESOURCE: Resource = {}


class QueueBoard:
    __slots__ = ("allocating_accepted", "app_states", "preempting", "priorities", "structure", "usage")

    def __init__(self) -> None:
        # every queue, parents before children, without usage: replaced whole by the partition actor
        self.structure: tuple[QueueInfo, ...] = ()
        # queue path -> (allocated, pending): each entry replaced whole by its queue actor
        self.usage: dict[str, tuple[Resource, Resource]] = {}
        # application id -> state, while the application lives: each entry written by its own actor
        self.app_states: dict[str, str] = {}
        # application id -> True while Accepted and holding allocations: each entry written by its actor
        self.allocating_accepted: dict[str, bool] = {}
        # queue path -> its current priority: each entry replaced by the scheduler (absent: the minimum)
        self.priorities: dict[str, int] = {}
        # queue path -> what its preemption victims hold until confirmed: replaced whole by the scheduler
        self.preempting: dict[str, Resource] = {}

    def queues(self) -> list[QueueInfo]:
        """Every queue, parents before children, each with the usage its queue last published and the
        applications running in its subtree."""
        usage = self.usage
        priorities = self.priorities
        preempting = self.preempting
        running = self.running_applications(self.structure)
        allocating = self.allocating_applications(self.structure)
        return [
            attrs.evolve(  # type: ignore[misc]  # QueueInfo is attrs (``frozen`` hides it from mypy)
                info,
                allocated=dict(allocated),
                pending=dict(pending),
                running_applications=running[info.path],
                current_priority=priorities.get(info.path, _MIN_PRIORITY),
                preempting=dict(preempting.get(info.path, _NO_RESOURCE)),
                allocating_accepted=allocating.get(info.path, []),
            )
            for info in self.structure
            for allocated, pending in (usage.get(info.path, _NO_USAGE),)
        ]

    def allocating_applications(self, queues: tuple[QueueInfo, ...]) -> dict[str, list[str]]:
        """Per queue path (only those with any): the Accepted applications holding allocations in the
        queue and its descendants (YuniKorn's allocatingAcceptedApps), sorted."""
        allocating = self.allocating_accepted
        if not allocating:
            return {}
        found: dict[str, list[str]] = {}
        for info in reversed(queues):  # children before their parent
            apps = [app_id for app_id in info.applications if app_id in allocating]
            for child in info.children:
                apps.extend(found.get(child, ()))
            if apps:
                found[info.path] = sorted(apps)
        return found

    def running_applications(self, queues: tuple[QueueInfo, ...]) -> dict[str, int]:
        """Per queue path: how many applications in the queue and its descendants are Running
        (YuniKorn's runningApps), from ``queues`` listed parents before children."""
        states = self.app_states
        running: dict[str, int] = {}
        for info in reversed(queues):  # children before their parent
            own = sum(1 for app_id in info.applications if states.get(app_id) == RUNNING)
            running[info.path] = own + sum(running.get(child, 0) for child in info.children)
        return running
