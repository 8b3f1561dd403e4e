"""The queue hierarchy: properties, configuration, state and structure."""

from __future__ import annotations

import attrs
import pytest
from queue_helpers import (
    PRIORITY_OFFSET,
    PRIORITY_POLICY,
    SORT_POLICY,
    SORT_PRIORITY,
    allocate,
    apply_template,
    build,
    configure,
    order_of,
    q,
    submit,
)

from korral.config.schema import ChildTemplateConfig, ResourcesConfig
from korral.model.app.application import MAX_PRIORITY, MIN_PRIORITY, Application
from korral.model.queue import SORT_FAIR, SORT_FIFO, SORT_STATE_AWARE, Queue, QueueState, inherited_properties

PREEMPTION_POLICY = "preemption.policy"


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
    configure(parent, q("parent", q("leaf"), properties={SORT_POLICY: "stateaware"}))
    assert leaf.sort_policy == SORT_STATE_AWARE
    configure(parent, q("parent", q("leaf")))
    assert leaf.sort_policy == SORT_FIFO and SORT_POLICY not in leaf.properties


def test_dynamic_child_does_not_inherit_its_parents_properties():
    """YuniKorn's dynamic queue starts with no properties (a configured child merges its parent's)."""
    queues = build(q("parent", parent=True, properties={SORT_POLICY: "fair", PRIORITY_POLICY: "fence"}))
    child = Queue("Dyn", queues["root.parent"], leaf=True, managed=False)
    assert child.name == "dyn" and child.path == "root.parent.dyn", "names are lower-cased"
    assert child.sort_policy == SORT_FIFO and child.properties == {}
    assert not child.priority_fence
    assert not child.is_managed and child.is_leaf
    queues["root.parent"].children["dyn"] = child
    configure(queues["root.parent"], q("parent", parent=True, properties={SORT_POLICY: "fair"}))
    assert child.properties == {}, "a reload of the parent leaves a dynamic child's properties alone"


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
    configure(root, q("root", q("leaf"), parent=True))
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
    configure(parent, q("parent"))
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
    leaf.apply_spec(attrs.evolve(leaf.spec, state=state))
    assert leaf.is_draining is (state is QueueState.DRAINING)
    configure(leaf, q("leaf"))
    assert leaf.state is after


def test_apply_template():
    queues = build(q("parent", parent=True, properties={SORT_POLICY: "fair"}))
    child = Queue("dyn", queues["root.parent"], leaf=True, managed=False)
    template = ChildTemplateConfig(
        max_applications=2,
        properties={SORT_PRIORITY: "disabled"},
        resources=ResourcesConfig(guaranteed={"memory": 5, "vcore": 0}, max={"memory": 50}),
    )
    apply_template(child, template)
    assert child.guaranteed == {"memory": 5, "vcore": 0}
    assert child.max == {"memory": 50}
    assert child.max_applications == 2
    assert child.properties == {SORT_PRIORITY: "disabled"}, "the template's only: nothing inherited"
    assert not child.priority_sort_enabled
    assert not child.is_managed


def test_apply_empty_template_sets_no_limits():
    queues = build(q("parent", parent=True))
    child = Queue("dyn", queues["root.parent"], leaf=True, managed=False)
    apply_template(child, ChildTemplateConfig())
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
