"""The RM-facing actors' protocol: what ``korral.Core`` sends the Registrar and the RMProxy, and what
those two say to each other. (The partition actors' protocol is ``korral.actors.messages``.)

Every message is an immutable record (``korral.records.frozen``); its mappings are read-only views
and its sequences tuples. What is not a value is said so: a ``Handle`` (an actor's address), the RM's
callback object and its ``closed`` event (the RM's own, held by reference so that a registration that
ends stops every later call), a ``PlacementManager`` (built by the caller for the one partition that
uses it after) and a ``QueueBoard`` (what a partition's actors publish, read without a message).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from korral import si
from korral.actors.base import Handle
from korral.callback import ResourceManagerCallback
from korral.config.schema import PartitionConfig, SchedulerConfig
from korral.records import frozen
from korral.si.validate import Checked

if TYPE_CHECKING:
    from korral.actors.queue_board import QueueBoard
    from korral.policies.placement import PlacementManager

# ---- core -> registrar: answered once, after everything below has happened ---------------------------


@frozen
class Register:
    """Answered with the RM's response once its partitions run, or the refusal."""

    request: si.RegisterResourceManagerRequest
    callback: ResourceManagerCallback
    # the request's config, parsed and validated by the caller
    config: SchedulerConfig = attrs.field(repr=False)


@frozen
class UpdateConfiguration:
    """Answered None once the partitions the update adds run, or the refusal."""

    request: si.UpdateConfigurationRequest
    # parsed, validated and with each partition's placement rules built by the caller
    config: SchedulerConfig = attrs.field(repr=False)
    placements: Mapping[str, PlacementManager] = attrs.field(repr=False)


@frozen
class Unregister:
    """The RM leaves; answered None once its partitions have stopped."""

    rm_id: str


# ---- registrar <-> RMProxy -------------------------------------------------------------------------


@frozen
class RMConnection:
    """What the partitions of one registration of an RM are started with, and the registration's
    identity: a later registration of the same RM gets a new one, so an ``Install`` or ``Withdraw``
    for an earlier one is recognised as overtaken."""

    rm_id: str
    callback: ResourceManagerCallback
    dispatcher: Handle  # the CallbackDispatcher that delivers this RM's callbacks in order
    # set when the registration ends: from then on nothing calls this RM's callback object again
    closed: threading.Event


@frozen
class Admit:
    """An RM registers (again). Answered ``Admitted`` or the refusal."""

    request: si.RegisterResourceManagerRequest
    callback: ResourceManagerCallback
    config: SchedulerConfig = attrs.field(repr=False)


@frozen
class Reconfigure:
    """An RM's new configuration, parsed, validated and with each partition's placement rules built by
    the caller. Answered None (nothing to start or stop), ``Admitted`` (the partitions to stop and to
    start) or the refusal."""

    request: si.UpdateConfigurationRequest
    config: SchedulerConfig = attrs.field(repr=False)
    placements: Mapping[str, PlacementManager] = attrs.field(repr=False)


@frozen
class Admitted:
    """RMProxy -> registrar: the RM's requests are held until the registrar has stopped ``retired``
    (the partitions the registration or update replaces or drops) and started ``start`` (all of a
    registration's, those an update adds) and ``Install``ed them."""

    rm: RMConnection
    retired: tuple[Handle, ...]
    start: tuple[PartitionConfig, ...]
    update: bool = False


@frozen
class Install:
    """The partitions the registrar started for an ``Admitted`` registration or update."""

    rm: RMConnection
    partitions: Mapping[str, Handle]
    queue_boards: Mapping[str, QueueBoard]


@frozen
class Withdraw:
    """An ``Admitted`` registration whose partitions could not be started."""

    rm: RMConnection


@frozen
class Detach:
    """The RM leaves. Answered with its partitions (a tuple of handles: the registrar stops them)."""

    rm_id: str


# ---- core -> RMProxy -------------------------------------------------------------------------------


@frozen
class Route:
    """A request checked at the door; ``checked`` holds the rejections of its bad items."""

    request: si.AllocationRequest | si.ApplicationRequest | si.NodeRequest
    checked: Checked | None = None
    # the request's korral.actors.in_flight.Receipt: let go once this message is handled
    receipt: object = attrs.field(default=None, eq=False, repr=False)


@frozen
class FindPartitions:
    """The partitions' handles (all, or one by name)."""

    name: str = ""


@frozen
class StopAll:
    """The core stops: every RM's partitions and dispatchers go."""
