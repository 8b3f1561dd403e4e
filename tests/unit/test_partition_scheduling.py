"""PartitionModel scenarios: basic scheduling, fairness, priorities, node sorting, max applications."""

from __future__ import annotations

from collections import Counter

import pytest
from partition_helpers import S, by_app, by_node, conf, recovered

TWO_LEAVES = conf(
    """
    - name: leaf-1
    - name: leaf-2
    """
)

# ---- basic scheduling ----------------------------------------------------------------------------------


def test_nothing_is_scheduled_without_nodes(make_partition):
    p = make_partition(TWO_LEAVES)
    p.add_application("app-1", queue_name="root.leaf-1", user="u")
    p.add_ask("app-1", "ask", {"memory": 10}, max_allocations=3)

    assert p.schedule() == []
    assert p.root.max is None
    assert p.applications["app-1"].state is S.ACCEPTED

    p.add_node("node-1", {"memory": 100, "vcore": 100})
    assert len(p.schedule()) == 3
    assert p.queues["root.leaf-1"].allocated == {"memory": 30}


def test_basic_scheduling_smoke(make_partition):
    """YuniKorn's TestBasicScheduler: allocate, hit the leaf max, release everything, release the asks."""
    p = make_partition(conf("- name: singleleaf\n  resources:\n    max: {memory: 150M, vcore: 20}"))
    leaf = p.queues["root.singleleaf"]
    assert leaf.max == {"memory": 150_000_000, "vcore": 20_000}
    for node in ("node-1", "node-2"):
        p.add_node(node, {"memory": 100_000_000, "vcore": 20_000})
    app = p.add_application("app-1", queue_name="root.singleleaf", user="u")
    assert app.state is S.NEW

    p.add_ask("app-1", "alloc-1", {"memory": 10_000_000, "vcore": 1000}, max_allocations=2)
    assert leaf.pending == p.root.pending == {"memory": 20_000_000, "vcore": 2000}
    assert app.state is S.ACCEPTED

    assert len(p.schedule()) == 2
    assert leaf.pending == p.root.pending == app.pending == {}
    assert leaf.allocated["memory"] == p.root.allocated["memory"] == app.allocated["memory"] == 20_000_000
    assert app.state is S.RUNNING

    p.add_ask("app-1", "alloc-2", {"memory": 50_000_000, "vcore": 5000}, max_allocations=2)
    p.add_ask("app-1", "alloc-3", {"memory": 100_000_000, "vcore": 5000}, max_allocations=2)
    assert leaf.pending["memory"] == 300_000_000
    # 20M used of a 150M max: only the two 50M asks fit the queue
    made = p.schedule()
    assert [a.allocation_key for a in made] == ["alloc-2", "alloc-2"]
    assert leaf.pending["memory"] == app.pending["memory"] == 200_000_000
    assert leaf.allocated["memory"] == 120_000_000
    assert sum(n.allocated.get("memory", 0) for n in p.nodes.values()) == 120_000_000

    released = p.release_allocations("app-1")
    assert len(released) == 4
    assert leaf.allocated == p.root.allocated == app.allocated == {}
    assert leaf.pending["memory"] == 200_000_000

    for key in list(app.asks):
        p.remove_ask("app-1", key)
    assert leaf.pending == p.root.pending == app.pending == {}


@pytest.mark.parametrize(
    "children, leaf",
    [
        pytest.param(
            """
            - name: parent
              resources:
                max: {memory: 100M, vcore: 10}
              queues:
                - name: child-1
                - name: child-2
            """,
            "root.parent.child-1",
            id="parent-max",
        ),
        pytest.param(
            "- name: default\n  resources:\n    max: {memory: 100M, vcore: 10}", "root.default", id="leaf-max"
        ),
    ],
)
def test_scheduling_stops_at_the_queue_max(make_partition, children, leaf):
    """YuniKorn's TestSchedulingOverMaxCapacity: 12 asks of 10M against a 100M max on the path."""
    p = make_partition(conf(children))
    p.add_node("node-1", {"memory": 150_000_000, "vcore": 15_000})
    p.add_application("app-1", queue_name=leaf, user="u")
    p.add_ask("app-1", "alloc-1", {"memory": 10_000_000, "vcore": 1000}, max_allocations=12)

    assert len(p.schedule()) == 10
    queue = p.queues[leaf]
    assert queue.pending == {"memory": 20_000_000, "vcore": 2000}
    assert p.applications["app-1"].allocated == {"memory": 100_000_000, "vcore": 10_000}
    # over max: the remaining asks are a quota matter, not a cluster shortage
    assert p.unschedulable == {}

    p.release_allocations("app-1")
    assert queue.allocated == {}
    assert len(p.schedule()) == 2
    assert queue.pending == {}


def test_headroom_is_the_minimum_along_the_path(make_partition):
    p = make_partition(
        conf(
            """
            - name: parent
              resources:
                max: {memory: 100}
              queues:
                - name: child-1
                  resources:
                    max: {vcore: 3}
                - name: child-2
            """
        )
    )
    p.add_node("node-1", {"memory": 1000, "vcore": 100_000})
    p.add_application("app-1", queue_name="root.parent.child-1", user="u")
    p.add_application("app-2", queue_name="root.parent.child-2", user="u")
    p.add_ask("app-1", "a", {"memory": 10, "vcore": 1000}, max_allocations=10)
    p.add_ask("app-2", "b", {"memory": 10, "vcore": 1000}, max_allocations=10)

    made = p.schedule()
    # child-1 stops at its own vcore max (3), child-2 takes what the parent's memory max leaves
    assert by_app(made) == {"app-1": 3, "app-2": 7}
    assert p.queues["root.parent"].allocated == {"memory": 100, "vcore": 10_000}
    p.refresh_limits()
    assert p.queues["root.parent.child-1"].effective_max == {"memory": 100, "vcore": 3000}
    assert p.queues["root.parent.child-1"].headroom() == {"memory": 0, "vcore": 0}


def test_types_a_max_leaves_undefined_are_unlimited(make_partition):
    p = make_partition(conf("- name: q\n  resources:\n    max: {memory: 100}"))
    p.add_node("node-1", {"memory": 1000, "vcore": 1_000_000, "gpu": 4})
    p.add_application("app-1", queue_name="root.q", user="u")
    # vcore and gpu are not limited by the queue: only memory (and the node) stops these
    p.add_ask("app-1", "cpu", {"memory": 10, "vcore": 300_000}, max_allocations=3)
    p.add_ask("app-1", "gpu", {"memory": 10, "gpu": 2}, max_allocations=3)

    made = p.schedule()
    assert Counter(a.allocation_key for a in made) == {"cpu": 3, "gpu": 2}
    assert p.queues["root.q"].allocated == {"memory": 50, "vcore": 900_000, "gpu": 4}
    # the third gpu ask is stopped only by the cluster's size (root's max): outstanding, for scale-up
    assert set(p.unschedulable) == {("app-1", "gpu")}


def test_root_max_is_the_cluster_capacity(make_partition):
    p = make_partition(TWO_LEAVES)
    p.add_node("node-1", {"memory": 100, "vcore": 10_000})
    p.add_node("node-2", {"memory": 50, "vcore": 5000})
    p.refresh_limits()
    assert p.capacity == p.root.max == {"memory": 150, "vcore": 15_000}

    p.add_application("app-1", queue_name="root.leaf-1", user="u")
    p.add_ask("app-1", "a", {"memory": 25, "vcore": 1000}, max_allocations=10)
    assert len(p.schedule()) == 6
    assert p.root.allocated == {"memory": 150, "vcore": 6000}

    p.remove_node("node-2")
    p.refresh_limits()
    assert p.root.max == p.capacity == {"memory": 100, "vcore": 10_000}


# ---- fairness --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "guaranteed_a, guaranteed_b, expected",
    [
        pytest.param(None, None, {"app-a": 20, "app-b": 20}, id="no-guarantee"),
        pytest.param(100, 100, {"app-a": 20, "app-b": 20}, id="equal"),
        pytest.param(100, 300, {"app-a": 10, "app-b": 30}, id="one-to-three"),
        pytest.param(300, 100, {"app-a": 30, "app-b": 10}, id="three-to-one"),
    ],
)
def test_fairness_between_queues_follows_guarantees(make_partition, guaranteed_a, guaranteed_b, expected):
    def leaf(name, guaranteed):
        text = f"- name: {name}\n"
        return text + (f"  resources:\n    guaranteed: {{memory: {guaranteed}}}\n" if guaranteed else "")

    p = make_partition(conf(leaf("a", guaranteed_a) + leaf("b", guaranteed_b)))
    p.add_node("node-1", {"memory": 400, "vcore": 1_000_000})
    p.add_application("app-a", queue_name="root.a", user="u")
    p.add_application("app-b", queue_name="root.b", user="u")
    p.add_ask("app-a", "x", {"memory": 10}, max_allocations=100)
    p.add_ask("app-b", "x", {"memory": 10}, max_allocations=100)

    made = p.schedule()
    assert len(made) == 40  # the cluster is full
    assert by_app(made) == expected
    # the split holds at every point, not only at the end
    assert abs(by_app(made[:20])["app-a"] - expected["app-a"] / 2) <= 1


def test_queue_furthest_below_its_guarantee_goes_first(make_partition):
    p = make_partition(
        conf(
            """
            - name: a
              resources: {guaranteed: {memory: 100}}
            - name: b
              resources: {guaranteed: {memory: 100}}
            """
        )
    )
    p.add_node("node-1", {"memory": 1000, "vcore": 1_000_000})
    p.add_application("app-a", queue_name="root.a", user="u")
    p.add_application("app-b", queue_name="root.b", user="u")
    p.recover_allocation(recovered("app-a", "old", "node-1", {"memory": 60}))
    p.recover_allocation(recovered("app-b", "old", "node-1", {"memory": 30}))
    p.add_ask("app-a", "x", {"memory": 10}, max_allocations=10)
    p.add_ask("app-b", "x", {"memory": 10}, max_allocations=10)

    made = p.schedule(limit=5)
    # b (30%) is further below its guarantee than a (60%): it catches up first
    assert [a.application_id for a in made[:3]] == ["app-b"] * 3
    assert by_app(made) == {"app-a": 1, "app-b": 4}


@pytest.mark.parametrize(
    "policy, expected",
    [
        ("fair", {"app-1": 10, "app-2": 10}),
        ("fifo", {"app-1": 20}),
    ],
)
def test_application_sort_policy_in_a_leaf(make_partition, policy, expected):
    """YuniKorn's TestFairnessAllocationForApplications, and the fifo contrast."""
    p = make_partition(conf(f"- name: leaf\n  properties: {{application.sort.policy: {policy}}}"))
    p.add_node("node-1", {"memory": 100_000_000, "vcore": 20_000})
    p.add_node("node-2", {"memory": 100_000_000, "vcore": 20_000})
    for app in ("app-1", "app-2"):
        p.add_application(app, queue_name="root.leaf", user="u")
    for app in ("app-1", "app-2"):
        p.add_ask(app, "alloc-1", {"memory": 10_000_000, "vcore": 1000}, max_allocations=20)

    made = p.schedule(limit=20)
    assert by_app(made) == expected
    leaf = p.queues["root.leaf"]
    assert leaf.pending["memory"] == 200_000_000


def test_fair_application_policy_balances_usage_not_counts(make_partition):
    p = make_partition(conf("- name: leaf\n  properties: {application.sort.policy: fair}"))
    p.add_node("node-1", {"memory": 1000, "vcore": 1_000_000})
    p.add_application("big", queue_name="root.leaf", user="u")
    p.add_application("small", queue_name="root.leaf", user="u")
    p.add_ask("big", "x", {"memory": 30}, max_allocations=10)
    p.add_ask("small", "x", {"memory": 10}, max_allocations=10)

    made = p.schedule(limit=8)
    assert p.applications["big"].allocated == p.applications["small"].allocated == {"memory": 60}
    assert by_app(made) == {"big": 2, "small": 6}


def test_fifo_orders_applications_by_submission_not_by_ask(make_partition):
    p = make_partition(conf("- name: leaf"))
    p.add_node("node-1", {"memory": 1000, "vcore": 1000})
    for i in range(3):
        p.add_application(f"app-{i}", queue_name="root.leaf", user="u")
    for i in (2, 1, 0):  # asks arrive newest application first
        p.add_ask(f"app-{i}", "x", {"memory": 1}, max_allocations=2)

    assert [a.application_id for a in p.schedule()] == ["app-0"] * 2 + ["app-1"] * 2 + ["app-2"] * 2


def test_stateaware_lets_one_new_application_start_at_a_time(make_partition):
    p = make_partition(conf("- name: leaf\n  properties: {application.sort.policy: stateaware}"))
    p.add_node("node-1", {"memory": 1000, "vcore": 1000})
    for i in range(3):
        p.add_application(f"app-{i}", queue_name="root.leaf", user="u")
    p.add_ask("app-0", "x", {"memory": 1})  # one allocation: Starting, and it stays there
    p.add_ask("app-1", "x", {"memory": 1}, max_allocations=2)
    p.add_ask("app-2", "x", {"memory": 1}, max_allocations=2)

    made = p.schedule()
    assert [a.application_id for a in made] == ["app-0"]
    states = {app_id: app.state for app_id, app in p.applications.items()}
    assert states == {"app-0": S.STARTING, "app-1": S.ACCEPTED, "app-2": S.ACCEPTED}

    # app-0 runs (second allocation): the next Accepted application gets its turn, only one
    p.add_ask("app-0", "y", {"memory": 1})
    made = p.schedule(limit=3)
    assert [a.application_id for a in made] == ["app-0", "app-1", "app-1"]
    assert p.applications["app-1"].state is S.RUNNING
    assert p.applications["app-2"].state is S.ACCEPTED
    assert [a.application_id for a in p.schedule()] == ["app-2", "app-2"]
    assert p.applications["app-2"].state is S.RUNNING


def test_stateaware_running_applications_are_not_limited(make_partition):
    p = make_partition(conf("- name: leaf\n  properties: {application.sort.policy: stateaware}"))
    p.add_node("node-1", {"memory": 1000, "vcore": 1000})
    for i in range(3):
        p.add_application(f"app-{i}", queue_name="root.leaf", user="u")
        p.add_ask(f"app-{i}", "x", {"memory": 1}, max_allocations=3)
    assert [a.application_id for a in p.schedule()] == ["app-0"] * 3 + ["app-1"] * 3 + ["app-2"] * 3
    for i in range(3):
        p.add_ask(f"app-{i}", "y", {"memory": 1})
    # all Running now: every one of them is scheduled
    assert by_app(p.schedule()) == {"app-0": 1, "app-1": 1, "app-2": 1}


# ---- priorities -------------------------------------------------------------------------------------------


def test_asks_of_an_application_go_by_priority_then_age(make_partition):
    p = make_partition(conf("- name: leaf"))
    p.add_node("node-1", {"memory": 1000, "vcore": 1000})
    p.add_application("app-1", queue_name="root.leaf", user="u")
    p.add_ask("app-1", "low", {"memory": 1}, priority=1)
    p.add_ask("app-1", "old", {"memory": 1}, priority=5)
    p.add_ask("app-1", "new", {"memory": 1}, priority=5)
    p.add_ask("app-1", "high", {"memory": 1}, priority=10)

    assert [a.allocation_key for a in p.schedule()] == ["high", "old", "new", "low"]
    assert [a.priority for a in p.applications["app-1"].allocations.values()] == [10, 5, 5, 1]


@pytest.mark.parametrize(
    "sort_priority, expected",
    [
        ("enabled", ["app-2", "app-1"]),
        ("disabled", ["app-1", "app-2"]),
    ],
)
def test_application_priority_in_a_fifo_leaf(make_partition, sort_priority, expected):
    p = make_partition(conf(f"- name: leaf\n  properties: {{application.sort.priority: {sort_priority}}}"))
    p.add_node("node-1", {"memory": 1000, "vcore": 1000})
    p.add_application("app-1", queue_name="root.leaf", user="u")
    p.add_application("app-2", queue_name="root.leaf", user="u")
    p.add_ask("app-1", "x", {"memory": 1}, priority=0)
    p.add_ask("app-2", "x", {"memory": 1}, priority=50)

    assert [a.application_id for a in p.schedule()] == expected


def test_queue_priority_drops_when_its_highest_ask_is_placed(make_partition, invariants):
    """A queue is as urgent as its most urgent pending ask: once that is placed, a sibling with a
    higher priority ask than what is left goes first."""
    p = make_partition(TWO_LEAVES)
    p.add_node("node-1", {"memory": 1000, "vcore": 1000})
    p.add_application("app-1", queue_name="root.leaf-1", user="u")
    p.add_application("app-2", queue_name="root.leaf-2", user="u")
    p.add_ask("app-1", "urgent", {"memory": 1}, priority=5)
    p.add_ask("app-1", "later", {"memory": 1}, priority=1, max_allocations=2)
    p.add_ask("app-2", "middle", {"memory": 1}, priority=3)

    first = p.schedule(limit=1)
    assert [a.allocation_key for a in first] == ["urgent"]
    assert (p.applications["app-1"].priority, p.queues["root.leaf-1"].priority) == (1, 1)
    invariants(p)
    # a repeat of an ask still pending leaves the priority as it was
    assert [(a.application_id, a.allocation_key) for a in p.schedule()] == [
        ("app-2", "middle"),
        ("app-1", "later"),
        ("app-1", "later"),
    ]


QUEUE_PRIORITIES = conf(
    """
    - name: high
      properties: {priority.offset: "100"}
    - name: fenced
      properties: {priority.policy: fence, priority.offset: "-5"}
    - name: plain
    """
)


def test_queue_priority_offset_and_fence(make_partition):
    p = make_partition(QUEUE_PRIORITIES)
    p.add_node("node-1", {"memory": 1000, "vcore": 1000})
    for queue in ("high", "fenced", "plain"):
        p.add_application(queue, queue_name=f"root.{queue}", user="u")
    p.add_ask("high", "x", {"memory": 1}, priority=0)
    p.add_ask("fenced", "x", {"memory": 1}, priority=1000)
    p.add_ask("plain", "x", {"memory": 1}, priority=50)

    assert {q: p.queues[f"root.{q}"].priority for q in ("high", "fenced", "plain")} == {
        "high": 100,  # 0 + offset
        "fenced": -5,  # fence: exactly the offset, whatever is asked inside
        "plain": 50,
    }
    assert p.root.priority == 100
    # priority beats fair share: the order is by queue priority
    assert [a.application_id for a in p.schedule()] == ["high", "plain", "fenced"]


def test_queue_priority_beats_fair_share(make_partition):
    p = make_partition(QUEUE_PRIORITIES)
    p.add_node("node-1", {"memory": 1000, "vcore": 1000})
    p.add_application("high", queue_name="root.high", user="u")
    p.add_application("plain", queue_name="root.plain", user="u")
    p.add_ask("high", "x", {"memory": 1}, max_allocations=5)
    p.add_ask("plain", "x", {"memory": 1}, max_allocations=5)
    # high keeps its lead even as its usage grows past plain's
    assert [a.application_id for a in p.schedule()] == ["high"] * 5 + ["plain"] * 5


@pytest.mark.parametrize("sort_priority, expected", [("enabled", "high"), ("disabled", "plain")])
def test_parent_puts_priority_before_fair_share_only_when_enabled(make_partition, sort_priority, expected):
    p = make_partition(
        conf(
            """
            - name: high
              properties: {priority.offset: "100"}
            - name: plain
            """,
            root=f'submitacl: "*"\nproperties: {{application.sort.priority: {sort_priority}}}',
        )
    )
    p.add_node("node-1", {"memory": 1000, "vcore": 1000})
    p.add_application("high", queue_name="root.high", user="u")
    p.add_application("plain", queue_name="root.plain", user="u")
    p.recover_allocation(recovered("high", "old", "node-1", {"memory": 100}))
    p.add_ask("high", "x", {"memory": 1})
    p.add_ask("plain", "x", {"memory": 1})
    # disabled: the lower share wins and priority only breaks ties
    assert p.schedule()[0].application_id == expected


# ---- node sorting -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "policy, asks, expected_counts",
    [
        ("fair", 6, [2, 2, 2]),
        ("binpacking", 6, [6]),
        ("binpacking", 12, [10, 2]),
    ],
)
def test_node_sort_policy_spreads_or_packs(make_partition, policy, asks, expected_counts):
    p = make_partition(conf("- name: leaf", partition=f"nodesortpolicy: {{type: {policy}}}"))
    for i in range(3):
        p.add_node(f"node-{i}", {"memory": 100, "vcore": 100})
    p.add_application("app-1", queue_name="root.leaf", user="u")
    p.add_ask("app-1", "x", {"memory": 10, "vcore": 10}, max_allocations=asks)

    made = p.schedule()
    assert len(made) == asks
    assert sorted(by_node(made).values(), reverse=True) == expected_counts


@pytest.mark.parametrize(
    "policy, weights, expected",
    [
        ("fair", "", "cpu-busy"),  # usage (0.6+0.1)/2 < (0.1+0.8)/2
        ("fair", "resourceweights: {vcore: 4.0, memory: 1.0}", "mem-busy"),  # (4*0.6+0.1)/5 > (4*0.1+0.8)/5
        ("fair", "resourceweights: {memory: 1.0}", "cpu-busy"),  # memory only: 0.1 < 0.8
        ("binpacking", "", "mem-busy"),
        ("binpacking", "resourceweights: {vcore: 4.0, memory: 1.0}", "cpu-busy"),
    ],
)
def test_resource_weights_decide_which_node_is_used_most(make_partition, policy, weights, expected):
    partition = f"nodesortpolicy:\n  type: {policy}\n" + (f"  {weights}\n" if weights else "")
    p = make_partition(conf("- name: leaf", partition=partition))
    p.add_node("cpu-busy", {"memory": 100, "vcore": 100}, occupied={"memory": 10, "vcore": 60})
    p.add_node("mem-busy", {"memory": 100, "vcore": 100}, occupied={"memory": 80, "vcore": 10})
    p.add_application("app-1", queue_name="root.leaf", user="u")
    p.add_ask("app-1", "x", {"memory": 1, "vcore": 1})

    assert [a.node_id for a in p.schedule()] == [expected]


def test_fair_node_order_follows_allocations(make_partition):
    """Least used first: a node that receives work drops back, a node that frees work comes forward."""
    p = make_partition(conf("- name: leaf"))
    p.add_node("node-a", {"memory": 100, "vcore": 100})
    p.add_node("node-b", {"memory": 100, "vcore": 100})
    p.add_application("app-1", queue_name="root.leaf", user="u")
    p.add_ask("app-1", "big", {"memory": 50, "vcore": 50})
    first = p.schedule()[0]
    p.add_ask("app-1", "small", {"memory": 10, "vcore": 10})
    second = p.schedule()[0]
    assert second.node_id != first.node_id

    p.release_allocation("app-1", first.uuid)
    p.add_ask("app-1", "again", {"memory": 10, "vcore": 10})
    assert p.schedule()[0].node_id == first.node_id


# ---- max applications ---------------------------------------------------------------------------------


MAX_APPS = conf(
    """
    - name: p
      maxapplications: 2
      queues:
        - name: x
          maxapplications: 1
        - name: y
          maxapplications: 2
    """
)


def test_max_applications_is_enforced_at_allocation_time(make_partition):
    p = make_partition(MAX_APPS)
    p.add_node("node-1", {"memory": 100, "vcore": 100})
    for i, leaf in enumerate(["x", "x", "y", "y"]):
        # every application is accepted: the limit bites when it would start running
        p.add_application(f"app-{i}", queue_name=f"root.p.{leaf}", user="u")
        p.add_ask(f"app-{i}", "k", {"memory": 1}, max_allocations=2)

    made = p.schedule()
    assert by_app(made) == {"app-0": 2, "app-2": 2}  # x's limit 1, then p's limit 2
    states = {app_id: app.state for app_id, app in p.applications.items()}
    assert states == {"app-0": S.RUNNING, "app-1": S.ACCEPTED, "app-2": S.RUNNING, "app-3": S.ACCEPTED}
    assert p.queues["root.p"].running_apps == 2
    assert set(p.unschedulable) == set()

    # a running application keeps getting resources
    p.add_ask("app-2", "more", {"memory": 1})
    assert by_app(p.schedule()) == {"app-2": 1}

    # removing a running application frees a slot: app-1 (x) and app-3 (y) compete for p's one slot
    p.remove_application("app-0")
    made = p.schedule()
    assert by_app(made) == {"app-1": 2}
    assert p.applications["app-3"].state is S.ACCEPTED


def test_max_applications_slot_frees_when_an_application_completes(make_partition):
    p = make_partition(MAX_APPS)
    p.add_node("node-1", {"memory": 100, "vcore": 100})
    p.add_application("app-0", queue_name="root.p.x", user="u")
    p.add_application("app-1", queue_name="root.p.x", user="u")
    p.add_ask("app-0", "k", {"memory": 1})
    p.add_ask("app-1", "k", {"memory": 1})
    made = p.schedule()
    assert by_app(made) == {"app-0": 1}

    p.release_allocations("app-0")  # nothing left: Completing, no longer counted
    assert p.applications["app-0"].state is S.COMPLETING
    assert by_app(p.schedule()) == {"app-1": 1}
