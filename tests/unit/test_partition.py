"""PartitionModel scenarios: what a user of the scheduler notices, after YuniKorn's documented behaviour.

Modelled on yunikorn-core's scheduler smoke tests (basic scheduling, fairness, node sorting,
reservations, recovery, placement). Every partition is checked against the model's invariants when
its test ends (see conftest.py). Config quantities: ``vcore: 1`` in YAML is 1000 millicores; ask,
node and recovered-allocation quantities are raw SI integers.
"""

from __future__ import annotations

import json
import textwrap
from collections import Counter

import attrs
import pytest

from korral.config import PartitionConfig, PlacementRuleConfig, load_config
from korral.errors import ConfigError
from korral.model.allocation import Allocation
from korral.model.application import ApplicationState
from korral.model.partition import ModelError, PartitionModel
from korral.model.queue import QueueState

S = ApplicationState


def conf(children: str = "", *, partition: str = "", root: str = 'submitacl: "*"') -> str:
    """A queues.yaml with one partition; ``children`` are root's child queues as YAML list items."""
    text = "partitions:\n  - name: default\n"
    if partition:
        text += textwrap.indent(textwrap.dedent(partition).strip("\n"), "    ") + "\n"
    text += "    queues:\n      - name: root\n"
    if root:
        text += textwrap.indent(textwrap.dedent(root).strip("\n"), "        ") + "\n"
    if children:
        text += (
            "        queues:\n" + textwrap.indent(textwrap.dedent(children).strip("\n"), "          ") + "\n"
        )
    return text


def by_app(made: list[Allocation]) -> Counter[str]:
    return Counter(a.application_id for a in made)


def by_node(made: list[Allocation]) -> Counter[str]:
    return Counter(a.node_id for a in made)


def recovered(app: str, key: str, node: str, resource: dict[str, int], uuid: str = "") -> Allocation:
    return Allocation(uuid=uuid, allocation_key=key, application_id=app, node_id=node, resource=resource)


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


# ---- reservations -----------------------------------------------------------------------------------------


def reservation_setup(make_partition, *, delay: float = 0.0) -> PartitionModel:
    """YuniKorn's TestReservationForTwoQueues: app-1 fills two 50/50 nodes to 40 each; app-2's two 20s
    cannot fit anywhere; app-3's 5s would fit in the 10 left on each node."""
    p = make_partition(
        conf(
            """
            - name: leaf-1
              resources: {guaranteed: {memory: 100, vcore: 100}}
            - name: leaf-2
              resources: {guaranteed: {memory: 100, vcore: 100}}
            """
        ),
        reservation_delay=delay,
    )
    p.add_node("node-1", {"memory": 50, "vcore": 50})
    p.add_node("node-2", {"memory": 50, "vcore": 50})
    p.add_application("app-1", queue_name="root.leaf-1", user="u")
    p.add_ask("app-1", "alloc-1", {"memory": 20, "vcore": 20}, max_allocations=4)
    assert len(p.schedule()) == 4
    p.add_application("app-2", queue_name="root.leaf-2", user="u")
    p.add_application("app-3", queue_name="root.leaf-2", user="u")
    p.add_ask("app-2", "large-1", {"memory": 20, "vcore": 20})
    p.add_ask("app-2", "large-2", {"memory": 20, "vcore": 20})
    p.add_ask("app-3", "small", {"memory": 5, "vcore": 5}, max_allocations=2)
    return p


def test_reserved_nodes_are_skipped_by_other_asks(make_partition):
    p = reservation_setup(make_partition)
    assert p.schedule() == []
    assert p.reservations == {("app-2", "large-1"): "node-1", ("app-2", "large-2"): "node-2"}
    assert p.applications["app-2"].reservations == {"large-1": "node-1", "large-2": "node-2"}
    assert p.nodes["node-1"].reservation == ("app-2", "large-1")
    # app-3's small asks would fit, but both nodes are held: app-3 is starved
    assert p.applications["app-3"].allocations == {}
    assert ("app-3", "small") in p.unschedulable


def test_reservation_waits_for_the_reservation_delay(make_partition, clock):
    p = reservation_setup(make_partition, delay=2.0)
    p.remove_ask("app-3", "small")
    assert p.schedule() == []
    assert p.reservations == {}
    assert set(p.unschedulable) == {("app-2", "large-1"), ("app-2", "large-2")}

    clock.now = 1.9
    assert p.schedule() == [] and p.reservations == {}
    clock.now = 2.0
    assert p.schedule() == []
    assert set(p.reservations) == {("app-2", "large-1"), ("app-2", "large-2")}


def test_reserved_ask_is_allocated_first_when_room_appears(make_partition):
    p = reservation_setup(make_partition)
    p.schedule()
    # a high priority competitor arrives in the other queue
    p.add_application("app-4", queue_name="root.leaf-1", user="u")
    p.add_ask("app-4", "rival", {"memory": 20, "vcore": 20}, priority=1000)
    on_node_1 = next(a for a in p.applications["app-1"].allocations.values() if a.node_id == "node-1")
    p.release_allocation("app-1", on_node_1.uuid)

    first = p.schedule_one()
    assert (first.application_id, first.allocation_key, first.node_id) == ("app-2", "large-1", "node-1")
    assert ("app-2", "large-1") not in p.reservations
    assert p.nodes["node-1"].reservation is None
    assert ("app-2", "large-1") not in p.unschedulable


def test_removing_the_blocking_application_fills_every_reservation(make_partition):
    p = reservation_setup(make_partition)
    p.schedule()
    p.remove_application("app-1")
    made = p.schedule()
    assert [(a.allocation_key, a.node_id) for a in made[:2]] == [("large-1", "node-1"), ("large-2", "node-2")]
    assert by_app(made) == {"app-2": 2, "app-3": 2}
    assert p.reservations == {}
    assert p.queues["root.leaf-2"].allocated == {"memory": 50, "vcore": 50}
    assert p.unschedulable == {}


def test_reserved_ask_allocated_elsewhere_cancels_its_reservation(make_partition):
    """YuniKorn's TestAddNewNode: a new node takes the reserved asks, both reservations go."""
    p = reservation_setup(make_partition)
    p.schedule()
    p.add_node("node-3", {"memory": 50, "vcore": 50})
    made = p.schedule()
    assert [(a.allocation_key, a.node_id) for a in made[:2]] == [("large-1", "node-3"), ("large-2", "node-3")]
    assert p.reservations == {}
    assert p.nodes["node-1"].reservation is None and p.nodes["node-2"].reservation is None
    # the released nodes are usable again: app-3's small asks land on them
    assert {a.node_id for a in made if a.application_id == "app-3"} <= {"node-1", "node-2", "node-3"}
    assert by_app(made)["app-3"] == 2


@pytest.mark.parametrize(
    "cancel",
    [
        pytest.param(lambda p: p.remove_ask("app-2", "large-1"), id="remove-ask"),
        pytest.param(lambda p: p.add_ask("app-2", "large-1", {"memory": 20, "vcore": 20}), id="replace-ask"),
        pytest.param(lambda p: p.remove_node("node-1"), id="remove-node"),
        pytest.param(lambda p: p.remove_application("app-2"), id="remove-application"),
    ],
)
def test_reservation_is_cancelled_when_its_ask_node_or_application_goes(make_partition, cancel):
    p = reservation_setup(make_partition)
    p.schedule()
    assert p.reservations[("app-2", "large-1")] == "node-1"

    cancel(p)
    assert ("app-2", "large-1") not in p.reservations
    if "node-1" in p.nodes:
        assert p.nodes["node-1"].reservation is None
    app = p.applications.get("app-2")
    if app is not None:
        assert "large-1" not in app.reservations


def test_reservation_picks_the_node_closest_to_fitting(make_partition):
    p = make_partition(conf("- name: leaf"), reservation_delay=0.0)
    p.add_node("almost", {"memory": 100, "vcore": 100}, occupied={"memory": 60, "vcore": 60})
    p.add_node("far", {"memory": 100, "vcore": 100}, occupied={"memory": 90, "vcore": 90})
    p.add_node("tiny", {"memory": 10, "vcore": 10})  # can never hold the ask: not reservable
    p.add_application("app-1", queue_name="root.leaf", user="u")
    p.add_ask("app-1", "x", {"memory": 50, "vcore": 50})
    assert p.schedule() == []
    assert p.reservations == {("app-1", "x"): "almost"}


def test_no_reservation_when_no_node_could_ever_hold_the_ask(make_partition):
    p = make_partition(conf("- name: leaf"), reservation_delay=0.0)
    p.add_node("node-1", {"memory": 10, "vcore": 10})
    p.add_application("app-1", queue_name="root.leaf", user="u")
    p.add_ask("app-1", "huge", {"memory": 50})
    assert p.schedule() == []
    assert p.reservations == {}
    assert set(p.unschedulable) == {("app-1", "huge")}


def test_a_node_holds_one_reservation(make_partition):
    p = make_partition(conf("- name: leaf"), reservation_delay=0.0)
    p.add_node("node-1", {"memory": 10}, occupied={"memory": 5})
    p.add_node("node-2", {"memory": 10}, occupied={"memory": 5})
    p.add_application("app-1", queue_name="root.leaf", user="u")
    for key in ("a", "b", "c"):
        p.add_ask("app-1", key, {"memory": 8})
    p.schedule()
    # one reservation per node: the third ask finds no node to hold
    assert p.reservations == {("app-1", "a"): "node-1", ("app-1", "b"): "node-2"}
    assert set(p.unschedulable) == {("app-1", "a"), ("app-1", "b"), ("app-1", "c")}

    p.update_node("node-1", occupied={})
    made = p.schedule()
    assert [(a.allocation_key, a.node_id) for a in made] == [("a", "node-1")]
    # node-1 is free to be reserved again: the waiting ask takes it
    assert p.reservations == {("app-1", "b"): "node-2", ("app-1", "c"): "node-1"}


# ---- unschedulable asks and predicates ------------------------------------------------------------------


def test_unschedulable_asks_are_recorded_and_cleared(make_partition):
    p = make_partition(conf("- name: q\n  resources:\n    max: {memory: 100}"))
    p.add_node("node-1", {"memory": 40, "vcore": 100})
    p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "too-big-for-nodes", {"memory": 60})
    p.add_ask("app-1", "too-big-for-queue", {"memory": 120})
    assert p.schedule() == []
    assert set(p.unschedulable) == {("app-1", "too-big-for-nodes")}
    entry = p.unschedulable[("app-1", "too-big-for-nodes")]
    assert (entry.application_id, entry.allocation_key) == ("app-1", "too-big-for-nodes")

    p.add_node("node-2", {"memory": 80, "vcore": 100})
    assert [a.allocation_key for a in p.schedule()] == ["too-big-for-nodes"]
    assert p.unschedulable == {}


def test_asks_waiting_in_a_full_cluster_are_outstanding(make_partition):
    """Only the cluster's size is in the way: the RM is told so it may scale up (not a quota matter)."""
    p = make_partition(
        conf(
            """
            - name: q
              resources: {max: {memory: 1000}}
            - name: capped
              resources: {max: {memory: 10}}
            """
        )
    )
    p.add_node("node-1", {"memory": 100})
    p.add_application("app-1", queue_name="root.q", user="u")
    p.add_application("app-2", queue_name="root.capped", user="u")
    p.add_ask("app-2", "fill", {"memory": 10})
    p.add_ask("app-1", "fill", {"memory": 30}, max_allocations=3)
    assert len(p.schedule()) == 4  # the node is full
    p.add_ask("app-1", "wait", {"memory": 20})
    p.add_ask("app-2", "over-max", {"memory": 5})
    assert p.schedule() == []
    # app-1's ask fits its queue but not the cluster; app-2's is over its own queue's max
    assert set(p.unschedulable) == {("app-1", "wait")}

    p.add_node("node-2", {"memory": 100})
    assert [a.allocation_key for a in p.schedule()] == ["wait"]
    assert p.unschedulable == {}


@pytest.mark.parametrize(
    "leave",
    [
        pytest.param(lambda p: p.remove_ask("app-1", "x"), id="ask-removed"),
        pytest.param(lambda p: p.remove_application("app-1"), id="application-removed"),
    ],
)
def test_unschedulable_entry_goes_with_its_ask(make_partition, leave):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 10})
    p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "x", {"memory": 60})
    p.schedule()
    assert ("app-1", "x") in p.unschedulable
    leave(p)
    assert p.unschedulable == {}


def test_replaced_ask_that_fits_clears_its_unschedulable_entry(make_partition):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 10})
    p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "x", {"memory": 60})
    p.schedule()
    assert ("app-1", "x") in p.unschedulable

    p.add_ask("app-1", "x", {"memory": 5})  # the RM shrinks the request
    assert len(p.schedule()) == 1
    assert p.unschedulable == {}


def _reject_node_1(allocation_key, node_id, allocate):
    return node_id != "node-1"


def _raise_on_node_1(allocation_key, node_id, allocate):
    if node_id == "node-1":
        raise RuntimeError("plugin crashed")
    return True


@pytest.mark.parametrize("predicate", [_reject_node_1, _raise_on_node_1], ids=["false", "raises"])
def test_predicate_failure_excludes_the_node(make_partition, predicate):
    p = make_partition(conf("- name: q", partition="nodesortpolicy: {type: binpacking}"), predicate=predicate)
    p.add_node("node-1", {"memory": 100}, occupied={"memory": 50})  # binpacking would pick it first
    p.add_node("node-2", {"memory": 100})
    p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "x", {"memory": 10}, max_allocations=3)
    assert set(by_node(p.schedule())) == {"node-2"}


def test_predicates_see_allocations_and_reservations(make_partition):
    calls: list[tuple[str, str, bool]] = []

    def predicate(allocation_key, node_id, allocate):
        calls.append((allocation_key, node_id, allocate))
        return node_id == "node-2"

    p = make_partition(conf("- name: q"), predicate=predicate, reservation_delay=0.0)
    p.add_node("node-1", {"memory": 100})
    p.add_node("node-2", {"memory": 100}, occupied={"memory": 95})
    p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "x", {"memory": 10})
    assert p.schedule() == []
    assert ("x", "node-1", True) in calls  # node-1 fits but is refused
    assert ("x", "node-2", False) in calls  # reservation check
    assert p.reservations == {("app-1", "x"): "node-2"}
    assert set(p.unschedulable) == {("app-1", "x")}


# ---- placement --------------------------------------------------------------------------------------------

PLACEMENT = conf(
    """
    - name: default
      submitacl: "*"
    - name: batch
      submitacl: batchuser
    - name: secure
      submitacl: "alice admins"
    - name: users
      parent: true
      submitacl: "*"
      childtemplate:
        maxapplications: 3
        properties: {application.sort.policy: fair}
        resources:
          guaranteed: {memory: 500, vcore: 1}
          max: {memory: 1000, vcore: 2}
    - name: ns
      parent: true
      submitacl: "*"
    """,
    partition="""
    placementrules:
      - name: provided
      - name: tag
        value: namespace
        create: true
        parent: {name: fixed, value: root.ns}
      - name: fixed
        value: batch
        filter: {type: allow, users: [batchuser]}
      - name: user
        create: true
        filter: {type: deny, users: [homeless]}
        parent: {name: fixed, value: root.users}
    """,
    root="",
)


@pytest.mark.parametrize(
    "queue_name, user, groups, tags, expected",
    [
        ("root.secure", "alice", (), {}, "root.secure"),
        ("secure", "alice", (), {}, "root.secure"),  # provided short name is qualified under root
        ("root.secure", "bob", ("admins",), {}, "root.secure"),  # group in the ACL
        ("root.secure", "bob", (), {}, "root.users.bob"),  # ACL refuses: the next rules run
        ("", "carol", (), {"namespace": "dev"}, "root.ns.dev"),  # tag rule creates below root.ns
        ("", "batchuser", (), {}, "root.batch"),  # fixed rule, filter allows
        ("", "first.last", (), {}, "root.users.first_dot_last"),  # user rule, dots replaced
        ("", "homeless", (), {}, "root.default"),  # every rule passes: root.default fallback
        ("root.missing", "dave", (), {}, "root.users.dave"),  # provided without create: next rule
    ],
)
def test_placement_rules(make_partition, queue_name, user, groups, tags, expected):
    p = make_partition(PLACEMENT)
    app = p.add_application("app-1", queue_name=queue_name, user=user, groups=groups, tags=tags)
    assert app.queue_path == expected
    assert p.queues[expected].applications["app-1"] is app


@pytest.mark.parametrize(
    "children, root, partition, queue_name, user",
    [
        pytest.param(
            '- name: secure\n  submitacl: "alice"', "", "", "root.secure", "bob", id="acl-refused-no-default"
        ),
        pytest.param("- name: other", 'submitacl: "*"', "", "root.nothere", "bob", id="no-queue-no-create"),
        pytest.param(
            "- name: leaf",
            'submitacl: "*"',
            "placementrules:\n  - {name: provided, create: true}",
            "root.leaf.below",
            "bob",
            id="below-a-leaf",
        ),
        pytest.param(
            "- name: parent\n  parent: true", 'submitacl: "*"', "", "root.parent", "bob", id="not-a-leaf"
        ),
    ],
)
def test_placement_rejections(make_partition, children, root, partition, queue_name, user):
    p = make_partition(conf(children, root=root, partition=partition))
    with pytest.raises(ModelError, match="no placement rule matched"):
        p.add_application("app-1", queue_name=queue_name, user=user)
    assert p.applications == {}


def test_placement_refuses_a_draining_queue(make_partition):
    text = conf("- name: a\n- name: b")
    p = make_partition(text)
    p.apply_config(load_config(conf("- name: a")).partitions[0])
    assert p.queues["root.b"].state is QueueState.DRAINING
    with pytest.raises(ModelError, match="no placement rule matched"):
        p.add_application("app-1", queue_name="root.b", user="u")
    p.add_application("app-2", queue_name="root.a", user="u")


@pytest.mark.parametrize(
    "user, tags, reason",
    [
        ("", {}, "empty user cannot resolve"),
        ("", {"application.create.force": "false"}, "empty user cannot resolve"),
    ],
)
def test_application_without_user_is_rejected(make_partition, user, tags, reason):
    p = make_partition(conf("- name: default"))
    with pytest.raises(ModelError, match=reason):
        p.add_application("app-1", queue_name="root.default", user=user, tags=tags)


def test_forced_application_without_user_lands_in_recovery(make_partition):
    p = make_partition(conf("- name: default", root=""))
    app = p.add_application(
        "app-1", queue_name="root.default", user="", tags={"application.create.force": "true"}
    )
    assert (app.user, app.groups, app.queue_path) == ("nobody", ("nogroup",), "root.@recovery@")
    assert p.queues["root.@recovery@"].is_managed is False


def test_duplicate_application_is_rejected(make_partition):
    p = make_partition(conf("- name: default"))
    p.add_application("app-1", queue_name="root.default", user="u")
    with pytest.raises(ModelError, match="already exists"):
        p.add_application("app-1", queue_name="root.default", user="u")
    with pytest.raises(ModelError, match="must not be empty"):
        p.add_application("", queue_name="root.default", user="u")
    assert list(p.applications) == ["app-1"]


@pytest.mark.parametrize(
    "path, reason",
    [
        ("other.queue", "not fully qualified"),
        ("root.leaf.below", "is a leaf queue"),
        ("root.gone.child", "is draining"),
    ],
)
def test_create_queue_refuses_impossible_paths(make_partition, path, reason):
    p = make_partition(conf("- name: leaf\n- name: gone\n  parent: true"))
    p.apply_config(load_config(conf("- name: leaf")).partitions[0])
    with pytest.raises(ModelError, match=reason):
        p.create_queue(path)
    assert set(p.queues) == {"root", "root.leaf", "root.gone"}


def test_dynamic_leaf_takes_the_child_template(make_partition):
    p = make_partition(PLACEMENT)
    p.add_application("app-1", queue_name="", user="bob")
    leaf = p.queues["root.users.bob"]
    assert (leaf.is_leaf, leaf.is_managed) == (True, False)
    assert leaf.max == {"memory": 1000, "vcore": 2000}
    assert leaf.guaranteed == {"memory": 500, "vcore": 1000}
    assert leaf.max_applications == 3
    assert leaf.sort_policy == "fair"
    # the template's max is enforced
    p.add_node("node-1", {"memory": 10_000, "vcore": 10_000})
    p.add_ask("app-1", "x", {"memory": 100, "vcore": 1000}, max_allocations=5)
    assert len(p.schedule()) == 2


def test_child_template_is_inherited_through_dynamic_parents(make_partition):
    p = make_partition(
        conf(
            """
            - name: org
              parent: true
              childtemplate:
                maxapplications: 7
                resources: {max: {memory: 300}}
            """,
            partition="placementrules:\n  - {name: provided, create: true}",
        )
    )
    app = p.add_application("app-1", queue_name="root.org.team.work", user="u")
    assert app.queue_path == "root.org.team.work"
    team, work = p.queues["root.org.team"], p.queues["root.org.team.work"]
    assert (team.is_leaf, team.is_managed) == (False, False)
    assert (work.is_leaf, work.max, work.max_applications) == (True, {"memory": 300}, 7)


def _quota(**quantities: int) -> str:
    return json.dumps({"resources": {name: {"value": value} for name, value in quantities.items()}})


def test_namespace_quota_tags_apply_to_dynamic_queues_only(make_partition):
    p = make_partition(PLACEMENT)
    tags = {
        "namespace": "dev",
        "namespace.resourcequota": _quota(memory=30, vcore=3000),
        "namespace.resourceguaranteed": _quota(memory=10),
        "namespace.resourcemaxapps": "4",
    }
    p.add_application("app-1", queue_name="", user="carol", tags=tags)
    dev = p.queues["root.ns.dev"]
    assert (dev.max, dev.guaranteed, dev.max_applications) == (
        {"memory": 30, "vcore": 3000},
        {"memory": 10},
        4,
    )

    # a managed queue keeps its configuration
    p.add_application("app-2", queue_name="root.default", user="carol", tags=tags)
    default = p.queues["root.default"]
    assert (default.max, default.guaranteed, default.max_applications) == (None, None, 0)

    p.add_node("node-1", {"memory": 1000, "vcore": 100_000})
    p.add_ask("app-1", "x", {"memory": 10}, max_allocations=5)
    assert len(p.schedule()) == 3
    assert dev.allocated == {"memory": 30}


def test_broken_quota_tag_is_ignored(make_partition):
    p = make_partition(PLACEMENT)
    p.add_application(
        "app-1", queue_name="", user="u", tags={"namespace": "x", "namespace.resourcequota": "{oops"}
    )
    assert p.queues["root.ns.x"].max is None


# ---- application states -----------------------------------------------------------------------------------


def test_application_lifecycle(make_partition, clock):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 100})
    app = p.add_application("app-1", queue_name="root.q", user="u")
    assert app.state is S.NEW

    clock.now = 1.0
    p.add_ask("app-1", "k", {"memory": 1}, max_allocations=2)
    assert app.state is S.ACCEPTED
    p.schedule(limit=1)
    assert app.state is S.STARTING
    p.schedule(limit=1)
    assert app.state is S.RUNNING

    clock.now = 5.0
    p.release_allocations("app-1")
    assert app.state is S.COMPLETING
    assert p.expire_completing(30.0) == []  # not yet 30 s
    clock.now = 34.9
    assert p.expire_completing(30.0) == []
    clock.now = 35.0
    assert p.expire_completing(30.0) == ["app-1"]
    assert app.state is S.COMPLETED
    assert "app-1" not in p.applications and "app-1" not in p.queues["root.q"].applications

    changes = p.take_effects().state_changes
    assert [(c.application_id, c.state) for c in changes] == [
        ("app-1", "Accepted"),
        ("app-1", "Starting"),
        ("app-1", "Running"),
        ("app-1", "Completing"),
        ("app-1", "Completed"),
    ]
    assert [c.timestamp for c in changes] == [1.0, 1.0, 1.0, 5.0, 35.0]
    assert p.take_effects().state_changes == []


def test_stateaware_disabled_application_runs_on_first_allocation(make_partition):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 100})
    app = p.add_application(
        "app-1", queue_name="root.q", user="u", tags={"application.stateaware.disable": "true"}
    )
    p.add_ask("app-1", "k", {"memory": 1}, max_allocations=2)
    p.schedule(limit=1)
    assert app.state is S.RUNNING


def test_new_ask_brings_a_completing_application_back_to_running(make_partition):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 100})
    app = p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "k", {"memory": 1}, max_allocations=2)
    p.schedule()
    p.release_allocations("app-1")
    assert app.state is S.COMPLETING
    assert p.queues["root.q"].running_apps == 0

    p.add_ask("app-1", "k2", {"memory": 1})
    assert app.state is S.RUNNING
    assert p.queues["root.q"].running_apps == 1
    assert p.expire_completing(0.0) == []


@pytest.mark.parametrize(
    "allocate_first", [False, True], ids=["last-ask-removed", "last-allocation-released"]
)
def test_application_completes_when_nothing_is_left(make_partition, allocate_first):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 100})
    app = p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "k", {"memory": 1}, max_allocations=2)
    if allocate_first:
        p.schedule()
        assert app.state is S.RUNNING
        p.release_allocations("app-1")
    else:
        p.remove_ask("app-1", "k")
    assert app.state is S.COMPLETING
    assert p.queues["root.q"].running_apps == 0


def test_application_with_allocations_left_does_not_complete(make_partition):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 100})
    app = p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "k", {"memory": 1}, max_allocations=2)
    p.schedule()
    first = next(iter(app.allocations))
    p.release_allocations("app-1", uuid=first)
    assert app.state is S.RUNNING
    p.add_ask("app-1", "pending", {"memory": 1000})  # never fits
    p.release_allocations("app-1")
    assert app.state is S.RUNNING  # an ask is still pending
    p.remove_ask("app-1", "pending")
    assert app.state is S.COMPLETING


@pytest.mark.parametrize("state", [S.COMPLETED, S.FAILED, S.REJECTED, S.EXPIRED, S.FAILING])
def test_terminal_application_rejects_asks(make_partition, state):
    p = make_partition(conf("- name: q"))
    app = p.add_application("app-1", queue_name="root.q", user="u")
    app.state = state  # no public event reaches these states in the model yet
    with pytest.raises(ModelError, match=f"is {state.value}"):
        p.add_ask("app-1", "k", {"memory": 1})
    assert app.asks == {} and p.queues["root.q"].pending == {}


# ---- asks -------------------------------------------------------------------------------------------------


def test_ask_with_the_same_key_replaces_the_old_one(make_partition):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 100})
    app = p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "k", {"memory": 10}, max_allocations=3)
    p.schedule(limit=1)
    assert p.queues["root.q"].pending == {"memory": 20}

    p.add_ask("app-1", "k", {"memory": 7}, max_allocations=2)
    assert list(app.asks) == ["k"]
    assert app.pending == p.queues["root.q"].pending == p.root.pending == {"memory": 14}
    assert len(app.allocations) == 1  # what was allocated stays
    made = p.schedule()
    assert [a.resource for a in made] == [{"memory": 7}, {"memory": 7}]
    assert len({a.ask_generation for a in app.allocations.values()}) == 2


@pytest.mark.parametrize("max_allocations, expected", [(1, 1), (5, 5)])
def test_max_allocations_repeats_the_ask(make_partition, max_allocations, expected):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 100})
    p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "k", {"memory": 10}, max_allocations=max_allocations)
    made = p.schedule()
    assert len(made) == expected
    assert {a.allocation_key for a in made} == {"k"}
    assert len({a.uuid for a in made}) == expected


@pytest.mark.parametrize(
    "app_id, key, resource, max_allocations, reason",
    [
        ("app-1", "k", {"memory": 0}, 1, "contains no resources"),
        ("app-1", "k", {}, 1, "contains no resources"),
        ("app-1", "k", {"memory": -1, "vcore": 5}, 1, "contains negative resources"),
        ("app-1", "k", {"memory": 1}, -1, "invalid ask k: max allocations -1"),
        ("app-1", "k", {"memory": 1}, 0, "invalid ask k: max allocations 0"),
        ("app-1", "", {"memory": 1}, 1, "allocation key must not be empty"),
        ("ghost", "k", {"memory": 1}, 1, "failed to find application ghost"),
    ],
)
def test_bad_asks_are_rejected_with_a_reason(make_partition, app_id, key, resource, max_allocations, reason):
    p = make_partition(conf("- name: q"))
    app = p.add_application("app-1", queue_name="root.q", user="u")
    with pytest.raises(ModelError, match=reason):
        p.add_ask(app_id, key, resource, max_allocations=max_allocations)
    assert app.asks == {} and app.state is S.NEW and p.root.pending == {}


def test_zero_quantities_are_pruned_from_asks(make_partition):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 100})
    p.add_application("app-1", queue_name="root.q", user="u")
    ask = p.add_ask("app-1", "k", {"memory": 10, "vcore": 0})
    assert ask.resource == {"memory": 10}
    assert len(p.schedule()) == 1  # the node has no vcore, and the ask needs none


def test_removing_unknown_asks_is_harmless(make_partition):
    p = make_partition(conf("- name: q"))
    p.add_application("app-1", queue_name="root.q", user="u")
    assert p.remove_ask("app-1", "nothing") is None
    assert p.remove_ask("ghost", "nothing") is None
    assert p.release_allocations("ghost") == []
    assert p.release_allocation("ghost", "uuid") is None
    assert p.release_allocation("app-1", "uuid") is None
    with pytest.raises(ModelError, match="failed to find application"):
        p.remove_application("ghost")
    with pytest.raises(ModelError, match="failed to find application"):
        p.application("ghost")


# ---- releases ---------------------------------------------------------------------------------------------


def _two_keys_three_allocations(make_partition):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 100, "vcore": 100})
    p.add_node("node-2", {"memory": 100, "vcore": 100})
    p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "a", {"memory": 10, "vcore": 1}, max_allocations=2)
    p.add_ask("app-1", "b", {"memory": 20, "vcore": 2})
    made = p.schedule()
    assert len(made) == 3
    return p, made


@pytest.mark.parametrize(
    "how, released_keys, left",
    [
        ("uuid", ["a"], {"memory": 30, "vcore": 3}),
        ("key-a", ["a", "a"], {"memory": 20, "vcore": 2}),
        ("key-b", ["b"], {"memory": 20, "vcore": 2}),
        ("all", ["a", "a", "b"], {}),
    ],
)
def test_release_by_uuid_key_or_all(make_partition, how, released_keys, left):
    p, made = _two_keys_three_allocations(make_partition)
    kwargs = {
        "uuid": {"uuid": made[0].uuid},
        "key-a": {"allocation_key": "a"},
        "key-b": {"allocation_key": "b"},
        "all": {},
    }[how]
    released = p.release_allocations("app-1", **kwargs)
    assert sorted(a.allocation_key for a in released) == released_keys
    app = p.applications["app-1"]
    assert app.allocated == p.queues["root.q"].allocated == p.root.allocated == left
    node_used = {}
    for node in p.nodes.values():
        for name, quantity in node.allocated.items():
            node_used[name] = node_used.get(name, 0) + quantity
    assert node_used == left
    assert app.state is (S.COMPLETING if not left else S.RUNNING)


def test_release_of_an_unknown_uuid_changes_nothing(make_partition):
    p, _ = _two_keys_three_allocations(make_partition)
    assert p.release_allocations("app-1", uuid="nope") == []
    assert p.release_allocations("app-1", allocation_key="nope") == []
    assert len(p.applications["app-1"].allocations) == 3


def test_remove_application_releases_everything(make_partition):
    p, made = _two_keys_three_allocations(make_partition)
    p.add_ask("app-1", "c", {"memory": 1000})  # pending, never fits
    released = p.remove_application("app-1")
    assert sorted(a.uuid for a in released) == sorted(a.uuid for a in made)
    assert "app-1" not in p.applications
    q = p.queues["root.q"]
    assert q.allocated == q.pending == p.root.allocated == p.root.pending == {}
    assert q.running_apps == p.root.running_apps == 0
    assert all(not n.allocations and n.available == n.capacity for n in p.nodes.values())


# ---- nodes ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "node_id, capacity, reason",
    [
        ("node-1", {"memory": 10}, "already exists"),
        ("", {"memory": 10}, "must not be empty"),
        ("node-2", {"memory": -10}, "negative capacity"),
    ],
)
def test_bad_nodes_are_rejected(make_partition, node_id, capacity, reason):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 100})
    with pytest.raises(ModelError, match=reason):
        p.add_node(node_id, capacity)
    assert list(p.nodes) == ["node-1"] and p.capacity == {"memory": 100}


@pytest.mark.parametrize(
    "call",
    [
        lambda p: p.update_node("ghost", capacity={"memory": 1}),
        lambda p: p.set_node_schedulable("ghost", False),
        lambda p: p.remove_node("ghost"),
        lambda p: p.update_node("node-1", capacity={"memory": -1}),
    ],
)
def test_unknown_node_or_bad_update_is_rejected(make_partition, call):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 100})
    with pytest.raises(ModelError):
        call(p)
    assert p.capacity == {"memory": 100}


def test_node_capacity_update_changes_partition_capacity_and_root_max(make_partition):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 100, "vcore": 10})
    p.add_node("node-2", {"memory": 100, "vcore": 10})
    p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "k", {"memory": 50}, max_allocations=6)
    assert len(p.schedule()) == 4

    p.update_node("node-1", capacity={"memory": 200, "vcore": 10})
    assert p.capacity == {"memory": 300, "vcore": 20}
    assert len(p.schedule()) == 2  # the grown node takes two more
    assert p.root.max == {"memory": 300, "vcore": 20}

    p.update_node("node-2", capacity={"memory": 50})  # shrinks below what runs there
    p.refresh_limits()
    assert p.capacity == p.root.max == {"memory": 250, "vcore": 10}
    assert p.nodes["node-2"].available == {"memory": -50}
    assert p.nodes["node-2"].allocated == {"memory": 100}


def test_occupied_resources_reduce_what_is_available(make_partition):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 100, "vcore": 10}, occupied={"memory": 70})
    assert p.nodes["node-1"].available == {"memory": 30, "vcore": 10}
    p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "k", {"memory": 20}, max_allocations=3)
    assert len(p.schedule()) == 1

    p.update_node("node-1", occupied={"memory": 10})
    assert p.nodes["node-1"].available == {"memory": 70, "vcore": 10}
    assert len(p.schedule()) == 2
    assert p.nodes["node-1"].occupied == {"memory": 10}
    assert p.nodes["node-1"].available == {"memory": 30, "vcore": 10}

    p.update_node("node-1", attributes={"si/zone": "z1"})
    assert p.nodes["node-1"].attributes == {"si/zone": "z1"}


def test_drained_node_gets_nothing_until_schedulable_again(make_partition):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 100})
    p.add_node("node-2", {"memory": 100})
    p.set_node_schedulable("node-1", False)
    p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "k", {"memory": 40}, max_allocations=4)
    made = p.schedule()
    assert set(by_node(made)) == {"node-2"} and len(made) == 2

    p.set_node_schedulable("node-1", True)
    made = p.schedule()
    assert set(by_node(made)) == {"node-1"} and len(made) == 2


def test_node_created_unschedulable_is_not_used(make_partition):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 100}, schedulable=False)
    p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "k", {"memory": 40})
    assert p.schedule() == []
    assert p.capacity == {"memory": 100}  # counted in the cluster, just not used


def test_decommission_releases_allocations_and_cancels_reservations(make_partition):
    p = reservation_setup(make_partition)
    p.schedule()
    on_node_1 = {a.uuid for a in p.applications["app-1"].allocations.values() if a.node_id == "node-1"}

    released = p.remove_node("node-1")
    assert {a.uuid for a in released} == on_node_1
    assert "node-1" not in p.nodes
    assert p.capacity == {"memory": 50, "vcore": 50}
    assert ("app-2", "large-1") not in p.reservations
    assert p.applications["app-1"].allocated == {"memory": 40, "vcore": 40}
    assert p.queues["root.leaf-1"].allocated == {"memory": 40, "vcore": 40}

    p.remove_node("node-2")
    assert p.capacity == {} and p.root.allocated == {}
    assert p.schedule() == []
    p.refresh_limits()
    assert p.root.max is None


# ---- recovery ---------------------------------------------------------------------------------------------


def test_recovered_allocations_go_above_the_queue_max(make_partition):
    p = make_partition(conf("- name: q\n  resources:\n    max: {memory: 100}"))
    p.add_node("node-1", {"memory": 1000})
    app = p.add_application("app-1", queue_name="root.q", user="u")
    for i in range(3):
        got = p.recover_allocation(recovered("app-1", f"k{i}", "node-1", {"memory": 50}, uuid=f"uuid-{i}"))
        assert got.uuid == f"uuid-{i}" and got.recovered
    assert p.queues["root.q"].allocated == {"memory": 150}
    assert p.nodes["node-1"].allocated == {"memory": 150}
    assert app.state is S.RUNNING
    assert [c.state for c in p.take_effects().state_changes] == ["Accepted", "Starting", "Running"]
    assert p.queues["root.q"].running_apps == 1

    # the queue is over its max: new asks wait
    p.add_ask("app-1", "new", {"memory": 1})
    assert p.schedule() == []
    # an allocation without a uuid gets one
    assert p.recover_allocation(recovered("app-1", "k9", "node-1", {"memory": 1})).uuid


def test_recovery_brings_a_completing_application_back(make_partition):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 1000})
    app = p.add_application("app-1", queue_name="root.q", user="u")
    p.add_ask("app-1", "k", {"memory": 1})
    p.remove_ask("app-1", "k")
    assert app.state is S.COMPLETING
    p.recover_allocation(recovered("app-1", "k", "node-1", {"memory": 5}))
    assert app.state is S.RUNNING


@pytest.mark.parametrize(
    "allocation, reason",
    [
        (recovered("ghost", "k", "node-1", {"memory": 1}), "failed to find application ghost"),
        (recovered("app-1", "k", "ghost", {"memory": 1}), "failed to find node ghost"),
        (recovered("app-1", "k", "node-1", {"memory": 0}), "contains no resources"),
        (recovered("app-1", "k", "node-1", {"memory": -4}), "contains negative resources"),
        (recovered("app-1", "k", "node-1", {"memory": 1}, uuid="taken"), "already live"),
    ],
)
def test_bad_recovered_allocations_are_rejected(make_partition, allocation, reason):
    p = make_partition(conf("- name: q"))
    p.add_node("node-1", {"memory": 1000})
    p.add_application("app-1", queue_name="root.q", user="u")
    p.recover_allocation(recovered("app-1", "first", "node-1", {"memory": 1}, uuid="taken"))
    with pytest.raises(ModelError, match=reason):
        p.recover_allocation(allocation)
    assert p.queues["root.q"].allocated == {"memory": 1}


# ---- config reload ----------------------------------------------------------------------------------------

BEFORE = conf(
    """
    - name: base
      resources:
        guaranteed: {memory: 100M, vcore: 10}
        max: {memory: 150M, vcore: 20}
    - name: tobedeleted
    - name: busy
    - name: org
      parent: true
    """,
    partition="placementrules:\n  - {name: provided, create: true}",
)
AFTER = conf(
    """
    - name: base
      resources:
        guaranteed: {memory: 500M, vcore: 250m}
        max: {memory: 1G, vcore: 500m}
    - name: tobeadded
      properties: {something: withAvalue}
    - name: org
      parent: true
    """,
    partition="""
    nodesortpolicy: {type: binpacking}
    placementrules:
      - {name: provided, create: true}
    """,
)


def test_config_reload_adds_updates_and_drains_queues(make_partition):
    """YuniKorn's TestConfigScheduler, plus what happens to the queues that are left out."""
    p = make_partition(BEFORE)
    assert p.queues["root.base"].max == {"memory": 150_000_000, "vcore": 20_000}
    p.add_node("node-1", {"memory": 10_000_000_000, "vcore": 100_000})
    p.add_application("app-1", queue_name="root.busy", user="u")
    p.add_application("app-2", queue_name="root.org.dyn", user="u")
    p.add_ask("app-1", "k", {"memory": 1}, max_allocations=2)
    p.schedule(limit=1)

    p.apply_config(load_config(AFTER).partitions[0])
    base = p.queues["root.base"]
    assert base.max == {"memory": 1_000_000_000, "vcore": 500}
    assert base.guaranteed == {"memory": 500_000_000, "vcore": 250}
    assert p.queues["root.tobeadded"].properties["something"] == "withAvalue"
    assert p.queues["root.tobedeleted"].state is QueueState.DRAINING
    assert p.queues["root.busy"].state is QueueState.DRAINING
    assert p.queues["root.org.dyn"].state is QueueState.ACTIVE  # dynamic queues are not in the config
    assert p.node_sort_policy == "binpacking"

    # a draining queue keeps scheduling what it has
    assert [a.application_id for a in p.schedule()] == ["app-1"]

    removed = p.cleanup_queues()
    assert set(removed) == {"root.tobedeleted"}
    p.remove_application("app-1")
    p.remove_application("app-2")
    assert set(p.cleanup_queues()) == {"root.busy", "root.org.dyn"}
    assert set(p.queues) == {"root", "root.base", "root.tobeadded", "root.org"}

    # configured again: a draining queue is Active again
    p.apply_config(load_config(AFTER.replace("- name: tobeadded", "- name: tobeadded2")).partitions[0])
    assert p.queues["root.tobeadded"].state is QueueState.DRAINING
    p.apply_config(load_config(AFTER).partitions[0])
    assert p.queues["root.tobeadded"].state is QueueState.ACTIVE


def test_dynamic_queue_that_appears_in_config_becomes_managed(make_partition):
    p = make_partition(BEFORE)
    p.add_application("app-1", queue_name="root.org.dyn", user="u")
    assert p.queues["root.org.dyn"].is_managed is False
    after = BEFORE.replace("parent: true\n", "parent: true\n            queues:\n              - name: dyn\n")
    p.apply_config(load_config(after).partitions[0])
    assert p.queues["root.org.dyn"].is_managed is True
    p.remove_application("app-1")
    assert p.cleanup_queues() == []


def test_cleanup_removes_empty_dynamic_parents_bottom_up(make_partition):
    p = make_partition(BEFORE)
    p.add_application("app-1", queue_name="root.a.b.c", user="u")
    p.add_application("app-2", queue_name="root.a.d", user="u")
    assert p.cleanup_queues() == []
    p.remove_application("app-1")
    assert p.cleanup_queues() == ["root.a.b.c", "root.a.b"]
    p.remove_application("app-2")
    assert p.cleanup_queues() == ["root.a.d", "root.a"]


def _bogus_rules(text: str) -> PartitionConfig:
    """The config's partition with a rule no validated config can hold (load_config refuses the name):
    the model still defends itself against it."""
    partition = load_config(text).partitions[0]
    return attrs.evolve(partition, placement_rules=(PlacementRuleConfig(name="bogus"),))


def test_the_validator_refuses_an_unknown_rule_before_the_model_sees_it():
    with pytest.raises(ConfigError, match="unknown placement rule name 'bogus'"):
        load_config(BEFORE.replace("{name: provided, create: true}", "{name: bogus}"))


def test_reload_with_broken_placement_rules_keeps_the_old_rules(make_partition):
    p = make_partition(BEFORE)
    with pytest.raises(ModelError, match="placement rules rejected"):
        p.apply_config(_bogus_rules(BEFORE))
    assert p.add_application("app-1", queue_name="root.new", user="u").queue_path == "root.new"


def test_broken_placement_rules_at_creation_fall_back_to_provided(clock):
    p = PartitionModel("[rm]default", _bogus_rules(BEFORE), rm_id="rm", clock=clock)
    assert p.add_application("app-1", queue_name="root.base", user="u").queue_path == "root.base"
    with pytest.raises(ModelError):
        p.add_application("app-2", queue_name="root.new", user="u")


def test_reload_switches_node_sorting(make_partition):
    p = make_partition(BEFORE)
    p.add_node("node-1", {"memory": 100, "vcore": 100}, occupied={"memory": 50, "vcore": 50})
    p.add_node("node-2", {"memory": 100, "vcore": 100})
    p.add_application("app-1", queue_name="root.busy", user="u")
    p.add_ask("app-1", "a", {"memory": 1})
    assert p.schedule()[0].node_id == "node-2"  # fair: least used
    p.apply_config(load_config(AFTER).partitions[0])
    p.add_ask("app-1", "b", {"memory": 1})
    assert p.schedule()[0].node_id == "node-1"  # binpacking: most used
