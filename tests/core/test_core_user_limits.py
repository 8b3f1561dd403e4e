"""End-to-end: user and group limits from queues.yaml, through ``korral.Core`` (reference 2.7)."""

from __future__ import annotations

import threading
import time

from core_helpers import NODE, add_apps, add_nodes, check_invariants, mem, part, running

import korral
from korral import si
from korral import testing as t

P = part()
GB = 1_000_000_000
BIG_NODE = {"memory": 16 * GB, "vcore": 64_000}
ONE_GB = {"memory": GB, "vcore": 1_000}

LIMITS = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: team
            limits:
              - limit: every user
                users: ["*"]
                maxresources: {memory: 1G}
              - limit: dev group
                groups: [dev]
                maxresources: {memory: 3G}
                maxapplications: 2
            queues:
              - name: a
                limits:
                  - limit: one app per user
                    users: ["*"]
                    maxapplications: 1
              - name: b
          - name: free
"""


def _live_memory(rm: t.RecordingRM, app_id: str) -> int:
    return mem(rm.live_by_app().get(app_id, {}))


def test_user_gets_its_max_resources_not_what_it_asks():
    with running(LIMITS) as (core, rm):
        add_nodes(core, rm, ["n1"], BIG_NODE)
        add_apps(core, rm, {"app1": "root.team.b"}, user="alice")
        core.update_allocation(t.asks("rm", "app1", 3, ONE_GB))
        core.wait_until_idle()
        assert _live_memory(rm, "app1") == GB  # 1G of the 3G asked
        assert core.application(P, "app1").pending_asks == ["app1-ask-1", "app1-ask-2"]
        # the same asks outside the limited queue get everything
        add_apps(core, rm, {"app2": "root.free"}, user="alice")
        core.update_allocation(t.asks("rm", "app2", 3, ONE_GB))
        core.wait_until_idle()
        assert _live_memory(rm, "app2") == 3 * GB
        usage = core.user_usage(P, "alice")
        assert isinstance(usage, korral.UserUsageInfo) and usage.user == "alice"
        rows = {row.queue_path: row for row in usage.queues}
        assert mem(rows["root"].resource) == 4 * GB
        assert mem(rows["root.team"].resource) == GB and rows["root.team"].max_resources == {"memory": GB}
        assert rows["root.team.b"].running_applications == ["app1"]
        check_invariants(core, P, rm)
        # a release eases the limit: the next ask is placed
        uuid = next(a.uuid for a in rm.live.values() if a.application_id == "app1")
        core.update_allocation(t.release("rm", "app1", uuid=uuid))
        core.wait_until_idle()
        assert _live_memory(rm, "app1") == GB and len(core.application(P, "app1").pending_asks) == 1


def test_second_application_stays_accepted_until_the_first_ends():
    with running(LIMITS) as (core, rm):
        add_nodes(core, rm, ["n1"], BIG_NODE)
        add_apps(core, rm, {"first": "root.team.a"}, user="bob")
        core.update_allocation(t.asks("rm", "first", 1, {"memory": 100}))
        core.wait_until_idle()
        add_apps(core, rm, {"second": "root.team.a"}, user="bob")
        add_apps(core, rm, {"carol": "root.team.a"}, user="carol")
        core.update_allocation(t.asks("rm", "second", 1, {"memory": 100}))
        core.update_allocation(t.asks("rm", "carol", 1, {"memory": 100}))
        core.wait_until_idle()
        assert core.application(P, "second").state == "Accepted"
        assert _live_memory(rm, "carol") == 100  # the wildcard user limit is per user
        assert core.user_usage(P, "bob").queues[-1].running_applications == ["first"]
        uuid = next(a.uuid for a in rm.live.values() if a.application_id == "first")
        core.update_allocation(t.release("rm", "first", uuid=uuid))
        core.wait_until_idle()
        assert _live_memory(rm, "second") == 100
        assert core.application(P, "second").state in ("Starting", "Running")
        check_invariants(core, P, rm)


def test_group_limit_is_shared_by_its_members_and_the_lower_limit_wins():
    with running(LIMITS) as (core, rm):
        add_nodes(core, rm, ["n1"], BIG_NODE)
        for index, user in enumerate(("u1", "u2", "u3", "u4")):
            add_apps(core, rm, {f"app-{user}": "root.team.b"}, user=user, groups=["dev", "other"])
            core.update_allocation(t.asks("rm", f"app-{user}", 2, ONE_GB))
            core.wait_until_idle()
            # each user may have 1G (user limit, lower than the group's 3G) until dev's 3G is used,
            # and the group's maxapplications 2 stops a third user's application from starting
            assert (
                sum(_live_memory(rm, f"app-{u}") for u in ("u1", "u2", "u3", "u4")) == min(index + 1, 2) * GB
            )
        group = core.group_usage(P, "dev")
        assert isinstance(group, korral.GroupUsageInfo) and group.group == "dev"
        team = next(row for row in group.queues if row.queue_path == "root.team")
        assert team.running_applications == ["app-u1", "app-u2"]
        assert team.max_applications == 2 and team.max_resources == {"memory": 3 * GB}
        assert core.application(P, "app-u3").state == "Accepted"
        assert core.group_usage(P, "other") is None  # never resolved: no limit names it
        assert core.user_usage(P, "nobody") is None
        check_invariants(core, P, rm)


def test_reload_lowering_a_limit_blocks_new_work_and_evicts_nothing():
    with running(LIMITS) as (core, rm):
        add_nodes(core, rm, ["n1"], BIG_NODE)
        add_apps(core, rm, {"app1": "root.team.b"}, user="alice")
        core.update_allocation(t.asks("rm", "app1", 8, {"memory": GB // 4}))
        core.wait_until_idle()
        assert _live_memory(rm, "app1") == GB
        core.update_configuration(
            si.UpdateConfigurationRequest(rm_id="rm", config=LIMITS.replace("memory: 1G}", "memory: 500M}"))
        )
        uuid = next(a.uuid for a in rm.live.values() if a.application_id == "app1")
        core.update_allocation(t.release("rm", "app1", uuid=uuid))
        core.wait_until_idle()
        # nothing evicted; 750M in use is still over 500M, so the released room is not refilled
        assert _live_memory(rm, "app1") == 3 * GB // 4 and rm.released[0].uuid == uuid
        assert mem(core.user_usage(P, "alice").queues[1].resource) == 3 * GB // 4
        core.update_configuration(
            si.UpdateConfigurationRequest(rm_id="rm", config=LIMITS.replace("memory: 1G}", "memory: 2G}"))
        )
        core.wait_until_idle()
        assert _live_memory(rm, "app1") == 7 * GB // 4  # the 4 asks left all fit under 2G
        check_invariants(core, P, rm)


def test_recovered_allocations_count_even_above_the_limits():
    with running(LIMITS) as (core, rm):
        add_apps(core, rm, {"app1": "root.team.b"}, user="alice")
        existing = [
            si.Allocation(
                allocation_key=f"r{index}",
                uuid=f"uuid-r{index}",
                resource_per_alloc=dict(ONE_GB),
                node_id="n1",
                application_id="app1",
            )
            for index in range(2)
        ]
        core.update_node(t.nodes("rm", ["n1"], BIG_NODE, existing=existing))
        core.update_allocation(t.asks("rm", "app1", 1, {"memory": 1}))
        core.wait_until_idle()
        assert _live_memory(rm, "app1") == 2 * GB  # both recovered, nothing new
        assert mem(core.user_usage(P, "alice").queues[1].resource) == 2 * GB
        check_invariants(core, P, rm)


def test_user_and_group_resource_events():
    with running(LIMITS) as (core, rm):
        add_nodes(core, rm, ["n1"], NODE)
        add_apps(core, rm, {"app1": "root.team.b"}, user="alice", groups=["dev"])
        core.update_allocation(t.asks("rm", "app1", 1, {"memory": 100}))
        core.wait_until_idle()
        core.update_allocation(t.release("rm", "app1", uuid=next(iter(rm.live))))
        core.wait_until_idle()
        ug = [
            (e.object_id, e.event_change_detail, e.event_change_type, e.reference_id, e.resource)
            for e in rm.events
            if e.type == si.EventRecordType.USERGROUP
        ]
        Detail, Change = si.EventChangeDetail, si.EventChangeType
        assert ug == [
            # the first configuration's limits, sorted by (user or group, name, queue)
            ("dev", Detail.UG_GROUP_LIMIT, Change.SET, "root.team", {}),
            ("*", Detail.UG_USER_LIMIT, Change.SET, "root.team", {}),
            ("*", Detail.UG_USER_LIMIT, Change.SET, "root.team.a", {}),
            ("dev", Detail.UG_APP_LINK, Change.SET, "app1", {}),  # tracked against dev's limits
            ("alice", Detail.UG_USER_RESOURCE, Change.ADD, "root.team.b", {"memory": 100}),
            ("dev", Detail.UG_GROUP_RESOURCE, Change.ADD, "root.team.b", {"memory": 100}),
            ("alice", Detail.UG_USER_RESOURCE, Change.REMOVE, "root.team.b", {"memory": 100}),
            ("dev", Detail.UG_GROUP_RESOURCE, Change.REMOVE, "root.team.b", {"memory": 100}),
        ]


def test_usage_reads_the_owners_not_a_scheduler_busy_in_the_predicates():
    entered, gate = threading.Event(), threading.Event()

    def predicate(args: si.PredicatesArgs) -> bool:
        entered.set()
        gate.wait(30.0)  # the RM's plugin is slow: the scheduler waits on it
        return True

    with running(LIMITS, rm=t.RecordingRM("rm", predicate=predicate)) as (core, rm):
        add_nodes(core, rm, ["n1"], BIG_NODE)
        add_apps(core, rm, {"app1": "root.team.b"}, user="alice", groups=["dev"])
        core.update_allocation(t.asks("rm", "app1", 1, ONE_GB))
        assert entered.wait(5.0)
        started = time.monotonic()
        usage = core.user_usage(P, "alice")
        group = core.group_usage(P, "dev")
        assert time.monotonic() - started < 5.0  # waiting for the gate would take 30 s
        assert usage is not None and usage.queues[0].resource == {}  # nothing confirmed yet
        assert group is not None and group.queues[-1].queue_path == "root.team.b"
        gate.set()
        core.wait_until_idle()
        assert mem(core.user_usage(P, "alice").queues[0].resource) == GB


def test_a_required_node_ask_keeps_its_users_limit_when_the_cluster_is_short() -> None:
    """Found by korral stress --simulated (seed 702, issue 24): a required-node ask skipped the user
    headroom check when the cluster's size (root's max) was in the way, so a user at its maxresources
    got one more allocation. YuniKorn checks the user's headroom before anything else."""
    with running(LIMITS) as (core, rm):
        add_nodes(core, rm, ["n1"], {"memory": 2 * GB, "vcore": 8_000})
        add_apps(core, rm, {"app1": "root.team.b"}, user="alice")
        core.update_allocation(t.asks("rm", "app1", 1, ONE_GB))  # alice at her 1G
        add_apps(core, rm, {"app2": "root.free"}, user="bob")
        core.update_allocation(t.asks("rm", "app2", 1, ONE_GB))
        core.wait_until_idle()
        assert _live_memory(rm, "app1") == GB and _live_memory(rm, "app2") == GB
        # a second node, then the cluster shrinks under its usage elsewhere: root is over its max
        # while n2 has room
        add_nodes(core, rm, ["n2"], {"memory": 2 * GB, "vcore": 8_000})
        core.update_node(
            t.node_action("rm", "n1", si.NodeAction.UPDATE, schedulable_resource={"memory": GB // 2})
        )
        core.wait_until_idle()
        core.update_allocation(
            si.AllocationRequest(
                rm_id="rm",
                asks=[
                    si.AllocationAsk(
                        allocation_key="pinned",
                        application_id="app1",
                        resource_ask=ONE_GB,
                        max_allocations=1,
                        tags={si.DOMAIN_YUNIKORN + si.KEY_REQUIRED_NODE: "n2"},
                    )
                ],
            )
        )
        core.wait_until_idle()
        time.sleep(0.2)  # ticks: a reservation, had one been made, is tried again
        core.wait_until_idle()
        assert _live_memory(rm, "app1") == GB, "alice got more than her maxresources"
        assert core.application(P, "app1").pending_asks == ["pinned"]
