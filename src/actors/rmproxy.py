"""The RMProxy actor: admits RMs, routes SI requests to partitions.

It routes every RM's requests, so nothing that costs in proportion to one RM's configuration runs on it:
the caller parses and validates a configuration (``load_config``, on its own thread), and the
``Registrar`` (korral.actors.registrar) starts and stops the RM's partitions (100,000 queues:
seconds). The registrar asks this actor to admit the RM (``Admit``: bounds checked, the RM's requests
held from then on), starts the partitions, and ``Install``s them here, where the held requests are
routed in order; meanwhile this actor goes on routing the other RMs' requests.
"""

from __future__ import annotations

import functools
import threading
from collections import defaultdict
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from korral import log_text, si
from korral.actors.base import Handle, Rank, ThreadedActor
from korral.actors.dispatcher import CallbackDispatcher
from korral.actors.messages import (
    ApplyConfig,
    Deliver,
    DrainPartition,
    PartitionDrained,
    RouteAllocationRequest,
    RouteApplicationRequest,
    RouteNodeRequest,
)
from korral.actors.partition.actor import PartitionSettings
from korral.actors.queue_board import QueueBoard
from korral.actors.registration import STOP_TIMEOUT, stop_and_wait, stop_partition
from korral.actors.rm_messages import (
    Admit,
    Admitted,
    Detach,
    FindPartitions,
    Install,
    Reconfigure,
    RMConnection,
    Route,
    StopAll,
    Withdraw,
)
from korral.actors.starting import start_actor
from korral.actors.tracker import Tracker
from korral.config.schema import PartitionConfig, SchedulerConfig
from korral.errors import CapacityError, SchedulerError
from korral.model.naming import normalize_partition_name
from korral.si.validate import Checked


@attrs.define
class RegisteredRM:
    """The RMProxy's own record of a registered RM (never sent: messages carry its ``connection``)."""

    connection: RMConnection
    config: SchedulerConfig
    partitions: dict[str, Handle] = attrs.Factory(dict)
    queue_boards: dict[str, QueueBoard] = attrs.Factory(dict)
    # while a registration is pending (its partitions being started by the registrar): its requests, held
    pending: list[Route] | None = None
    # the build information the RM registered with (YuniKorn's RMInfo.RMBuildInformation)
    build_info: Mapping[str, str] = attrs.Factory(dict)

    @property
    def rm_id(self) -> str:
        return self.connection.rm_id

    @property
    def dispatcher(self) -> Handle:
        return self.connection.dispatcher


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
        # the build information each registered RM gave, by rm_id
        self.build_infos: Mapping[str, Mapping[str, str]] = MappingProxyType({})


class RMProxyActor(ThreadedActor):
    rank = Rank.RM_PROXY

    def __init__(
        self,
        tracker: Tracker,
        name: str,
        settings: PartitionSettings,
        board: PartitionBoard | None = None,
        engine: Any = None,
        max_rms: int = 64,
        max_partitions: int = 256,
    ) -> None:
        super().__init__(tracker, name)
        self.max_rms = max_rms
        self.max_partitions = max_partitions
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
        self.board.build_infos = MappingProxyType({rm_id: rm.build_info for rm_id, rm in self.rms.items()})

    # ---- registration and configuration ------------------------------------------------------------

    def _past_bounds(self, rm_id: str, partitions: int) -> CapacityError | None:
        """Why ``rm_id`` running ``partitions`` partitions would take the core past its bounds, or None."""
        if rm_id not in self.rms and len(self.rms) >= self.max_rms:
            return CapacityError(
                f"RmID={log_text.escaped(rm_id)} refused: {self.max_rms} resource managers are registered, "
                "the most this core takes (max_rms)"
            )
        others = sum(len(rm.partitions) for other, rm in self.rms.items() if other != rm_id)
        if others + partitions > self.max_partitions:
            return CapacityError(
                f"RmID={log_text.escaped(rm_id)} refused: its {partitions} partitions and the {others} of "
                f"the other resource managers are more than the {self.max_partitions} this core runs "
                "(max_partitions)"
            )
        return None

    def on_Admit(self, message: Admit) -> Any:
        request = message.request
        if not request.rm_id:
            return SchedulerError("RegisterResourceManagerRequest needs an rm_id")
        if "[" in request.rm_id or "]" in request.rm_id:
            # partitions are named "[rmID]name": a bracket in the id would not round-trip
            return SchedulerError(f"rm_id {request.rm_id!r} must not contain '[' or ']'")
        config = message.config
        refusal = self._past_bounds(request.rm_id, len(config.partitions))
        if refusal is not None:
            return refusal
        retired: list[Handle] = []
        if request.rm_id in self.rms:
            # registered again: never published as unregistered meanwhile (Core reads the board)
            retired = self._detach_rm(request.rm_id, publish=False)
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
        connection = RMConnection(
            rm_id=request.rm_id, callback=message.callback, dispatcher=dispatcher, closed=closed
        )
        rm = RegisteredRM(
            connection=connection, config=config, build_info=MappingProxyType(dict(request.build_info))
        )
        rm.pending = []
        self.rms[request.rm_id] = rm
        self._publish()
        return Admitted(rm=connection, retired=tuple(retired), start=config.partitions)

    def on_Install(self, message: Install) -> Any:
        rm = self.rms.get(message.rm.rm_id)
        if rm is None or rm.connection is not message.rm or rm.pending is None:
            return SchedulerError(
                f"registration of RmID={message.rm.rm_id!r} ended before its partitions were installed "
                "(registered again meanwhile, or the core stopped)"
            )
        rm.partitions.update(message.partitions)
        rm.queue_boards.update(message.queue_boards)
        held, rm.pending = rm.pending, None
        self._publish()
        for route in held:
            self.on_Route(route)
        return si.RegisterResourceManagerResponse()

    def on_Withdraw(self, message: Withdraw) -> None:
        rm = self.rms.get(message.rm.rm_id)
        if rm is not None and rm.connection is message.rm:
            self._remove_rm(rm.rm_id)

    def on_Detach(self, message: Detach) -> Any:
        rm = self.rms.get(message.rm_id)
        if rm is None:
            return SchedulerError(f'RmID="{log_text.escaped(message.rm_id)}" not registered')
        if rm.pending is not None:
            return SchedulerError(f'RmID="{message.rm_id}" is still registering or reloading: leave after')
        return tuple(self._detach_rm(message.rm_id))

    def _stop_partition(self, handle: Handle) -> None:
        stop_partition(handle, Rank.RM_PROXY, ray=self.engine is not None)

    def _remove_rm(self, rm_id: str, *, publish: bool = True) -> None:
        dispatcher = self.rms[rm_id].dispatcher
        for handle in self._detach_rm(rm_id, forget=False, publish=publish):
            self._stop_partition(handle)
        self.tracker.forget(dispatcher.actor_id)

    def _detach_rm(self, rm_id: str, *, forget: bool = True, publish: bool = True) -> list[Handle]:
        """Take the RM out of routing and close its callbacks; return its partitions, still to stop."""
        rm = self.rms.pop(rm_id)
        if publish:
            self._publish()
        # Close the RM's callbacks first and never wait for them: a slow RM must not hold up the other
        # RMs' requests (this actor routes them all) nor a stop. A callback running right now finishes;
        # nothing queued or produced later reaches this callback object.
        rm.connection.closed.set()
        rm.dispatcher.stop()
        # What is still queued for the closed dispatcher will be dropped, never delivered: it must not
        # keep the core from being idle while a callback blocks the dispatcher's thread.
        if forget:
            self.tracker.forget(rm.dispatcher.actor_id)
        return list(rm.partitions.values())

    def on_Reconfigure(self, message: Reconfigure) -> Any:
        request = message.request
        rm = self.rms.get(request.rm_id)
        if rm is None:
            return SchedulerError(
                f'received UpdateConfigurationRequest, but RmID="{request.rm_id}" not registered'
            )
        if rm.pending is not None:
            return SchedulerError(
                f'RmID="{request.rm_id}" is still registering or reloading: update its configuration '
                "once that has returned"
            )
        config, placements = message.config, message.placements
        if config.checksum == rm.config.checksum:
            return None
        refusal = self._past_bounds(rm.rm_id, len(config.partitions))
        if refusal is not None:
            return refusal
        wanted = {normalize_partition_name(p.name, rm.rm_id): p for p in config.partitions}
        retired: list[Handle] = []
        for name, leaving in list(rm.partitions.items()):
            if name in wanted:
                continue
            if self.engine is None:  # it drains, and goes once empty (on_PartitionDrained)
                leaving.tell(DrainPartition(rm_proxy=self.handle))
            else:  # engine="ray": a partition process cannot report back here; it goes at once
                retired.append(leaving)
                del rm.partitions[name]
                rm.queue_boards.pop(name, None)
        start: list[PartitionConfig] = []
        for name, partition_config in wanted.items():
            handle = rm.partitions.get(name)
            if handle is None:
                start.append(partition_config)
            else:
                # Told, not asked: validated above, it cannot fail, and the partition applies it in
                # order with the requests before it. An ask could time out behind a long backlog and
                # leave the reload half done (partitions changed, rm.config not).
                handle.tell(ApplyConfig(config=partition_config, placement=placements[name]))
        rm.config = config
        self._publish()
        if retired or start:
            # the registrar stops and starts them; the RM's requests wait for the partitions they name
            rm.pending = [] if start else None
            return Admitted(rm=rm.connection, retired=tuple(retired), start=tuple(start), update=True)
        return None

    def on_PartitionDrained(self, message: PartitionDrained) -> None:
        rm = self.rms.get(message.rm_id)
        if rm is None or any(
            normalize_partition_name(p.name, rm.rm_id) == message.name for p in rm.config.partitions
        ):
            return  # the RM left (its partitions stopped with it), or a reload took the partition back
        handle = rm.partitions.pop(message.name, None)
        rm.queue_boards.pop(message.name, None)
        if handle is not None:
            self._stop_partition(handle)
            self._publish()

    # ---- routing -----------------------------------------------------------------------------------

    def on_Route(self, message: Route) -> None:
        request = message.request
        rm = self.rms.get(request.rm_id)
        if rm is None:
            return
        if rm.pending is not None:
            rm.pending.append(message)  # routed in order once its partitions are installed
            return
        checked = message.checked
        if checked is not None:
            self._reject_bad_items(rm, checked)
            if checked.empty:
                return
        if isinstance(request, si.NodeRequest):
            self._route_nodes(rm, request, message.receipt)
        elif isinstance(request, si.ApplicationRequest):
            self._route_applications(rm, request, message.receipt)
        elif isinstance(request, si.AllocationRequest):
            self._route_allocations(rm, request, message.receipt)

    def _reject_bad_items(self, rm: RegisteredRM, checked: Checked) -> None:
        if checked.node_rejections:
            rm.dispatcher.tell(Deliver(argument=si.NodeResponse(rejected=checked.node_rejections)))
        if checked.application_rejections:
            rm.dispatcher.tell(
                Deliver(argument=si.ApplicationResponse(rejected=checked.application_rejections))
            )
        if checked.ask_rejections:
            rm.dispatcher.tell(Deliver(argument=si.AllocationResponse(rejected=checked.ask_rejections)))

    def _partition(self, rm: RegisteredRM, name: str) -> tuple[str, Handle | None]:
        normalized = normalize_partition_name(name, rm.rm_id)
        return normalized, rm.partitions.get(normalized)

    def _route_nodes(self, rm: RegisteredRM, request: si.NodeRequest, receipt: object) -> None:
        groups: dict[str, list[si.NodeInfo]] = defaultdict(list)
        rejected: list[si.RejectedNode] = []
        for node in request.nodes:
            name, handle = self._partition(rm, node.attributes.get(si.NODE_PARTITION, ""))
            if handle is None:
                rejected.append(si.RejectedNode(node_id=node.node_id, reason=f"partition {name} not found"))
            else:
                groups[name].append(node)
        for name, nodes in groups.items():
            routed = si.NodeRequest(nodes=nodes, rm_id=rm.rm_id)
            rm.partitions[name].tell(RouteNodeRequest(request=routed, receipt=receipt))
        if rejected:
            rm.dispatcher.tell(Deliver(argument=si.NodeResponse(rejected=rejected)))

    def _route_applications(self, rm: RegisteredRM, request: si.ApplicationRequest, receipt: object) -> None:
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
                    ),
                    receipt=receipt,
                )
            )
        if rejected:
            rm.dispatcher.tell(Deliver(argument=si.ApplicationResponse(rejected=rejected)))

    def _route_allocations(self, rm: RegisteredRM, request: si.AllocationRequest, receipt: object) -> None:
        asks: dict[str, list[si.AllocationAsk]] = defaultdict(list)
        ask_releases: dict[str, list[si.AllocationAskRelease]] = defaultdict(list)
        releases: dict[str, list[si.AllocationRelease]] = defaultdict(list)
        rejected: list[si.RejectedAllocationAsk] = []
        # a request's asks name one partition or a few: each name is resolved once per request
        resolved: dict[str, tuple[str, Handle | None]] = {}
        for ask in request.asks:
            found = resolved.get(ask.partition_name)
            if found is None:
                found = resolved[ask.partition_name] = self._partition(rm, ask.partition_name)
            name, handle = found
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
            rm.partitions[name].tell(RouteAllocationRequest(request=routed, receipt=receipt))
        if rejected:
            rm.dispatcher.tell(Deliver(argument=si.AllocationResponse(rejected=rejected)))

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
    "Admit",
    "Admitted",
    "Detach",
    "FindPartitions",
    "Install",
    "PartitionBoard",
    "RMProxyActor",
    "Reconfigure",
    "RegisteredRM",
    "Route",
    "StopAll",
    "Withdraw",
    "stop_and_wait",
]
