"""Queue actors own queue usage: allocated and pending, reported up to the root by tell.

A queue coalesces the deltas of a burst (a self-tell ``FlushUsage`` queued behind what is already in
its mailbox) and passes one message to its parent per burst: with a thousand applications reporting
at once, the root gets a handful of messages, not a thousand.
"""

from __future__ import annotations

from typing import Any

import attrs

from korral.actors.base import Handle, Rank, RetiringActor
from korral.actors.messages import QueueUsage, Snapshot
from korral.actors.runtime import ActorPool
from korral.actors.tracker import Tracker
from korral.model import resource as res
from korral.model.resource import Resource


@attrs.frozen(slots=True)
class FlushUsage:
    """Queue -> itself: pass the burst's usage deltas to the parent."""


class QueueActor(RetiringActor):
    rank = Rank.QUEUE
    scheduler_sends = False

    def __init__(
        self,
        tracker: Tracker,
        name: str,
        path: str,
        parent: Handle | None,
        *,
        pool: ActorPool,
        partition: str = "",
        metrics: Any = None,
        published: dict[str, tuple[Resource, Resource]] | None = None,
    ) -> None:
        super().__init__(tracker, name, pool=pool)
        self.path = path
        self.parent = parent
        self.partition = partition
        # this queue's usage is published once per burst, at the flush: to the core's metrics and to
        # the partition's board of published usage (whole entries replaced, never changed in place)
        self.metrics = metrics
        self.published = published
        self.allocated: Resource = {}
        self.pending: Resource = {}
        self._allocated_delta: Resource = {}
        self._pending_delta: Resource = {}
        self._flush_queued = False

    def on_QueueUsage(self, message: QueueUsage) -> None:
        res.add_into(self.allocated, message.allocated)
        res.add_into(self.pending, message.pending)
        if self.parent is not None:
            res.add_into(self._allocated_delta, message.allocated)
            res.add_into(self._pending_delta, message.pending)
        elif self.metrics is None and self.published is None:
            return
        if not self._flush_queued:
            self._flush_queued = True
            self.kick(FlushUsage())

    def on_FlushUsage(self, message: FlushUsage) -> None:
        self._flush_queued = False
        if self.metrics is not None or self.published is not None:
            allocated, pending = res.prune(self.allocated), res.prune(self.pending)
            if self.published is not None:
                self.published[self.path] = (allocated, pending)
            if self.metrics is not None:
                self.metrics.queue_usage(self.partition, self.path, allocated, pending)
        if (self._allocated_delta or self._pending_delta) and self.parent is not None:
            self.tell(self.parent, QueueUsage(allocated=self._allocated_delta, pending=self._pending_delta))
        self._allocated_delta = {}
        self._pending_delta = {}

    def quiet(self) -> bool:
        # A removed queue has no applications left, so usage can only still fall: a delta on its way
        # here (or to the parent) keeps it until it has passed
        return not (self.allocated or self.pending or self._allocated_delta or self._pending_delta)

    def on_Snapshot(self, message: Snapshot) -> tuple[Resource, Resource]:
        return res.prune(self.allocated), res.prune(self.pending)
