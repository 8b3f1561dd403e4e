"""What clients name cannot break ``/ws/v1/metrics`` or grow it for good.

Resource names and queue paths that map to one metric name (``gpu-x`` and ``gpu_x``; ``root.a-b`` and
``root.a_b``) share its family, their counts added up, and every scrape stays a 200; the families and
series of resources whose nodes all left are removed.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from core_helpers import SMALL, eventually
from prometheus_client.parser import text_string_to_metric_families

import korral
from korral import si
from korral import testing as t

MEMORY = {"memory": 100_000_000, "vcore": 20_000}
A_AND_B = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a-b
          - name: a_b
"""


@contextmanager
def served() -> Iterator[tuple[korral.Core, str, str]]:
    with korral.start() as core:
        yield core, core.serve_grpc("127.0.0.1:0"), core.serve_rest("127.0.0.1:0")


def scrape(url: str) -> tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    with urllib.request.urlopen(url + "/ws/v1/metrics", timeout=60) as response:
        assert response.status == 200
        text = response.read().decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    return text, samples


def test_resource_names_sharing_a_metric_name_are_added_up_and_scrapes_stay_200() -> None:
    with served() as (_core, address, url), korral.connect(address) as remote:
        for rm_id, resource in (("rm1", "gpu-x"), ("rm2", "gpu_x")):
            rm = t.RecordingRM(rm_id)
            remote.register_resource_manager(t.register(rm_id), rm)
            remote.update_node(t.nodes(rm_id, [f"{rm_id}-n"], {**MEMORY, resource: 4}))
            assert rm.wait_for(lambda r, rm_id=rm_id: r.accepted_nodes == [f"{rm_id}-n"])
        for _ in range(3):  # every scrape, not only the first
            _, samples = scrape(url)
            both = samples[("yunikorn_scheduler_gpu_x_node_usage_total", (("range", "[0,10%]"),))]
            assert both == 2  # one node of each RM, each with one of the two names
        # and the core's own queue series keep both names apart, under their labels
        assert eventually(
            lambda: (
                sum(
                    name == "yunikorn_queue_resource" and dict(labels).get("resource") in ("gpu-x", "gpu_x")
                    for name, labels in scrape(url)[1]
                )
                >= 2
            )
        )


def test_families_of_resources_whose_nodes_left_are_removed() -> None:
    names = [f"hostile-res-{index}" for index in range(300)]
    with served() as (core, address, url), korral.connect(address) as remote:
        rm = t.RecordingRM("rm")
        remote.register_resource_manager(t.register("rm"), rm)
        before, _ = scrape(url)
        capacity = {**MEMORY, **dict.fromkeys(names, 1)}
        remote.update_node(t.nodes("rm", ["n1", "n2"], capacity))
        assert rm.wait_for(lambda r: sorted(r.accepted_nodes) == ["n1", "n2"])
        text, _ = scrape(url)
        assert "hostile_res_299_node_usage_total" in text
        for node in ("n1", "n2"):
            remote.update_node(t.node_action("rm", node, si.NodeAction.DECOMISSION))
        eventually(lambda: core.nodes("[rm]default") == [], timeout=60)
        # a node's capacity leaves the root's max: published once as 0, then removed at the next change
        remote.update_node(t.nodes("rm", ["n3"], MEMORY))
        assert rm.wait_for(lambda r: "n3" in r.accepted_nodes)
        remote.update_node(t.node_action("rm", "n3", si.NodeAction.DECOMISSION))
        eventually(lambda: "hostile" not in scrape(url)[0], timeout=60)
        after, _ = scrape(url)
        assert len(after) < len(before) + 20_000, (len(before), len(after))


def test_queue_paths_sharing_a_metric_name_are_added_up_and_scrapes_stay_200() -> None:
    with served() as (core, address, url), korral.connect(address) as remote:
        rm = t.RecordingRM("rm")
        remote.register_resource_manager(t.register("rm", A_AND_B), rm)
        remote.update_node(t.nodes("rm", ["n1"], MEMORY))
        remote.update_application(t.applications("rm", {"app1": "root.a-b", "app2": "root.a_b"}))
        assert rm.wait_for(lambda r: sorted(r.accepted_apps) == ["app1", "app2"])
        remote.update_allocation(t.asks("rm", "app1", 2, SMALL))
        remote.update_allocation(t.asks("rm", "app2", 3, SMALL))
        assert rm.wait_for_allocations(5)
        key = (
            "yunikorn_root_a_b_queue_container_total",  # the parser adds _total
            (("partition", "[rm]default"), ("state", "allocated")),
        )
        eventually(lambda: scrape(url)[1].get(key) == 5, timeout=60)
        assert core.tracker.errors == 0


def test_an_rm_that_left_leaves_no_series() -> None:
    with served() as (core, address, url), korral.connect(address) as remote:
        rm = t.RecordingRM("leaver")
        remote.register_resource_manager(t.register("leaver", A_AND_B), rm)
        remote.update_node(t.nodes("leaver", ["n1"], {**MEMORY, "gpu-left": 2}))
        remote.update_application(t.applications("leaver", {"app": "root.a-b"}))
        assert rm.wait_for(lambda r: r.accepted_apps == ["app"])
        remote.update_allocation(t.asks("leaver", "app", 2, SMALL))
        assert rm.wait_for_allocations(2)
        eventually(lambda: "[leaver]default" in scrape(url)[0], timeout=60)
        remote.unregister_resource_manager("leaver")
        core.wait_until_idle()
        text, samples = scrape(url)
        assert "leaver" not in text and "gpu_left" not in text, text
        assert samples[("yunikorn_scheduler_node", (("state", "active"),))] == 0
