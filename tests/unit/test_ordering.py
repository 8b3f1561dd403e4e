"""IncrementalOrder: the always-sorted structure behind every scheduling walk."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from korral.model import order as ordering
from korral.model.order import INSERTED, MOVED, UNCHANGED, IncrementalOrder


def build(*entries: tuple[str, tuple]) -> IncrementalOrder[str]:
    """An order whose items are their own names, inserted in the given sequence."""
    order: IncrementalOrder[str] = IncrementalOrder()
    for name, key in entries:
        order.update(name, name, key)
    return order


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        pytest.param([], [], id="empty"),
        pytest.param([("a", (1,))], ["a"], id="single"),
        pytest.param([("a", (2,)), ("b", (1,)), ("c", (3,))], ["b", "a", "c"], id="by-key"),
        pytest.param([("c", (1,)), ("a", (1,)), ("b", (1,))], ["a", "b", "c"], id="equal-keys-by-name"),
        pytest.param(
            [("x", (0, 2)), ("y", (0, 1)), ("z", (-1, 9))], ["z", "y", "x"], id="multi-part-key-lexicographic"
        ),
        pytest.param(
            [("b", (1, 0.5)), ("a", (1, 0.5)), ("c", (0, 0.9))], ["c", "a", "b"], id="tie-on-full-key-by-name"
        ),
        pytest.param([("a", ()), ("b", ())], ["a", "b"], id="empty-keys-by-name"),
    ],
)
def test_order_by_key_then_name(entries, expected):
    order = build(*entries)
    assert list(order) == expected
    assert order.snapshot() == expected


@pytest.mark.parametrize(
    ("new_key", "expected"),
    [
        pytest.param((0,), ["b", "a", "c"], id="to-front"),
        pytest.param((9,), ["a", "c", "b"], id="to-back"),
        pytest.param((2,), ["a", "b", "c"], id="tie-with-c-name-breaks"),
        pytest.param((1,), ["a", "b", "c"], id="tie-with-a-name-breaks"),
    ],
)
def test_update_moves_an_item(new_key, expected):
    order = build(("a", (1,)), ("b", (2,)), ("c", (2,)))
    order.update("b", "b", new_key)
    assert list(order) == expected
    assert len(order) == 3
    assert order.key_of("b") == new_key


def test_update_with_same_key_is_a_no_op():
    order = build(("a", (1,)), ("b", (2,)))
    before = list(order.entries)
    order.update("a", "replacement", (1,))
    assert list(order.entries) == before
    assert list(order) == ["a", "b"], "same key: nothing moves and the stored item stays"
    assert len(order) == 2


def test_update_with_new_key_replaces_the_item():
    order = build(("a", (1,)))
    order.update("a", "A2", (5,))
    assert list(order) == ["A2"]


@pytest.mark.parametrize(
    ("discard", "expected"),
    [
        pytest.param(["b"], ["a", "c"], id="middle"),
        pytest.param(["a"], ["b", "c"], id="first"),
        pytest.param(["c"], ["a", "b"], id="last"),
        pytest.param(["a", "b", "c"], [], id="all"),
        pytest.param(["missing"], ["a", "b", "c"], id="unknown-name-ignored"),
        pytest.param(["b", "b"], ["a", "c"], id="twice-ignored"),
    ],
)
def test_discard(discard, expected):
    order = build(("a", (1,)), ("b", (1,)), ("c", (2,)))
    for name in discard:
        order.discard(name)
    assert list(order) == expected
    assert len(order) == len(expected)
    for name in discard:
        assert name not in order
        assert order.key_of(name) is None


def test_discard_then_reinsert():
    order = build(("a", (1,)), ("b", (2,)))
    order.discard("a")
    order.update("a", "a", (3,))
    assert list(order) == ["b", "a"]


def test_contains_len_bool():
    order: IncrementalOrder[str] = IncrementalOrder()
    assert not order
    assert len(order) == 0
    assert "a" not in order
    order.update("a", "item-a", (1,))
    assert order
    assert len(order) == 1
    assert "a" in order
    assert "item-a" not in order, "membership is by name, not item"
    order.discard("a")
    assert not order


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        pytest.param([], None, id="empty-is-none"),
        pytest.param([("a", (2,)), ("b", (1,))], "b", id="lowest-key"),
        pytest.param([("b", (1,)), ("a", (1,))], "a", id="lowest-name-on-tie"),
    ],
)
def test_first(entries, expected):
    assert build(*entries).first() == expected


def test_snapshot_is_independent_of_later_changes():
    order = build(("a", (1,)), ("b", (2,)), ("c", (3,)))
    snapshot = order.snapshot()
    order.update("a", "a", (9,))
    order.discard("b")
    assert snapshot == ["a", "b", "c"]
    assert list(order) == ["c", "a"]


def test_snapshot_allows_changes_while_walking():
    order = build(("a", (1,)), ("b", (2,)), ("c", (3,)))
    seen = []
    for item in order.snapshot():
        seen.append(item)
        order.update(item, item, (10 + len(seen),))
    assert seen == ["a", "b", "c"]
    assert list(order) == ["a", "b", "c"]


def test_live_iteration_is_not_a_copy():
    order = build(("a", (1,)), ("b", (2,)))
    walk = iter(order)
    assert next(walk) == "a"
    order.update("c", "c", (3,))  # appended after the current position: the live walk sees it
    assert list(walk) == ["b", "c"]


@pytest.mark.parametrize(
    ("key",),
    [
        pytest.param((1,), id="single"),
        pytest.param((0, (0.5, 0.25), 7), id="nested-tuple"),
        pytest.param((), id="empty"),
    ],
)
def test_key_of_returns_the_key_without_the_name(key):
    order = build(("a", key))
    assert order.key_of("a") == key
    assert order.key_of("other") is None


def test_clear():
    order = build(("a", (1,)), ("b", (2,)))
    order.clear()
    assert not order
    assert list(order) == []
    assert order.first() is None
    assert "a" not in order
    order.update("a", "a", (1,))
    assert list(order) == ["a"], "usable after clear"


# ---- property: the order always equals sorting the live items ---------------------------------------

NAMES = st.sampled_from([f"item-{i}" for i in range(8)])
KEYS = st.tuples(st.integers(-3, 3), st.integers(-3, 3))
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("update"), NAMES, KEYS),
        st.tuples(st.just("discard"), NAMES, st.just(())),
    ),
    max_size=60,
)


@given(OPERATIONS)
def test_property_order_equals_sorted_live_items(operations):
    order: IncrementalOrder[str] = IncrementalOrder()
    live: dict[str, tuple] = {}
    for operation, name, key in operations:
        if operation == "update":
            order.update(name, name, key)
            live[name] = key
        else:
            order.discard(name)
            live.pop(name, None)
        expected = sorted(live, key=lambda n: (*live[n], n))
        assert list(order) == expected
        assert order.snapshot() == expected
        assert len(order) == len(live)
        assert order.first() == (expected[0] if expected else None)
        for live_name, live_key in live.items():
            assert live_name in order
            assert order.key_of(live_name) == live_key


def test_update_and_discard_say_what_they_did():
    order: IncrementalOrder[str] = IncrementalOrder()
    assert order.update("a", "a", (1,)) == INSERTED
    assert order.update("a", "a", (1,)) == UNCHANGED
    assert order.update("a", "a", (2,)) == MOVED
    assert order.discard("a") is True
    assert order.discard("a") is False


# ---- the movable head: taking the first entry shifts nothing, and compaction keeps the order --------

HEAD_OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("update"), st.sampled_from([f"n{i:02d}" for i in range(40)]), KEYS),
        st.tuples(st.just("first-to"), st.just(""), KEYS),  # what the scheduler does to a used node
        st.tuples(st.just("first-to-back"), st.just(""), st.just(())),  # ... with fair node sorting
        st.tuples(st.just("discard-first"), st.just(""), st.just(())),  # a placed ask's last repeat
    ),
    min_size=20,
    max_size=150,
)


@given(st.integers(0, 12), HEAD_OPERATIONS)
def test_property_head_moves_and_compaction_keep_the_order(monkeypatch_compact, initial, operations):
    order: IncrementalOrder[str] = IncrementalOrder()
    live: dict[str, tuple] = {}
    for index in range(initial):
        order.add_new(f"start-{index:02d}", f"start-{index:02d}", (0, index))
        live[f"start-{index:02d}"] = (0, index)
    for operation, name, key in operations:
        if operation != "update":
            first = order.first()
            if first is None:
                continue
            name = first
        if operation == "discard-first":
            order.discard(name)
            live.pop(name)
        else:
            if operation == "first-to-back":
                key = (9, len(live))
            order.update(name, name, key)
            live[name] = key
        expected = sorted(live, key=lambda n: (*live[n], n))
        assert list(order) == expected
        assert [entry[-1] for entry in order.entries[order.head :]] == expected
        # compacted once the dead slots are both COMPACT_AFTER and a share of the list
        assert (
            order.head < COMPACT_SMALL
            or order.head < len(order.entries) >> ordering.COMPACT_SHARE_SHIFT
            or not order.entries
        )
        assert order.first() == (expected[0] if expected else None)


COMPACT_SMALL = 3


@pytest.fixture(scope="module")
def monkeypatch_compact():
    """Compact after a few dead slots, so that short examples cross the compaction too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ordering, "COMPACT_AFTER", COMPACT_SMALL)
        yield


def test_taking_every_first_entry_moves_each_entry_a_bounded_number_of_times():
    """Taking the first entry over and over (the next ask of a long application, the node just used
    moved back) cuts the dead slots off in proportion to the list, never every few takes: the live
    entries the cuts shift stay within a constant times the entries taken, whatever the length."""
    size = 4_000
    order: IncrementalOrder[int] = IncrementalOrder()
    for index in range(size):
        order.add_new(index, index, (index,))
    shifted = 0
    for index in range(size - 1):
        head_before = order.head
        order.discard(index)
        if order.head < head_before and order.entries:  # a compaction shifted the live entries down
            shifted += len(order.entries)
    assert list(order) == [size - 1]
    assert shifted <= 8 * size
