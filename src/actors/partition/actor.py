"""The Partition actor: membership, placement and routing for one partition.

It owns the partition's structure (the queue tree's shape, which nodes exist, the partition's
capacity) in a ``PartitionModel`` that tracks no allocations, holding each queue's configuration and
state as its queue actor made it (``QueueActorSpecs``); places applications with the partition's rules
and keeps which exist (``PartitionMembers``: each one's ``AppSpec``, by reference, and limit group);
creates and retires the owner actors, and routes each RM request to the actor that owns what the
request is about. A removed actor stops itself once nothing
can reach it any more (``RetiringActor``), so that no message to it is dropped.
"""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from typing import Any

import attrs

from korral import resource as res
from korral import si
from korral.actors.base import Handle, Periodic, Rank, ServedActor, tell_all
from korral.actors.event_channel import deliver_events
from korral.actors.messages import (
    AddAsks,
    AppAdded,
    AppBackoffs,
    AppFinished,
    ApplyConfig,
    CallbackArgument,
    CleanupQueues,
    Deliver,
    DrainPartition,
    NodeAdded,
    NodeChanged,
    NodeReservations,
    PartitionDrained,
    PartitionQuery,
    PublishQueueTree,
    QueueCreated,
    QueuesRemoved,
    RecoveredGone,
    ReleaseAllocations,
    RemoveApplication,
    RemoveAsks,
    Retire,
    RetireTombstones,
    RouteAllocationRequest,
    RouteApplicationRequest,
    RouteNodeRequest,
    StartNodeActors,
    StopPartition,
    Tick,
)
from korral.actors.node_board import NodeBoard
from korral.actors.partition.nodes import PartitionNodes
from korral.actors.partition.queries import PartitionQueries
from korral.actors.queue import QueueActor, QueueActorSpecs
from korral.actors.queue_board import QueueBoard
from korral.actors.runtime import Bundle
from korral.actors.setup import ActorSetup
from korral.actors.starting import LazyHandle, start_actor, start_pool
from korral.actors.timer import TimerService
from korral.actors.tracker import Tracker
from korral.config.schema import PartitionConfig
from korral.info import ApplicationInfo
from korral.model import events
from korral.model.app.owner import owned_application
from korral.model.app.spec import AppSpec
from korral.model.completed import CompletedApplications
from korral.model.events import Wanted
from korral.model.partition.composed import ModelError, UnscheduledPartition
from korral.model.partition.members import PartitionMembers
from korral.model.queue import ROOT
from korral.model.queue_spec import QueueSpec


def _kinds(message: Any) -> list[type]:
    """The types of the messages one delivery carries (a bundle's each, a periodic tick's own)."""
    if type(message) is Bundle:
        return [type(inner) for inner in message.messages]
    return [type(message.message if type(message) is Periodic else message)]


# messages that never change the queue tree (what a queue is, its limits, its applications): no new
# publication after them, nor after a query (PartitionQuery). Anything else may, and is followed by one.
TREE_UNCHANGED: frozenset[type] = frozenset(
    {
        PublishQueueTree,
        RetireTombstones,
        NodeReservations,
        AppBackoffs,
        RecoveredGone,
        RouteAllocationRequest,
        RouteNodeRequest,  # nodes change the root's max only (``_publish_root_max``)
        NodeChanged,
        StartNodeActors,
    }
)


@attrs.frozen(kw_only=True)
class PartitionSettings:
    scheduling_interval: float
    reservation_delay: float
    completing_timeout: float
    queue_cleanup_interval: float
    placeholder_timeout: float
    # the core's metrics (korral.server.metrics.CoreMetrics), fed by the actors; None: not measured
    metrics: Any = attrs.field(default=None, eq=False, repr=False)
    # how nodes' and applications' actors are made (the harness's broken subclasses; the warmup step)
    actors: ActorSetup = attrs.field(factory=ActorSetup, eq=False, repr=False)
    # korral.start(tune_gc=...): korral manages the collector, so a partition may also collect the young
    # generations after a node warmup (gc_tuning.promote_survivors)
    tune_gc: bool = attrs.field(default=False, eq=False, repr=False)


class PartitionActor(PartitionNodes, PartitionQueries, ServedActor):
    rank = Rank.PARTITION

    def __init__(
        self,
        tracker: Tracker,
        name: str,
        *,
        rm_id: str,
        config: PartitionConfig,
        callback: Any,
        callback_closed: threading.Event,
        dispatcher: Handle,
        timer: TimerService,
        settings: PartitionSettings,
        events: bool | Wanted = False,
        queue_board: QueueBoard | None = None,
    ) -> None:
        super().__init__(tracker, name)
        # the queue tree for readers that must not wait on this actor (QueueBoard)
        self.queue_board = queue_board if queue_board is not None else QueueBoard()
        # what runs on each node, as the scheduler's view publishes it (node snapshots read it)
        self.node_board = NodeBoard()
        self._tree_publish_queued = False
        self.events = events
        self._records: list[si.EventRecord] = []
        self.rm_id = rm_id
        self.dispatcher = dispatcher
        self.timer = timer
        self.settings = settings
        # each queue's actor, the one writer of its QueueSpec (configuration and state)
        self.queues: dict[str, Handle] = {}
        self.registry = UnscheduledPartition(
            name,
            config,
            rm_id=rm_id,
            clock=tracker.clocks.clock,
            uuid_token=tracker.clocks.unique_token(),
            placeholder_timeout=settings.placeholder_timeout,
            queue_specs=QueueActorSpecs(self.queues, self.rank),
        )
        self.metrics = settings.metrics
        # while a node request is handled: each node state's net change, published at its end
        self._node_metric_deltas: dict[str, int] | None = None
        # while a node request is handled: its new nodes, told to the scheduler as one NodesAdded
        self._nodes_added: list[NodeAdded] = []
        # new nodes whose actors have not started yet, started a step at a time (StartNodeActors)
        self._unstarted_nodes: list[LazyHandle] = []
        self._warmup_queued = False
        self._nodes_started_young = 0  # node actors started since the last promote_survivors
        # queues, applications and nodes of this partition share one pool (served by the owners' workers)
        self.pool = start_pool(tracker, name)
        self.scheduler = start_actor(
            settings.actors.scheduler_actor,
            tracker,
            f"{name}/scheduler",
            name,
            config,
            rm_id=rm_id,
            uuid_token=self.registry.uuid_token,
            reservation_delay=settings.reservation_delay,
            callback=callback,
            callback_closed=callback_closed,
            dispatcher=dispatcher,
            metrics=settings.metrics,
            partition=self.handle,
            timer=timer,
            board=self.queue_board,
            node_board=self.node_board,
            queues=self._queue_specs(),
        )
        # each application's actor, and what the partition holds of it (its spec, by reference)
        self.apps: dict[str, Handle] = {}
        self.members = PartitionMembers()
        self.nodes: dict[str, Handle] = {}
        self.completed: CompletedApplications[ApplicationInfo] = CompletedApplications()
        # node id -> (application id, allocation key) of each ask holding it, as the scheduler last told
        self.node_reservations: dict[str, tuple[tuple[str, str], ...]] = {}
        # application -> its backoff deadline (epoch seconds), as the scheduler last told
        self.app_backoffs: dict[str, float] = {}
        self.tombstones: list[Handle] = []
        # set while draining (a reload left the partition out): the RMProxy, told once it is empty
        self.drain_proxy: Handle | None = None
        self._drained_told = False
        # tells apart nodes of one id added, removed and added again (``NodeSpec.incarnation``)
        self._node_incarnations = itertools.count(1)
        self._first_configuration(self._sync_queue_actors(announce=False))
        self._publish_queue_tree()
        timer.every(settings.scheduling_interval, self.scheduler, Tick())
        timer.every(settings.queue_cleanup_interval, self.handle, CleanupQueues())
        timer.every(1.0, self.handle, RetireTombstones())

    # ---- helpers -----------------------------------------------------------------------------------

    def _first_configuration(self, configured: list[str]) -> None:
        """YuniKorn's records of a partition's first configuration: every configured queue added,
        every user and group limit set."""
        if self.events:
            self._records.extend(events.queue_configured(path) for path in configured)
            self._records.extend(events.limit_changes({}, events.limits_of(self.registry.config)))
            self._send_events()

    def _sync_queue_actors(self, *, announce: bool) -> list[str]:
        """Start a queue actor for every queue of the structure that has none (parents first); the
        paths of the queues started."""
        created: list[str] = []
        for path in sorted(self.registry.queues, key=lambda p: p.count(".")):
            if path in self.queues:
                continue
            created.append(path)
            queue = self.registry.queues[path]
            self.queues[path] = start_actor(
                QueueActor, self.tracker, f"{self.name}/{path}", queue.spec, pool=self.pool
            )
            if announce:
                self.scheduler.tell(QueueCreated(path=path, leaf=queue.is_leaf, spec=queue.spec))
                self._event(partial(events.queue_created, path))
        if created:
            self._publish_queue_limits()
        return created

    def _queue_specs(self) -> tuple[QueueSpec, ...]:
        """Every queue's spec, as its actor made it (parents first)."""
        return tuple(queue.spec for queue in self.registry.root.walk())

    def _publish_queue_limits(self) -> None:
        """Guaranteed, max and running applications' max of every queue as metrics, as YuniKorn
        publishes them: each queue's own configured max, not the one it inherits (the root's is the
        partition's capacity). They change with the structure; the root's max with the nodes too."""
        if self.metrics is None:
            return
        for path, queue in self.registry.queues.items():
            self.metrics.queue_resources(self.name, path, "guaranteed", res.prune(queue.guaranteed or {}))
            if queue.parent is not None:
                self.metrics.queue_resources(self.name, path, "max", dict(queue.max or {}))
            running = {"apps": queue.max_applications} if queue.max_applications else {}
            self.metrics.queue_resources(self.name, path, "maxRunningApps", running)
        self._publish_root_max()

    def _publish_root_max(self) -> None:
        """The root's max, the partition's capacity, on the board and as a metric: the one limit a node
        changes, published without a pass over the queues however many the partition has."""
        capacity = self.registry.capacity
        self.queue_board.capacity = dict(capacity)
        if self.metrics is not None:
            self.metrics.queue_resources(self.name, ROOT, "max", res.prune(capacity))

    def on_receive(self, message: Any) -> Any:
        try:
            return super().on_receive(message)
        finally:
            if self.drain_proxy is not None and not self.apps and not self._drained_told:
                self._drained_told = True
                self.drain_proxy.tell(PartitionDrained(rm_id=self.rm_id, name=self.name))
            if self.queue_board.capacity != self.registry.capacity:
                self._publish_root_max()
            # whatever may have changed the queue tree is published once its burst has been handled
            if not self._tree_publish_queued and any(
                kind not in TREE_UNCHANGED and not issubclass(kind, PartitionQuery)
                for kind in _kinds(message)
            ):
                self._tree_publish_queued = True
                self.kick(PublishQueueTree())

    def on_PublishQueueTree(self, message: PublishQueueTree) -> None:
        self._tree_publish_queued = False
        self._publish_queue_tree()

    def _publish_queue_tree(self) -> None:
        """Every queue's structure on the board, parents first (usage left empty: each queue publishes
        its own; the maxima a node changes left to the board, which applies the capacity when read)."""
        self.queue_board.structure = tuple(
            self._describe_queue(path, {}, {}, for_board=True)
            for path in sorted(self.registry.queues)
            if path in self.queues
        )

    def _deliver(self, argument: CallbackArgument) -> None:
        self.dispatcher.tell(Deliver(argument=argument))

    def _event(self, record: Callable[[], si.EventRecord]) -> None:
        if self.events:
            self._records.append(record())

    def _send_events(self) -> None:
        if self._records:
            deliver_events(self.tracker, self.dispatcher, self._records, self.dispatcher.tell)
            self._records = []

    def _reject_asks(self, asks: list[tuple[str, str, str]]) -> None:
        if asks:
            self._deliver(
                si.AllocationResponse(
                    rejected=[
                        si.RejectedAllocationAsk(allocation_key=key, application_id=app_id, reason=reason)
                        for key, app_id, reason in asks
                    ]
                ),
            )

    def _bury(self, handle: Handle | None) -> None:
        """The actor was removed: it stops itself once nothing can reach it (``RetiringActor``)."""
        if handle is not None:
            self.tombstones.append(handle)
            handle.tell(Retire())

    # ---- applications ------------------------------------------------------------------------------

    def on_RouteApplicationRequest(self, message: RouteApplicationRequest) -> None:
        accepted: list[si.AcceptedApplication] = []
        rejected: list[si.RejectedApplication] = []
        for add in message.request.new:
            try:
                if self.drain_proxy is not None:  # YuniKorn's words for a partition marked for deletion
                    raise ModelError(
                        f"partition {self.name} is stopped cannot add a new application {add.application_id}"
                    )
                spec = self.registry.apps.place_si_application(add, known=self.members)
            except ModelError as error:
                rejected.append(si.RejectedApplication(application_id=add.application_id, reason=str(error)))
                self._event(partial(events.app_rejected, add.application_id, str(error)))
                continue
            limit_group = self.registry.ugm.resolve_group(spec.queue_path, spec.groups) or ""
            self.members.add(spec, limit_group)
            self._sync_queue_actors(announce=True)
            self._start_application(spec, limit_group)
            accepted.append(si.AcceptedApplication(application_id=add.application_id))
            self._event(partial(events.app_state, spec.application_id, "New", spec.queue_path))
            if limit_group:  # tracked against a group's limits: YuniKorn's UG_APP_LINK
                self._event(partial(events.group_link, limit_group, spec.application_id, True))
        for remove in message.request.remove:
            handle = self.apps.pop(remove.application_id, None)
            self.app_backoffs.pop(remove.application_id, None)
            if handle is None:
                continue
            limit_group = self.members.limit_groups.get(remove.application_id, "")
            if limit_group:
                self._event(partial(events.group_link, limit_group, remove.application_id, False))
            self.members.remove(remove.application_id)
            self.queue_board.forget_app(remove.application_id, handle.actor_id)
            handle.tell(RemoveApplication(reason=f"application {remove.application_id} removed"))
            self._bury(handle)
        if accepted or rejected:
            self._deliver(si.ApplicationResponse(accepted=accepted, rejected=rejected))
        self._send_events()

    def _start_application(self, spec: AppSpec, limit_group: str) -> None:
        owned = owned_application(
            spec,
            limit_group=limit_group,
            submission_time=self.tracker.clocks.clock(),
            placeholder_timeout=self.settings.placeholder_timeout,
        )
        handle = start_actor(
            self.settings.actors.application_actor,
            self.tracker,
            f"{self.name}/app/{spec.application_id}",
            owned,
            scheduler=self.scheduler,
            partition=self.handle,
            dispatcher=self.dispatcher,
            timer=self.timer,
            completing_timeout=self.settings.completing_timeout,
            pool=self.pool,
            events=self.events,
            metrics=self.metrics,
            board=self.queue_board,
        )
        self.apps[spec.application_id] = handle
        self.completed.discard(spec.application_id)
        queue = self.registry.queues[spec.queue_path].spec
        self.scheduler.tell(AppAdded(spec=spec, app=handle, limit_group=limit_group, queue=queue))

    def on_NodeReservations(self, message: NodeReservations) -> None:
        for node_id, holders in message.reservations:
            if holders and node_id in self.nodes:
                self.node_reservations[node_id] = holders
            else:
                self.node_reservations.pop(node_id, None)

    def on_AppBackoffs(self, message: AppBackoffs) -> None:
        for application_id, deadline in message.deadlines:
            if application_id in self.apps:
                self.app_backoffs[application_id] = deadline

    def on_RecoveredGone(self, message: RecoveredGone) -> None:
        self.registry.forget_recovered(message.uuids)

    def on_AppFinished(self, message: AppFinished) -> None:
        handle = self.apps.pop(message.application_id, None)
        self.app_backoffs.pop(message.application_id, None)
        if handle is None:
            return
        self.members.remove(message.application_id)
        self.queue_board.forget_app(message.application_id, handle.actor_id)
        self.completed.add(message.application_id, message.info, self.tracker.clocks.clock())
        self._bury(handle)

    # ---- asks and releases -------------------------------------------------------------------------

    def on_RouteAllocationRequest(self, message: RouteAllocationRequest) -> None:
        request = message.request
        asks: dict[str, list[si.AllocationAsk]] = defaultdict(list)
        rejected: list[tuple[str, str, str]] = []
        for ask in request.asks:
            if ask.application_id in self.apps:
                asks[ask.application_id].append(ask)
            else:
                rejected.append(
                    (
                        ask.allocation_key,
                        ask.application_id,
                        f"failed to find application {ask.application_id}",
                    )
                )
        # one request spreads over many applications: their messages go out together, in this order
        outgoing: list[tuple[Handle, Any]] = [
            (self.apps[app_id], AddAsks(asks=tuple(app_asks), receipt=message.receipt))
            for app_id, app_asks in asks.items()
        ]
        self._reject_asks(rejected)
        releases = request.releases
        if releases is not None:
            for ask_release in releases.allocation_asks_to_release:
                handle = self.apps.get(ask_release.application_id)
                if handle is not None:
                    keys = (ask_release.allocation_key,) if ask_release.allocation_key else ()
                    outgoing.append((handle, RemoveAsks(allocation_keys=keys, receipt=message.receipt)))
            by_app: dict[str, list[si.AllocationRelease]] = defaultdict(list)
            for release in releases.allocations_to_release:
                if release.application_id in self.apps:
                    by_app[release.application_id].append(release)
            outgoing.extend(
                (self.apps[app_id], ReleaseAllocations(releases=tuple(app_releases), receipt=message.receipt))
                for app_id, app_releases in by_app.items()
            )
        tell_all(outgoing)

    # ---- configuration and housekeeping -----------------------------------------------------------

    def on_DrainPartition(self, message: DrainPartition) -> None:
        if self.drain_proxy is None:
            self.drain_proxy, self._drained_told = message.rm_proxy, False
            self._draining_metric(True)

    def _draining_metric(self, draining: bool) -> None:
        if self.metrics is not None:
            self.metrics.partition_draining(self.name, draining)

    def on_ApplyConfig(self, message: ApplyConfig) -> None:
        if self.drain_proxy is not None:  # in the configuration again: active
            self.drain_proxy = None
            self._draining_metric(False)
        before = self._queue_limits() if self.events else {}
        limits_before = events.limits_of(self.registry.config) if self.events else {}
        self.registry.apply_config(message.config, placement=message.placement)
        configured = self._sync_queue_actors(announce=False)
        self._publish_queue_limits()
        self._event(events.queue_config_updated)
        if self.events:
            self._records.extend(events.queue_configured(path) for path in configured)
        if self.events:
            self._records.extend(events.queue_changes(before, self._queue_limits()))
            self._records.extend(events.limit_changes(limits_before, events.limits_of(self.registry.config)))
        self._send_events()
        self.scheduler.tell(ApplyConfig(config=message.config, queues=self._queue_specs()))

    def _queue_limits(self) -> dict[str, tuple[Any, Any, bool]]:
        """Each queue's configured (max, guaranteed, is leaf): what a configuration update may change."""
        return {
            path: (dict(q.max or {}), dict(q.guaranteed or {}), q.is_leaf)
            for path, q in self.registry.queues.items()
        }

    def on_CleanupQueues(self, message: CleanupQueues) -> None:
        # the same periodic pass (YuniKorn's partition manager) lets terminated applications expire
        self.completed.expire(self.tracker.clocks.clock())
        removed = self.registry.cleanup_queues(occupied=self.members.occupied_queues())
        for path in removed:
            self._bury(self.queues.pop(path, None))
            self._event(partial(events.queue_removed, path))
        self._send_events()
        if removed:
            self.scheduler.tell(QueuesRemoved(paths=tuple(removed)))
            if self.metrics is not None:
                self.metrics.forget_queues(self.name, removed)

    def tick_is_idle(self, tick: Any) -> bool:
        """With no tombstone left, ``RetireTombstones`` has no one to ask again."""
        return type(tick) is RetireTombstones and not self.tombstones

    def on_RetireTombstones(self, message: RetireTombstones) -> None:
        # ask again those that could not stop yet (a message was still on its way to them)
        alive = [handle for handle in self.tombstones if handle.is_alive]
        for handle in alive:
            handle.tell(Retire())
        self.tombstones = alive

    def on_StopPartition(self, message: StopPartition) -> None:
        if self.drain_proxy is not None:
            self._draining_metric(False)
        for node in self.registry.nodes.values():
            self._node_metric(self._node_state(node.schedulable), None)
        for handle in [*self.apps.values(), *self.nodes.values(), *self.queues.values(), *self.tombstones]:
            handle.stop()
        # Not waited for: the scheduler may be inside the RM's predicates callback, and a stop never
        # waits on an RM. A decision still in progress finds every owner stopped (its Placed messages
        # are refused) and the RM's callbacks closed.
        self.scheduler.stop()
        self.pool.stop()
        if self.metrics is not None:  # after the pool: no queue publishes again
            self.metrics.forget_queues(self.name, list(self.registry.queues), with_apps=True)
        self.apps.clear()
        self.nodes.clear()
        self.queues.clear()
        self.tombstones.clear()
