"""The RMProxy actor: registers RMs, validates configuration, routes SI requests to partitions."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import defaultdict
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from korral import si
from korral.actors.base import Handle, Rank, ThreadedActor, Tracker, start_actor
from korral.actors.dispatcher import CallbackDispatcher
from korral.actors.messages import (
    ApplyConfig,
    Deliver,
    RouteAllocationRequest,
    RouteApplicationRequest,
    RouteNodeRequest,
    StopPartition,
)
from korral.actors.partition import PartitionActor, PartitionSettings
from korral.actors.queue_board import QueueBoard
from korral.actors.timer import TimerService
from korral.callback import ResourceManagerCallback
from korral.config import load_config
from korral.config.schema import SchedulerConfig
from korral.errors import ConfigError, KorralError, SchedulerError
from korral.model.naming import normalize_partition_name
from korral.policies.placement import PlacementManager, PlacementRuleError
from korral.si.validate import Checked

STOP_TIMEOUT = 5.0


def stop_and_wait(handle: Handle, timeout: float = STOP_TIMEOUT) -> None:
    """Stop an actor and wait (bounded) until it has stopped: a stopped core leaves nothing running."""
    with contextlib.suppress(Exception):
        if handle.is_alive:
            handle.ref.stop(block=True, timeout=timeout)


@attrs.frozen(slots=True)
class Register:
    request: si.RegisterResourceManagerRequest
    callback: ResourceManagerCallback


@attrs.frozen(slots=True)
class UpdateConfiguration:
    request: si.UpdateConfigurationRequest


@attrs.frozen(slots=True)
class Route:
    """Core -> proxy: a request checked at the door; ``checked`` holds the rejections of its bad items."""

    request: si.AllocationRequest | si.ApplicationRequest | si.NodeRequest
    checked: Checked | None = None


@attrs.frozen(slots=True)
class FindPartitions:
    """Core -> proxy: the partitions' handles (all, or one by name)."""

    name: str = ""


@attrs.frozen(slots=True)
class StopAll:
    pass


@attrs.define
class RegisteredRM:
    rm_id: str
    callback: Any
    dispatcher: Handle
    config: SchedulerConfig
    # set when the registration ends: from then on nothing calls this RM's callback object again
    closed: threading.Event
    partitions: dict[str, Handle] = attrs.Factory(dict)
    queue_boards: dict[str, QueueBoard] = attrs.Factory(dict)


class PartitionBoard:
    """The partitions as the RMProxy last published them: a new read-only mapping after every change.

    For readers that need no ordering with the requests still on their way through the RMProxy (the
    REST API): they find a partition without a round trip through this actor's mailbox."""

    def __init__(self) -> None:
        self.handles: Mapping[str, Handle] = MappingProxyType({})
        # each partition's queue tree as its actors publish it (partitions in this process only)
        self.queue_boards: Mapping[str, QueueBoard] = MappingProxyType({})
        # the configuration each registered RM runs, by rm_id
        self.configs: Mapping[str, SchedulerConfig] = MappingProxyType({})


class RMProxyActor(ThreadedActor):
    rank = Rank.RM_PROXY

    def __init__(
        self,
        tracker: Tracker,
        name: str,
        timer: TimerService,
        settings: PartitionSettings,
        board: PartitionBoard | None = None,
        engine: Any = None,
    ) -> None:
        super().__init__(tracker, name)
        self.timer = timer
        self.settings = settings
        # engine="ray": a ``RayEngine`` that starts each partition in a Ray actor process (None: threads)
        self.engine = engine
        self.rms: dict[str, RegisteredRM] = {}
        self.board = board if board is not None else PartitionBoard()

    def _publish(self) -> None:
        self.board.handles = MappingProxyType(
            {name: handle for rm in self.rms.values() for name, handle in rm.partitions.items()}
        )
        self.board.queue_boards = MappingProxyType(
            {name: board for rm in self.rms.values() for name, board in rm.queue_boards.items()}
        )
        self.board.configs = MappingProxyType({rm_id: rm.config for rm_id, rm in self.rms.items()})

    # ---- registration and configuration ------------------------------------------------------------

    def on_Register(self, message: Register) -> Any:
        request = message.request
        if not request.rm_id:
            return SchedulerError("RegisterResourceManagerRequest needs an rm_id")
        if "[" in request.rm_id or "]" in request.rm_id:
            # partitions are named "[rmID]name": a bracket in the id would not round-trip
            return SchedulerError(f"rm_id {request.rm_id!r} must not contain '[' or ']'")
        try:
            config = load_config(request.config)
        except ConfigError as error:
            return error
        if request.rm_id in self.rms:
            self._remove_rm(request.rm_id)
        closed = threading.Event()
        metrics = self.settings.metrics
        dispatcher = start_actor(
            CallbackDispatcher,
            self.tracker,
            f"[{request.rm_id}]callbacks",
            message.callback,
            closed,
            observer=functools.partial(metrics.delivered, request.rm_id) if metrics is not None else None,
        )
        rm = RegisteredRM(
            rm_id=request.rm_id,
            callback=message.callback,
            dispatcher=dispatcher,
            config=config,
            closed=closed,
        )
        for partition_config in config.partitions:
            self._start_partition(rm, partition_config)
        self.rms[request.rm_id] = rm
        self._publish()
        return si.RegisterResourceManagerResponse()

    def _start_partition(self, rm: RegisteredRM, partition_config: Any) -> None:
        name = normalize_partition_name(partition_config.name, rm.rm_id)
        if self.engine is not None:
            rm.partitions[name] = self.engine.start_partition(
                name,
                rm_id=rm.rm_id,
                config=partition_config,
                settings=self.settings,
                callback=rm.callback,
                closed=rm.closed,
                dispatcher=rm.dispatcher,
            )
            return
        queue_board = rm.queue_boards[name] = QueueBoard()
        rm.partitions[name] = start_actor(
            PartitionActor,
            self.tracker,
            name,
            rm_id=rm.rm_id,
            config=partition_config,
            callback=rm.callback,
            callback_closed=rm.closed,
            dispatcher=rm.dispatcher,
            timer=self.timer,
            settings=self.settings,
            events=type(rm.callback).send_event is not ResourceManagerCallback.send_event,
            queue_board=queue_board,
        )

    def _stop_partition(self, handle: Handle) -> None:
        if self.engine is not None:
            handle.stop(timeout=STOP_TIMEOUT)  # type: ignore[call-arg]  # a RayPartition: stops its host
            return
        # a partition that cannot answer is stopped all the same
        with contextlib.suppress(Exception):
            self.ask(handle, StopPartition())
        stop_and_wait(handle)

    def _remove_rm(self, rm_id: str) -> None:
        rm = self.rms.pop(rm_id)
        self._publish()
        # Close the RM's callbacks first and never wait for them: a slow RM must not hold up the other
        # RMs' requests (this actor routes them all) nor a stop. A callback running right now finishes;
        # nothing queued or produced later reaches this callback object.
        rm.closed.set()
        rm.dispatcher.stop()
        for handle in rm.partitions.values():
            self._stop_partition(handle)
        # What is still queued for the closed dispatcher will be dropped, never delivered: it must not
        # keep the core from being idle while a callback blocks the dispatcher's thread.
        self.tracker.forget(rm.dispatcher.actor_id)

    def on_UpdateConfiguration(self, message: UpdateConfiguration) -> Any:
        request = message.request
        rm = self.rms.get(request.rm_id)
        if rm is None:
            return SchedulerError(
                f'received UpdateConfigurationRequest, but RmID="{request.rm_id}" not registered'
            )
        try:
            config = load_config(request.config)
        except ConfigError as error:
            return error
        if config.checksum == rm.config.checksum:
            return None
        # Everything that could still fail is checked before anything changes.
        placements: dict[str, PlacementManager] = {}
        for partition_config in config.partitions:
            try:
                placements[normalize_partition_name(partition_config.name, rm.rm_id)] = (
                    PlacementManager.build(partition_config.placement_rules)
                )
            except PlacementRuleError as error:
                return ConfigError(f"partition {partition_config.name}: placement rules rejected: {error}")
        wanted = {normalize_partition_name(p.name, rm.rm_id): p for p in config.partitions}
        for name, stopping in list(rm.partitions.items()):
            if name not in wanted:
                self._stop_partition(stopping)
                del rm.partitions[name]
                rm.queue_boards.pop(name, None)
        for name, partition_config in wanted.items():
            handle = rm.partitions.get(name)
            if handle is None:
                self._start_partition(rm, partition_config)
            else:
                # Told, not asked: validated above, it cannot fail, and the partition applies it in
                # order with the requests before it. An ask could time out behind a long backlog and
                # leave the reload half done (partitions changed, rm.config not).
                handle.tell(ApplyConfig(config=partition_config, placement=placements[name]))
        rm.config = config
        self._publish()
        return None

    # ---- routing -----------------------------------------------------------------------------------

    def on_Route(self, message: Route) -> None:
        request = message.request
        rm = self.rms.get(request.rm_id)
        if rm is None:
            return
        checked = message.checked
        if checked is not None:
            self._reject_bad_items(rm, checked)
            if checked.empty:
                return
        if isinstance(request, si.NodeRequest):
            self._route_nodes(rm, request)
        elif isinstance(request, si.ApplicationRequest):
            self._route_applications(rm, request)
        elif isinstance(request, si.AllocationRequest):
            self._route_allocations(rm, request)

    def _reject_bad_items(self, rm: RegisteredRM, checked: Checked) -> None:
        if checked.node_rejections:
            rm.dispatcher.tell(
                Deliver(method="update_node", argument=si.NodeResponse(rejected=checked.node_rejections))
            )
        if checked.application_rejections:
            rm.dispatcher.tell(
                Deliver(
                    method="update_application",
                    argument=si.ApplicationResponse(rejected=checked.application_rejections),
                )
            )
        if checked.ask_rejections:
            rm.dispatcher.tell(
                Deliver(
                    method="update_allocation",
                    argument=si.AllocationResponse(rejected=checked.ask_rejections),
                )
            )

    def _partition(self, rm: RegisteredRM, name: str) -> tuple[str, Handle | None]:
        normalized = normalize_partition_name(name, rm.rm_id)
        return normalized, rm.partitions.get(normalized)

    def _route_nodes(self, rm: RegisteredRM, request: si.NodeRequest) -> None:
        groups: dict[str, list[si.NodeInfo]] = defaultdict(list)
        rejected: list[si.RejectedNode] = []
        for node in request.nodes:
            name, handle = self._partition(rm, node.attributes.get(si.NODE_PARTITION, ""))
            if handle is None:
                rejected.append(si.RejectedNode(node_id=node.node_id, reason=f"partition {name} not found"))
            else:
                groups[name].append(node)
        for name, nodes in groups.items():
            rm.partitions[name].tell(RouteNodeRequest(request=si.NodeRequest(nodes=nodes, rm_id=rm.rm_id)))
        if rejected:
            rm.dispatcher.tell(Deliver(method="update_node", argument=si.NodeResponse(rejected=rejected)))

    def _route_applications(self, rm: RegisteredRM, request: si.ApplicationRequest) -> None:
        new: dict[str, list[si.AddApplicationRequest]] = defaultdict(list)
        remove: dict[str, list[si.RemoveApplicationRequest]] = defaultdict(list)
        rejected: list[si.RejectedApplication] = []
        for add in request.new:
            name, handle = self._partition(rm, add.partition_name)
            if handle is None:
                rejected.append(
                    si.RejectedApplication(
                        application_id=add.application_id, reason=f"partition {name} not found"
                    )
                )
            else:
                new[name].append(add)
        for removal in request.remove:
            name, handle = self._partition(rm, removal.partition_name)
            if handle is not None:
                remove[name].append(removal)
        for name in {**new, **remove}:  # a dict: the same order on every run
            rm.partitions[name].tell(
                RouteApplicationRequest(
                    request=si.ApplicationRequest(
                        new=new.get(name, ()), remove=remove.get(name, ()), rm_id=rm.rm_id
                    )
                )
            )
        if rejected:
            rm.dispatcher.tell(
                Deliver(method="update_application", argument=si.ApplicationResponse(rejected=rejected))
            )

    def _route_allocations(self, rm: RegisteredRM, request: si.AllocationRequest) -> None:
        asks: dict[str, list[si.AllocationAsk]] = defaultdict(list)
        ask_releases: dict[str, list[si.AllocationAskRelease]] = defaultdict(list)
        releases: dict[str, list[si.AllocationRelease]] = defaultdict(list)
        rejected: list[si.RejectedAllocationAsk] = []
        for ask in request.asks:
            name, handle = self._partition(rm, ask.partition_name)
            if handle is None:
                rejected.append(
                    si.RejectedAllocationAsk(
                        allocation_key=ask.allocation_key,
                        application_id=ask.application_id,
                        reason=f"partition {name} not found",
                    )
                )
            else:
                asks[name].append(ask)
        if request.releases is not None:
            for ask_release in request.releases.allocation_asks_to_release:
                name, handle = self._partition(rm, ask_release.partition_name)
                if handle is not None:
                    ask_releases[name].append(ask_release)
            for release in request.releases.allocations_to_release:
                name, handle = self._partition(rm, release.partition_name)
                if handle is not None:
                    releases[name].append(release)
        for name in {**asks, **ask_releases, **releases}:
            routed = si.AllocationRequest(
                asks=asks.get(name, ()),
                rm_id=rm.rm_id,
                releases=si.AllocationReleasesRequest(
                    allocations_to_release=releases.get(name, ()),
                    allocation_asks_to_release=ask_releases.get(name, ()),
                ),
            )
            rm.partitions[name].tell(RouteAllocationRequest(request=routed))
        if rejected:
            rm.dispatcher.tell(
                Deliver(method="update_allocation", argument=si.AllocationResponse(rejected=rejected))
            )

    # ---- lookups and shutdown ----------------------------------------------------------------------

    def on_FindPartitions(self, message: FindPartitions) -> dict[str, Handle]:
        found: dict[str, Handle] = {}
        for rm in self.rms.values():
            for name, handle in rm.partitions.items():
                if not message.name or name == message.name:
                    found[name] = handle
        return found

    def on_StopAll(self, message: StopAll) -> None:
        for rm_id in list(self.rms):
            self._remove_rm(rm_id)


__all__ = [
    "STOP_TIMEOUT",
    "FindPartitions",
    "KorralError",
    "PartitionBoard",
    "RMProxyActor",
    "Register",
    "Route",
    "StopAll",
    "UpdateConfiguration",
    "stop_and_wait",
]
