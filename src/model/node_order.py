"""The node order the scheduling walk takes nodes from: one part of a partition, one job.

Schedulable, unreserved nodes with room left, in the node sort policy's order (fair: least used
first; binpacking: most used first), by their resource usage weighted per resource. The partition
tells it each node whose room, reservation or schedulable flag changed (``update``); it keeps the
order right incrementally, at the cost of one re-key per change.
"""

from __future__ import annotations

from collections.abc import Mapping

from korral.model.node import Node
from korral.model.order import IncrementalOrder

DEFAULT_WEIGHTS: Mapping[str, float] = {"vcore": 1.0, "memory": 1.0}


class NodeOrder:
    def __init__(self, nodes: Mapping[str, Node]) -> None:
        # the partition's nodes (shared, not copied): a node no longer there is never placed
        self.nodes = nodes
        self.order: IncrementalOrder[Node] = IncrementalOrder()
        self.policy = "fair"
        self._binpacking = False
        self.weights: dict[str, float] = dict(DEFAULT_WEIGHTS)
        self._positive_weights = tuple(self.weights.items())

    def configure(self, policy: str, weights: Mapping[str, float]) -> None:
        """The config's node sort policy and resource weights; the order is rebuilt."""
        self.policy = policy or "fair"
        self._binpacking = self.policy == "binpacking"
        self.weights = dict(weights)
        self._positive_weights = tuple((n, w) for n, w in self.weights.items() if w > 0)
        self.rebuild()

    def rebuild(self) -> None:
        self.order.clear()
        for node in self.nodes.values():
            self.update(node)

    def discard(self, node_id: str) -> None:
        self.order.discard(node_id)

    def update(self, node: Node) -> None:
        """Put the node in its place, or take it out (unschedulable, reserved, full, gone)."""
        node_id = node.node_id
        spec = node.spec  # the RM's facts, read from the spec itself (the node's properties are calls)
        if spec.schedulable and not node.reservations and node_id in self.nodes:
            available = node.available
            for quantity in available.values():
                if quantity > 0:
                    break
            else:
                self.order.discard(node_id)  # full: no ask can fit
                return
            # node_usage_score, inlined (this runs once per allocation), with the terms that depend
            # only on the node's capacity and the weights kept on the node until either changes
            capacity = spec.capacity
            weights = self._positive_weights
            cache = node.score_terms
            if cache is None or cache[0] is not capacity or cache[1] is not weights:
                terms = tuple(
                    (name, weight, capacity[name]) for name, weight in weights if capacity.get(name, 0) > 0
                )
                total = 0.0
                for _, weight, _ in terms:
                    total += weight
                cache = node.score_terms = (capacity, weights, terms, total)
            weighted = 0.0
            for name, weight, cap in cache[2]:
                weighted += weight * ((cap - available.get(name, 0)) / cap)
            total = cache[3]
            score = weighted / total if total else 0.0
            if self._binpacking:
                score = 1.0 - score
            self.order.place(node_id, node, (score, node_id))
        else:
            self.order.discard(node_id)
