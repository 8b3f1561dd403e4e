"""The queue hierarchy: the scheduling order of applications and children, priority offset and fence."""

from __future__ import annotations

import pytest
from queue_helpers import (
    PRIORITY_OFFSET,
    PRIORITY_POLICY,
    SORT_POLICY,
    SORT_PRIORITY,
    add_ask,
    allocate,
    build,
    configure,
    order_of,
    q,
    submit,
)

from korral.model.app.application import MAX_PRIORITY, MIN_PRIORITY

# ---- application ordering ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("properties", "apps", "expected"),
    [
        pytest.param({}, [("a", 2, 0), ("b", 1, 0), ("c", 3, 0)], ["b", "a", "c"], id="fifo-by-submission"),
        pytest.param({}, [("a", 1, 0), ("b", 2, 5)], ["b", "a"], id="fifo-priority-first"),
        pytest.param({}, [("a", 1, 5), ("b", 2, 5)], ["a", "b"], id="fifo-same-priority-by-submission"),
        pytest.param(
            {SORT_PRIORITY: "disabled"}, [("a", 1, 0), ("b", 2, 5)], ["a", "b"], id="fifo-priority-disabled"
        ),
        pytest.param(
            {SORT_POLICY: "stateaware"}, [("a", 1, 0), ("b", 2, 5)], ["b", "a"], id="stateaware-like-fifo"
        ),
    ],
)
def test_fifo_app_order(properties, apps, expected):
    leaf = build(q("leaf", properties=properties))["root.leaf"]
    for app_id, seq, priority in apps:
        submit(leaf, {"memory": 1}, priority=priority, seq=seq, app_id=app_id)
    assert order_of(leaf) == expected


FAIR_GUARANTEED = {"memory": 100, "vcore": 10}


@pytest.mark.parametrize(
    ("properties", "apps", "expected"),
    [
        pytest.param(
            {},
            [("a", 1, 0, {"memory": 50}), ("b", 2, 0, {"memory": 10}), ("c", 3, 0, {})],
            ["c", "b", "a"],
            id="least-used-first",
        ),
        pytest.param(
            {},
            [("a", 1, 0, {"memory": 50}), ("b", 2, 0, {"vcore": 6})],
            ["a", "b"],
            id="ratio-against-guaranteed",
        ),
        pytest.param(
            {},
            [("a", 1, 0, {"memory": 50, "vcore": 1}), ("b", 2, 0, {"memory": 50, "vcore": 2})],
            ["a", "b"],
            id="largest-share-tie-next-share",
        ),
        pytest.param(
            {},
            [("a", 1, 0, {"memory": 10}), ("b", 2, 0, {"memory": 10})],
            ["a", "b"],
            id="equal-usage-by-submission",
        ),
        pytest.param(
            {},
            [("a", 1, 0, {}), ("b", 2, 3, {"memory": 90})],
            ["b", "a"],
            id="priority-first-when-enabled",
        ),
        pytest.param(
            {SORT_PRIORITY: "disabled"},
            [("a", 1, 0, {}), ("b", 2, 3, {"memory": 90})],
            ["a", "b"],
            id="disabled-usage-first",
        ),
        pytest.param(
            {SORT_PRIORITY: "disabled"},
            [("a", 1, 0, {"memory": 10}), ("b", 2, 3, {"memory": 10})],
            ["b", "a"],
            id="disabled-priority-breaks-usage-tie",
        ),
    ],
)
def test_fair_app_order(properties, apps, expected):
    leaf = build(q("leaf", guaranteed=FAIR_GUARANTEED, properties={SORT_POLICY: "fair", **properties}))[
        "root.leaf"
    ]
    for app_id, seq, priority, used in apps:
        app = submit(leaf, {"memory": 1}, priority=priority, seq=seq, app_id=app_id)
        if used:
            allocate(leaf, app, used)
    assert order_of(leaf) == expected


def test_fair_app_order_without_guarantee_uses_max():
    leaf = build(q("leaf", properties={SORT_POLICY: "fair"}), capacity={"memory": 100, "vcore": 10})[
        "root.leaf"
    ]
    a = submit(leaf, {"memory": 1}, seq=1, app_id="a")
    b = submit(leaf, {"memory": 1}, seq=2, app_id="b")
    allocate(leaf, a, {"memory": 30})
    allocate(leaf, b, {"vcore": 2})
    assert order_of(leaf) == ["b", "a"], "20% of vcore before 30% of memory"


def test_app_order_follows_allocations():
    leaf = build(q("leaf", guaranteed={"memory": 100}, properties={SORT_POLICY: "fair"}))["root.leaf"]
    a = submit(leaf, {"memory": 1}, seq=1, app_id="a")
    submit(leaf, {"memory": 1}, seq=2, app_id="b")
    assert order_of(leaf) == ["a", "b"]
    allocate(leaf, a, {"memory": 10})
    assert order_of(leaf) == ["b", "a"]


def test_only_apps_with_pending_are_ordered():
    leaf = build(q("leaf"))["root.leaf"]
    waiting = submit(leaf, {"memory": 1}, app_id="waiting")
    submit(leaf, None, app_id="idle")
    leaf.update_app(leaf.applications["idle"])
    assert order_of(leaf) == ["waiting"]
    ask = next(iter(waiting.asks.values()))
    waiting.take_pending(ask)
    leaf.add_pending(ask.resource, -1)
    leaf.update_app(waiting)
    assert order_of(leaf) == []
    assert leaf.priority == MIN_PRIORITY


def test_removed_app_leaves_the_order():
    leaf = build(q("leaf"))["root.leaf"]
    app = submit(leaf, {"memory": 1})
    del leaf.applications[app.application_id]
    leaf.update_app(app)
    assert order_of(leaf) == []


def test_changing_sort_policy_rekeys_apps():
    queues = build(q("leaf", guaranteed={"memory": 100}))
    leaf = queues["root.leaf"]
    a = submit(leaf, {"memory": 1}, seq=1, app_id="a")
    submit(leaf, {"memory": 1}, seq=2, app_id="b")
    allocate(leaf, a, {"memory": 50})
    assert order_of(leaf) == ["a", "b"], "fifo"
    configure(leaf, q("leaf", guaranteed={"memory": 100}, properties={SORT_POLICY: "fair"}))
    assert order_of(leaf) == ["b", "a"], "fair right after the reload"
    add_ask(leaf, a, {"memory": 1})  # re-keying after the change must work on a consistent order
    assert order_of(leaf) == ["b", "a"]
    configure(leaf, q("leaf", properties={SORT_POLICY: "fair", SORT_PRIORITY: "disabled"}))
    add_ask(leaf, a, {"memory": 1}, priority=4)
    assert sorted(order_of(leaf)) == ["a", "b"]


# ---- child ordering ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("properties", "children", "expected"),
    [
        pytest.param(
            {},
            [("a", {"memory": 100}, {"memory": 50}, 0, 1), ("b", {"memory": 1000}, {"memory": 50}, 0, 1)],
            ["b", "a"],
            id="lower-dominant-share-first",
        ),
        pytest.param(
            {},
            [
                ("a", {"memory": 100, "vcore": 10}, {"memory": 10, "vcore": 9}, 0, 1),
                ("b", {"memory": 100}, {"memory": 50}, 0, 1),
            ],
            ["b", "a"],
            id="dominant-type-decides",
        ),
        pytest.param(
            {},
            [("a", {"memory": 100}, {"memory": 90}, 5, 1), ("b", {"memory": 100}, {}, 0, 1)],
            ["a", "b"],
            id="priority-first-when-enabled",
        ),
        pytest.param(
            {SORT_PRIORITY: "disabled"},
            [("a", {"memory": 100}, {"memory": 90}, 5, 1), ("b", {"memory": 100}, {}, 0, 1)],
            ["b", "a"],
            id="disabled-share-first",
        ),
        pytest.param(
            {SORT_PRIORITY: "disabled"},
            [("a", {"memory": 100}, {"memory": 10}, 0, 1), ("b", {"memory": 100}, {"memory": 10}, 5, 1)],
            ["b", "a"],
            id="disabled-priority-breaks-share-tie",
        ),
        pytest.param(
            {},
            [("a", {"memory": 100}, {"memory": 10}, 0, 1), ("b", {"memory": 100}, {"memory": 10}, 0, 3)],
            ["b", "a"],
            id="larger-pending-breaks-tie",
        ),
        pytest.param(
            {SORT_PRIORITY: "disabled"},
            [("a", {"memory": 100}, {}, 0, 1), ("b", {"memory": 100}, {}, 0, 3)],
            ["b", "a"],
            id="disabled-larger-pending-breaks-tie",
        ),
        pytest.param(
            {},
            [("b", {"memory": 100}, {}, 0, 1), ("a", {"memory": 100}, {}, 0, 1)],
            ["a", "b"],
            id="full-tie-by-name",
        ),
    ],
)
def test_child_order(properties, children, expected):
    queues = build(*(q(name, guaranteed=g) for name, g, _, _, _ in children), properties=properties)
    for name, _, used, priority, repeats in children:
        leaf = queues[f"root.{name}"]
        app = submit(leaf, {"memory": 1}, priority=priority, repeats=repeats)
        if used:
            allocate(leaf, app, used)
    assert order_of(queues["root"]) == expected


def test_child_order_falls_back_to_max_without_guarantee():
    queues = build(
        q("a", max={"memory": 100}), q("b", max={"memory": 1000}), q("c"), capacity={"memory": 10000}
    )
    for name, used in (("a", 50), ("b", 50), ("c", 50)):
        leaf = queues[f"root.{name}"]
        allocate(leaf, submit(leaf, {"memory": 1}), {"memory": used})
    # shares: a 50/100, b 50/1000, c 50/10000 (cluster capacity through the root)
    assert order_of(queues["root"]) == ["c", "b", "a"]


def test_child_without_pending_is_not_ordered():
    queues = build(q("a"), q("b"))
    submit(queues["root.a"], {"memory": 1})
    submit(queues["root.b"])
    assert order_of(queues["root"]) == ["a"]


def test_nested_parents_order_by_their_own_usage():
    queues = build(
        q("x", q("x1"), guaranteed={"memory": 100}),
        q("y", q("y1"), guaranteed={"memory": 100}),
    )
    allocate(queues["root.x.x1"], submit(queues["root.x.x1"], {"memory": 1}), {"memory": 60})
    allocate(queues["root.y.y1"], submit(queues["root.y.y1"], {"memory": 1}), {"memory": 20})
    assert order_of(queues["root"]) == ["y", "x"]
    assert order_of(queues["root.x"]) == ["x1"]


# ---- priority offset and fence (2.9) ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("properties", "app_priorities", "expected"),
    [
        pytest.param({}, [], MIN_PRIORITY, id="nothing-pending"),
        pytest.param({}, [3, 7], 7, id="max-app-priority"),
        pytest.param({PRIORITY_OFFSET: "10"}, [3, 7], 17, id="plus-offset"),
        pytest.param({PRIORITY_OFFSET: "-10"}, [3], -7, id="negative-offset"),
        pytest.param({PRIORITY_OFFSET: "10"}, [], MIN_PRIORITY, id="offset-without-pending"),
        pytest.param({PRIORITY_OFFSET: "10"}, [MAX_PRIORITY - 5], MAX_PRIORITY, id="saturates-high"),
        pytest.param({PRIORITY_OFFSET: "-10"}, [MIN_PRIORITY + 5], MIN_PRIORITY, id="saturates-low"),
        pytest.param({PRIORITY_POLICY: "fence"}, [3, 100], 0, id="fence-is-offset"),
        pytest.param({PRIORITY_POLICY: "fence", PRIORITY_OFFSET: "5"}, [100], 5, id="fence-with-offset"),
        pytest.param(
            {PRIORITY_POLICY: "fence", PRIORITY_OFFSET: "5"}, [], MIN_PRIORITY, id="fence-no-pending"
        ),
        pytest.param({SORT_PRIORITY: "disabled"}, [7, 3], 7, id="priority-sort-disabled-still-max"),
    ],
)
def test_leaf_priority(properties, app_priorities, expected):
    leaf = build(q("leaf", properties=properties))["root.leaf"]
    for seq, priority in enumerate(app_priorities):
        submit(leaf, {"memory": 1}, priority=priority, seq=seq)
    assert leaf.priority == expected


def test_parent_priority_from_children_with_offsets():
    queues = build(
        q(
            "parent",
            q("hi", properties={PRIORITY_OFFSET: "100"}),
            q("fenced", properties={PRIORITY_POLICY: "fence", PRIORITY_OFFSET: "-5"}),
            properties={PRIORITY_OFFSET: "1"},
        ),
        q("plain"),
    )
    submit(queues["root.parent.hi"], {"memory": 1}, priority=10)
    submit(queues["root.parent.fenced"], {"memory": 1}, priority=1000)
    submit(queues["root.plain"], {"memory": 1}, priority=50)
    assert queues["root.parent.hi"].priority == 110
    assert queues["root.parent.fenced"].priority == -5, "fence hides the app's 1000"
    assert queues["root.parent"].priority == 111, "max child priority plus the parent's offset"
    assert order_of(queues["root.parent"]) == ["hi", "fenced"]
    assert order_of(queues["root"]) == ["parent", "plain"]
    assert queues["root"].priority == 111


def test_priority_drops_when_pending_goes():
    queues = build(q("leaf"))
    leaf = queues["root.leaf"]
    app = submit(leaf, {"memory": 1}, priority=9)
    assert queues["root"].priority == 9
    ask = next(iter(app.asks.values()))
    app.take_pending(ask)
    leaf.add_pending(ask.resource, -1)
    leaf.update_app(app)
    assert leaf.priority == MIN_PRIORITY
    assert queues["root"].priority == MIN_PRIORITY
    assert order_of(queues["root"]) == []
