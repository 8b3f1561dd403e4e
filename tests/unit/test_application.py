"""Applications: the state machine (reference 2.16 plus the seeds' Starting state), asks and allocations."""

from __future__ import annotations

import itertools

import pytest

from korral import resource as res
from korral.model.allocation import Allocation, Ask
from korral.model.app.application import (
    MIN_PRIORITY,
    RUNNING_STATES,
    STATE_AWARE_DISABLE_TAG,
    TERMINAL_STATES,
    TRANSITIONS,
    Application,
    ApplicationEvent,
    ApplicationState,
    InvalidTransition,
    next_state,
)

E = ApplicationEvent
S = ApplicationState

# Every allowed (event, from) -> to: the reference table (2.16) plus the seeds' Starting state.
ALLOWED: dict[tuple[ApplicationEvent, ApplicationState], ApplicationState] = {
    (E.REJECT, S.NEW): S.REJECTED,
    (E.RUN, S.NEW): S.ACCEPTED,
    (E.RUN, S.RESUMING): S.ACCEPTED,
    (E.RUN, S.ACCEPTED): S.STARTING,
    (E.RUN, S.STARTING): S.RUNNING,
    (E.RUN, S.RUNNING): S.RUNNING,
    (E.RUN, S.COMPLETING): S.RUNNING,
    (E.COMPLETE, S.ACCEPTED): S.COMPLETING,
    (E.COMPLETE, S.STARTING): S.COMPLETING,
    (E.COMPLETE, S.RUNNING): S.COMPLETING,
    (E.COMPLETE, S.COMPLETING): S.COMPLETED,
    (E.FAIL, S.NEW): S.FAILING,
    (E.FAIL, S.ACCEPTED): S.FAILING,
    (E.FAIL, S.STARTING): S.FAILING,
    (E.FAIL, S.RUNNING): S.FAILING,
    (E.FAIL, S.FAILING): S.FAILED,
    (E.RESUME, S.NEW): S.RESUMING,
    (E.RESUME, S.ACCEPTED): S.RESUMING,
    (E.EXPIRE, S.COMPLETED): S.EXPIRED,
    (E.EXPIRE, S.FAILED): S.EXPIRED,
    (E.EXPIRE, S.REJECTED): S.EXPIRED,
}
DISALLOWED = [pair for pair in itertools.product(E, S) if pair not in ALLOWED]


def _id(pair: tuple[ApplicationEvent, ApplicationState]) -> str:
    event, state = pair
    return f"{event.name.lower()}-from-{state.name.lower()}"


def app_in(state: ApplicationState, **kwargs) -> Application:
    app = Application.new("app-1", **kwargs)
    app.state = state
    return app


def make_ask(key: str, resource: dict[str, int] | None = None, **kwargs) -> Ask:
    resource = resource if resource is not None else {"memory": 10}
    return Ask.of(allocation_key=key, application_id="app-1", resource=resource, **kwargs)


def make_alloc(uuid: str, key: str, resource: dict[str, int], placeholder: bool = False) -> Allocation:
    return Allocation(
        uuid=uuid,
        allocation_key=key,
        application_id="app-1",
        node_id="node-1",
        resource=resource,
        placeholder=placeholder,
    )


# ---- state machine ---------------------------------------------------------------------------------


def test_transition_table_is_exactly_the_reference():
    assert TRANSITIONS == ALLOWED
    assert len(DISALLOWED) == len(E) * len(S) - len(ALLOWED)


@pytest.mark.parametrize(("pair", "target"), [pytest.param(p, t, id=_id(p)) for p, t in ALLOWED.items()])
def test_allowed_transition(pair, target):
    event, state = pair
    assert next_state(state, event) is target
    app = app_in(state)
    app.state_time = -1.0
    assert app.handle(event, now=42.0) is target
    assert app.state is target
    assert app.state_time == (42.0 if target is not state else -1.0), "time moves only on a real change"


@pytest.mark.parametrize("pair", [pytest.param(p, id=_id(p)) for p in DISALLOWED])
def test_disallowed_transition_raises(pair):
    event, state = pair
    with pytest.raises(InvalidTransition) as raised:
        next_state(state, event)
    assert raised.value.event is event and raised.value.state is state
    assert event.value in str(raised.value) and state.value in str(raised.value)
    app = app_in(state)
    app.state_time = 7.0
    with pytest.raises(InvalidTransition):
        app.handle(event, now=99.0)
    assert app.state is state and app.state_time == 7.0, "a refused event changes nothing"


@pytest.mark.parametrize(
    ("event", "state", "changed", "after"),
    [
        pytest.param(E.RUN, S.NEW, True, S.ACCEPTED, id="allowed-changes"),
        pytest.param(E.RUN, S.RUNNING, False, S.RUNNING, id="same-state-is-no-change"),
        pytest.param(E.REJECT, S.RUNNING, False, S.RUNNING, id="disallowed-is-false-not-raise"),
        pytest.param(E.EXPIRE, S.EXPIRED, False, S.EXPIRED, id="terminal-stays"),
        pytest.param(E.COMPLETE, S.COMPLETING, True, S.COMPLETED, id="completing-to-completed"),
    ],
)
def test_try_handle(event, state, changed, after):
    app = app_in(state)
    app.state_time = 1.0
    assert app.try_handle(event, now=5.0) is changed
    assert app.state is after
    assert app.state_time == (5.0 if changed else 1.0)


def test_full_lifecycle():
    app = Application.new("app-1", submission_time=3.0)
    assert app.state is S.NEW and app.state_time == 3.0
    for event, expected in [
        (E.RUN, S.ACCEPTED),
        (E.RUN, S.STARTING),
        (E.RUN, S.RUNNING),
        (E.COMPLETE, S.COMPLETING),
        (E.RUN, S.RUNNING),
        (E.COMPLETE, S.COMPLETING),
        (E.COMPLETE, S.COMPLETED),
        (E.EXPIRE, S.EXPIRED),
    ]:
        assert app.handle(event) is expected


@pytest.mark.parametrize(
    ("state", "terminal", "running"),
    [
        pytest.param(state, state in TERMINAL_STATES, state in RUNNING_STATES, id=state.name.lower())
        for state in S
    ],
)
def test_state_classes(state, terminal, running):
    assert app_in(state).is_terminal is terminal
    assert terminal is (state in {S.COMPLETED, S.FAILED, S.REJECTED, S.EXPIRED})
    assert running is (state in {S.STARTING, S.RUNNING})


# ---- construction ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tags", "disabled"),
    [
        pytest.param(None, False, id="no-tags"),
        pytest.param({STATE_AWARE_DISABLE_TAG: "true"}, True, id="true"),
        pytest.param({STATE_AWARE_DISABLE_TAG: "TRUE"}, True, id="case-insensitive"),
        pytest.param({STATE_AWARE_DISABLE_TAG: "false"}, False, id="false"),
        pytest.param({STATE_AWARE_DISABLE_TAG: "yes"}, False, id="other-value"),
        pytest.param({"other": "true"}, False, id="other-tag"),
    ],
)
def test_state_aware_disabled_tag(tags, disabled):
    assert Application.new("app-1", tags=tags).state_aware_disabled is disabled


@pytest.mark.parametrize(
    ("style", "expected"),
    [
        pytest.param("Hard", "Hard", id="hard"),
        pytest.param("Soft", "Soft", id="soft"),
        pytest.param("anything", "Soft", id="unknown-is-soft"),
    ],
)
def test_gang_scheduling_style(style, expected):
    assert Application.new("app-1", gang_scheduling_style=style).gang_scheduling_style == expected


def test_new_application_defaults():
    tags = {"a": "b"}
    app = Application.new("app-1", groups=["g1"], tags=tags, placeholder_ask={"memory": 5, "vcore": 0})
    tags["a"] = "changed"
    assert app.state is S.NEW
    assert app.tags == {"a": "b"}, "tags are copied"
    assert app.groups == ("g1",)
    assert app.placeholder_ask == {"memory": 5}, "placeholder ask is pruned"
    assert app.pending == {} and app.allocated == {} and app.placeholder_allocated == {}
    assert app.priority == MIN_PRIORITY
    assert not app.has_pending()
    assert app.is_idle()


# ---- asks --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("asks", "pending"),
    [
        pytest.param([("a", {"memory": 10}, 1)], {"memory": 10}, id="single"),
        pytest.param([("a", {"memory": 10, "vcore": 1}, 3)], {"memory": 30, "vcore": 3}, id="repeats"),
        pytest.param(
            [("a", {"memory": 10}, 2), ("b", {"memory": 5, "vcore": 1}, 1)],
            {"memory": 25, "vcore": 1},
            id="two-asks",
        ),
        pytest.param([("a", {"memory": 10}, 0)], {"memory": 10}, id="zero-repeats-means-one"),
    ],
)
def test_add_ask_pending_is_resource_times_repeats(asks, pending):
    app = Application.new("app-1")
    for key, resource, repeats in asks:
        assert app.add_ask(make_ask(key, resource, max_allocations=repeats)) is None
    assert app.pending == pending
    assert app.has_pending() and app.asks_pending_any()
    assert set(app.asks) == {key for key, _, _ in asks}
    assert not app.is_idle()


def test_add_ask_assigns_increasing_generations():
    app = Application.new("app-1")
    first, second = make_ask("a"), make_ask("b")
    app.add_ask(first)
    app.add_ask(second)
    assert 0 < first.generation < second.generation


def test_add_ask_keeps_explicit_generation():
    app = Application.new("app-1")
    ask = make_ask("a", generation=17)
    app.add_ask(ask)
    assert ask.generation == 17


def test_replace_ask_with_same_key():
    app = Application.new("app-1")
    old = make_ask("a", {"memory": 10}, max_allocations=3)
    app.add_ask(old)
    app.take_pending(old)
    app.add_allocation(make_alloc("u1", "a", {"memory": 10}))
    new = make_ask("a", {"memory": 4}, max_allocations=2)
    assert app.add_ask(new) is old
    assert new.generation > old.generation, "a replacement starts a new generation"
    assert app.asks == {"a": new}
    assert app.pending == {"memory": 8}, "the old ask's pending is removed"
    assert list(app.iter_pending_asks()) == [new]
    assert set(app.allocations) == {"u1"}, "allocations of the old ask stay"
    assert app.allocated == {"memory": 10}
    assert [a.uuid for a in app.allocations_for_key("a")] == ["u1"]


@pytest.mark.parametrize(
    ("remove", "returned", "pending", "keys"),
    [
        pytest.param("a", "a", {"memory": 5}, {"b"}, id="known"),
        pytest.param("missing", None, {"memory": 25}, {"a", "b"}, id="unknown"),
    ],
)
def test_remove_ask(remove, returned, pending, keys):
    app = Application.new("app-1")
    app.add_ask(make_ask("a", {"memory": 10}, max_allocations=2))
    app.add_ask(make_ask("b", {"memory": 5}))
    removed = app.remove_ask(remove)
    assert (removed.allocation_key if removed else None) == returned
    assert app.pending == pending
    assert set(app.asks) == keys
    assert {ask.allocation_key for ask in app.iter_pending_asks()} == keys


def test_remove_last_ask_leaves_nothing_pending():
    app = Application.new("app-1")
    app.add_ask(make_ask("a"))
    app.remove_ask("a")
    assert app.pending == {}
    assert not app.has_pending()
    assert app.priority == MIN_PRIORITY
    assert app.is_idle()


def test_remove_fully_taken_ask():
    app = Application.new("app-1")
    ask = make_ask("a", {"memory": 10})
    app.add_ask(ask)
    app.take_pending(ask)
    assert app.remove_ask("a") is ask
    assert app.pending == {}


def test_take_and_return_pending():
    app = Application.new("app-1")
    ask = make_ask("a", {"memory": 10}, max_allocations=2)
    app.add_ask(ask)

    app.take_pending(ask)
    assert (ask.pending, ask.allocated_count) == (1, 1)
    assert app.pending == {"memory": 10}
    assert app.has_pending()

    app.take_pending(ask)
    assert (ask.pending, ask.allocated_count) == (0, 2)
    assert app.pending == {}
    assert not app.has_pending(), "a fully placed ask leaves the pending order"
    assert app.asks == {"a": ask}, "but stays known to the application"

    app.return_pending(ask)
    assert (ask.pending, ask.allocated_count) == (1, 1)
    assert app.pending == {"memory": 10}
    assert list(app.iter_pending_asks()) == [ask], "returned to the pending order"

    app.return_pending(ask)
    assert (ask.pending, ask.allocated_count) == (2, 0)
    assert app.pending == {"memory": 20}
    assert list(app.iter_pending_asks()) == [ask]


def test_add_ask_with_nothing_pending_is_not_ordered():
    app = Application.new("app-1")
    ask = make_ask("a")
    ask.pending = 0
    app.add_ask(ask)
    assert app.asks == {"a": ask}
    assert app.pending == {}
    assert not app.has_pending()


@pytest.mark.parametrize(
    ("priorities", "taken", "expected"),
    [
        pytest.param([], [], MIN_PRIORITY, id="no-asks"),
        pytest.param([5], [], 5, id="single"),
        pytest.param([1, 10, 3], [], 10, id="max-of-asks"),
        pytest.param([-5, -1], [], -1, id="negative"),
        pytest.param([1, 10, 3], [1], 3, id="fully-placed-ask-ignored"),
        pytest.param([1, 10], [0, 1], MIN_PRIORITY, id="nothing-pending"),
    ],
)
def test_priority_is_max_of_pending_asks(priorities, taken, expected):
    app = Application.new("app-1")
    asks = [make_ask(f"ask-{i}", priority=p, create_seq=i) for i, p in enumerate(priorities)]
    for ask in asks:
        app.add_ask(ask)
    for index in taken:
        app.take_pending(asks[index])
    assert app.priority == expected


@pytest.mark.parametrize(
    ("asks", "expected"),
    [
        pytest.param([("a", 0, 2), ("b", 0, 1)], ["b", "a"], id="same-priority-oldest-first"),
        pytest.param([("a", 1, 1), ("b", 5, 2)], ["b", "a"], id="higher-priority-first"),
        pytest.param([("a", 5, 3), ("b", 5, 1), ("c", 9, 2)], ["c", "b", "a"], id="priority-then-age"),
        pytest.param([("a", -1, 1), ("b", 0, 2)], ["b", "a"], id="negative-priority-last"),
    ],
)
def test_request_order(asks, expected):
    app = Application.new("app-1")
    for key, priority, seq in asks:
        app.add_ask(make_ask(key, priority=priority, create_seq=seq))
    assert [ask.allocation_key for ask in app.iter_pending_asks()] == expected


def test_ask_sort_key_and_defaults():
    ask = Ask.of(
        allocation_key="a",
        application_id="app-1",
        resource={"vcore": 1, "memory": 10},
        priority=3,
        create_seq=4,
        max_allocations=-2,
    )
    assert ask.sort_key == (-3, 0.0, 4)  # priority, creation time, arrival
    assert ask.max_allocations == 1 and ask.pending == 1
    assert ask.tags == {}
    assert ask.failed_since is None
    assert ask.shape == (("memory", 10), ("vcore", 1))


# ---- allocations -------------------------------------------------------------------------------------


def test_allocations_add_and_remove_with_placeholder_aggregate():
    app = Application.new("app-1")
    app.add_allocation(make_alloc("u1", "a", {"memory": 10}))
    app.add_allocation(make_alloc("u2", "ph", {"memory": 5, "vcore": 1}, placeholder=True))
    app.add_allocation(make_alloc("u3", "a", {"memory": 10}))
    assert app.allocated == {"memory": 25, "vcore": 1}
    assert app.placeholder_allocated == {"memory": 5, "vcore": 1}
    assert not app.is_idle()

    assert app.remove_allocation("u2").uuid == "u2"
    assert app.allocated == {"memory": 20}
    assert app.placeholder_allocated == {}, "emptied aggregate has no zero entries"

    assert app.remove_allocation("missing") is None
    assert app.allocated == {"memory": 20}

    app.remove_allocation("u1")
    app.remove_allocation("u3")
    assert app.allocated == {}
    assert app.allocations == {}
    assert app.is_idle()


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        pytest.param("a", ["u1", "u3"], id="two"),
        pytest.param("b", ["u2"], id="one"),
        pytest.param("c", [], id="none"),
    ],
)
def test_allocations_for_key(key, expected):
    app = Application.new("app-1")
    app.add_allocation(make_alloc("u1", "a", {"memory": 1}))
    app.add_allocation(make_alloc("u2", "b", {"memory": 1}))
    app.add_allocation(make_alloc("u3", "a", {"memory": 1}))
    assert sorted(a.uuid for a in app.allocations_for_key(key)) == expected


@pytest.mark.parametrize(
    ("pending_asks", "allocations", "idle"),
    [
        pytest.param(0, 0, True, id="nothing"),
        pytest.param(1, 0, False, id="pending-ask"),
        pytest.param(0, 1, False, id="allocation"),
        pytest.param(1, 1, False, id="both"),
    ],
)
def test_is_idle(pending_asks, allocations, idle):
    app = Application.new("app-1")
    for index in range(pending_asks):
        app.add_ask(make_ask(f"ask-{index}"))
    for index in range(allocations):
        app.add_allocation(make_alloc(f"u{index}", "x", {"memory": 1}))
    assert app.is_idle() is idle


def test_placed_ask_with_allocation_is_not_idle_until_released():
    app = Application.new("app-1")
    ask = make_ask("a")
    app.add_ask(ask)
    app.take_pending(ask)
    app.add_allocation(make_alloc("u1", "a", ask.resource))
    assert not app.is_idle()
    app.remove_allocation("u1")
    assert app.is_idle(), "an ask with nothing pending does not keep the application alive"
    assert res.is_zero(app.pending)
