"""Quota preemption (YuniKorn 1.8, issue 26): the rules of yunikorn-site's user guide and design doc
as tables over the model (``korral.model.quota_preempting``) and the victim policy
(``korral.policies.quota_preemption``), driven by the sequential reference on a fake clock."""

from __future__ import annotations

import pytest

from korral import si
from korral import testing as t
from korral.harness.reference import ReferenceScheduler
from korral.policies.quota_preemption import (
    QuotaCandidate,
    QuotaQueue,
    choose_quota_victims,
    distribute,
    preemptable,
)

T = si.TerminationType
MESSAGE = "preempting allocations to enforce new max quota for queue : "


def config(
    team_max: int | None = 1000,
    delay: str | None = "60s",
    enabled: bool = True,
    team_guarantee: int | None = None,
    child_max: int | None = None,
    child_delay: str | None = None,
) -> str:
    lines = [
        "partitions:",
        "  - name: default",
        *(["    preemption:", "      quotapreemptionenabled: true"] if enabled else []),
        "    queues:",
        "      - name: root",
        '        submitacl: "*"',
        "        queues:",
        "          - name: team",
        "            parent: true",
    ]
    resources = []
    if team_max is not None:
        resources.append(f"              max: {{memory: {team_max}}}")
    if team_guarantee is not None:
        resources.append(f"              guaranteed: {{memory: {team_guarantee}}}")
    if resources:
        lines += ["            resources:", *resources]
    if delay is not None:
        lines += ["            properties:", f"              quota.preemption.delay: {delay}"]
    lines += ["            queues:", "              - name: a"]
    child = []
    if child_max is not None:
        child += ["                resources:", f"                  max: {{memory: {child_max}}}"]
    if child_delay is not None:
        child += ["                properties:", f"                  quota.preemption.delay: {child_delay}"]
    lines += child
    lines += ["              - name: b", "          - name: other"]
    return "\n".join(lines) + "\n"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def build(text: str, a: int = 6, b: int = 4) -> tuple[ReferenceScheduler, Clock]:
    """root.team's children use ``a`` and ``b`` allocations of 100 memory each."""
    clock = Clock()
    scheduler = ReferenceScheduler(text, clock=clock, reservation_delay=3600.0)
    scheduler.update_node(t.nodes("rm", ["n1", "n2"], {"memory": 2000}))
    scheduler.update_application(t.applications("rm", {"app-a": "root.team.a", "app-b": "root.team.b"}))
    for app_id, count in (("app-a", a), ("app-b", b)):
        scheduler.update_allocation(t.asks("rm", app_id, count, {"memory": 100}))
        scheduler.schedule()
    return scheduler, clock


def preempted(scheduler: ReferenceScheduler) -> list[si.AllocationRelease]:
    released = scheduler.take_released().released
    return [r for r in released if r.termination_type == T.PREEMPTED_BY_SCHEDULER]


def run(scheduler: ReferenceScheduler, clock: Clock, seconds: float) -> list[si.AllocationRelease]:
    clock.now += seconds
    scheduler.schedule()
    return preempted(scheduler)


def confirm(scheduler: ReferenceScheduler, victims: list[si.AllocationRelease]) -> None:
    """The RM echoes the releases: the victims are gone."""
    releases = si.AllocationReleasesRequest(allocations_to_release=victims)
    scheduler.update_allocation(si.AllocationRequest(rm_id="rm", releases=releases))


def model(scheduler: ReferenceScheduler):
    partition = scheduler.partition("default")
    assert partition is not None
    return partition


# ---- the trigger -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("new", "expected"),
    [
        # lowered below the usage (1000): due after the delay; a (600) frees its share of 200
        # rounded down (120: one allocation), b (400) 80 (none): never more than the amount
        (config(team_max=800), 1),
        # lowered, but not below the usage: nothing to do
        (config(team_max=1200, delay="60s"), 0),
        # a delay of 0 (or none): never
        (config(team_max=800, delay="0s"), 0),
        (config(team_max=800, delay=None), 0),
        # the partition's switch off: never
        (config(team_max=800, enabled=False), 0),
        # not a duration: 0, never
        (config(team_max=800, delay="soon"), 0),
    ],
)
def test_a_lowered_max_is_enforced_after_the_delay(new: str, expected: int) -> None:
    scheduler, clock = build(config(team_max=2000))
    scheduler.update_configuration(new)
    assert run(scheduler, clock, 59.0) == []  # not before the delay
    victims = run(scheduler, clock, 1.5)
    assert len(victims) == expected
    assert all(r.message == MESSAGE + "root.team" for r in victims)


def test_no_pending_ask_is_needed_and_the_usage_comes_down_to_the_max() -> None:
    scheduler, clock = build(config(team_max=2000))
    scheduler.update_configuration(config(team_max=700))
    victims = run(scheduler, clock, 61.0)
    # 300 over: a (600) is to free 180, b (400) 120; each takes victims while they free no more
    # than its share (YuniKorn's quota preemptor: never below the max, a little above it may stay)
    assert sorted(r.application_id for r in victims) == ["app-a", "app-b"]
    partition = model(scheduler)
    assert set(partition.quota_running) == {"root.team"}
    # the victims stay booked until the RM confirms; then the queue is within its new max
    scheduler.update_allocation(
        si.AllocationRequest(
            rm_id="rm", releases=si.AllocationReleasesRequest(allocations_to_release=victims)
        )
    )
    assert partition.queues["root.team"].allocated == {"memory": 800}
    assert run(scheduler, clock, 120.0) == []
    assert partition.quota_running == {} and partition.quota_timers == {}


def test_a_parent_shares_the_preemptable_amount_by_usage_above_guarantee() -> None:
    scheduler, clock = build(config(team_max=2000), a=6, b=2)
    scheduler.update_configuration(config(team_max=400))
    victims = run(scheduler, clock, 61.0)
    # 400 over: a (600 of 800 used) frees 300, b (200) frees 100
    by_app = sorted(r.application_id for r in victims)
    assert by_app == ["app-a", "app-a", "app-a", "app-b"]


@pytest.mark.parametrize(
    ("changes", "expected_at"),
    [
        # a second lowering keeps the earlier start
        ([(0, config(team_max=900)), (30, config(team_max=800))], 1060.0),
        # a changed delay shifts the start by the difference
        ([(0, config(team_max=900)), (30, config(team_max=900, delay="120s"))], 1120.0),
        ([(0, config(team_max=900, delay="120s")), (10, config(team_max=900, delay="30s"))], 1030.0),
        # a raise cancels; removal of the max cancels; a delay of 0 cancels; the switch off cancels
        ([(0, config(team_max=900)), (10, config(team_max=950))], None),
        ([(0, config(team_max=900)), (10, config(team_max=None))], None),
        ([(0, config(team_max=900)), (10, config(team_max=900, delay="0s"))], None),
        ([(0, config(team_max=900)), (10, config(team_max=900, enabled=False))], None),
        # the delay set from 0 while over a max: a fresh start
        ([(0, config(team_max=900, delay="0s")), (10, config(team_max=900, delay="60s"))], 1070.0),
    ],
)
def test_consecutive_changes(changes: list[tuple[float, str]], expected_at: float | None) -> None:
    scheduler, clock = build(config(team_max=2000))
    for at, text in changes:
        clock.now = 1000.0 + at
        scheduler.update_configuration(text)
    assert model(scheduler).quota_timers.get("root.team") == expected_at


def test_top_down_a_child_waits_for_its_parents_run() -> None:
    scheduler, clock = build(config(team_max=2000, child_max=2000, child_delay="60s"))
    scheduler.update_configuration(config(team_max=800, child_max=300, child_delay="60s"))
    partition = model(scheduler)
    assert set(partition.quota_timers) == {"root.team", "root.team.a"}
    victims = run(scheduler, clock, 61.0)
    # the parent runs first (200 over: a is to free 120, one allocation; b's 80 is less than one);
    # its child waits until that victim is gone
    assert [(r.application_id, r.message) for r in victims] == [("app-a", MESSAGE + "root.team")]
    assert "root.team.a" in partition.quota_timers
    assert run(scheduler, clock, 1.0) == []
    scheduler.update_allocation(
        si.AllocationRequest(
            rm_id="rm", releases=si.AllocationReleasesRequest(allocations_to_release=victims)
        )
    )
    child = run(scheduler, clock, 1.0)
    # the child is at 500, its max 300: two more
    assert [(r.application_id, r.message) for r in child] == [("app-a", MESSAGE + "root.team.a")] * 2
    assert partition.quota_timers == {}


def test_never_below_a_guarantee() -> None:
    scheduler, clock = build(config(team_max=2000, team_guarantee=900))
    scheduler.update_configuration(config(team_max=500, team_guarantee=400))
    # 500 over its new max, but the queue may only go down to its guarantee (400): five victims
    victims = run(scheduler, clock, 61.0)
    assert len(victims) == 5
    # a guarantee equal to the new max: taking 100 would leave 900 < 950, so nothing goes
    scheduler2, clock2 = build(config(team_max=2000, team_guarantee=900))
    scheduler2.update_configuration(config(team_max=950, team_guarantee=950))
    assert run(scheduler2, clock2, 61.0) == []


def test_a_restart_resets_the_timer() -> None:
    """Recovered allocations over a queue's max start the timer at recovery (YuniKorn: the lost time
    before the restart does not count)."""
    clock = Clock()
    scheduler = ReferenceScheduler(config(team_max=500), clock=clock, reservation_delay=3600.0)
    scheduler.update_application(t.applications("rm", {"app-a": "root.team.a"}))
    existing = [
        si.Allocation(
            allocation_key=f"old-{i}",
            application_id="app-a",
            node_id="n1",
            uuid=f"rm-old-{i}",
            resource_per_alloc={"memory": 100},
        )
        for i in range(8)
    ]
    clock.now = 5000.0
    scheduler.update_node(
        si.NodeRequest(
            rm_id="rm",
            nodes=[
                si.NodeInfo(
                    node_id="n1",
                    action=si.NodeAction.CREATE,
                    schedulable_resource={"memory": 2000},
                    existing_allocations=existing,
                )
            ],
        )
    )
    assert model(scheduler).quota_timers == {"root.team": 5060.0}
    assert run(scheduler, clock, 59.0) == []
    assert len(run(scheduler, clock, 2.0)) == 3


def test_dynamic_queues_never_trigger() -> None:
    scheduler, _ = build(config(team_max=2000))
    partition = model(scheduler)
    assert partition.queues["root.team.a"].quota_preemption_delay == 0.0
    # the property is the queue's own: not inherited by its children
    scheduler.update_configuration(config(team_max=2000, delay="60s"))
    assert partition.queues["root.team"].quota_preemption_delay == 60.0
    assert partition.queues["root.team.a"].quota_preemption_delay == 0.0


# ---- the victim policy -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("maximum", "usage", "expected"),
    [
        ({"M": 50}, {"M": 80}, {"M": 30}),
        ({"M": 50, "C": 50}, {"M": 80, "C": 80}, {"M": 30, "C": 30}),
        ({"M": 200, "C": 50}, {"M": 100, "C": 80}, {"C": 30}),
        ({"M": 100, "C": 100}, {"M": 50, "C": 500}, {"C": 400}),
        ({"M": 50}, {"M": 80, "C": 100}, {"M": 30}),
        ({"C": 100}, {"M": 100, "C": 500}, {"C": 400}),
        (None, {"M": 80}, {}),
    ],
)
def test_preemptable_resources_as_the_design_table(maximum, usage, expected) -> None:
    assert preemptable(maximum, usage) == expected


def test_distribution_to_leaves() -> None:
    queues = {
        "root.p": QuotaQueue("root.p", None, {"M": 1000}, ("root.p.x", "root.p.y", "root.p.z")),
        "root.p.x": QuotaQueue("root.p.x", {"M": 200}, {"M": 600}),  # 400 above its guarantee
        "root.p.y": QuotaQueue("root.p.y", None, {"M": 400}),  # no guarantee: all 400
        "root.p.z": QuotaQueue("root.p.z", {"M": 500}, {"M": 0}),  # within: nothing
    }
    assert distribute("root.p", {"M": 200}, queues) == {"root.p.x": {"M": 100}, "root.p.y": {"M": 100}}


def cand(uuid: str, memory: int = 100, **fields: object) -> QuotaCandidate:
    return QuotaCandidate(uuid, "app", {"memory": memory}, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("candidates", "target", "expected"),
    [
        # the newest first
        ([cand("old", age=1), cand("new", age=2)], 100, ["new"]),
        # the lowest priority first
        ([cand("hi", priority=5, age=9), cand("lo", priority=1, age=1)], 100, ["lo"]),
        # originators and opted-out allocations last
        ([cand("orig", originator=True, age=9), cand("plain", age=1)], 100, ["plain"]),
        ([cand("kept", allow_preempt_self=False, age=9), cand("plain", age=1)], 100, ["plain"]),
        # larger than what must go: skipped
        ([cand("big", memory=300, age=9), cand("small", age=1)], 100, ["small"]),
        # while they free no more than the amount
        ([cand(f"c{i}", age=i) for i in range(5)], 250, ["c4", "c3"]),
        # one too large for what is left is skipped, a smaller one after it still taken
        ([cand("a", 200, age=3), cand("b", 100, age=2), cand("c", 50, age=1)], 250, ["a", "c"]),
    ],
)
def test_quota_victim_order(candidates, target: int, expected: list[str]) -> None:
    floors = [QuotaQueue("root.q", None, {"memory": 1000})]
    chosen = choose_quota_victims("root.q", {"memory": target}, candidates, floors)
    assert [c.uuid for c in chosen] == expected


def test_quota_victims_keep_every_queue_up_to_the_trigger_at_its_guarantee() -> None:
    floors = [
        QuotaQueue("root.p.q", None, {"memory": 500}),
        QuotaQueue("root.p", {"memory": 300}, {"memory": 500}),
    ]
    chosen = choose_quota_victims(
        "root.p.q", {"memory": 400}, [cand(f"c{i}", age=i) for i in range(5)], floors
    )
    assert len(chosen) == 2
