"""Every state that time alone ends wakes the core itself (docs/architecture.md, Timed states): an
idle core, sent nothing after the setup, ends it on time. The simulated runtime's virtual clock makes
each deadline exact; the scheduler's periodic tick is set to an hour so that only the state's own
wake-up can end it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import attrs
from core_helpers import eventually, part
from gang_requests import PH, gang_app, gang_asks

import korral
from korral import si
from korral import testing as t

P = part()
T = si.TerminationType
QUIET = {"scheduling_interval": 3600.0}


@contextmanager
def quiet_core(config: str, seed: int = 7, **settings: float) -> Iterator[tuple[korral.Core, t.RecordingRM]]:
    rm = t.RecordingRM("rm")
    with korral.start(runtime="simulated", seed=seed, **{**QUIET, **settings}) as core:
        core.register_resource_manager(t.register("rm", config), rm)
        yield core, rm


def released(rm: t.RecordingRM, kind: si.TerminationType) -> list[str]:
    with rm.lock:
        return sorted(r.allocation_key for r in rm.released if r.termination_type == kind)


def preemptor(app_id: str, key: str, resource: dict[str, int]) -> si.AllocationRequest:
    request = t.asks("rm", app_id, 1, resource, prefix=key)
    policy = si.PreemptionPolicy(allow_preempt_self=True, allow_preempt_other=True)
    return attrs.evolve(request, asks=[attrs.evolve(request.asks[0], preemption_policy=policy)])


BACKOFF = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: q
            properties:
              application.unschedasks.backoff: "2"
              application.unschedasks.backoff.delay: 2s
"""


def test_a_backed_off_application_retries_when_its_delay_ends_on_a_quiet_cluster() -> None:
    with quiet_core(BACKOFF) as (core, rm):
        core.update_node(t.nodes("rm", ["n1", "n2"], {"memory": 100}))
        core.update_application(t.applications("rm", {"app": "root.q"}))
        # two asks that fit no node, tried first (higher priority), then a small one
        big = t.asks("rm", "app", 2, {"memory": 150}, prefix="big-", priority=10)
        small = t.asks("rm", "app", 1, {"memory": 10}, prefix="small-")
        core.update_allocation(attrs.evolve(big, asks=[*big.asks, *small.asks]))
        core.wait_until_idle()
        assert core.application(P, "app").backoff_deadline is not None
        assert rm.allocated_total == 0
        # the RM withdraws the two that fit nowhere: nothing left that would wake the scheduler
        core.update_allocation(t.release_asks("rm", "app", "big-0"))
        core.update_allocation(t.release_asks("rm", "app", "big-1"))
        core.wait_until_idle()
        assert rm.allocated_total == 0  # still backing off
        core.advance(1.9)
        assert rm.allocated_total == 0
        core.advance(0.2)  # past the 2 s deadline, with no RM traffic
        assert rm.allocated_total == 1


ONE_LEAF = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: q
"""


def fill_two_nodes(core: korral.Core, filler_queue: str) -> None:
    """Two nodes of 100 each 60 full; then an ask of 60 in root.q fits the cluster but no node."""
    core.update_node(t.nodes("rm", ["n1", "n2"], {"memory": 100}))
    core.update_application(t.applications("rm", {"filler": filler_queue, "waiter": "root.q"}))
    core.update_allocation(t.asks("rm", "filler", 2, {"memory": 60}))
    core.wait_until_idle()
    core.update_allocation(t.asks("rm", "waiter", 1, {"memory": 60}))
    core.wait_until_idle()


def reserved(core: korral.Core) -> list[str]:
    """The applications holding a reservation on a node."""
    return sorted(app_id for node in ("n1", "n2") for app_id in core.node(P, node).reservations)


def test_an_ask_that_fits_no_node_reserves_one_when_its_reservation_delay_ends() -> None:
    with quiet_core(ONE_LEAF, reservation_delay=5.0) as (core, _rm):
        fill_two_nodes(core, "root.q")
        core.advance(4.9)
        assert reserved(core) == []
        core.advance(0.2)
        assert reserved(core) == ["waiter"]


LIMITED = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: other
          - name: q
            resources:
              max: {memory: %d}
"""


def test_a_reservation_whose_headroom_stays_short_is_cancelled_when_its_wait_ends() -> None:
    # a held reservation is retried every scheduling cycle (the tick), as YuniKorn does
    with quiet_core(LIMITED % 200, reservation_delay=1.0, scheduling_interval=1.0) as (core, _rm):
        fill_two_nodes(core, "root.other")
        core.advance(1.5)
        assert reserved(core) == ["waiter"]
        # the queue's max drops under the ask: its headroom stays short, the reservation waits an hour
        core.update_configuration(si.UpdateConfigurationRequest(rm_id="rm", config=LIMITED % 50))
        core.wait_until_idle()
        core.advance(3599.4)  # reserved at 1 s: the wait runs out past 3601 s (the tick after)
        assert reserved(core) == ["waiter"]
        core.advance(1.5)
        assert reserved(core) == []


PREEMPTION = """
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
"""


def test_an_ask_preempts_when_its_preemption_delay_ends() -> None:
    with quiet_core(PREEMPTION) as (core, rm):
        core.update_node(t.nodes("rm", ["n1"], {"memory": 1000}))
        core.update_application(t.applications("rm", {"low-app": "root.low", "hi": "root.high"}))
        core.update_allocation(t.asks("rm", "low-app", 10, {"memory": 100}, prefix="low-"))
        core.wait_until_idle()
        core.update_allocation(preemptor("hi", "urgent", {"memory": 300}))
        core.wait_until_idle()
        core.advance(9.9)
        assert released(rm, T.PREEMPTED_BY_SCHEDULER) == []
        core.advance(0.2)
        assert len(released(rm, T.PREEMPTED_BY_SCHEDULER)) == 3


QUOTA = """
partitions:
  - name: default
    preemption:
      quotapreemptionenabled: true
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: team
            resources:
              max: {memory: %d}
            properties:
              quota.preemption.delay: 5m
"""


def test_a_queue_over_a_lowered_max_is_preempted_when_its_delay_ends() -> None:
    with quiet_core(QUOTA % 2000) as (core, rm):
        core.update_node(t.nodes("rm", ["n1"], {"memory": 1000}))
        core.update_application(t.applications("rm", {"app": "root.team"}))
        core.update_allocation(t.asks("rm", "app", 10, {"memory": 100}))
        core.wait_until_idle()
        core.update_configuration(si.UpdateConfigurationRequest(rm_id="rm", config=QUOTA % 700))
        core.wait_until_idle()
        core.advance(299.0)
        assert released(rm, T.PREEMPTED_BY_SCHEDULER) == []
        core.advance(2.0)
        assert len(released(rm, T.PREEMPTED_BY_SCHEDULER)) == 3


GANG = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: gang
"""


def test_placeholders_never_replaced_are_released_when_their_timeout_ends() -> None:
    with quiet_core(GANG, placeholder_timeout=60.0) as (core, rm):
        core.update_node(t.nodes("rm", ["n1"], {"memory": 1000, "vcore": 1000}))
        core.update_application(gang_app(placeholders=2))
        core.update_allocation(gang_asks("g", 2, PH, placeholder=True))
        core.wait_until_idle()
        assert rm.allocated_total == 2
        core.advance(59.0)
        assert released(rm, T.TIMEOUT) == []
        core.advance(2.0)
        assert released(rm, T.TIMEOUT) == ["ph-0", "ph-1"]


def test_an_allocation_is_released_when_its_execution_timeout_ends() -> None:
    with quiet_core(GANG) as (core, rm):
        core.update_node(t.nodes("rm", ["n1"], {"memory": 1000}))
        core.update_application(t.applications("rm", {"p": "root.gang"}))
        core.update_allocation(t.asks("rm", "p", 1, {"memory": 50}, execution_timeout_ms=30_000))
        core.wait_until_idle()
        assert rm.allocated_total == 1
        core.advance(29.0)
        assert released(rm, T.TIMEOUT) == []
        core.advance(2.0)
        assert released(rm, T.TIMEOUT) == ["p-ask-0"]


def test_a_completing_application_completes_when_its_timeout_ends() -> None:
    with quiet_core(ONE_LEAF, completing_timeout=30.0) as (core, rm):
        core.update_node(t.nodes("rm", ["n1"], {"memory": 1000}))
        core.update_application(t.applications("rm", {"app": "root.q"}))
        core.update_allocation(t.asks("rm", "app", 1, {"memory": 50}))
        core.wait_until_idle()
        (uuid,) = rm.live
        core.update_allocation(t.release("rm", "app", uuid=uuid))
        core.wait_until_idle()
        assert core.application(P, "app").state == "Completing"
        core.advance(29.0)
        assert core.application(P, "app").state == "Completing"
        core.advance(2.0)
        assert rm.app_states["app"][-1] == "Completed"


DYNAMIC = """
partitions:
  - name: default
    placementrules:
      - name: provided
        create: true
    queues:
      - name: root
        submitacl: "*"
"""


def test_a_dynamic_queue_left_empty_is_removed_at_the_next_cleanup() -> None:
    with quiet_core(DYNAMIC, queue_cleanup_interval=10.0, completing_timeout=1.0) as (core, _rm):
        core.update_node(t.nodes("rm", ["n1"], {"memory": 1000}))
        core.update_application(t.applications("rm", {"app": "root.dyn"}))
        core.wait_until_idle()
        assert core.queue(P, "root.dyn") is not None
        core.update_application(t.remove_applications("rm", ["app"]))
        core.wait_until_idle()
        assert core.queue(P, "root.dyn") is not None  # empty, until the cleanup runs (every 10 s)
        core.advance(10.5)
        assert core.queue(P, "root.dyn") is None


class Clock:
    """The threaded runtime's clock, moved by hand (``korral.start(clock=...)``, ``poke_timers``)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_threaded_runtime_wakes_a_backed_off_application_on_its_clock() -> None:
    clock = Clock()
    rm = t.RecordingRM("rm")
    with korral.start(clock=clock, **QUIET) as core:
        core.register_resource_manager(t.register("rm", BACKOFF), rm)
        core.update_node(t.nodes("rm", ["n1", "n2"], {"memory": 100}))
        core.update_application(t.applications("rm", {"app": "root.q"}))
        big = t.asks("rm", "app", 2, {"memory": 150}, prefix="big-", priority=10)
        small = t.asks("rm", "app", 1, {"memory": 10}, prefix="small-")
        core.update_allocation(attrs.evolve(big, asks=[*big.asks, *small.asks]))
        core.wait_until_idle()
        assert eventually(lambda: core.application(P, "app").backoff_deadline is not None)
        core.update_allocation(t.release_asks("rm", "app", "big-0"))
        core.update_allocation(t.release_asks("rm", "app", "big-1"))
        core.wait_until_idle()
        clock.now += 2.5
        core.poke_timers()
        assert rm.wait_for_allocations(1)


def test_a_preemptor_tries_again_15_seconds_after_an_attempt_that_failed() -> None:
    refused = {"urgent-0"}  # the RM's predicates refuse the preemptor anywhere, for now
    rm = t.RecordingRM("rm", predicate=lambda args: args.allocation_key not in refused)
    with korral.start(runtime="simulated", seed=7, **QUIET) as core:
        core.register_resource_manager(t.register("rm", PREEMPTION), rm)
        core.update_node(t.nodes("rm", ["n1"], {"memory": 1000}))
        core.update_application(t.applications("rm", {"low-app": "root.low", "hi": "root.high"}))
        core.update_allocation(t.asks("rm", "low-app", 10, {"memory": 100}, prefix="low-"))
        core.wait_until_idle()
        core.update_allocation(preemptor("hi", "urgent-", {"memory": 300}))
        core.wait_until_idle()
        core.advance(10.5)  # its delay is over: the attempt finds no node the RM accepts
        assert released(rm, T.PREEMPTED_BY_SCHEDULER) == []
        refused.clear()  # the RM's mind changes; it says nothing to the core
        core.advance(14.0)
        assert released(rm, T.PREEMPTED_BY_SCHEDULER) == []
        core.advance(1.0)  # 15 s after the attempt
        assert len(released(rm, T.PREEMPTED_BY_SCHEDULER)) == 3
