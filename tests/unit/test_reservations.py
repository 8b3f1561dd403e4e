"""YuniKorn 1.8's reservation rules in the model (korral.model.reservations), table by table on a fake
clock through the sequential reference scheduler: the wait timeout (YUNIKORN-3219), several
required-node reservations per node (YUNIKORN-2976), and a stale reservation giving way to a
preemptor (YUNIKORN-3092)."""

from __future__ import annotations

import pytest

from korral import si
from korral import testing as t
from korral.config import load_config
from korral.harness.reference import ReferenceScheduler
from korral.model.reservations import RESERVATION_WAIT_TIMEOUT

T = si.TerminationType
REQUIRED_NODE = "yunikorn.apache.org/requiredNode"
DELAY = 2.0  # the reservation delay

CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: high
            resources:
              guaranteed: {memory: 500}
            properties:
              preemption.delay: 10s
          - name: low
            resources:
              guaranteed: {memory: 200}
              max: {memory: %(low_max)d}
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def build(low_max: int = 5000) -> tuple[ReferenceScheduler, Clock]:
    clock = Clock()
    scheduler = ReferenceScheduler(CONFIG % {"low_max": low_max}, clock=clock, reservation_delay=DELAY)
    scheduler.update_node(t.nodes("rm", ["n1"], {"memory": 1000}))
    # room in the cluster (its size is no limit on the asks) but on nodes too small for them
    scheduler.update_node(t.nodes("rm", ["n2", "n3"], {"memory": 200}))
    scheduler.update_application(t.applications("rm", {"low-app": "root.low", "hi": "root.high"}))
    return scheduler, clock


def ask(app_id: str, key: str, memory: int, *, priority: int = 0, node: str = "", **policy: bool):
    return si.AllocationRequest(
        rm_id="rm",
        asks=[
            si.AllocationAsk(
                allocation_key=key,
                application_id=app_id,
                resource_ask={"memory": memory},
                max_allocations=1,
                priority=priority,
                tags={REQUIRED_NODE: node} if node else {},
                preemption_policy=si.PreemptionPolicy(**policy) if policy else None,
            )
        ],
    )


def fill(scheduler: ReferenceScheduler) -> None:
    """n1 full with low-app's two 500s (n2 and n3 cannot take a 500)."""
    for index in range(2):
        scheduler.update_allocation(ask("low-app", f"low-{index}", 500))
    assert [a.node_id for a in scheduler.schedule()] == ["n1", "n1"]


def reserve_waiter(scheduler: ReferenceScheduler, clock: Clock, **fields) -> None:
    """A 300 ask of low-app that fits no node: reserved once the reservation delay has passed."""
    scheduler.update_allocation(ask("low-app", "waiter", 300, **fields))
    scheduler.schedule()
    clock.now += DELAY
    scheduler.schedule()
    assert scheduler.partition().reservations == {("low-app", "waiter"): "n1"}


def lower_low_max(scheduler: ReferenceScheduler) -> None:
    """root.low's max to 1100: below its usage (1000) plus the waiter (300)."""
    scheduler.partition().apply_config(load_config(CONFIG % {"low_max": 1100}).partitions[0])


# ---- YUNIKORN-3219: the wait timeout ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("headroom_short", "waited", "cancelled"),
    [
        pytest.param(True, RESERVATION_WAIT_TIMEOUT - 1, False, id="short-before-the-timeout"),
        pytest.param(True, RESERVATION_WAIT_TIMEOUT, False, id="short-at-the-timeout"),
        pytest.param(True, RESERVATION_WAIT_TIMEOUT + 1, True, id="short-past-the-timeout"),
        pytest.param(False, 3 * RESERVATION_WAIT_TIMEOUT, False, id="headroom-fine-waits-for-its-node"),
    ],
)
def test_a_reservation_whose_headroom_stays_short_is_cancelled_after_the_wait_time(
    headroom_short: bool, waited: float, cancelled: bool
) -> None:
    scheduler, clock = build()
    fill(scheduler)
    reserve_waiter(scheduler, clock)
    if headroom_short:  # the queue's max lowered below its usage plus the reserved ask
        lower_low_max(scheduler)
    partition = scheduler.partition()
    clock.now += waited
    scheduler.schedule()
    assert (("low-app", "waiter") not in partition.reservations) is cancelled
    assert ("waiter" in partition.applications["low-app"].reservations) is not cancelled
    if cancelled:
        # back in the walk, where a short headroom does not reserve again; it is still pending
        clock.now += 10 * DELAY
        scheduler.schedule()
        assert partition.reservations == {}
        assert partition.applications["low-app"].asks["waiter"].pending == 1
        assert any("reservation wait time" in e.message for e in partition.take_effects().request_events)


def test_the_timeout_runs_from_the_reservation_not_from_the_ask() -> None:
    scheduler, clock = build()
    fill(scheduler)
    scheduler.update_allocation(ask("low-app", "waiter", 300))
    scheduler.schedule()
    clock.now += RESERVATION_WAIT_TIMEOUT  # long unschedulable before it reserves
    scheduler.schedule()
    partition = scheduler.partition()
    assert partition.reservations == {("low-app", "waiter"): "n1"}
    lower_low_max(scheduler)
    clock.now += 60
    scheduler.schedule()
    assert partition.reservations == {("low-app", "waiter"): "n1"}


# ---- YUNIKORN-2976: several required-node reservations on one node ------------------------------------


def test_several_required_node_asks_reserve_one_node_and_each_is_placed_in_turn() -> None:
    scheduler, _clock = build()
    fill(scheduler)
    for key in ("ds-a", "ds-b", "ds-c"):
        scheduler.update_allocation(ask("hi", key, 250, node="n1"))
    scheduler.schedule()
    partition = scheduler.partition()
    node = partition.nodes["n1"]
    assert [key for _, key in node.reservations] == ["ds-a", "ds-b", "ds-c"]
    assert set(partition.reservations) == {("hi", "ds-a"), ("hi", "ds-b"), ("hi", "ds-c")}
    # room for two: low-1 (500) goes, two of the 250s are placed, the third keeps its reservation
    scheduler.update_allocation(t.release("rm", "low-app", allocation_key="low-1"))
    made = scheduler.schedule()
    assert sorted(a.allocation_key for a in made) == ["ds-a", "ds-b"]
    assert node.reservations == (("hi", "ds-c"),)


def test_a_required_node_ask_cancels_a_normal_reservation_and_a_normal_one_cannot_join() -> None:
    scheduler, clock = build()
    fill(scheduler)
    reserve_waiter(scheduler, clock)
    scheduler.update_allocation(ask("hi", "ds", 100, node="n1"))
    scheduler.schedule()
    partition = scheduler.partition()
    assert partition.nodes["n1"].reservations == (("hi", "ds"),)
    assert "waiter" not in partition.applications["low-app"].reservations
    # the normal ask stays unschedulable: it may not reserve a node a daemon-set ask holds
    clock.now += 10 * DELAY
    scheduler.schedule()
    assert partition.nodes["n1"].reservations == (("hi", "ds"),)


# ---- YUNIKORN-3092: a stale reservation gives way to a preemptor --------------------------------------


@pytest.mark.parametrize(
    ("waiter", "age", "preempts"),
    [
        pytest.param({}, RESERVATION_WAIT_TIMEOUT + DELAY + 1, True, id="stale-lower-priority"),
        pytest.param({}, RESERVATION_WAIT_TIMEOUT - 1, False, id="young"),
        pytest.param({"priority": 10}, RESERVATION_WAIT_TIMEOUT + DELAY + 1, False, id="same-priority"),
        pytest.param({"node": "n1"}, RESERVATION_WAIT_TIMEOUT + DELAY + 1, False, id="required-node"),
    ],
)
def test_a_preemptor_cancels_a_stale_lower_priority_reservation_on_the_node(
    waiter: dict, age: float, preempts: bool
) -> None:
    scheduler, clock = build()
    fill(scheduler)
    created = clock.now
    if "node" in waiter:
        scheduler.update_allocation(ask("low-app", "waiter", 300, **waiter))
        scheduler.schedule()
    else:
        reserve_waiter(scheduler, clock, **waiter)
    partition = scheduler.partition()
    assert ("low-app", "waiter") in partition.reservations
    clock.now = created + age - 11  # the preemptor's delay (10s) ends as the waiter reaches its age
    scheduler.update_allocation(ask("hi", "urgent", 300, priority=10, allow_preempt_other=True))
    scheduler.schedule()
    clock.now = created + age
    scheduler.schedule()
    victims = [
        r.allocation_key
        for r in scheduler.take_released().released
        if r.termination_type == T.PREEMPTED_BY_SCHEDULER
    ]
    assert (("low-app", "waiter") in partition.reservations) is not preempts
    assert (partition.reservations.get(("hi", "urgent")) == "n1") is preempts
    if preempts:
        assert victims == ["low-1"]
    elif "node" not in waiter:  # (a required-node waiter preempts on its node itself)
        assert victims == []
