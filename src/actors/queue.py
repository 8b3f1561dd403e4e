"""Queue actors own queue usage: allocated and pending, reported up to the root by tell."""

from __future__ import annotations

from korral.actors.base import Handle, PoolActor, Rank, Tracker
from korral.actors.messages import QueueUsage, Snapshot
from korral.actors.runtime import ActorPool
from korral.model import resource as res
from korral.model.resource import Resource


class QueueActor(PoolActor):
    rank = Rank.QUEUE

    def __init__(
        self, tracker: Tracker, name: str, path: str, parent: Handle | None, *, pool: ActorPool
    ) -> None:
        super().__init__(tracker, name, pool=pool)
        self.path = path
        self.parent = parent
        self.allocated: Resource = {}
        self.pending: Resource = {}

    def on_QueueUsage(self, message: QueueUsage) -> None:
        res.add_into(self.allocated, message.allocated)
        res.add_into(self.pending, message.pending)
        if self.parent is not None:
            self.parent.tell(message)

    def on_Snapshot(self, message: Snapshot) -> tuple[Resource, Resource]:
        return res.prune(self.allocated), res.prune(self.pending)
