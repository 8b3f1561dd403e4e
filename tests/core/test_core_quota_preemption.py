"""Quota preemption end to end through ``korral.Core`` (issue 26): each scenario of yunikorn-site's
quota preemption user guide, on a fake clock (``korral.start(clock=...)``, ``core.poke_timers()``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from core_helpers import FAST, add_apps, add_nodes, eventually
from test_core_preemption import Clock, preempted, settle

import korral
from korral import si
from korral import testing as t

P = "[rm]default"
NODE = {"memory": 1000, "vcore": 10}
MESSAGE = "preempting allocations to enforce new max quota for queue : "


def config(*, enabled: bool | None = True, team_max: str = "{memory: 2000}", props: str = "") -> str:
    switch = (
        "" if enabled is None else f"    preemption:\n      quotapreemptionenabled: {str(enabled).lower()}\n"
    )
    return f"""
partitions:
  - name: default
{switch}    placementrules:
      - name: provided
        create: true
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: team
            parent: true
            resources:
              max: {team_max}
{props}
            queues:
              - name: a
              - name: b
          - name: dyn
            parent: true
            childtemplate:
              resources:
                max: {{memory: 2000}}
              properties:
                quota.preemption.delay: 1m
"""


DELAY = "            properties:\n              quota.preemption.delay: 5m"


@contextmanager
def quota_core(text: str) -> Iterator[tuple[korral.Core, t.RecordingRM, Clock]]:
    clock = Clock()
    rm = t.RecordingRM("rm")
    with korral.start(**FAST, clock=clock) as core:
        core.register_resource_manager(t.register("rm", text), rm)
        add_nodes(core, rm, ["n1", "n2"], NODE)
        add_apps(core, rm, {"app-a": "root.team.a", "app-b": "root.team.b"})
        for app_id, count in (("app-a", 6), ("app-b", 4)):
            core.update_allocation(t.asks("rm", app_id, count, {"memory": 100}))
        core.wait_until_idle()
        assert rm.wait_for_allocations(10)
        yield core, rm, clock


def reconfigure(core: korral.Core, text: str) -> None:
    core.update_configuration(si.UpdateConfigurationRequest(rm_id="rm", config=text))
    core.wait_until_idle()


def advance(core: korral.Core, clock: Clock, seconds: float) -> None:
    core.wait_until_idle()
    clock.now += seconds
    core.poke_timers()
    core.wait_until_idle()


def quota_events(rm: t.RecordingRM) -> list[str]:
    with rm.lock:
        return [
            e.message
            for e in rm.events
            if e.object_id.startswith("root.") and "quota preemption" in e.message
        ]


def test_lowered_below_usage_preempts_after_the_delay() -> None:
    with quota_core(config(props=DELAY)) as (core, rm, clock):
        reconfigure(core, config(team_max="{memory: 700}", props=DELAY))
        advance(core, clock, 299.0)
        assert preempted(rm) == []  # not before its 5 minutes
        advance(core, clock, 2.0)
        # 300 over: a (600) frees its share rounded down (180: one), b (400) 120 (one); never more
        assert rm.wait_for(lambda r: len(preempted(r)) == 2)
        releases = preempted(rm)
        assert {r.message for r in releases} == {MESSAGE + "root.team"}
        # no pending ask was needed; once the RM confirms, the queue is closer to its new max,
        # never below it
        core.update_allocation(rm.take_confirmations())
        core.wait_until_idle()
        eventually(lambda: core.queue(P, "root.team").allocated == {"memory": 800})
        eventually(lambda: any("preempting 2 allocations" in m for m in quota_events(rm)))
        assert any("due in 300s" in m for m in quota_events(rm))
        # the books agree; the queue may stay a little above a lowered max (no new work goes there)
        assert [p for p in settle(core, rm) if "above max" not in p] == []


def test_switch_off_explicitly_or_by_default_never_preempts() -> None:
    for enabled in (False, None):
        with quota_core(config(enabled=enabled, props=DELAY)) as (core, rm, clock):
            reconfigure(core, config(enabled=enabled, team_max="{memory: 700}", props=DELAY))
            advance(core, clock, 400.0)
            assert preempted(rm) == []
            assert core.queue(P, "root.team").allocated == {"memory": 1000}


def test_no_delay_configured_never_preempts() -> None:
    with quota_core(config()) as (core, rm, clock):
        reconfigure(core, config(team_max="{memory: 700}"))
        advance(core, clock, 400.0)
        assert preempted(rm) == []


def test_a_quota_increase_never_preempts_and_cancels_a_pending_one() -> None:
    with quota_core(config(props=DELAY)) as (core, rm, clock):
        reconfigure(core, config(team_max="{memory: 5000}", props=DELAY))
        advance(core, clock, 400.0)
        assert preempted(rm) == []
        reconfigure(core, config(team_max="{memory: 700}", props=DELAY))
        advance(core, clock, 100.0)
        reconfigure(core, config(team_max="{memory: 900}", props=DELAY))  # raised before it ran
        advance(core, clock, 400.0)
        assert preempted(rm) == []
        eventually(lambda: any("cancelled: its max was raised" in m for m in quota_events(rm)))


def test_lowered_but_above_usage_has_no_impact() -> None:
    with quota_core(config(props=DELAY)) as (core, rm, clock):
        reconfigure(core, config(team_max="{memory: 1200}", props=DELAY))
        advance(core, clock, 400.0)
        assert preempted(rm) == []


def test_usage_dropped_by_the_time_the_delay_ran_out_nothing_happens() -> None:
    with quota_core(config(props=DELAY)) as (core, rm, clock):
        reconfigure(core, config(team_max="{memory: 900}", props=DELAY))
        advance(core, clock, 100.0)
        # two allocations end on their own
        with rm.lock:
            gone = [uuid for uuid, a in rm.live.items() if a.application_id == "app-b"][:2]
        for uuid in gone:
            core.update_allocation(t.release("rm", "app-b", uuid=uuid))
        advance(core, clock, 250.0)
        assert preempted(rm) == []
        eventually(lambda: any("usage within max, nothing to do" in m for m in quota_events(rm)))


def test_dynamic_queues_do_not_support_it() -> None:
    with quota_core(config(props=DELAY)) as (core, rm, clock):
        add_apps(core, rm, {"app-d": "root.dyn.team-x"})
        core.update_allocation(t.asks("rm", "app-d", 5, {"memory": 100}))
        core.wait_until_idle()
        assert rm.wait_for_allocations(15)
        # the template's max lowered below the dynamic queue's usage: the queue keeps its settings
        reconfigure(
            core,
            config(props=DELAY).replace(
                "max: {memory: 2000}\n              prop", "max: {memory: 200}\n              prop"
            ),
        )
        advance(core, clock, 400.0)
        assert preempted(rm) == []


def test_a_restart_resets_the_timer() -> None:
    """A core that starts with allocations over a queue's max (recovered from the RM) starts the
    timer at recovery: the time before the restart does not count (YuniKorn's design)."""
    clock = Clock()
    rm = t.RecordingRM("rm")
    with korral.start(**FAST, clock=clock) as core:
        core.register_resource_manager(t.register("rm", config(team_max="{memory: 500}", props=DELAY)), rm)
        add_apps(core, rm, {"app-a": "root.team.a"})
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
        node = si.NodeInfo(
            node_id="n1",
            action=si.NodeAction.CREATE,
            schedulable_resource=NODE,
            existing_allocations=existing,
        )
        core.update_node(si.NodeRequest(rm_id="rm", nodes=[node]))
        core.wait_until_idle()
        eventually(lambda: core.queue(P, "root.team").allocated == {"memory": 800})
        advance(core, clock, 299.0)
        assert preempted(rm) == []
        advance(core, clock, 2.0)
        assert rm.wait_for(lambda r: len(preempted(r)) == 3)
        assert {r.message for r in preempted(rm)} == {MESSAGE + "root.team"}


def with_child_limit(text: str, memory: int) -> str:
    """root.team.a with a max of its own and a 5 minute quota.preemption.delay."""
    child = (
        "              - name: a\n"
        "                resources:\n"
        f"                  max: {{memory: {memory}}}\n"
        "                properties:\n"
        "                  quota.preemption.delay: 5m\n"
    )
    return text.replace("              - name: a\n", child)


def test_top_down_the_parent_goes_first() -> None:
    with quota_core(with_child_limit(config(props=DELAY), 2000)) as (core, rm, clock):
        reconfigure(core, with_child_limit(config(team_max="{memory: 800}", props=DELAY), 300))
        advance(core, clock, 301.0)
        # both are due: the parent runs (200 over: a's share 120, one victim), its child waits
        assert rm.wait_for(lambda r: len(preempted(r)) == 1)
        assert {r.message for r in preempted(rm)} == {MESSAGE + "root.team"}
        advance(core, clock, 1.0)
        assert len(preempted(rm)) == 1
        core.update_allocation(rm.take_confirmations())
        advance(core, clock, 1.0)
        assert rm.wait_for(lambda r: len(preempted(r)) == 3)  # a at 500, its max 300
        assert preempted(rm)[-1].message == MESSAGE + "root.team.a"


def vcore_config(maximum: int) -> str:
    return f"""
partitions:
  - name: default
    preemption:
      quotapreemptionenabled: true
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: parent
            resources:
              max: {{vcore: {maximum}}}
            properties:
              quota.preemption.delay: 10s
            queues:
              - name: a
                resources:
                  guaranteed: {{vcore: 4}}
              - name: b
"""


@pytest.mark.parametrize(("in_a", "victims"), [(6, 5), (8, 6), (10, 5)])
def test_a_parent_lowered_from_12_to_6_vcores_is_never_preempted_below_its_max(
    in_a: int, victims: int
) -> None:
    """YuniKorn's quota preemptor: each child's share of the 6 vcores over, in proportion to its usage
    above its guarantee, rounded down; in each leaf victims while they free no more than its share."""
    rm = t.RecordingRM("rm")
    with korral.start(runtime="simulated", seed=1) as core:
        core.register_resource_manager(t.register("rm", vcore_config(12)), rm)
        core.update_node(t.nodes("rm", ["n1"], {"vcore": 100_000}))
        core.update_application(t.applications("rm", {"app-a": "root.parent.a", "app-b": "root.parent.b"}))
        core.update_allocation(t.asks("rm", "app-a", in_a, {"vcore": 1000}))
        core.update_allocation(t.asks("rm", "app-b", 12 - in_a, {"vcore": 1000}))
        core.wait_until_idle()
        assert rm.allocated_total == 12
        core.update_configuration(si.UpdateConfigurationRequest(rm_id="rm", config=vcore_config(6)))
        core.advance(11.0)
        assert len(preempted(rm)) == victims
        core.update_allocation(rm.take_confirmations())
        core.advance(60.0)
        assert len(preempted(rm)) == victims  # no further run
        assert core.queue(P, "root.parent").allocated["vcore"] >= 6000
