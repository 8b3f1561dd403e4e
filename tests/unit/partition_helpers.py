"""PartitionModel scenario builders, shared by the test_partition_*.py scenarios.

The scenarios are what a user of the scheduler notices, after YuniKorn's documented behaviour, modelled
on yunikorn-core's scheduler smoke tests (basic scheduling, fairness, node sorting, reservations,
recovery, placement). Every partition is checked against the model's invariants when its test ends (see
conftest.py). Config quantities: ``vcore: 1`` in YAML is 1000 millicores; ask, node and
recovered-allocation quantities are raw SI integers.
"""

from __future__ import annotations

import textwrap
from collections import Counter

from korral.model.allocation import Allocation
from korral.model.app.application import ApplicationState
from korral.model.partition.composed import PartitionModel

S = ApplicationState


def conf(children: str = "", *, partition: str = "", root: str = 'submitacl: "*"') -> str:
    """A queues.yaml with one partition; ``children`` are root's child queues as YAML list items."""
    text = "partitions:\n  - name: default\n"
    if partition:
        text += textwrap.indent(textwrap.dedent(partition).strip("\n"), "    ") + "\n"
    text += "    queues:\n      - name: root\n"
    if root:
        text += textwrap.indent(textwrap.dedent(root).strip("\n"), "        ") + "\n"
    if children:
        text += (
            "        queues:\n" + textwrap.indent(textwrap.dedent(children).strip("\n"), "          ") + "\n"
        )
    return text


def by_app(made: list[Allocation]) -> Counter[str]:
    return Counter(a.application_id for a in made)


def by_node(made: list[Allocation]) -> Counter[str]:
    return Counter(a.node_id for a in made)


def recovered(app: str, key: str, node: str, resource: dict[str, int], uuid: str = "") -> Allocation:
    return Allocation(uuid=uuid, allocation_key=key, application_id=app, node_id=node, resource=resource)


# ---- reservations -----------------------------------------------------------------------------------------


def reservation_setup(make_partition, *, delay: float = 0.0) -> PartitionModel:
    """YuniKorn's TestReservationForTwoQueues: app-1 fills two 50/50 nodes to 40 each; app-2's two 20s
    cannot fit anywhere; app-3's 5s would fit in the 10 left on each node."""
    p = make_partition(
        conf(
            """
            - name: leaf-1
              resources: {guaranteed: {memory: 100, vcore: 100}}
            - name: leaf-2
              resources: {guaranteed: {memory: 100, vcore: 100}}
            """
        ),
        reservation_delay=delay,
    )
    p.add_node("node-1", {"memory": 50, "vcore": 50})
    p.add_node("node-2", {"memory": 50, "vcore": 50})
    p.add_application("app-1", queue_name="root.leaf-1", user="u")
    p.add_ask("app-1", "alloc-1", {"memory": 20, "vcore": 20}, max_allocations=4)
    assert len(p.schedule()) == 4
    p.add_application("app-2", queue_name="root.leaf-2", user="u")
    p.add_application("app-3", queue_name="root.leaf-2", user="u")
    p.add_ask("app-2", "large-1", {"memory": 20, "vcore": 20})
    p.add_ask("app-2", "large-2", {"memory": 20, "vcore": 20})
    p.add_ask("app-3", "small", {"memory": 5, "vcore": 5}, max_allocations=2)
    return p
