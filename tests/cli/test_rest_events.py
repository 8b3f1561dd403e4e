"""The core's event system runs whatever the RM is (issue 27): the events of an RM served over gRPC
reach ``/ws/v1/events/batch`` and ``/stream`` as an in-process RM's do, one RM or two."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from core_helpers import FAST, NODE, SMALL, TWO_LEAVES, eventually

import korral
from korral import si
from korral import testing as t

pytest.importorskip("aiohttp")
pytest.importorskip("grpc")

Kind = si.EventRecordType
Detail = si.EventChangeDetail


def ok(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def _run(sink: Any, rm: t.RecordingRM) -> None:
    """One node, one application of two allocations, one released."""
    sink.register_resource_manager(t.register(rm.rm_id, TWO_LEAVES), rm)
    sink.update_node(t.nodes(rm.rm_id, [f"{rm.rm_id}-n1"], NODE))
    assert rm.wait_for(lambda r: len(r.accepted_nodes) == 1)
    sink.update_application(t.applications(rm.rm_id, {f"{rm.rm_id}-app": "root.a"}))
    assert rm.wait_for(lambda r: len(r.accepted_apps) == 1)
    sink.update_allocation(t.asks(rm.rm_id, f"{rm.rm_id}-app", 2, SMALL))
    assert rm.wait_for_allocations(2)
    uuid = sorted(rm.live)[0]
    sink.update_allocation(t.release(rm.rm_id, f"{rm.rm_id}-app", uuid=uuid))
    assert rm.wait_for(lambda r: uuid not in r.live)


def _kinds(records: list[dict], object_id: str) -> list[tuple[int, int, int]]:
    return [
        (r["type"], r["eventChangeType"], r["eventChangeDetail"])
        for r in records
        if r.get("objectID") == object_id
    ]


def test_a_grpc_rm_and_an_in_process_rm_both_have_their_events_logged() -> None:
    with korral.start(**FAST) as core:
        address = core.serve_grpc("127.0.0.1:0")
        url = core.serve_rest("127.0.0.1:0")
        local = korral.testing.RecordingRM("local")
        _run(core, local)
        with korral.connect(address) as remote:
            far = t.RecordingRM("far")
            _run(remote, far)
            core.wait_until_idle()

            def logged() -> list[dict]:
                records = ok(url + "/ws/v1/events/batch")["EventRecords"]
                done = [r for r in records if r.get("objectID") == "far-app" and r["eventChangeType"] == 2]
                return records if done else []

            records = eventually(logged)
        for rm_id in ("local", "far"):
            app = _kinds(records, f"{rm_id}-app")
            set_, add, remove = (
                int(si.EventChangeType.SET),
                int(si.EventChangeType.ADD),
                int(si.EventChangeType.REMOVE),
            )
            assert (int(Kind.APP), set_, int(Detail.APP_NEW)) in app
            assert (int(Kind.APP), set_, int(Detail.APP_RUNNING)) in app
            assert app.count((int(Kind.APP), add, int(Detail.APP_ALLOC))) == 2
            assert app.count((int(Kind.APP), remove, int(Detail.ALLOC_CANCEL))) == 1
            node = _kinds(records, f"{rm_id}-n1")
            assert (int(Kind.NODE), add, int(Detail.NODE_READY)) in node
        ids = [r["id"] for r in records]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_queue_changes_and_allocations_lost_with_their_node_are_logged() -> None:
    with korral.start(**FAST) as core:
        url = core.serve_rest("127.0.0.1:0")
        rm = t.RecordingRM("rm")
        _run(core, rm)  # rm-app holds one allocation on rm-n1
        (uuid,) = list(rm.live)
        changed = TWO_LEAVES.replace(
            "          - name: b\n",
            "          - name: b\n            resources:\n              max: {memory: 70M}\n",
        )
        assert changed != TWO_LEAVES
        core.update_configuration(si.UpdateConfigurationRequest(rm_id="rm", config=changed))
        core.update_node(t.node_action("rm", "rm-n1", si.NodeAction.DECOMISSION))
        assert rm.wait_for(lambda r: uuid not in r.live)
        core.wait_until_idle()

        def logged() -> list[dict]:
            records = ok(url + "/ws/v1/events/batch")["EventRecords"]
            remove = int(si.EventChangeType.REMOVE)
            lost = [r for r in records if r.get("referenceID") == uuid and r["eventChangeType"] == remove]
            return records if lost else []

        records = eventually(logged)
        (queue_max,) = [r for r in records if r["eventChangeDetail"] == int(Detail.QUEUE_MAX)]
        assert queue_max["objectID"] == "root.b" and queue_max["type"] == int(Kind.QUEUE)
        assert queue_max["resource"] == {"resources": {"memory": {"value": 70_000_000}}}
        remove = int(si.EventChangeType.REMOVE)
        (lost,) = [r for r in records if r.get("referenceID") == uuid and r["eventChangeType"] == remove]
        assert lost["eventChangeDetail"] == int(Detail.ALLOC_NODEREMOVED) and lost["objectID"] == "rm-app"


@pytest.mark.parametrize("log_events", [True, False])
def test_log_events_decides_for_rms_that_take_none(log_events: bool) -> None:
    with korral.start(log_events=log_events, **FAST) as core:
        url = core.serve_rest("127.0.0.1:0")
        quiet = korral.ResourceManagerCallback()  # takes no events
        core.register_resource_manager(t.register("quiet", TWO_LEAVES), quiet)
        core.update_node(t.nodes("quiet", ["q1"], NODE))
        core.wait_until_idle()
        taking = t.RecordingRM("taking")
        _run(core, taking)  # takes its events: made either way
        core.wait_until_idle()
        objects = {r.get("objectID") for r in ok(url + "/ws/v1/events/batch")["EventRecords"]}
        assert "taking-app" in objects
        assert ("q1" in objects) is log_events


GROUP_LIMITS = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: team
            limits:
              - limit: dev group
                groups: [dev]
                maxapplications: 2
          - name: free
"""


def test_an_application_linked_to_a_group_and_unlinked() -> None:
    with korral.start(**FAST) as core:
        url = core.serve_rest("127.0.0.1:0")
        rm = t.RecordingRM("rm")
        core.register_resource_manager(t.register("rm", GROUP_LIMITS), rm)
        core.update_application(t.applications("rm", {"app-d": "root.team"}, user="alice", groups=["dev"]))
        core.update_application(t.applications("rm", {"app-f": "root.free"}, user="bob", groups=["ops"]))
        assert rm.wait_for(lambda r: len(r.accepted_apps) == 2)
        core.update_application(t.remove_applications("rm", ["app-d"]))
        core.wait_until_idle()
        links = [
            (r["objectID"], r["referenceID"], r["eventChangeType"])
            for r in ok(url + "/ws/v1/events/batch")["EventRecords"]
            if r["eventChangeDetail"] == int(Detail.UG_APP_LINK)
        ]
        set_, remove = int(si.EventChangeType.SET), int(si.EventChangeType.REMOVE)
        assert links == [("dev", "app-d", set_), ("dev", "app-d", remove)]  # ops has no limit: no link


def test_limit_changes_of_a_configuration_update_are_logged() -> None:
    with korral.start(**FAST) as core:
        url = core.serve_rest("127.0.0.1:0")
        rm = t.RecordingRM("rm")
        core.register_resource_manager(t.register("rm", GROUP_LIMITS), rm)
        core.wait_until_idle()
        updated = (  # dev's group limit goes, alice gets a user limit
            GROUP_LIMITS.replace("limit: dev group", "limit: alice")
            .replace("groups: [dev]", "users: [alice]")
            .replace("maxapplications: 2", "maxapplications: 4")
        )
        assert updated != GROUP_LIMITS
        core.update_configuration(si.UpdateConfigurationRequest(rm_id="rm", config=updated))
        core.wait_until_idle()
        limits = [
            (r["objectID"], r["referenceID"], r["eventChangeType"], r["eventChangeDetail"])
            for r in ok(url + "/ws/v1/events/batch")["EventRecords"]
            if r["eventChangeDetail"] in (int(Detail.UG_USER_LIMIT), int(Detail.UG_GROUP_LIMIT))
        ]
        set_, remove = int(si.EventChangeType.SET), int(si.EventChangeType.REMOVE)
        assert limits == [
            ("dev", "root.team", set_, int(Detail.UG_GROUP_LIMIT)),  # the first configuration's
            ("dev", "root.team", remove, int(Detail.UG_GROUP_LIMIT)),
            ("alice", "root.team", set_, int(Detail.UG_USER_LIMIT)),
        ]
