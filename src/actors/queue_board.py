"""A partition's queue tree as its actors last published it, read without any actor message.

Monitoring (the REST API's queue routes, ``Core.queues``) reads it from any thread, so a read never
waits behind the scheduling traffic in an actor's mailbox or for a thread hand-off. Its writers,
each only ever replacing whole values (never changing one in place), so a reader sees every entry
either before or after a change:

- the partition actor publishes the structure (every queue's ``QueueInfo`` with its usage and the
  maxima a node changes left empty) once per burst of messages that may have changed it (``PartitionActor``,
  ``PublishQueueTree``), and the partition's capacity (the root's max) whenever a node changed it. A
  queue's max as it applies is the smallest along its path, computed when read: the root's changes
  with every node, and a stored one per queue would cost every node change a pass over every queue;
- the scheduler publishes each queue's ``(allocated, pending)`` (its view is that usage's one owner)
  once per batch of cycles, an entry replaced only where the usage changed;
- each application actor publishes its own state and whether it is Accepted while holding
  allocations (its entries gone once the application has ended or was removed); the partition
  drops an application's entries when it removes it;
- the scheduler publishes each queue's current priority (YuniKorn's currentPriority) and what its
  preemption victims hold (preemptingResource) once per burst.

Application entries are owned: each carries the id of the actor that wrote it, and an actor changes or
drops only its own. An application removed and added again under the same id has a new actor while
the old one may still be answering the messages it was sent before the removal: the old one never
overwrites or drops the new one's entry. Those writes take a lock (the check and the write are one
step; they happen once per state change, off the scheduling path); reads take none.

Plain Python: no pykka.
"""

from __future__ import annotations

import threading

import attrs

from korral import resource as res
from korral.info import QueueInfo
from korral.resource import Resource

_NO_USAGE: tuple[Resource, Resource] = ({}, {})
RUNNING = "Running"
_NO_STATE: tuple[str, int] = ("", 0)
_MIN_PRIORITY = -(1 << 31)
_NO_RESOURCE: Resource = {}


class QueueBoard:
    __slots__ = (
        "_app_lock",
        "allocating_accepted",
        "app_states",
        "capacity",
        "preempting",
        "priorities",
        "structure",
        "usage",
    )

    def __init__(self) -> None:
        # every queue, parents before children, without usage, ``max`` or the root's ``own_max``:
        # replaced whole by the partition actor
        self.structure: tuple[QueueInfo, ...] = ()
        # the partition's capacity, the root's max: replaced whole by the partition actor
        self.capacity: Resource = {}
        # queue path -> (allocated, pending): each entry replaced whole by the scheduler (absent: none)
        self.usage: dict[str, tuple[Resource, Resource]] = {}
        # application id -> (state, id of the actor that owns the entry), while the application lives
        self.app_states: dict[str, tuple[str, int]] = {}
        # application id -> id of its actor, while Accepted and holding allocations (owned as above)
        self.allocating_accepted: dict[str, int] = {}
        self._app_lock = threading.Lock()
        # queue path -> its current priority: each entry replaced by the scheduler (absent: the minimum)
        self.priorities: dict[str, int] = {}
        # queue path -> what its preemption victims hold until confirmed: replaced whole by the scheduler
        self.preempting: dict[str, Resource] = {}

    def claim_app(self, app_id: str, state: str, owner: int) -> None:
        """A new application's actor takes the entry (over one a removed namesake may have left)."""
        with self._app_lock:
            self.app_states[app_id] = (state, owner)

    def publish_app(self, app_id: str, state: str, owner: int) -> None:
        """The application's state, unless the entry belongs to another actor (a newer namesake)."""
        with self._app_lock:
            entry = self.app_states.get(app_id)
            if entry is None or entry[1] == owner:
                self.app_states[app_id] = (state, owner)

    def publish_allocating(self, app_id: str, allocating: bool, owner: int) -> None:
        """Whether the application is Accepted while holding allocations, unless a newer namesake owns
        the application's entry."""
        with self._app_lock:
            entry = self.app_states.get(app_id)
            if entry is not None and entry[1] != owner:
                return
            if allocating:
                self.allocating_accepted[app_id] = owner
            else:
                self.allocating_accepted.pop(app_id, None)

    def forget_app(self, app_id: str, owner: int) -> None:
        """The application ended or was removed: its entries go, unless a newer namesake owns them."""
        with self._app_lock:
            entry = self.app_states.get(app_id)
            if entry is not None and entry[1] == owner:
                del self.app_states[app_id]
            if self.allocating_accepted.get(app_id) == owner:
                del self.allocating_accepted[app_id]

    def queues(self) -> list[QueueInfo]:
        """Every queue, parents before children, each with the usage its queue last published and the
        applications running in its subtree."""
        usage = self.usage
        priorities = self.priorities
        preempting = self.preempting
        structure = self.structure
        running = self.running_applications(structure)
        allocating = self.allocating_applications(structure)
        capacity = res.prune(self.capacity)
        maxima = effective_maxima(structure, capacity)
        return [
            attrs.evolve(  # type: ignore[misc]  # QueueInfo is attrs (``frozen`` hides it from mypy)
                info,
                max=maxima[info.path],
                own_max=info.own_max if "." in info.path else dict(capacity),
                allocated=dict(allocated),
                pending=dict(pending),
                running_applications=running[info.path],
                current_priority=priorities.get(info.path, _MIN_PRIORITY),
                preempting=dict(preempting.get(info.path, _NO_RESOURCE)),
                allocating_accepted=allocating.get(info.path, []),
            )
            for info in structure
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
            own = sum(1 for app_id in info.applications if states.get(app_id, _NO_STATE)[0] == RUNNING)
            running[info.path] = own + sum(running.get(child, 0) for child in info.children)
        return running


def effective_maxima(structure: tuple[QueueInfo, ...], capacity: Resource) -> dict[str, dict[str, int]]:
    """Per queue path of ``structure`` (parents before children): the max that applies to it, each
    resource's smallest along its path from the root, whose max is ``capacity`` (YuniKorn's
    GetMaxResource)."""
    root_max = res.prune(capacity) or None
    found: dict[str, Resource | None] = {}
    for info in structure:
        parent, _, _ = info.path.rpartition(".")
        found[info.path] = res.min_of_limits(info.own_max or None, found.get(parent)) if parent else root_max
    return {path: dict(maximum or {}) for path, maximum in found.items()}
