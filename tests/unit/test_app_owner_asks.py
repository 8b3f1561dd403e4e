"""ApplicationOwner, tested without threads: adding and removing asks, confirming placements."""

from __future__ import annotations

import pytest
from app_owner_helpers import (
    APP,
    E,
    S,
    T,
    new_owner,
    ops,
    owner_in,
    pending_change,
    placed,
    pruned,
    release,
    si_ask,
)

from korral import resource as res
from korral import si
from korral.model.allocation import Allocation
from korral.model.app.application import STATE_AWARE_DISABLE_TAG, Application
from korral.model.app.owner import AppEffects, ApplicationOwner, ask_rejection
from korral.model.view_ops import OwnerState, PutAsks, RollBack

# ---- helpers -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", list(S), ids=lambda s: s.value)
def test_owner_in_reaches_each_state(state):
    assert owner_in(state).app.state is state


# ---- add_asks ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("asks", "expected_ops", "expected_pending"),
    [
        pytest.param([si_ask("k1")], [("put_ask", ("k1", 1))], {"vcore": 1000}, id="one-ask"),
        pytest.param(
            [si_ask("k1", {"vcore": 500, "memory": 64}, max_allocations=4)],
            [("put_ask", ("k1", 1))],
            {"vcore": 2000, "memory": 256},
            id="resource-times-max-allocations",
        ),
        pytest.param(
            [si_ask("k1", {"vcore": 300, "memory": 0}, max_allocations=2)],
            [("put_ask", ("k1", 1))],
            {"vcore": 600},
            id="zero-entries-pruned",
        ),
        pytest.param(
            [si_ask("b"), si_ask("a", {"memory": 10}, max_allocations=3), si_ask("c", priority=9)],
            [("put_ask", ("b", 1)), ("put_ask", ("a", 2)), ("put_ask", ("c", 3))],
            {"vcore": 2000, "memory": 30},
            id="several-in-request-order-with-generations",
        ),
    ],
)
def test_add_asks_accepted_become_put_ask_ops(asks, expected_ops, expected_pending):
    owner = new_owner()
    effects = owner.add_asks(asks, 5.0)

    assert effects.rejected_asks == []
    assert ops(effects) == [("state", "Accepted"), *expected_ops]  # its first ask ran it
    # the payload is the owner's immutable spec itself (built once from the SI ask), shared with the
    # view, which keeps its own progress on it
    # one operation for the burst, its asks in the order taken in, after the state its first ask made
    state, op = effects.view_ops
    assert state == OwnerState(state=S.ACCEPTED) and isinstance(op, PutAsks)
    for spec, sent in zip(op.asks, asks, strict=True):
        owned = owner.app.asks[sent.allocation_key]
        assert spec is owned.spec and spec.generation == owned.generation > 0
    assert res.equals(owner.app.pending, expected_pending)
    assert owner.app.allocated == {} and effects.new_allocations == []


def test_add_asks_builds_the_model_ask_from_the_si_ask():
    owner = new_owner()
    request = si_ask(
        "k1",
        {"vcore": 250, "nvidia.com/gpu": 0},
        max_allocations=3,
        priority=7,
        tags={"kubernetes.io/meta/namespace": "ns"},
        placeholder=True,
        task_group_name="tg",
        preemption_policy=si.PreemptionPolicy(allow_preempt_self=True, allow_preempt_other=True),
        execution_timeout_milliseconds=1500,
    )
    owner.add_asks([request], 12.5)
    ask = owner.app.asks["k1"]

    assert ask.resource == {"vcore": 250}
    assert (ask.max_allocations, ask.pending, ask.priority) == (3, 3, 7)
    assert ask.placeholder and ask.task_group_name == "tg"
    assert ask.allow_preempt_self and ask.allow_preempt_other
    assert ask.execution_timeout_ms == 1500 and ask.create_time == 12.5
    assert ask.tags == {"kubernetes.io/meta/namespace": "ns"}


def test_add_asks_placeholder_needs_a_task_group():
    owner = new_owner()
    owner.add_asks([si_ask("k1", placeholder=True)], 0.0)
    assert not owner.app.asks["k1"].placeholder


REJECTIONS = [
    pytest.param(S.NEW, si_ask(""), "allocation key must not be empty", id="empty-key"),
    pytest.param(
        S.NEW, si_ask("k1", {"vcore": -1, "memory": 5}), "k1 contains negative resources", id="negative"
    ),
    pytest.param(S.NEW, si_ask("k1", {"vcore": 0, "memory": 0}), "k1 contains no resources", id="all-zero"),
    pytest.param(S.NEW, si_ask("k1", {}), "k1 contains no resources", id="no-resources"),
    pytest.param(
        S.NEW, si_ask("k1", max_allocations=-1), "invalid ask k1: max allocations -1", id="negative-max"
    ),
    pytest.param(S.NEW, si_ask("k1", max_allocations=0), "invalid ask k1: max allocations 0", id="zero-max"),
    pytest.param(S.COMPLETED, si_ask("k9"), "is Completed: no new asks accepted", id="completed-app"),
    pytest.param(S.EXPIRED, si_ask("k9"), "is Expired: no new asks accepted", id="expired-app"),
    pytest.param(S.REJECTED, si_ask("k9"), "is Rejected: no new asks accepted", id="rejected-app"),
    pytest.param(S.FAILING, si_ask("k9"), "is Failing: no new asks accepted", id="failing-app"),
    pytest.param(S.FAILED, si_ask("k9"), "is Failed: no new asks accepted", id="failed-app"),
]


@pytest.mark.parametrize(("state", "request_", "reason"), REJECTIONS)
def test_add_asks_rejections_change_nothing(state, request_, reason):
    owner = owner_in(state)
    asks_before = dict(owner.app.asks)
    pending_before = dict(owner.app.pending)

    effects = owner.add_asks([request_], 50.0)

    assert effects.rejected_asks == [(request_.allocation_key, effects.rejected_asks[0][1])]
    assert reason in effects.rejected_asks[0][1]
    assert effects.view_ops == [] and effects.state_changes == []
    assert owner.app.asks == asks_before and owner.app.pending == pending_before
    assert owner.app.state is state


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        pytest.param(si_ask("", {"vcore": -1}), "allocation key must not be empty", id="key-checked-first"),
        pytest.param(
            si_ask("k", {"vcore": -1}, max_allocations=-1), "contains negative resources", id="resources-next"
        ),
    ],
)
def test_ask_rejection_reports_the_first_problem(request_, reason):
    app = Application.new(APP)
    assert reason in ask_rejection(app, request_.allocation_key, request_.resource_ask, -1)


def test_ask_rejection_accepts_a_valid_ask():
    assert ask_rejection(Application.new(APP), "k", {"vcore": 1, "memory": 0}, 1) == ""


def test_add_asks_to_a_removed_application_are_rejected():
    owner = owner_in(S.RUNNING)
    owner.remove("gone", 1.0)
    effects = owner.add_asks([si_ask("k2"), si_ask("")], 2.0)
    assert effects.rejected_asks == [("k2", "application removed"), ("", "application removed")]
    assert effects.view_ops == [] and "k2" not in owner.app.asks


def test_add_asks_mixed_batch_keeps_accepted_order_and_lists_rejections():
    owner = new_owner()
    effects = owner.add_asks([si_ask("a"), si_ask("bad", {"vcore": 0}), si_ask("b"), si_ask("")], 0.0)
    assert ops(effects) == [("state", "Accepted"), ("put_ask", ("a", 1)), ("put_ask", ("b", 2))]
    assert [key for key, _ in effects.rejected_asks] == ["bad", ""]
    assert pruned(owner.app.pending) == {"vcore": 2000}


@pytest.mark.parametrize(
    ("confirmed", "expected_pending_change"),
    [
        pytest.param(0, {"vcore": -3 * 1000 + 2 * 500}, id="nothing-placed-yet"),
        pytest.param(1, {"vcore": -2 * 1000 + 2 * 500}, id="one-of-three-placed"),
        pytest.param(3, {"vcore": 2 * 500}, id="fully-placed-old-ask"),
    ],
)
def test_add_asks_replacing_a_key_is_one_put_of_the_new_generation(confirmed, expected_pending_change):
    """A replaced ask is not dropped first: the view replaces it in place, so an application never
    looks idle (and completes) between the two."""
    owner = new_owner()
    effects = AppEffects()
    owner.add_asks([si_ask("k1", max_allocations=3)], 0.0, effects)
    for n in range(confirmed):
        owner.confirm([placed(owner, "k1", f"u{n}")], 0.0, effects)
    pending_before = dict(owner.app.pending)
    effects.view_ops.clear()

    owner.add_asks([si_ask("k1", {"vcore": 500}, max_allocations=2)], 1.0, effects)

    assert ops(effects) == [("put_ask", ("k1", 2))]
    assert pending_change(owner, pending_before) == pruned(expected_pending_change)
    ask = owner.app.asks["k1"]
    assert (ask.generation, ask.pending, ask.resource) == (2, 2, {"vcore": 500})
    assert res.equals(owner.app.pending, {"vcore": 1000})
    assert len(owner.app.allocations) == confirmed, "allocations of the old ask stay"


def test_add_asks_replacing_a_key_twice_in_one_batch():
    owner = new_owner()
    effects = owner.add_asks([si_ask("k1"), si_ask("k1", {"memory": 7}), si_ask("k2")], 0.0)
    assert ops(effects) == [
        ("state", "Accepted"),
        ("put_ask", ("k1", 1)),
        ("put_ask", ("k1", 2)),
        ("put_ask", ("k2", 3)),
    ]
    assert pruned(owner.app.pending) == {"memory": 7, "vcore": 1000}


@pytest.mark.parametrize(
    ("state", "after", "changes"),
    [
        pytest.param(S.NEW, S.ACCEPTED, ["Accepted"], id="new-to-accepted"),
        pytest.param(S.RESUMING, S.ACCEPTED, ["Accepted"], id="resuming-to-accepted"),
        pytest.param(S.ACCEPTED, S.ACCEPTED, [], id="accepted-stays"),
        pytest.param(S.STARTING, S.STARTING, [], id="starting-stays"),
        pytest.param(S.RUNNING, S.RUNNING, [], id="running-stays"),
        pytest.param(S.COMPLETING, S.RUNNING, ["Running"], id="completing-back-to-running"),
    ],
)
def test_add_asks_state_changes(state, after, changes):
    owner = owner_in(state)
    effects = owner.add_asks([si_ask("new")], 77.0)
    assert owner.app.state is after
    assert effects.state_changes == [(change, 77.0) for change in changes]
    assert [op.state.value for op in effects.view_ops if isinstance(op, OwnerState)] == changes
    assert not effects.completing


def test_add_asks_only_the_first_ask_moves_a_new_application():
    owner = new_owner()
    effects = owner.add_asks([si_ask("a"), si_ask("b"), si_ask("c")], 3.0)
    assert effects.state_changes == [("Accepted", 3.0)]


def test_one_effects_accumulates_several_calls():
    owner = new_owner()
    effects = AppEffects()
    assert owner.add_asks([si_ask("a", max_allocations=2)], 1.0, effects) is effects
    assert owner.add_asks([si_ask("b", {"memory": 5})], 2.0, effects) is effects
    first = placed(owner, "a", "u1")
    assert owner.confirm([first], 3.0, effects) is effects
    assert owner.release([release(uuid="u1")], 4.0, effects) is effects
    assert owner.add_asks([si_ask("")], 5.0, effects) is effects

    assert ops(effects) == [
        ("state", "Accepted"),
        ("put_ask", ("a", 1)),
        ("put_ask", ("b", 2)),
        ("forget", "u1"),  # Starting, at the confirmation, is the view's own already: not published
    ]
    assert pruned(owner.app.pending) == {"vcore": 1000, "memory": 5}
    assert pruned(owner.app.allocated) == {}
    assert effects.new_allocations == [first]
    assert [(a.uuid, kind) for a, kind, _ in effects.released] == [("u1", T.STOPPED_BY_RM)]
    assert effects.state_changes == [("Accepted", 1.0), ("Starting", 3.0)]
    assert effects.rejected_asks == [("", "allocation key must not be empty")]


# ---- remove_asks -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "dropped", "expected_change", "left"),
    [
        pytest.param(["b"], [("b", 2)], {"memory": -20}, ["a", "c"], id="one-named"),
        pytest.param(["c", "a"], [("c", 3), ("a", 1)], {"vcore": -3000}, ["b"], id="named-in-given-order"),
        pytest.param([], [("a", 1), ("b", 2), ("c", 3)], {"vcore": -3000, "memory": -20}, [], id="all"),
        pytest.param(["nope"], [], {}, ["a", "b", "c"], id="unknown-key-ignored"),
        pytest.param(["b", "b"], [("b", 2)], {"memory": -20}, ["a", "c"], id="named-twice"),
    ],
)
def test_remove_asks(keys, dropped, expected_change, left):
    owner = new_owner()
    owner.add_asks([si_ask("a", max_allocations=2), si_ask("b", {"memory": 10}, 2), si_ask("c")], 0.0)
    pending_before = dict(owner.app.pending)
    effects = owner.remove_asks(keys, 1.0)
    completed = [("state", "Completing")] if not left else []  # idle while Accepted
    assert ops(effects) == [*[("drop_ask", d) for d in dropped], *completed]
    assert pending_change(owner, pending_before) == expected_change
    assert sorted(owner.app.asks) == left


def test_remove_asks_gives_back_only_what_is_still_pending():
    owner = new_owner()
    owner.add_asks([si_ask("a", max_allocations=3)], 0.0)
    owner.confirm([placed(owner, "a", "u1"), placed(owner, "a", "u2")], 0.0)
    pending_before = dict(owner.app.pending)
    effects = owner.remove_asks(["a"], 1.0)
    assert pending_change(owner, pending_before) == {"vcore": -1000}
    assert "u1" in owner.app.allocations and "u2" in owner.app.allocations, "allocations stay"
    assert owner.app.state is S.RUNNING and effects.state_changes == []


@pytest.mark.parametrize(
    ("state", "complete", "after", "changes"),
    [
        pytest.param(S.ACCEPTED, True, S.COMPLETING, ["Completing"], id="accepted-idle-completes"),
        pytest.param(S.ACCEPTED, False, S.ACCEPTED, [], id="complete-false-keeps-state"),
        pytest.param(S.STARTING, True, S.STARTING, [], id="allocations-left-no-completion"),
        pytest.param(S.RUNNING, True, S.RUNNING, [], id="running-with-allocations-stays"),
    ],
)
def test_remove_asks_completion_only_when_idle(state, complete, after, changes):
    owner = owner_in(state)
    effects = owner.remove_asks([], 9.0, complete=complete)
    assert owner.app.state is after
    assert effects.state_changes == [(c, 9.0) for c in changes]
    assert effects.completing is bool(changes)


# ---- confirm -----------------------------------------------------------------------------------------


def test_confirm_valid_placement_becomes_an_allocation():
    owner = new_owner()
    owner.add_asks([si_ask("a", {"vcore": 500, "memory": 8}, max_allocations=2)], 0.0)
    allocation = placed(owner, "a", "u1", node="n7")
    pending_before = dict(owner.app.pending)

    effects = owner.confirm([allocation], 1.0)

    assert effects.new_allocations == [allocation]
    assert owner.app.allocations == {"u1": allocation}
    assert pruned(owner.app.allocated) == {"vcore": 500, "memory": 8}
    assert pending_change(owner, pending_before) == {"vcore": -500, "memory": -8}
    assert owner.app.asks["a"].pending == 1
    assert effects.view_ops == [], "the view counted its own proposal already"
    assert effects.released == []


@pytest.mark.parametrize(
    ("tags", "placements", "changes", "after"),
    [
        pytest.param({}, 1, ["Starting"], S.STARTING, id="first-allocation-starting"),
        pytest.param({}, 2, ["Starting", "Running"], S.RUNNING, id="second-allocation-running"),
        pytest.param({}, 3, ["Starting", "Running"], S.RUNNING, id="third-allocation-no-change"),
        pytest.param(
            {STATE_AWARE_DISABLE_TAG: "true"}, 1, ["Starting", "Running"], S.RUNNING, id="stateaware-disabled"
        ),
        pytest.param(
            {STATE_AWARE_DISABLE_TAG: "TRUE"},
            1,
            ["Starting", "Running"],
            S.RUNNING,
            id="tag-case-insensitive",
        ),
        pytest.param({STATE_AWARE_DISABLE_TAG: "false"}, 1, ["Starting"], S.STARTING, id="tag-false"),
    ],
)
def test_confirm_moves_accepted_to_starting_to_running(tags, placements, changes, after):
    owner = new_owner(tags=tags)
    owner.add_asks([si_ask("a", max_allocations=3)], 0.0)
    effects = AppEffects()
    for n in range(placements):
        owner.confirm([placed(owner, "a", f"u{n}")], 2.0 + n, effects)
    assert owner.app.state is after
    assert [state for state, _ in effects.state_changes] == changes


def test_confirm_two_allocations_in_one_call_reach_running():
    owner = new_owner()
    owner.add_asks([si_ask("a", max_allocations=2)], 0.0)
    pending_before = dict(owner.app.pending)
    effects = owner.confirm([placed(owner, "a", "u1"), placed(owner, "a", "u2")], 4.0)
    assert effects.state_changes == [("Starting", 4.0), ("Running", 4.0)]
    assert pruned(owner.app.allocated) == {"vcore": 2000}
    assert pending_change(owner, pending_before) == {"vcore": -2000}


def _ask_gone(owner: ApplicationOwner, allocation: Allocation) -> None:
    owner.remove_asks(["a"], 1.0)


def _ask_replaced(owner: ApplicationOwner, allocation: Allocation) -> None:
    owner.add_asks([si_ask("a", max_allocations=2)], 1.0)


def _nothing_pending(owner: ApplicationOwner, allocation: Allocation) -> None:
    owner.confirm([placed(owner, "a", "first")], 1.0)
    owner.confirm([placed(owner, "a", "second")], 1.0)


def _app_removed(owner: ApplicationOwner, allocation: Allocation) -> None:
    owner.remove("removed", 1.0)


def _app_failing(owner: ApplicationOwner, allocation: Allocation) -> None:
    owner.app.handle(E.FAIL, 1.0)


def _app_completed(owner: ApplicationOwner, allocation: Allocation) -> None:
    # a terminal application that still holds an ask: only reachable by force, but refused all the same
    owner.app.state = S.COMPLETED


@pytest.mark.parametrize(
    "meanwhile",
    [
        pytest.param(_ask_gone, id="ask-removed"),
        pytest.param(_ask_replaced, id="stale-generation"),
        pytest.param(_nothing_pending, id="nothing-pending"),
        pytest.param(_app_removed, id="application-removed"),
        pytest.param(_app_failing, id="application-failing"),
        pytest.param(_app_completed, id="application-terminal"),
    ],
)
def test_confirm_refused_is_rolled_back_and_never_reaches_its_node(meanwhile):
    owner = new_owner()
    owner.add_asks([si_ask("a", max_allocations=2)], 0.0)
    allocation = placed(owner, "a", "late", node="n5")
    meanwhile(owner, allocation)
    allocations_before = dict(owner.app.allocations)
    pending_before = dict(owner.app.pending)
    allocated_before = dict(owner.app.allocated)
    state_before = owner.app.state

    effects = owner.confirm([allocation], 2.0)

    # the view booked it on its node: its rollback frees it there
    assert effects.view_ops == [RollBack(allocation=allocation)]
    assert effects.new_allocations == [] and effects.state_changes == []
    assert owner.app.allocated == allocated_before
    assert owner.app.allocations == allocations_before and owner.app.pending == pending_before
    assert owner.app.state is state_before


def test_confirm_mixed_batch_books_only_the_confirmed_ones_on_their_node():
    owner = new_owner()
    owner.add_asks([si_ask("a", max_allocations=2)], 0.0)
    ok1, ok2, extra = (placed(owner, "a", u, node="n3") for u in ("u1", "u2", "u3"))
    stale = placed(owner, "a", "u0", node="n3", generation=99)

    effects = owner.confirm([stale, ok1, ok2, extra], 1.0)

    assert effects.new_allocations == [ok1, ok2]
    assert ops(effects) == [("rollback", "u0"), ("rollback", "u3")]
    assert pruned(owner.app.allocated) == {"vcore": 2000}
