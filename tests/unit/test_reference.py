"""ReferenceScheduler through SI messages: what an RM sends and what it gets back.

Modelled on yunikorn-core's smoke, recovery and benchmark scenarios. Every scheduler's partitions are
checked against the model's invariants when the test ends (see conftest.py).
"""

from __future__ import annotations

from collections import Counter

import pytest

from korral import si
from korral.harness.reference import ReferenceScheduler
from korral.model.app.application import ApplicationState

S = ApplicationState
NA = si.NodeAction
TT = si.TerminationType

CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
            resources:
              max: {memory: 100}
          - name: b
  - name: gpu
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: train
"""


def node(node_id: str, action: NA = NA.CREATE, partition: str = "", **fields) -> si.NodeInfo:
    attributes = dict(fields.pop("attributes", {}))
    if partition:
        attributes[si.NODE_PARTITION] = partition
    return si.NodeInfo(node_id=node_id, action=action, attributes=attributes, **fields)


def nodes(*infos: si.NodeInfo) -> si.NodeRequest:
    return si.NodeRequest(nodes=infos, rm_id="rm")


def app(app_id: str, queue: str = "root.a", user: str = "user", **fields) -> si.AddApplicationRequest:
    return si.AddApplicationRequest(
        application_id=app_id, queue_name=queue, ugi=si.UserGroupInformation(user=user), **fields
    )


def apps(*adds: si.AddApplicationRequest, remove: tuple[str, ...] = ()) -> si.ApplicationRequest:
    return si.ApplicationRequest(
        new=adds, remove=[si.RemoveApplicationRequest(application_id=a) for a in remove], rm_id="rm"
    )


def ask(app_id: str, key: str, resource: dict[str, int], repeat: int = 1, **fields) -> si.AllocationAsk:
    return si.AllocationAsk(
        allocation_key=key, application_id=app_id, resource_ask=resource, max_allocations=repeat, **fields
    )


def asks(*items: si.AllocationAsk) -> si.AllocationRequest:
    return si.AllocationRequest(asks=items, rm_id="rm")


def releases(*items: si.AllocationRelease | si.AllocationAskRelease) -> si.AllocationRequest:
    return si.AllocationRequest(
        releases=si.AllocationReleasesRequest(
            allocations_to_release=[i for i in items if isinstance(i, si.AllocationRelease)],
            allocation_asks_to_release=[i for i in items if isinstance(i, si.AllocationAskRelease)],
        ),
        rm_id="rm",
    )


def with_nodes(make_reference, *infos: si.NodeInfo, config: str = CONFIG, **kwargs) -> ReferenceScheduler:
    scheduler = make_reference(config, **kwargs)
    response, _ = scheduler.update_node(nodes(*infos))
    assert response.rejected == ()
    return scheduler


# ---- nodes ------------------------------------------------------------------------------------------------


def test_node_responses(make_reference):
    r = make_reference(CONFIG)
    response, allocations = r.update_node(
        nodes(
            node("node-1", schedulable_resource={"memory": 100, "vcore": 10}),
            node("node-2", schedulable_resource={"memory": 100}, occupied_resource={"memory": 30}),
            node("node-1", schedulable_resource={"memory": 5}),
            node("node-9", NA.UPDATE, schedulable_resource={"memory": 5}),
            node("node-3", partition="nowhere", schedulable_resource={"memory": 5}),
            node("node-4", NA.UNKNOWN_ACTION_FROM_RM),
            node("gpu-1", partition="gpu", schedulable_resource={"memory": 10, "gpu": 2}),
            node("", schedulable_resource={"memory": 5}),
        )
    )
    assert [n.node_id for n in response.accepted] == ["node-1", "node-2", "gpu-1"]
    reasons = {n.node_id: n.reason for n in response.rejected}
    assert set(reasons) == {"node-1", "node-9", "node-3", "node-4", ""}
    assert "already exists" in reasons["node-1"]
    assert "not found" in reasons["node-9"]
    assert "partition not found" in reasons["node-3"]
    assert "unknown node action" in reasons["node-4"]
    assert "must not be empty" in reasons[""]
    assert allocations == si.AllocationResponse()

    default, gpu = r.partition("default"), r.partition("gpu")
    assert default is r.partition("") is r.partition("[rm]default")
    assert default.capacity == {"memory": 200, "vcore": 10}
    assert default.nodes["node-2"].available == {"memory": 70}
    assert gpu.capacity == {"memory": 10, "gpu": 2}
    assert r.partition("nowhere") is None


def test_node_drain_update_and_decommission(make_reference):
    r = with_nodes(
        make_reference,
        node("node-1", schedulable_resource={"memory": 100}),
        node("node-2", schedulable_resource={"memory": 100}),
        node("node-3", NA.CREATE_DRAIN, schedulable_resource={"memory": 100}),
    )
    p = r.partition()
    assert p.nodes["node-3"].schedulable is False
    r.update_application(apps(app("app-1", queue="root.b")))
    r.update_allocation(asks(ask("app-1", "k", {"memory": 40}, repeat=8)))

    response, _ = r.update_node(nodes(node("node-1", NA.DRAIN_NODE)))
    assert response == si.NodeResponse()
    made = r.schedule()
    assert set(Counter(a.node_id for a in made)) == {"node-2"}

    r.update_node(nodes(node("node-1", NA.DRAIN_TO_SCHEDULABLE), node("node-3", NA.DRAIN_TO_SCHEDULABLE)))
    made = r.schedule()
    assert Counter(a.node_id for a in made) == {"node-1": 2, "node-3": 2}

    response, _ = r.update_node(
        nodes(
            node("node-2", NA.UPDATE, schedulable_resource={"memory": 200}, occupied_resource={"memory": 10})
        )
    )
    assert response == si.NodeResponse()
    assert p.capacity == {"memory": 400}
    assert p.nodes["node-2"].available == {"memory": 110}
    assert [a.node_id for a in r.schedule()] == ["node-2", "node-2"]

    on_node_1 = {a.uuid for a in p.applications["app-1"].allocations.values() if a.node_id == "node-1"}
    response, allocations = r.update_node(nodes(node("node-1", NA.DECOMISSION)))
    assert response == si.NodeResponse()
    assert {rel.uuid for rel in allocations.released} == on_node_1
    for release in allocations.released:
        assert release.termination_type == TT.STOPPED_BY_RM
        assert release.message == "Node node-1 Removed"
        assert (release.application_id, release.partition_name, release.allocation_key) == (
            "app-1",
            "default",
            "k",
        )
    assert "node-1" not in p.nodes and p.capacity == {"memory": 300}


# ---- applications -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_, reason",
    [
        (app("app-x", queue="root.missing"), "no placement rule matched"),
        (app("app-x", user=""), "empty user cannot resolve"),
        (si.AddApplicationRequest(application_id="app-x", queue_name="root.a"), "empty user cannot resolve"),
        (app("app-x", partition_name="nowhere"), "partition nowhere not found"),
        (app("app-1"), "already exists"),
        (app(""), "must not be empty"),
    ],
)
def test_applications_rejected_with_a_reason(make_reference, request_, reason):
    r = make_reference(CONFIG)
    assert r.update_application(apps(app("app-1"))).accepted == (
        si.AcceptedApplication(application_id="app-1"),
    )
    response = r.update_application(apps(request_))
    assert response.accepted == ()
    assert len(response.rejected) == 1
    assert response.rejected[0].application_id == request_.application_id
    assert reason in response.rejected[0].reason
    assert list(r.partition().applications) == ["app-1"]


def test_applications_accepted_into_their_partitions(make_reference):
    r = make_reference(CONFIG)
    response = r.update_application(
        apps(app("app-1"), app("app-2", queue="root.train", partition_name="gpu"))
    )
    assert [a.application_id for a in response.accepted] == ["app-1", "app-2"]
    assert r.partition().applications["app-1"].queue_path == "root.a"
    assert r.partition("gpu").applications["app-2"].queue_path == "root.train"
    assert r.partition().applications["app-1"].partition == "[rm]default"


def test_default_config_places_by_namespace(make_reference):
    r = make_reference("")
    response = r.update_application(apps(app("app-1", queue="", tags={"namespace": "team-a"})))
    assert response.rejected == ()
    assert r.partition().applications["app-1"].queue_path == "root.team-a"


def test_removing_an_application_reports_its_releases(make_reference):
    r = with_nodes(make_reference, node("node-1", schedulable_resource={"memory": 100}))
    r.update_application(apps(app("app-1")))
    r.update_allocation(asks(ask("app-1", "k", {"memory": 10}, repeat=3)))
    made = r.schedule()
    assert r.take_released() == si.AllocationResponse()

    response = r.update_application(apps(remove=("app-1", "ghost")))
    assert response == si.ApplicationResponse()
    released = r.take_released().released
    assert sorted(rel.uuid for rel in released) == sorted(a.uuid for a in made)
    assert {(rel.termination_type, rel.message) for rel in released} == {
        (TT.STOPPED_BY_RM, "application removed")
    }
    assert r.take_released() == si.AllocationResponse()  # reported once
    p = r.partition()
    assert "app-1" not in p.applications and p.root.allocated == {}


# ---- asks and releases ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad, reason",
    [
        (ask("app-1", "k", {"memory": 0}), "contains no resources"),
        (ask("app-1", "k", {}), "contains no resources"),
        (ask("app-1", "k", {"memory": -5}), "contains negative resources"),
        (ask("ghost", "k", {"memory": 5}), "failed to find application ghost"),
        (ask("app-1", "", {"memory": 5}), "allocation key must not be empty"),
        (ask("app-1", "k", {"memory": 5}, repeat=-1), "invalid ask k: max allocations -1"),
        (ask("app-1", "k", {"memory": 5}, repeat=0), "invalid ask k: max allocations 0"),
        (ask("app-1", "k", {"memory": 5}, partition_name="nowhere"), "partition nowhere not found"),
    ],
)
def test_asks_rejected_with_a_reason(make_reference, bad, reason):
    r = make_reference(CONFIG)
    r.update_application(apps(app("app-1")))
    response = r.update_allocation(asks(ask("app-1", "good", {"memory": 5}), bad))
    assert len(response.rejected) == 1
    rejected = response.rejected[0]
    assert (rejected.allocation_key, rejected.application_id) == (bad.allocation_key, bad.application_id)
    assert reason in rejected.reason
    assert list(r.partition().applications["app-1"].asks) == ["good"]


def test_ask_fields_reach_the_model(make_reference):
    r = make_reference(CONFIG)
    r.update_application(apps(app("app-1")))
    r.update_allocation(
        asks(
            ask(
                "app-1",
                "k",
                {"memory": 5},
                repeat=2,
                priority=7,
                tags={"kubernetes.io/meta/namespace": "ns"},
                preemption_policy=si.PreemptionPolicy(allow_preempt_self=True, allow_preempt_other=True),
            )
        )
    )
    model = r.partition().applications["app-1"].asks["k"]
    assert (model.pending, model.priority, model.tags) == (2, 7, {"kubernetes.io/meta/namespace": "ns"})
    assert (model.allow_preempt_self, model.allow_preempt_other) == (True, True)


def _three_allocations(make_reference):
    r = with_nodes(make_reference, node("node-1", schedulable_resource={"memory": 100}))
    r.update_application(apps(app("app-1")))
    r.update_allocation(asks(ask("app-1", "a", {"memory": 10}, repeat=2), ask("app-1", "b", {"memory": 20})))
    made = r.schedule()
    assert len(made) == 3
    return r, made


@pytest.mark.parametrize(
    "given, expected",
    [
        (TT.UNKNOWN_TERMINATION_TYPE, TT.STOPPED_BY_RM),
        (TT.STOPPED_BY_RM, TT.STOPPED_BY_RM),
        (TT.TIMEOUT, TT.TIMEOUT),
        (TT.PREEMPTED_BY_SCHEDULER, TT.PREEMPTED_BY_SCHEDULER),
    ],
)
def test_release_by_uuid_reports_its_termination_type(make_reference, given, expected):
    r, made = _three_allocations(make_reference)
    response = r.update_allocation(
        releases(
            si.AllocationRelease(
                application_id="app-1", uuid=made[0].uuid, termination_type=given, message="bye"
            )
        )
    )
    assert len(response.released) == 1
    release = response.released[0]
    assert (release.uuid, release.allocation_key, release.application_id) == (made[0].uuid, "a", "app-1")
    assert (release.termination_type, release.message, release.partition_name) == (expected, "bye", "default")
    assert r.partition().queues["root.a"].allocated == {"memory": 30}


@pytest.mark.parametrize(
    "release, keys",
    [
        (si.AllocationRelease(application_id="app-1", allocation_key="a"), ["a", "a"]),
        (si.AllocationRelease(application_id="app-1"), ["a", "a", "b"]),
        (si.AllocationRelease(application_id="app-1", uuid="nope"), []),
        (si.AllocationRelease(application_id="ghost"), []),
        (si.AllocationRelease(application_id="app-1", partition_name="nowhere"), []),
    ],
)
def test_release_by_key_or_all(make_reference, release, keys):
    r, _ = _three_allocations(make_reference)
    response = r.update_allocation(releases(release))
    assert sorted(rel.allocation_key for rel in response.released) == keys
    used = sum(a.resource["memory"] for a in r.partition().applications["app-1"].allocations.values())
    assert used == 40 - sum(10 if k == "a" else 20 for k in keys)


def test_release_everything_then_the_asks(make_reference):
    """YuniKorn's TestBasicScheduler tail: usage back to zero, pending stays until the asks go."""
    r, made = _three_allocations(make_reference)
    r.update_allocation(asks(ask("app-1", "later", {"memory": 500})))  # over root.a's max: stays pending
    response = r.update_allocation(
        releases(*(si.AllocationRelease(application_id="app-1", uuid=a.uuid) for a in made))
    )
    assert len(response.released) == 3
    p = r.partition()
    assert p.queues["root.a"].allocated == p.root.allocated == {}
    assert p.queues["root.a"].pending == {"memory": 500}
    assert p.nodes["node-1"].allocated == {}

    r.update_allocation(releases(si.AllocationAskRelease(application_id="app-1")))
    assert p.queues["root.a"].pending == p.root.pending == {}
    assert p.applications["app-1"].state is S.COMPLETING


def test_ask_release_by_key(make_reference):
    r = make_reference(CONFIG)
    r.update_application(apps(app("app-1")))
    r.update_allocation(asks(ask("app-1", "x", {"memory": 1}), ask("app-1", "y", {"memory": 2})))
    response = r.update_allocation(
        releases(
            si.AllocationAskRelease(application_id="app-1", allocation_key="x"),
            si.AllocationAskRelease(application_id="ghost"),
            si.AllocationAskRelease(application_id="app-1", partition_name="nowhere"),
        )
    )
    assert response == si.AllocationResponse()
    assert list(r.partition().applications["app-1"].asks) == ["y"]


# ---- scheduling through the SI ----------------------------------------------------------------------------


def test_smoke_scheduling_stops_at_the_queue_max(make_reference):
    r = with_nodes(make_reference, node("node-1", schedulable_resource={"memory": 150}))
    r.update_application(apps(app("app-1")))
    r.update_allocation(asks(ask("app-1", "k", {"memory": 10}, repeat=12)))
    made = r.schedule()
    assert len(made) == 10  # root.a max 100
    assert r.partition().queues["root.a"].pending == {"memory": 20}
    assert len(r.schedule(limit=1)) == 0


def two_partitions(make_reference) -> ReferenceScheduler:
    """A node and an application in each of CONFIG's partitions: app-1 in default's root.b, app-2 in
    gpu's root.train."""
    r = with_nodes(
        make_reference,
        node("node-1", schedulable_resource={"memory": 100}),
        node("gpu-1", partition="gpu", schedulable_resource={"memory": 100, "gpu": 4}),
    )
    r.update_application(
        apps(app("app-1", queue="root.b"), app("app-2", queue="root.train", partition_name="gpu"))
    )
    return r


def test_each_partition_schedules_on_its_own_nodes(make_reference):
    r = two_partitions(make_reference)
    r.update_allocation(
        asks(
            ask("app-1", "k", {"memory": 10}, repeat=2),
            ask("app-2", "k", {"memory": 10, "gpu": 1}, repeat=2, partition_name="gpu"),
        )
    )
    made = r.schedule()
    assert {(a.application_id, a.node_id, a.partition) for a in made} == {
        ("app-1", "node-1", "[rm]default"),
        ("app-2", "gpu-1", "[rm]gpu"),
    }
    assert len(made) == 4


def test_the_rm_receives_each_allocation_in_its_own_partitions_name(make_reference):
    """What the bench's reference hands its RM: every allocation made, as the SI allocation the core's
    RM callback gets, named by the RM's partition; a gang replacement is not reported as new."""
    r = two_partitions(make_reference)
    r.update_allocation(
        asks(
            ask("app-1", "k", {"memory": 10}, repeat=2, priority=3, tags={"team": "x"}),
            ask("app-2", "g", {"memory": 10, "gpu": 1}, partition_name="gpu"),
        )
    )
    made = r.schedule()
    replacement = made[0].replace(uuid="real-1", replaces=made[0].uuid)
    response = r.allocation_response([*made, replacement])
    assert isinstance(response, si.AllocationResponse)
    assert [(a.uuid, a.partition_name, a.node_id) for a in response.new] == [
        (m.uuid, "gpu" if m.partition == "[rm]gpu" else "default", m.node_id) for m in made
    ]
    first = response.new[0]
    assert (first.allocation_key, first.application_id, first.priority) == ("k", "app-1", 3)
    assert first.resource_per_alloc == {"memory": 10} and first.allocation_tags == {"team": "x"}
    assert r.allocation_response([]).new == ()


def test_predicates_are_consulted(make_reference):
    seen: list[tuple[str, str, bool]] = []

    def predicate(allocation_key: str, node_id: str, allocate: bool) -> bool:
        seen.append((allocation_key, node_id, allocate))
        return node_id != "node-1"

    r = with_nodes(
        make_reference,
        node("node-1", schedulable_resource={"memory": 100}),
        node("node-2", schedulable_resource={"memory": 100}),
        predicate=predicate,
    )
    r.update_application(apps(app("app-1", queue="root.b")))
    r.update_allocation(asks(ask("app-1", "k", {"memory": 10}, repeat=4)))
    assert {a.node_id for a in r.schedule()} == {"node-2"}
    assert ("k", "node-1", True) in seen


def test_reservation_through_the_reference(make_reference, clock):
    r = with_nodes(
        make_reference,
        node("node-1", schedulable_resource={"memory": 50}),
        node("node-2", schedulable_resource={"memory": 50}),
        reservation_delay=2.0,
    )
    r.update_application(apps(app("app-1", queue="root.b"), app("app-2", queue="root.b")))
    r.update_allocation(asks(ask("app-1", "fill", {"memory": 40}, repeat=2)))
    assert len(r.schedule()) == 2
    r.update_allocation(asks(ask("app-2", "big", {"memory": 20})))
    assert r.schedule() == []
    p = r.partition()
    assert p.reservations == {} and set(p.unschedulable) == {("app-2", "big")}
    clock.advance(2.0)
    assert r.schedule() == []
    assert list(p.reservations) == [("app-2", "big")]
    r.update_node(nodes(node("node-3", schedulable_resource={"memory": 50})))
    assert [(a.allocation_key, a.node_id) for a in r.schedule()] == [("big", "node-3")]
    assert p.reservations == {} and p.unschedulable == {}


# ---- recovery ---------------------------------------------------------------------------------------------


def test_existing_allocations_are_recovered_above_the_queue_max(make_reference):
    r = make_reference(CONFIG)
    r.update_application(apps(app("app-1"), app("app-2", queue="root.b")))
    existing = [
        si.Allocation(
            allocation_key="e1", application_id="app-1", resource_per_alloc={"memory": 80}, uuid="u-1"
        ),
        si.Allocation(allocation_key="e2", application_id="app-1", resource_per_alloc={"memory": 80}),
        si.Allocation(
            allocation_key="e3",
            application_id="app-2",
            resource_per_alloc={"memory": 10},
            uuid="u-3",
            node_id="elsewhere",  # the node it arrives with wins
            priority=3,
            allocation_tags={"t": "v"},
        ),
    ]
    response, allocations = r.update_node(
        nodes(node("node-1", schedulable_resource={"memory": 200}, existing_allocations=existing))
    )
    assert response.accepted == (si.AcceptedNode(node_id="node-1"),)
    assert allocations.rejected == ()
    new = {a.allocation_key: a for a in allocations.new}
    assert set(new) == {"e1", "e2", "e3"}
    assert new["e1"].uuid == "u-1" and new["e2"].uuid and new["e2"].uuid != "u-1"
    assert {(a.node_id, a.partition_name) for a in allocations.new} == {("node-1", "default")}
    assert (new["e3"].priority, new["e3"].allocation_tags) == (3, {"t": "v"})

    p = r.partition()
    assert p.queues["root.a"].allocated == {"memory": 160}  # max 100: recovery is not limited
    assert p.nodes["node-1"].available == {"memory": 30}
    assert p.applications["app-1"].state is S.RUNNING
    assert p.applications["app-2"].state is S.RUNNING
    # new work respects the max again
    r.update_allocation(asks(ask("app-1", "k", {"memory": 1})))
    assert r.schedule() == []


def test_existing_allocations_that_cannot_be_recovered_are_reported(make_reference):
    r = make_reference(CONFIG)
    r.update_application(apps(app("app-1")))
    existing = [
        si.Allocation(
            allocation_key="ok", application_id="app-1", resource_per_alloc={"memory": 10}, uuid="u-1"
        ),
        si.Allocation(allocation_key="ghost", application_id="ghost", resource_per_alloc={"memory": 10}),
        si.Allocation(allocation_key="zero", application_id="app-1", resource_per_alloc={"memory": 0}),
        si.Allocation(
            allocation_key="dup", application_id="app-1", resource_per_alloc={"memory": 1}, uuid="u-1"
        ),
    ]
    response, allocations = r.update_node(
        nodes(node("node-1", schedulable_resource={"memory": 200}, existing_allocations=existing))
    )
    assert response.accepted == (si.AcceptedNode(node_id="node-1"),)
    assert [a.allocation_key for a in allocations.new] == ["ok"]
    reasons = {rej.allocation_key: rej.reason for rej in allocations.rejected}
    assert set(reasons) == {"ghost", "zero", "dup"}
    assert "failed to find application ghost" in reasons["ghost"]
    assert "contains no resources" in reasons["zero"]
    assert "already live" in reasons["dup"]
    assert r.partition().nodes["node-1"].allocated == {"memory": 10}


# ---- YuniKorn's scheduling benchmark shape ----------------------------------------------------------------

BENCHMARK = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
            resources:
              guaranteed: {memory: 100000, vcore: 10}
          - name: b
            resources:
              guaranteed: {memory: 1000000, vcore: 10}
"""


def test_benchmark_shape_allocates_every_ask(make_reference):
    """BenchmarkScheduling: 1,000 nodes, 10,000 asks of {memory: 10, vcore: 1} split over two queues."""
    node_count, ask_count = 1000, 10_000
    per_node = ask_count // node_count + 1
    r = make_reference(BENCHMARK)
    p = r.partition()
    assert p.queues["root.a"].guaranteed == {"memory": 100_000, "vcore": 10_000}
    response, _ = r.update_node(
        nodes(
            *(
                node(f"node-{i}", schedulable_resource={"memory": 10 * per_node, "vcore": per_node})
                for i in range(node_count)
            )
        )
    )
    assert len(response.accepted) == node_count
    accepted = r.update_application(apps(app("app-1", queue="root.a"), app("app-2", queue="root.b")))
    assert len(accepted.accepted) == 2
    half = ask_count // 2
    rejected = r.update_allocation(
        asks(
            *(
                ask("app-1" if i < half else "app-2", f"ask-{i}", {"memory": 10, "vcore": 1})
                for i in range(ask_count)
            )
        )
    ).rejected
    assert rejected == ()

    made = r.schedule()
    assert len(made) == ask_count
    assert Counter(a.queue_path for a in made) == {"root.a": half, "root.b": half}
    assert (
        p.queues["root.a"].allocated == p.queues["root.b"].allocated == {"memory": 10 * half, "vcore": half}
    )
    assert p.root.pending == {}
    # equal dominant shares all the way: the two queues alternate
    assert abs(Counter(a.queue_path for a in made[:1000])["root.a"] - 500) <= 1
    assert len({a.uuid for a in made}) == ask_count
