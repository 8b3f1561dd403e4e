"""A partition's allocation bookkeeping: booking, recovery, releases and gang replacement.

One part of a ``PartitionModel`` (``korral.model.partition.composed`` composes the parts and wires them): what
an allocation, a release or a replacement changes on the application, its queues, its user's usage and
its node. It owns the allocation uuids the partition issues (``<partition>-<token>-<n>``) and those of
the live recovered allocations. The scheduling walk (``partition.walk``) decides; ``commit`` books.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping

from korral import resource as res
from korral import si
from korral.model.allocation import (
    UNKNOWN_INSTANCE_TYPE,
    Allocation,
    Ask,
    AskSpec,
    recovery_rejection,
    release_withdraws_ask,
)
from korral.model.app.application import (
    Application,
    ApplicationEvent,
    ApplicationState,
    advance_after_allocation,
    advance_for_recovery,
)
from korral.model.app.spec import AppSpec
from korral.model.creation import created_at
from korral.model.node import Node
from korral.model.partition.apps import PartitionApplications
from korral.model.partition.effects import EffectsRecorder
from korral.model.partition.registry import ModelError, PartitionRegistry
from korral.model.queue import Queue
from korral.model.reservations import Reservations
from korral.model.si_convert import from_si_allocation
from korral.model.ugm import UserGroupTracker
from korral.si import INSTANCE_TYPE


class PartitionAllocations:
    """Books, recovers, releases and replaces allocations across application, queues, user and node."""

    def __init__(
        self,
        registry: PartitionRegistry,
        apps: PartitionApplications,
        reservations: Reservations,
        ugm: UserGroupTracker,
        effects: EffectsRecorder,
        *,
        clock: Callable[[], float] = time.monotonic,
        uuid_token: str | None = None,
    ) -> None:
        self.registry = registry
        self.name = registry.name
        self.queues = registry.queues  # the registry's (shared, never replaced)
        self.nodes = registry.nodes
        self.apps = apps
        self.applications = apps.applications  # the applications part's (shared, never replaced)
        self.unschedulable = apps.unschedulable
        self.replace_candidates = apps.replace_candidates
        self.reservations = reservations
        self.ugm = ugm
        self.effects = effects
        self.clock = clock
        # Allocation uuids are "<partition>-<token>-<n>": the token is new for each life of a partition,
        # so after a core restart the new series can never meet the uuids the RM recovers from the
        # last one (YuniKorn uses random uuids for the same reason).
        self.uuid_token = uuid_token if uuid_token is not None else secrets.token_hex(4)
        self._uuid_prefix = f"{self.name}-{self.uuid_token}-"
        self._uuid_seq = itertools.count(1)
        # uuids of the live recovered allocations: the RM chose them, so they are checked for clashes
        self._recovered_uuids: set[str] = set()

    def new_uuid(self) -> str:
        return f"{self._uuid_prefix}{next(self._uuid_seq)}"

    def recovery_reason(self, allocation: Allocation) -> str:
        """Why an existing allocation the RM reports cannot be recovered here; "" when it can. One rule
        for every driver: ``recover_allocation`` books it here, ``sort_recovered`` for the owners."""
        if allocation.application_id not in self.applications:
            return f"failed to find application {allocation.application_id}"
        return self._recovery_rejection(allocation)

    def _recovery_rejection(self, allocation: Allocation) -> str:
        """``recovery_reason`` for an allocation of an application known to be held."""
        return recovery_rejection(
            allocation, issued_prefix=self._uuid_prefix, live_recovered=self._recovered_uuids
        )

    def recovered_uuid(self) -> str:
        """A uuid for an existing allocation the RM reported without one. Outside the series of the
        allocations the core makes (the recovery rule rejects those, so the scheduler's view would
        not adopt it) and unique for this life of the partition."""
        return f"{self.name}-recovered-{self.uuid_token}-{next(self._uuid_seq)}"

    def recover_allocation(self, allocation: Allocation) -> Allocation:
        """Add an allocation the RM already runs (registration/recovery): no fit or quota check."""
        app = self.applications.get(allocation.application_id)
        if app is None:
            raise ModelError(f"failed to find application {allocation.application_id}")
        node = self.nodes.get(allocation.node_id)
        if node is None:
            raise ModelError(f"failed to find node {allocation.node_id}")
        rejection = self.recovery_reason(allocation)
        if rejection:
            raise ModelError(rejection)
        uuid = allocation.uuid or self.recovered_uuid()
        if uuid in app.allocations or uuid in node.allocations:
            raise ModelError(f"allocation {uuid} already exists")
        self._recovered_uuids.add(uuid)
        recovered = allocation.replace(
            uuid=uuid,
            partition=self.name,
            queue_path=app.queue_path,
            resource=res.prune(allocation.resource),
            recovered=True,
        )
        queue = self.queues[app.queue_path]
        created = created_at(recovered.tags, self.clock())
        if created is not None and created < app.submission_time:
            app.submission_time = created  # it keeps its place after a restart (YUNIKORN-2772)
        app.add_allocation(recovered)
        if recovered.placeholder:
            app.after_booking(recovered, 0, self.clock())
            self.replace_candidates[app.application_id] = app
        queue.add_allocated(recovered.resource)
        if app.user_limits is not None:
            self.ugm.allocated(app.user_limits, recovered.resource)  # counted even above a limit
        node.add_allocation(recovered)
        self.registry.node_changed(node)
        advance_for_recovery(app, lambda: self.apps.transition(app, ApplicationEvent.RUN))
        queue.update_app(app)
        return recovered

    def sort_recovered(
        self, info: si.NodeInfo, members: Mapping[str, AppSpec]
    ) -> tuple[dict[str, list[Allocation]], list[tuple[str, str, str]]]:
        """A new node's existing allocations to recover, by application, and those rejected as
        (allocation key, application, reason): for a driver whose owners book them (the Partition
        actor, whose ``members`` are the applications it holds). The uuids accepted stay live here
        until ``forget_recovered``."""
        by_app: dict[str, list[Allocation]] = defaultdict(list)
        rejected: list[tuple[str, str, str]] = []
        for existing in info.existing_allocations:
            allocation = from_si_allocation(existing, self.name).replace(node_id=info.node_id)
            app_id = allocation.application_id
            spec = members.get(app_id)
            reason = (
                f"failed to find application {app_id}"
                if spec is None
                else self._recovery_rejection(allocation)
            )
            if spec is None or reason:
                rejected.append((existing.allocation_key, app_id, reason))
                continue
            if not allocation.uuid:
                allocation = allocation.replace(uuid=self.recovered_uuid())
            self._recovered_uuids.add(allocation.uuid)  # a uuid given here is live just the same
            by_app[app_id].append(allocation.replace(queue_path=spec.queue_path, recovered=True))
        return by_app, rejected

    def forget_recovered(self, uuids: Iterable[str]) -> None:
        """These recovered allocations are gone (their owner says so): their uuids are free again."""
        self._recovered_uuids.difference_update(uuids)

    def release_allocation(
        self, application_id: str, uuid: str, *, complete: bool = True
    ) -> Allocation | None:
        app = self.applications.get(application_id)
        if app is None:
            return None
        allocation = app.remove_allocation(uuid)
        if allocation is None:
            return None
        if app.user_limits is not None:
            self.ugm.released(app.user_limits, allocation.resource)
        if allocation.recovered:
            self._recovered_uuids.discard(uuid)
        queue = self.queues.get(app.queue_path)
        if queue is not None:
            queue.add_allocated(allocation.resource, -1)
            queue.update_app(app)
        node = self.nodes.get(allocation.node_id)
        if node is not None:
            node.remove_allocation(uuid)
            self.registry.node_changed(node)
        self.registry.resources_changed()
        if app.replacements:
            real = app.drop_replacement(uuid)
            if real is not None:
                self.return_repeat(app, real)  # the placeholder went another way: the ask waits again
        if complete:
            self.apps.maybe_complete(app)
        return allocation

    def release_allocations(
        self,
        application_id: str,
        *,
        uuid: str = "",
        allocation_key: str = "",
        termination: si.TerminationType = si.TerminationType.STOPPED_BY_RM,
    ) -> list[Allocation]:
        """RM releases by uuid, else every allocation of the key (and its pending ask:
        ``release_withdraws_ask``), else all of the application's.

        A release of an allocation the core is releasing, with the same termination type, is the RM's
        confirmation: the allocation goes (and a waiting replacement comes in) but is not returned, as
        the RM is not told again. A second confirmation finds nothing.
        """
        app = self.applications.get(application_id)
        if app is None:
            return []
        if uuid:
            targets = [uuid] if uuid in app.allocations else []
        elif allocation_key:
            targets = [a.uuid for a in app.allocations_for_key(allocation_key)]
        else:
            targets = list(app.allocations)
        released: list[Allocation] = []
        for target in targets:
            if app.releasing and app.is_confirmation(target, termination):
                self.confirm_release(app, target)
                continue
            done = self.release_allocation(application_id, target, complete=False)
            if done is not None:
                released.append(done)
        if release_withdraws_ask(uuid, allocation_key, termination, app.asks.get(allocation_key)):
            self.apps.remove_ask(application_id, allocation_key, complete=False)
        if application_id in self.applications:
            self.apps.maybe_complete(app)
        return released

    def confirm_release(self, app: Application, uuid: str) -> None:
        """The RM confirmed a release the core made: free it, or swap in the replacement waiting on it."""
        real = app.drop_replacement(uuid) if app.replacements else None
        if real is None:
            self.release_allocation(app.application_id, uuid, complete=False)
        else:
            swapped = self.swap_in(app, uuid, real)
            if swapped is not None:
                self.effects.swapped_in(swapped)  # new to the RM (the view's owner reports its own)

    def swap_in(self, app: Application, placeholder_uuid: str, real: Allocation) -> Allocation | None:
        """Replace an allocated placeholder by the real allocation on its node: node, queue and
        application usage move by the difference. Returns the real allocation (None: nothing done)."""
        ask = app.asks.get(real.allocation_key)
        timeout_ms = ask.execution_timeout_ms if ask is not None else 0
        placeholder = app.swap_in(placeholder_uuid, real, self.clock(), timeout_ms)
        if placeholder is None:
            return None
        queue = self.queues.get(app.queue_path)
        if queue is not None:
            queue.add_allocated(placeholder.resource, -1)
            queue.add_allocated(real.resource)
            queue.update_app(app)
        if app.user_limits is not None:
            self.ugm.resized(app.user_limits, placeholder.resource, real.resource)
        node = self.nodes.get(real.node_id)
        if node is not None:
            node.remove_allocation(placeholder_uuid)
            node.add_allocation(real)
            self.registry.node_changed(node)
        self.registry.resources_changed()
        if app.state is _ACCEPTED or app.state is _STARTING:
            advance_after_allocation(app, False, lambda: self.apps.transition(app, ApplicationEvent.RUN))
        return real

    def return_repeat(self, app: Application, allocation: Allocation) -> None:
        """The repeat an undone allocation or replacement took goes back to its ask (same generation)."""
        ask = app.asks.get(allocation.allocation_key)
        if ask is None or ask.generation != allocation.ask_generation:
            return
        app.return_pending(ask)
        queue = self.queues[app.queue_path]
        queue.add_pending(ask.resource)
        queue.update_app(app)
        if ask.task_group_name and app.placeholders:
            self.replace_candidates[app.application_id] = app
        # the returned repeat is new work: drop what the walk learnt while it was away
        self.registry.resources_changed()

    def core_release(
        self, application_id: str, uuid: str, termination: si.TerminationType, message: str
    ) -> Allocation | None:
        """The core releases an allocation (TIMEOUT, PLACEHOLDER_REPLACED, preemption): it is reported
        to the RM and stays booked on node, queue and application until the RM confirms."""
        app = self.applications.get(application_id)
        allocation = app.mark_releasing(uuid, termination) if app is not None else None
        if allocation is not None:
            self.effects.core_release(allocation, termination, message)
        return allocation

    def _allocation_of(
        self,
        spec: AskSpec,
        application_id: str,
        queue_path: str,
        node_id: str,
        request_time: float,
        now: float,
        instance_type: str,
    ) -> Allocation:
        """A new allocation of one repeat of ``spec`` on ``node_id``, numbered in this partition's series:
        what ``commit`` books, and (naming its placeholder) what ``replace`` decides."""
        return Allocation(
            uuid=f"{self._uuid_prefix}{next(self._uuid_seq)}",
            allocation_key=spec.allocation_key,
            application_id=application_id,
            node_id=node_id,
            resource=spec.resource,
            partition=self.name,
            queue_path=queue_path,
            priority=spec.priority,
            placeholder=spec.placeholder,
            task_group_name=spec.task_group_name,
            tags=spec.tags,
            ask_generation=spec.generation,
            request_time=request_time,
            create_time=now,
            instance_type=instance_type,
        )

    # ---- gang replacement --------------------------------------------------------------------------

    def replace(self, app: Application, ask: Ask, placeholder: Allocation, now: float = 0.0) -> Allocation:
        """Decide that one repeat of ``ask`` replaces ``placeholder``: the ask's repeat is taken, the
        placeholder is released to the RM (PLACEHOLDER_REPLACED) and kept until the RM confirms."""
        queue = self.queues[app.queue_path]
        # on the placeholder's node; YuniKorn: a real allocation was asked for when its placeholder was
        real = self._allocation_of(
            ask.spec,
            app.application_id,
            queue.path,
            placeholder.node_id,
            placeholder.create_time,
            now,
            placeholder.instance_type,
        ).replace(replaces=placeholder.uuid)
        app.take_pending(ask)
        queue.add_pending(ask.resource, -1)
        if ask.failed_since is not None:
            ask.failed_since = None
            self.unschedulable.pop((app.application_id, ask.allocation_key), None)
        app.begin_replacement(placeholder, real)
        self.effects.core_release(
            placeholder, si.TerminationType.PLACEHOLDER_REPLACED, f"replaced by allocation {real.uuid}"
        )
        queue.update_app(app)
        return real

    def undo_replacement(self, real: Allocation) -> None:
        """A replacement its owner refused: the placeholder is free again and the ask gets its repeat."""
        app = self.applications.get(real.application_id)
        recorded = app.replacements.get(real.replaces) if app is not None else None
        if app is None or recorded is None or recorded.uuid != real.uuid:
            return  # undone already, or a later replacement of the same placeholder
        app.drop_replacement(real.replaces)
        if app.releasing.get(real.replaces) == si.TerminationType.PLACEHOLDER_REPLACED:
            app.unmark_releasing(real.replaces)
        self.return_repeat(app, real)

    # ---- booking ----------------------------------------------------------------------------------

    def commit(self, app: Application, queue: Queue, ask: Ask, node: Node, now: float = 0.0) -> Allocation:
        """Book one allocation of ``ask`` on ``node`` everywhere it counts."""
        spec = ask.spec
        allocation = self._allocation_of(
            spec,
            app.application_id,
            queue.path,
            node.node_id,
            spec.create_time,
            now,
            node.spec.attributes.get(INSTANCE_TYPE, UNKNOWN_INSTANCE_TYPE),
        )
        app.book(ask, allocation)
        if app.user_limits is not None:
            self.ugm.allocated(app.user_limits, spec.resource)
        if ask.failed_since is not None:
            ask.failed_since = None
            self.unschedulable.pop((app.application_id, spec.allocation_key), None)
        # one pass up the path for both aggregates (pending down, allocated up)
        res.pending_to_allocated(queue.aggregates_up, spec.layout[0])  # resource_items
        node.add_allocation(allocation)
        ordering = self.registry.node_ordering
        if ordering is not None:
            ordering.update(node)
        state = app.state
        if state is _ACCEPTED or state is _STARTING:
            advance_after_allocation(
                app, spec.placeholder, lambda: self.apps.transition(app, ApplicationEvent.RUN)
            )
        if spec.placeholder or spec.execution_timeout_ms > 0:
            app.after_booking(allocation, spec.execution_timeout_ms, self.clock())
            if spec.placeholder and app.real_group_asks:
                self.replace_candidates[app.application_id] = app
        queue.app_allocated(app, ask)
        return allocation


# enum members read per allocation: a module global is several times cheaper than Enum.MEMBER
_ACCEPTED = ApplicationState.ACCEPTED
_STARTING = ApplicationState.STARTING
