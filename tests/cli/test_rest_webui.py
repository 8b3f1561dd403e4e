"""What YuniKorn's web UI calls besides the partition routes (issue 27): the metrics history, node
utilisation buckets, OPTIONS preflights, gzip, the full state dump, and partition names that work with
several RMs. Real loopback sockets, stdlib HTTP client."""

from __future__ import annotations

import gzip
import http.client
import json
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from core_helpers import NODE, SMALL, TWO_LEAVES, add_apps, add_nodes, eventually, running

import korral
from korral import testing as t
from korral.server.history import MetricsHistory

pytest.importorskip("aiohttp")

OTHER = TWO_LEAVES.replace("name: default", "name: other")


def request(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
    """One request with the path sent as is (brackets unquoted, as the UI sends a partition name)."""
    parsed = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
    connection.request(
        method, parsed.path + (f"?{parsed.query}" if parsed.query else ""), headers=headers or {}
    )
    response = connection.getresponse()
    response.read_body = response.read()  # type: ignore[attr-defined]
    connection.close()
    return response


def ok(url: str) -> Any:
    response = request(url)
    assert response.status == 200, response.read_body  # type: ignore[attr-defined]
    return json.loads(response.read_body)  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def two_rms() -> Iterator[tuple[korral.Core, str]]:
    """rm1 and rm2 both own a partition "default", rm2 also "other" is not shared: rm1 has node a1
    holding 5 SMALL allocations (50 % of its memory, 25 % of its vcore), rm2 an idle node b1."""
    with running(TWO_LEAVES, rm_id="rm1") as (core, rm1):
        rm2 = t.RecordingRM("rm2")
        core.register_resource_manager(t.register("rm2", TWO_LEAVES), rm2)
        add_nodes(core, rm1, ["a1"])
        add_nodes(core, rm2, ["b1"])
        add_apps(core, rm1, {"app-1": "root.a"})
        core.update_allocation(t.asks("rm1", "app-1", 5, SMALL))
        assert rm1.wait_for_allocations(5)
        core.wait_until_idle()
        yield core, core.serve_rest("127.0.0.1:0")


def test_every_listed_partition_name_works_with_two_rms(two_rms) -> None:
    _, url = two_rms
    listed = ok(url + "/ws/v1/partitions")
    assert sorted((p["clusterId"], p["name"]) for p in listed) == [
        ("rm1", "[rm1]default"),
        ("rm2", "[rm2]default"),
    ]
    for document in listed:
        name = document["name"]
        for encoded in (name, urllib.parse.quote(name, safe="")):
            base = f"{url}/ws/v1/partition/{encoded}"
            assert ok(base + "/queues")["queuename"] == "root"
            nodes = {n["nodeID"] for n in ok(base + "/nodes")}
            assert nodes == ({"a1"} if document["clusterId"] == "rm1" else {"b1"})
            apps = {a["applicationID"] for a in ok(base + "/applications/active")}
            assert apps == ({"app-1"} if document["clusterId"] == "rm1" else set())
            assert ok(base + "/queue/root.a")["queuename"] == "root.a"


def test_a_plain_name_stays_while_one_rm_owns_it() -> None:
    with running(TWO_LEAVES, rm_id="rm1") as (core, _):
        core.register_resource_manager(t.register("rm2", OTHER), t.RecordingRM("rm2"))
        url = core.serve_rest("127.0.0.1:0")
        listed = ok(url + "/ws/v1/partitions")
        assert sorted((p["clusterId"], p["name"]) for p in listed) == [("rm1", "default"), ("rm2", "other")]
        for name in ("default", "other"):
            assert ok(f"{url}/ws/v1/partition/{name}/queues")["partition"] == name


def test_node_utilizations_bucket_each_resource_of_every_partition(two_rms) -> None:
    _, url = two_rms
    answer = {(p["clusterId"], p["partition"]): p for p in ok(url + "/ws/v1/scheduler/node-utilizations")}
    assert set(answer) == {("rm1", "[rm1]default"), ("rm2", "[rm2]default")}  # as /partitions lists them
    busy = {u["type"]: u["utilization"] for u in answer[("rm1", "[rm1]default")]["utilizations"]}
    idle = {u["type"]: u["utilization"] for u in answer[("rm2", "[rm2]default")]["utilizations"]}
    assert set(busy) == set(idle) == set(NODE)
    for buckets in (*busy.values(), *idle.values()):
        assert [b["bucketName"] for b in buckets] == [f"{k * 10}-{k * 10 + 10}%" for k in range(10)]
    # 5 x 10 MB of 100 MB: 50 % -> "40-50%"; 5 x 1 of 20 vcore: 25 % -> "20-30%" (ceil(p / 10) - 1)
    assert [
        (b["bucketName"], b["numOfNodes"], b["nodeNames"]) for b in busy["memory"] if "numOfNodes" in b
    ] == [("40-50%", 1, ["a1"])]
    assert [(b["bucketName"], b["nodeNames"]) for b in busy["vcore"] if "numOfNodes" in b] == [
        ("20-30%", ["a1"])
    ]
    for buckets in idle.values():  # an empty node is in the first bucket; empty buckets omit counts
        assert buckets[0] == {"bucketName": "0-10%", "numOfNodes": 1, "nodeNames": ["b1"]}
        assert all(b.keys() == {"bucketName"} for b in buckets[1:])


def test_history_records_the_running_totals_in_unix_nanoseconds(two_rms) -> None:
    core, url = two_rms
    before = time.time_ns()
    core.metrics.history.sample()  # what each period's tick does
    apps = ok(url + "/ws/v1/history/apps")
    containers = ok(url + "/ws/v1/history/containers")
    assert len(apps) == len(containers) >= 2  # the first sample is taken when the core starts
    assert apps[0]["totalApplications"] == "0" and containers[0]["totalContainers"] == "0"
    assert apps[-1]["totalApplications"] == "1" and containers[-1]["totalContainers"] == "5"
    assert before <= apps[-1]["timestamp"] == containers[-1]["timestamp"] <= time.time_ns()
    assert [a["timestamp"] for a in apps] == sorted(a["timestamp"] for a in apps)


def test_history_is_a_bounded_ring_sampled_on_its_period() -> None:
    totals = iter(range(100))
    history = MetricsHistory(lambda: (next(totals), 0), time.time_ns, size=3, period=0.01)
    history.start()
    try:
        eventually(lambda: len(history.records()) == 3 and history.records()[0].total_applications >= 2)
    finally:
        history.stop()
    kept = [r.total_applications for r in history.records()]
    assert len(kept) == 3 and kept == list(range(kept[0], kept[0] + 3))  # the oldest fell off
    with pytest.raises(ValueError):
        MetricsHistory(lambda: (0, 0), time.time_ns, size=0)


def test_history_needs_the_metrics() -> None:
    with running(TWO_LEAVES, metrics=False) as (core, _):
        url = core.serve_rest("127.0.0.1:0")
        response = request(url + "/ws/v1/history/apps")
        assert response.status == 500
        assert json.loads(response.read_body)["message"] == "Internal metrics collection is not enabled."  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("path", "allow"),
    [
        ("/ws/v1/partitions", "GET, OPTIONS"),
        ("/ws/v1/partition/default/queues", "GET, OPTIONS"),
        ("/ws/v1/history/apps", "GET, OPTIONS"),
        ("/ws/v1/scheduler/node-utilizations", "GET, OPTIONS"),
        ("/ws/v1/metrics", "GET, OPTIONS"),
        ("/ws/v1/validate-conf", "OPTIONS, POST"),
    ],
)
def test_options_answers_a_preflight_with_cors_headers(two_rms, path: str, allow: str) -> None:
    _, url = two_rms
    response = request(url + path, "OPTIONS", {"Origin": "http://ui", "Access-Control-Request-Method": "GET"})
    assert response.status == 200
    assert response.headers["Allow"] == allow
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    assert response.headers["Access-Control-Allow-Methods"] == allow
    assert response.headers["Access-Control-Allow-Headers"] == "X-Requested-With,Content-Type,Accept,Origin"


def test_answers_carry_yunikorns_cors_headers(two_rms) -> None:
    _, url = two_rms
    response = request(url + "/ws/v1/partitions")
    assert response.headers["Access-Control-Allow-Methods"] == "GET, OPTIONS"
    assert response.headers["Content-Type"] == "application/json; charset=UTF-8"


def test_gzip_when_asked_and_large_enough(two_rms) -> None:
    _, url = two_rms
    plain = request(url + "/ws/v1/fullstatedump")
    assert plain.getheader("Content-Encoding") is None
    size = len(plain.read_body)  # type: ignore[attr-defined]
    assert size >= 1400
    packed = request(url + "/ws/v1/fullstatedump", headers={"Accept-Encoding": "deflate, gzip;q=0.5"})
    assert packed.getheader("Content-Encoding") == "gzip" and "Accept-Encoding" in packed.getheader("Vary")
    assert json.loads(gzip.decompress(packed.read_body))["partitions"]  # type: ignore[attr-defined]
    refused = request(url + "/ws/v1/fullstatedump", headers={"Accept-Encoding": "gzip;q=0"})
    assert refused.getheader("Content-Encoding") is None
    small = request(url + "/ws/v1/clusters", headers={"Accept-Encoding": "gzip"})
    assert len(small.read_body) < 1400 and small.getheader("Content-Encoding") is None  # type: ignore[attr-defined]


def test_full_state_dump_as_yunikorn_answers_it_today(two_rms) -> None:
    _, url = two_rms
    dump = ok(url + "/ws/v1/fullstatedump")
    assert set(dump) == {
        "timestamp",
        "partitions",
        "applications",
        "appHistory",
        "nodes",
        "clusterInfo",
        "containerHistory",
        "queues",
        "rmDiagnostics",
        "logLevel",
        "config",
        "placementRules",
    }
    assert dump["appHistory"] == ok(url + "/ws/v1/history/apps")
    assert sorted(p["name"] for p in dump["partitions"]) == ["[rm1]default", "[rm2]default"]
    assert {a["applicationID"] for a in dump["applications"]} == {"app-1"}
    assert sorted(len(n.get("nodesInfo", [])) for n in dump["nodes"]) == [1, 1]
    assert [r["partition"] for r in dump["placementRules"]] == ["default", "default"]
    assert dump["placementRules"][0]["rules"] == ok(url + "/ws/v1/partition/[rm1]default/placementrules")
    assert {p["Name"] for p in dump["config"]["Partitions"]} == {"[rm1]default", "[rm2]default"}
