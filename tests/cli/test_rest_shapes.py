"""YuniKorn's REST answers as built from snapshots: health checks, usage trees, placement rules, config."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from types import SimpleNamespace
from typing import Any

import pytest
import rest_helpers
import yaml
from core_helpers import running
from rest_helpers import get, ok

import korral
from korral.info import AllocationInfo, ApplicationInfo, NodeInfo, PartitionInfo
from korral.server.rest import dao
from korral.server.rest.dao import utilization

pytest.importorskip("aiohttp")


# the shared fixture: pytest finds a fixture by its name in the test module
served = rest_helpers.served


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


@pytest.mark.parametrize(
    ("capacity", "used", "expected"),
    [
        ({"memory": 200, "vcore": 10}, {"memory": 50}, {"memory": 25}),  # a resource nothing uses: none
        ({"memory": 200}, {"memory": 0}, {"memory": 0}),
        ({"memory": 0}, {"memory": 5}, {"memory": 100}),  # used of nothing: full
        ({"memory": 3}, {"memory": 1}, {"memory": 33}),  # whole percentages, truncated
        ({"memory": 1}, {"memory": 10**12}, {"memory": 2**31 - 1}),  # at most a 32-bit integer
        ({}, {"memory": 5}, {}),  # no max: nothing to measure against
    ],
)
def test_used_capacity_is_yunikorns_calculate_abs_used_capacity(
    capacity: dict[str, int], used: dict[str, int], expected: dict[str, int]
) -> None:
    assert utilization(capacity, used) == expected
