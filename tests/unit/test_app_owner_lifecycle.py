"""ApplicationOwner, tested without threads: recovery, releases, node and application removal, timeouts."""

from __future__ import annotations

import pytest
from app_owner_helpers import (
    APP,
    CPU,
    QUEUE,
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
    resource_change,
    si_ask,
)

from korral.model.allocation import Allocation, Ask
from korral.model.app.owner import AppEffects, ApplicationOwner
from korral.model.view_ops import AdoptRecovered, Forget, OwnerState, PutAsks


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


# ---- recover -----------------------------------------------------------------------------------------


def test_recover_adds_allocations_whatever_the_asks():
    owner = new_owner()
    big = existing("r1", resource={"vcore": 10**9, "memory": 10**12})
    small = existing("r2", node="n2", resource={"memory": 1})
    pending_before = dict(owner.app.pending)

    effects = owner.recover([big, small], 1.0)

    assert effects.new_allocations == [big, small]
    assert ops(effects) == [("recover", "r1"), ("recover", "r2")]
    assert pruned(owner.app.allocated) == {"vcore": 10**9, "memory": 10**12 + 1}
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
    ("releases", "released", "allocated_change"),
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
def test_release(releases, released, allocated_change):
    owner = _running_with_allocations()
    allocated_before = dict(owner.app.allocated)
    effects = owner.release(releases, 3.0)
    assert [a.uuid for a, _, _ in effects.released] == released
    # the view frees each on its node (it is the record of what runs there)
    assert [
        (op.allocation.uuid, op.allocation.node_id) for op in effects.view_ops if isinstance(op, Forget)
    ] == [(u, "n2" if u == "b1" else "n1") for u in released]
    assert resource_change(owner.app.allocated, allocated_before) == allocated_change
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
    allocated_before = dict(owner.app.allocated)
    effects = owner.node_removed("n1", ["a1", "a2", "not-mine"], "Node n1 Removed", 4.0)

    assert [(a.uuid, kind, text) for a, kind, text in effects.released] == [
        ("a1", T.STOPPED_BY_RM, "Node n1 Removed"),
        ("a2", T.STOPPED_BY_RM, "Node n1 Removed"),
    ]
    assert ops(effects) == [("forget", "a1"), ("forget", "a2")]  # the view dropped them already: a no-op
    assert resource_change(owner.app.allocated, allocated_before) == {"vcore": -2000}
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
    allocated_before = dict(owner.app.allocated)

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
    assert resource_change(owner.app.allocated, allocated_before) == {"vcore": -2000, "memory": -64}
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
    # the recovery's states are the view's own as it adopts; completing is the owner's, published
    assert effects.view_ops == [
        AdoptRecovered(allocation=recovered),
        Forget(allocation=recovered),
        OwnerState(state=S.COMPLETING),
    ]
    assert pruned(owner.app.allocated) == {}
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
        ("state", "Accepted"),  # published: its first ask ran it; what confirmations do is the view's
        ("put_ask", ("a", 1)),
        ("put_ask", ("a", 2)),  # a replacement: one put, replaced in place by the view
        ("rollback", "u2"),
        ("recover", "r1"),
        ("forget", "u1"),
        ("drop_ask", ("a", 2)),
        ("forget", "r1"),
        ("state", "Completing"),  # idle: the owner's decision, published
    ]
    # u2 is undone in the view (its rollback frees its node); u1 was confirmed, then released
    assert effects.new_allocations == [good, existing("r1", node="n2")]
    assert pruned(owner.app.allocated) == {}
    assert pruned(owner.app.pending) == {}
    assert owner.app.state is S.COMPLETING


def test_the_view_shares_the_owners_ask_spec_and_keeps_its_own_count() -> None:
    owner = new_owner()
    effects = owner.add_asks([si_ask("k", max_allocations=2)], 1.0)
    (put,) = [op for op in effects.view_ops if isinstance(op, PutAsks)]
    mine = owner.app.asks["k"]
    theirs = Ask(put.asks[0])
    assert theirs.spec is mine.spec
    theirs.pending -= 1
    assert mine.pending == 2 and theirs.pending == 1
