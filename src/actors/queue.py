"""Queue actors: one per queue of the partition's structure, started and retired by the partition.

A queue's usage (allocated and pending) is not kept here: its one owner is the scheduler's view (the
usage the walk enforces: max, guarantees, fair order), which publishes it once per batch of cycles into
the partition's queue board and the core's metrics (``SchedulerPublishing._publish_queues``). A second
copy here, fed by the applications' usage deltas and passed up level by level, would cost two messages
per level per application burst to keep in step with the view's.
"""

from __future__ import annotations

from korral.actors.base import Rank, RetiringActor


class QueueActor(RetiringActor):
    rank = Rank.QUEUE
    scheduler_sends = False
