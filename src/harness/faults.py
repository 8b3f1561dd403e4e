"""Test-only fault injection: deliberately broken behaviour that ``korral stress`` must catch.

Nothing is enabled unless a test or ``korral stress --inject-fault`` turns it on. A fault is a broken
subclass of a product actor; the harness hands it to the core it starts (``start_options``: an
``ActorSetup``), and the partition starts it in place of the real one. The product itself never looks
at faults.
"""

from __future__ import annotations

from typing import Any

from korral.actors.application import ApplicationActor
from korral.actors.messages import BookOnNode, FreeOnNode, Placed
from korral.actors.node import NodeActor
from korral.actors.setup import ActorSetup
from korral.harness.faults_planted import CLASSES, PLANTED

KNOWN = {
    # the node keeps an allocation its application released: an orphan on the node
    "node-keeps-released": "a node ignores the release of every allocation whose allocation key ends in 0",
    # one rare message order only: a Placed that reaches an application after its removal did. The
    # allocation stays booked on the node, owned by nobody (korral stress --simulated must find it)
    "removed-app-keeps-placed": (
        "a removed application has its node book a placement instead of handing it back"
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
        actors["node_actor"] = NodeKeepsReleased
    if "removed-app-keeps-placed" in active:
        actors["application_actor"] = RemovedAppKeepsPlaced
    for name in sorted(active & CLASSES.keys()):
        key, actor_class = CLASSES[name]
        if key in actors:
            raise ValueError(f"faults {name!r} and another one both replace the {key}: enable one")
        actors[key] = actor_class
    return {"setup": ActorSetup(**actors)} if actors else {}


class NodeKeepsReleased(NodeActor):
    """node-keeps-released: an orphan allocation stays on the node."""

    def on_FreeOnNode(self, message: FreeOnNode) -> None:
        # by allocation key, which the RM chooses: a replay on a fresh core (new uuids) keeps the same set
        kept = {uuid for uuid, held in self.node.allocations.items() if held.allocation_key.endswith("0")}
        super().on_FreeOnNode(FreeOnNode(uuids=tuple(u for u in message.uuids if u not in kept)))


class RemovedAppKeepsPlaced(ApplicationActor):
    """removed-app-keeps-placed: a placement a removed application gets is booked on its node."""

    def on_Placed(self, message: Placed) -> None:
        if not self.owner.removed:
            super().on_Placed(message)
            return
        for allocation, node in message.placements:  # the bug: kept, on a node, by nobody
            self.tell(node, BookOnNode(allocations=(allocation,), app=self.handle))
