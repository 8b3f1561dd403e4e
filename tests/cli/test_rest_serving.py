"""YuniKorn's metrics and events served by a core, over real loopback sockets, and the server's life."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request

import pytest
import rest_helpers
from core_helpers import SMALL, TWO_LEAVES, add_apps, add_nodes, part, running
from prometheus_client.parser import text_string_to_metric_families
from rest_helpers import ok

import korral
from korral import si
from korral import testing as t

pytest.importorskip("aiohttp")


# the shared fixture: pytest finds a fixture by its name in the test module
served = rest_helpers.served


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
        # the shared plain name answers with the first RM's, as YuniKorn answers with one of them
        assert {n["nodeID"] for n in ok(url + "/ws/v1/partition/default/nodes")} == {"a1"}
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
