"""Removed actors are freed at once, by reference counting alone.

With ``tune_gc`` (as ``korral serve`` runs a core) full collections are rare, so whatever a removed
application or node left in a reference cycle piled up in the oldest generation: a soak grew from 76
to 1,099 MB in 300 s.
Each test runs its churn with the cyclic collector off, so an actor that is still in memory once it
has stopped is either held by something or part of a cycle: neither may happen.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from core_helpers import NODE, SMALL, TWO_LEAVES, add_nodes, eventually, part, running

import korral
from korral import si
from korral import testing as t


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def live(core: korral.Core, class_name: str) -> int:
    """This core's actors of the class that have not stopped."""
    return sum(1 for actor in actors(core, class_name) if not actor.actor_stopped.is_set())


def in_memory(core: korral.Core, class_name: str) -> int:
    """This core's actors of the class still in memory, stopped or not (cyclic garbage included: no
    collection runs while the collector is off)."""
    return len(actors(core, class_name))


def actors(core: korral.Core, class_name: str) -> list[Any]:
    # by the core's tracker: other tests' cores may have left actors of their own
    return [
        obj
        for obj in gc.get_objects()
        if type(obj).__name__ == class_name and getattr(obj, "tracker", None) is core.tracker
    ]


@pytest.mark.usefixtures("collector_off")
def test_removed_applications_are_freed_without_the_cyclic_collector() -> None:
    with running(TWO_LEAVES) as (core, rm):
        add_nodes(core, rm, ["n1", "n2"], NODE)
        for round_ in range(200):
            app_id = f"app-{round_}"
            core.update_application(t.applications("rm", {app_id: "root.a"}))
            core.update_allocation(t.asks("rm", app_id, 2, SMALL))
            if round_ % 2:  # half of them allocated and released first, half removed with their asks
                assert rm.wait_for(lambda r, app_id=app_id: app_id in r.live_by_app(), 10.0)
                core.update_allocation(t.release("rm", app_id))
            core.update_application(t.remove_applications("rm", [app_id]))
        core.wait_until_idle()
        # removed applications retire themselves once nothing can reach them (the housekeeping tick)
        eventually(lambda: live(core, "ApplicationActor") == 0, timeout=30.0)
        assert in_memory(core, "ApplicationActor") == 0


@pytest.mark.usefixtures("collector_off")
def test_removed_nodes_are_freed_without_the_cyclic_collector() -> None:
    with running(TWO_LEAVES) as (core, rm):
        nodes = [f"n{i}" for i in range(100)]
        add_nodes(core, rm, nodes, NODE)
        eventually(lambda: live(core, "NodeActor") == 100, timeout=30.0)  # started after registration
        for node_id in nodes:
            core.update_node(t.node_action("rm", node_id, si.NodeAction.DECOMISSION))
        core.wait_until_idle()
        eventually(lambda: live(core, "NodeActor") == 0, timeout=30.0)
        assert part() in core.partition_names()
        assert in_memory(core, "NodeActor") == 0
