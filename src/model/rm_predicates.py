"""The RM's predicates, as the scheduling walk puts them: one part of a partition, one job.

The RM may veto a node for an ask (YuniKorn's predicates plugin). ``RMPredicates`` asks it node by
node (``predicate``) or several candidate nodes of one decision at once (``nodes_predicate``: the RM
in another process, one round trip), times each check when the partition's latencies are read, and
turns a failing RM plugin into "not this node", never a crash. With neither set, ``active`` is False
and the walk takes the first node with room without asking.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from time import perf_counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from korral.model.node import Node

# ask, node, allocate (True) or reserve (False) -> may the ask go there
Predicate = Callable[[str, str, bool], bool]
# The RM's predicates over several candidate nodes of one decision at once (the RM in another process:
# one round trip, not one per node): ask, nodes in order, allocate, first -> for each node in order
# whether the ask may go there; with first=True the answer may end at the first node accepted.
NodesPredicate = Callable[[str, Sequence[str], bool, bool], Sequence[bool]]

# the most candidate nodes put to the RM's predicates in one call (a call starts with
# ``candidates_per_call`` and doubles while every node is refused)
MAX_CANDIDATES_PER_CALL = 4096


class RMPredicates:
    def __init__(
        self,
        predicate: Predicate | None = None,
        nodes_predicate: NodesPredicate | None = None,
        candidates_per_call: int = 1,
    ) -> None:
        self.predicate = predicate
        # set: the RM's predicates are asked through it, ``candidates_per_call`` nodes at first (then
        # twice as many each call); else ``predicate`` is asked node by node, as YuniKorn does
        self.nodes_predicate = nodes_predicate
        self.candidates_per_call = max(1, candidates_per_call)
        # does the RM filter nodes at all (else every node with room will do)
        self.active = predicate is not None or nodes_predicate is not None
        # (kind, seconds) of each check while a reader wants them (the partition's latencies list)
        self.latencies: list[tuple[str, float]] | None = None

    def accepted(
        self, allocation_key: str, node_ids: Sequence[str], allocate: bool, first: bool
    ) -> Sequence[bool]:
        """The RM's predicates on candidate nodes of one decision, in order: whether each may take the
        ask; with ``first``, the answer may end at the first accepted node. Node by node through
        ``predicate`` (each failure refuses its node), or in one call through ``nodes_predicate`` (a
        failure refuses them all)."""
        latencies = self.latencies
        if self.nodes_predicate is not None:
            started = perf_counter()
            try:
                return self.nodes_predicate(allocation_key, node_ids, allocate, first)
            except Exception:
                return ()
            finally:
                if latencies is not None:  # one check of several nodes: each node its share
                    share = (perf_counter() - started) / max(1, len(node_ids))
                    latencies.extend(("trynode", share) for _ in node_ids)
        answers: list[bool] = []
        predicate = self.predicate
        for node_id in node_ids:
            started = perf_counter()
            try:
                accepted = predicate is None or bool(predicate(allocation_key, node_id, allocate))
            except Exception:
                accepted = False
            if latencies is not None:
                latencies.append(("trynode", perf_counter() - started))
            answers.append(accepted)
            if accepted and first:
                break
        return answers

    def allows(self, allocation_key: str, node_id: str) -> bool:
        """May the ask be allocated on this node? True without asking when the RM filters nothing."""
        if not self.active:
            return True
        answers = self.accepted(allocation_key, (node_id,), True, True)
        return bool(answers) and bool(answers[0])

    def first_accepted(self, allocation_key: str, candidates: list[Node]) -> Node | None:
        """The first of the candidate nodes the RM accepts for an allocation of the ask."""
        answers = self.accepted(allocation_key, [node.node_id for node in candidates], True, True)
        for node, accepted in zip(candidates, answers, strict=False):
            if accepted:
                return node
        return None
