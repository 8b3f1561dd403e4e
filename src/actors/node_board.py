"""What runs on each node of a partition, as the scheduler's view last published it, for readers on
other threads (a node actor's snapshot: the REST API's node routes, ``Core.nodes``).

The scheduler's view is the one record of a node's allocations: it books what it decides, undoes what
an owner refuses, frees what an owner releases and drops what leaves with a node. Each of those
changes is noted (``SchedulingView.node_changes``) and the scheduler publishes the notes here once per
batch of cycles, as it publishes queue usage on the ``QueueBoard``; every change to the view wakes a
batch, so the board is at most one batch behind the view, and current whenever the core is quiet.

The scheduler is the one writer; readers copy what they need under the same lock. Its size is the
partition's allocations (one entry each), freed as they are.

Plain Python: no pykka.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from korral.model.allocation import Allocation
from korral.model.node import NodeChange


class NodeBoard:
    __slots__ = ("_by_node", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # node id -> uuid -> allocation, in the order the view booked them
        self._by_node: dict[str, dict[str, Allocation]] = {}

    def publish(self, changes: Iterable[NodeChange]) -> None:
        """Apply the view's notes, in the order it made them."""
        by_node = self._by_node
        with self._lock:
            for change in changes:
                if isinstance(change, Allocation):  # a booking, once per allocation: its node's dict is there
                    try:
                        by_node[change.node_id][change.uuid] = change
                    except KeyError:
                        by_node[change.node_id] = {change.uuid: change}
                    continue
                node_id, uuid = change
                if not uuid:  # the node left: whatever it held goes with it
                    by_node.pop(node_id, None)
                    continue
                held = by_node.get(node_id)
                if held is not None:
                    held.pop(uuid, None)
                    if not held:
                        del by_node[node_id]

    def allocations(self, node_id: str) -> tuple[Allocation, ...]:
        with self._lock:
            held = self._by_node.get(node_id)
            return tuple(held.values()) if held else ()
