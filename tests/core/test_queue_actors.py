"""Queue actors own their queue's configuration and lifecycle (a ``QueueSpec``), end to end through
``korral.Core``: what a queue reports, which applications it admits and what the scheduler enforces
are its actor's values, changed only by messages to it; a queue placement creates has an actor from
its creation, and queue cleanup retires it."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from core_helpers import MB, NODE, SMALL, add_nodes, eventually, part, running

import korral
import korral.actors.queue
from korral import si
from korral import testing as t
from korral.actors.application import ApplicationActor
from korral.actors.messages import AddAsks
from korral.actors.setup import ActorSetup
from korral.model.queue_spec import QueueSpec

P = part()

CONFIG = """
partitions:
  - name: default
    placementrules:
      - name: provided
        create: true
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
            maxapplications: 1
          - name: b
            submitacl: "bob"
          - name: dyn
            parent: true
"""


def _partition(core: korral.Core) -> Any:
    # this core's partition actor (test-only access to what the actors hold)
    return core._partition_handles(P)[P].ref._actor_weakref()


def _actor_spec(core: korral.Core, path: str) -> QueueSpec:
    actor = _partition(core).queues[path].ref._actor_weakref()
    assert actor is not None, f"queue {path} has no live actor"
    spec: QueueSpec = actor.spec
    return spec


def _reload(core: korral.Core, config: str) -> None:
    core.update_configuration(si.UpdateConfigurationRequest(rm_id="rm", policy_group="queues", config=config))
    core.wait_until_idle()


def test_the_partition_and_the_scheduler_read_each_queues_spec_from_its_actor() -> None:
    with running(CONFIG) as (core, _rm):
        core.wait_until_idle()
        partition = _partition(core)
        view = partition.scheduler.ref._actor_weakref().view
        for path in ("root", "root.a", "root.b", "root.dyn"):
            spec = _actor_spec(core, path)
            assert partition.registry.queues[path].spec is spec, path
            assert view.queues[path].spec is spec, path
        assert core.queue(P, "root.a").max_applications == 1


def test_a_reload_changes_only_the_queues_it_changes_and_drains_those_it_drops() -> None:
    with running(CONFIG) as (core, rm):
        b_before = _actor_spec(core, "root.b")
        _reload(
            core,
            CONFIG.replace("maxapplications: 1", "maxapplications: 3").replace(
                '          - name: b\n            submitacl: "bob"\n', ""
            ),
        )
        assert _actor_spec(core, "root.a").max_applications == 3
        assert core.queue(P, "root.a").max_applications == 3
        b_after = _actor_spec(core, "root.b")
        assert b_after is not b_before and b_after.state.value == "Draining"
        assert core.queue(P, "root.b").state == "Draining"
        assert _actor_spec(core, "root.dyn") is _partition(core).registry.queues["root.dyn"].spec
        # a draining queue takes no new application
        core.update_application(t.applications("rm", {"late": "root.b"}, user="bob"))
        core.wait_until_idle()
        # YuniKorn's placement passes over a draining queue: no rule places it
        assert rm.rejected_apps["late"] == "application rejected: no placement rule matched"
        # configured again: active, and it admits again
        _reload(core, CONFIG)
        assert _actor_spec(core, "root.b").state.value == "Active"
        core.update_application(t.applications("rm", {"again": "root.b"}, user="bob"))
        core.wait_until_idle()
        assert "again" in rm.accepted_apps


def test_a_reloaded_submit_acl_decides_the_next_submission() -> None:
    with running(CONFIG) as (core, rm):
        core.update_application(t.applications("rm", {"bob-1": "root.b"}, user="bob"))
        core.wait_until_idle()
        assert "bob-1" in rm.accepted_apps
        _reload(
            core,
            CONFIG.replace('submitacl: "bob"', 'submitacl: "alice"').replace(
                'submitacl: "*"', "adminacl: root"
            ),
        )
        assert _actor_spec(core, "root.b").submit_acl.allows("alice", ())
        core.update_application(t.applications("rm", {"bob-2": "root.b"}, user="bob"))
        core.update_application(t.applications("rm", {"alice-1": "root.b"}, user="alice"))
        core.wait_until_idle()
        assert "alice-1" in rm.accepted_apps
        # YuniKorn's placement passes over a queue its submitter may not submit to
        assert rm.rejected_apps["bob-2"] == "application rejected: no placement rule matched"


def test_the_scheduler_enforces_the_maxapplications_the_queues_actor_holds() -> None:
    with running(CONFIG) as (core, rm):
        add_nodes(core, rm, ["n1"], NODE)
        core.update_application(t.applications("rm", {"first": "root.a", "second": "root.a"}))
        core.update_allocation(t.asks("rm", "first", 1, SMALL))
        core.wait_until_idle()
        core.update_allocation(t.asks("rm", "second", 1, SMALL))
        core.wait_until_idle()
        # maxapplications 1: the second application does not run while the first does
        assert rm.allocated_total == 1 and core.application(P, "second").state == "Accepted"
        assert core.queue(P, "root.a").pending == SMALL
        _reload(core, CONFIG.replace("maxapplications: 1", "maxapplications: 2"))
        eventually(lambda: rm.allocated_total == 2)
        assert core.queue(P, "root.a").allocated == {"memory": 20 * MB, "vcore": 2_000}


def _quota(memory: int) -> str:
    return json.dumps({"resources": {"memory": {"value": memory}}})


def test_a_queue_placement_creates_has_an_actor_its_tags_change_and_cleanup_retires() -> None:
    with running(CONFIG, queue_cleanup_interval=0.1) as (core, rm):
        add_nodes(core, rm, ["n1"], NODE)
        tags = {"namespace.resourcequota": _quota(25 * MB)}
        core.update_application(t.applications("rm", {"ns-app": "root.dyn.ns"}, tags=tags))
        core.wait_until_idle()
        assert "ns-app" in rm.accepted_apps
        spec = _actor_spec(core, "root.dyn.ns")
        assert not spec.managed and spec.max == {"memory": 25 * MB}
        assert core.queue(P, "root.dyn.ns").own_max == {"memory": 25 * MB}
        # the scheduler enforces the tagged quota: two of three 10M asks fit under 25M
        core.update_allocation(t.asks("rm", "ns-app", 3, SMALL))
        core.wait_until_idle()
        assert rm.allocated_total == 2
        handle = _partition(core).queues["root.dyn.ns"]
        # empty once its application is gone: cleanup removes the queue and retires its actor
        core.update_application(
            si.ApplicationRequest(rm_id="rm", remove=[si.RemoveApplicationRequest(application_id="ns-app")])
        )
        core.wait_until_idle()
        eventually(lambda: core.queue(P, "root.dyn.ns") is None)
        eventually(lambda: not handle.is_alive)
        assert "root.dyn.ns" not in _partition(core).queues


def test_a_reload_waits_for_its_queue_actors_however_long_their_pool_is_busy(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A queue actor answers once its pool gets to it: a reload whose queue actors answer late (a
    loaded machine, a long collection) is applied late, never lost half way."""
    hold, release = threading.Event(), threading.Event()

    class HeldApplication(ApplicationActor):
        # holds its pool's turn in the AddAsks after ``hold`` is set, until ``release``
        def on_AddAsks(self, message: AddAsks) -> None:
            if hold.is_set():
                hold.clear()
                release.wait(timeout=300)
            super().on_AddAsks(message)

    monkeypatch.setattr(korral.actors.queue, "ANSWER_WAIT", 0.05)
    with running(CONFIG, setup=ActorSetup(application_actor=HeldApplication)) as (core, rm):
        add_nodes(core, rm, ["n1"])
        core.update_application(t.applications("rm", {"app": "root.a"}))
        core.wait_until_idle()
        hold.set()
        core.update_allocation(t.asks("rm", "app", 1, SMALL))
        eventually(lambda: not hold.is_set())  # the partition's owners are held from now on
        core.update_configuration(
            si.UpdateConfigurationRequest(
                rm_id="rm",
                policy_group="queues",
                config=CONFIG.replace("maxapplications: 1", "maxapplications: 3"),
            )
        )
        eventually(lambda: any("still waiting" in record.getMessage() for record in caplog.records))
        release.set()
        core.wait_until_idle(timeout=120)
        assert core.queue(P, "root.a").max_applications == 3
        assert _actor_spec(core, "root.a").max_applications == 3
