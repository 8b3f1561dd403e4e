"""SchedulingView: gang replacement in the view (placeholders swapped for real allocations)."""

from __future__ import annotations

import view_helpers
from view_helpers import allocated_of, ask, insert, owner_puts

from korral import si
from korral.model.allocation import Allocation
from korral.model.view import SchedulingView

# the shared fixtures: pytest finds a fixture by its name in the test module
make_view = view_helpers.make_view
view = view_helpers.view


# ---- gang replacement in the view ---------------------------------------------------------------------


def gang_view(view: SchedulingView) -> tuple[Allocation, Allocation]:
    """A gang in root.b with one placeholder on n1 and a real ask the view decided to put in it."""
    view.add_node("n1", {"vcore": 4000})
    insert(view, "g", "root.b", placeholder_ask={"vcore": 1000})
    owner_puts(view, [ask("g", "ph", placeholder=True, task_group_name="tg")])
    placeholder = view.schedule_one()
    owner_puts(view, [ask("g", "real", task_group_name="tg")])
    real = view.schedule_one()
    assert placeholder is not None and real is not None and real.replaces == placeholder.uuid
    view.take_effects()
    return placeholder, real


def test_a_refused_replacement_frees_the_placeholder_and_the_repeat(view) -> None:
    placeholder, real = gang_view(view)
    app = view.applications["g"]
    assert app.pending == {} and placeholder.uuid in app.releasing
    view.undo_replacement(real)
    assert app.pending == {"vcore": 1000} and app.releasing == {}
    again = view.schedule_one()
    assert again is not None and again.replaces == placeholder.uuid  # decided again
    view.undo_replacement(real)  # a stale refusal changes nothing
    assert app.pending == {}


def test_a_timeout_overtaking_a_replacement_keeps_the_placeholder_released(view) -> None:
    placeholder, real = gang_view(view)
    view.mark_releasing("g", placeholder.uuid, int(si.TerminationType.TIMEOUT))
    view.undo_replacement(real)  # the owner refused: its placeholder had timed out
    app = view.applications["g"]
    assert app.releasing == {placeholder.uuid: si.TerminationType.TIMEOUT}
    assert app.pending == {"vcore": 1000}
    following = view.schedule_one()
    assert following is not None and not following.replaces  # no placeholder to replace any more


def test_a_replacement_whose_node_leaves_waits_for_the_owner(view) -> None:
    placeholder, _ = gang_view(view)
    app = view.applications["g"]
    view.discard_node("n1")
    assert app.pending == {}  # the owner has not given the repeat back yet
    view.forget_allocation(placeholder)  # the owner released the placeholder with its node
    assert app.pending == {"vcore": 1000}
    view.forget_allocation(placeholder)  # twice: nothing more
    assert app.pending == {"vcore": 1000}


def test_a_swap_for_a_placeholder_that_left_with_its_node_says_the_real_one_must_go(view) -> None:
    """The RM confirmed the placeholder's release to its owner before the owner heard its node left:
    the owner swaps the real allocation in, on a node that is gone. The view holds neither, and says
    so: the scheduler has the owner release the real allocation as the removal would have."""
    placeholder, real = gang_view(view)
    view.discard_node("n1")
    assert view.swap("g", placeholder.uuid, real) is True
    app = view.applications["g"]
    assert real.uuid not in app.allocations and app.pending == {}, "nothing booked, no repeat owed"
    assert allocated_of(view, "root.b") == [{}]


def test_a_confirmed_swap_moves_usage_by_the_difference(view) -> None:
    view.add_node("n1", {"vcore": 4000})
    insert(view, "g", "root.b", placeholder_ask={"vcore": 2000})
    owner_puts(view, [ask("g", "ph", {"vcore": 2000}, placeholder=True, task_group_name="tg")])
    placeholder = view.schedule_one()
    owner_puts(view, [ask("g", "real", {"vcore": 500}, task_group_name="tg")])
    real = view.schedule_one()
    assert placeholder is not None and real is not None
    assert view.swap("g", placeholder.uuid, real) is False
    assert view.swap("g", placeholder.uuid, real) is False  # idempotent
    assert allocated_of(view, "root.b", "root") == [{"vcore": 500}, {"vcore": 500}]
    assert view.nodes["n1"].available == {"vcore": 3500}
    assert view.take_effects().swapped_in == []  # the owner reports it, not the view
