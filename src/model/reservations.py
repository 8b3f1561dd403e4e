"""YuniKorn 1.8's rules for when a reservation ends other than by its ask being placed.

- **Wait timeout** (YUNIKORN-3219): a reservation whose ask cannot go on because its queue's (or its
  user's) headroom is short is cancelled once it has been held longer than ``RESERVATION_WAIT_TIMEOUT``
  (YuniKorn's constant, 60 minutes). The ask goes back to the queue walk, where a short headroom does
  not reserve again.
- **A preemptor may take a stale node** (YUNIKORN-3092): a node reserved for another ask is no
  candidate for preemption, except that a normal reservation (not for an ask that requires the node)
  whose ask has not itself preempted, has a lower priority than the preemptor and has waited longer
  than the wait timeout plus the reservation delay is cancelled, freeing the node for the preemptor.
- **Several required-node reservations per node** (YUNIKORN-2976): asks that require a node may all
  reserve it; a normal reservation on it is cancelled for them, and is made only on a node with none.

YuniKorn's code computes both ages from the creation time plus the timeout, so it cancels after about
twice the timeout; korral cancels after the timeout itself, as the issues and the commit messages say
(docs/api.md). The time is the partition's clock, which tests drive.

``Reservations`` is the part of a ``PartitionModel`` that holds the reservations themselves: which
ask holds which node, since when; the functions below are the rules over a whole partition.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from korral.model.partition.effects import EffectsRecorder
from korral.model.partition.registry import PartitionRegistry

if TYPE_CHECKING:
    from korral.model.allocation import Ask
    from korral.model.app.application import Application
    from korral.model.node import Node
    from korral.model.partition.composed import PartitionModel

# YuniKorn's reservationWaitTimeout (objects/application.go)
RESERVATION_WAIT_TIMEOUT = 3600.0


def wait_expired(model: PartitionModel, application_id: str, allocation_key: str, now: float) -> bool:
    """Cancel the reservation if it has waited past the timeout on a short headroom; True if it did."""
    key = (application_id, allocation_key)
    reserved_at = model.reserved_at.get(key)
    # time alone ends the wait (once past it, as YuniKorn): the scheduler's tick runs a cycle while
    # any reservation is held
    if reserved_at is None or now - reserved_at <= model.reservation_wait_timeout:
        return False
    model.unreserve(application_id, allocation_key)
    model.effects.request_event(
        application_id,
        allocation_key,
        f"reservation of '{allocation_key}' cancelled: its headroom stayed short for longer than "
        f"the reservation wait time ({model.reservation_wait_timeout:g}s)",
    )
    return True


def free_for_preemptor(
    model: PartitionModel, node: Node, mine: tuple[str, str], priority: int, now: float
) -> bool:
    """Whether a preemptor (``mine``, of raw ``priority``) may look for victims on the node: no other
    ask holds it, or the only other one holds it stale (then that reservation is cancelled)."""
    others = [holder for holder in node.reservations if holder != mine]
    if not others:
        return True
    for application_id, allocation_key in others:
        app: Application | None = model.applications.get(application_id)
        ask = app.asks.get(allocation_key) if app is not None else None
        if ask is None or ask.required_node or ask.preempt_victims or ask.priority >= priority:
            return False
        if now - ask.create_time <= model.reservation_wait_timeout + model.reservation_delay:
            return False
    for application_id, allocation_key in others:
        model.unreserve(application_id, allocation_key)
        model.effects.request_event(
            application_id,
            allocation_key,
            f"reservation of '{allocation_key}' on node {node.node_id} cancelled: a higher priority "
            f"ask ({mine[1]}) may preempt there",
        )
    return True


def clear_for_required_node(model: PartitionModel, app: Application, allocation_key: str, node: Node) -> None:
    """Make way on the node for an ask that requires it: every normal reservation there is cancelled
    (the daemon set goes first), other required-node reservations stay beside it."""
    mine = (app.application_id, allocation_key)
    for holder in node.reservations:
        if holder == mine:
            continue
        holder_app = model.applications.get(holder[0])
        holder_ask = holder_app.asks.get(holder[1]) if holder_app is not None else None
        if holder_ask is None or holder_ask.required_node != node.node_id:
            model.unreserve(*holder)


class Reservations:
    """A partition's reservations: (application, allocation key) -> node, and when each was made. A
    reserved node leaves the node order while reserved; the node and the application record their side."""

    def __init__(
        self,
        registry: PartitionRegistry,
        applications: dict[str, Application],
        effects: EffectsRecorder,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.nodes = registry.nodes  # the registry's (shared, never replaced)
        self.applications = applications  # the applications part's (shared, never replaced)
        self.effects = effects
        self.clock = clock
        self.reservations: dict[tuple[str, str], str] = {}
        # when each reservation was made (the partition's clock)
        self.reserved_at: dict[tuple[str, str], float] = {}

    def reserve(self, app: Application, ask: Ask, node: Node) -> None:
        self.effects.reservation_change(node.node_id)
        key = (app.application_id, ask.allocation_key)
        if key not in node.reservations:
            node.reservations = (*node.reservations, key)
        app.reservations[ask.allocation_key] = node.node_id
        self.reservations[key] = node.node_id
        self.reserved_at[key] = self.clock()  # the wait timeout runs from here (YUNIKORN-3219)
        self.registry.node_changed(node)

    def unreserve(self, application_id: str, allocation_key: str) -> None:
        key = (application_id, allocation_key)
        node_id = self.reservations.pop(key, None)
        self.reserved_at.pop(key, None)
        app = self.applications.get(application_id)
        if app is not None:
            app.reservations.pop(allocation_key, None)
        if node_id is not None:
            node = self.nodes.get(node_id)
            if node is not None and key in node.reservations:
                self.effects.reservation_change(node_id)
                node.reservations = tuple(held for held in node.reservations if held != key)
                if not node.reservations:
                    self.registry.node_changed(node)
                    self.registry.resources_changed()

    def drop_ask_reservation(self, app: Application, allocation_key: str) -> None:
        if allocation_key in app.reservations:
            self.unreserve(app.application_id, allocation_key)
