"""An incrementally maintained ordering: the structure behind every sorted walk of the scheduler.

YuniKorn re-sorted queues, applications and nodes on every cycle until it moved nodes into a B-tree
(35-74x faster node sorting). Here every ordering is kept sorted all the time: when an item's sort key
changes its owner calls ``update`` and only that item moves.

The entries live in a plain list kept sorted with ``bisect``: moving one entry is two C-level binary
searches and a memmove, which beats a balanced tree's Python-level bookkeeping at the sizes a partition
has (a few children per queue, up to tens of thousands of nodes). The scheduler nearly always takes or
moves the *first* entry (the next ask, the least used node), so the list has a movable head: taking
the first entry steps the head forward instead of shifting the whole list, and an entry that becomes
the new first reuses the slot before the head. The dead slots are cut off once there are at least
``COMPACT_AFTER`` of them and at least an eighth of the list: cutting shifts every live entry, so a
fixed count would make taking the first of n entries cost O(n) (a 50,000-ask application moved
400 KB every 16 allocations); a share keeps it O(1) amortised.
An entry that sorts last (a new ask: ages only grow; the node just used, under fair node sorting) is
appended after one comparison instead of a binary search.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Hashable, Iterable, Iterator
from typing import Any, Generic, TypeVar

Item = TypeVar("Item")

# what update() did, for owners whose own derived state depends on membership only
UNCHANGED = 0
MOVED = 1
INSERTED = 2

# dead slots before the head that trigger a compaction (with at least 1/2**COMPACT_SHARE_SHIFT of
# the list dead): few enough that skipping them is cheap
COMPACT_AFTER = 16
COMPACT_SHARE_SHIFT = 3


def entries_from(entries: list[tuple[Any, ...]], start: int) -> Iterator[tuple[Any, ...]]:
    """An iterator over ``entries[start:]``: no copy, and positioned at ``start`` at once, where
    ``islice`` would step over every dead slot before the head on each walk."""
    walk: Any = iter(entries)
    if start:
        walk.__setstate__(start)  # a list iterator's position (what pickling restores)
    return walk  # type: ignore[no-any-return]


class IncrementalOrder(Generic[Item]):
    """Items ordered by a key tuple their owner supplies; ties are broken by the item's unique name.

    The key given at insertion is remembered, so an item can always be found and moved even when the
    values its key was computed from have changed since.
    """

    __slots__ = ("_keys", "entries", "head", "items")

    def __init__(self) -> None:
        # Read-only outside this class; public (not properties) so that hot loops read them without a
        # call: ``entries[head:]`` are the live entries, key + (name,), sorted (the slots before
        # ``head`` are dead), and ``items`` maps a name to its item.
        self.entries: list[tuple[Any, ...]] = []
        self.head = 0
        self._keys: dict[Hashable, tuple[Any, ...]] = {}
        self.items: dict[Hashable, Item] = {}

    def update(self, name: Hashable, item: Item, key: tuple[Any, ...]) -> int:
        """Insert the item, or move it to the position of its new key. Returns UNCHANGED (same key:
        nothing happens, the stored item stays), MOVED or INSERTED."""
        return self.place(name, item, (*key, name))

    def place(self, name: Hashable, item: Item, entry: tuple[Any, ...]) -> int:
        """``update`` with the entry (``key + (name,)``) built by the caller: the scheduler moves a node
        and a queue per allocation and builds their entries directly."""
        keys = self._keys
        old = keys.get(name)
        entries = self.entries
        head = self.head
        if old is None:
            result = INSERTED
        elif old == entry:
            return UNCHANGED
        else:
            result = MOVED
            if entries[head] is old:  # the very tuple stored (names are unique, so no other equals it)
                head += 1  # the first entry: step over it
            else:
                del entries[bisect_left(entries, old, head)]
        if head and (head == len(entries) or entry < entries[head]):
            # a new first entry: into the dead slot before the head, nothing shifts
            head -= 1
            entries[head] = entry
        elif not entries or entries[-1] < entry:
            # a new last entry: a new ask (ages only grow), or under fair node sorting the node just used
            entries.append(entry)
        else:
            insort(entries, entry, head)
        if head >= COMPACT_AFTER and head >= len(entries) >> COMPACT_SHARE_SHIFT:
            del entries[:head]
            head = 0
        self.head = head
        keys[name] = entry
        self.items[name] = item
        return result

    def add_new(self, name: Hashable, item: Item, key: tuple[Any, ...]) -> None:
        """Insert an item known not to be present (skips the lookup of an old position)."""
        entry = (*key, name)
        entries = self.entries
        head = self.head
        if head and entry < entries[head]:
            self.head = head - 1
            entries[head - 1] = entry
        elif not entries or entries[-1] < entry:
            entries.append(entry)
        else:
            insort(entries, entry, head)
        self._keys[name] = entry
        self.items[name] = item

    def discard(self, name: Hashable) -> bool:
        """Remove the item; False when it was not there."""
        old = self._keys.pop(name, None)
        if old is None:
            return False
        del self.items[name]
        entries = self.entries
        head = self.head
        if entries[head] is old:
            head += 1
            if head == len(entries):
                entries.clear()
                head = 0
            elif head >= COMPACT_AFTER and head >= len(entries) >> COMPACT_SHARE_SHIFT:
                del entries[:head]
                head = 0
            self.head = head
        else:
            del entries[bisect_left(entries, old, head)]
        return True

    def __contains__(self, name: Hashable) -> bool:
        return name in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def __bool__(self) -> bool:
        return bool(self._keys)

    def live_entries(self) -> Iterable[tuple[Any, ...]]:
        """The sorted entries, ``key + (name,)`` (hot loops inline this: entries from head on)."""
        return entries_from(self.entries, self.head)

    def __iter__(self) -> Iterator[Item]:
        """Iterate in key order without copying: stop iterating before changing the order."""
        items = self.items
        for entry in self.live_entries():
            yield items[entry[-1]]

    def snapshot(self) -> list[Item]:
        """The items in order, safe to keep while the order changes."""
        items = self.items
        return [items[entry[-1]] for entry in self.live_entries()]

    def first(self) -> Item | None:
        entries = self.entries
        return self.items[entries[self.head][-1]] if entries else None

    def first_entry(self) -> tuple[Any, ...] | None:
        entries = self.entries
        return entries[self.head] if entries else None

    def key_of(self, name: Hashable) -> tuple[Any, ...] | None:
        entry = self._keys.get(name)
        return entry[:-1] if entry is not None else None

    def clear(self) -> None:
        self.entries.clear()
        self.head = 0
        self._keys.clear()
        self.items.clear()
