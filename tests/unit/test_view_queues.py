"""The scheduler's view builds the queues the partition creates exactly as the partition made them."""

from __future__ import annotations

import view_helpers

# the shared fixture: pytest finds a fixture by its name in the test module
make_view = view_helpers.make_view


def test_announced_parents_and_leaf_take_the_partitions_kinds(make_view):
    view = make_view()
    view.queue_created("root.team", leaf=False)
    view.queue_created("root.team.job", leaf=True)
    assert not view.queues["root.team"].is_leaf and view.queues["root.team.job"].is_leaf
    assert not view.queues["root.team"].is_managed


def test_a_lingering_empty_queue_gives_way_to_the_partitions_new_one(make_view):
    """The partition removed the dynamic leaf root.x while the view still held work in it; it then made
    root.x a parent for root.x.y. The view's emptied leaf is replaced, not left to refuse the child."""
    view = make_view()
    view.queue_created("root.x", leaf=True)
    view.queue_created("root.x", leaf=False)
    view.queue_created("root.x.y", leaf=True)
    assert not view.queues["root.x"].is_leaf and view.queues["root.x.y"].is_leaf
    view.queue_created("root.x.y", leaf=True)  # announced twice: nothing changes
    assert list(view.queues["root.x"].children) == ["y"]
