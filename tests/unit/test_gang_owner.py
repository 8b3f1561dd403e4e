"""Gang scheduling and timeouts on the application owner's side (what the Application actor runs)."""

from __future__ import annotations

import gang_helpers
import pytest
from gang_helpers import S, T, app_of, confirm
from gang_requests import PH, RM, gang_app
from gang_requests import gang_asks as asks

from korral import resource as res
from korral import si
from korral import testing as t
from korral.model.allocation import Allocation
from korral.model.app.application import Application
from korral.model.app.owner import ApplicationOwner
from korral.model.view_ops import OwnerState, Swap, UndoReplacement

# the shared fixture: pytest finds a fixture by its name in the test module
cluster = gang_helpers.cluster


# ---- the application owner (what the Application actor runs) -------------------------------------------


def owner_with_placeholder(**kwargs) -> tuple[ApplicationOwner, Allocation]:
    app = Application.new("g", partition="[rm]default", queue_path="root.gang", placeholder_ask=PH, **kwargs)
    owner = ApplicationOwner(app)
    owner.add_asks(
        [
            si.AllocationAsk(
                max_allocations=1,
                allocation_key="ph",
                application_id="g",
                resource_ask=PH,
                placeholder=True,
                task_group_name="tg",
            ),
            si.AllocationAsk(
                max_allocations=1,
                allocation_key="real",
                application_id="g",
                resource_ask=PH,
                task_group_name="tg",
            ),
        ],
        0.0,
    )
    placeholder = Allocation(
        uuid="u1",
        allocation_key="ph",
        application_id="g",
        node_id="n1",
        resource=PH,
        placeholder=True,
        task_group_name="tg",
        ask_generation=app.asks["ph"].generation,
    )
    owner.confirm([placeholder], 0.0)
    return owner, placeholder


def real_for(owner: ApplicationOwner, placeholder: Allocation, **changes) -> Allocation:
    ask = owner.app.asks["real"]
    real = Allocation(
        uuid="u2",
        allocation_key="real",
        application_id="g",
        node_id=placeholder.node_id,
        resource=PH,
        task_group_name="tg",
        ask_generation=ask.generation,
        replaces=placeholder.uuid,
    )
    return real.replace(**changes)


@pytest.mark.parametrize(
    ("change", "accepted"),
    [
        ({}, True),
        ({"ask_generation": 99}, False),  # the ask was replaced meanwhile
        ({"replaces": "unknown"}, False),  # the placeholder is gone
        ({"resource": {"memory": 500}}, False),  # does not fit the placeholder
    ],
)
def test_the_owner_confirms_or_hands_back_a_replacement(change, accepted) -> None:
    owner, placeholder = owner_with_placeholder()
    assert owner.app.state is S.RUNNING  # its one placeholder is all of them
    pending_before = dict(owner.app.pending)
    effects = owner.replace(real_for(owner, placeholder, **change), 1.0)
    if accepted:
        assert [(a.uuid, kind) for a, kind, _ in effects.released] == [("u1", T.PLACEHOLDER_REPLACED)]
        assert res.prune(res.sub(owner.app.pending, pending_before)) == {"memory": -100, "vcore": -100}
        assert effects.view_ops == []
    else:
        assert effects.released == [] and [type(op) for op in effects.view_ops] == [UndoReplacement]


def test_the_owner_swaps_on_confirmation_once() -> None:
    owner, placeholder = owner_with_placeholder()
    real = real_for(owner, placeholder, resource={"memory": 40})
    owner.replace(real, 1.0)
    echo = si.AllocationRelease(uuid="u1", application_id="g", termination_type=T.PLACEHOLDER_REPLACED)
    effects = owner.release([echo], 2.0)
    assert effects.new_allocations == [real] and effects.released == []
    # the view swaps it on the placeholder's node
    assert effects.view_ops == [Swap(placeholder_uuid="u1", real=real)]
    assert owner.app.placeholder_allocated == {} and owner.app.allocated == {"memory": 40}
    again = owner.release([echo], 3.0)
    assert again.new_allocations == [] and again.view_ops == []


def test_the_owner_expires_placeholders_with_timers_it_asked_for() -> None:
    app = Application.new("g", placeholder_ask={"memory": 200, "vcore": 200}, execution_timeout_ms=500)
    owner = ApplicationOwner(app)
    owner.add_asks(
        [
            si.AllocationAsk(
                allocation_key="ph",
                application_id="g",
                resource_ask=PH,
                placeholder=True,
                task_group_name="tg",
                max_allocations=2,
            )
        ],
        10.0,
    )
    allocation = Allocation(
        uuid="u1",
        allocation_key="ph",
        application_id="g",
        node_id="n1",
        resource=PH,
        placeholder=True,
        task_group_name="tg",
        ask_generation=app.asks["ph"].generation,
    )
    owner.confirm([allocation], 10.0)
    assert owner.take_deadlines() == [10.5] and owner.take_deadlines() == []
    assert not owner.expire(10.4).released
    effects = owner.expire(10.5)
    assert [(a.uuid, kind) for a, kind, _ in effects.released] == [("u1", T.TIMEOUT)]
    assert effects.released_asks and effects.released_asks[0][0] == "ph"
    assert app.state is S.ACCEPTED or app.state is S.RESUMING
    assert [state for state, _ in effects.state_changes] == ["Resuming"]
    assert "u1" in app.allocations  # booked until the RM confirms


def test_a_resumed_gang_runs_again_on_its_next_real_ask(cluster, clock) -> None:
    """A soft gang whose placeholders timed out with no real ask waiting is Resuming; its next real ask
    runs it as a normal application, in the reference exactly as in the application's owner (one rule,
    ``app_state.RUN_ON_ASK``)."""
    reference = cluster()
    reference.update_application(gang_app(placeholders=3, timeout_ms=1000, style="Soft"))
    reference.update_node(t.node_action(RM, "n2", si.NodeAction.DECOMISSION))
    reference.update_node(
        t.node_action(RM, "n1", si.NodeAction.UPDATE, schedulable_resource={"memory": 200, "vcore": 1000})
    )
    reference.update_allocation(asks("g", 3, PH, placeholder=True))
    assert len(reference.schedule()) == 2
    clock.advance(1.0)
    confirm(reference, reference.expire_timeouts().released)  # the placeholders are gone
    app = app_of(reference)
    assert app.state is S.RESUMING
    reference.update_allocation(asks("g", 1, {"memory": 50}, prefix="real"))
    assert app.state is S.ACCEPTED
    made = reference.schedule()
    assert [a.allocation_key for a in made] == ["real-0"]
    assert app.state in (S.STARTING, S.RUNNING)


def test_the_core_s_own_outputs_are_typed_effects_taken_once(cluster, clock) -> None:
    """A swap on the RM's confirmation and an ask removed by a timeout come out of the partition as
    effects (``take_effects``), once: no buffer on the partition to drain by hand."""
    reference = cluster()
    partition = reference.partition("default")
    reference.update_application(gang_app(placeholders=2, timeout_ms=1000))
    reference.update_allocation(asks("g", 2, PH, placeholder=True))
    placeholders = reference.schedule()
    reference.update_allocation(asks("g", 1, {"memory": 60, "vcore": 100}))
    (real,) = reference.schedule()
    partition.take_effects()  # the PLACEHOLDER_REPLACED release
    # the RM confirms on the partition itself: the swap is an effect, not a list on the partition
    assert partition.release_allocations("g", uuid=real.replaces, termination=T.PLACEHOLDER_REPLACED) == []
    effects = partition.take_effects()
    assert [a.uuid for a in effects.swapped_in] == [real.uuid]
    assert not partition.take_effects().swapped_in
    # the unused placeholder times out; its ask is removed with it as an effect
    reference.update_allocation(asks("g", 1, PH, placeholder=True, prefix="late"))
    clock.advance(1.0)
    partition.expire_timeouts()
    effects = partition.take_effects()
    assert [(r.application_id, r.allocation_key) for r in effects.released_asks] == [("g", "late-0")]
    assert {r.allocation.uuid for r in effects.core_releases} == {placeholders[1].uuid}
    assert not partition.take_effects()


def test_booked_states_are_published_after_a_state_that_crossed_bookings() -> None:
    """A soft gang's placeholders time out while the view's booking of its real ask is on its way: the
    owner publishes Resuming and Accepted, which reach the view after it booked and take that booking's
    state back there; so what the booking makes when the owner confirms it is published too, up to
    Running. A booking that follows only a new ask's state publishes nothing."""
    app = Application.new("g", placeholder_ask={"memory": 200, "vcore": 200}, execution_timeout_ms=500)
    owner = ApplicationOwner(app)
    started = owner.add_asks(
        [
            si.AllocationAsk(
                allocation_key="ph",
                application_id="g",
                resource_ask=PH,
                placeholder=True,
                task_group_name="tg",
                max_allocations=2,
            ),
            si.AllocationAsk(allocation_key="real", application_id="g", resource_ask=PH, max_allocations=2),
        ],
        10.0,
    )
    assert [op.state for op in started.view_ops if isinstance(op, OwnerState)] == [S.ACCEPTED]

    def booked(uuid: str, key: str, placeholder: bool = False) -> Allocation:
        return Allocation(
            uuid=uuid,
            allocation_key=key,
            application_id="g",
            node_id="n1",
            resource=PH,
            placeholder=placeholder,
            task_group_name="tg" if placeholder else "",
            ask_generation=app.asks[key].generation,
        )

    assert owner.confirm([booked("u1", "ph", placeholder=True)], 10.0).view_ops == []
    timed_out = owner.expire(10.5)
    assert [op.state for op in timed_out.view_ops if isinstance(op, OwnerState)] == [S.RESUMING, S.ACCEPTED]
    confirmed = owner.confirm([booked("r1", "real")], 10.6)
    assert app.state is S.RUNNING
    assert confirmed.view_ops == [OwnerState(state=S.STARTING), OwnerState(state=S.RUNNING)]
    assert owner.confirm([booked("r2", "real")], 10.7).view_ops == []  # Running: nothing more to say
