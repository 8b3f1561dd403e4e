"""Gang scheduling and timeouts in the model, via the reference scheduler (reference 2.12, 2.16, 2.17)."""

from __future__ import annotations

import gang_helpers
import pytest
from gang_helpers import S, T, app_of, confirm
from gang_requests import PH, RM, gang_app
from gang_requests import gang_asks as asks

from korral import si
from korral import testing as t

# the shared fixture: pytest finds a fixture by its name in the test module
cluster = gang_helpers.cluster


def plain_app(app_id: str, *, timeout_ms: int = 0, queue: str = "root.open") -> si.ApplicationRequest:
    return si.ApplicationRequest(
        rm_id=RM,
        new=[
            si.AddApplicationRequest(
                application_id=app_id,
                queue_name=queue,
                ugi=si.UserGroupInformation(user="u"),
                execution_timeout_milliseconds=timeout_ms,
            )
        ],
    )


# ---- admission -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("queue", "placeholders", "reason"),
    [
        ("root.gang", 10, ""),  # exactly the queue's max
        ("root.gang", 11, "task group request map[memory:1100 vcore:1100] larger than max queue allocation"),
        ("root.open", 20, ""),  # no max but the cluster's: 2000 fits
        ("root.open", 21, "larger than max queue allocation"),
        ("root.fair", 1, "with task group request: unsupported sort type"),
    ],
)
def test_gang_admission_fifo_leaf_and_queue_max(cluster, queue, placeholders, reason) -> None:
    reference = cluster()
    response = reference.update_application(gang_app(queue=queue, placeholders=placeholders))
    if reason:
        assert not response.accepted
        assert reason in response.rejected[0].reason
        assert response.rejected[0].reason.startswith(f"queue {queue} cannot")
    else:
        assert [a.application_id for a in response.accepted] == ["g"]


def test_a_plain_application_is_no_gang(cluster) -> None:
    reference = cluster()
    assert reference.update_application(plain_app("p", queue="root.fair")).accepted


# ---- placeholders and states ---------------------------------------------------------------------------


def test_accepted_while_placeholders_are_allocated_running_once_all_are(cluster) -> None:
    reference = cluster()
    reference.update_application(gang_app(placeholders=4))
    reference.update_allocation(asks("g", 3, PH, placeholder=True))
    made = reference.schedule()
    app = app_of(reference)
    assert len(made) == 3 and all(a.placeholder for a in made)
    assert app.state is S.ACCEPTED
    assert app.placeholder_allocated == {"memory": 300, "vcore": 300}
    reference.update_allocation(asks("g", 1, PH, placeholder=True, prefix="ph-last"))
    reference.schedule()
    assert app.state is S.RUNNING
    assert app.placeholder_allocated == {"memory": 400, "vcore": 400}


def test_the_first_real_allocation_runs_a_gang(cluster) -> None:
    reference = cluster()
    reference.update_application(gang_app(placeholders=4))
    reference.update_allocation(asks("g", 1, PH, placeholder=True))
    reference.update_allocation(asks("g", 1, {"memory": 500}, group="other"))
    reference.schedule()
    assert app_of(reference).state is S.RUNNING


# ---- replacement ---------------------------------------------------------------------------------------


def test_a_real_ask_replaces_a_placeholder_once_the_rm_confirms(cluster, invariants) -> None:
    reference = cluster()
    partition = reference.partition("default")
    reference.update_application(gang_app(placeholders=2))
    reference.update_allocation(asks("g", 2, PH, placeholder=True))
    placeholders = reference.schedule()
    reference.update_allocation(asks("g", 1, {"memory": 60, "vcore": 100}))
    made = reference.schedule()
    assert len(made) == 1
    real = made[0]
    assert real.replaces == placeholders[0].uuid and real.node_id == placeholders[0].node_id
    released = reference.take_released().released
    assert [(r.uuid, r.termination_type) for r in released] == [
        (placeholders[0].uuid, T.PLACEHOLDER_REPLACED)
    ]
    # until the RM confirms, the placeholder stays booked everywhere and the real ask is not pending
    app = app_of(reference)
    node = partition.nodes[real.node_id]
    assert placeholders[0].uuid in node.allocations and real.uuid not in node.allocations
    assert app.placeholder_allocated == {"memory": 200, "vcore": 200}
    assert app.pending == {}
    invariants(partition)
    response = confirm(reference, released)
    assert [a.uuid for a in response.new] == [real.uuid]
    assert response.released == ()  # a confirmation is not reported back
    assert real.uuid in node.allocations
    assert placeholders[0].uuid not in node.allocations
    assert app.placeholder_allocated == {"memory": 100, "vcore": 100}
    assert app.allocated == {"memory": 160, "vcore": 200}
    assert partition.queues["root.gang"].allocated == {"memory": 160, "vcore": 200}
    # a second confirmation changes nothing
    assert confirm(reference, released) == si.AllocationResponse()
    assert app.allocated == {"memory": 160, "vcore": 200}
    invariants(partition)


@pytest.mark.parametrize(
    ("real", "group", "replaced"),
    [
        ({"memory": 100, "vcore": 100}, "tg", True),  # the same size
        ({"memory": 50}, "tg", True),  # smaller, fewer types
        ({"memory": 101, "vcore": 100}, "tg", False),  # larger than any placeholder: normal
        ({"memory": 50}, "other", False),  # another task group: normal
        ({"memory": 50}, "", False),  # no task group: normal
    ],
)
def test_which_real_asks_replace_a_placeholder(cluster, real, group, replaced) -> None:
    reference = cluster()
    reference.update_application(gang_app(placeholders=2))
    reference.update_allocation(asks("g", 2, PH, placeholder=True))
    reference.schedule()
    reference.update_allocation(asks("g", 1, real, group=group))
    made = reference.schedule()
    assert len(made) == 1
    assert bool(made[0].replaces) is replaced
    kinds = [r.termination_type for r in reference.take_released().released]
    assert kinds == ([T.PLACEHOLDER_REPLACED] if replaced else [])


def test_a_placeholder_released_by_the_rm_gives_the_real_ask_back(cluster) -> None:
    reference = cluster()
    reference.update_application(gang_app(placeholders=1))
    reference.update_allocation(asks("g", 1, PH, placeholder=True))
    (placeholder,) = reference.schedule()
    reference.update_allocation(asks("g", 1, PH))
    assert reference.schedule()[0].replaces == placeholder.uuid
    # the RM stops the placeholder another way before confirming: the replacement is off
    reference.update_allocation(t.release(RM, "g", uuid=placeholder.uuid))
    app = app_of(reference)
    assert app.pending == PH and app.replacements == {}
    made = reference.schedule()
    assert len(made) == 1 and not made[0].replaces  # scheduled normally now


# ---- placeholder timeout ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("style", "expected"),
    [
        ("Soft", [S.RESUMING, S.ACCEPTED]),
        ("", [S.RESUMING, S.ACCEPTED]),  # the default
        ("bogus", [S.RESUMING, S.ACCEPTED]),  # unknown styles are soft
        ("Hard", [S.FAILING, S.FAILED]),
    ],
)
def test_placeholder_timeout_of_an_accepted_gang(cluster, clock, style, expected) -> None:
    """Two placeholders of three fit: the gang stays Accepted until its timeout."""
    reference = cluster()
    partition = reference.partition("default")
    reference.update_application(gang_app(placeholders=3, timeout_ms=1000, style=style))
    reference.update_node(t.node_action(RM, "n2", si.NodeAction.DECOMISSION))
    reference.update_node(
        t.node_action(RM, "n1", si.NodeAction.UPDATE, schedulable_resource={"memory": 200, "vcore": 1000})
    )
    reference.update_allocation(asks("g", 3, PH, placeholder=True))
    reference.update_allocation(asks("g", 1, {"memory": 500}, prefix="real"))  # a real ask waits
    made = reference.schedule()
    assert [a.placeholder for a in made] == [True, True]
    app = app_of(reference)
    assert app.state is S.ACCEPTED
    seen = len(app.state_log)
    clock.advance(1.0)
    response = reference.expire_timeouts()
    assert sorted(r.uuid for r in response.released) == sorted(a.uuid for a in made)
    timed_out_asks = {r.allocation_key for r in response.released_asks}
    assert "ph-2" in timed_out_asks
    assert ("real-0" in timed_out_asks) is (style == "Hard")
    assert partition.root.allocated == {"memory": 200, "vcore": 200}  # booked until confirmed
    confirm(reference, response.released)
    states = [state for _, state in app.state_log[seen:]]
    assert states == [s.value for s in expected]
    if style != "Hard":
        assert partition.applications["g"].pending == {"memory": 500}  # on as a normal application
        reference.update_node(
            t.node_action(
                RM, "n1", si.NodeAction.UPDATE, schedulable_resource={"memory": 1000, "vcore": 1000}
            )
        )
        made = reference.schedule()
        assert [(a.allocation_key, a.replaces) for a in made] == [("real-0", "")]
    else:
        assert "g" not in partition.applications


def test_placeholder_timeout_of_a_running_gang_releases_only_unused_placeholders(cluster, clock) -> None:
    reference = cluster()
    reference.update_application(gang_app(placeholders=2))  # the core's placeholder_timeout
    reference.update_allocation(asks("g", 2, PH, placeholder=True))
    placeholders = reference.schedule()
    reference.update_allocation(asks("g", 1, PH))
    reference.schedule()
    confirm(reference, reference.take_released().released)
    clock.advance(899)
    assert reference.expire_timeouts() == si.AllocationResponse()
    clock.advance(1)
    response = reference.expire_timeouts()
    assert [(r.uuid, r.termination_type) for r in response.released] == [(placeholders[1].uuid, T.TIMEOUT)]
    confirm(reference, response.released)
    app = app_of(reference)
    assert app.state is S.RUNNING and app.placeholder_allocated == {} and app.allocated == PH


# ---- execution timeouts (the seed's meaning) -----------------------------------------------------------


@pytest.mark.parametrize("timeout_ms", [0, -5])
def test_zero_or_negative_timeouts_never_expire(cluster, clock, timeout_ms) -> None:
    reference = cluster()
    reference.update_application(plain_app("p", timeout_ms=timeout_ms))
    reference.update_allocation(asks("p", 2, {"memory": 10}, group="", timeout_ms=timeout_ms))
    reference.schedule()
    clock.advance(10**9)
    assert reference.expire_timeouts() == si.AllocationResponse()
    assert len(app_of(reference, "p").allocations) == 2


def test_an_ask_execution_timeout_releases_each_allocation_that_long_after_it_was_made(
    cluster, clock, invariants
) -> None:
    reference = cluster()
    partition = reference.partition("default")
    reference.update_application(plain_app("p"))
    reference.update_allocation(asks("p", 1, {"memory": 10}, group="", timeout_ms=2000, prefix="timed"))
    (first,) = reference.schedule()
    clock.advance(1.0)
    reference.update_allocation(asks("p", 1, {"memory": 20}, group="", prefix="plain"))
    reference.update_allocation(
        si.AllocationRequest(
            rm_id=RM,
            asks=[
                si.AllocationAsk(
                    max_allocations=1,
                    allocation_key="timed-1",
                    application_id="p",
                    resource_ask={"memory": 10},
                    execution_timeout_milliseconds=2000,
                )
            ],
        )
    )
    second = next(a for a in reference.schedule() if a.allocation_key == "timed-1")
    clock.advance(1.0)
    response = reference.expire_timeouts()
    assert [(r.uuid, r.termination_type) for r in response.released] == [(first.uuid, T.TIMEOUT)]
    assert partition.root.allocated == {"memory": 40}  # still booked until the RM confirms
    invariants(partition)
    confirm(reference, response.released)
    assert partition.root.allocated == {"memory": 30}
    clock.advance(1.0)
    response = reference.expire_timeouts()
    assert [r.uuid for r in response.released] == [second.uuid]
    assert app_of(reference, "p").state is S.RUNNING


def test_an_application_execution_timeout_fails_it(cluster, clock) -> None:
    reference = cluster()
    partition = reference.partition("default")
    reference.update_application(plain_app("p", timeout_ms=3000))
    reference.update_allocation(asks("p", 2, {"memory": 600}, group=""))  # one fits each node
    reference.update_allocation(asks("p", 1, {"memory": 900}, group="", prefix="big"))  # fits no more
    made = reference.schedule()
    assert len(made) == 2
    clock.advance(3.0)
    response = reference.expire_timeouts()
    assert sorted(r.uuid for r in response.released) == sorted(a.uuid for a in made)
    assert [r.allocation_key for r in response.released_asks] == ["big-0"]
    assert app_of(reference, "p").state is S.FAILING
    confirm(reference, response.released[:1])
    assert app_of(reference, "p").state is S.FAILING
    confirm(reference, response.released[1:])
    assert "p" not in partition.applications
    assert partition.root.allocated == {}


def test_a_core_made_release_confirmed_with_another_type_is_a_plain_release(cluster, clock) -> None:
    reference = cluster()
    reference.update_application(plain_app("p"))
    reference.update_allocation(asks("p", 1, {"memory": 10}, group="", timeout_ms=100))
    (allocation,) = reference.schedule()
    clock.advance(1)
    reference.expire_timeouts()
    response = reference.update_allocation(t.release(RM, "p", uuid=allocation.uuid))
    assert [(r.uuid, r.termination_type) for r in response.released] == [(allocation.uuid, T.STOPPED_BY_RM)]


# ---- recovery ------------------------------------------------------------------------------------------


def test_recovered_placeholders_are_replaced_and_the_gang_completes(cluster) -> None:
    reference = cluster()
    partition = reference.partition("default")
    reference.update_application(gang_app(placeholders=2))
    existing = [
        si.Allocation(
            allocation_key=f"ph-{index}",
            uuid=f"old-{index}",
            application_id="g",
            node_id="n3",
            resource_per_alloc=dict(PH),
            placeholder=True,
            task_group_name="tg",
        )
        for index in range(2)
    ]
    _, recovered = reference.update_node(
        t.nodes(RM, ["n3"], {"memory": 1000, "vcore": 1000}, existing=existing)
    )
    assert [a.placeholder for a in recovered.new] == [True, True]
    app = app_of(reference)
    assert app.placeholder_allocated == {"memory": 200, "vcore": 200}
    reference.update_allocation(asks("g", 2, PH))
    made = reference.schedule()
    assert sorted(a.replaces for a in made) == ["old-0", "old-1"]
    swapped = confirm(reference, reference.take_released().released)
    assert {a.node_id for a in swapped.new} == {"n3"}
    assert app.placeholder_allocated == {} and app.allocated == {"memory": 200, "vcore": 200}
    for allocation in swapped.new:
        reference.update_allocation(t.release(RM, "g", uuid=allocation.uuid))
    assert app.state is S.COMPLETING
    assert partition.nodes["n3"].allocations == {}
