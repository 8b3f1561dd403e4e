"""The queue hierarchy: properties, limits, usage and the scheduling order (reference 2.5, 2.6, 2.8, 2.9)."""

from __future__ import annotations

import itertools

import pytest

from korral.config.schema import ChildTemplateConfig, QueueConfig, ResourcesConfig
from korral.model.allocation import Allocation, Ask
from korral.model.application import MAX_PRIORITY, MIN_PRIORITY, Application, ApplicationState
from korral.model.queue import (
    SORT_FAIR,
    SORT_FIFO,
    SORT_STATE_AWARE,
    Queue,
    QueueState,
    inherited_properties,
)

SORT_POLICY = "application.sort.policy"
SORT_PRIORITY = "application.sort.priority"
PRIORITY_POLICY = "priority.policy"
PRIORITY_OFFSET = "priority.offset"
PREEMPTION_POLICY = "preemption.policy"

_ids = itertools.count(1)


def q(name: str, *children: QueueConfig, parent: bool | None = None, **kwargs) -> QueueConfig:
    """A QueueConfig; ``guaranteed`` / ``max`` keyword arguments become its resources."""
    resources = ResourcesConfig(guaranteed=kwargs.pop("guaranteed", {}), max=kwargs.pop("max", {}))
    is_parent = bool(children) if parent is None else parent
    return QueueConfig(name=name, parent=is_parent, queues=children, resources=resources, **kwargs)


def build(*children: QueueConfig, capacity: dict[str, int] | None = None, **root_kwargs) -> dict[str, Queue]:
    """Build a managed tree under root the way a partition does; returns the queues by path."""
    queues: dict[str, Queue] = {}

    def make(config: QueueConfig, parent: Queue | None) -> None:
        queue = Queue(config.name, parent, leaf=not config.is_parent, managed=True)
        if parent is not None:
            parent.children[queue.name] = queue
        queue.apply_config(config)
        queues[queue.path] = queue
        for child in config.queues:
            make(child, queue)

    make(q("root", *children, parent=True, **root_kwargs), None)
    queues["root"].refresh_limits(capacity)
    return queues


def submit(
    leaf: Queue,
    resource: dict[str, int] | None = None,
    *,
    priority: int = 0,
    repeats: int = 1,
    seq: int | None = None,
    app_id: str | None = None,
) -> Application:
    """Add an application with one pending ask to a leaf, keeping the queue books the way a partition does."""
    app_id = app_id or f"app-{next(_ids)}"
    app = Application.new(app_id, queue_path=leaf.path, submission_seq=next(_ids) if seq is None else seq)
    leaf.applications[app_id] = app
    if resource is not None:
        add_ask(leaf, app, resource, priority=priority, repeats=repeats)
    return app


def add_ask(leaf: Queue, app: Application, resource: dict[str, int], *, priority: int = 0, repeats: int = 1):
    ask = Ask.of(
        allocation_key=f"ask-{next(_ids)}",
        application_id=app.application_id,
        resource=resource,
        priority=priority,
        max_allocations=repeats,
    )
    app.add_ask(ask)
    leaf.add_pending(ask.resource, ask.pending)
    leaf.update_app(app)
    return ask


def allocate(leaf: Queue, app: Application, resource: dict[str, int]) -> None:
    uuid = f"uuid-{next(_ids)}"
    app.add_allocation(
        Allocation(
            uuid=uuid,
            allocation_key="key",
            application_id=app.application_id,
            node_id="node-1",
            resource=resource,
        )
    )
    leaf.add_allocated(resource)
    leaf.update_app(app)


def order_of(queue: Queue) -> list[str]:
    return [item.application_id if queue.is_leaf else item.name for item in queue.order]


# ---- properties --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parent", "expected"),
    [
        pytest.param({}, {}, id="empty"),
        pytest.param({PRIORITY_POLICY: "fence"}, {PRIORITY_POLICY: "default"}, id="priority-policy-reset"),
        pytest.param({PRIORITY_OFFSET: "10"}, {PRIORITY_OFFSET: "0"}, id="priority-offset-reset"),
        pytest.param(
            {PREEMPTION_POLICY: "disabled"}, {PREEMPTION_POLICY: "disabled"}, id="preemption-disabled"
        ),
        pytest.param({PREEMPTION_POLICY: "Disabled"}, {PREEMPTION_POLICY: "Disabled"}, id="preemption-case"),
        pytest.param({PREEMPTION_POLICY: "fence"}, {}, id="preemption-fence-not-inherited"),
        pytest.param({PREEMPTION_POLICY: "default"}, {}, id="preemption-default-not-inherited"),
        pytest.param({SORT_POLICY: "fair"}, {SORT_POLICY: "fair"}, id="sort-policy-inherited"),
        pytest.param({SORT_PRIORITY: "disabled"}, {SORT_PRIORITY: "disabled"}, id="sort-priority-inherited"),
        pytest.param({"custom.key": "x"}, {"custom.key": "x"}, id="other-inherited"),
        pytest.param(
            {PRIORITY_OFFSET: "5", SORT_POLICY: "fair", PREEMPTION_POLICY: "fence"},
            {PRIORITY_OFFSET: "0", SORT_POLICY: "fair"},
            id="mixed",
        ),
    ],
)
def test_inherited_properties(parent, expected):
    before = dict(parent)
    assert inherited_properties(parent) == expected
    assert parent == before


def test_child_inherits_and_overrides_properties():
    queues = build(
        q(
            "parent",
            q("leaf", properties={SORT_POLICY: "fifo", "custom": "child"}),
            q("other"),
            properties={
                SORT_POLICY: "fair",
                PRIORITY_OFFSET: "7",
                "custom": "parent",
                SORT_PRIORITY: "disabled",
            },
        )
    )
    leaf, other = queues["root.parent.leaf"], queues["root.parent.other"]
    assert leaf.properties == {
        SORT_POLICY: "fifo",
        PRIORITY_OFFSET: "0",
        "custom": "child",
        SORT_PRIORITY: "disabled",
    }
    assert leaf.sort_policy == SORT_FIFO and not leaf.priority_sort_enabled
    assert other.properties[SORT_POLICY] == "fair" and other.sort_policy == SORT_FAIR
    assert other.priority_offset == 0, "offsets are additive, never inherited"
    assert queues["root.parent"].priority_offset == 7


def test_properties_cascade_on_reconfiguration():
    queues = build(q("parent", q("leaf"), properties={SORT_POLICY: "fair"}))
    parent, leaf = queues["root.parent"], queues["root.parent.leaf"]
    assert leaf.sort_policy == SORT_FAIR
    parent.apply_config(q("parent", q("leaf"), properties={SORT_POLICY: "stateaware"}))
    assert leaf.sort_policy == SORT_STATE_AWARE
    parent.apply_config(q("parent", q("leaf")))
    assert leaf.sort_policy == SORT_FIFO and SORT_POLICY not in leaf.properties


def test_dynamic_child_inherits_from_parent_on_creation():
    queues = build(q("parent", parent=True, properties={SORT_POLICY: "fair", PRIORITY_POLICY: "fence"}))
    child = Queue("Dyn", queues["root.parent"], leaf=True, managed=False)
    assert child.name == "dyn" and child.path == "root.parent.dyn", "names are lower-cased"
    assert child.sort_policy == SORT_FAIR
    assert not child.priority_fence, "priority.policy resets to default"
    assert not child.is_managed and child.is_leaf


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(None, SORT_FIFO, id="default-fifo"),
        pytest.param("fifo", SORT_FIFO, id="fifo"),
        pytest.param("fair", SORT_FAIR, id="fair"),
        pytest.param("stateaware", SORT_STATE_AWARE, id="stateaware"),
        pytest.param("FAIR", SORT_FIFO, id="case-sensitive-as-yunikorn"),
        pytest.param("priority", SORT_FIFO, id="unknown-is-fifo"),
        pytest.param("", SORT_FIFO, id="empty-is-fifo"),
    ],
)
def test_sort_policy_parsing(value, expected):
    properties = {} if value is None else {SORT_POLICY: value}
    assert build(q("leaf", properties=properties))["root.leaf"].sort_policy == expected


@pytest.mark.parametrize(
    ("value", "enabled"),
    [
        pytest.param(None, True, id="default-enabled"),
        pytest.param("enabled", True, id="enabled"),
        pytest.param("disabled", False, id="disabled"),
        pytest.param("DISABLED", False, id="case-insensitive"),
        pytest.param("nonsense", True, id="unknown-is-enabled"),
    ],
)
def test_sort_priority_parsing(value, enabled):
    properties = {} if value is None else {SORT_PRIORITY: value}
    assert build(q("leaf", properties=properties))["root.leaf"].priority_sort_enabled is enabled


@pytest.mark.parametrize(
    ("properties", "fence", "offset"),
    [
        pytest.param({}, False, 0, id="defaults"),
        pytest.param({PRIORITY_POLICY: "fence"}, True, 0, id="fence"),
        pytest.param({PRIORITY_POLICY: "FENCE"}, True, 0, id="fence-case-insensitive"),
        pytest.param({PRIORITY_POLICY: "default"}, False, 0, id="default-policy"),
        pytest.param({PRIORITY_OFFSET: "10"}, False, 10, id="offset"),
        pytest.param({PRIORITY_OFFSET: "-10"}, False, -10, id="negative-offset"),
        pytest.param({PRIORITY_OFFSET: "+3"}, False, 3, id="plus-sign"),
        pytest.param({PRIORITY_OFFSET: "abc"}, False, 0, id="not-a-number-is-zero"),
        pytest.param({PRIORITY_OFFSET: "1.5"}, False, 0, id="float-is-zero"),
        pytest.param({PRIORITY_OFFSET: " 5"}, False, 0, id="whitespace-is-zero"),
        pytest.param({PRIORITY_OFFSET: "1_000"}, False, 0, id="underscore-is-zero"),
        pytest.param({PRIORITY_OFFSET: str(MAX_PRIORITY)}, False, MAX_PRIORITY, id="int32-max"),
        pytest.param({PRIORITY_OFFSET: str(MIN_PRIORITY)}, False, MIN_PRIORITY, id="int32-min"),
        pytest.param({PRIORITY_OFFSET: str(MAX_PRIORITY + 1)}, False, 0, id="beyond-int32-is-zero"),
        pytest.param({PRIORITY_OFFSET: str(MIN_PRIORITY - 1)}, False, 0, id="below-int32-is-zero"),
    ],
)
def test_priority_settings_parsing(properties, fence, offset):
    leaf = build(q("leaf", properties=properties))["root.leaf"]
    assert leaf.priority_fence is fence
    assert leaf.priority_offset == offset


# ---- configuration -----------------------------------------------------------------------------------


def test_apply_config_sets_everything():
    template = ChildTemplateConfig(max_applications=3)
    queues = build(
        q(
            "Parent",
            q("leaf", guaranteed={"memory": 10}, max={"memory": 20}, max_applications=4, submit_acl="bob"),
            child_template=template,
            admin_acl="alice",
        )
    )
    parent, leaf = queues["root.parent"], queues["root.parent.leaf"]
    assert parent.path == "root.parent" and not parent.is_leaf and parent.is_managed
    assert parent.own_child_template is template
    assert parent.admin_acl.allows("alice", ()) and not parent.admin_acl.allows("bob", ())
    assert leaf.is_leaf
    assert leaf.guaranteed == {"memory": 10} and leaf.max == {"memory": 20}
    assert leaf.max_applications == 4
    assert leaf.submit_acl.allows("bob", ()) and not leaf.submit_acl.allows("eve", ())


@pytest.mark.parametrize(
    ("configured", "expected"),
    [
        pytest.param({}, None, id="empty-not-set"),
        pytest.param({"memory": 0}, None, id="all-zero-not-set"),
        pytest.param({"memory": 10, "vcore": -1}, None, id="negative-not-set"),
        pytest.param({"memory": 10}, {"memory": 10}, id="set"),
        pytest.param({"memory": 10, "vcore": 0}, {"memory": 10, "vcore": 0}, id="explicit-zero-kept"),
    ],
)
def test_apply_config_resources(configured, expected):
    leaf = build(q("leaf", guaranteed=configured, max=configured))["root.leaf"]
    assert leaf.max == expected
    assert leaf.guaranteed == expected


def test_explicit_zero_max_allows_none_of_that_type():
    leaf = build(q("leaf", max={"memory": 100, "vcore": 0}), capacity={"memory": 1000, "vcore": 1000})[
        "root.leaf"
    ]
    assert leaf.fits_quota({"memory": 10})
    assert not leaf.fits_quota({"memory": 10, "vcore": 1})
    assert leaf.effective_max == {"memory": 100, "vcore": 0}
    assert leaf.headroom() == {"memory": 100, "vcore": 0}


def test_explicit_zero_guarantee_is_a_full_share_when_used():
    queues = build(
        q("zero", guaranteed={"memory": 100, "vcore": 0}),
        q("big", guaranteed={"memory": 100, "vcore": 10}),
        capacity={"memory": 1000, "vcore": 1000},
    )
    zero, big = queues["root.zero"], queues["root.big"]
    for leaf in (zero, big):
        app = submit(leaf, {"memory": 1})
        allocate(leaf, app, {"memory": 10, "vcore": 5})
    root = queues["root"]
    assert root.child_key(zero)[1] == pytest.approx(1.0), "vcore used against an explicit 0 guarantee"
    assert root.child_key(big)[1] == pytest.approx(0.5)
    assert order_of(root) == ["big", "zero"]


def test_apply_config_on_root_keeps_cluster_max():
    queues = build(q("leaf"), capacity={"memory": 100})
    root = queues["root"]
    root.apply_config(q("root", q("leaf"), parent=True))
    assert root.max == {"memory": 100}, "root max is the cluster capacity, never configured"


@pytest.mark.parametrize(
    ("config", "is_leaf"),
    [
        pytest.param(q("x"), True, id="leaf"),
        pytest.param(q("x", parent=True), False, id="parent-flag"),
        pytest.param(q("x", q("y")), False, id="has-children"),
    ],
)
def test_apply_config_leaf_flag(config, is_leaf):
    assert build(config)["root.x"].is_leaf is is_leaf


def test_apply_config_keeps_a_queue_with_children_a_parent():
    queues = build(q("parent", q("leaf")))
    parent = queues["root.parent"]
    parent.apply_config(q("parent"))
    assert not parent.is_leaf


@pytest.mark.parametrize(
    ("state", "after"),
    [
        pytest.param(QueueState.DRAINING, QueueState.ACTIVE, id="draining-reactivated"),
        pytest.param(QueueState.ACTIVE, QueueState.ACTIVE, id="active-stays"),
        pytest.param(QueueState.STOPPED, QueueState.STOPPED, id="stopped-stays"),
    ],
)
def test_apply_config_state(state, after):
    leaf = build(q("leaf"))["root.leaf"]
    leaf.state = state
    assert leaf.is_draining is (state is QueueState.DRAINING)
    leaf.apply_config(q("leaf"))
    assert leaf.state is after


def test_apply_template():
    queues = build(q("parent", parent=True, properties={SORT_POLICY: "fair"}))
    child = Queue("dyn", queues["root.parent"], leaf=True, managed=False)
    template = ChildTemplateConfig(
        max_applications=2,
        properties={SORT_PRIORITY: "disabled"},
        resources=ResourcesConfig(guaranteed={"memory": 5, "vcore": 0}, max={"memory": 50}),
    )
    child.apply_template(template)
    assert child.guaranteed == {"memory": 5, "vcore": 0}
    assert child.max == {"memory": 50}
    assert child.max_applications == 2
    assert child.properties == {SORT_POLICY: "fair", SORT_PRIORITY: "disabled"}, "template over inherited"
    assert not child.priority_sort_enabled
    assert not child.is_managed


def test_apply_empty_template_sets_no_limits():
    queues = build(q("parent", parent=True))
    child = Queue("dyn", queues["root.parent"], leaf=True, managed=False)
    child.apply_template(ChildTemplateConfig())
    assert child.guaranteed is None and child.max is None and child.max_applications == 0


@pytest.mark.parametrize(
    ("templates", "expected_from"),
    [
        pytest.param({}, None, id="none-anywhere"),
        pytest.param({"root.a.b": 1}, "root.a.b", id="own"),
        pytest.param({"root.a": 2}, "root.a", id="from-parent"),
        pytest.param({"root": 3}, "root", id="from-root"),
        pytest.param({"root": 3, "root.a": 2}, "root.a", id="nearest-ancestor-wins"),
        pytest.param({"root": 3, "root.a": 2, "root.a.b": 1}, "root.a.b", id="own-wins"),
    ],
)
def test_child_template_inheritance(templates, expected_from):
    made = {path: ChildTemplateConfig(max_applications=n) for path, n in templates.items()}
    queues = build(
        q("a", q("b", parent=True, child_template=made.get("root.a.b")), child_template=made.get("root.a")),
        child_template=made.get("root"),
    )
    found = queues["root.a.b"].child_template()
    assert found is (made[expected_from] if expected_from else None)


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
    leaf.apply_config(q("leaf", guaranteed={"memory": 100}, properties={SORT_POLICY: "fair"}))
    assert order_of(leaf) == ["b", "a"], "fair right after the reload"
    add_ask(leaf, a, {"memory": 1})  # re-keying after the change must work on a consistent order
    assert order_of(leaf) == ["b", "a"]
    leaf.apply_config(q("leaf", properties={SORT_POLICY: "fair", SORT_PRIORITY: "disabled"}))
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


# ---- state, structure -------------------------------------------------------------------------------------


def test_stopped_children_are_skipped():
    queues = build(q("a"), q("b"))
    submit(queues["root.a"], {"memory": 1})
    submit(queues["root.b"], {"memory": 1})
    assert order_of(queues["root"]) == ["a", "b"]
    queues["root.a"].state = QueueState.STOPPED
    queues["root.a"].refresh_up()
    assert order_of(queues["root"]) == ["b"]
    queues["root"].rebuild_order()
    assert order_of(queues["root"]) == ["b"], "a rebuild skips it too"
    queues["root.a"].state = QueueState.ACTIVE
    queues["root.a"].refresh_up()
    assert order_of(queues["root"]) == ["a", "b"]


def test_rebuild_order_matches_incremental_order():
    queues = build(q("a", guaranteed={"memory": 10}), q("b", guaranteed={"memory": 10}))
    allocate(queues["root.a"], submit(queues["root.a"], {"memory": 1}), {"memory": 5})
    submit(queues["root.b"], {"memory": 1})
    before = order_of(queues["root"])
    queues["root"].rebuild_order()
    assert order_of(queues["root"]) == before == ["b", "a"]


@pytest.mark.parametrize(
    ("children", "apps", "empty"),
    [
        pytest.param(0, 0, True, id="nothing"),
        pytest.param(1, 0, False, id="child"),
        pytest.param(0, 1, False, id="application"),
    ],
)
def test_is_empty(children, apps, empty):
    queue = Queue("x", None, leaf=children == 0, managed=False)
    for index in range(children):
        queue.children[f"c{index}"] = Queue(f"c{index}", queue, leaf=True, managed=False)
    for index in range(apps):
        queue.applications[f"app{index}"] = Application.new(f"app{index}")
    assert queue.is_empty() is empty


def test_walk_and_ancestors():
    queues = build(q("a", q("a1"), q("a2", q("deep"))), q("b"))
    assert [queue.path for queue in queues["root"].walk()] == [
        "root",
        "root.a",
        "root.a.a1",
        "root.a.a2",
        "root.a.a2.deep",
        "root.b",
    ]
    assert [queue.path for queue in queues["root.a.a2.deep"].ancestors_and_self()] == [
        "root.a.a2.deep",
        "root.a.a2",
        "root.a",
        "root",
    ]
    assert queues["root"].is_root and not queues["root.a"].is_root


def test_walk_tolerates_removal_while_walking():
    queues = build(q("a"), q("b"), q("c"))
    root = queues["root"]
    seen = []
    for queue in root.walk():
        seen.append(queue.path)
        if queue.path == "root.a":
            root.children.pop("c")  # removing a sibling mid-walk does not break the walk
    assert seen == ["root", "root.a", "root.b", "root.c"]
    assert list(root.children) == ["a", "b"]
