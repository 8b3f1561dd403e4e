"""End-to-end: applications through ``core.update_application``: placement, lifecycle, removal."""

from __future__ import annotations

import time

from core_helpers import (
    MB,
    SINGLE_LEAF,
    SMALL,
    add_apps,
    add_nodes,
    check_invariants,
    eventually,
    mem,
    part,
    release_kinds,
    running,
    wait_app_state,
)

from korral import si
from korral import testing as t

P = part()

PROVIDED = """
partitions:
  - name: default
    placementrules:
      - name: provided
        create: false
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
            maxapplications: 1
          - name: b
          - name: parent
            parent: true
"""

TAG_CREATE = """
partitions:
  - name: default
    placementrules:
      - name: tag
        value: namespace
        create: true
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: static
"""

ACL = """
partitions:
  - name: default
    queues:
      - name: root
        queues:
          - name: private
            submitacl: alice
"""


def test_provided_rule_places_or_rejects_with_a_reason():
    with running(PROVIDED) as (core, rm):
        core.update_application(
            t.applications("rm", {"app-a": "root.a", "app-b": "root.B", "missing": "root.nope", "none": ""})
        )
        # YuniKorn reads "root." as given: ROOT.B is the short name root.root_dot_b, which does not exist
        core.update_application(t.applications("rm", {"upper": "ROOT.B"}))
        core.update_application(t.applications("rm", {"on-parent": "root.parent"}))
        core.wait_until_idle()
        assert sorted(rm.accepted_apps) == ["app-a", "app-b"]
        assert set(rm.rejected_apps) == {"missing", "none", "on-parent", "upper"}
        assert all(reason for reason in rm.rejected_apps.values())
        assert core.application(P, "app-a").queue == "root.a"
        assert core.application(P, "app-b").queue == "root.b"
        assert core.application(P, "app-a").state == "New"
        assert core.application(P, "missing") is None
        assert core.queue(P, "root.nope") is None
        assert core.queue(P, "root.a").applications == ["app-a"]
        assert core.partition(P).application_count == 2
        # rejected applications never get an application state update
        assert "missing" not in rm.app_states


def test_tag_rule_with_create_makes_a_dynamic_queue():
    with running(TAG_CREATE) as (core, rm):
        add_apps(core, rm, {"app1": ""}, tags={"namespace": "dev"})
        add_apps(core, rm, {"app2": ""}, tags={"namespace": "static"})
        app1 = core.application(P, "app1")
        assert app1.queue == "root.dev"
        queue = core.queue(P, "root.dev")
        assert queue.is_leaf and not queue.is_managed and queue.state == "Active"
        assert queue.applications == ["app1"]
        assert core.application(P, "app2").queue == "root.static"
        assert core.queue(P, "root.static").is_managed
        assert core.queue(P, "root").children == ["root.dev", "root.static"]


def test_submit_acl_is_enforced():
    with running(ACL) as (core, rm):
        add_apps(core, rm, {"ok": "root.private"}, user="alice")
        core.update_application(t.applications("rm", {"denied": "root.private"}, user="bob"))
        core.wait_until_idle()
        assert rm.rejected_apps.get("denied")
        assert core.queue(P, "root.private").applications == ["ok"]


def test_empty_user_is_rejected():
    with running(PROVIDED) as (core, rm):
        core.update_application(t.applications("rm", {"anon": "root.b"}, user=""))
        core.wait_until_idle()
        assert "user" in rm.rejected_apps["anon"]


def test_duplicate_application_is_rejected_and_the_first_stays():
    with running(PROVIDED) as (core, rm):
        add_apps(core, rm, {"app1": "root.a"})
        core.update_application(t.applications("rm", {"app1": "root.b"}))
        core.wait_until_idle()
        assert rm.accepted_apps == ["app1"]
        assert "exists" in rm.rejected_apps["app1"]
        assert core.application(P, "app1").queue == "root.a"


def test_remove_application_releases_its_allocations_and_asks():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1", "n2"])
        add_apps(core, rm, {"app1": "root.singleleaf", "app2": "root.singleleaf"})
        core.update_allocation(t.asks("rm", "app1", 20, SMALL))
        core.wait_until_idle()
        assert rm.allocated_total == 15
        assert mem(core.queue(P, "root.singleleaf").pending) == 50 * MB
        core.update_allocation(t.asks("rm", "app2", 1, SMALL))
        core.update_application(t.remove_applications("rm", ["app1"]))
        core.wait_until_idle()
        released = rm.release_reasons()
        assert len(released) == 15
        assert set(release_kinds(rm)) == {si.TerminationType.STOPPED_BY_RM}
        assert all(rm.live[uuid].application_id != "app1" for uuid in rm.live)
        assert core.application(P, "app1") is None
        leaf = core.queue(P, "root.singleleaf")
        assert leaf.applications == ["app2"]
        # app1's pending asks went with it; app2 got the room
        assert leaf.pending == {} and mem(leaf.allocated) == 10 * MB
        assert rm.allocated_total == 16
        assert all(n.allocated == {} or n.allocated == SMALL for n in core.nodes(P))
        check_invariants(core, P, rm)
        # the id can be used again
        add_apps(core, rm, {"app1": "root.singleleaf"})
        assert core.application(P, "app1").allocations == []


def test_remove_unknown_application_is_ignored():
    with running(SINGLE_LEAF) as (core, rm):
        core.update_application(t.remove_applications("rm", ["ghost"]))
        core.wait_until_idle()
        assert rm.rejected_apps == {} and rm.released == []


def test_max_applications_second_app_waits_for_the_first_to_complete():
    with running(PROVIDED) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": "root.a", "app2": "root.a"})
        assert core.queue(P, "root.a").max_applications == 1
        core.update_allocation(t.asks("rm", "app1", 2, SMALL))
        core.wait_until_idle()
        core.update_allocation(t.asks("rm", "app2", 2, SMALL))
        core.wait_until_idle()
        assert set(rm.live_by_app()) == {"app1"}
        app2 = core.application(P, "app2")
        assert app2.state == "Accepted" and mem(app2.pending) == 20 * MB
        # another queue is not limited
        add_apps(core, rm, {"app3": "root.b"})
        core.update_allocation(t.asks("rm", "app3", 1, SMALL))
        core.wait_until_idle()
        assert "app3" in rm.live_by_app()
        # app1 finishes: app2 may run
        core.update_allocation(t.release("rm", "app1"))
        core.wait_until_idle()
        assert rm.wait_for(lambda r: len(r.live_by_app().get("app2", {})) > 0, 5.0)
        core.wait_until_idle()
        assert mem(core.application(P, "app2").allocated) == 20 * MB
        check_invariants(core, P, rm)


def test_state_machine_through_callbacks_and_snapshots():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": "root.singleleaf"})
        assert core.application(P, "app1").state == "New"
        core.update_allocation(t.asks("rm", "app1", 2, SMALL))
        core.wait_until_idle()
        # two allocations: Accepted -> Starting -> Running (YuniKorn's state-aware start)
        assert rm.app_states["app1"] == ["Accepted", "Starting", "Running"]
        assert core.application(P, "app1").state == "Running"
        core.update_allocation(t.release("rm", "app1"))
        core.wait_until_idle()
        assert rm.app_states["app1"][-1] == "Completing"
        assert core.application(P, "app1").state == "Completing"
        # nothing left for completing_timeout: Completed
        assert rm.wait_for(lambda r: r.app_states["app1"][-1] == "Completed", 5.0)
        assert rm.app_states["app1"] == ["Accepted", "Starting", "Running", "Completing", "Completed"]
        wait_app_state(core, P, "app1", "Completed")
        info = core.application(P, "app1")
        assert info.allocated == {} and info.pending == {} and info.allocations == []
        # a completed application has left its queue
        eventually(lambda: core.queue(P, "root.singleleaf").applications == [])
        assert core.partition(P).application_count == 0


def test_single_allocation_stays_starting_then_completes():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": "root.singleleaf"})
        core.update_allocation(t.asks("rm", "app1", 1, SMALL))
        core.wait_until_idle()
        assert rm.app_states["app1"] == ["Accepted", "Starting"]
        core.update_allocation(t.release("rm", "app1"))
        assert rm.wait_for(lambda r: r.app_states["app1"][-1] == "Completed", 5.0)
        assert rm.app_states["app1"] == ["Accepted", "Starting", "Completing", "Completed"]


def test_state_aware_disabled_tag_goes_straight_to_running():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": "root.singleleaf"}, tags={si.APP_TAG_STATE_AWARE_DISABLE: "true"})
        core.update_allocation(t.asks("rm", "app1", 1, SMALL))
        core.wait_until_idle()
        assert rm.app_states["app1"][-1] == "Running"
        assert core.application(P, "app1").state == "Running"


def test_asks_removed_without_allocations_complete_the_application():
    with running(SINGLE_LEAF) as (core, rm):
        add_apps(core, rm, {"app1": "root.singleleaf"})
        core.update_allocation(t.asks("rm", "app1", 2, SMALL))
        core.wait_until_idle()
        assert rm.app_states["app1"] == ["Accepted"]
        core.update_allocation(t.release_asks("rm", "app1"))
        assert rm.wait_for(lambda r: r.app_states["app1"][-1] == "Completed", 5.0)
        assert rm.app_states["app1"] == ["Accepted", "Completing", "Completed"]


def test_new_ask_while_completing_returns_to_running():
    with running(SINGLE_LEAF, completing_timeout=5.0) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": "root.singleleaf"})
        core.update_allocation(t.asks("rm", "app1", 2, SMALL))
        core.wait_until_idle()
        core.update_allocation(t.release("rm", "app1"))
        core.wait_until_idle()
        assert core.application(P, "app1").state == "Completing"
        core.update_allocation(t.asks("rm", "app1", 1, SMALL, start=10))
        core.wait_until_idle()
        assert rm.app_states["app1"][-1] == "Running"
        app = core.application(P, "app1")
        assert app.state == "Running" and len(app.allocations) == 1
        check_invariants(core, P, rm)


def test_completed_application_cannot_get_asks_and_the_id_is_reusable():
    with running(SINGLE_LEAF) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": "root.singleleaf"})
        core.update_allocation(t.asks("rm", "app1", 1, SMALL))
        core.wait_until_idle()
        core.update_allocation(t.release("rm", "app1"))
        assert rm.wait_for(lambda r: r.app_states["app1"][-1] == "Completed", 5.0)
        core.wait_until_idle()
        core.update_allocation(t.asks("rm", "app1", 1, SMALL, start=5))
        core.wait_until_idle()
        assert [r.allocation_key for r in rm.rejected_asks] == ["app1-ask-5"]
        add_apps(core, rm, {"app1": "root.singleleaf"})
        assert core.application(P, "app1").state == "New"


def test_empty_dynamic_queue_is_removed_after_cleanup():
    with running(TAG_CREATE) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": ""}, tags={"namespace": "dev"})
        core.update_allocation(t.asks("rm", "app1", 1, SMALL))
        core.wait_until_idle()
        assert mem(core.queue(P, "root.dev").allocated) == 10 * MB
        core.update_allocation(t.release("rm", "app1"))
        assert rm.wait_for(lambda r: r.app_states["app1"][-1] == "Completed", 5.0)
        eventually(lambda: core.queue(P, "root.dev") is None)
        assert core.queue(P, "root").children == ["root.static"]
        # the managed queue stays although it is empty
        assert core.queue(P, "root.static") is not None
        # the namespace can come back
        add_apps(core, rm, {"app2": ""}, tags={"namespace": "dev"})
        core.update_allocation(t.asks("rm", "app2", 1, SMALL))
        core.wait_until_idle()
        assert mem(core.queue(P, "root.dev").allocated) == 10 * MB
        check_invariants(core, P, rm)


def test_dynamic_queue_with_an_application_is_kept():
    with running(TAG_CREATE) as (core, rm):
        add_apps(core, rm, {"app1": ""}, tags={"namespace": "dev"})
        core.update_allocation(t.asks("rm", "app1", 1, SMALL))
        core.wait_until_idle()
        # several cleanup intervals (0.2 s) pass: nothing to wait for but time itself
        time.sleep(0.7)
        core.wait_until_idle()
        assert core.queue(P, "root.dev").applications == ["app1"]


def test_an_earlier_completing_timer_does_not_complete_a_later_completing_period():
    with running(SINGLE_LEAF, completing_timeout=0.5) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app1": "root.singleleaf"})
        core.update_allocation(t.asks("rm", "app1", 2, SMALL))
        core.wait_until_idle()
        core.update_allocation(t.release("rm", "app1"))
        core.wait_until_idle()
        first_completing = time.monotonic()
        # back to Running before the timeout, then Completing again
        time.sleep(0.25)
        core.update_allocation(t.asks("rm", "app1", 1, SMALL, start=5))
        core.wait_until_idle()
        core.update_allocation(t.release("rm", "app1"))
        core.wait_until_idle()
        assert rm.app_states["app1"][-3:] == ["Completing", "Running", "Completing"]
        # the first period's timer has fired by now: it must not complete the second period early
        time.sleep(max(0.0, first_completing + 0.6 - time.monotonic()))
        assert core.application(P, "app1").state == "Completing"
        assert rm.wait_for(lambda r: r.app_states["app1"][-1] == "Completed", 5.0)
