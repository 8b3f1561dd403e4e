"""Queues placement creates, end to end: the branch's shape, scheduling in it, what the RM is told."""

from __future__ import annotations

import pytest
from core_helpers import SMALL, add_apps, add_nodes, part, running

from korral import testing as t

PROVIDED_CREATE = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
    placementrules:
      - name: provided
        create: true
"""


@pytest.mark.parametrize("queue", ["root.team.job", "root.a.b.c.d"])
def test_an_application_in_a_new_branch_of_dynamic_queues_is_scheduled(queue: str) -> None:
    """YuniKorn creates the missing parents as parent queues, the last part a leaf, and schedules the
    application there; the partition's queues and the scheduler's agree."""
    with running(PROVIDED_CREATE) as (core, rm):
        add_nodes(core, rm, ["node-1"])
        add_apps(core, rm, {"app-1": queue})
        core.update_allocation(t.asks(rm.rm_id, "app-1", 2, SMALL))
        assert rm.wait_for_allocations(2), core.application(part(), "app-1")
        parts = queue.split(".")
        for depth in range(2, len(parts) + 1):
            path = ".".join(parts[:depth])
            info = core.queue(part(), path)
            assert info is not None, path
            assert info.is_leaf == (depth == len(parts)), path
            assert not info.is_managed
            assert info.allocated == {"memory": 20_000_000, "vcore": 2_000}, path
        app = core.application(part(), "app-1")
        assert app is not None and app.queue == queue and len(app.allocations) == 2


def test_a_second_leaf_under_a_dynamic_parent_is_scheduled() -> None:
    """A dynamic parent made for one application takes a sibling leaf for the next."""
    with running(PROVIDED_CREATE) as (core, rm):
        add_nodes(core, rm, ["node-1"])
        add_apps(core, rm, {"app-1": "root.team.one"})
        add_apps(core, rm, {"app-2": "root.team.two"})
        core.update_allocation(t.asks(rm.rm_id, "app-2", 1, SMALL))
        assert rm.wait_for_allocations(1)
        team = core.queue(part(), "root.team")
        assert team is not None and not team.is_leaf
        assert sorted(team.children) == ["root.team.one", "root.team.two"]
