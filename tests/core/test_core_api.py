"""End-to-end: starting the core, registering RMs, configuration on registration, errors (api.md)."""

from __future__ import annotations

import threading

import pykka
import pytest
from core_helpers import (
    FAST,
    NODE,
    SINGLE_LEAF,
    SMALL,
    TWO_LEAVES,
    add_apps,
    add_nodes,
    check_invariants,
    eventually,
    part,
    running,
)

import korral
from korral import si
from korral import testing as t

NS = {"namespace": "ns1"}


def test_unknown_setting_is_a_type_error():
    with pytest.raises(TypeError, match="no_such_setting"):
        korral.start(no_such_setting=1.0)


def test_settings_default_to_yunikorn_and_start_stop():
    core = korral.start()
    try:
        assert core.partitions() == []
    finally:
        core.stop()


def test_register_without_callback_uses_the_do_nothing_base():
    with korral.start(**FAST) as core:
        core.register_resource_manager(t.register("rm", SINGLE_LEAF))
        core.update_node(t.nodes("rm", ["n1"], NODE))
        core.update_application(t.applications("rm", {"app1": "root.singleleaf"}))
        core.update_allocation(t.asks("rm", "app1", 2, SMALL))
        core.wait_until_idle()
        assert len(core.application(part(), "app1").allocations) == 2
        assert core.tracker.errors == 0


def test_several_rms_each_have_their_own_partitions():
    rm1, rm2 = t.RecordingRM("rm1"), t.RecordingRM("rm2")
    with korral.start(**FAST) as core:
        core.register_resource_manager(t.register("rm1", SINGLE_LEAF), rm1)
        core.register_resource_manager(t.register("rm2", TWO_LEAVES), rm2)
        infos = core.partitions()
        assert [(p.name, p.rm_id) for p in infos] == [("[rm1]default", "rm1"), ("[rm2]default", "rm2")]
        assert core.queue("[rm1]default", "root.singleleaf") is not None
        assert core.queue("[rm1]default", "root.a") is None
        assert core.queue("[rm2]default", "root.a") is not None
        # the same node and application ids live independently in each RM's partition
        for rm in (rm1, rm2):
            core.update_node(t.nodes(rm.rm_id, ["n1"], NODE))
        core.update_application(t.applications("rm1", {"app": "root.singleleaf"}))
        core.update_application(t.applications("rm2", {"app": "root.a"}))
        core.wait_until_idle()
        assert rm1.accepted_nodes == ["n1"] and rm2.accepted_nodes == ["n1"]
        assert rm1.accepted_apps == ["app"] and rm2.accepted_apps == ["app"]
        core.update_allocation(t.asks("rm1", "app", 3, SMALL))
        core.update_allocation(t.asks("rm2", "app", 1, SMALL))
        core.wait_until_idle()
        assert rm1.allocated_total == 3 and rm2.allocated_total == 1
        assert core.partition("[rm1]default").allocated["memory"] == 30_000_000
        assert core.partition("[rm2]default").allocated["memory"] == 10_000_000
        check_invariants(core, "[rm1]default", rm1)
        check_invariants(core, "[rm2]default", rm2)
        assert core.tracker.errors == 0


def test_empty_config_is_yunikorns_default():
    with running("") as (core, rm):
        [info] = core.partitions()
        assert info.name == "[rm]default" and info.rm_id == "rm"
        assert info.state == "Active" and info.node_sort_policy == "fair"
        root = core.queue(info.name, "root")
        assert root.children == [] and not root.is_leaf
        # tag rule on namespace with create: any user may submit (root submitacl *)
        add_apps(core, rm, {"app1": ""}, tags=NS, user="anyone")
        app = core.application(info.name, "app1")
        assert app.queue == "root.ns1" and app.user == "anyone"
        queue = core.queue(info.name, "root.ns1")
        assert queue.is_leaf and not queue.is_managed and queue.applications == ["app1"]
        assert core.queue(info.name, "root").children == ["root.ns1"]
        # no namespace tag: no rule places it
        core.update_application(t.applications("rm", {"app2": ""}))
        core.wait_until_idle()
        assert rm.rejected_apps.get("app2")


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ("partitions:\n  - name: default\n    queuez: []\n", "queuez"),
        (
            "partitions:\n  - name: default\n    queues:\n      - name: root\n        queues:\n"
            "          - name: a\n          - name: A\n",
            "a",
        ),
        (
            "partitions:\n  - name: default\n    queues:\n      - name: root\n        queues:\n"
            "          - name: a\n            resources:\n              max: {memory: -1}\n",
            "memory",
        ),
        (
            "partitions:\n  - name: default\n    nodesortpolicy:\n      type: roundrobin\n"
            "    queues:\n      - name: root\n",
            "roundrobin",
        ),
        ("partitions: [", ""),
    ],
)
def test_invalid_config_raises_and_creates_nothing(config, named):
    rm = t.RecordingRM("bad")
    with korral.start(**FAST) as core:
        core.register_resource_manager(t.register("good", TWO_LEAVES), t.RecordingRM("good"))
        before = core.partitions()
        with pytest.raises(korral.ConfigError) as error:
            core.register_resource_manager(t.register("bad", config), rm)
        assert named.lower() in str(error.value).lower()
        assert core.partitions() == before
        # the refused RM is not registered
        with pytest.raises(korral.SchedulerError):
            core.update_node(t.nodes("bad", ["n1"], NODE))
        assert core.tracker.errors == 0


def test_invalid_reregistration_keeps_the_earlier_registration():
    with running(TWO_LEAVES) as (core, rm):
        add_nodes(core, rm, ["n1"])
        with pytest.raises(korral.ConfigError):
            core.register_resource_manager(t.register("rm", "partitions: 1\n"), rm)
        assert core.node(part(), "n1") is not None
        assert [p.name for p in core.partitions()] == [part()]


@pytest.mark.usefixtures("engine")  # both engines
def test_reregistering_removes_everything_the_rm_owned():
    with running("") as (core, rm):
        add_nodes(core, rm, ["n1", "n2"])
        add_apps(core, rm, {"app1": ""}, tags=NS)
        core.update_allocation(t.asks("rm", "app1", 3, SMALL))
        core.wait_until_idle()
        assert rm.allocated_total == 3
        assert core.queue(part(), "root.ns1") is not None
        other = t.RecordingRM("other")
        core.register_resource_manager(t.register("other", ""), other)
        core.update_node(t.nodes("other", ["x1"], NODE))
        core.wait_until_idle()

        fresh = t.RecordingRM("rm")
        core.register_resource_manager(t.register("rm", TWO_LEAVES), fresh)
        core.wait_until_idle()
        assert core.nodes(part()) == []
        assert core.applications(part()) == []
        assert core.application(part(), "app1") is None
        assert core.queue(part(), "root.ns1") is None
        assert core.queue(part(), "root.a") is not None
        info = core.partition(part())
        assert info.capacity == {} and info.allocated == {} and info.node_count == 0
        assert info.application_count == 0
        # the other RM is untouched
        assert core.node("[other]default", "x1") is not None
        # the new registration works from scratch, and callbacks go to the new callback
        add_nodes(core, fresh, ["n1"])
        add_apps(core, fresh, {"app1": "root.a"})
        core.update_allocation(t.asks("rm", "app1", 1, SMALL))
        core.wait_until_idle()
        assert fresh.allocated_total == 1
        check_invariants(core, part(), fresh)


@pytest.mark.parametrize(
    "call",
    [
        lambda core: core.update_node(t.nodes("ghost", ["n1"], NODE)),
        lambda core: core.update_application(t.applications("ghost", {"a": "root.a"})),
        lambda core: core.update_allocation(t.asks("ghost", "a", 1, SMALL)),
        lambda core: core.update_configuration(si.UpdateConfigurationRequest(rm_id="ghost", config="")),
    ],
)
def test_update_from_unregistered_rm_raises_scheduler_error(call):
    with running(TWO_LEAVES) as (core, _rm):
        with pytest.raises(korral.SchedulerError, match="ghost"):
            call(core)
        assert isinstance(korral.SchedulerError("x"), korral.KorralError)


def test_unknown_partition_is_rejected_through_the_callback():
    with running(TWO_LEAVES) as (core, rm):
        core.update_node(t.nodes("rm", ["g1"], NODE, partition="gpu"))
        core.update_application(t.applications("rm", {"app-gpu": "root.a"}, partition="gpu"))
        core.update_allocation(t.asks("rm", "app-gpu", 1, SMALL, partition="gpu"))
        core.update_allocation(t.release("rm", "app-gpu", partition="gpu"))
        core.update_allocation(t.release_asks("rm", "app-gpu", partition="gpu"))
        core.update_application(t.remove_applications("rm", ["app-gpu"], partition="gpu"))
        core.wait_until_idle()
        assert "gpu" in rm.rejected_nodes["g1"]
        assert "gpu" in rm.rejected_apps["app-gpu"]
        [rejected] = rm.rejected_asks
        assert rejected.allocation_key == "app-gpu-ask-0" and "gpu" in rejected.reason
        assert core.partition("[rm]gpu") is None
        assert core.nodes(part()) == [] and core.applications(part()) == []


def test_missing_objects_give_none():
    with running(TWO_LEAVES) as (core, _rm):
        assert core.partition("[rm]nope") is None
        assert core.partition("default") is None
        assert core.queue(part(), "root.nope") is None
        assert core.queue("[rm]nope", "root") is None
        assert core.application(part(), "nope") is None
        assert core.node(part(), "nope") is None
        assert core.applications("[rm]nope") == []
        assert core.nodes("[rm]nope") == []


def test_stop_is_idempotent_and_the_core_refuses_work_after_it():
    core = korral.start(**FAST)
    core.register_resource_manager(t.register("rm", TWO_LEAVES), t.RecordingRM())
    core.stop()
    core.stop()
    with pytest.raises(korral.SchedulerError):
        core.update_node(t.nodes("rm", ["n1"], NODE))
    with korral.start(**FAST) as other:
        pass
    other.stop()


def test_stop_leaves_no_threads_and_no_actors():
    before_actors = set(pykka.ActorRegistry.get_all())
    before_threads = set(threading.enumerate())
    rm1, rm2 = t.RecordingRM("rm1"), t.RecordingRM("rm2")
    with korral.start(**FAST) as core:
        core.register_resource_manager(t.register("rm1", TWO_LEAVES), rm1)
        core.register_resource_manager(t.register("rm2", ""), rm2)
        core.update_node(t.nodes("rm1", ["n1", "n2"], NODE))
        core.update_application(t.applications("rm1", {"app1": "root.a"}))
        core.update_allocation(t.asks("rm1", "app1", 4, SMALL))
        core.wait_until_idle()
        assert rm1.allocated_total == 4
        assert len(set(pykka.ActorRegistry.get_all()) - before_actors) > 5
    # stop() does not wait for a scheduler that may be inside an RM callback (it never waits on an
    # RM): its thread ends right after, so nothing of the core is left once that moment has passed
    eventually(lambda: not set(pykka.ActorRegistry.get_all()) - before_actors)
    eventually(lambda: not [th for th in set(threading.enumerate()) - before_threads if th.is_alive()])


def test_load_config_parses_and_validates_without_starting():
    config = korral.load_config(SINGLE_LEAF)
    assert isinstance(config, korral.SchedulerConfig)
    assert [p.name for p in config.partitions] == ["default"]
    default = korral.load_config("")
    assert [p.name for p in default.partitions] == ["default"]
    with pytest.raises(korral.ConfigError, match="unknownkey"):
        korral.load_config(
            "partitions:\n  - name: default\n    unknownkey: 1\n    queues:\n      - name: root\n"
        )


def test_wait_until_idle_times_out_while_a_callback_blocks():
    release = threading.Event()

    class Slow(t.RecordingRM):
        def update_node(self, response):
            release.wait(5.0)
            super().update_node(response)

    with running(TWO_LEAVES, rm=Slow("rm")) as (core, rm):
        core.update_node(t.nodes("rm", ["n1"], NODE))
        with pytest.raises(TimeoutError):
            core.wait_until_idle(timeout=0.2)
        release.set()
        core.wait_until_idle()
        assert rm.accepted_nodes == ["n1"]


def test_register_needs_an_rm_id():
    with korral.start(**FAST) as core:
        with pytest.raises(korral.SchedulerError):
            core.register_resource_manager(t.register("", ""), t.RecordingRM())
        assert core.partitions() == []


def test_a_call_the_core_does_not_answer_in_time_raises_a_korral_error_that_says_so(monkeypatch):
    """Not pykka's own Timeout: a caller catching korral's errors (and the gRPC SI, which answers it
    DEADLINE_EXCEEDED) sees what happened, and that the request may still be carried out."""
    monkeypatch.setattr(korral.core, "REGISTRATION_TIMEOUT", 1e-9)
    with korral.start() as core:
        with pytest.raises(korral.CallTimeoutError, match=r"did not answer Register within 1e-09s") as late:
            core.register_resource_manager(t.register("rm", ""), t.RecordingRM("rm"))
        assert isinstance(late.value, korral.SchedulerError) and late.value.grpc_status == "DEADLINE_EXCEEDED"
        assert not isinstance(late.value, pykka.Timeout)
        assert "may still carry it out" in str(late.value)
