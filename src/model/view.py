"""The Scheduler actor's decision view of a partition.

It is a ``PartitionModel`` fed with what the owners (application, node and partition actors) tell the
scheduler, so the scheduler decides with exactly the reference scheduler's code. Its allocations are
*proposals*: counted at once so the next decision sees them, confirmed by the node (room) and the
application (the ask still wants it), and undone with ``rollback`` when either refuses. An
application's state is its owner's, as published, moved on here only by the view's own bookings
(``ViewApplications``). Every update here is idempotent, because a fact can reach the view by two
paths (a node removal and the releases of its allocations, say).
"""

from __future__ import annotations

from typing import Any

import attrs

from korral import si
from korral.config.schema import PartitionConfig
from korral.model.allocation import Allocation, Ask, AskSpec
from korral.model.app.application import RUNNING_STATES, Application, ApplicationEvent, ApplicationState
from korral.model.app.spec import AppSpec
from korral.model.node import NodeChange
from korral.model.partition.apps import PartitionApplications
from korral.model.partition.composed import ModelError, PartitionModel
from korral.model.queue import Queue
from korral.model.queue_spec import GivenQueueSpecs, QueueSpec
from korral.policies.placement import PlacementManager
from korral.resource import Resource

# how far bookings have moved an application: a published state behind the view's does not take it back
_BOOKING_STAGE = {ApplicationState.ACCEPTED: 0, ApplicationState.STARTING: 1, ApplicationState.RUNNING: 2}

# the view's placement rules: none (the partition actor places applications: ``insert_application``)
_NO_PLACEMENT = PlacementManager.build(())


class ViewApplications(PartitionApplications):
    """The view's applications part. An application's state is its owner's: the view takes each state
    its owner publishes (``take_state``) and itself makes only the transitions of its own bookings
    (``advance_after_allocation`` as it commits or swaps, recovery as it adopts), so that the next
    decision of a batch sees the application counted against maxapplications or admitted by
    stateaware at once, as YuniKorn's allocation moves it under the application's lock. Those
    transitions are the owner's too when it confirms the booking: the two meet, and nothing here is
    reported (the owner reports every change)."""

    def transition(self, app: Application, event: ApplicationEvent, message: str = "") -> bool:
        was_running = app.state in RUNNING_STATES
        if not app.try_handle(event, self.clock()):
            return False
        self.count_running(app, was_running)
        return True

    def run_on_ask(self, app: Application) -> None:
        """Running an application on a new ask is the owner's decision, published before the ask."""

    def maybe_complete(self, app: Application) -> None:
        """Completing or failing an application is the owner's decision, published (``OwnerState``)."""


class SchedulingView(PartitionModel):
    applications_part = ViewApplications

    def apply_config(
        self,
        config: PartitionConfig,
        *,
        initial: bool = False,
        placement: PlacementManager | None = None,
        queues: tuple[QueueSpec, ...] | None = None,
    ) -> None:
        """The partition's config as the partition actor applied it, each queue's spec the one its
        actor made (``queues``, by reference; None: those already offered); the view places nothing,
        so it builds no placement rules (they are the partition's)."""
        if queues is not None:
            self.given_specs.offer(queues)
        try:
            super().apply_config(config, initial=initial, placement=_NO_PLACEMENT)
        finally:
            self.given_specs.offer(())

    def __init__(self, *args: Any, queues: tuple[QueueSpec, ...] = (), **kwargs: Any) -> None:
        """``queues``: the specs of the queues the first configuration makes (their actors')."""
        # the queue actors' specs, by reference: the view makes none of its own
        self.given_specs = GivenQueueSpecs(queues)
        super().__init__(*args, queue_specs=self.given_specs, **kwargs)
        # uuid -> application of allocations released here because their node left. Some were still
        # proposals: their rollback (the node or the application refuses them) comes after the node
        # removal and must still give the ask its repeat back. See ``discard_node`` and ``rollback``.
        self._released_with_node: dict[str, str] = {}
        # placeholder uuid -> the replacement waiting on it, for placeholders that left with their node:
        # the real ask gets its repeat back when the owner says so (its release of the placeholder), as
        # the owner only then gives it back; earlier, the view would propose what the owner refuses
        self._replaced_with_node: dict[str, Allocation] = {}
        # every booking and freeing on a node since the scheduler last published them (its node
        # board, what node snapshots show): the view is the one record of what runs on each node
        self.node_changes: list[NodeChange] = []
        self.registry.node_journal = self.node_changes
        # queues whose usage changed since the scheduler last published it (each one's ancestors too)
        self.usage_changed: set[Queue] = set()
        for queue in self.queues.values():  # queues created later inherit the set from their parent
            queue.usage_changed = self.usage_changed

    def queue_created(self, path: str, *, leaf: bool, spec: QueueSpec | None = None) -> None:
        """The partition created a queue of this kind (parents are announced first), ``spec`` its
        actor's. A queue the partition removed may linger here while the view still held work in it;
        empty, it gives way to the partition's new one, so the two trees agree again."""
        queue = self.queues.get(path)
        if queue is not None and queue.is_leaf != leaf and queue.is_empty():
            self.remove_queue(queue)
            queue = None
        if queue is None:
            queue = self.create_queue(path, leaf=leaf)
        if spec is not None:
            self._take_spec(queue, spec)

    def _take_spec(self, queue: Queue, spec: QueueSpec) -> None:
        """The queue's spec as its actor made it, by reference."""
        if queue.spec is not spec:
            limits_changed = (spec.max, spec.guaranteed) != (queue.spec.max, queue.spec.guaranteed)
            queue.apply_spec(spec)
            if limits_changed:
                self.registry.limits_dirty = True

    def insert_application(
        self, spec: AppSpec, *, limit_group: str | None = None, queue_spec: QueueSpec | None = None
    ) -> Application:
        """Add an application the partition actor already placed (no placement rules here), tracked
        against the group the partition resolved (``limit_group``, "" for none; None: resolve here).
        ``queue_spec``: its queue's spec once the application's namespace tags applied (its actor's);
        None: the tags applied here."""
        application_id = spec.application_id
        if application_id in self.applications:
            return self.applications[application_id]
        queue = self.queues.get(spec.queue_path) or self.create_queue(spec.queue_path)
        if queue_spec is not None and queue_spec.path == queue.path:
            self._take_spec(queue, queue_spec)
        elif not queue.is_managed:
            self.apps.apply_namespace_tags(queue, spec.tags)
        if spec.queue_path != queue.path or spec.partition != self.name:
            spec = attrs.evolve(spec, queue_path=queue.path, partition=self.name)
        app = Application(spec, submission_time=self.clock(), recorded=False)  # its owner's record
        self.applications[application_id] = app
        queue.applications[application_id] = app
        self.track_user(app, limit_group or None, resolve=limit_group is None)
        return app

    def discard_application(self, application_id: str) -> None:
        if application_id in self.applications:
            self.remove_application(application_id)
        if self._released_with_node:
            for uuid in [u for u, a in self._released_with_node.items() if a == application_id]:
                del self._released_with_node[uuid]
        if self._replaced_with_node:
            for uuid in [
                u for u, r in self._replaced_with_node.items() if r.application_id == application_id
            ]:
                del self._replaced_with_node[uuid]

    def put_asks(self, asks: list[AskSpec]) -> None:
        """Add or replace asks as their owner built them (same key and generation), each with its own
        progress here around the shared spec.

        Each application is re-keyed in its queue, and each queue up the tree, once for the whole batch.
        """
        touched: dict[str, tuple[Application, Resource]] = {}
        queues: dict[str, Queue] = {}  # each touched application's queue, looked up once per batch
        insert_ask, next_ask_seq = self.apps.insert_ask, self.apps.next_ask_seq
        for ask in asks:
            app_id = ask.application_id
            entry = touched.get(app_id)
            if entry is None:
                app = self.applications.get(app_id)
                if app is None:
                    continue
                entry = touched[app_id] = (app, {})
                queues[app_id] = self.queues[app.queue_path]
            insert_ask(entry[0], queues[app_id], Ask(ask, next_ask_seq()), entry[1])
        self.apps.rekey_touched(touched)

    def drop_ask(self, application_id: str, allocation_key: str, generation: int) -> None:
        app = self.applications.get(application_id)
        if app is None:
            return
        ask = app.asks.get(allocation_key)
        if ask is not None and ask.generation == generation:
            self.remove_ask(application_id, allocation_key)

    def rollback(self, allocation: Allocation) -> None:
        """Undo a proposal that did not become an allocation."""
        app = self.applications.get(allocation.application_id)
        if app is None:
            self._released_with_node.pop(allocation.uuid, None)
            return
        if allocation.uuid in app.allocations:
            self.release_allocation(allocation.application_id, allocation.uuid, complete=False)
        elif self._released_with_node.pop(allocation.uuid, None) is None:
            return  # nothing of it left here
        # else: its node left first and took the booking with it; the repeat is still owed
        ask = app.asks.get(allocation.allocation_key)
        if ask is not None and ask.generation == allocation.ask_generation:
            app.return_pending(ask)
            queue = self.queues[app.queue_path]
            queue.add_pending(ask.resource)
            queue.update_app(app)
            # the returned repeat is new work: drop what the walk learnt while it was away (queues
            # and applications marked as having nothing schedulable, shapes that fit no node)
            self.registry.resources_changed()

    def forget_allocation(self, allocation: Allocation) -> None:
        """A confirmed allocation is gone (released, node or application removed)."""
        if self._released_with_node:
            self._released_with_node.pop(allocation.uuid, None)  # confirmed: no rollback will come
        self.release_allocation(allocation.application_id, allocation.uuid)
        if self._replaced_with_node:
            real = self._replaced_with_node.pop(allocation.uuid, None)
            app = self.applications.get(allocation.application_id)
            if real is not None and app is not None:
                self.allocator.return_repeat(app, real)

    def adopt_recovered(self, allocation: Allocation) -> None:
        app = self.applications.get(allocation.application_id)
        if app is None or allocation.uuid in app.allocations or allocation.node_id not in self.nodes:
            return
        try:
            self.recover_allocation(allocation)
        except ModelError:
            return

    def discard_node(self, node_id: str, incarnation: int | None = None) -> dict[str, list[str]]:
        """The node left: its allocations go with it. Returns them by application (confirmed,
        recovered or still a proposal on its way), for their owners to release: the view is the
        record of what ran on the node. ``incarnation``: only that node of the id (a later one of the
        same id stays)."""
        node = self.nodes.get(node_id)
        if node is None or (incarnation is not None and node.spec.incarnation != incarnation):
            return {}
        gone: dict[str, list[str]] = {}
        for uuid, allocation in node.allocations.items():
            gone.setdefault(allocation.application_id, []).append(uuid)
            if not allocation.recovered:
                self._released_with_node[uuid] = allocation.application_id
            app = self.applications.get(allocation.application_id)
            if app is not None and app.replacements and uuid in app.replacements:
                self._replaced_with_node[uuid] = app.replacements.pop(uuid)
        # its owners decide the applications' states; an unconfirmed proposal must not complete one
        self.remove_node(node_id, complete=False)
        self.node_changes.append((node_id, ""))
        return gone

    # ---- gang replacement and core-made releases ---------------------------------------------------

    def undo_replacement(self, real: Allocation) -> None:
        """As the model's, and also for a replacement whose placeholder left with its node before the
        owner refused the replacement (it never knew the placeholder): the ask gets its repeat back."""
        recorded = self._replaced_with_node.get(real.replaces) if self._replaced_with_node else None
        if recorded is None or recorded.uuid != real.uuid:
            super().undo_replacement(real)
            return
        del self._replaced_with_node[real.replaces]
        app = self.applications.get(real.application_id)
        if app is not None:
            self.allocator.return_repeat(app, real)

    def swap(self, application_id: str, placeholder_uuid: str, real: Allocation) -> bool:
        """The owner swapped a confirmed replacement in: do the same here (idempotent).

        Returns True when the placeholder is no longer here for it to replace: it left with its node
        (the RM confirmed its release to the owner before the owner heard of the removal), so the
        real allocation, which took its place on that node, must go as the removal would have taken
        it."""
        app = self.applications.get(application_id)
        if self._replaced_with_node:
            self._replaced_with_node.pop(placeholder_uuid, None)  # swapped: its node is the real's now
        if app is None:
            return False
        app.drop_replacement(placeholder_uuid)
        if real.uuid in app.allocations:
            return False
        if placeholder_uuid in app.allocations:
            self.swap_in(app, placeholder_uuid, real)  # the owner reports it to the RM
            return False
        return True

    def mark_releasing(self, application_id: str, uuid: str, termination: int) -> None:
        """The owner released an allocation itself: still booked, but no longer a placeholder to replace."""
        app = self.applications.get(application_id)
        if app is not None and uuid in app.allocations:
            app.mark_releasing(uuid, si.TerminationType(termination))
            # a replacement decided here may still be on its way: the timeout's type wins, so that
            # its refusal (``undo_replacement``) leaves the placeholder released
            app.releasing[uuid] = si.TerminationType(termination)

    def take_state(self, application_id: str, state: ApplicationState) -> None:
        """The state the application's owner published (``OwnerState``). One that is behind the
        view's own bookings on their way (Accepted, Starting, Running) does not take them back: the
        owner published it before it confirmed them, and reaches their state as it does."""
        app = self.applications.get(application_id)
        if app is None:
            return
        current = app.state
        if state is current or _BOOKING_STAGE.get(state, 3) < _BOOKING_STAGE.get(current, 0):
            return
        app.state = state
        self.apps.count_running(app, current in RUNNING_STATES)

    def unpreempt(self, application_id: str, uuid: str) -> None:
        """The owner could not preempt this allocation (not confirmed there yet, or released another
        way meanwhile): it is live again here, and the ask that chose it may try again later."""
        app = self.applications.get(application_id)
        if app is not None and app.releasing.get(uuid) is si.TerminationType.PREEMPTED_BY_SCHEDULER:
            app.unmark_releasing(uuid)

    def has_timed_work(self) -> bool:
        """Asks that failed to fit: time alone can change the outcome (reservations)."""
        return bool(self.unschedulable) or bool(self.reservations)
