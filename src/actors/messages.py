"""The protocol of the partition's actors: every message a partition, its scheduler, applications and
nodes send or are sent, their timers' and self-kicks included (the Registrar's and the RMProxy's
protocol is ``korral.actors.rm_messages``). All are ``korral.records.frozen`` records holding
values, tuples and the records of the model, but a ``Handle`` (an actor's address) and a partition's
``PlacementManager``.

Resource dicts inside messages are never mutated by anyone after the message is built (the model's
arithmetic always builds new dicts for what it hands out).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, Literal, NamedTuple, TypeVar

import attrs

from korral import si
from korral.config.schema import PartitionConfig, QueueConfig
from korral.info import (
    ApplicationInfo,
    GroupUsageInfo,
    NodeInfo,
    PartitionInfo,
    QueueInfo,
    UserUsageInfo,
)
from korral.model.allocation import Allocation
from korral.model.app.spec import AppSpec
from korral.model.node import NodeSpec
from korral.model.queue_spec import QueueSpec
from korral.model.view_ops import ViewOp
from korral.policies.placement import PlacementManager
from korral.records import frozen

if TYPE_CHECKING:
    from korral.actors.base import Handle
    from korral.callback import ResourceManagerCallback


# ---- specs: what an owner tells others about its objects --------------------------------------------


# ---- RM side: requests routed from the RMProxy to partitions ------------------------------------------


@frozen
class RouteAllocationRequest:
    request: si.AllocationRequest
    # the request's korral.actors.in_flight.Receipt: let go once this message is handled
    receipt: object = attrs.field(default=None, eq=False, repr=False)


@frozen
class RouteApplicationRequest:
    request: si.ApplicationRequest
    # the request's korral.actors.in_flight.Receipt: let go once this message is handled
    receipt: object = attrs.field(default=None, eq=False, repr=False)


@frozen
class RouteNodeRequest:
    request: si.NodeRequest
    # the request's korral.actors.in_flight.Receipt: let go once this message is handled
    receipt: object = attrs.field(default=None, eq=False, repr=False)


@frozen
class ApplyConfig:
    config: PartitionConfig
    # the config's placement rules, built once where the config was validated (None: build them)
    placement: PlacementManager | None = None
    # partition -> scheduler: every queue's spec as the queue actors made it (None: none given)
    queues: tuple[QueueSpec, ...] | None = None


@frozen
class DrainPartition:
    """RMProxy -> partition: a reload left it out (YuniKorn marks it for deletion). It takes no new
    application, keeps booking what runs until the RM releases it, and tells ``proxy``
    ``PartitionDrained`` once it holds no application. A later ``ApplyConfig`` makes it active again."""

    rm_proxy: Handle


@frozen
class PartitionDrained:
    """Partition -> RMProxy: a draining partition holds no application any more: remove it."""

    rm_id: str
    name: str


@frozen
class StopPartition:
    """The partition goes away (RM re-registered, or removed from the config)."""


# ---- partition -> owners --------------------------------------------------------------------------


@frozen
class AddAsks:
    asks: tuple[si.AllocationAsk, ...]
    # the request's korral.actors.in_flight.Receipt: let go once this message is handled
    receipt: object = attrs.field(default=None, eq=False, repr=False)


@frozen
class RemoveAsks:
    allocation_keys: tuple[str, ...]  # empty: every ask of the application
    # the request's korral.actors.in_flight.Receipt: let go once this message is handled
    receipt: object = attrs.field(default=None, eq=False, repr=False)


@frozen
class ReleaseAllocations:
    releases: tuple[si.AllocationRelease, ...]
    # the request's korral.actors.in_flight.Receipt: let go once this message is handled
    receipt: object = attrs.field(default=None, eq=False, repr=False)


@frozen
class RecoverAllocations:
    """Partition -> application: allocations the RM reported running on a new node (the scheduler's
    view has them booked on it already)."""

    allocations: tuple[Allocation, ...]


@frozen
class RemoveApplication:
    reason: str = "application removed"


@frozen
class UpdateNode:
    """Partition -> node: the RM's update, checked (what it reports replaces what it was; None:
    unchanged)."""

    capacity: dict[str, int] | None = None
    occupied: dict[str, int] | None = None
    attributes: dict[str, str] | None = None


@frozen
class SetNodeSchedulable:
    """Partition -> node: the RM drains the node, or makes it schedulable again."""

    schedulable: bool


@frozen
class Decommission:
    """Partition -> node: the RM decommissioned the node; it tells the scheduler ``NodeGone`` after
    every change it published, then retires."""


# ---- scheduler <-> owners ----------------------------------------------------------------------------


class Placed(NamedTuple):
    """Scheduler -> application: allocations its view decided; the application confirms each one its
    ask still wants (and reports it to the RM) or gives it back (``RollBack``). One per application
    per batch of cycles.

    The view is the one writer of a node's free room and the one record of its allocations: it
    booked these on their nodes when it decided, and nothing checks the fit a second time
    (docs/architecture.md, "Who owns what").

    A named tuple rather than an attrs class: one is built per application of every batch, and a tuple
    is built in a fraction of the time."""

    allocations: tuple[Allocation, ...]


@frozen
class NodeRemoved:
    """Scheduler -> application: the node is gone, and these allocations with it (every one the view
    had there, after the ``Placed`` that brought any of them: those the application gave back or
    released meanwhile it no longer holds)."""

    node_id: str
    uuids: tuple[str, ...]
    reason: str


@frozen
class NodeAdded:
    spec: NodeSpec


@frozen
class NodesAdded:
    """A node request's new nodes (without recovered allocations), in order: one message, one wake."""

    added: tuple[NodeAdded, ...]


@frozen
class NodeChanged:
    """Node -> scheduler and partition: the node's new spec, whole (read by reference)."""

    spec: NodeSpec


@frozen
class NodeGone:
    """Node -> scheduler: this node (of this incarnation) left, with whatever ran on it."""

    node_id: str
    incarnation: int


@frozen
class AppAdded:
    spec: AppSpec  # the partition's, shared (korral.model.app.spec)
    app: Handle
    # the group its usage is tracked against for user/group limits ("" none), resolved by the partition
    limit_group: str = ""
    # its queue's spec once the application's namespace tags applied (its actor's, by reference)
    queue: QueueSpec | None = None


@frozen
class AppGone:
    application_id: str
    # the incarnation that is gone: an id removed and added again may have a new one by now
    app: Handle | None = None


@frozen
class QueueCreated:
    """Partition -> scheduler: a queue placement created, parents announced before their children,
    with the spec its actor holds (by reference)."""

    path: str
    leaf: bool
    spec: QueueSpec | None = None


# ---- partition -> queue: each answered with the queue's new QueueSpec (korral.model.queue_spec) --------


@frozen
class ConfigureQueue:
    """A reload configures the queue so (its own configuration: no children, no user limits)."""

    config: QueueConfig


@frozen
class DrainQueue:
    """A reload no longer has the queue: it takes no new applications and goes once empty."""


@frozen
class TagQueue:
    """An application placed in this dynamic queue carries these tags (namespace quota tags)."""

    tags: tuple[tuple[str, str], ...]


@frozen
class QueuesRemoved:
    paths: tuple[str, ...]


@frozen
class RunCycle:
    """Scheduler -> itself: run a batch of scheduling cycles."""


@frozen
class DeadlineDue:
    """Timer -> scheduler: a deadline of the scheduling view's runs out now (``due``, on the core's
    clock): a preemption or quota preemption delay, a backoff, a reservation delay or wait."""

    due: float


@frozen
class Tick:
    """Timer -> scheduler, every ``scheduling_interval``: report outstanding asks, and a safety net
    for what time changes (every deadline also has its own ``DeadlineDue``)."""


@frozen
class CompletingTimeout:
    """Timer -> application: check whether Completing has lasted long enough."""

    since: float


# ---- gang scheduling and timeouts ----------------------------------------------------------------------


@frozen
class Replace:
    """Node -> application (for the scheduler): each real allocation replaces the placeholder it
    names; release the placeholder to the RM, or hand the decision back (``unreplace``)."""

    allocations: tuple[Allocation, ...]


@frozen
class TimeoutsDue:
    """Timer -> application: a deadline of the application (placeholder or execution timeout) is due."""


@frozen
class ViewOps:
    """Application -> scheduler: changes to apply to the view, in the order they happened (the
    operations are typed, see ``korral.model.view_ops``)."""

    application_id: str
    ops: tuple[ViewOp, ...]
    # the incarnation they are about (an id removed and added again is a new one); None: the current
    app: Handle | None = None


# ---- an actor's own: timers and self-kicks -------------------------------------------------------------


@frozen
class CleanupQueues:
    """Timer -> partition: remove empty dynamic queues and empty draining queues."""


@frozen
class RetireTombstones:
    """Timer -> partition: ask removed actors that have not stopped yet to retire again."""


@frozen
class PublishQueueTree:
    """Partition -> itself: publish the queue tree's structure on the board, once per burst of changes."""


@frozen
class StartNodeActors:
    """Partition -> itself: start the actors of the nodes registered so far, a step at a time."""


@frozen
class FlushOut:
    """Application -> itself: send what the last burst of messages produced."""


@frozen
class AppFinished:
    """Application -> partition: the application completed and leaves the partition."""

    application_id: str
    state: str
    info: ApplicationInfo


# ---- queries --------------------------------------------------------------------------------------------


@frozen
class Snapshot:
    """Ask an owner (queue, application, node) or the scheduler for a consistent snapshot of what it
    owns. A partition is asked with the typed queries below."""


# ---- queries: what korral.Core asks a partition, each answered with korral.info snapshots ------------


# what a PartitionQuery is answered with
Answer = TypeVar("Answer", covariant=True)


@frozen
class PartitionQuery(Generic[Answer]):
    """Base of the read-only questions a partition answers (never changes scheduling state); typed by
    its answer (``Core`` reads the answer as that type)."""


@frozen
class PartitionSummary(PartitionQuery[PartitionInfo]):
    """-> PartitionInfo"""


@frozen
class QueueQuery(PartitionQuery[QueueInfo | None]):
    """-> QueueInfo | None, with the queue's usage asked of it (ordered after what it was sent)."""

    path: str


@frozen
class QueueTreeQuery(PartitionQuery[list[QueueInfo]]):
    """-> list[QueueInfo], parents first, with the usage each queue last published."""


@frozen
class ApplicationQuery(PartitionQuery[ApplicationInfo | None]):
    """-> ApplicationInfo | None (a completed one as it left)."""

    application_id: str


@frozen
class ApplicationsQuery(PartitionQuery[list[ApplicationInfo]]):
    """-> list[ApplicationInfo] of the partition's live applications."""


@frozen
class CompletedApplicationsQuery(PartitionQuery[list[ApplicationInfo]]):
    """-> list[ApplicationInfo] of the applications that completed and left."""


@frozen
class NodeQuery(PartitionQuery[NodeInfo | None]):
    """-> NodeInfo | None"""

    node_id: str


@frozen
class NodesQuery(PartitionQuery[list[NodeInfo]]):
    """-> list[NodeInfo]"""


@frozen
class SchedulerStatsQuery(PartitionQuery[dict[str, int]]):
    """-> dict of the partition's scheduler counters."""


@frozen
class UserUsageQuery(PartitionQuery[UserUsageInfo | None]):
    """-> UserUsageInfo | None"""

    user: str


@frozen
class GroupUsageQuery(PartitionQuery[GroupUsageInfo | None]):
    """-> GroupUsageInfo | None"""

    group: str


@frozen
class UsersUsageQuery(PartitionQuery[list[UserUsageInfo]]):
    """-> list[UserUsageInfo] of every user with an application in the partition, by name."""


@frozen
class GroupsUsageQuery(PartitionQuery[list[GroupUsageInfo]]):
    """-> list[GroupUsageInfo] of every group usage is tracked for (a group limit applies), by name."""


# ---- callbacks -----------------------------------------------------------------------------------------


# The RM callback's methods that the core calls (``ResourceManagerCallback``) other than predicates,
# which the scheduler calls itself and waits on. Each takes one argument type, and that type is what
# names the method a ``Deliver`` calls: no message carries a method's name.
CallbackMethod = Literal[
    "update_allocation",
    "update_application",
    "update_node",
    "send_event",
    "update_container_scheduling_state",
]
CallbackArgument = (
    si.AllocationResponse
    | si.ApplicationResponse
    | si.NodeResponse
    | list[si.EventRecord]
    | si.UpdateContainerSchedulingStateRequest
)


def _update_allocation(rm: ResourceManagerCallback, argument: CallbackArgument) -> None:
    assert isinstance(argument, si.AllocationResponse)
    rm.update_allocation(argument)


def _update_application(rm: ResourceManagerCallback, argument: CallbackArgument) -> None:
    assert isinstance(argument, si.ApplicationResponse)
    rm.update_application(argument)


def _update_node(rm: ResourceManagerCallback, argument: CallbackArgument) -> None:
    assert isinstance(argument, si.NodeResponse)
    rm.update_node(argument)


def _send_event(rm: ResourceManagerCallback, argument: CallbackArgument) -> None:
    assert isinstance(argument, list)
    rm.send_event(argument)


def _update_container_scheduling_state(rm: ResourceManagerCallback, argument: CallbackArgument) -> None:
    assert isinstance(argument, si.UpdateContainerSchedulingStateRequest)
    rm.update_container_scheduling_state(argument)


# the argument's type -> the method that takes it, and the typed call that hands it to the RM
_CALLS: dict[type, tuple[CallbackMethod, Callable[[ResourceManagerCallback, CallbackArgument], None]]] = {
    si.AllocationResponse: ("update_allocation", _update_allocation),
    si.ApplicationResponse: ("update_application", _update_application),
    si.NodeResponse: ("update_node", _update_node),
    list: ("send_event", _send_event),
    si.UpdateContainerSchedulingStateRequest: (
        "update_container_scheduling_state",
        _update_container_scheduling_state,
    ),
}
CALLBACK_METHODS: frozenset[CallbackMethod] = frozenset(method for method, _ in _CALLS.values())


def _taken_by_a_callback(
    instance: Deliver, attribute: attrs.Attribute[CallbackArgument], value: object
) -> None:
    if type(value) not in _CALLS:
        takes = ", ".join(sorted(kind.__name__ for kind in _CALLS))
        raise TypeError(f"no RM callback takes a {type(value).__name__} (they take: {takes})")


@frozen
class Deliver:
    """-> dispatcher: hand ``argument`` to the RM callback's method that takes its type (``call``).

    The argument's type is checked where the message is built: one no callback takes fails there,
    rather than being dropped or failing unseen in the RM's thread."""

    argument: CallbackArgument = attrs.field(validator=_taken_by_a_callback)
    # (handle, message) told once the RM's method has returned (or failed, or was not called): work
    # that should not compete with this answer for the GIL (a partition's StartNodeActors)
    then: tuple[Handle, object] | None = None

    @property
    def method(self) -> CallbackMethod:
        """The RM callback's method this calls (for logs, observers and an RM that lacks it)."""
        return _CALLS[type(self.argument)][0]

    def call(self, rm: ResourceManagerCallback) -> None:
        """Hand the argument to the RM's method (a typed call per argument type)."""
        _CALLS[type(self.argument)][1](rm, self.argument)

    def __repr__(self) -> str:
        # names the method, as the simulated runtime's traces (``Core.trace``) always have
        return f"Deliver(method={self.method!r}, argument={self.argument!r}, then={self.then!r})"


@frozen
class RecoveredGone:
    """Application -> partition: these recovered allocations are no longer live (their uuids are free)."""

    uuids: tuple[str, ...]


@frozen
class AppBackoffs:
    """Scheduler -> partition: the backoff deadline (epoch seconds) each of these applications got
    (YUNIKORN-3115), kept by the partition for application snapshots as node reservations are."""

    deadlines: tuple[tuple[str, float], ...]


@frozen
class NodeReservations:
    """Scheduler -> partition: the asks holding a reservation on each of these nodes (several
    only when each requires the node; () = none).

    The partition keeps a copy for node snapshots, so reading a node never waits on the scheduler,
    which may be inside the RM's predicates callback that is doing the reading.
    """

    # node id -> (application id, allocation key) of each ask holding it
    reservations: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]


@frozen
class SchedulerDone:
    """Scheduler -> a removed application: nothing more will come from the scheduler."""


@frozen
class Retire:
    """Partition -> a removed actor: stop once nothing more can reach you (see ``RetiringActor``)."""


@frozen
class Preempt:
    """Scheduler -> application: release these allocations to the RM as PREEMPTED_BY_SCHEDULER (they
    stay booked until it confirms); one the owner cannot preempt is handed back (``unpreempt``)."""

    uuids: tuple[str, ...]
    message: str
