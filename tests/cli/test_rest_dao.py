"""The DAO fields of yunikorn-core be3bb487 that YuniKorn's web UI and scripts read (issue 27):
allocation tags and times, application submission time, state log, groups, peaks, node utilisation,
queue headroom and priority fields - with the values the scenario implies. Real loopback sockets."""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from core_helpers import SMALL, add_apps, add_nodes, eventually, part, running

import korral
from korral import testing as t
from korral.info import ApplicationInfo
from korral.server.rest import dao, routes

pytest.importorskip("aiohttp")

CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
            properties:
              priority.policy: fence
              priority.offset: "5"
              preemption.delay: 90s
            resources:
              max: {memory: 150M, vcore: 15}
          - name: b
"""
POD = "kubernetes.io/meta/podName"
NAMESPACE = "kubernetes.io/meta/namespace"


def ok(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        return json.loads(response.read())


def tagged(request: Any) -> Any:
    return attrs.evolve(
        request,
        asks=[
            attrs.evolve(a, tags={NAMESPACE: "spark", POD: f"pod-{a.allocation_key}"}) for a in request.asks
        ],
    )


@pytest.fixture(scope="module")
def scenario() -> Iterator[tuple[korral.Core, str, int, int]]:
    """app-1 (alice, groups analysts and ops) got 3 SMALL allocations in root.a on n1, one of them
    released since (it held 30 MB at most, holds 20 MB); app-done ran one allocation in root.b and
    completed. Returns the Unix ns before the first request and after the last."""
    before = time.time_ns()
    with running(CONFIG) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app-1": "root.a"}, user="alice", groups=["analysts", "ops"])
        add_apps(core, rm, {"app-done": "root.b"})
        core.update_allocation(tagged(t.asks("rm", "app-1", 3, SMALL)))
        core.update_allocation(t.asks("rm", "app-done", 1, SMALL))
        assert rm.wait_for_allocations(4)
        core.wait_until_idle()
        first = sorted(a.uuid for a in rm.live.values() if a.application_id == "app-1")[0]
        done = [a.uuid for a in rm.live.values() if a.application_id == "app-done"]
        core.update_allocation(t.release("rm", "app-1", uuid=first))
        core.update_allocation(t.release("rm", "app-done", uuid=done[0]))
        eventually(lambda: core.completed_applications(part()))
        core.wait_until_idle()
        after = time.time_ns()
        yield core, core.serve_rest("127.0.0.1:0"), before, after


def test_allocations_carry_tags_and_unix_times(scenario) -> None:
    _, url, before, after = scenario
    app = ok(url + "/ws/v1/partition/default/application/app-1")
    assert len(app["allocations"]) == 2
    for alloc in app["allocations"]:
        key = alloc["allocationKey"]
        assert alloc["allocationTags"] == {NAMESPACE: "spark", POD: f"pod-{key}"}
        assert before <= alloc["requestTime"] <= alloc["allocationTime"] <= after
        assert alloc.get("allocationDelay", 0) == alloc["allocationTime"] - alloc["requestTime"]
        assert "placeholderUsed" not in alloc and "preempted" not in alloc  # omitempty
    node = ok(url + "/ws/v1/partition/default/node/n1")
    on_node = {a["allocationKey"]: a for a in node["allocations"]}
    for alloc in app["allocations"]:  # the same times wherever the allocation is shown
        assert on_node[alloc["allocationKey"]] == alloc


def test_application_times_state_log_groups_and_peak(scenario) -> None:
    _, url, before, after = scenario
    app = ok(url + "/ws/v1/partition/default/application/app-1")
    assert app["user"] == "alice" and app["groups"] == ["analysts", "ops"]
    assert before <= app["submissionTime"] <= after
    log = app["stateLog"]
    # YuniKorn's states: Starting on the first allocation, Running on the next
    assert [entry["applicationState"] for entry in log] == ["Accepted", "Starting", "Running"]
    times = [entry["time"] for entry in log]
    assert app["submissionTime"] <= times[0] <= times[1] <= times[2] <= after
    assert app["startTime"] == times[2] // 1_000_000  # ms, as YuniKorn
    assert app["usedResource"]["memory"] == 20_000_000
    assert app["maxUsedResource"]["memory"] == 30_000_000  # the most it held, not what it holds
    assert "finishedTime" not in app and "requests" not in app  # omitempty


def test_a_completed_application_has_its_finished_time(scenario) -> None:
    _, url, _, _ = scenario
    (done,) = ok(url + "/ws/v1/partition/default/applications/completed")
    states = [entry["applicationState"] for entry in done["stateLog"]]
    assert states == ["Accepted", "Starting", "Completing", "Completed"]
    times = [entry["time"] for entry in done["stateLog"]]
    assert times == sorted(times) and done["finishedTime"] == times[-1] <= time.time_ns()
    assert "startTime" not in done  # it never ran: omitempty
    # none given: without a usergroupresolver the user's one group is named after it, as in YuniKorn
    assert done["groups"] == [done["user"]]


def test_nodes_show_utilized_percentages(scenario) -> None:
    _, url, _, _ = scenario
    node = ok(url + "/ws/v1/partition/default/node/n1")
    # 2 of app-1's SMALL left: 20 MB of 100 MB, 2 of 20 vcore
    assert node["utilized"] == {"memory": 20, "vcore": 10}
    assert node["allocated"] == {"memory": 20_000_000, "vcore": 2_000}


def test_queues_show_headroom_and_priority_fields(scenario) -> None:
    core, url, _, _ = scenario
    a = ok(url + "/ws/v1/partition/default/queue/root.a")
    # the least of its max less what it holds (130 MB, 13 vcore) and the root's (the node: 80 MB, 18)
    assert a["headroom"] == {"memory": 80_000_000, "vcore": 13_000}
    assert a["isPriorityFence"] is True and a["priorityOffset"] == 5 and a["preemptionDelay"] == "1m30s"
    tree = ok(url + "/ws/v1/partition/default/queues")
    b = next(child for child in tree["children"] if child["queuename"] == "root.b")
    root = core.queue(part(), "root")
    assert root is not None
    # root.b has no max: the root's headroom is its own
    expected_root = {name: limit - root.allocated.get(name, 0) for name, limit in root.max.items()} or None
    assert b.get("headroom") == tree.get("headroom") == expected_root
    assert b["isPriorityFence"] is False and "priorityOffset" not in b and b["preemptionDelay"] == "30s"


def test_usage_resources_are_flat_maps(scenario) -> None:
    _, url, _, _ = scenario
    alice = ok(url + "/ws/v1/partition/default/usage/user/alice")
    assert alice["queues"]["queuePath"] == "root"
    assert alice["queues"]["resourceUsage"] == {"memory": 20_000_000, "vcore": 2_000}


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (30, "30s"),
        (90, "1m30s"),
        (3600, "1h0m0s"),
        (0.5, "500ms"),
        (1.5, "1.5s"),
        (0, "0s"),
        (3725.25, "1h2m5.25s"),
    ],
)
def test_go_duration_strings(seconds: float, text: str) -> None:
    assert routes.go_duration(seconds) == text


def test_application_dao_from_a_snapshot() -> None:
    info = ApplicationInfo(
        application_id="x",
        partition="[rm]default",
        queue="root.a",
        user="u",
        state="Running",
        allocated={},
        pending={},
        placeholder={},
        allocations=[],
        pending_asks=[],
        state_log=[(1_000_000_123, "Accepted"), (2_500_000_000, "Running")],
        submission_time_ns=999,
    )
    document = dao.application(info)
    assert document["startTime"] == 2_500 and document["submissionTime"] == 999
    assert "finishedTime" not in document and "usedResource" not in document
    assert document["stateLog"][0] == {"time": 1_000_000_123, "applicationState": "Accepted"}


class StampedRM(t.RecordingRM):
    """Also keeps each application state change's timestamp as the RM was sent it."""

    def __init__(self, rm_id: str) -> None:
        super().__init__(rm_id)
        self.stamps: list[tuple[str, str, int]] = []

    def update_application(self, response: Any) -> None:
        self.stamps.extend(
            (u.application_id, u.state, u.state_transition_timestamp) for u in response.updated
        )
        super().update_application(response)


def test_state_transition_timestamps_are_unix_nanoseconds() -> None:
    rm = StampedRM("rm")
    before = time.time_ns()
    with running(CONFIG, rm=rm) as (core, _):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app": "root.a"})
        core.update_allocation(t.asks("rm", "app", 1, SMALL))
        assert rm.wait_for_allocations(1)
        core.wait_until_idle()
        after = time.time_ns()
        url = core.serve_rest("127.0.0.1:0")
        log = ok(url + "/ws/v1/partition/default/application/app")["stateLog"]
    stamps = [(state, stamp) for app, state, stamp in rm.stamps if app == "app"]
    assert [state for state, _ in stamps] == ["Accepted", "Starting"]
    assert all(before <= stamp <= after for _, stamp in stamps)
    # the RM is told the same times as the REST API shows
    assert stamps == [(entry["applicationState"], entry["time"]) for entry in log]


def test_a_completed_application_has_its_resource_seconds(scenario) -> None:
    _, url, _, _ = scenario
    (done,) = ok(url + "/ws/v1/partition/default/applications/completed")
    used = done["resourceHistory"]["resourceUsage"]
    assert list(used) == ["UNKNOWN"]  # its node has no instance type attribute: YuniKorn's name
    seconds = used["UNKNOWN"]["memory"] // SMALL["memory"]
    assert used["UNKNOWN"] == {name: value * seconds for name, value in SMALL.items()}
    app = ok(url + "/ws/v1/partition/default/application/app-1")
    assert list(app["resourceHistory"]) == ["resourceUsage"]  # the one released allocation


def test_a_completed_application_logs_its_summary(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="korral.application.usage")
    with running(CONFIG) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app": "root.b"}, user="bob")
        core.update_allocation(t.asks("rm", "app", 2, SMALL))
        assert rm.wait_for_allocations(2)
        for uuid in list(rm.live):
            core.update_allocation(t.release("rm", "app", uuid=uuid))
        eventually(lambda: core.completed_applications(part()))
        core.wait_until_idle()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("YK_APP_SUMMARY: ")]
    assert len(lines) == 1
    line = lines[0]
    assert "ApplicationID: app, " in line and "User: bob, Queue: root.b, State: Completed, RmID: rm, " in line
    assert (
        "ResourceUsage: TrackedResource{UNKNOWN:memory=" in line
        and "PreemptedResource: TrackedResource{}" in line
    )


TEMPLATED = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: t
            parent: true
            childtemplate:
              maxapplications: 3
              properties: {application.sort.policy: fair}
              resources:
                max: {memory: 50M}
            queues:
              - name: sub
                parent: true
              - name: leaf
          - name: plain
"""


def test_queues_show_their_template_as_yunikorn_sets_and_inherits_it() -> None:
    with running(TEMPLATED) as (core, _):
        url = core.serve_rest("127.0.0.1:0")
        tree = ok(url + "/ws/v1/partition/default/queues")
        by_path: dict[str, Any] = {}

        def walk(document: dict) -> None:
            by_path[document["queuename"]] = document
            for child in document.get("children", []):
                walk(child)

        walk(tree)
        expected = {
            "maxApplications": 3,
            "maxResource": {"memory": 50_000_000},
            "properties": {"application.sort.policy": "fair"},
        }
        assert by_path["root.t"]["template"] == expected
        assert by_path["root.t.sub"]["template"] == expected  # a parent inherits its parent's
        for path in ("root", "root.t.leaf", "root.plain"):  # none of its own, or a leaf: omitted
            assert "template" not in by_path[path], path
        assert ok(url + "/ws/v1/partition/default/queue/root.t.sub")["template"] == expected


def test_a_users_applications_name_the_group_they_are_tracked_against() -> None:
    limited = CONFIG.replace(
        "          - name: b\n",
        "          - name: b\n            limits:\n              - limit: dev\n"
        "                groups: [dev]\n                maxapplications: 5\n",
    )
    with running(limited) as (core, rm):
        add_apps(core, rm, {"app-d": "root.b"}, user="alice", groups=["dev"])
        add_apps(core, rm, {"app-o": "root.a"}, user="alice", groups=["ops"])
        url = core.serve_rest("127.0.0.1:0")
        alice = ok(url + "/ws/v1/partition/default/usage/user/alice")
        assert alice["groups"] == {"app-d": "dev"}  # app-o: no group limit applies, not tracked
        assert ok(url + "/ws/v1/partition/default/usage/users")[0]["groups"] == {"app-d": "dev"}
