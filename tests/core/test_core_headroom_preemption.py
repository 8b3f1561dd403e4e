"""Headroom-driven preemption end to end through ``korral.Core`` (issue 26): a leaf under its
guarantee whose parent's max is full of a sibling's usage preempts even though a node has room, and
the priority walk of YuniKorn's victim search.
"""

from __future__ import annotations

from core_helpers import FAST, add_apps, add_nodes
from test_core_preemption import (
    NODE,
    SMALL,
    Clock,
    P,
    advance,
    ask,
    live_keys,
    preempted,
    preempting_core,
    settle,
)

import korral
from korral import testing as t


def config(borrow_props: str = "", parent_max: int = 600) -> str:
    return f"""
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: parent
            resources:
              max: {{memory: {parent_max}}}
            queues:
              - name: short
                resources:
                  guaranteed: {{memory: 300}}
                properties:
                  preemption.delay: 10s
              - name: borrow
{borrow_props}
          - name: other
"""


def fill(core, rm: t.RecordingRM, app_id: str, count: int, **kwargs: object) -> None:
    for index in range(count):
        core.update_allocation(ask(app_id, f"{app_id}-{index}", SMALL, **kwargs))  # type: ignore[arg-type]
    core.wait_until_idle()


def test_a_full_parent_max_is_freed_though_a_node_has_room() -> None:
    with preempting_core(config()) as (core, rm, clock):
        add_nodes(core, rm, ["n1", "n2"], NODE)
        add_apps(
            core, rm, {"borrower": "root.parent.borrow", "bystander": "root.other", "hi": "root.parent.short"}
        )
        fill(core, rm, "borrower", 6)  # the parent's max (600) is full
        fill(core, rm, "bystander", 4)
        assert rm.wait_for_allocations(10)
        core.update_allocation(ask("hi", "urgent", {"memory": 200}, preempt_other=True))
        advance(core, clock, 9.0, cycle=False)
        assert preempted(rm) == []  # within its delay: the nodes' room does not help, the parent is full
        advance(core, clock, 1.5)
        assert rm.wait_for(lambda r: len(preempted(r)) == 2)
        releases = preempted(rm)
        # the newest of the borrower's go; the bystander outside the full parent is never touched
        assert {r.allocation_key for r in releases} == {"borrower-5", "borrower-4"}
        assert all(
            r.message == "preempting allocations to free up resources to run ask: urgent" for r in releases
        )
        # the room on the nodes is not reserved (the headroom was short, as YuniKorn): once the RM
        # confirms, the ask is placed the usual way
        core.update_allocation(rm.take_confirmations())
        core.wait_until_idle()
        assert rm.wait_for(lambda r: any(a.allocation_key == "urgent" for a in r.live.values()))
        assert "urgent" in live_keys(core, "hi")
        assert core.queue(P, "root.parent").allocated == {"memory": 600}
        assert settle(core, rm) == []


def test_no_victim_when_the_ask_would_pass_its_own_guarantee() -> None:
    with preempting_core(config()) as (core, rm, clock):
        add_nodes(core, rm, ["n1", "n2"], NODE)
        add_apps(core, rm, {"borrower": "root.parent.borrow", "hi": "root.parent.short"})
        fill(core, rm, "borrower", 6)
        assert rm.wait_for_allocations(6)
        # 400 is above the short queue's guarantee (300): preemption only gets a queue to it
        core.update_allocation(ask("hi", "urgent", {"memory": 400}, preempt_other=True))
        advance(core, clock, 11.0, cycle=False)
        advance(core, clock, 16.0, cycle=False)
        assert preempted(rm) == []
        assert "urgent" not in live_keys(core, "hi")
        assert settle(core, rm) == []


def test_a_priority_fenced_sibling_above_the_ask_is_out_of_reach() -> None:
    props = (
        "                properties:\n"
        "                  priority.policy: fence\n"
        '                  priority.offset: "5"'
    )
    with preempting_core(config(props)) as (core, rm, clock):
        add_nodes(core, rm, ["n1", "n2"], NODE)
        add_apps(
            core,
            rm,
            {"borrower": "root.parent.borrow", "hi": "root.parent.short", "top": "root.parent.short"},
        )
        fill(core, rm, "borrower", 6)
        assert rm.wait_for_allocations(6)
        # priority 3 is below the fence's offset (5): nothing of the fenced sibling may go
        core.update_allocation(ask("hi", "low-urgent", {"memory": 200}, priority=3, preempt_other=True))
        advance(core, clock, 11.0, cycle=False)
        assert preempted(rm) == []
        # priority 5 reaches it: every allocation inside is then a candidate, whatever its priority
        core.update_allocation(ask("top", "urgent", {"memory": 100}, priority=5, preempt_other=True))
        advance(core, clock, 11.0)
        assert rm.wait_for(lambda r: len(preempted(r)) >= 1)
        assert {r.application_id for r in preempted(rm)} == {"borrower"}


def test_a_second_attempt_comes_without_a_tick() -> None:
    """An ask short of headroom is neither reserved nor outstanding: the scheduler wakes itself for
    its next attempt (15 s on). Here ticks are an hour apart."""
    clock = Clock()
    rm = t.RecordingRM("rm")
    with korral.start(**{**FAST, "scheduling_interval": 3600.0}, clock=clock) as core:
        core.register_resource_manager(t.register("rm", config()), rm)
        add_nodes(core, rm, ["n1", "n2"], NODE)
        add_apps(core, rm, {"borrower": "root.parent.borrow", "hi": "root.parent.short"})
        fill(core, rm, "borrower", 6)
        assert rm.wait_for_allocations(6)
        core.update_allocation(ask("hi", "first", {"memory": 200}, preempt_other=True))
        core.update_allocation(ask("hi", "second", {"memory": 100}, preempt_other=True))
        core.wait_until_idle()
        clock.now += 11.0
        core.poke_timers()
        # the first frees its headroom; the second needs nothing while those victims go
        assert rm.wait_for(lambda r: len(preempted(r)) == 2)
        core.update_allocation(rm.take_confirmations())
        core.wait_until_idle()
        assert rm.wait_for(lambda r: any(a.allocation_key == "first" for a in r.live.values()))
        # the parent is full again: the second may try 15 s after its last attempt
        clock.now += 16.0
        core.poke_timers()
        assert rm.wait_for(lambda r: len(preempted(r)) == 3)
