"""YuniKorn's REST API and metrics served by a core, over real loopback sockets.

Every answer is checked against the core's own snapshots (``korral.Core.partition/queue/nodes/...``)
and the metrics against what the RM was told.
"""

from __future__ import annotations

import http.client
import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import attrs
import pytest
import yaml
from core_helpers import NODE, SMALL, TWO_LEAVES, add_apps, add_nodes, eventually, part, running
from prometheus_client.parser import text_string_to_metric_families

import korral
from korral import si
from korral import testing as t
from korral.info import AllocationInfo, ApplicationInfo, NodeInfo, PartitionInfo
from korral.server import dao, rest

pytest.importorskip("aiohttp")

LIMITED = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
            resources:
              guaranteed: {memory: 50M, vcore: 5}
              max: {memory: 150M, vcore: 15}
          - name: b
"""


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def ok(url: str) -> Any:
    status, body = get(url)
    assert status == 200, body
    return body


def metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url + "/ws/v1/metrics", timeout=30) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def sample(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture(scope="module")
def served():
    """One RM with two leaves: app-1 runs 3 allocations in root.a, app-2 waits in root.b with an
    ask too big for any node, app-done completed, app-bad rejected (unknown queue)."""
    with running(LIMITED) as (core, rm):
        request = t.nodes("rm", ["n1", "n2"], NODE)
        hosted = [attrs.evolve(n, attributes={si.HOST_NAME: f"host-{n.node_id}"}) for n in request.nodes]
        core.update_node(attrs.evolve(request, nodes=hosted))
        core.wait_until_idle()
        add_apps(core, rm, {"app-1": "root.a", "app-2": "root.b", "app-done": "root.b"})
        core.update_application(t.applications("rm", {"app-bad": "root.nope.deeper"}))
        core.update_allocation(t.asks("rm", "app-1", 3, SMALL))
        core.update_allocation(t.asks("rm", "app-2", 1, {"memory": 10**12}))
        core.update_allocation(t.asks("rm", "app-done", 1, SMALL))
        assert rm.wait_for_allocations(4)
        core.wait_until_idle()
        done = [a for a in rm.live.values() if a.application_id == "app-done"]
        core.update_allocation(t.release("rm", "app-done", uuid=done[0].uuid))
        eventually(lambda: core.completed_applications(part()))
        core.wait_until_idle()
        url = core.serve_rest("127.0.0.1:0")
        yield core, rm, url


def test_partitions_and_clusters_match_the_snapshot(served) -> None:
    core, _rm, url = served
    info = core.partition(part())
    [document] = ok(url + "/ws/v1/partitions")
    assert document["clusterId"] == "rm"
    assert document["name"] == "default"
    assert document["capacity"]["capacity"] == info.capacity
    assert document["capacity"]["usedCapacity"] == info.allocated
    assert document["totalNodes"] == 2
    assert document["totalContainers"] == 3
    assert document["applications"] == {
        "Running": 1,
        "Accepted": 1,
        "Completed": 1,
        "Rejected": 1,
        "total": 4,
    }
    assert document["nodeSortingPolicy"]["type"] == info.node_sort_policy
    [cluster] = ok(url + "/ws/v1/clusters")
    assert cluster["partition"] == "default" and cluster["clusterName"] == "kubernetes"
    assert cluster["rmBuildInformation"] == [{"rmId": "rm"}]


def test_queue_tree_and_one_queue(served) -> None:
    core, _rm, url = served
    root = ok(url + "/ws/v1/partition/default/queues")
    assert root["queuename"] == "root" and root["partition"] == "default" and not root["isLeaf"]
    by_name = {child["queuename"]: child for child in root["children"]}
    assert set(by_name) == {"root.a", "root.b"}
    for path, document in [("root", root), *by_name.items()]:
        snapshot = core.queue(part(), path)
        assert document.get("allocatedResource", {}) == snapshot.allocated
        assert document.get("pendingResource", {}) == snapshot.pending
        assert document.get("guaranteedResource", {}) == snapshot.guaranteed
        assert document["maxResource"] == snapshot.max
        assert document["isLeaf"] == snapshot.is_leaf
        assert document["status"] == snapshot.state
        assert document["sortingPolicy"] == snapshot.sort_policy == "fifo"
        assert document["prioritySorting"] is snapshot.priority_sorting is True
    assert by_name["root.a"]["guaranteedResource"] == {"memory": 50_000_000, "vcore": 5_000}
    assert by_name["root.a"]["absUsedCapacity"] == {"memory": 20, "vcore": 20}
    assert by_name["root.a"]["parent"] == "root"
    # YuniKorn's runningApps: applications in state Running in the queue's subtree (app-2, Accepted
    # with nothing allocated, does not count; app-done has left)
    assert root["runningApps"] == by_name["root.a"]["runningApps"] == 1
    assert "runningApps" not in by_name["root.b"]
    assert core.queue(part(), "root").running_applications == 1
    assert [q.running_applications for q in core.queues(part())] == [1, 1, 0]
    one = ok(url + "/ws/v1/partition/default/queue/root.a")
    assert "children" not in one and one["queuename"] == "root.a"
    assert "children" not in ok(url + "/ws/v1/partition/default/queue/root")
    subtree = ok(url + "/ws/v1/partition/default/queue/root?subtree")
    assert {c["queuename"] for c in subtree["children"]} == {"root.a", "root.b"}
    assert sorted(subtree["childNames"]) == ["root.a", "root.b"]


def test_nodes_and_one_node(served) -> None:
    core, _rm, url = served
    documents = {d["nodeID"]: d for d in ok(url + "/ws/v1/partition/default/nodes")}
    assert set(documents) == {"n1", "n2"}
    for snapshot in core.nodes(part()):
        document = documents[snapshot.node_id]
        assert document == ok(url + f"/ws/v1/partition/default/node/{snapshot.node_id}")
        assert document["capacity"] == snapshot.capacity
        assert document.get("allocated", {}) == snapshot.allocated
        assert document["available"] == snapshot.available
        assert document["schedulable"] is True and document["isReserved"] is False
        assert document["hostName"] == f"host-{snapshot.node_id}"
        assert sorted(a["allocationKey"] for a in document.get("allocations", [])) == sorted(
            a.allocation_key for a in snapshot.allocations
        )


def test_applications_by_state_queue_and_id(served) -> None:
    core, rm, url = served
    base = url + "/ws/v1/partition/default"
    active = {d["applicationID"]: d for d in ok(base + "/applications/active")}
    assert set(active) == {"app-1", "app-2"}
    assert [d["applicationID"] for d in ok(base + "/applications/active?status=running")] == ["app-1"]
    assert [d["applicationID"] for d in ok(base + "/applications/active?status=Accepted")] == ["app-2"]
    [completed] = ok(base + "/applications/completed")
    assert completed["applicationID"] == "app-done" and completed["applicationState"] == "Completed"
    [rejected] = ok(base + "/applications/rejected")
    assert rejected["applicationID"] == "app-bad"
    assert rejected["rejectedMessage"] == rm.rejected_apps["app-bad"]

    snapshot = core.application(part(), "app-1")
    document = ok(base + "/application/app-1")
    assert document == active["app-1"]
    assert document["queueName"] == "root.a" and document["partition"] == "default"
    assert document["usedResource"] == snapshot.allocated
    assert document["applicationState"] == snapshot.state == "Running"
    assert document["user"] == "user"
    assert sorted((a["allocationKey"], a["nodeId"]) for a in document["allocations"]) == sorted(
        (a.allocation_key, a.node_id) for a in snapshot.allocations
    )
    waiting = ok(base + "/queue/root.b/application/app-2")
    assert waiting["pendingResource"] == {"memory": 10**12}
    waiting_snapshot = core.application(part(), "app-2")
    assert [r["allocationKey"] for r in waiting["requests"]] == waiting_snapshot.pending_asks
    (request,) = waiting["requests"]
    (ask,) = waiting_snapshot.asks
    assert request == {
        "allocationKey": ask.allocation_key,
        "requestTime": ask.request_time_ns,
        "resource": {"memory": 10**12},
        "pendingCount": 1,
        "priority": "0",
        "applicationId": "app-2",
    }
    assert time.time_ns() - 600 * 10**9 < ask.request_time_ns <= time.time_ns()  # taken in by this test
    assert [d["applicationID"] for d in ok(base + "/queue/root.a/applications")] == ["app-1"]
    assert [d["applicationID"] for d in ok(base + "/queue/root.b/applications/active?status=accepted")] == [
        "app-2"
    ]
    assert ok(base + "/queue/root.b/applications/active?status=running") == []


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/ws/v1/partition/nope/queues", 404, "Partition not found"),
        ("/ws/v1/partition/default/queue/root.x", 404, "Queue not found"),
        ("/ws/v1/partition/default/node/n9", 404, "Node not found"),
        ("/ws/v1/partition/default/application/app-9", 404, "Application not found"),
        ("/ws/v1/partition/default/queue/root.b/application/app-1", 404, "Application not found"),
        ("/ws/v1/partition/default/applications/sleeping", 400, "Only following application states"),
        ("/ws/v1/partition/default/applications/active?status=asleep", 400, "Only following active statuses"),
        ("/ws/v1/partition/default/queue/root.a/applications/completed", 400, "Only following"),
        ("/ws/v1/partition/default/queue/root.a%21/applications", 400, "invalid queue name"),
        ("/ws/v1/partition/default/usage/user/bob", 404, "User not found"),
        ("/ws/v1/partition/default/usage/group/devs", 404, "Group not found"),
        ("/ws/v1/partition/default/usage/user/%21bob", 400, "Invalid user name"),
        ("/ws/v1/events/batch?count=0", 400, '0 is not a valid value for "count"'),
        ("/ws/v1/events/batch?start=x", 400, "invalid syntax"),
        ("/ws/v1/no/such/route", 404, "Not Found"),
    ],
)
def test_errors_carry_yunikorns_status_and_body(served, path: str, status: int, message: str) -> None:
    _, _, url = served
    code, body = get(url + path)
    assert code == status
    assert body["status_code"] == status and message in body["message"]
    assert body["description"] == body["message"]


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
                maxresources: {memory: 3G}
                maxapplications: 2
          - name: free
"""


def test_usage_lists_every_user_as_the_core_tracks_them(served) -> None:
    core, _, url = served
    users = core.users_usage(part())
    assert [u.user for u in users] == ["user"]  # every application of the fixture runs as "user"
    assert ok(url + "/ws/v1/partition/default/usage/users") == [dao.user_usage(u) for u in users]
    listed = ok(url + "/ws/v1/partition/default/usage/users")[0]
    assert listed == ok(url + "/ws/v1/partition/default/usage/user/user")
    assert listed["userName"] == "user" and listed["queues"]["queuePath"] == "root"
    assert listed["queues"]["runningApplications"] == ["app-1"]  # app-2 holds nothing yet
    # no group limit in this config: no group is tracked
    assert core.groups_usage(part()) == []
    assert ok(url + "/ws/v1/partition/default/usage/groups") == []


def test_usage_lists_groups_under_a_group_limit() -> None:
    with running(GROUP_LIMITS) as (core, rm):
        add_nodes(core, rm, ["n1"], NODE)
        add_apps(core, rm, {"app-d": "root.team"}, user="alice", groups=["dev"])
        add_apps(core, rm, {"app-f": "root.free"}, user="bob", groups=["ops"])
        core.update_allocation(t.asks("rm", "app-d", 1, SMALL))
        assert rm.wait_for_allocations(1)
        core.wait_until_idle()
        url = core.serve_rest("127.0.0.1:0")
        groups = ok(url + "/ws/v1/partition/default/usage/groups")
        assert groups == [dao.group_usage(g) for g in core.groups_usage(part())]
        assert [g["groupName"] for g in groups] == ["dev"]  # ops: no limit applies, not tracked
        assert groups[0]["applications"] == ["app-d"]
        team = groups[0]["queues"]["children"][0]
        assert team["queuePath"] == "root.team" and team["maxApplications"] == 2
        assert groups[0] == ok(url + "/ws/v1/partition/default/usage/group/dev")
        users = ok(url + "/ws/v1/partition/default/usage/users")
        assert [u["userName"] for u in users] == ["alice", "bob"]
        assert users == [dao.user_usage(u) for u in core.users_usage(part())]


def test_serving_shortens_the_gil_switch_interval_until_stopped() -> None:
    before = sys.getswitchinterval()
    with running(TWO_LEAVES) as (core, _):
        core.serve_rest("127.0.0.1:0")
        assert sys.getswitchinterval() <= rest.SWITCH_INTERVAL
    assert sys.getswitchinterval() == before  # the process's own setting is back


def test_requests_do_not_change_state(served) -> None:
    core, rm, url = served
    before = (core.partition(part()), core.nodes(part()), rm.allocated_total)
    request = urllib.request.Request(url + "/ws/v1/partition/default/queues", method="DELETE")
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=30)
    assert raised.value.code == 405
    ok(url + "/ws/v1/fullstatedump")
    core.wait_until_idle()
    assert (core.partition(part()), core.nodes(part()), rm.allocated_total) == before


def test_concurrent_requests_all_answered(served) -> None:
    _, _, url = served
    expected = ok(url + "/ws/v1/partition/default/queues")
    with ThreadPoolExecutor(max_workers=16) as clients:
        answers = list(clients.map(lambda _: get(url + "/ws/v1/partition/default/queues"), range(48)))
    assert answers == [(200, expected)] * 48


def test_health_check_runs_on_request(served) -> None:
    _, _, url = served
    health = ok(url + "/ws/v1/scheduler/healthcheck")
    assert health["Healthy"] is True
    names = [check["Name"] for check in health["HealthChecks"]]
    assert names.count("Consistency of data") == 4 and "Orphan allocation on node check" in names
    assert all(check["Succeeded"] for check in health["HealthChecks"])


def test_state_dump_holds_everything(served) -> None:
    _core, _, url = served
    dump = ok(url + "/ws/v1/fullstatedump")
    assert {"timestamp", "partitions", "applications", "nodes", "clusterInfo", "queues"} <= set(dump)
    assert {a["applicationID"] for a in dump["applications"]} == {"app-1", "app-2", "app-done", "app-bad"}
    assert [len(p["nodesInfo"]) for p in dump["nodes"]] == [2]
    assert dump["queues"][0]["queuename"] == "root"


def test_validate_conf_answers_allowed_and_reason(served) -> None:
    _, _, url = served

    def validate(body: str) -> Any:
        request = urllib.request.Request(url + "/ws/v1/validate-conf", data=body.encode(), method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    assert validate(TWO_LEAVES) == {"allowed": True}  # yunikorn-core: reason is omitempty
    refused = validate(TWO_LEAVES.replace("name: b", "name: b!"))
    assert refused["allowed"] is False and "b!" in refused["reason"]
    request = urllib.request.Request(url + "/ws/v1/validate-conf", data=b"\xff\xfe\x00", method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        garbage = json.loads(response.read())
    assert garbage["allowed"] is False and "UTF-8" in garbage["reason"]


def test_events_batch_is_what_the_rm_was_sent(served) -> None:
    _, rm, url = served
    batch = ok(url + "/ws/v1/events/batch")
    assert batch["LowestID"] == 0 and batch["HighestID"] == len(rm.events) - 1
    assert [(e["objectID"], e["eventChangeDetail"]) for e in batch["EventRecords"]] == [
        (e.object_id, int(e.event_change_detail)) for e in rm.events
    ]
    page = ok(url + "/ws/v1/events/batch?start=2&count=3")
    assert [e["id"] for e in page["EventRecords"]] == [2, 3, 4]


def test_metrics_count_what_happened(served) -> None:
    core, rm, url = served
    samples = metrics(url)
    allocations = "yunikorn_scheduler_container_allocation_attempt_total"
    assert sample(samples, allocations, state="allocated") == rm.allocated_total == 4
    assert sample(samples, allocations, state="released") == len(rm.released) == 1
    assert sample(samples, allocations, state="error") == 0
    submissions = "yunikorn_scheduler_application_submission_total"
    assert sample(samples, submissions, result="accepted") == 3
    assert sample(samples, submissions, result="rejected") == 1
    assert sample(samples, "yunikorn_scheduler_application_total", state="running") == 1
    assert sample(samples, "yunikorn_scheduler_application_total", state="accepted") == 1
    assert sample(samples, "yunikorn_scheduler_application_total", state="completed") == 1
    assert sample(samples, "yunikorn_scheduler_node", state="active") == 2
    assert sample(samples, "yunikorn_scheduler_scheduling_latency_milliseconds_count") > 0
    partition = part()
    assert sample(samples, "yunikorn_queue_app", partition=partition, queue="root.a", state="running") == 1
    assert sample(samples, "yunikorn_queue_app", partition=partition, queue="root.b", state="completed") == 1
    for path in ("root", "root.a", "root.b"):
        snapshot = core.queue(partition, path)
        for state, resource in (("allocated", snapshot.allocated), ("pending", snapshot.pending)):
            for name in ("memory", "vcore"):
                labels = {"partition": partition, "queue": path, "state": state, "resource": name}
                assert sample(samples, "yunikorn_queue_resource", **labels) == resource.get(name, 0), labels
    limits = {"partition": partition, "queue": "root.a", "resource": "memory"}
    assert sample(samples, "yunikorn_queue_resource", state="guaranteed", **limits) == 50_000_000
    assert sample(samples, "yunikorn_queue_resource", state="max", **limits) == 150_000_000


def test_two_rms_partitions_by_full_name_and_metrics_apart() -> None:
    with running(TWO_LEAVES, rm_id="rm1") as (core, rm1):
        rm2 = t.RecordingRM("rm2")
        core.register_resource_manager(t.register("rm2", TWO_LEAVES), rm2)
        add_nodes(core, rm1, ["a1"])
        add_nodes(core, rm2, ["b1", "b2"])
        add_apps(core, rm2, {"app": "root.a"})
        core.update_allocation(t.asks("rm2", "app", 2, SMALL))
        assert rm2.wait_for_allocations(2)
        core.wait_until_idle()
        url = core.serve_rest("127.0.0.1:0")
        status, body = get(url + "/ws/v1/partition/default/nodes")
        assert status == 400 and "[rm1]default" in body["message"] and "[rm2]default" in body["message"]
        for rm_id, nodes in (("rm1", {"a1"}), ("rm2", {"b1", "b2"})):
            quoted = urllib.parse.quote(f"[{rm_id}]default", safe="")
            assert {n["nodeID"] for n in ok(url + f"/ws/v1/partition/{quoted}/nodes")} == nodes
        # the plain name is shared: each is listed under its full name (issue 27)
        assert sorted((p["clusterId"], p["name"]) for p in ok(url + "/ws/v1/partitions")) == [
            ("rm1", "[rm1]default"),
            ("rm2", "[rm2]default"),
        ]
        samples = metrics(url)
        used = {"queue": "root.a", "state": "allocated", "resource": "memory"}
        assert sample(samples, "yunikorn_queue_resource", partition="[rm2]default", **used) == 20_000_000
        assert sample(samples, "yunikorn_queue_resource", partition="[rm1]default", **used) == 0


def test_metrics_forget_what_a_reregistration_removed() -> None:
    with running(TWO_LEAVES) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app": "root.a"})
        core.update_allocation(t.asks("rm", "app", 1, SMALL))
        assert rm.wait_for_allocations(1)
        core.wait_until_idle()
        url = core.serve_rest("127.0.0.1:0")
        used = {"partition": part(), "queue": "root.a", "state": "allocated", "resource": "memory"}
        assert sample(metrics(url), "yunikorn_queue_resource", **used) == SMALL["memory"]
        core.register_resource_manager(t.register("rm", TWO_LEAVES), rm)  # a new partition, empty
        core.wait_until_idle()
        samples = metrics(url)
        assert ("yunikorn_queue_resource", tuple(sorted(used.items()))) not in samples
        assert sample(samples, "yunikorn_queue_app", partition=part(), queue="root.a", state="running") == 0
        assert sample(samples, "yunikorn_scheduler_node", state="active") == 0
        assert sample(samples, "yunikorn_scheduler_application_total", state="running") == 0


def test_metrics_off_counts_nothing_and_serves_all_the_same() -> None:
    with running(TWO_LEAVES, metrics=False) as (core, rm):
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app": "root.a"})
        core.update_allocation(t.asks("rm", "app", 2, SMALL))
        assert rm.wait_for_allocations(2)
        core.wait_until_idle()
        url = core.serve_rest("127.0.0.1:0")
        samples = metrics(url)
        allocations = "yunikorn_scheduler_container_allocation_attempt_total"
        assert sample(samples, allocations, state="allocated") == 0
        assert sample(samples, "yunikorn_scheduler_node", state="active") == 0
        root = ok(url + "/ws/v1/partition/default/queues")
        assert (
            root["allocatedResource"]
            == core.queue(part(), "root").allocated
            == {name: 2 * value for name, value in SMALL.items()}
        )


def test_partition_names_and_queues_follow_registrations() -> None:
    core = korral.start()
    try:
        assert core.partition_names() == [] and core.queues("[rm]default") == []
        core.register_resource_manager(t.register("rm", TWO_LEAVES), t.RecordingRM("rm"))
        assert core.partition_names() == ["[rm]default"]
        assert [q.path for q in core.queues("[rm]default")] == ["root", "root.a", "root.b"]
        config = TWO_LEAVES + "  - name: gpu\n    queues:\n      - name: root\n"
        core.update_configuration(si.UpdateConfigurationRequest(rm_id="rm", config=config))
        assert core.partition_names() == ["[rm]default", "[rm]gpu"]
        assert core.queues("[rm]nope") == []
    finally:
        core.stop()
    assert core.partition_names() == []
    with pytest.raises(korral.SchedulerError):
        core.queues("[rm]default")


def test_each_core_has_its_own_registry() -> None:
    with running(TWO_LEAVES) as (core, rm), korral.start() as idle:
        add_nodes(core, rm, ["n1"])
        busy = metrics(core.serve_rest("127.0.0.1:0"))
        quiet = metrics(idle.serve_rest("127.0.0.1:0"))
        assert sample(busy, "yunikorn_scheduler_node", state="active") == 1
        assert sample(quiet, "yunikorn_scheduler_node", state="active") == 0


def test_event_stream_delivers_new_events() -> None:
    with running(TWO_LEAVES) as (core, rm):
        url = urllib.parse.urlsplit(core.serve_rest("127.0.0.1:0"))
        connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        connection.request("GET", "/ws/v1/events/stream")
        response = connection.getresponse()
        assert response.status == 200
        assert "InstanceUUID" in json.loads(response.readline())
        add_nodes(core, rm, ["n1"])
        event = json.loads(response.readline())
        assert event["objectID"] == "n1" and event["type"] == int(si.EventRecordType.NODE)
        connection.close()
        add_nodes(core, rm, ["n2"])  # the closed client is forgotten; the core goes on


def test_stop_stops_the_server() -> None:
    before = set(threading.enumerate())
    core = korral.start()
    url = urllib.parse.urlsplit(core.serve_rest("127.0.0.1:0"))
    assert url.hostname == "127.0.0.1"
    ok(urllib.parse.urlunsplit(url) + "/ws/v1/partitions")  # its worker threads have started
    core.stop()
    with pytest.raises(OSError), socket.create_connection((url.hostname, url.port), timeout=5):
        pass
    assert [th.name for th in set(threading.enumerate()) - before if th.is_alive()] == []
    with pytest.raises(korral.SchedulerError):
        core.serve_rest("127.0.0.1:0")


# ---- the health checks on snapshots that are not consistent (no core can be made this way) ----------


def _partition(**fields: Any) -> PartitionInfo:
    values = {
        "name": "[rm]default",
        "rm_id": "rm",
        "state": "Active",
        "capacity": {"memory": 100},
        "allocated": {"memory": 10},
        "node_sort_policy": "fair",
        "node_count": 1,
        "application_count": 1,
    }
    return PartitionInfo(**{**values, **fields})


def _allocation(uuid: str = "u1", node: str = "n1", app: str = "app") -> AllocationInfo:
    return AllocationInfo(
        allocation_key="k", uuid=uuid, application_id=app, node_id=node, resource={"memory": 10}
    )


def _node(**fields: Any) -> NodeInfo:
    values = {
        "node_id": "n1",
        "partition": "[rm]default",
        "capacity": {"memory": 100},
        "allocated": {"memory": 10},
        "occupied": {},
        "available": {"memory": 90},
        "schedulable": True,
        "attributes": {},
        "allocations": [_allocation()],
        "reservations": [],
    }
    return NodeInfo(**{**values, **fields})


def _app(**fields: Any) -> ApplicationInfo:
    values = {
        "application_id": "app",
        "partition": "[rm]default",
        "queue": "root.a",
        "user": "u",
        "state": "Running",
        "allocated": {"memory": 10},
        "pending": {},
        "placeholder": {},
        "allocations": [_allocation()],
        "pending_asks": [],
    }
    return ApplicationInfo(**{**values, **fields})


def _failed(result: dict) -> list[str]:
    return [check["Description"] for check in result["HealthChecks"] if not check["Succeeded"]]


def test_user_and_group_usage_as_yunikorns_tree() -> None:
    def row(path: str, resource: dict, apps: list[str], limit: dict | None = None, count: int = 0) -> Any:
        return SimpleNamespace(
            queue_path=path,
            resource=resource,
            running_applications=apps,
            max_resources=limit or {},
            max_applications=count,
        )

    rows = [
        row("root.a", {"memory": 10}, ["app-1"], {"memory": 50}, 2),
        row("root", {"memory": 30}, ["app-1", "app-2"]),
        row("root.b", {"memory": 20}, ["app-2"]),
    ]
    user = dao.user_usage(SimpleNamespace(user="bob", queues=rows))
    assert user["userName"] == "bob"
    tree = user["queues"]
    assert tree["queuePath"] == "root" and tree["resourceUsage"] == {"memory": 30}
    assert [c["queuePath"] for c in tree["children"]] == ["root.a", "root.b"]
    assert tree["children"][0]["maxResources"] == {"memory": 50}
    assert tree["children"][0]["maxApplications"] == 2 and "maxApplications" not in tree
    assert "children" not in tree["children"][1]
    group = dao.group_usage(SimpleNamespace(group="devs", queues=rows))
    assert group["groupName"] == "devs" and group["applications"] == ["app-1", "app-2"]
    assert dao.user_usage(SimpleNamespace(user="nobody", queues=[])) == {"userName": "nobody"}


def test_health_checks_pass_on_consistent_books() -> None:
    assert dao.health(0, 0, [(_partition(), [_node()], [_app()])])["Healthy"] is True


@pytest.mark.parametrize(
    ("snapshots", "failed"),
    [
        ((_partition(allocated={"memory": -1}), [], []), "negative resources in the partitions"),
        (
            (_partition(), [_node(available={"memory": 95}, occupied={"memory": -5})], [_app()]),
            "negative resources in the nodes",
        ),
        ((_partition(capacity={"memory": 300}), [_node()], [_app()]), "sum of the node resources"),
        ((_partition(), [_node(available={"memory": 80})], [_app()]), "allocated resource + occupied"),
        ((_partition(allocated={"memory": 20}), [_node()], [_app()]), "sum of the allocated resources"),
        ((_partition(), [_node()], [_app(allocations=[])]), "orphan allocations on the nodes"),
        ((_partition(), [_node(allocations=[])], [_app()]), "orphan allocations on the applications"),
    ],
)
def test_health_checks_find_what_is_wrong(snapshots: tuple, failed: str) -> None:
    result = dao.health(0, 0, [snapshots])
    assert result["Healthy"] is False
    assert any(failed in description for description in _failed(result)), _failed(result)


def test_health_counts_scheduling_errors_and_failed_nodes() -> None:
    result = dao.health(2, 1, [(_partition(), [_node()], [_app()])])
    assert _failed(result) == [
        "Check for scheduling error entries in metrics",
        "Check for failed nodes entries in metrics",
    ]


RULES = """
partitions:
  - name: default
    placementrules:
      - name: tag
        value: Namespace
        create: true
        parent:
          name: fixed
          value: root.apps
      - name: provided
        filter:
          type: deny
          users: [bob, eve]
          groups: ["^ops-.*"]
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: apps
            parent: true
            resources:
              guaranteed: {memory: 50M, vcore: 500m}
          - name: b
            maxapplications: 3
            properties: {application.sort.policy: fair}
            limits:
              - limit: one
                users: [alice]
                maxresources: {vcore: 2}
"""


def test_placement_rules_as_the_partition_runs_them() -> None:
    with running(RULES) as (core, _):
        url = core.serve_rest("127.0.0.1:0")
        assert ok(url + "/ws/v1/partition/default/placementrules") == [
            {
                "name": "tag",
                "parameters": {"tagName": "namespace", "create": "true"},
                "parentRule": {
                    "name": "fixed",
                    "parameters": {"queue": "root.apps", "create": "false", "qualified": "true"},
                },
            },
            {
                "name": "provided",
                "parameters": {"create": "false"},
                "filter": {"type": "deny", "userList": ["bob", "eve"], "groupExp": "^ops-.*"},
            },
            {"name": "recovery"},
        ]
        assert get(url + "/ws/v1/partition/nope/placementrules")[0] == 404


def test_placement_rules_default_to_provided(served) -> None:
    _, _, url = served
    assert ok(url + "/ws/v1/partition/default/placementrules") == [
        {"name": "provided", "parameters": {"create": "false"}},
        {"name": "recovery"},
    ]


def test_config_as_yaml_reads_back_as_the_running_config() -> None:
    with running(RULES) as (core, _):
        url = core.serve_rest("127.0.0.1:0")
        with urllib.request.urlopen(url + "/ws/v1/config", timeout=30) as response:
            assert response.headers["Content-Type"].startswith("application/x-yaml")
            text = response.read().decode()
        running_config = core.configurations()["rm"]
        assert yaml_keys(text)["checksum"] == running_config.checksum
        again = korral.load_config(text)  # YuniKorn's field names, quantities that parse back the same
        assert again.partitions == running_config.partitions


def yaml_keys(text: str) -> dict:
    return yaml.safe_load(text)


def test_config_as_json_has_go_field_names() -> None:
    with running(RULES) as (core, _):
        url = core.serve_rest("127.0.0.1:0")
        request = urllib.request.Request(url + "/ws/v1/config", headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.headers["Content-Type"].startswith("application/json")
            document = json.loads(response.read())
        assert document["Checksum"] == core.configurations()["rm"].checksum
        (partition,) = document["Partitions"]
        assert partition["Name"] == "default"
        assert partition["NodeSortPolicy"]["Type"] == "fair"
        assert [r["Name"] for r in partition["PlacementRules"]] == ["tag", "provided"]
        assert partition["PlacementRules"][0]["Parent"] == {
            "Name": "fixed",
            "Filter": {"Type": ""},
            "Value": "root.apps",
        }
        (root,) = partition["Queues"]
        apps, b = root["Queues"]
        assert apps["Parent"] is True and apps["Resources"]["Guaranteed"] == {
            "memory": "50000000",
            "vcore": "500m",
        }
        assert b["MaxApplications"] == 3 and b["Limits"][0]["MaxResources"] == {"vcore": "2000m"}
