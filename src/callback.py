"""The RM's side of the SI: what korral calls back (api.md: korral.ResourceManagerCallback)."""

from __future__ import annotations

from korral import si


class ResourceManagerCallback:
    """Base class whose methods do nothing; an RM subclasses it and overrides what it needs.

    korral calls these from its own threads (one dispatcher thread per RM, in order), never while a
    scheduling decision waits on them, except ``predicates``, which the partition's scheduler consults
    for each candidate node. An exception raised here is logged and contained.
    """

    def update_allocation(self, response: si.AllocationResponse) -> None:
        """New allocations, releases (with their termination type) and rejected asks."""

    def update_application(self, response: si.ApplicationResponse) -> None:
        """Accepted and rejected applications, and application state changes."""

    def update_node(self, response: si.NodeResponse) -> None:
        """Accepted and rejected nodes."""

    def predicates(self, args: si.PredicatesArgs) -> bool:
        """False: the node cannot take this ask."""
        return True

    def send_event(self, events: list[si.EventRecord]) -> None:
        """Batched event records about applications, nodes, queues and requests."""

    def update_container_scheduling_state(self, request: si.UpdateContainerSchedulingStateRequest) -> None:
        """An ask fits its queue but no node (FAILED): a hint for autoscaling."""
