"""engine="ray", in the driver: what the RM was told is live in a partition, and what it is told when
that partition's process is lost. Plain code: no Ray, no threads.

The ledger is built from the callbacks the driver delivered and the releases it routed. When the
host's process dies, the RM hears from it that everything it had there is gone: every live allocation
released, every live application failed, every node rejected, each with the loss's reason. Requests
for a lost partition are rejected item by item with the same reason.
"""

from __future__ import annotations

import time
from typing import Any

import attrs

from korral import si
from korral.actors.messages import (
    Deliver,
    RouteAllocationRequest,
    RouteApplicationRequest,
    RouteNodeRequest,
)

TERMINAL_APP_STATES = frozenset({"Completed", "Failed", "Rejected", "Expired"})
ROUTED = (RouteAllocationRequest, RouteApplicationRequest, RouteNodeRequest)  # what the RMProxy routes


@attrs.define
class Ledger:
    """What the RM was told is live in one partition: what it must hear about if the partition is lost."""

    allocations: dict[str, si.Allocation] = attrs.Factory(dict)  # uuid -> allocation
    nodes: set[str] = attrs.Factory(set)
    applications: set[str] = attrs.Factory(set)

    def delivered(self, message: Deliver) -> None:
        argument = message.argument
        if isinstance(argument, si.AllocationResponse):
            if argument.new:
                self.allocations.update((allocation.uuid, allocation) for allocation in argument.new)
            for release in argument.released:
                self.allocations.pop(release.uuid, None)
        elif isinstance(argument, si.NodeResponse):
            self.nodes.update(node.node_id for node in argument.accepted)
        elif isinstance(argument, si.ApplicationResponse):
            self.applications.update(app.application_id for app in argument.accepted)
            for updated in argument.updated:
                if updated.state in TERMINAL_APP_STATES:
                    self.applications.discard(updated.application_id)

    def routed(self, message: Any) -> None:
        if isinstance(message, RouteAllocationRequest) and message.request.releases is not None:
            for release in message.request.releases.allocations_to_release:
                if release.uuid:
                    self.allocations.pop(release.uuid, None)
                else:  # no uuid: every allocation of the application
                    for uuid, live in list(self.allocations.items()):
                        if live.application_id == release.application_id:
                            del self.allocations[uuid]
        elif isinstance(message, RouteNodeRequest):
            for node in message.request.nodes:
                if node.action == si.NodeAction.DECOMISSION:
                    self.nodes.discard(node.node_id)
        elif isinstance(message, RouteApplicationRequest):
            for removal in message.request.remove:
                self.applications.discard(removal.application_id)


def loss_notices(ledger: Ledger, partition: str, reason: str) -> list[Deliver]:
    """The callbacks that tell the RM everything the ledger holds is gone, with the reason."""
    notices: list[Deliver] = []
    if ledger.allocations:
        released = [
            si.AllocationRelease(
                partition_name=allocation.partition_name or partition,
                application_id=allocation.application_id,
                uuid=allocation.uuid,
                allocation_key=allocation.allocation_key,
                termination_type=si.TerminationType.UNKNOWN_TERMINATION_TYPE,
                message=reason,
            )
            for allocation in ledger.allocations.values()
        ]
        notices.append(Deliver(argument=si.AllocationResponse(released=released)))
    if ledger.applications:
        updated = [
            si.UpdatedApplication(
                application_id=app_id,
                state="Failed",
                state_transition_timestamp=time.time_ns(),
                message=reason,
            )
            for app_id in sorted(ledger.applications)
        ]
        notices.append(Deliver(argument=si.ApplicationResponse(updated=updated)))
    if ledger.nodes:
        rejected = [si.RejectedNode(node_id=node_id, reason=reason) for node_id in sorted(ledger.nodes)]
        notices.append(Deliver(argument=si.NodeResponse(rejected=rejected)))
    return notices


def refusal(message: Any, reason: str) -> Deliver | None:
    """A request for a lost partition, each of its items rejected with the reason (None: nothing to say)."""
    if isinstance(message, RouteNodeRequest):
        nodes = [si.RejectedNode(node_id=node.node_id, reason=reason) for node in message.request.nodes]
        return Deliver(argument=si.NodeResponse(rejected=nodes)) if nodes else None
    if isinstance(message, RouteApplicationRequest):
        apps = [
            si.RejectedApplication(application_id=add.application_id, reason=reason)
            for add in message.request.new
        ]
        return Deliver(argument=si.ApplicationResponse(rejected=apps)) if apps else None
    if isinstance(message, RouteAllocationRequest):
        asks = [
            si.RejectedAllocationAsk(
                allocation_key=ask.allocation_key, application_id=ask.application_id, reason=reason
            )
            for ask in message.request.asks
        ]
        return Deliver(argument=si.AllocationResponse(rejected=asks)) if asks else None
    return None
