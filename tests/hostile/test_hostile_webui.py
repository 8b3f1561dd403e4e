"""What YuniKorn's web UI and Grafana read of a served korral: what YuniKorn itself would answer."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from core_helpers import NODE, SMALL, TWO_LEAVES, eventually

import korral
from korral import si
from korral import testing as t

BUILD = {
    "rm1": {"buildDate": "2026-11-01T10:00:00+0000", "buildVersion": "1.8.0", "isPluginVersion": "false"},
    "rm2": {"buildDate": "2026-11-02T10:00:00+0000", "buildVersion": "1.7.0", "goVersion": "1.23"},
}


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as response:
        assert response.status == 200
        return json.loads(response.read())


def test_clusters_carry_each_rms_build_information_with_its_rm_id() -> None:
    with korral.start() as core:
        address, url = core.serve_grpc("127.0.0.1:0"), core.serve_rest("127.0.0.1:0")
        with korral.connect(address) as remote:
            for rm_id, build in BUILD.items():
                request = si.RegisterResourceManagerRequest(
                    rm_id=rm_id, config=TWO_LEAVES, policy_group="queues", build_info=build
                )
                remote.register_resource_manager(request, t.RecordingRM(rm_id))
            clusters = get(url + "/ws/v1/clusters")
            assert sorted((c["partition"], c["rmBuildInformation"][0]["rmId"]) for c in clusters) == [
                ("default", "rm1"),
                ("default", "rm2"),
            ]
            for cluster in clusters:
                (information,) = cluster["rmBuildInformation"]
                rm_id = information["rmId"]
                assert information == {**BUILD[rm_id], "rmId": rm_id}
            dumped = get(url + "/ws/v1/fullstatedump")["clusterInfo"]
            assert sorted(dumped, key=str) == sorted(clusters, key=str)


def test_a_partition_name_two_rms_share_answers_with_the_first_rms_partition() -> None:
    # the web UI's Queues V2 page asks for partition "default" whatever /ws/v1/partitions lists
    with korral.start() as core:
        address, url = core.serve_grpc("127.0.0.1:0"), core.serve_rest("127.0.0.1:0")
        with korral.connect(address) as remote:
            remote.register_resource_manager(t.register("rm2"), t.RecordingRM("rm2"))  # root only
            remote.register_resource_manager(t.register("rm1", TWO_LEAVES), t.RecordingRM("rm1"))
            queues = get(url + "/ws/v1/partition/default/queues")
            assert sorted(child["queuename"] for child in queues["children"]) == ["root.a", "root.b"]
            for route in ("nodes", "usage/users", "placementrules", "applications/active", "queue/root"):
                get(url + f"/ws/v1/partition/default/{route}")
            # each RM's own partition stays reachable by its full name
            rm2 = get(url + "/ws/v1/partition/%5Brm2%5Ddefault/queues")
            assert "children" not in rm2 or rm2["children"] in ([], None)


def test_trynode_latency_is_recorded_for_a_grpc_rm() -> None:
    # Grafana's YuniKorn dashboard draws the P95 of yunikorn_scheduler_trynode_latency_milliseconds
    from test_hostile_metrics import scrape

    with korral.start() as core:
        address, url = core.serve_grpc("127.0.0.1:0"), core.serve_rest("127.0.0.1:0")
        with korral.connect(address) as remote:
            rm = t.RecordingRM("rm")
            remote.register_resource_manager(t.register("rm", TWO_LEAVES), rm)
            remote.update_node(t.nodes("rm", ["n1", "n2"], NODE))
            remote.update_application(t.applications("rm", {"app": "root.a"}))
            assert rm.wait_for(lambda r: r.accepted_apps == ["app"])
            remote.update_allocation(t.asks("rm", "app", 3, SMALL))
            assert rm.wait_for_allocations(3)
            count = "yunikorn_scheduler_trynode_latency_milliseconds_count"
            assert eventually(lambda: scrape(url)[1].get((count, ())), timeout=60) >= 3


# every series the scheduler row of Grafana's YuniKorn dashboard (yunikorn-k8shim
# deployments/grafana-dashboard/yunikorn-metrics.json) queries
DASHBOARD = (
    "yunikorn_scheduler_application_total",
    "yunikorn_scheduler_application_submission_total",
    "yunikorn_scheduler_container_allocation_attempt_total",
    "yunikorn_scheduler_scheduling_latency_milliseconds_bucket",
    "yunikorn_scheduler_trynode_latency_milliseconds_bucket",
    "yunikorn_scheduler_trypreemption_latency_milliseconds_bucket",
    "yunikorn_scheduler_vcore_node_usage_total",
    "yunikorn_scheduler_memory_node_usage_total",
    "yunikorn_scheduler_pods_node_usage_total",
    "yunikorn_scheduler_ephemeral_storage_node_usage_total",
)
K8S_NODE = {"vcore": 8000, "memory": 16_000_000_000, "pods": 110, "ephemeral-storage": 100_000_000_000}


@pytest.mark.parametrize("rms", [1, 2])
def test_the_grafana_dashboards_scheduler_series_are_all_there_for_grpc_rms(rms: int) -> None:
    from test_hostile_metrics import scrape

    with korral.start() as core:
        address, url = core.serve_grpc("127.0.0.1:0"), core.serve_rest("127.0.0.1:0")
        with korral.connect(address) as remote:
            for index in range(rms):
                rm_id = f"k8s-{index}"
                rm = t.RecordingRM(rm_id)
                remote.register_resource_manager(t.register(rm_id, TWO_LEAVES), rm)
                remote.update_node(t.nodes(rm_id, ["n1"], K8S_NODE))
                remote.update_application(t.applications(rm_id, {"app": "root.a"}))
                remote.update_allocation(t.asks(rm_id, "app", 2, {"vcore": 100, "pods": 1}))
                assert rm.wait_for_allocations(2)
            count = "yunikorn_scheduler_trynode_latency_milliseconds_count"
            eventually(lambda: (scrape(url)[1].get((count, ())) or 0) >= 2 * rms, timeout=60)
            names = {name for name, _ in scrape(url)[1]}
            assert [name for name in DASHBOARD if name not in names] == []
