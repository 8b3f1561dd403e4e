"""Test-only fault injection: deliberately broken behaviour that ``korral stress`` must catch.

Nothing is enabled unless a test or ``korral stress --inject-fault`` turns it on. A fault is a broken
subclass of a product actor; the harness hands it to the core it starts (``start_options``: an
``ActorSetup``), and the partition starts it in place of the real one. The product itself never looks
at faults.
"""

from __future__ import annotations

from typing import Any

from korral.actors.messages import ViewOps
from korral.actors.scheduler.actor import SchedulerActor
from korral.actors.setup import ActorSetup
from korral.harness.faults_planted import CLASSES, PLANTED
from korral.model.view_ops import Forget

KNOWN = {
    # the node keeps an allocation its application released: an orphan on the node
    "node-keeps-released": (
        "the scheduler's view keeps on its node every released allocation whose allocation key ends in 0"
    ),
    # the planted concurrency bugs of korral.harness.faults_planted (tests/core/test_planted_bugs.py)
    **PLANTED,
}

active: set[str] = set()


def enable(name: str) -> None:
    if name not in KNOWN:
        raise ValueError(f"unknown fault {name!r}; known: {', '.join(sorted(KNOWN))}")
    active.add(name)


def disable_all() -> None:
    active.clear()


def start_options() -> dict[str, Any]:
    """Keyword arguments for ``korral.start`` that put the enabled faults in the core ({} if none):
    ``setup``, the one typed record through which broken actor classes reach the partitions."""
    actors: dict[str, Any] = {}
    if "node-keeps-released" in active:
        actors["scheduler_actor"] = NodeKeepsReleased
    for name in sorted(active & CLASSES.keys()):
        key, actor_class = CLASSES[name]
        if key in actors:
            raise ValueError(f"faults {name!r} and another one both replace the {key}: enable one")
        actors[key] = actor_class
    return {"setup": ActorSetup(**actors)} if actors else {}


class NodeKeepsReleased(SchedulerActor):
    """node-keeps-released: an orphan allocation stays on the node."""

    def on_ViewOps(self, message: ViewOps) -> None:
        # by allocation key, which the RM chooses: a replay on a fresh core (new uuids) keeps the same set
        kept = [
            op.allocation
            for op in message.ops
            if isinstance(op, Forget) and op.allocation.allocation_key.endswith("0")
        ]
        super().on_ViewOps(message)
        for allocation in kept:
            node = self.view.nodes.get(allocation.node_id)
            if node is not None and allocation.uuid not in node.allocations:
                node.add_allocation(allocation)  # the bug: its room and its record stay taken
