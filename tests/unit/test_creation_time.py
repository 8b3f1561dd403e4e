"""YUNIKORN-2772: the ``creationTime`` tag keeps re-sent work in its place after a restart (YuniKorn's
TestAppSchedulingOrderFIFO, as a table): fifo orders applications by the earliest creation time of
their asks and recovered allocations, an application's asks of one priority go oldest first, and a
tag that is not an integer is ignored. On a fake clock, through the sequential reference."""

from __future__ import annotations

import time

import pytest

from korral import si
from korral import testing as t
from korral.harness.reference import ReferenceScheduler

CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: default
            properties: {application.sort.policy: fifo}
"""
NOW = int(time.time())


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


def ask(app_id: str, key: str, memory: int, created: str | None) -> si.AllocationAsk:
    return si.AllocationAsk(
        allocation_key=key,
        application_id=app_id,
        resource_ask={"memory": memory},
        max_allocations=1,
        tags={si.CREATION_TIME: created} if created is not None else {},
    )


def order(asks: list[si.AllocationAsk], *, recovered_app1: str | None = None) -> list[str]:
    """The order in which the asks are allocated, one at a time (app1 is added before app2, unless
    app1 has a recovered allocation: then app2 comes first)."""
    scheduler = ReferenceScheduler(CONFIG, clock=Clock(), reservation_delay=1e9)
    names = ["app2", "app1"] if recovered_app1 is not None else ["app1", "app2"]
    for name in names:
        scheduler.update_application(t.applications("rm", {name: "root.default"}))
    existing = []
    if recovered_app1 is not None:
        existing = [
            si.Allocation(
                allocation_key="running",
                application_id="app1",
                node_id="n0",
                partition_name="default",
                resource_per_alloc={"memory": 1},
                allocation_tags={si.CREATION_TIME: recovered_app1},
            )
        ]
    scheduler.update_node(t.nodes("rm", ["n0"], {"memory": 1}, existing=existing))
    scheduler.update_allocation(si.AllocationRequest(rm_id="rm", asks=asks))
    made: list[str] = []
    scheduler.update_node(t.nodes("rm", ["n1"], {"memory": 10 * len(asks)}))
    while True:
        step = scheduler.partition().schedule(limit=1)
        if not step:
            return made
        made.append(step[0].allocation_key)


OLD, OLDER, OLDEST = str(NOW - 100), str(NOW - 200), str(NOW - 300)

TABLE = [
    pytest.param(
        [ask("app1", "a1", 1, None), ask("app2", "b1", 1, None)],
        None,
        ["a1", "b1"],
        id="no-tags-arrival-order",
    ),
    pytest.param(
        [ask("app1", "a1", 1, OLD), ask("app2", "b1", 2, OLDER), ask("app2", "b2", 2, OLDEST)],
        None,
        ["b2", "b1", "a1"],
        id="older-app-first-its-oldest-ask-first",
    ),
    pytest.param(
        [ask("app1", "a1", 1, None), ask("app2", "b1", 1, OLD)],
        None,
        ["b1", "a1"],
        id="a-tagged-ask-is-older",
    ),
    pytest.param(
        [ask("app1", "a1", 1, "soon"), ask("app2", "b1", 1, "x")], None, ["a1", "b1"], id="bad-tags-ignored"
    ),
    pytest.param(
        [ask("app1", "a1", 1, None), ask("app2", "b1", 1, OLDER)],
        OLDEST,
        ["a1", "b1"],
        id="a-recovered-allocation-puts-the-later-app-first",
    ),
]


@pytest.mark.parametrize(("asks", "recovered", "expected"), TABLE)
def test_creation_time_orders_as_yunikorn(asks, recovered, expected) -> None:
    assert order(asks, recovered_app1=recovered) == expected


def test_a_tagged_ask_keeps_its_age_for_the_preemption_delay() -> None:
    clock = Clock()
    scheduler = ReferenceScheduler(CONFIG, clock=clock)
    scheduler.update_application(t.applications("rm", {"app1": "root.default"}))
    tagged = str(int(time.time()) - 40)  # now, not at import: the age is measured from the wall clock
    scheduler.update_allocation(si.AllocationRequest(rm_id="rm", asks=[ask("app1", "a1", 1, tagged)]))
    created = scheduler.partition().applications["app1"].asks["a1"].create_time
    assert clock.now - 42 < created < clock.now - 38
