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
publishes the same reservations and backoff for it; the queue tree while the queue board holds the
same values (its writers replace whole values). A scheduling tick changes the partition's group,
rarely a node, an application or a queue.

A partition whose state and usage are the very reads kept, with the RM's books the same, is judged
as it was (``kept_verdict``): every input of the judgement is the same.

``VERIFY`` (the tests'): every kept read is read afresh too and must be equal, steps included, and
every kept verdict judged afresh.
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


def _afresh(read: Callable[[], Any]) -> Any:
    return read()


@contextmanager
def owner_reads(simulation: Simulation, partition: Any) -> Iterator[Callable[[Callable[[], Any]], Any]]:
    """While a check reads ``partition`` (its actor, on the simulation's thread, frozen): its node
    and application snapshots and its queue tree kept (see the module's docstring), each counted as
    the steps its asks are; it gives what reads the usage of every user and group, kept the same way.
    Outside a frozen read, or with keeping off, every read is made afresh."""
    if not ENABLED or not simulation.is_frozen:
        yield _afresh
        return
    kept = _owners.setdefault(simulation, {})
    node_info, app_info, queue_infos = partition._node_info, partition._app_info, partition._queue_infos

    def kept_or_read(slot: Any, key: Any, read: Callable[[], Any], steps: int = 1) -> Any:
        entry = kept.get(slot)
        if entry is not None and entry[0] == key:
            if not VERIFY:
                simulation.steps += steps  # its asks' steps
                return entry[1]
            fresh = read()
            if fresh != entry[1]:
                raise ReadDiffers(f"{partition.name}: {slot} read afresh, differs from the read kept")
            return fresh
        value = read()
        kept[slot] = (key, value)
        return value

    def kept_queue_infos() -> Any:
        if partition._tree_publish_queued:  # published first: the board changes
            return queue_infos()
        board = partition.queue_board  # whose writers replace whole values (``QueueBoard``)
        key = (
            board.structure,
            board.capacity,
            tuple(board.usage.items()),
            tuple(board.priorities.items()),
            board.preempting,
            tuple(board.app_states.items()),
            tuple(board.allocating_accepted.items()),
        )
        return kept_or_read((partition, "queues"), key, queue_infos, steps=0)

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

    def kept_usage(read: Callable[[], Any]) -> Any:
        """Every user's or group's usage (``read``), kept while the partition holds the same
        applications with the same limit groups, each read as before, under the same limits."""
        specs = tuple(partition.members.specs.values())
        limit_groups = partition.members.limit_groups
        ugm = partition.registry.ugm
        steps = simulation.steps
        infos = tuple(kept_app_info(spec.application_id) for spec in specs)
        simulation.steps = steps  # the read below counts its own asks
        live = [spec for spec in specs if spec.application_id in partition.apps]
        asks = sum(1 for spec in live if spec.user) + sum(
            1 for spec in live if limit_groups.get(spec.application_id, "")
        )
        key = (ugm, ugm.limits, specs, tuple(limit_groups.items()), infos)
        return kept_or_read((partition, "usage"), key, read, steps=asks)

    # the partition's own queries find these first (an instance's attribute before its class's)
    partition._node_info, partition._app_info = kept_node_info, kept_app_info
    partition._queue_infos = kept_queue_infos
    try:
        yield kept_usage  # the users' and groups' usage read through it
    finally:
        del partition._node_info, partition._app_info, partition._queue_infos


_verdicts: weakref.WeakKeyDictionary[
    Simulation, dict[tuple[str, str], tuple[tuple[Any, ...], Any, list[str]]]
] = weakref.WeakKeyDictionary()


def kept_verdict(
    simulation: Simulation,
    partition: str,
    what: str,
    reads: tuple[Any, ...],
    inputs: Any,
    judge: Callable[[], list[str]],
) -> list[str]:
    """``judge()`` of ``partition``, or what it found last time from the very same kept ``reads``
    (given again only while the partition's actors, its scheduler's view included, took nothing but
    reads) and equal ``inputs`` (whatever else it reads: the RM's books). Only while frozen."""
    if not ENABLED or not simulation.is_frozen:
        return judge()
    memo = _verdicts.setdefault(simulation, {})
    entry = memo.get((partition, what))
    if (
        entry is not None
        and len(entry[0]) == len(reads)
        and all(kept is read for kept, read in zip(entry[0], reads, strict=True))
        and entry[1] == inputs
    ):
        if not VERIFY:
            return list(entry[2])
        fresh = judge()
        if fresh != entry[2]:
            raise ReadDiffers(f"{partition} {what}: judged afresh, differs from the verdict kept")
        return fresh
    verdict = judge()
    memo[(partition, what)] = (reads, inputs, list(verdict))
    return verdict
