"""engine="ray": what crosses between the driver and a partition's process, as compact records.

Batches are pickled by the C pickler (Ray's cloudpickle runs a Python hook per object). What costs is
the objects: an attrs class with slots pickles through a Python ``__getstate__`` (a dict per object)
and unpickles through a Python ``__setstate__``, ~3 us each way per ask or allocation, which was most
of the driver's CPU per allocation. So the two kinds that cross by the thousand -- the asks of a routed
``AllocationRequest`` and the new allocations of an ``AllocationResponse`` -- cross as plain tuples of
their fields (~0.5 us to encode and pickle) and are rebuilt on the other side by setting their slots
directly (~0.8 us); everything else crosses as itself. This module does not import Ray.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from korral import si
from korral.actors.messages import Deliver, RouteAllocationRequest
from korral.records import frozen


class Records:
    """Turns instances of one attrs class (slots, no ``__init__`` side effects) into tuples of their
    fields and back. The two loops are generated from the class's fields, as attrs generates its own
    methods: the same code written out by hand, so a field added to the class is carried too."""

    def __init__(self, cls: type) -> None:
        names = [field.name for field in attrs.fields(cls)]
        values = ", ".join(f"item.{name}" for name in names)
        unpacked = ", ".join(f"v{index}" for index in range(len(names)))
        sets = "".join(f"        set{index}(item, v{index})\n" for index in range(len(names)))
        source = (
            "def encode(items):\n"
            f"    return [({values},) for item in items]\n"
            "def decode(records):\n"
            "    made = []\n"
            f"    for ({unpacked},) in records:\n"
            "        item = new(cls)\n"
            f"{sets}"
            "        made.append(item)\n"
            "    return made\n"
        )
        # a slot's descriptor sets it even on a frozen class (what attrs' own __init__ does, minus the
        # converters: the values were converted when the original was built)
        scope: dict[str, Any] = {"new": object.__new__, "cls": cls}
        scope.update({f"set{index}": getattr(cls, name).__set__ for index, name in enumerate(names)})
        exec(compile(source, f"<korral wire records {cls.__name__}>", "exec"), scope)
        self.encode: Callable[[Iterable[Any]], list[tuple[Any, ...]]] = scope["encode"]
        self.decode: Callable[[Iterable[tuple[Any, ...]]], list[Any]] = scope["decode"]


ASKS = Records(si.AllocationAsk)
ALLOCATIONS = Records(si.Allocation)


@frozen
class AsksAsRecords:
    """A ``RouteAllocationRequest`` on the wire: the request without its asks, and the asks' records."""

    message: RouteAllocationRequest
    asks: list[tuple[Any, ...]]


@frozen
class NewAsRecords:
    """An ``update_allocation`` callback on the wire: the response without its new allocations, and
    their records."""

    response: si.AllocationResponse
    new: list[tuple[Any, ...]]


def _dumps(value: Any) -> bytes:
    return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)


def encode_tells(messages: list[Any]) -> bytes:
    """Driver -> host: one batch of messages for the partition, in order."""
    wired: list[Any] = []
    for message in messages:
        if type(message) is RouteAllocationRequest and message.request.asks:
            request = message.request
            wired.append(
                AsksAsRecords(
                    message=RouteAllocationRequest(request=attrs.evolve(request, asks=())),
                    asks=ASKS.encode(request.asks),
                )
            )
        else:
            wired.append(message)
    return _dumps(wired)


def decode_tells(payload: bytes) -> list[Any]:
    messages: list[Any] = []
    for wired in pickle.loads(payload):
        if type(wired) is AsksAsRecords:
            request = wired.message.request
            messages.append(
                RouteAllocationRequest(request=attrs.evolve(request, asks=ASKS.decode(wired.asks)))
            )
        else:
            messages.append(wired)
    return messages


def encode_callbacks(items: list[tuple[int, Any]]) -> bytes:
    """Host -> driver: numbered callbacks (and predicates calls), in order."""
    wired: list[tuple[int, Any]] = []
    for seq, item in items:
        if type(item) is Deliver and type(item.argument) is si.AllocationResponse and item.argument.new:
            response = item.argument
            item = NewAsRecords(
                response=attrs.evolve(response, new=()),
                new=ALLOCATIONS.encode(response.new),
            )
        wired.append((seq, item))
    return _dumps(wired)


def decode_callbacks(payload: bytes) -> list[tuple[int, Any]]:
    items: list[tuple[int, Any]] = []
    for seq, wired in pickle.loads(payload):
        if type(wired) is NewAsRecords:
            response = attrs.evolve(wired.response, new=ALLOCATIONS.decode(wired.new))
            wired = Deliver(argument=response)
        items.append((seq, wired))
    return items
