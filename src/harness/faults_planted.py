"""Planted concurrency bugs (test-only): each a window between two messages the actors really have.

Every class here is a broken subclass of a product actor that ``korral.harness.faults`` hands to a core
when a test (or ``korral stress --inject-fault NAME``) enables it; the product never looks at them. Each
is wrong only when two messages meet in one particular order (a release overtaking a placement, a timer
between the two halves of a placeholder replacement, a decommission overtaking an owner's recovery),
never on every run: ``korral stress --simulated`` must find the order (tests/core/test_planted_bugs.py
says within how many seeds).
"""

from __future__ import annotations

from typing import Any

from korral.actors.application import ApplicationActor
from korral.actors.messages import (
    NodeGone,
    Placed,
    RunCycle,
    TimeoutsDue,
    ViewOps,
)
from korral.actors.scheduler.actor import SchedulerActor
from korral.model.view_ops import AdoptRecovered, DropAsk, Forget

PLANTED = {
    "placed-after-ask-release-lost": (
        "lost confirmation: a placement for an ask released (or updated) while the placement was on "
        "its way is neither confirmed nor handed back"
    ),
    "release-after-release-counted": (
        "double count: the application's release of an allocation the scheduler's view let go a moment "
        "ago (its node went, and the view heard of that first) is taken off its queue again"
    ),
    "reservation-outlives-ask": (
        "stale reservation: an ask released while it holds a node's reservation leaves the node "
        "reserved for it"
    ),
    "timeout-drops-replacement": (
        "timer mid-replacement: a placeholder timeout between a placeholder's PLACEHOLDER_REPLACED "
        "release and the RM's confirmation forgets the real allocation waiting on it"
    ),
    "recovery-onto-leaving-node": (
        "recovery onto a leaving node: a node that leaves before the owner of a recovered allocation "
        "on it has taken the allocation in does not have the owner release it"
    ),
    "replacement-lost-with-node": (
        "replacement lost with its node: a node leaving while a gang replacement waits on a placeholder "
        "there takes the real ask's repeat with it"
    ),
    "cut-batch-drops-rest": (
        "batch cut-off: a scheduling batch that ends with work left (cut short, or a rollback freed "
        "room) queues no next cycle; the rest waits for a wake-up that may never come"
    ),
}


class PlacedAfterAskReleaseLost(ApplicationActor):
    """placed-after-ask-release-lost: a placement whose ask went (RemoveAsks, or an update: a new
    generation) between the scheduler's decision and the owner's confirmation is dropped; the owner
    would have rolled it back in the view."""

    def on_Placed(self, message: Placed) -> None:
        asks = self.owner.app.asks
        kept = []
        for allocation in message.allocations:
            ask = asks.get(allocation.allocation_key)
            if ask is None or ask.generation != allocation.ask_generation:
                continue  # the bug: neither confirmed nor handed back
            kept.append(allocation)
        if kept:
            super().on_Placed(Placed(allocations=tuple(kept)))


class ReleaseAfterReleaseCounted(SchedulerActor):
    """release-after-release-counted: the owner's release (``Forget``) of an allocation the view let
    go already (its node left, and ``NodeGone`` got here first) is taken off its queue a second time.
    In the other order the view releases it once, at the ``Forget``, and the node's removal finds it
    gone."""

    def on_ViewOps(self, message: ViewOps) -> None:
        view = self.view
        app = view.applications.get(message.application_id)
        stale = self._stale(message.application_id, message.app)
        gone = [
            op.allocation
            for op in message.ops
            if isinstance(op, Forget)
            and app is not None
            and not stale
            and op.allocation.uuid not in app.allocations
        ]
        super().on_ViewOps(message)
        queue = view.queues.get(app.queue_path) if app is not None else None
        if queue is not None and gone:
            for allocation in gone:  # the bug: already taken off when its node left
                queue.add_allocated(allocation.resource, -1)
            self._wake()


class ReservationOutlivesAsk(SchedulerActor):
    """reservation-outlives-ask: the DropAsk of an ask holding a reservation cleans the application's
    side of the reservation but leaves the node reserved for the ask."""

    def on_ViewOps(self, message: ViewOps) -> None:
        view = self.view
        held = [
            (view.reservations[(message.application_id, op.allocation_key)], op.allocation_key)
            for op in message.ops
            if isinstance(op, DropAsk) and (message.application_id, op.allocation_key) in view.reservations
        ]
        super().on_ViewOps(message)
        for node_id, key in held:
            node = view.nodes.get(node_id)
            holder = (message.application_id, key)
            if node is not None and holder not in node.reservations:
                node.reservations = (*node.reservations, holder)  # the bug
                view.effects.reservation_change(node_id)
        if held:
            self._wake()


class TimeoutDropsReplacement(ApplicationActor):
    """timeout-drops-replacement: a TimeoutsDue that finds the placeholder deadline due while
    replacements wait for the RM's confirmation forgets them (the real asks' repeats are lost)."""

    def on_TimeoutsDue(self, message: TimeoutsDue) -> None:
        app = self.owner.app
        deadline = app.placeholder_deadline
        if deadline is not None and self.clock() >= deadline - 1e-9 and app.replacements:
            for placeholder_uuid in list(app.replacements):
                app.drop_replacement(placeholder_uuid)  # the bug: the ask's repeat is not returned
        super().on_TimeoutsDue(message)


class RecoveryOntoLeavingNode(SchedulerActor):
    """recovery-onto-leaving-node: when a node leaves, the scheduler tells the owners only of the
    allocations they told it of. A recovered allocation the partition booked with the new node, whose
    owner has not taken it in yet (its own ``AdoptRecovered`` still on its way), is dropped from the
    view but never released by its owner: it stays with the application, on no node. In the other
    order (the owner's adoption first) the owner is told and releases it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.owner_adopted: set[str] = set()

    def on_ViewOps(self, message: ViewOps) -> None:
        if message.app is not None:  # an owner's (the partition's carry no application handle)
            self.owner_adopted.update(
                op.allocation.uuid for op in message.ops if isinstance(op, AdoptRecovered)
            )
        super().on_ViewOps(message)

    def on_NodeGone(self, message: NodeGone) -> None:
        node = self.view.nodes.get(message.node_id)
        if node is not None:
            for uuid, allocation in list(node.allocations.items()):
                if allocation.recovered and uuid not in self.owner_adopted:
                    # the bug: "its owner has not adopted it: nothing of it to release"
                    self.view.release_allocation(allocation.application_id, uuid, complete=False)
        super().on_NodeGone(message)


class ReplacementLostWithNode(SchedulerActor):
    """replacement-lost-with-node: a node leaves while a gang replacement waits on a placeholder there
    (decided, the RM not yet confirming the placeholder's release): the view drops the replacement
    with the placeholder, and the real ask never gets its repeat back when the owner releases the
    placeholder. In the other order (the swap confirmed first) the real allocation goes with the
    node like any other."""

    def on_NodeGone(self, message: NodeGone) -> None:
        node = self.view.nodes.get(message.node_id)
        if node is not None:
            for uuid, allocation in node.allocations.items():
                app = self.view.applications.get(allocation.application_id)
                if app is not None and app.replacements and uuid in app.replacements:
                    app.replacements.pop(uuid)  # the bug: "it leaves with its placeholder"
        super().on_NodeGone(message)


class CutBatchDropsRest(SchedulerActor):
    """cut-batch-drops-rest: at the end of a batch the scheduler does not queue the next cycle (the
    product does: the batch may have been cut short, or a rollback freed room). On the virtual clock
    a batch is never cut short unless the harness cuts it (``--env-faults cutoffs``)."""

    _ending_batch = False

    def on_RunCycle(self, message: RunCycle) -> None:
        self._ending_batch = True
        try:
            super().on_RunCycle(message)
        finally:
            self._ending_batch = False

    def _wake(self) -> None:
        if self._ending_batch:  # the bug: effects published, no RunCycle for the rest
            self._take_effects()
            if self.reservation_changes:
                self._publish_reservations()
            return
        super()._wake()


# fault name -> (start_options key, the broken class)
CLASSES: dict[str, tuple[str, type]] = {
    "placed-after-ask-release-lost": ("application_actor", PlacedAfterAskReleaseLost),
    "release-after-release-counted": ("scheduler_actor", ReleaseAfterReleaseCounted),
    "reservation-outlives-ask": ("scheduler_actor", ReservationOutlivesAsk),
    "timeout-drops-replacement": ("application_actor", TimeoutDropsReplacement),
    "recovery-onto-leaving-node": ("scheduler_actor", RecoveryOntoLeavingNode),
    "cut-batch-drops-rest": ("scheduler_actor", CutBatchDropsRest),
    "replacement-lost-with-node": ("scheduler_actor", ReplacementLostWithNode),
}
