"""What the Scheduler actor publishes for readers other than the applications it decides for: the
node reservations (to its partition, with YuniKorn's NODE_RESERVATION records), each node's
allocations (onto the partition's node board), and each queue's usage, current priority and
preempting resource (into the partition's queue board; usage and preempting also to the core's
metrics).

Queue usage and a node's allocations have one owner, the scheduler's view: the usage its decisions
enforce (max, guarantees, the fair order), the allocations it booked. It counts an allocation when
the view decides it (a proposal, undone if the application refuses it) and a pending ask when the
view has it. Published here once per batch of
cycles, where it changed; every change to the view wakes a batch, so what the board shows is at most
one batch behind the view."""

from __future__ import annotations

from typing import Any

from korral import resource as res
from korral import si
from korral.actors.event_channel import deliver_events
from korral.actors.messages import NodeReservations
from korral.actors.node_board import NodeBoard
from korral.actors.queue_board import QueueBoard
from korral.model import events
from korral.model.allocation import Allocation
from korral.model.queue import Queue
from korral.model.view import SchedulingView
from korral.resource import Resource


class SchedulerPublishing:
    """Mixed into ``SchedulerActor``: the attributes below are the actor's."""

    view: SchedulingView
    node_board: NodeBoard
    partition: Any
    dispatcher: Any
    callback: Any
    callback_closed: Any
    metrics: Any
    tracker: Any
    # node id -> the (application, allocation key) holding it, as last published
    reserved: dict[str, tuple[tuple[str, str], ...]]
    # nodes whose reservations changed in the view since they were last published (its effects)
    reservation_changes: set[str]
    # uuid -> (application id, queue path, resource) of preemption victims not yet confirmed
    victims: dict[str, tuple[str, str, Resource]]
    # queue path -> (allocated, pending) of the view's queue as last published (copies, unpruned)
    published_usage: dict[str, tuple[Resource, Resource]]

    def _publish_nodes(self) -> None:
        """What the view booked on and freed from its nodes since the last batch, onto the node board."""
        changes = self.view.node_changes
        if changes:
            self.node_board.publish(changes)
            changes.clear()  # in place: the view's nodes note into this very list

    def _publish_reservations(self) -> None:
        changed = self.reservation_changes
        if changed:
            nodes = self.view.nodes
            reservations = []
            records: list[si.EventRecord] = []
            wanted = events.wanted(self.callback, self.metrics)
            for node_id in sorted(changed):  # a set: its order changes between processes
                node = nodes.get(node_id)
                holders = tuple(node.reservations) if node is not None else ()
                reservations.append((node_id, holders))
                before = self.reserved.pop(node_id, ())
                if holders:
                    self.reserved[node_id] = holders
                if wanted:
                    records += self._reservation_records(node_id, before, holders)
            changed.clear()
            self.partition.tell(NodeReservations(reservations=tuple(reservations)))
            if records and not self.callback_closed.is_set():
                deliver_events(self.tracker, self.dispatcher, records, self.dispatcher.tell)

    def _reservation_records(
        self, node_id: str, before: tuple[tuple[str, str], ...], after: tuple[tuple[str, str], ...]
    ) -> list[si.EventRecord]:
        """YuniKorn's NODE_RESERVATION records: REMOVE for each holder gone, ADD for each new one."""
        apps = self.view.applications
        records = []
        for holders, change in ((before, events.Change.REMOVE), (after, events.Change.ADD)):
            others = after if change is events.Change.REMOVE else before
            for holder in holders:
                if holder in others:
                    continue
                app = apps.get(holder[0])
                ask = app.asks.get(holder[1]) if app is not None else None
                resource = dict(ask.resource) if ask is not None else None
                records.append(events.node_reservation(node_id, holder[1], change, resource))
        return records

    def _publish_queues(self, board: QueueBoard | None, made: list[Allocation]) -> None:
        """Each queue's priority (one int) into the queue board where it changed, and the usage
        (``(allocated, pending)``, replaced whole) of each queue whose usage the view changed since
        the last batch (and of its ancestors) into the board and the metrics.

        The view's queues note their own changes (``Queue.usage_changed``), but the walk books a
        decision on its queue path inline, without a call (``PartitionModel``'s hot path): the
        queues of this batch's decisions (``made``) are added here."""
        view = self.view
        queues = view.queues
        changed = view.usage_changed
        if made:
            for path in {allocation.queue_path for allocation in made}:  # a few paths per batch
                queue = queues.get(path)
                if queue is not None:
                    changed.add(queue)
        if board is not None:
            priorities = board.priorities
            for path, queue in queues.items():
                if priorities.get(path) != queue.priority:
                    priorities[path] = queue.priority
        if changed:
            usage = board.usage if board is not None else None
            metrics = self.metrics
            published = self.published_usage
            seen: set[str] = set()
            for leaf in changed:
                at: Queue | None = leaf
                while at is not None and at.path not in seen:  # the queue, then its ancestors
                    path = at.path
                    seen.add(path)
                    allocated, pending = at.allocated, at.pending
                    last = published.get(path)
                    if queues.get(path) is at and (
                        last is None or last[0] != allocated or last[1] != pending
                    ):  # (not a removed queue, nor back to what was published)
                        published[path] = (dict(allocated), dict(pending))
                        entry = (res.prune(allocated), res.prune(pending))
                        if usage is not None:
                            usage[path] = entry
                        if metrics is not None:
                            metrics.queue_usage(view.name, path, entry[0], entry[1])
                    at = at.parent
            changed.clear()
        published = self.published_usage
        if len(published) > len(queues):  # queues the view removed: their entries go
            for path in [path for path in published if path not in queues]:
                del published[path]
                if board is not None:
                    board.usage.pop(path, None)

    def _publish_preempting(self, board: QueueBoard) -> None:
        """yunikorn-core's preemptingResource: what the victims in each queue and its descendants
        hold until their release is confirmed, replaced whole in the board."""
        apps = self.view.applications
        victims = self.victims
        for uuid, (application_id, _, _) in list(victims.items()):
            app = apps.get(application_id)
            if app is None or app.releasing.get(uuid) is not si.TerminationType.PREEMPTED_BY_SCHEDULER:
                del victims[uuid]
        totals: dict[str, Resource] = {}
        for _, path, resource in victims.values():
            while path:
                res.add_into(totals.setdefault(path, {}), resource)
                path = path.rpartition(".")[0]
        if self.metrics is not None:  # yunikorn_queue_resource{state="preempting"}, 0 once confirmed
            for path in set(board.preempting) | set(totals):
                self.metrics.queue_resources(self.view.name, path, "preempting", totals.get(path, {}))
        board.preempting = totals
