"""ApplicationOwner: the authoritative application an Application actor wraps, tested without threads.

Each operation writes what others must learn into an ``AppEffects``: the queue (pending / allocated
deltas), the RM (new, released, rejected, state changes), the scheduler's view (``view_ops`` in the
order things happened: the view is also the record of what runs on each node) and the partition.
The scenarios follow docs/architecture.md ("One decision, end to end") and the reference 2.14-2.17:
asks, confirmation of placements the scheduler's view decided, recovery, releases, node and
application removal, completing timeout.
"""

from __future__ import annotations

import pytest

from korral import si
from korral.model import resource as res
from korral.model.allocation import Allocation, Ask
from korral.model.app_owner import AppEffects, ApplicationOwner, ask_rejection
from korral.model.application import (
    STATE_AWARE_DISABLE_TAG,
    Application,
    ApplicationEvent,
    ApplicationState,
)
from korral.model.resource import Resource
from korral.model.view_ops import AdoptRecovered, DropAsk, Forget, PutAsk, RollBack

S = ApplicationState
E = ApplicationEvent
T = si.TerminationType
APP = "app-1"
QUEUE = "root.a"
CPU = {"vcore": 1000}


# ---- helpers -----------------------------------------------------------------------------------------


def new_owner(**app_kwargs) -> ApplicationOwner:
    app_kwargs.setdefault("partition", "[rm]default")
    app_kwargs.setdefault("queue_path", QUEUE)
    app_kwargs.setdefault("user", "alice")
    return ApplicationOwner(Application.new(APP, **app_kwargs))


def si_ask(key: str = "k1", resource: dict[str, int] | None = None, max_allocations: int = 1, **kw):
    return si.AllocationAsk(
        allocation_key=key,
        application_id=APP,
        resource_ask=CPU if resource is None else resource,
        max_allocations=max_allocations,
        **kw,
    )


def placed(owner: ApplicationOwner, key: str, uuid: str, node: str = "n1", generation: int | None = None):
    """What the scheduler's view decides for the ask ``key`` and sends to the application (``Placed``)."""
    ask = owner.app.asks[key]
    return Allocation(
        uuid=uuid,
        allocation_key=key,
        application_id=APP,
        node_id=node,
        resource=dict(ask.resource),
        queue_path=QUEUE,
        ask_generation=ask.generation if generation is None else generation,
    )


def existing(uuid: str, key: str = "rk", node: str = "n1", resource: dict[str, int] | None = None):
    """An allocation the RM reports as already running (recovery)."""
    return Allocation(
        uuid=uuid,
        allocation_key=key,
        application_id=APP,
        node_id=node,
        resource=CPU if resource is None else resource,
        queue_path=QUEUE,
        recovered=True,
    )


def release(uuid: str = "", key: str = "", termination: T = T.UNKNOWN_TERMINATION_TYPE, message: str = ""):
    return si.AllocationRelease(
        application_id=APP, uuid=uuid, allocation_key=key, termination_type=termination, message=message
    )


def owner_in(state: ApplicationState) -> ApplicationOwner:
    """An owner driven into ``state`` through its own operations where the state machine allows it."""
    owner = new_owner()
    if state is S.NEW:
        return owner
    if state in (S.REJECTED, S.RESUMING):
        owner.app.handle(E.REJECT if state is S.REJECTED else E.RESUME, 0.0)
        return owner
    owner.add_asks([si_ask("k1", max_allocations=3)], 0.0)
    if state is S.ACCEPTED:
        return owner
    owner.confirm([placed(owner, "k1", "u1")], 0.0)
    if state is S.STARTING:
        return owner
    owner.confirm([placed(owner, "k1", "u2")], 0.0)
    if state is S.RUNNING:
        return owner
    if state in (S.FAILING, S.FAILED):
        owner.app.handle(E.FAIL, 0.0)
        if state is S.FAILED:
            owner.app.handle(E.FAIL, 0.0)
        return owner
    owner.remove_asks(["k1"], 0.0)
    owner.release([release()], 0.0)
    assert owner.app.state is S.COMPLETING
    if state is S.COMPLETING:
        return owner
    owner.completing_timeout(100.0, 30.0)
    assert owner.app.state is S.COMPLETED
    if state is S.EXPIRED:
        owner.app.handle(E.EXPIRE, 100.0)
    return owner


def pruned(resource: dict[str, int]) -> dict[str, int]:
    return res.prune(resource)


def pending_change(owner: ApplicationOwner, before: Resource) -> Resource:
    """What the owner holds pending now less ``before`` (its own count: asks' pending repeats)."""
    now = owner.app.pending
    return pruned({name: now.get(name, 0) - before.get(name, 0) for name in now.keys() | before.keys()})


def ops(effects: AppEffects) -> list[tuple[str, object]]:
    """view_ops with allocations shown by uuid and asks by (key, generation): readable comparisons."""
    shown: list[tuple[str, object]] = []
    for op in effects.view_ops:
        if isinstance(op, PutAsk):
            shown.append(("put_ask", (op.ask.allocation_key, op.ask.generation)))
        elif isinstance(op, DropAsk):
            shown.append(("drop_ask", (op.allocation_key, op.generation)))
        else:
            shown.append((VIEW_OP_NAMES[type(op)], op.allocation.uuid))
    return shown


VIEW_OP_NAMES = {RollBack: "rollback", Forget: "forget", AdoptRecovered: "recover"}


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
    assert ops(effects) == expected_ops
    # the payload is the owner's immutable spec itself (built once from the SI ask), shared with the
    # view, which keeps its own progress on it
    for op, sent in zip(effects.view_ops, asks, strict=True):
        assert isinstance(op, PutAsk)
        owned = owner.app.asks[sent.allocation_key]
        assert op.ask is owned.spec and op.ask.generation == owned.generation > 0
    assert res.equals(owner.app.pending, expected_pending)
    assert effects.allocated_delta == {} and effects.new_allocations == []


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
    assert ops(effects) == [("put_ask", ("a", 1)), ("put_ask", ("b", 2))]
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
        ("put_ask", ("a", 1)),
        ("put_ask", ("b", 2)),
        ("forget", "u1"),
    ]
    assert pruned(owner.app.pending) == {"vcore": 1000, "memory": 5}
    assert pruned(effects.allocated_delta) == {}
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
    assert ops(effects) == [("drop_ask", d) for d in dropped]
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
    assert pruned(effects.allocated_delta) == {"vcore": 500, "memory": 8}
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
    assert pruned(effects.allocated_delta) == {"vcore": 2000}
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
    state_before = owner.app.state

    effects = owner.confirm([allocation], 2.0)

    # the view booked it on its node: its rollback frees it there
    assert effects.view_ops == [RollBack(allocation)]
    assert effects.new_allocations == [] and effects.state_changes == []
    assert pruned(effects.allocated_delta) == {}
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
    assert pruned(effects.allocated_delta) == {"vcore": 2000}


# ---- recover -----------------------------------------------------------------------------------------


def test_recover_adds_allocations_whatever_the_asks():
    owner = new_owner()
    big = existing("r1", resource={"vcore": 10**9, "memory": 10**12})
    small = existing("r2", node="n2", resource={"memory": 1})
    pending_before = dict(owner.app.pending)

    effects = owner.recover([big, small], 1.0)

    assert effects.new_allocations == [big, small]
    assert ops(effects) == [("recover", "r1"), ("recover", "r2")]
    assert pruned(effects.allocated_delta) == {"vcore": 10**9, "memory": 10**12 + 1}
    assert pending_change(owner, pending_before) == {}
    assert set(owner.app.allocations) == {"r1", "r2"}
    assert effects.rejected_asks == []


@pytest.mark.parametrize(
    ("state", "changes"),
    [
        pytest.param(S.NEW, ["Accepted", "Starting", "Running"], id="new-to-running"),
        pytest.param(S.RESUMING, ["Accepted", "Starting", "Running"], id="resuming-to-running"),
        pytest.param(S.ACCEPTED, ["Starting", "Running"], id="accepted-to-running"),
        pytest.param(S.STARTING, ["Running"], id="starting-to-running"),
        pytest.param(S.COMPLETING, ["Running"], id="completing-to-running"),
        pytest.param(S.RUNNING, [], id="running-stays"),
    ],
)
def test_recover_runs_the_application(state, changes):
    owner = owner_in(state)
    effects = owner.recover([existing("r1")], 6.0)
    assert owner.app.state is S.RUNNING
    assert effects.state_changes == [(c, 6.0) for c in changes]


@pytest.mark.parametrize(
    ("setup", "uuids", "rejected"),
    [
        pytest.param("dup-existing", ["r1"], ["r1"], id="duplicate-of-existing"),
        pytest.param("", ["r1", "r1"], ["r1"], id="duplicate-in-one-call"),
        pytest.param("removed", ["r9"], ["r9"], id="application-removed"),
        pytest.param("failing", ["r9"], ["r9"], id="application-failing"),
        pytest.param("completed", ["r9"], ["r9"], id="application-completed"),
    ],
)
def test_recover_rejections(setup, uuids, rejected):
    owner = owner_in(S.COMPLETED) if setup == "completed" else new_owner()
    if setup == "dup-existing":
        owner.recover([existing("r1")], 0.0)
    elif setup == "removed":
        owner.remove("gone", 0.0)
    elif setup == "failing":
        owner.app.handle(E.FAIL, 0.0)
    state_before = owner.app.state

    effects = owner.recover([existing(u) for u in uuids], 1.0)

    assert effects.rejected_asks == [("rk", f"allocation {u} cannot be recovered") for u in rejected]
    accepted = len(uuids) - len(rejected)
    assert len(effects.new_allocations) == accepted
    # one the owner does not hold is forgotten in the view, where the partition adopted it with its node
    forgotten = [op.allocation.uuid for op in effects.view_ops if isinstance(op, Forget)]
    assert forgotten == ([] if setup in ("dup-existing", "") else rejected)
    assert len(effects.view_ops) == accepted + len(forgotten)
    if not accepted:
        assert owner.app.state is state_before and effects.state_changes == []


# ---- release -----------------------------------------------------------------------------------------


def _running_with_allocations() -> ApplicationOwner:
    """Running: k1 x2 on n1, k2 on n2 (one more k2 still pending when ``pending`` is wanted)."""
    owner = new_owner()
    owner.add_asks([si_ask("k1", max_allocations=2), si_ask("k2", {"memory": 64})], 0.0)
    owner.confirm([placed(owner, "k1", "a1"), placed(owner, "k1", "a2")], 0.0)
    owner.confirm([placed(owner, "k2", "b1", node="n2")], 0.0)
    return owner


@pytest.mark.parametrize(
    ("releases", "released", "allocated_delta"),
    [
        pytest.param([release(uuid="a2")], ["a2"], {"vcore": -1000}, id="by-uuid"),
        pytest.param([release(key="k1")], ["a1", "a2"], {"vcore": -2000}, id="by-key"),
        pytest.param([release()], ["a1", "a2", "b1"], {"vcore": -2000, "memory": -64}, id="all"),
        pytest.param([release(uuid="zz")], [], {}, id="unknown-uuid"),
        pytest.param([release(key="zz")], [], {}, id="unknown-key"),
        pytest.param([release(uuid="b1", key="k1")], ["b1"], {"memory": -64}, id="uuid-wins-over-key"),
        pytest.param([release(uuid="a1"), release(uuid="a1")], ["a1"], {"vcore": -1000}, id="twice"),
    ],
)
def test_release(releases, released, allocated_delta):
    owner = _running_with_allocations()
    effects = owner.release(releases, 3.0)
    assert [a.uuid for a, _, _ in effects.released] == released
    # the view frees each on its node (it is the record of what runs there)
    assert [(op.allocation.uuid, op.allocation.node_id) for op in effects.view_ops] == [
        (u, "n2" if u == "b1" else "n1") for u in released
    ]
    assert pruned(effects.allocated_delta) == allocated_delta
    assert not set(released) & set(owner.app.allocations)


@pytest.mark.parametrize(
    ("termination", "expected"),
    [
        pytest.param(T.UNKNOWN_TERMINATION_TYPE, T.STOPPED_BY_RM, id="unset-means-stopped-by-rm"),
        pytest.param(T.STOPPED_BY_RM, T.STOPPED_BY_RM, id="stopped-by-rm"),
        pytest.param(T.TIMEOUT, T.TIMEOUT, id="timeout"),
        pytest.param(T.PREEMPTED_BY_SCHEDULER, T.PREEMPTED_BY_SCHEDULER, id="preempted"),
        pytest.param(T.PLACEHOLDER_REPLACED, T.PLACEHOLDER_REPLACED, id="placeholder-replaced"),
    ],
)
def test_release_passes_termination_type_and_message(termination, expected):
    owner = _running_with_allocations()
    effects = owner.release([release(uuid="a1", termination=termination, message="pod done")], 1.0)
    ((allocation, kind, message),) = effects.released
    assert allocation.uuid == "a1" and kind is expected and message == "pod done"


@pytest.mark.parametrize(
    ("releases", "pending_left", "changes"),
    [
        pytest.param([release()], False, ["Completing"], id="all-released-idle-completes"),
        pytest.param([release(key="k1"), release(key="k2")], False, ["Completing"], id="each-key"),
        pytest.param([release()], True, [], id="pending-ask-keeps-running"),
        pytest.param([release(key="k1")], False, [], id="allocations-left"),
    ],
)
def test_release_completes_only_when_idle(releases, pending_left, changes):
    owner = _running_with_allocations()
    if pending_left:
        owner.add_asks([si_ask("later")], 0.0)
    effects = owner.release(releases, 8.0)
    assert effects.state_changes == [(c, 8.0) for c in changes]
    assert effects.completing is bool(changes)
    assert owner.app.state is (S.COMPLETING if changes else S.RUNNING)


# ---- node_removed ------------------------------------------------------------------------------------


def test_node_removed_releases_without_freeing_the_node():
    owner = _running_with_allocations()
    effects = owner.node_removed("n1", ["a1", "a2", "not-mine"], "Node n1 Removed", 4.0)

    assert [(a.uuid, kind, text) for a, kind, text in effects.released] == [
        ("a1", T.STOPPED_BY_RM, "Node n1 Removed"),
        ("a2", T.STOPPED_BY_RM, "Node n1 Removed"),
    ]
    assert ops(effects) == [("forget", "a1"), ("forget", "a2")]  # the view dropped them already: a no-op
    assert pruned(effects.allocated_delta) == {"vcore": -2000}
    assert owner.app.state is S.RUNNING and effects.state_changes == []


def test_node_removed_last_allocations_completes_the_idle_application():
    owner = _running_with_allocations()
    owner.release([release(uuid="b1")], 1.0)
    effects = owner.node_removed("n1", ["a1", "a2"], "Node n1 Removed", 5.0)
    assert effects.state_changes == [("Completing", 5.0)] and effects.completing


def test_node_removed_twice_is_harmless():
    owner = _running_with_allocations()
    owner.node_removed("n2", ["b1"], "gone", 1.0)
    effects = owner.node_removed("n2", ["b1"], "gone", 2.0)
    assert effects.released == [] and effects.view_ops == []


# ---- remove ------------------------------------------------------------------------------------------


def test_remove_drops_asks_and_releases_allocations():
    owner = _running_with_allocations()
    owner.add_asks([si_ask("k3", {"memory": 5}, max_allocations=2)], 0.0)
    pending_before = dict(owner.app.pending)

    effects = owner.remove("application app-1 removed", 9.0)

    assert ops(effects) == [
        ("drop_ask", ("k1", 1)),
        ("drop_ask", ("k2", 2)),
        ("drop_ask", ("k3", 3)),
        ("forget", "a1"),
        ("forget", "a2"),
        ("forget", "b1"),
    ]
    assert [(a.uuid, kind, text) for a, kind, text in effects.released] == [
        (u, T.STOPPED_BY_RM, "application app-1 removed") for u in ("a1", "a2", "b1")
    ]
    assert pending_change(owner, pending_before) == {"memory": -10}
    assert pruned(effects.allocated_delta) == {"vcore": -2000, "memory": -64}
    assert effects.state_changes == [] and not effects.completing
    assert owner.app.asks == {} and owner.app.allocations == {}
    assert owner.removed


@pytest.mark.parametrize("state", [S.NEW, S.ACCEPTED, S.STARTING, S.RUNNING, S.COMPLETING], ids=str)
def test_remove_reports_no_state_change(state):
    owner = owner_in(state)
    effects = owner.remove("bye", 1.0)
    assert effects.state_changes == [] and not effects.completing
    assert owner.app.state is state


def test_after_remove_asks_are_rejected_and_placements_refused():
    owner = _running_with_allocations()
    owner.remove("bye", 1.0)
    late = Allocation(
        uuid="late", allocation_key="k1", application_id=APP, node_id="n1", resource=CPU, ask_generation=1
    )

    effects = owner.add_asks([si_ask("k9")], 2.0)
    owner.confirm([late], 2.0, effects)
    owner.recover([existing("r1")], 2.0, effects)

    assert effects.rejected_asks == [
        ("k9", "application removed"),
        ("rk", "allocation r1 cannot be recovered"),
    ]
    assert ops(effects) == [("rollback", "late"), ("forget", "r1")]  # r1: the view adopted it with its node
    assert effects.new_allocations == [] and effects.state_changes == []


@pytest.mark.parametrize(
    "late",
    [
        pytest.param(lambda o: o.node_removed("n1", ["a1"], "Node n1 Removed", 2.0), id="node-removed"),
        pytest.param(lambda o: o.release([release()], 2.0), id="release"),
        pytest.param(lambda o: o.remove_asks([], 2.0), id="remove-asks"),
    ],
)
def test_removed_application_reports_no_later_state_change(late):
    owner = _running_with_allocations()
    owner.remove("bye", 1.0)
    effects = late(owner)
    assert effects.state_changes == [] and not effects.completing
    assert owner.app.state is S.RUNNING


# ---- completing_timeout ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "elapsed", "completed"),
    [
        pytest.param(S.COMPLETING, 30.0, True, id="completing-timeout-reached"),
        pytest.param(S.COMPLETING, 45.0, True, id="completing-past-timeout"),
        pytest.param(S.COMPLETING, 29.5, False, id="completing-too-early"),
        pytest.param(S.RUNNING, 1000.0, False, id="running-never"),
        pytest.param(S.ACCEPTED, 1000.0, False, id="accepted-never"),
        pytest.param(S.COMPLETED, 1000.0, False, id="completed-stays"),
    ],
)
def test_completing_timeout_only_after_the_timeout(state, elapsed, completed):
    owner = owner_in(state)
    since = owner.app.state_time
    effects = owner.completing_timeout(since + elapsed, 30.0)
    if completed:
        assert owner.app.state is S.COMPLETED
        assert effects.state_changes == [("Completed", since + elapsed)]
    else:
        assert owner.app.state is state and effects.state_changes == []
    assert not effects.completing


def test_completing_timeout_only_when_idle():
    owner = owner_in(S.COMPLETING)
    # something arrived without the state machine noticing (forced): the timeout must not complete it
    owner.app.add_allocation(existing("r1"))
    effects = owner.completing_timeout(owner.app.state_time + 60.0, 30.0)
    assert owner.app.state is S.COMPLETING and effects.state_changes == []


def test_completing_timeout_after_a_new_ask_does_nothing():
    owner = owner_in(S.COMPLETING)
    owner.add_asks([si_ask("again")], 10.0)
    effects = owner.completing_timeout(500.0, 30.0)
    assert owner.app.state is S.RUNNING and effects.state_changes == []


def test_completing_timeout_accumulates_into_given_effects():
    owner = owner_in(S.COMPLETING)
    effects = AppEffects()
    assert owner.completing_timeout(owner.app.state_time + 30.0, 30.0, effects) is effects
    assert [state for state, _ in effects.state_changes] == ["Completed"]


# ---- view_ops order -----------------------------------------------------------------------------------


def test_view_ops_recover_then_release_keep_their_order():
    owner = new_owner()
    effects = AppEffects()
    recovered = existing("r1")
    owner.recover([recovered], 1.0, effects)
    owner.release([release(uuid="r1")], 2.0, effects)
    assert effects.view_ops == [AdoptRecovered(recovered), Forget(recovered)]
    assert pruned(effects.allocated_delta) == {}
    assert [s for s, _ in effects.state_changes] == ["Accepted", "Starting", "Running", "Completing"]


def test_view_ops_in_the_order_things_happened():
    owner = new_owner()
    effects = AppEffects()
    owner.add_asks([si_ask("a", max_allocations=2)], 0.0, effects)
    good = placed(owner, "a", "u1")
    owner.confirm([good], 1.0, effects)
    owner.add_asks([si_ask("a")], 2.0, effects)  # replaced: the in-flight u2 is now stale
    stale = placed(owner, "a", "u2", generation=1)
    owner.confirm([stale], 3.0, effects)
    owner.recover([existing("r1", node="n2")], 4.0, effects)
    owner.release([release(uuid="u1")], 5.0, effects)
    owner.remove_asks(["a"], 6.0, effects)
    owner.node_removed("n2", ["r1"], "Node n2 Removed", 7.0, effects)

    assert ops(effects) == [
        ("put_ask", ("a", 1)),
        ("put_ask", ("a", 2)),  # a replacement: one put, replaced in place by the view
        ("rollback", "u2"),
        ("recover", "r1"),
        ("forget", "u1"),
        ("drop_ask", ("a", 2)),
        ("forget", "r1"),
    ]
    # u2 is undone in the view (its rollback frees its node); u1 was confirmed, then released
    assert effects.new_allocations == [good, existing("r1", node="n2")]
    assert pruned(effects.allocated_delta) == {}
    assert pruned(owner.app.pending) == {}
    assert owner.app.state is S.COMPLETING


def test_the_view_shares_the_owners_ask_spec_and_keeps_its_own_count() -> None:
    owner = new_owner()
    effects = owner.add_asks([si_ask("k", max_allocations=2)], 1.0)
    (put,) = [op for op in effects.view_ops if isinstance(op, PutAsk)]
    mine = owner.app.asks["k"]
    theirs = Ask(put.ask)
    assert theirs.spec is mine.spec
    theirs.pending -= 1
    assert mine.pending == 2 and theirs.pending == 1
