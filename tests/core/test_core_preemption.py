"""Preemption and required-node asks end to end through ``korral.Core`` (issue 10; reference 2.13).

Time is a fake clock (``korral.start(clock=...)``, ``core.poke_timers()``): the preemption delay
passes without waiting, and every test waits for state (callbacks, ``wait_until_idle``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from core_helpers import FAST, add_apps, add_nodes, eventually, part

import korral
from korral import si
from korral import testing as t
from korral.harness import invariants
from korral.model import events

T = si.TerminationType
P = part()
NODE = {"memory": 1000, "vcore": 10}
SMALL = {"memory": 100}
REQUIRED_NODE = "yunikorn.apache.org/requiredNode"


def config(low_props: str = "", high_props: str = "", partition: str = "", low_guarantee: int = 200) -> str:
    return f"""
partitions:
  - name: default
{partition}
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: high
            resources:
              guaranteed: {{memory: 500}}
            properties:
              preemption.delay: 10s
{high_props}
          - name: low
            resources:
              guaranteed: {{memory: {low_guarantee}}}
{low_props}
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@contextmanager
def preempting_core(
    config_text: str, rm: t.RecordingRM | None = None
) -> Iterator[tuple[korral.Core, t.RecordingRM, Clock]]:
    clock = Clock()
    rm = rm or t.RecordingRM("rm")
    with korral.start(**FAST, clock=clock) as core:
        core.register_resource_manager(t.register("rm", config_text), rm)
        yield core, rm, clock


def advance(core: korral.Core, clock: Clock, seconds: float, *, cycle: bool = True) -> None:
    """Move the clock on and wait until the scheduler has run a cycle at the new time (the timer
    thread delivers the tick a moment after the poke; something waits in every test, so it runs)."""
    core.wait_until_idle()  # what was sent before is stamped with the time before
    cycles = core.scheduler_stats(P)["cycles"]
    clock.now += seconds
    core.poke_timers()
    if cycle:
        eventually(lambda: core.scheduler_stats(P)["cycles"] > cycles)
    core.wait_until_idle()


def ask(
    app_id: str,
    key: str,
    resource: dict[str, int],
    *,
    priority: int = 0,
    preempt_other: bool | None = None,
    preempt_self: bool = True,
    tags: dict[str, str] | None = None,
) -> si.AllocationRequest:
    policy = (
        None
        if preempt_other is None
        else si.PreemptionPolicy(allow_preempt_self=preempt_self, allow_preempt_other=preempt_other)
    )
    return si.AllocationRequest(
        rm_id="rm",
        asks=[
            si.AllocationAsk(
                max_allocations=1,
                allocation_key=key,
                application_id=app_id,
                resource_ask=dict(resource),
                priority=priority,
                preemption_policy=policy,
                tags=dict(tags or {}),
            )
        ],
    )


def preempted(rm: t.RecordingRM) -> list[si.AllocationRelease]:
    with rm.lock:
        return [r for r in rm.released if r.termination_type == T.PREEMPTED_BY_SCHEDULER]


def fill_low(core: korral.Core, rm: t.RecordingRM, count: int = 10, **kwargs: object) -> None:
    """The low queue takes the whole node with ``count`` small allocations."""
    for index in range(count):
        core.update_allocation(ask("low-app", f"low-{index}", SMALL, **kwargs))  # type: ignore[arg-type]
    core.wait_until_idle()
    assert rm.wait_for_allocations(count)


def settle(core: korral.Core, rm: t.RecordingRM) -> list[str]:
    state = invariants.stable_collect(core, P)
    assert state is not None
    return invariants.check_partition(state) + invariants.check_rm_view(rm, [state])


def live_keys(core: korral.Core, app_id: str) -> dict[str, str]:
    return {a.allocation_key: a.node_id for a in core.application(P, app_id).allocations}


def test_an_ask_preempts_after_its_delay_and_not_before() -> None:
    with preempting_core(config()) as (core, rm, clock):
        add_nodes(core, rm, ["n1"], NODE)
        add_apps(core, rm, {"low-app": "root.low", "hi": "root.high"})
        fill_low(core, rm)
        core.update_allocation(ask("hi", "urgent", {"memory": 300}, preempt_other=True))
        core.wait_until_idle()
        advance(core, clock, 9.0)
        assert preempted(rm) == []  # 9 s of its 10 s delay
        advance(core, clock, 1.5)
        assert rm.wait_for(lambda r: len(preempted(r)) == 3)
        releases = preempted(rm)
        # the newest go first, each with YuniKorn's message
        assert {r.allocation_key for r in releases} == {"low-7", "low-8", "low-9"}
        assert all(
            r.message == "preempting allocations to free up resources to run ask: urgent" for r in releases
        )
        assert "urgent" not in live_keys(core, "hi")
        assert settle(core, rm) == []


def test_the_scheduler_wakes_when_the_delay_runs_out_not_at_its_next_tick() -> None:
    """An ask that waits for its preemption.delay preempts the moment it runs out: here the ticks are
    an hour apart, so only the scheduler's own wake at the ask's due time can start the preemption."""
    clock = Clock()
    rm = t.RecordingRM("rm")
    with korral.start(**{**FAST, "scheduling_interval": 3600.0}, clock=clock) as core:
        core.register_resource_manager(t.register("rm", config()), rm)
        add_nodes(core, rm, ["n1"], NODE)
        add_apps(core, rm, {"low-app": "root.low", "hi": "root.high"})
        fill_low(core, rm)
        core.update_allocation(ask("hi", "urgent", {"memory": 300}, preempt_other=True))
        core.wait_until_idle()
        clock.now += 9.0
        core.poke_timers()
        core.wait_until_idle()
        assert preempted(rm) == []  # 9 s of its 10 s delay
        clock.now += 1.5
        core.poke_timers()
        assert rm.wait_for(lambda r: len(preempted(r)) == 3)
        assert settle(core, rm) == []


def test_victims_stay_booked_until_the_rm_confirms_then_the_preemptor_gets_their_room() -> None:
    with preempting_core(config()) as (core, rm, clock):
        add_nodes(core, rm, ["n1"], NODE)
        add_apps(core, rm, {"low-app": "root.low", "hi": "root.high"})
        fill_low(core, rm)
        core.update_allocation(ask("hi", "urgent", {"memory": 300}, preempt_other=True))
        advance(core, clock, 11.0)
        assert rm.wait_for(lambda r: len(preempted(r)) == 3)
        # booked until confirmed: node, queue and application still count the victims
        assert core.queue(P, "root.low").allocated == {"memory": 1000}
        assert len(core.node(P, "n1").allocations) == 10
        victims = {a.uuid: a for a in core.application(P, "low-app").allocations if a.releasing}
        assert len(victims) == 3 and {a.releasing for a in victims.values()} == {"PREEMPTED_BY_SCHEDULER"}
        # later attempts (every 15 s) do not choose more victims while these are still going
        advance(core, clock, 16.0)
        assert len(preempted(rm)) == 3
        # the victims' tasks come back as new asks: the reservation keeps the room for the preemptor
        for index in range(3):
            core.update_allocation(ask("low-app", f"again-{index}", SMALL))
        core.update_allocation(rm.take_confirmations())
        core.wait_until_idle()
        assert rm.wait_for(lambda r: any(a.allocation_key == "urgent" for a in r.live.values()))
        assert live_keys(core, "hi") == {"urgent": "n1"}
        assert core.queue(P, "root.low").allocated == {"memory": 700}
        assert not any(key.startswith("again-") for key in live_keys(core, "low-app"))
        # the confirmations were not reported back as new releases
        assert len(preempted(rm)) == 3
        assert settle(core, rm) == []


def test_no_victim_below_its_queues_guarantee() -> None:
    # low's guarantee is 800 of its 1000: only two victims may go, and the ask needs three
    with preempting_core(config(low_guarantee=800)) as (core, rm, clock):
        add_nodes(core, rm, ["n1"], NODE)
        add_apps(core, rm, {"low-app": "root.low", "hi": "root.high"})
        fill_low(core, rm)
        core.update_allocation(ask("hi", "urgent", {"memory": 300}, preempt_other=True))
        advance(core, clock, 11.0)
        assert preempted(rm) == []
        # a smaller ask fits what low can give
        core.update_allocation(ask("hi", "smaller", {"memory": 200}, preempt_other=True))
        advance(core, clock, 11.0)
        assert rm.wait_for(lambda r: len(preempted(r)) == 2)
        assert settle(core, rm) == []


def test_higher_priority_allocations_are_not_victims() -> None:
    with preempting_core(config()) as (core, rm, clock):
        add_nodes(core, rm, ["n1"], NODE)
        add_apps(core, rm, {"low-app": "root.low", "hi": "root.high"})
        fill_low(core, rm, priority=10)
        core.update_allocation(ask("hi", "urgent", {"memory": 300}, priority=5, preempt_other=True))
        advance(core, clock, 11.0)
        assert preempted(rm) == []
        # an equal priority may preempt (unlike Kubernetes)
        core.update_allocation(ask("hi", "equal", {"memory": 100}, priority=10, preempt_other=True))
        advance(core, clock, 11.0)
        assert rm.wait_for(lambda r: len(preempted(r)) == 1)


def test_an_ask_without_a_policy_never_preempts() -> None:
    with preempting_core(config()) as (core, rm, clock):
        add_nodes(core, rm, ["n1"], NODE)
        add_apps(core, rm, {"low-app": "root.low", "hi": "root.high"})
        fill_low(core, rm)
        core.update_allocation(ask("hi", "plain", {"memory": 300}))
        core.update_allocation(ask("hi", "opted-out", {"memory": 300}, preempt_other=False))
        advance(core, clock, 60.0)
        assert preempted(rm) == []


def test_a_disabled_queue_keeps_its_allocations() -> None:
    props = "            properties:\n              preemption.policy: disabled"
    with preempting_core(config(low_props=props)) as (core, rm, clock):
        add_nodes(core, rm, ["n1"], NODE)
        add_apps(core, rm, {"low-app": "root.low", "hi": "root.high"})
        fill_low(core, rm)
        core.update_allocation(ask("hi", "urgent", {"memory": 300}, preempt_other=True))
        advance(core, clock, 60.0)
        assert preempted(rm) == []


def test_the_partition_switch_turns_preemption_off() -> None:
    switch = "    preemption:\n      enabled: false"
    with preempting_core(config(partition=switch)) as (core, rm, clock):
        add_nodes(core, rm, ["n1"], NODE)
        add_apps(core, rm, {"low-app": "root.low", "hi": "root.high"})
        fill_low(core, rm)
        core.update_allocation(ask("hi", "urgent", {"memory": 300}, preempt_other=True))
        advance(core, clock, 60.0)
        assert preempted(rm) == []


FENCED = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: tenant
            properties:
              preemption.policy: fence
            queues:
              - name: urgent
                resources:
                  guaranteed: {memory: 500}
                properties:
                  preemption.delay: 10s
              - name: batch
          - name: other
"""


def test_a_fence_keeps_victims_inside_the_fenced_subtree() -> None:
    with preempting_core(FENCED) as (core, rm, clock):
        add_nodes(core, rm, ["n1", "n2"], {"memory": 500})
        add_apps(
            core, rm, {"outside": "root.other", "inside": "root.tenant.batch", "hi": "root.tenant.urgent"}
        )
        for index in range(5):
            core.update_allocation(ask("outside", f"out-{index}", SMALL))
        core.wait_until_idle()
        for index in range(5):
            core.update_allocation(ask("inside", f"in-{index}", SMALL))
        core.wait_until_idle()
        assert rm.wait_for_allocations(10)
        core.update_allocation(ask("hi", "urgent", {"memory": 200}, preempt_other=True))
        advance(core, clock, 11.0)
        assert rm.wait_for(lambda r: len(preempted(r)) == 2)
        assert {r.application_id for r in preempted(rm)} == {"inside"}


def test_opted_out_allocations_go_last() -> None:
    with preempting_core(config()) as (core, rm, clock):
        add_nodes(core, rm, ["n1"], NODE)
        add_apps(core, rm, {"low-app": "root.low", "hi": "root.high"})
        # only the two oldest allow preemption; the newer eight opted out
        for index in range(10):
            core.update_allocation(
                ask("low-app", f"low-{index}", SMALL, preempt_other=False, preempt_self=index < 2)
            )
            core.wait_until_idle()
        assert rm.wait_for_allocations(10)
        core.update_allocation(ask("hi", "first", {"memory": 200}, preempt_other=True))
        advance(core, clock, 11.0)
        assert rm.wait_for(lambda r: len(preempted(r)) == 2)
        assert {r.allocation_key for r in preempted(rm)} == {"low-0", "low-1"}
        core.update_allocation(rm.take_confirmations())
        core.wait_until_idle()
        # only opted-out ones are left: taken when nothing else frees enough, newest first
        core.update_allocation(ask("hi", "second", {"memory": 300}, preempt_other=True))
        advance(core, clock, 11.0)
        assert rm.wait_for(lambda r: len(preempted(r)) == 5)
        assert {r.allocation_key for r in preempted(rm)[2:]} == {"low-9", "low-8", "low-7"}


# ---- required-node asks ----------------------------------------------------------------------------


def daemon(
    app_id: str, key: str, node_id: str, resource: dict[str, int], priority: int = 0
) -> si.AllocationRequest:
    return ask(app_id, key, resource, priority=priority, tags={REQUIRED_NODE: node_id})


def test_a_required_node_ask_is_placed_only_on_its_node() -> None:
    with preempting_core(config()) as (core, rm, _clock):
        add_nodes(core, rm, ["n1", "n2", "n3"], NODE)
        add_apps(core, rm, {"ds": "root.low"})
        for index in range(3):
            core.update_allocation(daemon("ds", f"ds-{index}", "n2", SMALL))
        core.wait_until_idle()
        assert rm.wait_for_allocations(3)
        assert set(live_keys(core, "ds").values()) == {"n2"}


def test_a_required_node_ask_waits_for_its_node() -> None:
    with preempting_core(config()) as (core, rm, clock):
        add_nodes(core, rm, ["n1"], NODE)
        add_apps(core, rm, {"ds": "root.low"})
        core.update_allocation(daemon("ds", "ds-0", "later", SMALL))
        advance(core, clock, 5.0, cycle=False)  # nothing waits on time: no cycle to wait for
        assert live_keys(core, "ds") == {}
        add_nodes(core, rm, ["later"], NODE)
        assert rm.wait_for_allocations(1)
        assert live_keys(core, "ds") == {"ds-0": "later"}


def test_a_required_node_ask_reserves_its_node_at_once_before_other_reservations() -> None:
    with preempting_core(config()) as (core, rm, clock):
        add_nodes(core, rm, ["n1"], NODE)
        add_apps(core, rm, {"low-app": "root.low", "other": "root.low", "ds": "root.low"})
        fill_low(core, rm, count=9)
        add_nodes(core, rm, ["tiny"], {"memory": 100})
        # another application's ask fits the cluster but no node: after the reservation delay it
        # reserves n1 (the only node it could ever fit)
        core.update_allocation(ask("other", "big", {"memory": 200}))
        advance(core, clock, 3.0)
        assert core.node(P, "n1").reservations == ["other"]
        # the daemon set's ask takes the reservation over at once, without waiting for any delay
        core.update_allocation(daemon("ds", "ds-0", "n1", {"memory": 200}))
        core.wait_until_idle()
        assert core.node(P, "n1").reservations == ["ds"]


def test_a_required_node_ask_preempts_on_its_node_lowest_priority_first() -> None:
    with preempting_core(config()) as (core, rm, clock):
        add_nodes(core, rm, ["n1"], NODE)
        add_apps(core, rm, {"low-app": "root.low", "ds": "root.low", "other-ds": "root.low"})
        # n1: the daemon set's own application holds the lowest priority, then priorities 0..7, and
        # another daemon set's allocation (never a victim of a required-node ask), priority -5
        core.update_allocation(ask("ds", "own", SMALL, priority=-1))
        core.update_allocation(daemon("other-ds", "pinned", "n1", SMALL, priority=-5))
        for index in range(8):
            core.update_allocation(ask("low-app", f"low-{index}", SMALL, priority=index))
        core.wait_until_idle()
        assert rm.wait_for_allocations(10)
        core.update_allocation(daemon("ds", "ds-0", "n1", {"memory": 200}, priority=50))
        advance(core, clock, 0.1)  # the next cycle: the node was reserved in this one
        assert rm.wait_for(lambda r: len(preempted(r)) == 2)
        assert {r.allocation_key for r in preempted(rm)} == {"own", "low-0"}
        assert all("daemon set ask: ds-0" in r.message for r in preempted(rm))
        core.update_allocation(rm.take_confirmations())
        core.wait_until_idle()
        assert rm.wait_for(lambda r: any(a.allocation_key == "ds-0" for a in r.live.values()))
        assert live_keys(core, "ds") == {"ds-0": "n1"}
        assert settle(core, rm) == []


def test_a_required_node_ask_without_victims_says_so_in_an_event() -> None:
    with preempting_core(config()) as (core, rm, clock):
        add_nodes(core, rm, ["n1"], NODE)
        add_apps(core, rm, {"low-app": "root.low", "ds": "root.low"})
        for index in range(10):
            core.update_allocation(ask("low-app", f"low-{index}", SMALL, priority=100))
        core.wait_until_idle()
        assert rm.wait_for_allocations(10)
        core.update_allocation(daemon("ds", "ds-0", "n1", {"memory": 200}, priority=50))
        advance(core, clock, 0.1)
        expected = "Unschedulable request 'ds-0' with required node 'n1', no preemption victim found"
        assert rm.wait_for(lambda r: any(e.message == expected for e in r.events))
        assert preempted(rm) == []
        # a required-node ask is never reported as outstanding: a larger cluster would not help it
        advance(core, clock, 2.0)
        with rm.lock:
            assert not any(s.allocation_key == "ds-0" for s in rm.scheduling_states)


def test_victims_are_reported_as_preempted_events() -> None:
    rm = t.RecordingRM("rm")
    with preempting_core(config(), rm) as (core, rm, clock):
        add_nodes(core, rm, ["n1"], NODE)
        add_apps(core, rm, {"low-app": "root.low", "hi": "root.high"})
        fill_low(core, rm)
        core.update_allocation(ask("hi", "urgent", {"memory": 100}, preempt_other=True))
        advance(core, clock, 11.0)
        assert rm.wait_for(
            lambda r: any(e.event_change_detail == events.Detail.ALLOC_PREEMPT for e in r.events)
        )


def test_snapshots_and_rest_documents_show_the_preemption_settings() -> None:
    from korral.server.rest import dao

    props = "            properties:\n              preemption.policy: disabled"
    switch = "    preemption:\n      enabled: false"
    with preempting_core(config(low_props=props, partition=switch)) as (core, _rm, _clock):
        partition = core.partition(P)
        assert partition is not None and partition.preemption_enabled is False
        assert dao.partition(partition, [], 0)["preemptionEnabled"] is False
        low = core.queue(P, "root.low")
        assert low is not None and low.preemption_policy == "disabled"
        document = dao.queue(low, P, None)
        assert document["preemptionEnabled"] is False and document["isPreemptionFence"] is False
    with preempting_core(FENCED) as (core, _rm, _clock):
        tenant = core.queue(P, "root.tenant")
        assert tenant is not None and tenant.preemption_policy == "fence"
        assert dao.queue(tenant, P, None)["isPreemptionFence"] is True
        assert core.partition(P).preemption_enabled is True  # type: ignore[union-attr]


def test_preemption_on_the_simulated_runtime_and_its_virtual_clock() -> None:
    rm = t.RecordingRM("rm")
    with korral.start(runtime="simulated", seed=3) as core:
        core.register_resource_manager(t.register("rm", config()), rm)
        core.update_node(t.nodes("rm", ["n1"], NODE))
        core.update_application(t.applications("rm", {"low-app": "root.low", "hi": "root.high"}))
        core.wait_until_idle()
        for index in range(10):
            core.update_allocation(ask("low-app", f"low-{index}", SMALL))
        core.wait_until_idle()
        core.update_allocation(ask("hi", "urgent", {"memory": 300}, preempt_other=True))
        core.wait_until_idle()
        core.advance(9.0)
        assert preempted(rm) == []
        core.advance(2.0)
        assert sorted(r.allocation_key for r in preempted(rm)) == ["low-7", "low-8", "low-9"]
        core.update_allocation(rm.take_confirmations())
        core.wait_until_idle()
        assert live_keys(core, "hi") == {"urgent": "n1"}


SAME_BATCH = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: high
          - name: low
          - name: other
"""


def test_a_victim_placed_in_the_same_batch_as_its_preemption_is_preempted_at_once() -> None:
    """A daemon-set ask reserves its full node in one cycle and preempts there a few cycles later,
    in the same batch of decisions that placed its victims on that node. The victims' application must
    hear of the placements before of their preemption: otherwise it cannot preempt what it does not
    hold yet, hands the victims back, and the daemon set waits for a later cycle."""

    def request(*asks: tuple[str, str, int, int, str]) -> si.AllocationRequest:
        """One request of several asks (``ask``'s, each one allocation): a batch decides them all."""
        made = [
            ask(
                app,
                key,
                {"memory": memory, "vcore": 1},
                priority=priority,
                tags={REQUIRED_NODE: node} if node else None,
            )
            for app, key, memory, priority, node in asks
        ]
        return si.AllocationRequest(rm_id="rm", asks=[a for request in made for a in request.asks])

    with korral.start(runtime="simulated", seed=1) as core:
        rm = t.RecordingRM("rm")
        core.register_resource_manager(t.register("rm", SAME_BATCH), rm)
        core.update_node(t.nodes("rm", ["n1", "n2"], {"memory": 1000, "vcore": 1000}))
        apps = {"filler": "root.high", "daemon": "root.high", "low": "root.low", "busy": "root.other"}
        core.update_application(t.applications("rm", {**apps, "late": "root.other"}))
        core.advance(1.0)
        # n1 holds 600 of root.high, n2 950 of root.other: the fair order walks low, then high, then other
        core.update_allocation(
            request(
                *[("filler", f"f{i}", 100, 10, "n1") for i in range(6)],
                *[("busy", f"b{i}", 50, 10, "n2") for i in range(19)],
            )
        )
        core.advance(1.0)
        assert len(rm.live) == 25
        # one batch: low's four fill n1; the daemon set reserves n1; "late" takes n2's last room; the
        # daemon set, reserved, preempts low's four (the lowest priority on n1)
        core.update_allocation(
            request(
                *[("low", f"l{i}", 100, 0, "") for i in range(4)],
                ("daemon", "ds", 400, 0, "n1"),
                ("late", "o", 50, 0, ""),
            )
        )
        core.advance(0.05)  # within the batch's own round of messages: no tick, no retry
        assert sorted(r.allocation_key for r in preempted(rm)) == ["l0", "l1", "l2", "l3"]
        assert "o" in {a.allocation_key for a in rm.live.values()}
        trace = core.trace(full=True)
        assert not any("Unpreempt" in line for line in trace), "the victims were handed back"
