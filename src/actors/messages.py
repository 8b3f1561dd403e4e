"""Messages between korral's actors. All immutable: frozen slotted attrs classes, tuples, plain values.

Resource dicts inside messages are never mutated by anyone after the message is built (the model's
arithmetic always builds new dicts for what it hands out).
"""

from __future__ import annotations

from typing import Any, NamedTuple, TypeVar, dataclass_transform

import attrs

from korral import si
from korral.config.schema import PartitionConfig
from korral.model.allocation import Allocation
from korral.model.view_ops import ViewOp
from korral.policies.placement import PlacementManager

_T = TypeVar("_T")


# attrs.frozen(slots=True, kw_only=True), short; dataclass_transform tells type checkers what it makes
@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(attrs.field,))
def frozen(cls: type[_T]) -> type[_T]:
    return attrs.frozen(slots=True, kw_only=True)(cls)


# ---- specs: what an owner tells others about its objects --------------------------------------------


@frozen
class AppSpec:
    application_id: str
    queue_path: str
    user: str
    groups: tuple[str, ...] = ()
    tags: dict[str, str] = attrs.field(factory=dict)
    submission_seq: int = 0
    placeholder_ask: dict[str, int] = attrs.field(factory=dict)
    execution_timeout_ms: int = 0
    gang_scheduling_style: str = ""
    # the group its usage is tracked against for user/group limits ("" none), resolved by the partition
    limit_group: str = ""


@frozen
class NodeSpec:
    node_id: str
    capacity: dict[str, int]
    occupied: dict[str, int] = attrs.field(factory=dict)
    attributes: dict[str, str] = attrs.field(factory=dict)
    schedulable: bool = True


# ---- RM side: requests routed from the RMProxy to partitions ------------------------------------------


@frozen
class RouteAllocationRequest:
    request: si.AllocationRequest


@frozen
class RouteApplicationRequest:
    request: si.ApplicationRequest


@frozen
class RouteNodeRequest:
    request: si.NodeRequest


@frozen
class ApplyConfig:
    config: PartitionConfig
    # the config's placement rules, built once where the config was validated (None: build them)
    placement: PlacementManager | None = None


@frozen
class StopPartition:
    """The partition goes away (RM re-registered, or removed from the config)."""


# ---- partition -> owners --------------------------------------------------------------------------


@frozen
class AddAsks:
    asks: tuple[si.AllocationAsk, ...]


@frozen
class RemoveAsks:
    allocation_keys: tuple[str, ...]  # empty: every ask of the application


@frozen
class ReleaseAllocations:
    releases: tuple[si.AllocationRelease, ...]


@frozen
class RecoverAllocations:
    allocations: tuple[Allocation, ...]
    node: Any  # Handle of the node the allocations run on


@frozen
class RemoveApplication:
    reason: str = "application removed"


@frozen
class UpdateNode:
    capacity: dict[str, int] | None = None
    occupied: dict[str, int] | None = None
    attributes: dict[str, str] | None = None


@frozen
class SetNodeSchedulable:
    schedulable: bool


@frozen
class DecommissionNode:
    reason: str


# ---- scheduler <-> owners ----------------------------------------------------------------------------


class Place(NamedTuple):
    """Scheduler -> node: book these allocations; each goes with the handle of its application.

    ``replacements`` (gang) are passed on to their applications after the placements: through the
    node, so that an application hears of a placeholder placed here before of its replacement.

    A named tuple rather than an attrs class: one is built per touched node of every batch (at 10,000
    nodes, one per allocation), and a tuple is built in a fraction of the time."""

    placements: tuple[tuple[Allocation, Any], ...]
    replacements: tuple[tuple[Allocation, Any], ...] = ()


class Placed(NamedTuple):
    """Node -> application: these allocations are booked on the node; confirm or give them back.

    A named tuple, as ``Place``: at 10,000 nodes one is built per allocation."""

    node: Any  # Handle of the node
    allocations: tuple[Allocation, ...]


@frozen
class BookRecovered:
    """Application -> node: book recovered allocations whatever the room (they already run)."""

    allocations: tuple[Allocation, ...]
    app: Any  # Handle of the owning application


@frozen
class FreeOnNode:
    """Application -> node: release these allocations' resources."""

    uuids: tuple[str, ...]


@frozen
class NodeRemoved:
    """Node -> application: the node is gone, and these allocations with it."""

    node_id: str
    uuids: tuple[str, ...]
    reason: str


@frozen
class RolledBack:
    """-> scheduler: proposals that did not become allocations; undo them in the view.

    A node that refuses sends its own facts along (``node``, ``available``), so the view can catch up
    with whatever change it had not heard of yet.
    """

    allocations: tuple[Allocation, ...]
    node: NodeSpec | None = None
    available: dict[str, int] | None = None


@frozen
class NodeAdded:
    spec: NodeSpec
    node: Any  # Handle


@frozen
class NodesAdded:
    """A node request's new nodes (without recovered allocations), in order: one message, one wake."""

    added: tuple[NodeAdded, ...]


@frozen
class NodeChanged:
    spec: NodeSpec


@frozen
class NodeGone:
    node_id: str


@frozen
class AppAdded:
    spec: AppSpec
    app: Any  # Handle


@frozen
class AppGone:
    application_id: str
    # the incarnation that is gone: an id removed and added again may have a new one by now
    app: Any = None  # Handle


@frozen
class QueueCreated:
    path: str


@frozen
class QueuesRemoved:
    paths: tuple[str, ...]


@frozen
class RunCycle:
    """Scheduler -> itself: run a batch of scheduling cycles."""


@frozen
class PreemptionDue:
    """Timer -> scheduler: a waiting ask's ``preemption.delay`` runs out now (``due``, on the core's
    clock), so it may preempt without waiting for the next tick."""

    due: float


@frozen
class Tick:
    """Timer -> scheduler / partition: time has passed (reservation delay, cleanup, timeouts)."""


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
class SwapOnNode:
    """Application -> node: the RM confirmed these replacements, (placeholder uuid, real allocation);
    each real allocation takes its placeholder's place (the node's usage moves by the difference)."""

    swaps: tuple[tuple[str, Allocation], ...]
    app: Any  # Handle of the owning application


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
    app: Any = None  # Handle


# ---- owners -> queues -----------------------------------------------------------------------------------


@frozen
class QueueUsage:
    """Usage deltas reported to a queue; it applies them and passes them to its parent."""

    allocated: dict[str, int] = attrs.field(factory=dict)
    pending: dict[str, int] = attrs.field(factory=dict)


# ---- queries --------------------------------------------------------------------------------------------


@frozen
class Snapshot:
    """Ask an owner (queue, application, node) or the scheduler for a consistent snapshot of what it
    owns. A partition is asked with the typed queries below."""


# ---- queries: what korral.Core asks a partition, each answered with korral.info snapshots ------------


@frozen
class PartitionQuery:
    """Base of the read-only questions a partition answers (never changes scheduling state)."""


@frozen
class PartitionSummary(PartitionQuery):
    """-> PartitionInfo"""


@frozen
class QueueQuery(PartitionQuery):
    """-> QueueInfo | None, with the queue's usage asked of it (ordered after what it was sent)."""

    path: str


@frozen
class QueueTreeQuery(PartitionQuery):
    """-> list[QueueInfo], parents first, with the usage each queue last published."""


@frozen
class ApplicationQuery(PartitionQuery):
    """-> ApplicationInfo | None (a completed one as it left)."""

    application_id: str


@frozen
class ApplicationsQuery(PartitionQuery):
    """-> list[ApplicationInfo] of the partition's live applications."""


@frozen
class CompletedApplicationsQuery(PartitionQuery):
    """-> list[ApplicationInfo] of the applications that completed and left."""


@frozen
class NodeQuery(PartitionQuery):
    """-> NodeInfo | None"""

    node_id: str


@frozen
class NodesQuery(PartitionQuery):
    """-> list[NodeInfo]"""


@frozen
class SchedulerStatsQuery(PartitionQuery):
    """-> dict of the partition's scheduler counters."""


@frozen
class UserUsageQuery(PartitionQuery):
    """-> UserUsageInfo | None"""

    user: str


@frozen
class GroupUsageQuery(PartitionQuery):
    """-> GroupUsageInfo | None"""

    group: str


@frozen
class UsersUsageQuery(PartitionQuery):
    """-> list[UserUsageInfo] of every user with an application in the partition, by name."""


@frozen
class GroupsUsageQuery(PartitionQuery):
    """-> list[GroupUsageInfo] of every group usage is tracked for (a group limit applies), by name."""


# ---- callbacks -----------------------------------------------------------------------------------------


# the RM callback's methods that the core calls (``ResourceManagerCallback``) other than predicates,
# which the scheduler calls itself and waits on
CALLBACK_METHODS = frozenset(
    {
        "update_allocation",
        "update_application",
        "update_node",
        "send_event",
        "update_container_scheduling_state",
    }
)


@frozen
class Deliver:
    """-> dispatcher: call one RM callback method with one argument.

    A method that is not one of ``CALLBACK_METHODS`` (a misspelling) fails where the message is built,
    rather than being dropped unseen by the dispatcher."""

    method: str = attrs.field(validator=attrs.validators.in_(CALLBACK_METHODS))
    argument: Any
    # (handle, message) told once the RM's method has returned (or failed, or was not called): work
    # that should not compete with this answer for the GIL (a partition's StartNodeActors)
    then: tuple[Any, Any] | None = None


@attrs.frozen(slots=True)
class RecoveredGone:
    """Application -> partition: these recovered allocations are no longer live (their uuids are free)."""

    uuids: tuple[str, ...]


@attrs.frozen(slots=True)
class AppBackoffs:
    """Scheduler -> partition: the backoff deadline (epoch seconds) each of these applications got
    (YUNIKORN-3115), kept by the partition for application snapshots as node reservations are."""

    deadlines: tuple[tuple[str, float], ...]


@attrs.frozen(slots=True)
class NodeReservations:
    """Scheduler -> partition: the applications holding a reservation on each of these nodes (several
    only when each requires the node; () = none).

    The partition keeps a copy for node snapshots, so reading a node never waits on the scheduler,
    which may be inside the RM's predicates callback that is doing the reading.
    """

    reservations: tuple[tuple[str, tuple[str, ...]], ...]


@attrs.frozen(slots=True)
class SchedulerDone:
    """Scheduler -> a removed application or node: nothing more will come from the scheduler."""


@attrs.frozen(slots=True)
class Retire:
    """Partition -> a removed actor: stop once nothing more can reach you (see ``RetiringActor``)."""


@frozen
class Preempt:
    """Scheduler -> application: release these allocations to the RM as PREEMPTED_BY_SCHEDULER (they
    stay booked until it confirms); one the owner cannot preempt is handed back (``unpreempt``)."""

    uuids: tuple[str, ...]
    message: str
