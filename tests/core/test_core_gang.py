"""Gang scheduling and timeouts end to end through ``korral.Core`` (api.md "Time limits, gang
scheduling"; reference 2.12, 2.17, 2.18).

Timeouts are tiny (tens of milliseconds) or driven by a fake clock; every test waits for state (the
RM's callbacks, ``wait_until_idle``), never for a stopwatch.
"""

from __future__ import annotations

from core_helpers import FAST, add_nodes, check_invariants, eventually, part, running, wait_app_state
from gang_requests import PH, gang_app, gang_asks

import korral
from korral import si
from korral import testing as t
from korral.harness import invariants
from korral.model import events

T = si.TerminationType
NODE = {"memory": 1000, "vcore": 1000}
CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: gang
            resources:
              max: {memory: 1000, vcore: 10}
          - name: fair
            properties:
              application.sort.policy: fair
"""
P = part()


def settle(core: korral.Core, rm: t.RecordingRM) -> list[str]:
    """Every invariant holds, the RM's view included (call once idle)."""
    state = invariants.stable_collect(core, P)
    assert state is not None
    return invariants.check_partition(state) + invariants.check_rm_view(rm, [state])


def core_releases(rm: t.RecordingRM, kind: si.TerminationType) -> list[si.AllocationRelease]:
    with rm.lock:
        return [r for r in rm.released if r.termination_type == kind]


def test_gang_admission_is_checked_with_yunikorns_reasons() -> None:
    with running(CONFIG) as (core, rm):
        add_nodes(core, rm, ["n1"], NODE)
        core.update_application(gang_app("too-big", placeholders=11))
        core.update_application(gang_app("not-fifo", queue="root.fair", placeholders=2))
        core.update_application(gang_app("fits", placeholders=10))
        core.wait_until_idle()
        assert "task group request" in rm.rejected_apps["too-big"]
        assert "larger than max queue allocation" in rm.rejected_apps["too-big"]
        assert rm.rejected_apps["not-fifo"].endswith("with task group request: unsupported sort type")
        assert "fits" in rm.accepted_apps


def test_placeholders_then_replacement_on_the_rms_confirmation() -> None:
    with running(CONFIG) as (core, rm):
        add_nodes(core, rm, ["n1", "n2"], NODE)
        core.update_application(gang_app(placeholders=2))
        core.update_allocation(gang_asks("g", 1, PH, placeholder=True))
        core.wait_until_idle()
        app = core.application(P, "g")
        assert app.state == "Accepted" and app.placeholder == PH  # waits for all its placeholders
        core.update_allocation(gang_asks("g", 1, PH, placeholder=True, prefix="ph2"))
        core.wait_until_idle()
        app = core.application(P, "g")
        assert app.state == "Running" and app.placeholder == {"memory": 200, "vcore": 200}
        placeholders = {a.uuid: a for a in app.allocations}

        core.update_allocation(gang_asks("g", 1, {"memory": 60, "vcore": 100}, placeholder=False))
        # a real ask larger than any placeholder is scheduled normally
        core.update_allocation(gang_asks("g", 1, {"memory": 300}, placeholder=False, prefix="big"))
        core.wait_until_idle()
        (replaced,) = core_releases(rm, T.PLACEHOLDER_REPLACED)
        assert replaced.uuid in placeholders
        app = core.application(P, "g")
        assert {a.allocation_key for a in app.allocations if not a.placeholder} == {"big-0"}
        # until the RM confirms, the placeholder is booked everywhere: node, queue, application
        assert app.placeholder == {"memory": 200, "vcore": 200}
        node_id = placeholders[replaced.uuid].node_id
        assert replaced.uuid in {a.uuid for a in core.node(P, node_id).allocations}
        assert core.queue(P, "root.gang").allocated == {"memory": 500, "vcore": 200}
        assert settle(core, rm) == []

        confirmation = rm.take_confirmations()
        core.update_allocation(confirmation)
        core.wait_until_idle()
        app = core.application(P, "g")
        (real,) = [a for a in app.allocations if a.allocation_key == "real-0"]
        assert real.node_id == node_id and real.uuid in rm.live
        assert app.placeholder == PH
        assert app.allocated == {"memory": 460, "vcore": 200}
        assert core.queue(P, "root.gang").allocated == {"memory": 460, "vcore": 200}
        node = core.node(P, node_id)
        assert replaced.uuid not in {a.uuid for a in node.allocations}
        # a second confirmation changes nothing
        core.update_allocation(confirmation)
        core.wait_until_idle()
        assert core.application(P, "g").allocated == {"memory": 460, "vcore": 200}
        assert settle(core, rm) == []
        state = invariants.stable_collect(core, P)
        assert state is not None and invariants.check_releases_confirmed(state) == []
        check_invariants(core, P, rm)
        with rm.lock:
            details = {e.event_change_detail for e in rm.events if e.reference_id == replaced.uuid}
        assert events.Detail.ALLOC_REPLACED in details


def test_soft_placeholder_timeout_resumes_the_gang_as_a_normal_application() -> None:
    with running(CONFIG) as (core, rm):
        # the cluster holds the gang (admission) but other work leaves room for two placeholders of three
        add_nodes(core, rm, ["n1"], {"memory": 300, "vcore": 1000}, occupied={"memory": 50})
        core.update_application(gang_app(placeholders=3, timeout_ms=30))
        core.update_allocation(gang_asks("g", 3, PH, placeholder=True))  # two fit
        core.update_allocation(gang_asks("g", 1, {"memory": 240}, placeholder=False))  # waits
        assert rm.wait_for(lambda r: len(core_releases(r, T.TIMEOUT)) == 2)
        wait_app_state(core, P, "g", "Accepted")
        assert rm.app_states["g"][-2:] == ["Resuming", "Accepted"]
        with rm.lock:
            assert [r.allocation_key for r in rm.released_asks] == ["ph-2"]
        core.wait_until_idle()
        assert core.application(P, "g").placeholder == {"memory": 200, "vcore": 200}  # not confirmed yet
        core.update_allocation(rm.take_confirmations())
        core.wait_until_idle()
        app = core.application(P, "g")
        assert [a.allocation_key for a in app.allocations] == ["real-0"]  # scheduled normally
        assert app.placeholder == {} and app.state == "Running"
        assert settle(core, rm) == []
        with rm.lock:
            details = {e.event_change_detail for e in rm.events}
        assert {
            events.Detail.ALLOC_TIMEOUT,
            events.Detail.REQUEST_TIMEOUT,
            events.Detail.APP_RESUMING,
        } <= details


def test_hard_placeholder_timeout_fails_the_gang() -> None:
    with running(CONFIG) as (core, rm):
        add_nodes(core, rm, ["n1"], {"memory": 200, "vcore": 1000}, occupied={"memory": 50})
        core.update_application(gang_app(placeholders=2, timeout_ms=30, style="Hard"))
        core.update_allocation(gang_asks("g", 2, PH, placeholder=True))  # one fits
        assert rm.wait_for(lambda r: len(core_releases(r, T.TIMEOUT)) == 1)
        wait_app_state(core, P, "g", "Failing")
        core.update_allocation(rm.take_confirmations())
        core.wait_until_idle()
        assert rm.app_states["g"][-2:] == ["Failing", "Failed"]
        assert core.application(P, "g") is None or core.application(P, "g").state == "Failed"
        assert core.queue(P, "root.gang").allocated == {}
        assert settle(core, rm) == []


def test_an_ask_execution_timeout_releases_its_allocations() -> None:
    with running(CONFIG) as (core, rm):
        add_nodes(core, rm, ["n1"], NODE)
        core.update_application(t.applications("rm", {"p": "root.gang"}))
        request = t.asks("rm", "p", 2, {"memory": 100})
        timed = si.AllocationRequest(
            rm_id="rm",
            asks=[
                si.AllocationAsk(
                    allocation_key="timed",
                    application_id="p",
                    resource_ask={"memory": 50},
                    max_allocations=2,
                    execution_timeout_milliseconds=20,
                )
            ],
        )
        core.update_allocation(request)
        core.update_allocation(timed)
        assert rm.wait_for(lambda r: len(core_releases(r, T.TIMEOUT)) == 2)
        assert {r.allocation_key for r in core_releases(rm, T.TIMEOUT)} == {"timed"}
        core.wait_until_idle()
        assert core.queue(P, "root.gang").allocated == {"memory": 300}  # booked until confirmed
        assert settle(core, rm) == []
        core.update_allocation(rm.take_confirmations())
        core.wait_until_idle()
        assert core.queue(P, "root.gang").allocated == {"memory": 200}
        assert core.application(P, "p").state == "Running"
        assert settle(core, rm) == []


def test_an_application_execution_timeout_fails_it() -> None:
    with running(CONFIG) as (core, rm):
        add_nodes(core, rm, ["n1"], NODE)
        core.update_application(
            si.ApplicationRequest(
                rm_id="rm",
                new=[
                    si.AddApplicationRequest(
                        application_id="p",
                        queue_name="root.gang",
                        ugi=si.UserGroupInformation(user="u"),
                        execution_timeout_milliseconds=30,
                    )
                ],
            )
        )
        core.update_allocation(t.asks("rm", "p", 2, {"memory": 400}))
        core.update_allocation(t.asks("rm", "p", 1, {"memory": 900}, prefix="big-"))  # never fits
        wait_app_state(core, P, "p", "Failing")
        core.wait_until_idle()
        assert len(core_releases(rm, T.TIMEOUT)) == 2
        with rm.lock:
            assert [r.allocation_key for r in rm.released_asks] == ["big-0"]
        core.update_allocation(rm.take_confirmations())
        core.wait_until_idle()
        assert rm.app_states["p"][-2:] == ["Failing", "Failed"]
        assert core.queue(P, "root.gang").allocated == {}
        assert settle(core, rm) == []


def test_recovered_placeholders_are_replaced() -> None:
    with running(CONFIG) as (core, rm):
        core.update_application(gang_app(placeholders=2))
        core.wait_until_idle()
        existing = [
            si.Allocation(
                allocation_key=f"ph-{index}",
                uuid=f"old-{index}",
                application_id="g",
                node_id="n1",
                resource_per_alloc=dict(PH),
                placeholder=True,
                task_group_name="tg",
            )
            for index in range(2)
        ]
        add_nodes(core, rm, ["n1"], NODE, existing=existing)
        assert core.application(P, "g").placeholder == {"memory": 200, "vcore": 200}
        core.update_allocation(gang_asks("g", 2, PH, placeholder=False))
        core.wait_until_idle()
        assert {r.uuid for r in core_releases(rm, T.PLACEHOLDER_REPLACED)} == {"old-0", "old-1"}
        core.update_allocation(rm.take_confirmations())
        core.wait_until_idle()
        app = core.application(P, "g")
        assert app.placeholder == {} and {a.allocation_key for a in app.allocations} == {"real-0", "real-1"}
        for allocation in app.allocations:
            core.update_allocation(t.release("rm", "g", uuid=allocation.uuid))
        wait_app_state(core, P, "g", "Completing")
        assert settle(core, rm) == []


def test_the_timers_run_on_an_injectable_clock() -> None:
    """The default placeholder timeout (15 minutes), passed on a fake clock: no waiting."""
    clock = [1000.0]
    rm = t.RecordingRM("rm")
    with korral.start(**FAST, clock=lambda: clock[0]) as core:
        core.register_resource_manager(t.register("rm", CONFIG), rm)
        add_nodes(core, rm, ["n1"], NODE)
        core.update_application(gang_app(placeholders=3))
        core.update_allocation(gang_asks("g", 2, PH, placeholder=True))
        core.wait_until_idle()
        assert core_releases(rm, T.TIMEOUT) == []
        clock[0] += 899.0
        core.poke_timers()
        core.wait_until_idle()
        assert core_releases(rm, T.TIMEOUT) == []
        clock[0] += 1.0
        core.poke_timers()
        assert rm.wait_for(lambda r: len(core_releases(r, T.TIMEOUT)) == 2)
        eventually(lambda: rm.app_states["g"][-1:] == ["Accepted"] or rm.app_states["g"][-1:] == ["Resuming"])


LIMITED = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: gang
            limits:
              - limit: every user
                users: ["*"]
                maxresources: {memory: 200}
"""


def test_a_smaller_replacement_frees_the_users_limit_by_the_difference() -> None:
    """Two placeholders of 100 fill the user's 200; real asks of 40 replace them. Once the RM confirms,
    the user holds 80, so an ask of 120 fits its limit and is placed (the limit tracker counting the
    placeholders' size instead kept it pending, below the limit, for ever)."""
    with running(LIMITED) as (core, rm):
        add_nodes(core, rm, ["n1"], NODE)
        core.update_application(gang_app(placeholders=2))
        core.update_allocation(gang_asks("g", 2, PH, placeholder=True))
        core.wait_until_idle()
        assert core.application(P, "g").placeholder == {"memory": 200, "vcore": 200}
        core.update_allocation(gang_asks("g", 2, {"memory": 40, "vcore": 100}))
        core.wait_until_idle()
        assert len(core_releases(rm, T.PLACEHOLDER_REPLACED)) == 2
        core.update_allocation(rm.take_confirmations())
        core.wait_until_idle()
        usage = core.user_usage(P, "u")
        assert usage is not None and usage.queues[-1].resource == {"memory": 80, "vcore": 200}
        core.update_allocation(gang_asks("g", 1, {"memory": 120, "vcore": 100}, prefix="more"))
        core.wait_until_idle()
        assert any(a.allocation_key == "more-0" for a in rm.live.values())
        assert settle(core, rm) == []
