"""A partition's published state as a check read it, kept while its actors take nothing but reads.

The checks of ``korral stress --simulated`` read each RM's partition at every quiescent point, with
virtual time frozen (``checks.collect_direct``, ``checks.read_usage``). What the partition actor and
its queues, applications, nodes and scheduler answer follows from the messages they handled: while
their group (``SimulatedInbox.group``: the partition's name) took no delivery but reads
(``Simulation.group_changes``), a read answers exactly what the last one did, and is taken from here.
Its deliveries still count as steps, as ``Simulation.deliver_now`` counts every read: how a check
reads never shifts the schedule.

``VERIFY`` (the tests'): every kept read is read afresh too and must be equal, steps included.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
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
