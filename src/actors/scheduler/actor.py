"""The Scheduler actor: the one stream of allocation decisions of a partition.

It decides on its ``SchedulingView`` with the reference scheduler's code, a batch of cycles at a time
(each cycle still one allocation, so fairness is re-evaluated after every allocation exactly as in
YuniKorn), then sends one ``Placed`` per application. The view is the one writer of a node's free
room: what it decides is booked on its node there and then, and no second check follows. Owners
confirm what their asks still want (and report it to the RM) or give it back (``RollBack``),
which the view undoes. Any change told to the scheduler wakes it at once; a timer tick every
``scheduling_interval`` reports outstanding asks; each deadline of the view arms its own wake-up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, cast

from korral import si
from korral.actors.base import Handle, Rank, ServedActor, inside_predicates, tell_all
from korral.actors.event_channel import deliver_events
from korral.actors.messages import (
    AppAdded,
    AppBackoffs,
    AppGone,
    ApplyConfig,
    DeadlineDue,
    NodeAdded,
    NodeChanged,
    NodeGone,
    NodeRemoved,
    NodesAdded,
    Placed,
    Preempt,
    QueueCreated,
    QueuesRemoved,
    Replace,
    RunCycle,
    SchedulerDone,
    Snapshot,
    ViewOps,
)
from korral.actors.node_board import NodeBoard
from korral.actors.queue_board import QueueBoard
from korral.actors.scheduler.publish import SchedulerPublishing
from korral.actors.scheduler.ticks import SchedulerTicks
from korral.actors.tracker import Tracker
from korral.callback import ResourceManagerCallback
from korral.config.schema import PartitionConfig
from korral.model import events
from korral.model.allocation import Allocation, AskSpec
from korral.model.node import removal_reason
from korral.model.partition.effects import CoreRelease, QueueEvent, RequestEvent, RunnableChange
from korral.model.queue_spec import QueueSpec
from korral.model.view import SchedulingView
from korral.model.view_ops import (
    AdoptRecovered,
    DropAsk,
    Forget,
    MarkReleasing,
    OwnerState,
    PutAsks,
    RollBack,
    Swap,
    UndoReplacement,
    Unpreempt,
)
from korral.resource import Resource

_new_tuple = tuple.__new__

# A batch of cycles ends when nothing more fits, or after a time budget. The budget starts short (new
# asks are placed within milliseconds at light load) and doubles while batches keep being cut short,
# i.e. while there is a backlog: then larger batches send fewer Placed messages per allocation (one per
# application), and latency is the backlog's anyway. It drops back as soon as a batch drains it all.
BATCH_ALLOCATIONS = 20_000
BATCH_SECONDS_MIN = 0.02
BATCH_SECONDS_MAX = 0.25


class PredicatesForNodes(ResourceManagerCallback):
    """A callback that answers the RM's predicates for many candidate nodes of one decision in one
    call (engine="ray": the RM is a process away). ``candidates_per_call`` is how many the view
    gathers for its first call; it doubles each call while every node is refused."""

    candidates_per_call = 1

    def predicates_for_nodes(
        self, allocation_key: str, node_ids: Sequence[str], allocate: bool, first: bool
    ) -> Sequence[bool]:
        """Whether each node may take the ask, in order; with ``first``, up to the first accepted."""
        raise NotImplementedError


class SchedulerActor(SchedulerPublishing, SchedulerTicks, ServedActor):
    rank = Rank.SCHEDULER

    def __init__(
        self,
        tracker: Tracker,
        name: str,
        partition_name: str,
        config: PartitionConfig,
        *,
        rm_id: str,
        uuid_token: str,
        reservation_delay: float,
        callback: ResourceManagerCallback,
        callback_closed: threading.Event,
        dispatcher: Handle,
        partition: Handle,
        metrics: Any = None,
        timer: Any = None,
        board: QueueBoard | None = None,
        node_board: NodeBoard | None = None,
        queues: tuple[QueueSpec, ...] = (),
    ) -> None:
        """``queues``: the specs of the queues ``config`` makes, as their actors hold them."""
        super().__init__(tracker, name)
        # the queue board: each queue's usage, currentPriority and preempting resource, once per burst
        self.board = board
        # what runs on each node, for node snapshots: the view's record, published once per batch
        self.node_board = node_board if node_board is not None else NodeBoard()
        # uuid -> (application id, queue path, resource) of preemption victims not yet confirmed
        self.victims: dict[str, tuple[str, str, Resource]] = {}
        self.published_usage: dict[str, tuple[Resource, Resource]] = {}  # queue usage as last published
        # node id -> the (application, allocation key) holding it, as last published
        self.reserved: dict[str, tuple[tuple[str, str], ...]] = {}
        # the view's effects not yet acted on (``_take_effects``): reservations, request events
        self.reservation_changes: set[str] = set()
        self._request_events: list[RequestEvent] = []
        self._queue_events: list[QueueEvent] = []
        self._runnable_changes: list[RunnableChange] = []
        self._backoffs: dict[str, float] = {}
        self.partition = partition
        # wakes this actor when a deadline of the view's runs out (None: only ticks wake it)
        self.timer = timer
        self._timed_wake: float | None = None
        self.metrics = metrics  # the core's metrics: each batch of cycles is timed
        self.callback = callback
        self.callback_closed = callback_closed
        self.dispatcher = dispatcher
        filters = type(callback).predicates is not ResourceManagerCallback.predicates
        # the RM's predicates in another process (engine="ray"): a decision's candidates go together
        self.for_nodes = callback if isinstance(callback, PredicatesForNodes) else None
        for_nodes = self.for_nodes is not None
        self.view = SchedulingView(
            partition_name,
            config,
            rm_id=rm_id,
            uuid_token=uuid_token,
            reservation_delay=reservation_delay,
            clock=tracker.clocks.clock,
            # an RM that does not filter is not asked at all (nothing to skip on the hot path)
            predicate=self._predicate if filters and not for_nodes else None,
            nodes_predicate=self._predicates_for_nodes if for_nodes else None,
            candidates_per_call=self.for_nodes.candidates_per_call if self.for_nodes is not None else 1,
            queues=queues,
        )
        self.clock = tracker.clocks.clock
        self.apps: dict[str, Handle] = {}
        self._cycle_queued = False
        self._batch_seconds = BATCH_SECONDS_MIN
        self.cut_short = False  # a batch ended early by something outside the walk (simulated cut-offs)
        if metrics is not None:
            self.view.latencies = []  # YuniKorn's try-node, try-preemption and sorting latencies
        self._last_outstanding_report = 0.0
        self.cycles = 0
        self.proposals = 0
        self.rollbacks = 0
        self.batches = 0
        self.largest_batch = 0

    # ---- plumbing ----------------------------------------------------------------------------------

    def _predicate(self, allocation_key: str, node_id: str, allocate: bool) -> bool:
        if self.callback_closed.is_set():
            return False  # the registration ended: its RM is not asked anything any more
        with inside_predicates():
            return bool(
                self.callback.predicates(
                    si.PredicatesArgs(allocation_key=allocation_key, node_id=node_id, allocate=allocate)
                )
            )

    def _predicates_for_nodes(
        self, allocation_key: str, node_ids: Sequence[str], allocate: bool, first: bool
    ) -> Sequence[bool]:
        callback = self.for_nodes
        if callback is None or self.callback_closed.is_set():
            return ()  # the registration ended: its RM is not asked anything any more
        with inside_predicates():
            return callback.predicates_for_nodes(allocation_key, node_ids, allocate, first)

    def _publish_backoffs(self) -> None:
        # the partition's clock to wall-clock seconds, as YuniKorn shows the deadline
        offset = self.tracker.clocks.wall_clock_ns() / 1e9 - self.clock()
        changed, self._backoffs = self._backoffs, {}
        deadlines = tuple((app_id, deadline + offset) for app_id, deadline in sorted(changed.items()))
        self.partition.tell(AppBackoffs(deadlines=deadlines))

    def _take_effects(self, *, send_releases: bool = True) -> list[CoreRelease]:
        """Act on what the view's operations produced (``model.partition.effects``): a wake-up for a
        preemption delay, core releases to their owners (or returned, ``send_releases=False``: a batch
        sends them after its placements); reservation changes and request events are kept for
        publishing."""
        effects = self.view.take_effects()
        if not effects:
            return []
        if effects.wake_at is not None:
            self._wake_at(effects.wake_at)
        releases: list[CoreRelease] = []
        if effects.core_releases:
            if send_releases:
                self._send_core_releases(effects.core_releases)
            else:
                releases = effects.core_releases
        if effects.request_events:
            self._request_events += effects.request_events
        if effects.queue_events:
            self._queue_events += effects.queue_events
        if effects.runnable_changes:
            self._runnable_changes += effects.runnable_changes
        if effects.backoffs:
            self._backoffs.update(effects.backoffs)
        if effects.reservation_changes:
            self.reservation_changes |= effects.reservation_changes
        return releases

    def _wake(self) -> None:
        self._take_effects()
        if self.reservation_changes:
            self._publish_reservations()
        if not self._cycle_queued:
            self._cycle_queued = True
            self.kick(RunCycle())

    # ---- view updates ------------------------------------------------------------------------------

    def on_NodeAdded(self, message: NodeAdded) -> None:
        self._add_node(message)
        self._wake()

    def on_NodesAdded(self, message: NodesAdded) -> None:
        for added in message.added:
            self._add_node(added)
        self._wake()

    def _add_node(self, message: NodeAdded) -> None:
        """The view holds the partition's spec of the new node by reference. A node of the same id
        still here is an earlier one whose ``NodeGone``, told by its own actor, has not arrived yet:
        it leaves now (its late ``NodeGone`` then finds nothing of its incarnation)."""
        spec = message.spec
        held = self.view.nodes.get(spec.node_id)
        if held is not None:
            if held.spec.incarnation == spec.incarnation:
                return
            self._node_gone(spec.node_id, held.spec.incarnation)
        self.view.add_node_spec(spec)

    def on_NodeChanged(self, message: NodeChanged) -> None:
        self.view.set_node(message.spec)  # the node's owner's spec, held by reference
        self._wake()

    def on_NodeGone(self, message: NodeGone) -> None:
        self._node_gone(message.node_id, message.incarnation)
        self._wake()

    def _node_gone(self, node_id: str, incarnation: int) -> None:
        """The view is the record of what ran on the node: each owner releases its share. Every
        ``Placed`` this actor sent is in the owner's mailbox already, ahead of this ``NodeRemoved``;
        a recovered allocation's ``RecoverAllocations`` was sent by the partition before it told the
        node's actor of the removal. So an owner holds, or has given back, everything named."""
        for application_id, uuids in self.view.discard_node(node_id, incarnation).items():
            self._tell_node_removed(application_id, node_id, tuple(uuids))

    def _tell_node_removed(self, application_id: str, node_id: str, uuids: tuple[str, ...]) -> None:
        app = self.apps.get(application_id)
        if app is not None:
            app.tell(NodeRemoved(node_id=node_id, uuids=uuids, reason=removal_reason(node_id)))

    def _stale(self, application_id: str, app: Handle | None) -> bool:
        """A message from an incarnation of the application that the view has replaced already."""
        current = self.apps.get(application_id)
        return app is not None and current is not None and current.actor_id != app.actor_id

    def on_AppAdded(self, message: AppAdded) -> None:
        spec = message.spec
        if self._stale(spec.application_id, message.app):
            # Removed and added again, and the new incarnation got here before the old one's AppGone
            # (they come from different actors): the old one's view state goes now (a batch publishes
            # the usage it held), its AppGone and late ViewOps are stale. No Placed goes to it from now on.
            self.view.discard_application(spec.application_id)
            self.apps[spec.application_id].tell(SchedulerDone())
            self._wake()
        self.apps[spec.application_id] = message.app
        self.view.insert_application(spec, limit_group=message.limit_group, queue_spec=message.queue)

    def on_AppGone(self, message: AppGone) -> None:
        if self._stale(message.application_id, message.app):
            return
        handle = self.apps.pop(message.application_id, None)
        if handle is not None:
            handle.tell(SchedulerDone())
        self.view.discard_application(message.application_id)
        self._wake()

    def dispatch_all(self, messages: tuple[Any, ...]) -> None:
        # A pool's bundle carries the new asks of many applications (one request spread over them): a
        # run of ViewOps that only add asks goes into the view as one batch, each queue re-keyed once.
        start = 0
        count = len(messages)
        while start < count:
            end = start
            while end < count and _only_new_asks(messages[end]):
                end += 1
            if end - start < 2:
                self.dispatch(messages[start])
                start += 1
                continue
            self._put_new_asks(messages[start:end])
            start = end

    def _put_new_asks(self, messages: tuple[ViewOps, ...]) -> None:
        timed = self.timing.on
        started = time.thread_time() if timed else 0.0
        asks = [
            spec  # the owner's spec, shared: the view keeps its own progress on it
            for message in messages
            if not self._stale(message.application_id, message.app)
            for op in message.ops
            for spec in cast(PutAsks, op).asks
        ]
        try:
            self.view.put_asks(asks)
        except Exception as error:
            self.handler_failed("ViewOps", error)
        self._wake()
        if timed:
            self.timing.handled("ViewOps", time.thread_time() - started)

    def on_ViewOps(self, message: ViewOps) -> None:
        if self._stale(message.application_id, message.app):
            return
        view = self.view
        application_id = message.application_id
        new_asks: list[AskSpec] = []
        for op in message.ops:
            if isinstance(op, PutAsks):
                new_asks.extend(op.asks)  # the owner's specs, shared: the view keeps its own progress
                continue
            if new_asks:  # consecutive asks go in as one batch (one re-key of the application)
                view.put_asks(new_asks)
                new_asks = []
            if isinstance(op, DropAsk):
                view.drop_ask(application_id, op.allocation_key, op.generation)
            elif isinstance(op, RollBack):
                view.rollback(op.allocation)
                self.rollbacks += 1
            elif isinstance(op, Forget):
                view.forget_allocation(op.allocation)
            elif isinstance(op, AdoptRecovered):
                # adopted by the partition with its node already (the owner's is a repeat): a node
                # that left meanwhile had the scheduler tell its owner to release it (on_NodeGone)
                view.adopt_recovered(op.allocation)
            elif isinstance(op, UndoReplacement):
                view.undo_replacement(op.allocation)
                self.rollbacks += 1
            elif isinstance(op, Swap):
                if view.swap(application_id, op.placeholder_uuid, op.real):
                    # its placeholder left with its node before the owner swapped: the real
                    # allocation, on that node, goes as the node's removal would have taken it
                    self._tell_node_removed(application_id, op.real.node_id, (op.real.uuid,))
            elif isinstance(op, MarkReleasing):
                view.mark_releasing(application_id, op.uuid, op.termination)
            elif isinstance(op, Unpreempt):
                view.unpreempt(application_id, op.uuid)
            elif isinstance(op, OwnerState):
                view.take_state(application_id, op.state)
            else:
                raise TypeError(f"unknown view operation {op!r}")
        if new_asks:
            view.put_asks(new_asks)
        self._wake()

    def _undo(self, allocations: Sequence[Allocation]) -> None:
        """Decisions whose application had stopped when they were sent: out of the view (a
        replacement undone)."""
        view = self.view
        for allocation in allocations:
            if allocation.replaces:
                view.undo_replacement(allocation)
            else:
                view.rollback(allocation)
        self.rollbacks += len(allocations)

    def on_ApplyConfig(self, message: ApplyConfig) -> None:
        self.view.apply_config(message.config, queues=message.queues)
        self._wake()

    def on_QueueCreated(self, message: QueueCreated) -> None:
        self.view.queue_created(message.path, leaf=message.leaf, spec=message.spec)

    def on_QueuesRemoved(self, message: QueuesRemoved) -> None:
        for path in message.paths:
            queue = self.view.queues.get(path)
            if queue is not None and queue.is_empty():
                self.view.remove_queue(queue)

    # ---- scheduling --------------------------------------------------------------------------------

    def _wake_at(self, due: float) -> None:
        """Run a cycle at the earliest moment time alone changes what the view decides (a preemption
        or quota preemption delay, a backoff, a reservation delay running out). Only the earliest is
        armed: the cycle it runs meets every later one again and asks for it then."""
        pending = self._timed_wake
        if self.timer is None or (pending is not None and pending <= due):
            return
        self._timed_wake = due
        self.timer.once(max(0.0, due - self.clock()), self.handle, DeadlineDue(due=due))

    def on_DeadlineDue(self, message: DeadlineDue) -> None:
        if self._timed_wake == message.due:
            self._timed_wake = None
        self._wake()

    def on_RunCycle(self, message: RunCycle) -> None:
        self._cycle_queued = self.cut_short = False
        view = self.view
        started = self.clock()
        deadline = started + self._batch_seconds
        made: list[Allocation] = []
        drained = False
        while len(made) < BATCH_ALLOCATIONS:
            allocation = view.schedule_one()
            if allocation is None:
                drained = True
                break
            made.append(allocation)
            if len(made) % 64 == 0 and self.clock() > deadline:
                break
        if drained:
            self._batch_seconds = BATCH_SECONDS_MIN
        else:
            self._batch_seconds = min(self._batch_seconds * 2, BATCH_SECONDS_MAX)
        self.cycles += 1
        if self.metrics is not None:
            self.metrics.scheduled(self.clock() - started)
            records, walks = view.take_latencies()
            if records or walks:
                self.metrics.observe_latencies(records, walks)
        # A victim may be one this batch placed: its owner must have the Placed before the Preempt.
        releases = self._take_effects(send_releases=False)
        if self._request_events or self._queue_events or self._runnable_changes:
            self._send_preemption_events()
        if self._backoffs:
            self._publish_backoffs()
        if not made:
            if releases:
                self._send_core_releases(releases)
            self._publish_batch(made)
            if self.reservation_changes:
                self._publish_reservations()
            return
        self.batches += 1
        self.largest_batch = max(self.largest_batch, len(made))
        self.proposals += len(made)
        # per application, in the order decided (a dict: the simulated runtime replays a run exactly)
        by_app: dict[str, tuple[Handle, list[Allocation], list[Allocation]]] = {}
        apps = self.apps
        refused: list[Allocation] = []
        for allocation in made:
            application_id = allocation.application_id
            entry = by_app.get(application_id)
            if entry is None:
                app = apps.get(application_id)
                if app is None:
                    refused.append(allocation)
                    continue
                entry = by_app[application_id] = (app, [], [])
            if allocation.replaces:
                # confirmed by the application alone: the placeholder's node already holds the room
                entry[2].append(allocation)
                continue
            entry[1].append(allocation)
        # Straight to each application's mailbox, as every other message of this actor to it (so its
        # SchedulerDone still comes last); placements before replacements (a placeholder before its
        # replacement). One hand-off: one tracker count and one pool wake-up per batch.
        deliveries: list[tuple[Handle, Any]] = []
        sent: list[list[Allocation]] = []
        for app, placements, replacements in by_app.values():
            if placements:
                deliveries.append((app, _new_tuple(Placed, (tuple(placements),))))
                sent.append(placements)
            if replacements:
                deliveries.append((app, Replace(allocations=tuple(replacements))))
                sent.append(replacements)
        for delivered, allocations in zip(tell_all(deliveries), sent, strict=True):
            if not delivered:
                refused.extend(allocations)
        if refused:
            self._undo(refused)
        if releases:
            self._send_core_releases(releases)
        self._publish_batch(made)
        if drained and not (refused or releases or self.cut_short):  # a message or deadline wakes it
            if self.reservation_changes:
                self._publish_reservations()
        else:  # more may fit right away (the batch was cut short, a rollback or release freed room)
            self._wake()

    def _publish_batch(self, made: list[Allocation]) -> None:
        """What a batch changed, for readers: queue usage, what the victims hold, the nodes' records."""
        self._publish_queues(self.board, made)
        if self.board is not None and (self.victims or self.board.preempting):
            self._publish_preempting(self.board)
        self._publish_nodes()

    def _send_core_releases(self, releases: list[CoreRelease]) -> None:
        """Preemption victims go to their applications, which release them to the RM (the view marked
        them releasing already); a gang replacement's placeholder is released by its owner itself."""
        view = self.view
        # one Preempt per application and preemptor: each victim's release names the ask it makes room for
        by_app: dict[tuple[str, str], list[str]] = {}
        for release in releases:
            allocation, text = release.allocation, release.message
            if release.termination is si.TerminationType.PREEMPTED_BY_SCHEDULER:
                by_app.setdefault((allocation.application_id, text), []).append(allocation.uuid)
                app_model = view.applications.get(allocation.application_id)
                if self.board is not None and app_model is not None:
                    self.victims[allocation.uuid] = (
                        allocation.application_id,
                        app_model.queue_path,
                        allocation.resource,
                    )
        for (application_id, text), uuids in by_app.items():
            app = self.apps.get(application_id)
            if app is None or not app.tell(Preempt(uuids=tuple(uuids), message=text)):
                for uuid in uuids:
                    view.unpreempt(application_id, uuid)

    def _send_preemption_events(self) -> None:
        """Request events about preemption (YuniKorn's ask events) and queue events about quota
        preemption, when the RM takes events at all."""
        found, self._request_events = self._request_events, []
        quota, self._queue_events = self._queue_events, []
        runnable, self._runnable_changes = self._runnable_changes, []
        if not events.wanted(self.callback, self.metrics) or self.callback_closed.is_set():
            return
        records = [
            events.request(
                event.application_id,
                event.allocation_key,
                events.Change.NONE,
                event.message,
                events.Detail.DETAILS_NONE,
            )
            for event in found
        ]
        records += [
            events.queue(event.queue_path, events.Change.SET, events.Detail.DETAILS_NONE, event.message)
            for event in quota
        ]
        records += [events.app_runnable(c.application_id, c.runnable, c.by) for c in runnable]
        deliver_events(self.tracker, self.dispatcher, records, self.dispatcher.tell)

    def on_Snapshot(self, message: Snapshot) -> Any:
        return {
            "cycles": self.cycles,
            "proposals": self.proposals,
            "rollbacks": self.rollbacks,
            "batches": self.batches,
            "largest_batch": self.largest_batch,
        }


def _only_new_asks(message: Any) -> bool:
    """A ViewOps that only adds asks (what an application's burst of new asks sends)."""
    return type(message) is ViewOps and all(type(op) is PutAsks for op in message.ops)
