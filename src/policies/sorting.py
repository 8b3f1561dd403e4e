"""The ordering policies: how applications, queues and nodes are sorted for the scheduling walk.

YuniKorn's application sort policies (fifo, fair, stateaware), its queue sorting and its node sort
policies (fair, binpacking) as sort keys. The sorted containers that hold them are
``korral.model.order.IncrementalOrder``; the queues and the partition re-key their members with
these functions whenever what a key depends on changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from korral import resource as res

if TYPE_CHECKING:
    from korral.model.app.application import Application
    from korral.model.node import Node
    from korral.model.queue import Queue

SORT_FIFO = "fifo"
SORT_FAIR = "fair"
SORT_STATE_AWARE = "stateaware"


def app_key(queue: Queue, app: Application) -> tuple[Any, ...]:
    """fifo: (priority, submission); fair: (priority, usage ratio, submission). With priority sorting
    disabled the priority only breaks ties of the usage ratio (YuniKorn's sortApplications)."""
    if queue.sort_policy == SORT_FAIR:
        total = queue.guaranteed or queue.effective_max
        ratio = res.usage_ratio_key(app.allocated, total, total or ())
        if queue.priority_sort_enabled:
            return (-app.priority, ratio, app.submission_time, app.submission_seq)
        return (0, ratio, -app.priority, app.submission_time, app.submission_seq)
    return (-app.priority if queue.priority_sort_enabled else 0, app.submission_time, app.submission_seq)


def child_entry(parent: Queue, child: Queue) -> tuple[Any, ...]:
    """The child's entry in its parent's order: (priority, dominant share, larger pending first,
    name); with priority sorting disabled the share comes first and the priority only breaks its
    ties (YuniKorn's sortQueue). Built in one go because a queue is re-keyed in its parent once per
    allocation."""
    # res.dominant_share(child.allocated, child.guaranteed, child.effective_max), inlined with the
    # denominators merged ahead
    share = 0.0
    base = child.share_base
    for name, quantity in child.allocated.items():
        if quantity > 0:
            denominator = base.get(name)
            if denominator is not None:
                part = quantity / denominator if denominator > 0 else 1.0
                if part > share:
                    share = part
    if parent.priority_sort_enabled:
        return (-child.priority, share, -sum(child.pending.values()), child.name)
    return (share, -child.priority, -sum(child.pending.values()), child.name)


def node_usage_score(node: Node, weights: Mapping[str, float]) -> float:
    """Weighted average share of the node in use (capacity - available), 0.0 empty to 1.0 full.

    The fair node order's key (binpacking: 1 - this). The partition's ``_reorder_node`` inlines it
    for speed; the tests' model invariants check the node order against this definition."""
    capacity = node.capacity
    available = node.available
    total_weight = 0.0
    weighted = 0.0
    for name, weight in weights.items():
        cap = capacity.get(name, 0)
        if weight <= 0 or cap <= 0:
            continue
        weighted += weight * ((cap - available.get(name, 0)) / cap)
        total_weight += weight
    return weighted / total_weight if total_weight else 0.0
