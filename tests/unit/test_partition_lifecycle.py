"""PartitionModel scenarios: application states, asks, releases, nodes and recovery."""

from __future__ import annotations

import pytest
from partition_helpers import S, by_node, conf, recovered, reservation_setup

from korral.model.partition.composed import ModelError

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
