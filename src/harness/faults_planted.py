"""Planted concurrency bugs (test-only): each a window between two messages the actors really have.

Every class here is a broken subclass of a product actor that ``korral.harness.faults`` hands to a core
when a test (or ``korral stress --inject-fault NAME``) enables it; the product never looks at them. Each
is wrong only when two messages meet in one particular order (a release overtaking a placement, a timer
between the two halves of a placeholder replacement, a decommission overtaking a recovered booking),
never on every run: ``korral stress --simulated`` must find the order (tests/core/test_planted_bugs.py
says within how many seeds).
"""

from __future__ import annotations

from korral import si
from korral.actors.application import ApplicationActor
from korral.actors.messages import (
    BookOnNode,
    Placed,
    RemoveApplication,
    RunCycle,
    TimeoutsDue,
    ViewOps,
)
from korral.actors.node import NodeActor
from korral.actors.scheduler import SchedulerActor
from korral.model.view_ops import DropAsk, Forget

PLANTED = {
    "placed-after-ask-release-lost": (
        "lost confirmation: a node's booking for an ask released (or updated) while the placement was on "
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
    "removal-skips-preempted": (
        "removal during preemption: removing an application leaves an allocation awaiting the RM's "
        "preemption confirmation to that confirmation, which a removed application never gets"
    ),
    "recovery-onto-leaving-node": (
        "recovery onto a leaving node: a recovered booking that reaches its node after the node's "
        "decommission is booked there all the same"
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
        for allocation, node in message.placements:
            ask = asks.get(allocation.allocation_key)
            if ask is None or ask.generation != allocation.ask_generation:
                continue  # the bug: neither confirmed nor handed back
            kept.append((allocation, node))
        if kept:
            super().on_Placed(Placed(placements=tuple(kept)))


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


class RemovalSkipsPreempted(ApplicationActor):
    """removal-skips-preempted: on removal, allocations awaiting the RM's preemption confirmation are
    dropped from the books without being freed on their nodes or taken off their queues."""

    def on_RemoveApplication(self, message: RemoveApplication) -> None:
        app = self.owner.app
        for uuid, termination in list(app.releasing.items()):
            if termination is si.TerminationType.PREEMPTED_BY_SCHEDULER:
                app.remove_allocation(uuid)  # the bug: "the confirmation will free it"
        super().on_RemoveApplication(message)


class RecoveryOntoLeavingNode(NodeActor):
    """recovery-onto-leaving-node: a BookOnNode (a recovered or a confirmed allocation) reaching a
    decommissioned node is booked (the node would have sent NodeRemoved back to the owner)."""

    def on_BookOnNode(self, message: BookOnNode) -> None:
        if self.removed:
            for allocation in message.allocations:  # the bug: booked on a node that left
                if allocation.uuid not in self.node.allocations:
                    self.node.add_allocation(allocation)
                    self.owners[allocation.uuid] = message.app
            return
        super().on_BookOnNode(message)


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
    "removal-skips-preempted": ("application_actor", RemovalSkipsPreempted),
    "recovery-onto-leaving-node": ("node_actor", RecoveryOntoLeavingNode),
    "cut-batch-drops-rest": ("scheduler_actor", CutBatchDropsRest),
}
