"""The queue hierarchy: limits, usage and max applications."""

from __future__ import annotations

import pytest
from queue_helpers import build, q, submit

from korral.model.app.application import ApplicationState

# ---- limits ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capacity", "expected"),
    [
        pytest.param(None, None, id="no-nodes-nil"),
        pytest.param({}, None, id="empty-capacity-nil"),
        pytest.param({"memory": 100, "vcore": 0}, {"memory": 100}, id="pruned"),
        pytest.param({"memory": 100, "vcore": 8}, {"memory": 100, "vcore": 8}, id="capacity"),
    ],
)
def test_root_max_is_cluster_capacity(capacity, expected):
    root = build(q("leaf"), capacity=capacity)["root"]
    assert root.max == expected
    assert root.effective_max == expected


@pytest.mark.parametrize(
    ("parent_max", "leaf_max", "expected"),
    [
        pytest.param({}, {}, {"memory": 1000, "vcore": 100}, id="cluster-only"),
        pytest.param({"memory": 500}, {}, {"memory": 500, "vcore": 100}, id="parent-limits"),
        pytest.param({"memory": 500}, {"memory": 200}, {"memory": 200, "vcore": 100}, id="leaf-lower"),
        pytest.param({"memory": 500}, {"memory": 800}, {"memory": 500, "vcore": 100}, id="parent-lower"),
        pytest.param({}, {"gpu": 2}, {"memory": 1000, "vcore": 100, "gpu": 2}, id="type-only-in-leaf"),
        pytest.param({"vcore": 50}, {"memory": 10}, {"memory": 10, "vcore": 50}, id="per-type-along-path"),
    ],
)
def test_effective_max_is_min_along_path(parent_max, leaf_max, expected):
    queues = build(
        q("parent", q("leaf", max=leaf_max), max=parent_max), capacity={"memory": 1000, "vcore": 100}
    )
    assert queues["root.parent.leaf"].effective_max == expected


def test_effective_max_without_cluster_capacity():
    queues = build(q("parent", q("leaf", max={"memory": 5}), max={"vcore": 2}))
    assert queues["root.parent"].effective_max == {"vcore": 2}
    assert queues["root.parent.leaf"].effective_max == {"memory": 5, "vcore": 2}
    assert build(q("leaf"))["root.leaf"].effective_max is None


def test_refresh_limits_follows_capacity_changes():
    queues = build(q("leaf"), capacity={"memory": 100})
    queues["root"].refresh_limits({"memory": 300})
    assert queues["root.leaf"].effective_max == {"memory": 300}
    queues["root"].refresh_limits(None)
    assert queues["root"].max is None and queues["root.leaf"].effective_max is None


# ---- usage -------------------------------------------------------------------------------------------


def test_add_allocated_and_pending_walk_up_the_path():
    queues = build(q("a", q("b", q("leaf"))), q("other"))
    leaf = queues["root.a.b.leaf"]
    leaf.add_allocated({"memory": 10, "vcore": 1})
    leaf.add_allocated({"memory": 5}, times=2)
    leaf.add_pending({"memory": 3}, times=3)
    for path in ("root", "root.a", "root.a.b", "root.a.b.leaf"):
        assert queues[path].allocated == {"memory": 20, "vcore": 1}, path
        assert queues[path].pending == {"memory": 9}, path
    assert queues["root.other"].allocated == {} and queues["root.other"].pending == {}
    leaf.add_allocated({"memory": 20, "vcore": 1}, times=-1)
    leaf.add_pending({"memory": 3}, times=-3)
    for path in ("root", "root.a", "root.a.b", "root.a.b.leaf"):
        assert queues[path].allocated == {} and queues[path].pending == {}, "zero entries dropped"


@pytest.mark.parametrize(
    ("ask", "fits"),
    [
        pytest.param({"memory": 10}, True, id="within-all"),
        pytest.param({"memory": 50}, True, id="exactly-leaf-max"),
        pytest.param({"memory": 51}, False, id="over-leaf-max"),
        pytest.param({"vcore": 20}, True, id="exactly-parent-max"),
        pytest.param({"vcore": 21}, False, id="over-parent-max-leaf-undefined"),
        pytest.param({"gpu": 10**6}, True, id="undefined-everywhere-unlimited"),
        pytest.param({"pods": 5}, True, id="root-limit-within"),
        pytest.param({"pods": 6}, False, id="over-root-limit"),
    ],
)
def test_fits_quota_checks_every_ancestor(ask, fits):
    queues = build(
        q("parent", q("leaf", max={"memory": 100}), max={"vcore": 40}),
        capacity={"memory": 10**6, "vcore": 10**6, "pods": 10},
    )
    leaf = queues["root.parent.leaf"]
    leaf.add_allocated({"memory": 50, "vcore": 20, "pods": 5})
    assert leaf.fits_quota(ask) is fits


def test_fits_quota_without_any_limit():
    leaf = build(q("leaf"))["root.leaf"]
    leaf.add_allocated({"memory": 10**9})
    assert leaf.fits_quota({"memory": 10**9})


@pytest.mark.parametrize(
    ("allocated", "expected"),
    [
        pytest.param({}, {"memory": 100, "vcore": 40, "pods": 10}, id="nothing-used"),
        pytest.param({"memory": 30}, {"memory": 70, "vcore": 40, "pods": 10}, id="leaf-usage"),
        pytest.param({"vcore": 35, "pods": 2}, {"memory": 100, "vcore": 5, "pods": 8}, id="ancestor-usage"),
        pytest.param({"memory": 120}, {"memory": -20, "vcore": 40, "pods": 10}, id="over-max-negative"),
    ],
)
def test_headroom_is_min_over_ancestors(allocated, expected):
    queues = build(
        q("parent", q("leaf", max={"memory": 100}), max={"vcore": 40}),
        capacity={"memory": 10**6, "vcore": 10**6, "pods": 10},
    )
    leaf = queues["root.parent.leaf"]
    leaf.add_allocated(allocated)
    assert leaf.headroom() == expected


def test_sibling_usage_reduces_headroom_through_parent():
    queues = build(q("parent", q("a"), q("b"), max={"memory": 100}))
    queues["root.parent.a"].add_allocated({"memory": 60})
    assert queues["root.parent.b"].headroom() == {"memory": 40}
    assert not queues["root.parent.b"].fits_quota({"memory": 41})


def test_headroom_unlimited_is_none():
    assert build(q("leaf"))["root.leaf"].headroom() is None


# ---- max applications ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("leaf_max", "parent_max", "running_in_leaf", "running_in_sibling", "can_run"),
    [
        pytest.param(0, 0, 5, 5, True, id="unlimited"),
        pytest.param(2, 0, 1, 0, True, id="under-leaf-limit"),
        pytest.param(2, 0, 2, 0, False, id="at-leaf-limit"),
        pytest.param(0, 3, 1, 1, True, id="under-parent-limit"),
        pytest.param(0, 3, 1, 2, False, id="parent-full-via-sibling"),
        pytest.param(5, 2, 2, 0, False, id="parent-stricter-than-leaf"),
        pytest.param(1, 5, 1, 0, False, id="leaf-stricter-than-parent"),
    ],
)
def test_can_run_app(leaf_max, parent_max, running_in_leaf, running_in_sibling, can_run):
    queues = build(
        q("parent", q("leaf", max_applications=leaf_max), q("sibling"), max_applications=parent_max)
    )
    leaf = queues["root.parent.leaf"]
    leaf.add_running_app(running_in_leaf)
    queues["root.parent.sibling"].add_running_app(running_in_sibling)
    new_app = submit(leaf)
    new_app.state = ApplicationState.ACCEPTED
    assert leaf.can_run_app(new_app) is can_run


@pytest.mark.parametrize(
    ("state", "can_run"),
    [
        pytest.param(ApplicationState.STARTING, True, id="starting-already-counted"),
        pytest.param(ApplicationState.RUNNING, True, id="running-already-counted"),
        pytest.param(ApplicationState.ACCEPTED, False, id="accepted-blocked"),
        pytest.param(ApplicationState.NEW, False, id="new-blocked"),
        pytest.param(ApplicationState.COMPLETING, False, id="completing-blocked"),
    ],
)
def test_can_run_app_for_already_running_apps(state, can_run):
    leaf = build(q("leaf", max_applications=1))["root.leaf"]
    leaf.add_running_app(1)
    app = submit(leaf)
    app.state = state
    assert leaf.can_run_app(app) is can_run


def test_running_apps_counted_up_the_path():
    queues = build(q("a", q("leaf"), q("other")))
    queues["root.a.leaf"].add_running_app(2)
    queues["root.a.other"].add_running_app(1)
    queues["root.a.leaf"].add_running_app(-1)
    assert [queues[p].running_apps for p in ("root", "root.a", "root.a.leaf", "root.a.other")] == [2, 2, 1, 1]
