"""YuniKorn's REST API served by a core, over real loopback sockets, against the core's own snapshots."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import rest_helpers
from core_helpers import NODE, SMALL, TWO_LEAVES, add_apps, add_nodes, part, running
from rest_helpers import get, ok

from korral import testing as t
from korral.server.rest import dao
from korral.server.rest import server as rest

pytest.importorskip("aiohttp")


# the shared fixture: pytest finds a fixture by its name in the test module
served = rest_helpers.served


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
        # YuniKorn's maxResource is the queue's own (the root's the capacity); none for root.b, whose
        # limit is the capacity it inherits
        assert document.get("maxResource", {}) == snapshot.own_max
        assert document["isLeaf"] == snapshot.is_leaf
        assert document["status"] == snapshot.state
        assert document["sortingPolicy"] == snapshot.sort_policy == "fifo"
        assert document["prioritySorting"] is snapshot.priority_sorting is True
    assert by_name["root.a"]["guaranteedResource"] == {"memory": 50_000_000, "vcore": 5_000}
    assert by_name["root.a"]["absUsedCapacity"] == {"memory": 20, "vcore": 20}
    assert "maxResource" not in by_name["root.b"] and "absUsedCapacity" not in by_name["root.b"]
    b = core.queue(part(), "root.b")
    assert b.own_max == {} and b.max == core.queue(part(), "root").own_max == {
        "memory": 200_000_000,
        "vcore": 40_000,
    }
    assert root["maxResource"] == b.max
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


def test_serving_shortens_the_gil_switch_interval_when_asked_until_stopped() -> None:
    before = sys.getswitchinterval()
    with running(TWO_LEAVES) as (core, _):
        core.serve_rest("127.0.0.1:0", switch_interval=rest.SWITCH_INTERVAL)
        assert sys.getswitchinterval() <= rest.SWITCH_INTERVAL
    assert sys.getswitchinterval() == before  # the process's own setting is back


def test_serving_leaves_the_process_switch_interval_alone_by_default() -> None:
    before = sys.getswitchinterval()
    assert before > rest.SWITCH_INTERVAL  # Python's own 5 ms
    with running(TWO_LEAVES) as (core, _):
        core.serve_rest("127.0.0.1:0")
        assert sys.getswitchinterval() == before


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


@pytest.mark.parametrize(
    ("path", "accept"),
    [
        ("/ws/v1/partitions", None),
        ("/ws/v1/partition/default/queues", None),
        ("/ws/v1/partition/default/nodes", None),
        ("/ws/v1/partition/nope/queues", None),  # an error's body too
        ("/ws/v1/config", "application/json"),
    ],
)
def test_every_json_answer_ends_with_a_newline_as_yunikorns_encoder_writes(served, path, accept) -> None:
    # Go's json.Encoder ends each document with "\n": `curl a; curl b` prints them on lines of their own
    _core, _rm, url = served
    request = urllib.request.Request(url + path, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
    except urllib.error.HTTPError as error:
        body = error.read()
    assert body.endswith(b"}\n") or body.endswith(b"]\n"), body[-40:]
    json.loads(body)
