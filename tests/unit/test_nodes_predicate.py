"""The RM's predicates put to many candidate nodes of one decision at once (``nodes_predicate``).

engine="ray" asks the RM's predicates in the driver, a process away from the scheduler: one round trip
per decision, not one per node. The decisions are the same as node by node (``predicate``).
"""

from __future__ import annotations

from collections.abc import Sequence

from partition_helpers import by_node, conf

NODES = [f"node-{i}" for i in range(10)]


class Recorded:
    """A nodes predicate that accepts the nodes in ``accept`` and records every call."""

    def __init__(self, accept: set[str], *, reserve: set[str] | None = None) -> None:
        self.accept = accept
        self.reserve = reserve if reserve is not None else accept
        self.calls: list[tuple[str, tuple[str, ...], bool, bool]] = []

    def __call__(
        self, allocation_key: str, node_ids: Sequence[str], allocate: bool, first: bool
    ) -> list[bool]:
        self.calls.append((allocation_key, tuple(node_ids), allocate, first))
        wanted = self.accept if allocate else self.reserve
        answers = []
        for node_id in node_ids:
            answers.append(node_id in wanted)
            if answers[-1] and first:
                break
        return answers


def _partition(make_partition, **kwargs):
    p = make_partition(conf("- name: q"), **kwargs)
    for node_id in NODES:
        p.add_node(node_id, {"memory": 100})
    p.add_application("app-1", queue_name="root.q", user="u")
    return p


def test_one_call_per_decision_puts_every_candidate_and_decides_as_node_by_node(make_partition):
    batched = Recorded({"node-7"})
    p = _partition(make_partition, nodes_predicate=batched, candidates_per_call=64)
    p.add_ask("app-1", "x", {"memory": 10})
    assert by_node(p.schedule()) == {"node-7": 1}
    assert len(batched.calls) == 1
    key, asked, allocate, first = batched.calls[0]
    assert (key, allocate, first) == ("x", True, True) and sorted(asked) == NODES

    one_by_one: list[str] = []

    def predicate(allocation_key: str, node_id: str, allocate: bool) -> bool:
        one_by_one.append(node_id)
        return node_id == "node-7"

    q = _partition(make_partition, predicate=predicate)
    q.add_ask("app-1", "x", {"memory": 10})
    assert by_node(q.schedule()) == {"node-7": 1}
    # the RM behind the batch is asked in the batch's order up to the accepted node: the same calls
    assert one_by_one == list(asked[: asked.index("node-7") + 1])


def test_a_refused_batch_is_followed_by_one_twice_as_large(make_partition):
    batched = Recorded(set())
    p = _partition(make_partition, nodes_predicate=batched, candidates_per_call=2)
    p.add_ask("app-1", "x", {"memory": 10})
    assert p.schedule() == []
    allocating = [nodes for _, nodes, allocate, _ in batched.calls if allocate]
    assert [len(nodes) for nodes in allocating] == [2, 4, 4]
    assert sorted(node for nodes in allocating for node in nodes) == NODES  # each candidate put once


def test_a_reservation_puts_every_candidate_in_one_call(make_partition):
    batched = Recorded(set(), reserve={"node-3"})
    p = _partition(make_partition, nodes_predicate=batched, candidates_per_call=4, reservation_delay=0.0)
    p.add_ask("app-1", "x", {"memory": 10})
    assert p.schedule() == []
    reserving = [call for call in batched.calls if not call[2]]
    assert len(reserving) == 1 and sorted(reserving[0][1]) == NODES and reserving[0][3] is False
    assert p.reservations == {("app-1", "x"): "node-3"}


def test_a_nodes_predicate_that_raises_refuses_the_nodes(make_partition):
    def broken(allocation_key: str, node_ids: Sequence[str], allocate: bool, first: bool) -> list[bool]:
        raise RuntimeError("the RM's process is gone")

    p = _partition(make_partition, nodes_predicate=broken, candidates_per_call=64)
    p.add_ask("app-1", "x", {"memory": 10})
    assert p.schedule() == []
    assert set(p.unschedulable) == {("app-1", "x")}
