"""A partition's queue tree as its actors last published it, read without any actor message.

Monitoring (the REST API's queue routes, ``Core.queues``) reads it from any thread, so a read never
waits behind the scheduling traffic in an actor's mailbox or for a thread hand-off. Two kinds of writer,
each only ever replacing whole values (never changing one in place), so a reader sees every entry
either before or after a change:

- the partition actor publishes the structure (every queue's ``QueueInfo`` with its usage left empty)
  once per burst of messages that may have changed it (``PartitionActor``, ``PublishQueueTree``);
- each queue actor publishes its own ``(allocated, pending)`` once per burst of usage messages.

Plain Python: no pykka, no locks.
"""

from __future__ import annotations

import attrs

from korral.info import QueueInfo
from korral.model.resource import Resource

_NO_USAGE: tuple[Resource, Resource] = ({}, {})


class QueueBoard:
    __slots__ = ("structure", "usage")

    def __init__(self) -> None:
        # every queue, parents before children, without usage: replaced whole by the partition actor
        self.structure: tuple[QueueInfo, ...] = ()
        # queue path -> (allocated, pending): each entry replaced whole by its queue actor
        self.usage: dict[str, tuple[Resource, Resource]] = {}

    def queues(self) -> list[QueueInfo]:
        """Every queue, parents before children, each with the usage its queue last published."""
        usage = self.usage
        return [
            attrs.evolve(info, allocated=dict(allocated), pending=dict(pending))
            for info in self.structure
            for allocated, pending in (usage.get(info.path, _NO_USAGE),)
        ]
