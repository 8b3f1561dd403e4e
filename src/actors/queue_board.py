"""A partition's queue tree as its actors last published it, read without any actor message.

Monitoring (the REST API's queue routes, ``Core.queues``) reads it from any thread, so a read never
waits behind the scheduling traffic in an actor's mailbox or for a thread hand-off. Two kinds of writer,
each only ever replacing whole values (never changing one in place), so a reader sees every entry
either before or after a change:

- the partition actor publishes the structure (every queue's ``QueueInfo`` with its usage left empty)
  once per burst of messages that may have changed it (``PartitionActor``, ``PublishQueueTree``);
- each queue actor publishes its own ``(allocated, pending)`` once per burst of usage messages;
- each application actor publishes its own state (its entry gone once the application has ended or
  was removed); the partition drops an application's entry when it removes it.

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

from korral.info import QueueInfo
from korral.model.resource import Resource

_NO_USAGE: tuple[Resource, Resource] = ({}, {})
RUNNING = "Running"
_NO_STATE: tuple[str, int] = ("", 0)


class QueueBoard:
    __slots__ = ("_app_lock", "app_states", "structure", "usage")

    def __init__(self) -> None:
        # every queue, parents before children, without usage: replaced whole by the partition actor
        self.structure: tuple[QueueInfo, ...] = ()
        # queue path -> (allocated, pending): each entry replaced whole by its queue actor
        self.usage: dict[str, tuple[Resource, Resource]] = {}
        # application id -> (state, id of the actor that owns the entry), while the application lives
        self.app_states: dict[str, tuple[str, int]] = {}
        self._app_lock = threading.Lock()

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

    def forget_app(self, app_id: str, owner: int) -> None:
        """The application ended or was removed: its entry goes, unless a newer namesake owns it."""
        with self._app_lock:
            entry = self.app_states.get(app_id)
            if entry is not None and entry[1] == owner:
                del self.app_states[app_id]

    def queues(self) -> list[QueueInfo]:
        """Every queue, parents before children, each with the usage its queue last published and the
        applications running in its subtree."""
        usage = self.usage
        running = self.running_applications(self.structure)
        return [
            attrs.evolve(  # type: ignore[misc]  # QueueInfo is attrs (``frozen`` hides it from mypy)
                info,
                allocated=dict(allocated),
                pending=dict(pending),
                running_applications=running[info.path],
            )
            for info in self.structure
            for allocated, pending in (usage.get(info.path, _NO_USAGE),)
        ]

    def running_applications(self, queues: tuple[QueueInfo, ...]) -> dict[str, int]:
        """Per queue path: how many applications in the queue and its descendants are Running
        (YuniKorn's runningApps), from ``queues`` listed parents before children."""
        states = self.app_states
        running: dict[str, int] = {}
        for info in reversed(queues):  # children before their parent
            own = sum(1 for app_id in info.applications if states.get(app_id, _NO_STATE)[0] == RUNNING)
            running[info.path] = own + sum(running.get(child, 0) for child in info.children)
        return running
