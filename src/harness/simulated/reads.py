"""A partition's published state as a check read it, kept while its actors take nothing but reads.

The checks of ``korral stress --simulated`` read each RM's partition at every quiescent point, with
virtual time frozen (``checks.collect_direct``, ``checks.read_usage``). What the partition actor and
its queues, applications, nodes and scheduler answer follows from the messages they handled: while
their group (``SimulatedInbox.group``: the partition's name) took no delivery but reads
(``Simulation.group_changes``), a read answers exactly what the last one did, and is taken from here.
Its deliveries still count as steps, as ``Simulation.deliver_now`` counts every read: how a check
reads never shifts the schedule.

Within a partition whose group changed, each node's and application's snapshot is kept too
(``owner_reads``), while what it is made of stayed: a node's while its actor took nothing but reads,
its allocations on the scheduler's node board are the same objects and its reservations the same; an
application's while its actor took nothing but reads (``SimulatedInbox.changes``) and the partition
publishes the same reservations and backoff for it. A scheduling tick changes the partition's group,
rarely a node or an application.

``VERIFY`` (the tests'): every kept read is read afresh too and must be equal, steps included.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import attrs

from korral.actors.simulated import Simulation

T = TypeVar("T")

ENABLED = True  # off: every read afresh (the tests compare both)
VERIFY = False  # on: a kept read is read afresh as well, and a difference raises ReadDiffers


class ReadDiffers(AssertionError):
    """A kept read differs from the same read made afresh: its group changed unseen."""


@attrs.frozen
class _Kept:
    actor: Any  # the partition actor read (a partition of the same name started later is another)
    version: int  # its group's changes when read
    value: Any
    steps: int  # the read's deliveries


_kept: weakref.WeakKeyDictionary[Simulation, dict[tuple[str, str], _Kept]] = weakref.WeakKeyDictionary()


def kept_read(simulation: Simulation, actor: Any, partition: str, kind: str, read: Callable[[], T]) -> T:
    """``read()`` of ``partition`` (its actor ``actor``; ``kind`` names what is read), or what it gave
    last time when nothing but reads reached the partition's actors since. Only while frozen: the
    read then delivers nothing else."""
    if not ENABLED or not simulation.is_frozen:
        return read()
    kept = _kept.setdefault(simulation, {})
    key = (partition, kind)
    version = simulation.group_changes.get(partition, 0)
    entry = kept.get(key)
    if entry is not None and entry.actor is actor and entry.version == version:
        if not VERIFY:
            simulation.steps += entry.steps
            value: T = entry.value
            return value
        before = simulation.steps
        fresh = read()
        if fresh != entry.value or simulation.steps - before != entry.steps:
            raise ReadDiffers(f"{partition} {kind}: read afresh, differs from the read kept")
        return fresh
    before = simulation.steps
    value = read()
    if simulation.group_changes.get(partition, 0) == version:
        kept[key] = _Kept(actor, version, value, simulation.steps - before)
    return value


_owners: weakref.WeakKeyDictionary[Simulation, dict[Any, tuple[Any, Any]]] = weakref.WeakKeyDictionary()


@contextmanager
def owner_reads(simulation: Simulation, partition: Any) -> Iterator[None]:
    """While a check reads ``partition`` (its actor, on the simulation's thread, frozen): its node
    and application snapshots kept (see the module's docstring), each counted as the step its ask
    is. Outside a frozen read, or with keeping off, every read is made afresh."""
    if not ENABLED or not simulation.is_frozen:
        yield
        return
    kept = _owners.setdefault(simulation, {})
    node_info, app_info = partition._node_info, partition._app_info

    def kept_or_read(inbox: Any, key: Any, read: Callable[[], Any]) -> Any:
        entry = kept.get(inbox)
        if entry is not None and entry[0] == key:
            if not VERIFY:
                simulation.steps += 1  # its ask's step
                return entry[1]
            fresh = read()
            if fresh != entry[1]:
                raise ReadDiffers(
                    f"{partition.name}: {inbox.actor.name} read afresh, differs from the read kept"
                )
            return fresh
        value = read()
        kept[inbox] = (key, value)
        return value

    def kept_node_info(node_id: str) -> Any:
        handle = partition.nodes.get(node_id)
        if handle is None:
            return node_info(node_id)
        inbox = handle.ref.actor_inbox
        actor = inbox.actor
        key = (
            actor,
            inbox.changes,
            actor.board.allocations(node_id),
            partition.node_reservations.get(node_id, ()),
        )
        return kept_or_read(inbox, key, lambda: node_info(node_id))

    def kept_app_info(application_id: str) -> Any:
        handle = partition.apps.get(application_id)
        if handle is None:
            return app_info(application_id)
        inbox = handle.ref.actor_inbox
        reserved = tuple(
            key
            for holders in partition.node_reservations.values()
            for app, key in holders
            if app == application_id
        )
        key = (inbox.actor, inbox.changes, reserved, partition.app_backoffs.get(application_id))
        return kept_or_read(inbox, key, lambda: app_info(application_id))

    # the partition's own queries find these first (an instance's attribute before its class's)
    partition._node_info, partition._app_info = kept_node_info, kept_app_info
    try:
        yield
    finally:
        del partition._node_info, partition._app_info
