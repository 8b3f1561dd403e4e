"""YUNIKORN-3115 in the model: an application whose pass finds ``application.unschedasks.backoff``
asks in a row that fit their headroom but no node is not scheduled again for the backoff delay. Table
by table on a fake clock, through the sequential reference scheduler."""

from __future__ import annotations

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
          - name: q
            properties:
%(properties)s
"""


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def build(properties: dict[str, str]) -> tuple[ReferenceScheduler, Clock]:
    clock = Clock()
    lines = (
        "\n".join(f"              {key}: {value!r}" for key, value in properties.items())
        or "              {}"
    )
    # a long reservation delay: nothing reserves, so every ask that fits no node counts
    scheduler = ReferenceScheduler(CONFIG % {"properties": lines}, clock=clock, reservation_delay=1e9)
    # 300 in the cluster (its size is no limit on a 150 ask) on nodes of 100
    scheduler.update_node(t.nodes("rm", ["n1", "n2", "n3"], {"memory": 100}))
    scheduler.update_application(t.applications("rm", {"app": "root.q", "other": "root.q"}))
    return scheduler, clock


def asks(app_id: str, sizes: list[int], prefix: str = "k") -> si.AllocationRequest:
    return si.AllocationRequest(
        rm_id="rm",
        asks=[
            si.AllocationAsk(
                allocation_key=f"{prefix}{index}",
                application_id=app_id,
                resource_ask={"memory": size},
                max_allocations=1,
                priority=100 - index,  # in this order
            )
            for index, size in enumerate(sizes)
        ],
    )


# (backoff properties, the app's asks in order (memory; each node has 100), backoff delay or None)
TABLE = [
    pytest.param({}, [150, 150, 150], None, id="no-backoff-configured"),
    pytest.param({"application.unschedasks.backoff": "2"}, [150, 150, 150], 30.0, id="two-then-a-third"),
    pytest.param({"application.unschedasks.backoff": "2"}, [150, 150], None, id="two-and-no-more-asks"),
    pytest.param({"application.unschedasks.backoff": "3"}, [150, 150, 150], None, id="threshold-not-reached"),
    pytest.param(
        {"application.unschedasks.backoff": "1", "application.unschedasks.backoff.delay": "5m"},
        [150, 150],
        300.0,
        id="custom-delay",
    ),
    pytest.param(
        {"application.unschedasks.backoff": "1", "application.unschedasks.backoff.delay": "-1s"},
        [150, 150],
        30.0,
        id="bad-delay-is-30s",
    ),
    pytest.param({"application.unschedasks.backoff": "x"}, [150, 150, 150], None, id="bad-count-is-off"),
    pytest.param({"application.unschedasks.backoff": "0"}, [150, 150, 150], None, id="zero-is-off"),
]


@pytest.mark.parametrize(("properties", "sizes", "delay"), TABLE)
def test_the_backoff_deadline_is_set_as_yunikorn_sets_it(properties, sizes, delay) -> None:
    scheduler, clock = build(properties)
    scheduler.update_allocation(asks("app", sizes))
    assert scheduler.schedule() == []
    app = scheduler.partition().applications["app"]
    assert app.backoff_deadline == (None if delay is None else clock.now + delay)


def test_a_backed_off_application_is_skipped_until_its_deadline_and_others_go_on() -> None:
    scheduler, clock = build(
        {"application.unschedasks.backoff": "1", "application.unschedasks.backoff.delay": "10s"}
    )
    scheduler.update_allocation(asks("app", [150, 150]))
    assert scheduler.schedule() == []
    started = clock.now
    # room appears for its asks' size: still nothing for it while it backs off
    scheduler.update_node(t.nodes("rm", ["big"], {"memory": 1000}))
    scheduler.update_allocation(asks("other", [50], prefix="o"))
    made = scheduler.schedule()
    assert [(a.application_id, a.allocation_key) for a in made] == [("other", "o0")]
    clock.now = started + 9.9
    assert scheduler.schedule() == []
    clock.now = started + 10.0
    assert sorted(a.allocation_key for a in scheduler.schedule()) == ["k0", "k1"]


def test_asks_over_the_headroom_do_not_count() -> None:
    text = CONFIG.replace(
        "            properties:", "            resources: {max: {memory: 150}}\n            properties:"
    )
    clock = Clock()
    scheduler = ReferenceScheduler(
        text % {"properties": "              application.unschedasks.backoff: '1'"},
        clock=clock,
        reservation_delay=1e9,
    )
    scheduler.update_node(t.nodes("rm", ["n1"], {"memory": 100}))
    scheduler.update_application(t.applications("rm", {"app": "root.q"}))
    scheduler.update_allocation(asks("app", [200, 200, 60]))  # two over the queue's max, then one that fits
    made = scheduler.schedule()
    assert [a.allocation_key for a in made] == ["k2"]
    assert scheduler.partition().applications["app"].backoff_deadline is None
