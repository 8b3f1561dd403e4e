"""Issue 26 end to end through korral.Core: nothing in queues.yaml accepted that does nothing."""

from __future__ import annotations

import logging
from pathlib import Path

import attrs
import pytest
from core_helpers import FAST, SINGLE_LEAF, add_apps, part, running
from slapd import running_slapd, write_secrets

import korral
from korral import si
from korral import testing as t

UNKNOWN_RULE = """
partitions:
  - name: default
    placementrules:
      - name: namespaces
        create: true
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: namespaces
            parent: true
"""

DEFAULTED = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: a
            properties:
              application.sort.policy: fiar
              priority.offset: high
          - name: b
            properties:
              application.sort.policy: FAIR
"""


def test_an_unknown_placement_rule_is_a_config_error_at_registration_and_reload() -> None:
    """It was accepted, and the whole rule list then silently became `provided`."""
    with korral.start(**FAST) as core:
        with pytest.raises(korral.ConfigError, match="unknown placement rule name 'namespaces'"):
            core.register_resource_manager(t.register("rm", UNKNOWN_RULE), t.RecordingRM("rm"))
        assert core.partition_names() == []
    with running(SINGLE_LEAF) as (core, rm):
        with pytest.raises(korral.ConfigError, match="unknown placement rule name 'namespaces'"):
            core.update_configuration(si.UpdateConfigurationRequest(rm_id="rm", config=UNKNOWN_RULE))
        add_apps(core, rm, {"app": "root.singleleaf"})  # the old config still runs
        assert core.application(part(), "app").queue == "root.singleleaf"


def test_defaulted_values_run_as_yunikorn_runs_them_and_registration_logs_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="korral.config"), running(DEFAULTED) as (core, _):
        queues = {q.path: q for q in core.queues(part())}
        # YuniKorn: an unknown sort policy (sort policies are case-sensitive) sorts fifo
        assert queues["root.a"].sort_policy == "fifo" and queues["root.b"].sort_policy == "fifo"
        lines = [r.getMessage() for r in caplog.records if r.name == "korral.config"]
        assert len(lines) == 1
        assert "RM rm: 3 queue property value(s) YuniKorn silently defaults" in lines[0]
        for value in ("'fiar'", "'high'", "'FAIR'"):
            assert value in lines[0]
        caplog.clear()
        core.update_configuration(
            si.UpdateConfigurationRequest(rm_id="rm", config=DEFAULTED.replace("fiar", "fair"))
        )
        core.wait_until_idle()
        assert core.queue(part(), "root.a").sort_policy == "fair"
        lines = [r.getMessage() for r in caplog.records if r.name == "korral.config"]
        assert len(lines) == 1 and "2 queue property value(s)" in lines[0]


def test_a_clean_config_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="korral.config"), running(SINGLE_LEAF):
        pass
    assert [r for r in caplog.records if r.name == "korral.config"] == []


# ---- reservations (YUNIKORN-3219, 2976, 3092) through the actors on the simulated runtime -------------

RESERVING = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: high
            resources: {guaranteed: {memory: 500}}
            properties: {preemption.delay: 10s}
          - name: low
            resources: {guaranteed: {memory: 200}, max: {memory: %(low_max)d}}
"""
REQUIRED_NODE = "yunikorn.apache.org/requiredNode"


def _ask(app_id: str, key: str, memory: int, *, node: str = "", priority: int = 0, preempt: bool = False):
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
                preemption_policy=si.PreemptionPolicy(allow_preempt_other=True) if preempt else None,
            )
        ],
    )


def _reserving_core(core: korral.Core, rm: t.RecordingRM) -> None:
    """n1 (1000) full with low-app's two 500s; n2 and n3 (200 each) leave room in the cluster that no
    300 ask fits, so a 300 ask waits with a reservation on n1."""
    core.register_resource_manager(t.register("rm", RESERVING % {"low_max": 5000}), rm)
    core.update_node(t.nodes("rm", ["n1"], {"memory": 1000}))
    core.update_node(t.nodes("rm", ["n2", "n3"], {"memory": 200}))
    core.update_application(t.applications("rm", {"low-app": "root.low", "hi": "root.high"}))
    core.wait_until_idle()
    for index in range(2):
        core.update_allocation(_ask("low-app", f"low-{index}", 500))
    core.wait_until_idle()
    assert rm.allocated_total == 2


@pytest.mark.slow
def test_a_reservation_on_a_short_headroom_is_cancelled_after_the_wait_time() -> None:
    rm = t.RecordingRM("rm")
    with korral.start(runtime="simulated", seed=1) as core:
        _reserving_core(core, rm)
        core.update_allocation(_ask("low-app", "waiter", 300))
        core.wait_until_idle()
        core.advance(3.0)  # past the reservation delay
        assert core.node(part(), "n1").reservations == ["low-app"]
        # the queue's max drops below its usage plus the reserved ask: the headroom stays short
        core.update_configuration(
            si.UpdateConfigurationRequest(rm_id="rm", config=RESERVING % {"low_max": 1100})
        )
        core.wait_until_idle()
        core.advance(3590.0)
        assert core.node(part(), "n1").reservations == ["low-app"]
        core.advance(20.0)  # held for more than 60 minutes on a short headroom
        assert core.node(part(), "n1").reservations == []
        assert core.application(part(), "low-app").pending_asks == ["waiter"]


def test_several_required_node_asks_hold_one_node_through_the_core() -> None:
    rm = t.RecordingRM("rm")
    with korral.start(runtime="simulated", seed=2) as core:
        _reserving_core(core, rm)
        for key in ("ds-a", "ds-b"):
            core.update_allocation(_ask("hi", key, 250, node="n1"))
        core.wait_until_idle()
        assert core.node(part(), "n1").reservations == ["hi", "hi"]
        core.update_allocation(t.release("rm", "low-app", allocation_key="low-1"))
        core.wait_until_idle()
        assert sorted(a.allocation_key for a in rm.live.values() if a.application_id == "hi") == [
            "ds-a",
            "ds-b",
        ]
        assert core.node(part(), "n1").reservations == []


@pytest.mark.slow
def test_a_stale_lower_priority_reservation_gives_way_to_a_preemptor() -> None:
    rm = t.RecordingRM("rm")
    with korral.start(runtime="simulated", seed=3) as core:
        _reserving_core(core, rm)
        core.update_allocation(_ask("low-app", "waiter", 300))
        core.wait_until_idle()
        core.advance(3.0)
        assert core.node(part(), "n1").reservations == ["low-app"]
        core.advance(3600.0)
        core.update_allocation(_ask("hi", "urgent", 300, priority=10, preempt=True))
        core.wait_until_idle()
        core.advance(11.0)
        preempted = [
            r.allocation_key
            for r in rm.released
            if r.termination_type == si.TerminationType.PREEMPTED_BY_SCHEDULER
        ]
        assert preempted == ["low-1"]
        assert core.node(part(), "n1").reservations == ["hi"]


# ---- unschedulable-ask backoff (YUNIKORN-3115) --------------------------------------------------------

BACKOFF = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: q
            properties:
              application.unschedasks.backoff: "1"
              application.unschedasks.backoff.delay: 20s
"""


def test_an_application_backs_off_and_its_deadline_is_in_its_snapshot_and_rest() -> None:
    from korral.server.rest import dao

    rm = t.RecordingRM("rm")
    with korral.start(runtime="simulated", seed=4) as core:
        core.register_resource_manager(t.register("rm", BACKOFF), rm)
        core.update_node(t.nodes("rm", ["n1", "n2", "n3"], {"memory": 100}))
        core.update_application(t.applications("rm", {"app": "root.q"}))
        core.wait_until_idle()
        assert core.application(part(), "app").backoff_deadline is None
        core.update_allocation(
            si.AllocationRequest(
                rm_id="rm",
                asks=[
                    si.AllocationAsk(
                        allocation_key=f"k{index}",
                        application_id="app",
                        resource_ask={"memory": 150},
                        max_allocations=1,
                    )
                    for index in range(2)
                ],
            )
        )
        core.wait_until_idle()
        info = core.application(part(), "app")
        assert info.backoff_deadline is not None
        core.update_node(t.nodes("rm", ["big"], {"memory": 1000}))
        core.wait_until_idle()
        assert rm.allocated_total == 0  # room, but the application backs off
        # the REST application object (YuniKorn's ApplicationDAOInfo) carries it as a time
        assert dao.application(info)["backoffDeadline"].endswith("Z")
        assert "backoffDeadline" not in dao.application(attrs.evolve(info, backoff_deadline=None))
        core.advance(21.0)
        assert rm.allocated_total == 2


# ---- usergroupresolver ---------------------------------------------------------------------------------

GROUP_ACL = """
partitions:
  - name: default
%(resolver)s
    queues:
      - name: root
        queues:
          - name: secure
            submitacl: " %(group)s"
"""


def _submit(
    core: korral.Core, rm: t.RecordingRM, app_id: str, user: str, groups: tuple[str, ...] = ()
) -> None:
    core.update_application(t.applications("rm", {app_id: "root.secure"}, user=user, groups=list(groups)))
    core.wait_until_idle()


def _resolver(kind: str) -> str:
    return f"    usergroupresolver:\n      type: {kind}" if kind else ""


def test_the_os_resolver_gives_a_user_sent_without_groups_its_os_groups() -> None:
    import grp
    import os
    import pwd

    me = pwd.getpwuid(os.getuid())
    primary = grp.getgrgid(me.pw_gid).gr_name
    with running(GROUP_ACL % {"resolver": _resolver("os"), "group": primary}) as (core, rm):
        _submit(core, rm, "mine", me.pw_name)  # no groups: resolved from the OS, the ACL lets it in
        _submit(core, rm, "ghost", "no-such-user-k26")
        _submit(core, rm, "told", "no-such-user-k26", (primary,))  # groups sent: taken as they are
        assert sorted(rm.accepted_apps) == ["mine", "told"]
        assert "user no-such-user-k26 does not exist" in dict(rm.rejected_apps)["ghost"]


def test_without_a_resolver_a_users_only_group_is_named_as_the_user() -> None:
    """YuniKorn's default (no resolver): korral used to give a user sent without groups none at all."""
    with running(GROUP_ACL % {"resolver": "", "group": "alice"}) as (core, rm):
        _submit(core, rm, "a", "alice")
        _submit(core, rm, "b", "bob")
        assert rm.accepted_apps == ["a"]
        assert core.application(part(), "a").queue == "root.secure"


def test_the_ldap_resolver_gives_a_user_its_directory_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with running_slapd(tmp_path / "slapd") as settings:
        monkeypatch.setenv("KORRAL_LDAP_SECRETS", str(write_secrets(tmp_path / "secrets", **settings)))
        with running(GROUP_ACL % {"resolver": _resolver("ldap"), "group": "devs"}) as (core, rm):
            _submit(core, rm, "alices", "alice")  # resolved from LDAP: in devs
            _submit(core, rm, "carols", "carol")  # only in ops
            _submit(core, rm, "told", "carol", ("devs",))  # groups sent: taken as they are
            assert sorted(rm.accepted_apps) == ["alices", "told"]
            assert "carols" in rm.rejected_apps


def test_the_ldap_resolver_without_its_settings_rejects_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KORRAL_LDAP_SECRETS", str(tmp_path / "absent"))
    with running(GROUP_ACL % {"resolver": _resolver("ldap"), "group": "staff"}) as (core, rm):
        _submit(core, rm, "unresolved", "alice")
        _submit(core, rm, "told", "alice", ("staff",))
        assert rm.accepted_apps == ["told"]
        assert "LDAP settings directory" in rm.rejected_apps["unresolved"]


# ---- creationTime (YUNIKORN-2772) ------------------------------------------------------------------------

FIFO = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: default
            properties: {application.sort.policy: fifo}
"""


def test_after_a_restart_re_sent_work_keeps_its_place_by_its_creation_time() -> None:
    """The RM re-registers (a restart) and re-sends its work: the application that was older keeps
    going first even though it is re-added second, by its allocation's and asks' creationTime tags."""
    import time

    old = str(int(time.time()) - 3600)
    with running(FIFO) as (core, rm):
        core.update_application(t.applications("rm", {"young": "root.default"}))
        core.update_application(t.applications("rm", {"veteran": "root.default"}))
        running_pod = si.Allocation(
            allocation_key="veteran-0",
            application_id="veteran",
            node_id="n0",
            partition_name="default",
            resource_per_alloc={"memory": 1},
            allocation_tags={si.CREATION_TIME: old},
        )
        core.update_node(t.nodes("rm", ["n0"], {"memory": 1}, existing=[running_pod]))
        core.wait_until_idle()
        asks = [
            si.AllocationAsk(
                allocation_key=f"{app}-1",
                application_id=app,
                resource_ask={"memory": 10},
                max_allocations=1,
                tags={si.CREATION_TIME: old} if app == "veteran" else {},
            )
            for app in ("young", "veteran")
        ]
        core.update_allocation(si.AllocationRequest(rm_id="rm", asks=asks))
        core.wait_until_idle()
        core.update_node(t.nodes("rm", ["n1"], {"memory": 10}))  # room for one of them
        core.wait_until_idle()
        placed = sorted(a.allocation_key for a in rm.live.values() if a.node_id == "n1")
        assert placed == ["veteran-1"]
