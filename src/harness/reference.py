"""The sequential reference scheduler: the model and policies driven by plain calls in one thread.

It takes the same SI requests as ``korral.Core`` and answers with the same SI responses, but
synchronously and with no actors. It is the oracle for the actor system's tests (same input, same
allocations per queue and application) and the baseline its benchmarks measure overhead against.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from itertools import groupby
from operator import attrgetter

from korral import si
from korral.config import load_config
from korral.config.schema import SchedulerConfig
from korral.model.allocation import Allocation
from korral.model.naming import normalize_partition_name, partition_without_rm
from korral.model.node import removal_reason
from korral.model.partition.composed import ModelError, PartitionModel, Predicate
from korral.model.si_convert import (
    from_si_allocation,
    to_si_allocation,
    to_si_allocations,
    to_si_release,
)


class ReferenceScheduler:
    """One RM's partitions, scheduled sequentially. Responses are returned, not called back."""

    def __init__(
        self,
        config_text: str = "",
        *,
        rm_id: str = "rm",
        reservation_delay: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        predicate: Predicate | None = None,
        placeholder_timeout: float = 900.0,
    ) -> None:
        self.rm_id = rm_id
        # releases (application removal, the core's own) and asks the core removed that no answer has
        # reported yet: ``take_released`` reports them
        self._released: list[si.AllocationRelease] = []
        self._released_asks: list[si.AllocationAskRelease] = []
        self.config: SchedulerConfig = load_config(config_text)
        self.partitions: dict[str, PartitionModel] = {}
        for partition_config in self.config.partitions:
            name = normalize_partition_name(partition_config.name, rm_id)
            self.partitions[name] = PartitionModel(
                name,
                partition_config,
                rm_id=rm_id,
                reservation_delay=reservation_delay,
                clock=clock,
                predicate=predicate,
                placeholder_timeout=placeholder_timeout,
            )

    def partition(self, name: str = "") -> PartitionModel | None:
        return self.partitions.get(normalize_partition_name(name, self.rm_id))

    def update_configuration(self, config_text: str) -> None:
        """A new queues.yaml for the partitions there are (as the core's reload, which validates it
        first: a ConfigError leaves everything as it was). Partitions added or removed by the new
        config are not created or stopped here."""
        config = load_config(config_text)
        for partition_config in config.partitions:
            partition = self.partitions.get(normalize_partition_name(partition_config.name, self.rm_id))
            if partition is not None:
                partition.apply_config(partition_config)
        self.config = config

    # ---- SI requests -------------------------------------------------------------------------------

    def update_node(self, request: si.NodeRequest) -> tuple[si.NodeResponse, si.AllocationResponse]:
        accepted: list[si.AcceptedNode] = []
        rejected: list[si.RejectedNode] = []
        new: list[si.Allocation] = []
        released: list[si.AllocationRelease] = []
        refused: list[si.RejectedAllocationAsk] = []
        for info in request.nodes:
            partition = self.partition(info.attributes.get(si.NODE_PARTITION, ""))
            if partition is None:
                rejected.append(si.RejectedNode(node_id=info.node_id, reason="partition not found"))
                continue
            try:
                if info.action in (si.NodeAction.CREATE, si.NodeAction.CREATE_DRAIN):
                    partition.add_node(
                        info.node_id,
                        info.schedulable_resource,
                        occupied=info.occupied_resource,
                        attributes=info.attributes,
                        schedulable=info.action == si.NodeAction.CREATE,
                    )
                    accepted.append(si.AcceptedNode(node_id=info.node_id))
                    for existing in info.existing_allocations:
                        try:
                            recovered = partition.recover_allocation(
                                from_si_allocation(existing, partition.name).replace(node_id=info.node_id)
                            )
                            new.append(to_si_allocation(recovered))
                        except ModelError as error:
                            # the RM believes this runs: tell it the core does not track it
                            refused.append(
                                si.RejectedAllocationAsk(
                                    allocation_key=existing.allocation_key,
                                    application_id=existing.application_id,
                                    reason=str(error),
                                )
                            )
                elif info.action == si.NodeAction.UPDATE:
                    partition.update_node(
                        info.node_id,
                        capacity=info.schedulable_resource or None,
                        occupied=info.occupied_resource or None,
                        attributes=info.attributes or None,
                    )
                elif info.action == si.NodeAction.DRAIN_NODE:
                    partition.set_node_schedulable(info.node_id, False)
                elif info.action == si.NodeAction.DRAIN_TO_SCHEDULABLE:
                    partition.set_node_schedulable(info.node_id, True)
                elif info.action == si.NodeAction.DECOMISSION:
                    for allocation in partition.remove_node(info.node_id):
                        released.append(
                            to_si_release(
                                allocation, si.TerminationType.STOPPED_BY_RM, removal_reason(info.node_id)
                            )
                        )
                else:
                    raise ModelError(f"unknown node action {int(info.action)}")
            except ModelError as error:
                rejected.append(si.RejectedNode(node_id=info.node_id, reason=str(error)))
        return (
            si.NodeResponse(accepted=accepted, rejected=rejected),
            si.AllocationResponse(new=new, released=released, rejected=refused),
        )

    def update_application(self, request: si.ApplicationRequest) -> si.ApplicationResponse:
        accepted: list[si.AcceptedApplication] = []
        rejected: list[si.RejectedApplication] = []
        for add in request.new:
            partition = self.partition(add.partition_name)
            if partition is None:
                rejected.append(
                    si.RejectedApplication(
                        application_id=add.application_id, reason=f"partition {add.partition_name} not found"
                    )
                )
                continue
            try:
                partition.add_si_application(add)
                accepted.append(si.AcceptedApplication(application_id=add.application_id))
            except ModelError as error:
                rejected.append(si.RejectedApplication(application_id=add.application_id, reason=str(error)))
        for remove in request.remove:
            partition = self.partition(remove.partition_name)
            if partition is not None and remove.application_id in partition.applications:
                for allocation in partition.remove_application(remove.application_id):
                    self._released.append(
                        to_si_release(allocation, si.TerminationType.STOPPED_BY_RM, "application removed")
                    )
        return si.ApplicationResponse(accepted=accepted, rejected=rejected)

    def take_released(self) -> si.AllocationResponse:
        """The releases carried out since the last call that no other answer reported.

        Removing an application releases its allocations; ``update_application`` answers with an
        ``ApplicationResponse``, which has no room for them, so they wait here (Core sends them in an
        ``AllocationResponse`` through the RM callback).
        """
        new: list[si.Allocation] = []
        for partition in self.partitions.values():
            new.extend(self._take_core_outputs(partition))
        released, self._released = self._released, []
        released_asks, self._released_asks = self._released_asks, []
        return si.AllocationResponse(new=new, released=released, released_asks=released_asks)

    def _take_core_outputs(self, partition: PartitionModel) -> list[si.Allocation]:
        """What the core did on its own since the partition's effects were last taken: releases it
        made (placeholders replaced, timeouts) and asks it removed (timeouts) wait in ``_released`` and
        ``_released_asks`` for ``take_released``; the real allocations swapped in for placeholders
        (the RM's confirmation made them) are returned, for the answer to that confirmation."""
        # only these are the RM's business (request events, reservations, wake-ups: none)
        effects = partition.take_effects()
        self._released.extend(
            to_si_release(r.allocation, r.termination, r.message) for r in effects.core_releases
        )
        self._released_asks.extend(
            si.AllocationAskRelease(
                partition_name=partition_without_rm(partition.name),
                application_id=r.application_id,
                allocation_key=r.allocation_key,
                termination_type=si.TerminationType.TIMEOUT,
                message=r.message,
            )
            for r in effects.released_asks
        )
        return [to_si_allocation(a) for a in effects.swapped_in]

    def expire_timeouts(self) -> si.AllocationResponse:
        """Apply the timeouts due at the clock's now; returns what the RM is told (and the rest of
        ``take_released``)."""
        for partition in self.partitions.values():
            partition.expire_timeouts()
        return self.take_released()

    def update_allocation(self, request: si.AllocationRequest) -> si.AllocationResponse:
        rejected: list[si.RejectedAllocationAsk] = []
        released: list[si.AllocationRelease] = []
        # consecutive asks of one partition go in as one batch (one re-key per application)
        run: list[si.AllocationAsk] = []
        run_partition: PartitionModel | None = None
        run_name: str | None = None
        for ask in [*request.asks, None]:
            if ask is not None and run_partition is not None and ask.partition_name == run_name:
                run.append(ask)
                continue
            if run_partition is not None and run:
                for refused, reason in run_partition.add_si_asks(run):
                    rejected.append(
                        si.RejectedAllocationAsk(
                            allocation_key=refused.allocation_key,
                            application_id=refused.application_id,
                            reason=reason,
                        )
                    )
            if ask is None:
                break
            run, run_name = [ask], ask.partition_name
            run_partition = self.partition(ask.partition_name)
            if run_partition is None:
                run = []
                rejected.append(
                    si.RejectedAllocationAsk(
                        allocation_key=ask.allocation_key,
                        application_id=ask.application_id,
                        reason=f"partition {ask.partition_name} not found",
                    )
                )
        releases = request.releases or si.AllocationReleasesRequest()
        for ask_release in releases.allocation_asks_to_release:
            partition = self.partition(ask_release.partition_name)
            app = partition.applications.get(ask_release.application_id) if partition else None
            if partition is None or app is None:
                continue
            keys = [ask_release.allocation_key] if ask_release.allocation_key else list(app.asks)
            for key in keys:
                partition.remove_ask(ask_release.application_id, key)
        for release in releases.allocations_to_release:
            partition = self.partition(release.partition_name)
            if partition is None:
                continue
            for allocation in partition.release_allocations(
                release.application_id,
                uuid=release.uuid,
                allocation_key=release.allocation_key,
                termination=release.termination_type or si.TerminationType.STOPPED_BY_RM,
            ):
                released.append(
                    to_si_release(
                        allocation,
                        release.termination_type or si.TerminationType.STOPPED_BY_RM,
                        release.message,
                    )
                )
        swapped: list[si.Allocation] = []
        for partition in self.partitions.values():
            swapped.extend(self._take_core_outputs(partition))
        return si.AllocationResponse(new=swapped, rejected=rejected, released=released)

    # ---- scheduling --------------------------------------------------------------------------------

    def schedule(self, limit: int | None = None) -> list[Allocation]:
        """Run cycles in every partition until nothing more fits; returns the new allocations.

        A gang replacement is returned too (its ``replaces`` names the placeholder): the real
        allocation is made once the RM confirms the placeholder's release (``take_released`` has it).
        """
        made: list[Allocation] = []
        for partition in self.partitions.values():
            made.extend(partition.schedule(limit))
        return made

    def allocation_response(self, made: Sequence[Allocation]) -> si.AllocationResponse:
        """What the RM receives for allocations ``schedule`` made: one response, each allocation
        converted as the core converts it for its RM callback (its partition by the RM's name). A gang
        replacement is not in it: the RM hears of the placeholder's release instead (``take_released``)."""
        new: list[si.Allocation] = []
        reported = [allocation for allocation in made if not allocation.replaces]
        for partition, allocations in groupby(reported, _PARTITION_OF):  # ``schedule`` keeps them together
            new.extend(to_si_allocations(allocations, partition_without_rm(partition)))
        return si.AllocationResponse(new=new)


_PARTITION_OF = attrgetter("partition")
