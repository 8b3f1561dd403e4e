"""Preemption and required-node asks in the model's walk (korral.model.preempting), driven by the
sequential reference scheduler on a fake clock: plain code, no threads."""

from __future__ import annotations

import pytest

from korral import si
from korral import testing as t
from korral.config.quantity import parse_go_duration
from korral.harness.reference import ReferenceScheduler
from korral.model.queue import DEFAULT_PREEMPTION_DELAY

T = si.TerminationType
NODE = {"memory": 1000}
SMALL = {"memory": 100}
REQUIRED_NODE = "yunikorn.apache.org/requiredNode"

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
              priority.offset: "%(offset)s"
          - name: low
            resources:
              guaranteed: {memory: 200}
            properties:
              preemption.policy: %(low_policy)s
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def build(offset: int = 0, low_policy: str = "default", config: str = "") -> tuple[ReferenceScheduler, Clock]:
    clock = Clock()
    text = config or CONFIG % {"offset": offset, "low_policy": low_policy}
    scheduler = ReferenceScheduler(text, clock=clock, reservation_delay=3600.0)
    scheduler.update_node(t.nodes("rm", ["n1"], NODE))
    scheduler.update_application(t.applications("rm", {"low-app": "root.low", "hi": "root.high"}))
    return scheduler, clock


def ask(
    app_id: str, key: str, resource: dict[str, int], *, priority: int = 0, **policy: bool
) -> si.AllocationRequest:
    tags = {REQUIRED_NODE: policy.pop("node")} if "node" in policy else {}  # type: ignore[dict-item]
    preemption = si.PreemptionPolicy(**policy) if policy else None
    return si.AllocationRequest(
        rm_id="rm",
        asks=[
            si.AllocationAsk(
                max_allocations=1,
                allocation_key=key,
                application_id=app_id,
                resource_ask=dict(resource),
                priority=priority,
                preemption_policy=preemption,
                tags=tags,
            )
        ],
    )


def fill_low(scheduler: ReferenceScheduler, priority: int = 0) -> None:
    for index in range(10):
        scheduler.update_allocation(ask("low-app", f"low-{index}", SMALL, priority=priority))
    assert len(scheduler.schedule()) == 10


def preempted(response: si.AllocationResponse) -> list[str]:
    return [r.allocation_key for r in response.released if r.termination_type == T.PREEMPTED_BY_SCHEDULER]


def confirm(scheduler: ReferenceScheduler, releases: list[si.AllocationRelease]) -> None:
    scheduler.update_allocation(
        si.AllocationRequest(
            rm_id="rm", releases=si.AllocationReleasesRequest(allocations_to_release=releases)
        )
    )


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("1m30s", 90.0),
        ("250ms", 0.25),
        ("1h", 3600.0),
        ("0", 0.0),
        ("1.5s", 1.5),
        ("10", None),
    ],
)
def test_go_durations(text: str, seconds: float | None) -> None:
    assert parse_go_duration(text) == seconds


def test_preemption_delay_defaults_and_bad_values() -> None:
    scheduler, _ = build()
    partition = scheduler.partition()
    assert partition.queues["root.high"].preemption_delay == 10.0
    assert partition.queues["root.low"].preemption_delay == DEFAULT_PREEMPTION_DELAY


def test_the_reference_preempts_reserves_and_places_after_confirmation() -> None:
    scheduler, clock = build()
    fill_low(scheduler)
    scheduler.update_allocation(ask("hi", "urgent", {"memory": 300}, allow_preempt_other=True))
    assert scheduler.schedule() == []
    clock.now += 9.9
    assert scheduler.schedule() == [] and preempted(scheduler.take_released()) == []
    clock.now += 0.2
    assert scheduler.schedule() == []
    response = scheduler.take_released()
    assert preempted(response) == ["low-9", "low-8", "low-7"]
    partition = scheduler.partition()
    assert partition.reservations == {("hi", "urgent"): "n1"}
    # a victim that comes back cannot take the room: the node is reserved for the preemptor
    scheduler.update_allocation(ask("low-app", "again", SMALL))
    confirm(scheduler, list(response.released))
    made = scheduler.schedule()
    assert [(a.allocation_key, a.node_id) for a in made] == [("urgent", "n1")]
    assert partition.queues["root.low"].allocated == {"memory": 700}


def test_an_attempt_that_finds_nothing_waits_15_seconds() -> None:
    scheduler, clock = build(low_policy="disabled")
    fill_low(scheduler)
    scheduler.update_allocation(ask("hi", "urgent", {"memory": 300}, allow_preempt_other=True))
    clock.now += 11.0
    scheduler.schedule()
    urgent = scheduler.partition().applications["hi"].asks["urgent"]
    assert urgent.preempt_checked_at == clock.now
    checked = clock.now
    clock.now += 14.0
    scheduler.schedule()
    assert urgent.preempt_checked_at == checked
    clock.now += 1.0
    scheduler.schedule()
    assert urgent.preempt_checked_at == clock.now


def test_priority_offsets_count_in_the_priority_law() -> None:
    # the victims' priority is 5, the ask's 0: its queue's offset of 10 lifts it above them
    scheduler, clock = build(offset=10)
    fill_low(scheduler, priority=5)
    scheduler.update_allocation(ask("hi", "urgent", {"memory": 100}, allow_preempt_other=True))
    clock.now += 11.0
    scheduler.schedule()
    assert preempted(scheduler.take_released()) == ["low-9"]
    scheduler2, clock2 = build(offset=0)
    fill_low(scheduler2, priority=5)
    scheduler2.update_allocation(ask("hi", "urgent", {"memory": 100}, allow_preempt_other=True))
    clock2.now += 11.0
    scheduler2.schedule()
    assert preempted(scheduler2.take_released()) == []


INHERITED = """
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
          - name: parent
            properties:
              preemption.policy: disabled
            queues:
              - name: low
"""


def test_a_disabled_parent_protects_its_children() -> None:
    scheduler, clock = build(config=INHERITED)
    scheduler.update_application(t.applications("rm", {"child-app": "root.parent.low"}))
    for index in range(10):
        scheduler.update_allocation(ask("child-app", f"c-{index}", SMALL))
    assert len(scheduler.schedule()) == 10
    assert scheduler.partition().queues["root.parent.low"].preemption_policy == "disabled"
    scheduler.update_allocation(ask("hi", "urgent", {"memory": 100}, allow_preempt_other=True))
    clock.now += 60.0
    scheduler.schedule()
    assert preempted(scheduler.take_released()) == []


def test_a_missing_policy_may_be_preempted_unless_its_tag_opts_out() -> None:
    scheduler, clock = build()
    # three allocations, the newest opted out by its tag: the older two go first
    scheduler.update_allocation(ask("low-app", "a", {"memory": 400}))
    scheduler.update_allocation(ask("low-app", "b", {"memory": 300}))
    tagged = ask("low-app", "c", {"memory": 300})
    tagged.asks[0].tags["yunikorn.apache.org/allowPreemption"] = "false"
    scheduler.update_allocation(tagged)
    assert len(scheduler.schedule()) == 3
    scheduler.update_allocation(ask("hi", "urgent", {"memory": 300}, allow_preempt_other=True))
    clock.now += 11.0
    scheduler.schedule()
    assert preempted(scheduler.take_released()) == ["b"]


def test_required_node_asks_in_the_reference() -> None:
    scheduler, _clock = build()
    scheduler.update_node(t.nodes("rm", ["n2"], NODE))
    scheduler.update_allocation(ask("low-app", "ds", SMALL, node="n2"))
    scheduler.update_allocation(ask("low-app", "absent", SMALL, node="n3"))
    made = scheduler.schedule()
    assert [(a.allocation_key, a.node_id) for a in made] == [("ds", "n2")]
    scheduler.update_node(t.nodes("rm", ["n3"], NODE))
    made = scheduler.schedule()
    assert [(a.allocation_key, a.node_id) for a in made] == [("absent", "n3")]


# ---- the owner's side (the application actor's plain code) ------------------------------------------


def test_the_owner_releases_victims_it_holds_and_hands_back_the_others() -> None:
    from korral.model.allocation import Allocation
    from korral.model.app.application import Application
    from korral.model.app.owner import ApplicationOwner
    from korral.model.view_ops import Unpreempt

    owner = ApplicationOwner(Application.new("app", partition="[rm]default", queue_path="root.low", user="u"))
    owner.add_asks(
        [si.AllocationAsk(max_allocations=1, allocation_key="k", application_id="app", resource_ask=SMALL)],
        0.0,
    )
    generation = owner.app.asks["k"].generation
    booked = Allocation(
        uuid="u1",
        allocation_key="k",
        application_id="app",
        node_id="n1",
        resource=dict(SMALL),
        queue_path="root.low",
        ask_generation=generation,
    )
    owner.confirm([booked], 0.0)
    effects = owner.preempt(
        ["u1", "unknown"], "preempting allocations to free up resources to run ask: x", 1.0
    )
    assert [(a.uuid, kind) for a, kind, _ in effects.released] == [("u1", T.PREEMPTED_BY_SCHEDULER)]
    assert effects.view_ops == [Unpreempt(uuid="unknown")]
    assert owner.app.releasing == {"u1": T.PREEMPTED_BY_SCHEDULER}
    # still booked until the RM confirms; a second preemption of it changes nothing
    assert "u1" in owner.app.allocations
    assert owner.preempt(["u1"], "again", 2.0).view_ops == [Unpreempt(uuid="u1")]
    confirmed = owner.release(
        [si.AllocationRelease(application_id="app", uuid="u1", termination_type=T.PREEMPTED_BY_SCHEDULER)],
        3.0,
    )
    assert confirmed.released == [] and "u1" not in owner.app.allocations  # not reported back
    # released: the only allocation, so the application completes (published after the Forget)
    assert [type(op).__name__ for op in confirmed.view_ops] == ["Forget", "OwnerState"]
    assert confirmed.view_ops[0].allocation.uuid == "u1"  # type: ignore[union-attr]


def test_at_most_ten_asks_of_a_queue_attempt_preemption_in_one_cycle() -> None:
    scheduler, clock = build(low_policy="disabled")  # nothing to find: every attempt fails
    fill_low(scheduler)
    for index in range(12):
        scheduler.update_allocation(ask("hi", f"u{index}", {"memory": 100}, allow_preempt_other=True))
    clock.now += 11.0
    partition = scheduler.partition()
    assert partition.schedule_one() is None
    asks = partition.applications["hi"].asks
    tried = sorted(key for key, a in asks.items() if a.preempt_checked_at == clock.now)
    assert len(tried) == 10
    assert partition.schedule_one() is None  # the next cycle: the other two
    assert all(a.preempt_checked_at == clock.now for a in asks.values())
