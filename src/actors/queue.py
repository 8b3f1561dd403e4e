"""Queue actors own queue usage: allocated and pending, reported up to the root by tell.

A queue coalesces the deltas of a burst (a self-tell ``FlushUsage`` queued behind what is already in
its mailbox) and passes one message to its parent per burst: with a thousand applications reporting
at once, the root gets a handful of messages, not a thousand.
"""

from __future__ import annotations

import attrs

from korral.actors.base import Handle, Rank, RetiringActor, Tracker
from korral.actors.messages import QueueUsage, Snapshot
from korral.actors.runtime import ActorPool
from korral.model import resource as res
from korral.model.resource import Resource


@attrs.frozen(slots=True)
class FlushUsage:
    """Queue -> itself: pass the burst's usage deltas to the parent."""


class QueueActor(RetiringActor):
    rank = Rank.QUEUE
    scheduler_sends = False

    def __init__(
        self, tracker: Tracker, name: str, path: str, parent: Handle | None, *, pool: ActorPool
    ) -> None:
        super().__init__(tracker, name, pool=pool)
        self.path = path
        self.parent = parent
        self.allocated: Resource = {}
        self.pending: Resource = {}
        self._allocated_delta: Resource = {}
        self._pending_delta: Resource = {}
        self._flush_queued = False

    def on_QueueUsage(self, message: QueueUsage) -> None:
        res.add_into(self.allocated, message.allocated)
        res.add_into(self.pending, message.pending)
        if self.parent is None:
            return
        res.add_into(self._allocated_delta, message.allocated)
        res.add_into(self._pending_delta, message.pending)
        if not self._flush_queued:
            self._flush_queued = True
            self.kick(FlushUsage())

    def on_FlushUsage(self, message: FlushUsage) -> None:
        self._flush_queued = False
        if (self._allocated_delta or self._pending_delta) and self.parent is not None:
            self.parent.tell(QueueUsage(allocated=self._allocated_delta, pending=self._pending_delta))
        self._allocated_delta = {}
        self._pending_delta = {}

    def quiet(self) -> bool:
        # A removed queue has no applications left, so usage can only still fall: a delta on its way
        # here (or to the parent) keeps it until it has passed
        return not (self.allocated or self.pending or self._allocated_delta or self._pending_delta)

    def on_Snapshot(self, message: Snapshot) -> tuple[Resource, Resource]:
        return res.prune(self.allocated), res.prune(self.pending)
