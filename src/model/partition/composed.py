"""A partition: queue tree, applications and nodes, and YuniKorn's scheduling walk over them.

Plain synchronous code. The sequential reference scheduler drives one of these directly; the actor
system's Scheduler actor holds one as its decision view (``korral.model.view``) and the Partition
actor one as its registry (``UnscheduledPartition``), which places applications but holds none: their
owners do (``PartitionMembers`` keeps their specs for the actor). Every operation either completes or raises
``ModelError`` before changing anything, so a rejected request leaves no partial state behind.

``PartitionModel`` is composed of parts, each a plain class with its own state and one job, made and
wired here (each is handed the parts it calls, nothing else):

- ``registry`` (``partition.registry``): the queue tree and its config, the nodes, the capacity;
- ``apps`` (``partition.apps``): placement; applications and asks, state transitions, timeouts (the
  view composes ``ViewApplications``: states come from the owners);
- ``reserver`` (``reservations``): which ask holds which node, since when;
- ``allocator`` (``partition.allocations``): booking, recovery, releases, gang replacement;
- ``walker`` (``partition.walk``): the scheduling cycle, and the preemption attempts of a cycle;
- ``quota_preemption`` (``quota_preempting``): quota preemption's timers and runs;
- ``node_ordering`` (``node_order``), ``predicates`` (``rm_predicates``), ``ugm`` (``ugm``);
- ``effects`` (``partition.effects``): what the parts produced for the driver, ``take_effects()``.

A role is which parts are composed: the Partition actor's registry (``UnscheduledPartition``) has no
node order, no quota preemption and no walk. The partition's operations are its parts' own methods,
exposed under their names (``add_ask`` is ``apps.add_ask``); the few that span parts (configuration,
removing a node, recovering an allocation) are written out here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from korral.config.schema import PartitionConfig
from korral.model.allocation import Allocation
from korral.model.node import Node
from korral.model.node_order import NodeOrder
from korral.model.order import IncrementalOrder
from korral.model.partition.allocations import PartitionAllocations
from korral.model.partition.apps import TAG_CREATE_FORCE, PartitionApplications
from korral.model.partition.effects import EffectsRecorder, PartitionEffects, StateChange
from korral.model.partition.registry import ModelError, PartitionRegistry, UnschedulableAsk
from korral.model.partition.walk import SchedulingWalk
from korral.model.queue_spec import (
    TAG_RESOURCE_GUARANTEED,
    TAG_RESOURCE_MAX_APPS,
    TAG_RESOURCE_QUOTA,
    QueueSpecWriter,
)
from korral.model.quota_preempting import QuotaPreemption
from korral.model.reservations import RESERVATION_WAIT_TIMEOUT, Reservations
from korral.model.rm_predicates import NodesPredicate, Predicate, RMPredicates
from korral.model.ugm import UserGroupTracker
from korral.policies.placement import PlacementManager, PlacementRuleError
from korral.policies.usergroups import UserGroupCache

__all__ = [
    "TAG_CREATE_FORCE",
    "TAG_RESOURCE_GUARANTEED",
    "TAG_RESOURCE_MAX_APPS",
    "TAG_RESOURCE_QUOTA",
    "ModelError",
    "NodesPredicate",
    "PartitionModel",
    "Predicate",
    "StateChange",
    "UnschedulableAsk",
    "UnscheduledPartition",
]


# the parts' operations a partition exposes under their own names, bound per instance in __init__
PART_OPERATIONS = (
    "get_queue",
    "create_queue",
    "remove_queue",
    "cleanup_queues",
    "refresh_limits",
    "add_node",
    "add_node_spec",
    "set_node",
    "update_node",
    "set_node_schedulable",
    "add_application",
    "add_si_application",
    "application",
    "track_user",
    "user_group_usage",
    "remove_application",
    "expire_completing",
    "expire_timeouts",
    "add_ask",
    "add_si_asks",
    "remove_ask",
    "reserve",
    "unreserve",
    "new_uuid",
    "recovery_reason",
    "recovered_uuid",
    "sort_recovered",
    "forget_recovered",
    "release_allocation",
    "release_allocations",
    "confirm_release",
    "swap_in",
    "core_release",
    "replace",
    "commit",
    "schedule",
    "schedule_one",
)


class PartitionModel:
    # YuniKorn's reservation wait time (korral.model.reservations); a test may shorten it per model
    reservation_wait_timeout = RESERVATION_WAIT_TIMEOUT
    # the applications part: who decides an application's state is part of a role (the view's differs)
    applications_part: type[PartitionApplications] = PartitionApplications

    def __init__(
        self,
        name: str,
        config: PartitionConfig,
        *,
        rm_id: str = "",
        reservation_delay: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        predicate: Predicate | None = None,
        nodes_predicate: NodesPredicate | None = None,
        candidates_per_call: int = 1,
        placeholder_timeout: float = 900.0,
        uuid_token: str | None = None,
        node_order: Callable[[Mapping[str, Node]], NodeOrder] | None = NodeOrder,
        quota_preemption: Callable[[], QuotaPreemption] | None = QuotaPreemption,
        queue_specs: QueueSpecWriter | None = None,
    ) -> None:
        """``node_order`` and ``quota_preemption`` make those parts; None leaves them (and the walk,
        which needs a node order) out: a partition that is never scheduled. ``queue_specs`` makes each
        queue's next configuration and state (None: the rules, applied here)."""
        self.name = name
        self.rm_id = rm_id
        self.clock = clock
        self.reservation_delay = reservation_delay
        self._latencies: list[tuple[str, float]] | None = None
        # ---- the parts, each made with the parts it calls ----
        self.effects = EffectsRecorder()
        # the RM's say on a node for an ask (model.rm_predicates)
        self.predicates = RMPredicates(predicate, nodes_predicate, candidates_per_call)
        # user and group usage and limits (YuniKorn's user/group manager)
        self.ugm = UserGroupTracker(config)
        self.quota_preemption = quota_preemption() if quota_preemption is not None else None
        self.registry = registry = PartitionRegistry(
            name, config, clock=clock, node_order=node_order, queue_specs=queue_specs
        )
        self.node_ordering = registry.node_ordering
        self.apps = apps = self.applications_part(
            registry, self.ugm, self.effects, clock=clock, placeholder_timeout=placeholder_timeout
        )
        self.reserver = reserver = Reservations(registry, apps.applications, self.effects, clock)
        self.allocator = allocator = PartitionAllocations(
            registry, apps, reserver, self.ugm, self.effects, clock=clock, uuid_token=uuid_token
        )
        apps.wire(allocator, reserver)
        self.walker = (
            SchedulingWalk(
                self,
                registry,
                apps,
                allocator,
                reserver,
                self.ugm,
                self.predicates,
                self.effects,
                self.quota_preemption,
                self.node_ordering,
                clock=clock,
                reservation_delay=reservation_delay,
            )
            if self.node_ordering is not None
            else None
        )
        # ---- the parts' state, read where the partition is read (the same objects, never copies) ----
        self.root = registry.root
        self.queues = registry.queues
        self.nodes = registry.nodes
        self.capacity = registry.capacity
        self.applications = apps.applications
        self.unschedulable = apps.unschedulable
        self.replace_candidates = apps.replace_candidates
        self.reservations = reserver.reservations
        self.reserved_at = reserver.reserved_at
        self.preempt_attempts: dict[str, int] = (
            self.walker.preempt_attempts if self.walker is not None else {}
        )
        self.uuid_token = allocator.uuid_token
        # ---- the parts' operations, under their own names ----
        self.get_queue = registry.get_queue
        self.create_queue = registry.create_queue
        self.remove_queue = registry.remove_queue
        self.cleanup_queues = registry.cleanup_queues
        self.refresh_limits = registry.refresh_limits
        self.add_node = registry.add_node
        self.add_node_spec = registry.add_node_spec
        self.set_node = registry.set_node
        self.update_node = registry.update_node
        self.set_node_schedulable = registry.set_node_schedulable
        self.add_application = apps.add_application
        self.add_si_application = apps.add_si_application
        self.application = apps.application
        self.track_user = apps.track_user
        self.user_group_usage = apps.user_group_usage
        self.remove_application = apps.remove_application
        self.expire_completing = apps.expire_completing
        self.expire_timeouts = apps.expire_timeouts
        self.add_ask = apps.add_ask
        self.add_si_asks = apps.add_si_asks
        self.remove_ask = apps.remove_ask
        self.reserve = reserver.reserve
        self.unreserve = reserver.unreserve
        self.new_uuid = allocator.new_uuid
        self.recovery_reason = allocator.recovery_reason
        self.recovered_uuid = allocator.recovered_uuid
        self.sort_recovered = allocator.sort_recovered
        self.forget_recovered = allocator.forget_recovered
        self.release_allocation = allocator.release_allocation
        self.release_allocations = allocator.release_allocations
        self.confirm_release = allocator.confirm_release
        self.swap_in = allocator.swap_in
        self.core_release = allocator.core_release
        self.replace = allocator.replace
        self.commit = allocator.commit
        # the walk's cycles (``SchedulingWalk.schedule``, ``schedule_one``; refused without a walk)
        walker = self.walker
        self.schedule: Callable[..., list[Allocation]] = (
            walker.schedule if walker is not None else self._not_scheduled
        )
        self.schedule_one: Callable[[], Allocation | None] = (
            walker.schedule_one if walker is not None else self._not_scheduled
        )
        self.apply_config(config, initial=True)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass (the scheduler's view) may not define a part's operation: the instance's bound
        one would hide it without a word. It changes the part, or adds an operation of its own."""
        super().__init_subclass__(**kwargs)
        hidden = sorted(name for name in PART_OPERATIONS if name in cls.__dict__)
        if hidden:
            raise TypeError(f"{cls.__name__} defines {hidden}: the partition's parts carry those operations")

    # ---- what spans parts ----------------------------------------------------------------------------

    def apply_config(
        self, config: PartitionConfig, *, initial: bool = False, placement: PlacementManager | None = None
    ) -> None:
        """Create or update queues from config; queues no longer configured are marked Draining.

        Raises ModelError when the placement rules cannot be built on a reload (the old rules stay);
        at creation a broken rule set leaves placement inactive, as YuniKorn does. ``placement``: the
        config's rules, already built by the caller (who validated them).
        """
        if placement is None:
            try:
                placement = PlacementManager.build(config.placement_rules)
            except PlacementRuleError as error:
                if not initial:
                    raise ModelError(f"placement rules rejected: {error}") from error
                placement = PlacementManager.build(())
        quota = self.quota_preemption
        before = quota.limits_before(self) if quota is not None else {}
        self.registry.configure(config, placement)
        # usage kept (rebuilt from what the applications hold): lowered limits block new work, never evict
        held = {app_id: (app.allocated, len(app.allocations)) for app_id, app in self.applications.items()}
        for app_id, tracking in self.ugm.apply_config(config, held).items():
            self.applications[app_id].user_limits = tracking
        if quota is not None:
            quota.after_config(self, before, self.clock())

    def remove_node(self, node_id: str, *, complete: bool = True) -> list[Allocation]:
        """Remove a node: its reservation is cancelled and its allocations released (returned).

        ``complete=False`` leaves application states alone (the scheduler's view: the owners decide).
        """
        node = self.registry.node(node_id)
        released: list[Allocation] = []
        for allocation in list(node.allocations.values()):
            done = self.release_allocation(allocation.application_id, allocation.uuid, complete=complete)
            if done is not None:
                released.append(done)
        for holder in node.reservations:
            self.unreserve(*holder)
        self.registry.drop_node(node)
        return released

    def recover_allocation(self, allocation: Allocation) -> Allocation:
        """Add an allocation the RM already runs (registration/recovery): no fit or quota check. Its
        queue may now be over a lowered max: quota preemption's timer starts (a restart resets it)."""
        recovered = self.allocator.recover_allocation(allocation)
        if self.quota_preemption is not None:
            self.quota_preemption.after_recovery(self, self.queues[recovered.queue_path], self.clock())
        return recovered

    def undo_replacement(self, real: Allocation) -> None:
        """A replacement its owner refused (``PartitionAllocations.undo_replacement``)."""
        self.allocator.undo_replacement(real)

    def _not_scheduled(self, limit: int | None = None) -> Any:
        raise ModelError(f"partition {self.name} is not scheduled here (it has no node order)")

    def take_effects(self) -> PartitionEffects:
        """What the operations produced since the last call (core releases, request events, nodes
        whose reservations changed, when to wake); the partition starts a new record."""
        return self.effects.take()

    # ---- facts read through ------------------------------------------------------------------------

    @property
    def config(self) -> PartitionConfig:
        return self.registry.config

    @property
    def placement(self) -> PlacementManager:
        return self.registry.placement

    @property
    def user_groups(self) -> UserGroupCache:
        return self.registry.user_groups

    @property
    def placeholder_timeout(self) -> float:
        return self.apps.placeholder_timeout

    @property
    def node_order(self) -> IncrementalOrder[Node]:
        return self.ordering().order

    @property
    def node_sort_policy(self) -> str:
        return self.registry.node_sort_policy

    @property
    def resource_weights(self) -> Mapping[str, float]:
        return self.ordering().weights

    def ordering(self) -> NodeOrder:
        """The node order part (ModelError when the partition keeps none)."""
        if self.node_ordering is None:
            raise ModelError(f"partition {self.name} keeps no node order")
        return self.node_ordering

    @property
    def quota_timers(self) -> dict[str, float]:
        """Queue path -> when its lowered max is enforced (quota preemption; none when not composed)."""
        return self.quota_preemption.timers if self.quota_preemption is not None else {}

    @property
    def quota_running(self) -> dict[str, tuple[tuple[str, str], ...]]:
        """Queue path -> the victims of its quota preemption run still being released."""
        return self.quota_preemption.running if self.quota_preemption is not None else {}

    @property
    def latencies(self) -> list[tuple[str, float]] | None:
        """(kind, seconds) of the latencies YuniKorn's metrics time, while a reader wants them (None:
        not timed): "trynode", "trynode_evaluation", "trypreemption", "sort_queue", "sort_app"."""
        return self._latencies

    @latencies.setter
    def latencies(self, latencies: list[tuple[str, float]] | None) -> None:
        self._latencies = self.registry.latencies = self.predicates.latencies = latencies
        if self.walker is not None:
            self.walker.walk_latencies = None if latencies is None else []

    def take_latencies(self) -> tuple[list[tuple[str, float]], list[float]]:
        """The latencies timed since the last call, emptied here: the (kind, seconds) records, and the
        seconds of each node walk without the RM's predicates (a "trynode" and a "trynode_evaluation"
        each, kept apart as there is one per allocation)."""
        records = self._latencies
        walks = self.walker.walk_latencies if self.walker is not None else None
        taken: tuple[list[tuple[str, float]], list[float]] = (list(records or ()), list(walks or ()))
        if records:
            records.clear()
        if walks:
            walks.clear()
        return taken


def UnscheduledPartition(name: str, config: PartitionConfig, **settings: Any) -> PartitionModel:
    """A partition that is never scheduled: the Partition actor's registry of the structure (queues,
    nodes, capacity), which places applications and holds none of them. Composed without the parts
    that only scheduling needs: no node order, as nothing walks one, no walk, and no quota preemption
    (the Scheduler's view decides it)."""
    return PartitionModel(name, config, node_order=None, quota_preemption=None, **settings)
