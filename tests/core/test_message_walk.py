"""The message walk of one ask (issue 23): every delivery from the RM's call to the last report of its
allocation, recorded by the simulated runtime, hop by hop as docs/architecture.md ("One ask, hop by
hop") names them. A change to the protocol changes this list and that section together.

``pytest -s tests/core/test_message_walk.py`` prints the walk."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

import korral
from korral import testing as t

CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
"""

# (receiver, message) -> deliveries, for one ask of one application on an idle one-node partition
WALK = {
    ("rmproxy", "Route"): 1,
    ("partition", "RouteAllocationRequest"): 1,
    ("application", "AddAsks"): 1,
    ("application", "FlushOut"): 2,
    ("scheduler", "ViewOps"): 1,
    ("scheduler", "RunCycle"): 1,
    ("application", "Placed"): 1,
    ("rm callback", "update_application"): 2,
    ("rm callback", "update_allocation"): 1,
    ("rm callback", "send_event"): 2,
}


def hop(line: str) -> tuple[str, str]:
    """A full-trace line (step, time, receiver <- message) as (receiver kind, message or callback)."""
    receiver, message = line.split(" ", 2)[2].split(" <- ", 1)
    name = message.split("(", 1)[0]
    if receiver.endswith("]callbacks"):
        method = re.search(r"method='(\w+)'", message)
        return "rm callback", method.group(1) if method else name
    if receiver == "rmproxy":
        return "rmproxy", name
    parts = receiver.split("/")
    if len(parts) == 1:
        return "partition", name
    if parts[1] in ("app", "node"):
        return {"app": "application", "node": "node"}[parts[1]], name
    if parts[1] == "scheduler":
        return "scheduler", name
    return f"queue {parts[1]}", name


def ask_walk(
    asks: int = 1, after: Callable[[korral.Core, t.RecordingRM], None] | None = None
) -> list[tuple[str, str]]:
    """The walk of ``asks`` asks of one application; ``after`` looks at the core once they are
    allocated, before it stops."""
    with korral.start(runtime="simulated", seed=1) as core:
        rm = t.RecordingRM("rm")
        core.register_resource_manager(t.register("rm", CONFIG), rm)
        core.update_node(t.nodes("rm", ["n1"], {"memory": 8000, "vcore": 8000}))
        core.update_application(t.applications("rm", {"app1": "root.a"}))
        core.advance(1.0)
        core.record_full_trace()
        core.update_allocation(t.asks("rm", "app1", asks, {"memory": 100, "vcore": 100}))
        core.advance(0.05)  # less than a scheduling interval: no periodic tick in the walk
        assert len(rm.live) == asks, "the asks were not allocated"
        walk = [hop(line) for line in core.trace(full=True)]  # before ``after`` asks anything
        if after is not None:
            after(core, rm)
        return walk


def test_one_ask_takes_the_documented_hops() -> None:
    walk = ask_walk()
    for step, (receiver, message) in enumerate(walk, 1):
        print(f"{step:2d}  {receiver:<14} <- {message}")
    assert Counter(walk) == Counter(WALK), Counter(walk) - Counter(WALK) or Counter(WALK) - Counter(walk)
    assert len(walk) == sum(WALK.values()) == 13


def test_the_queues_show_the_allocation_without_a_message_to_a_queue_actor() -> None:
    # queue usage has one owner, the scheduler's view, which publishes it per batch of cycles: no
    # delivery to a queue actor in the walk, and still the queues show the allocation, nothing pending
    usage: dict[str, tuple[dict[str, int], dict[str, int]]] = {}

    def read_usage(core: korral.Core, rm: t.RecordingRM) -> None:
        for partition in core.partition_names():
            usage.update((q.path, (q.allocated, q.pending)) for q in core.queues(partition))

    walk = ask_walk(after=read_usage)
    assert [hop for hop in walk if hop[0].startswith("queue")] == []
    held = {"memory": 100, "vcore": 100}
    assert usage["root.a"] == (held, {})
    assert usage["root"] == (held, {})


def test_no_message_goes_to_a_node_and_the_node_shows_the_allocation() -> None:
    # the scheduler's view is the one writer of a node's free room and the one record of what runs
    # there: nothing goes to the node actor for an allocation, and still the node (its snapshot reads
    # the scheduler's node board) shows it
    def node_shows_them(core: korral.Core, rm: t.RecordingRM) -> None:
        node = core.node("[rm]default", "n1")
        assert node is not None
        assert sorted(a.allocation_key for a in node.allocations) == sorted(
            a.allocation_key for a in rm.live.values()
        )
        assert node.allocated == {"memory": 200, "vcore": 200}
        assert node.available == {"memory": 7800, "vcore": 7800}

    walk = ask_walk(2, after=node_shows_them)
    assert [h for h in walk if h[0] == "node"] == []
