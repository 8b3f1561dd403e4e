"""NodeBoard: what runs on each node as the scheduler's view published it, read from other threads."""

from __future__ import annotations

import threading

from korral.actors.node_board import NodeBoard
from korral.model.allocation import Allocation


def allocation(uuid: str, node: str = "n1") -> Allocation:
    return Allocation(
        uuid=uuid, allocation_key=f"k-{uuid}", application_id="app", node_id=node, resource={"vcore": 1}
    )


def test_the_board_applies_bookings_and_freeings_in_order() -> None:
    board = NodeBoard()
    a, b, c = allocation("a"), allocation("b"), allocation("c", node="n2")
    board.publish([a, b, c, ("n1", "a")])
    assert board.allocations("n1") == (b,)
    assert board.allocations("n2") == (c,)
    assert board.allocations("n3") == ()
    board.publish([a, ("n1", "a"), a])  # freed, then booked again
    assert board.allocations("n1") == (b, a)


def test_a_node_that_left_shows_nothing_even_if_it_comes_back() -> None:
    board = NodeBoard()
    board.publish([allocation("a"), allocation("b")])
    board.publish([("n1", "")])
    assert board.allocations("n1") == ()
    fresh = allocation("c")
    board.publish([fresh])
    assert board.allocations("n1") == (fresh,), "nothing of the old node's record came back"


def test_freeing_what_the_board_never_had_is_harmless_and_empty_nodes_are_dropped() -> None:
    board = NodeBoard()
    board.publish([("n1", "x"), allocation("a"), ("n1", "a")])
    assert board.allocations("n1") == ()
    assert board._by_node == {}, "an empty node keeps no entry: the board's size is the allocations'"


def test_a_reader_sees_a_whole_publication_or_none_of_it() -> None:
    board = NodeBoard()
    batch = [allocation(f"u{i}") for i in range(2000)]
    undo = [("n1", f"u{i}") for i in range(2000)]
    seen: set[int] = set()
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            seen.add(len(board.allocations("n1")))

    reader = threading.Thread(target=read)
    reader.start()
    for _ in range(50):
        board.publish(batch)
        board.publish(undo)
    stop.set()
    reader.join(timeout=60)
    assert seen <= {0, 2000}, sorted(seen)[:5]
