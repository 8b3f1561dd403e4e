"""A queue's max as its users see it, while nodes come and go.

The root's max is the partition's capacity, so every node added or removed changes it, and with it the
max every queue without a limit of its own inherits. korral keeps that off the node's path (a node
update must not cost a pass over every queue of a large partition): the metrics publish each queue's
own configured max, as YuniKorn's ``yunikorn_queue_resource{state="max"}`` does (the root's the
capacity), and ``Core.queues`` / ``Core.queue`` / the REST queue routes apply the root's when read.
"""

from __future__ import annotations

import pytest
from core_helpers import NODE, add_nodes, eventually, part, running
from test_rest_latency_histograms import scrape, value

from korral import si
from korral import testing as t

pytest.importorskip("aiohttp")

LIMITED = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: capped
            resources:
              max: {memory: 150M}
            queues:
              - name: inside
          - name: open
"""
MEMORY = NODE["memory"]


def test_every_queue_max_follows_the_nodes_and_the_metrics_publish_each_queues_own() -> None:
    with running(LIMITED) as (core, rm):
        url = core.serve_rest("127.0.0.1:0")
        labels = {"partition": part(), "state": "max", "resource": "memory"}

        def maxima() -> dict[str, dict[str, int]]:
            return {info.path: info.max for info in core.queues(part())}

        for count, added in ((1, ["n0"]), (3, ["n1", "n2"])):
            add_nodes(core, rm, added)
            assert not rm.rejected_nodes
            capacity = {name: quantity * count for name, quantity in NODE.items()}
            capped = {**capacity, "memory": min(150_000_000, MEMORY * count)}  # the smaller applies
            assert maxima() == {
                "root": capacity,
                "root.capped": capped,
                "root.capped.inside": capped,
                "root.open": capacity,
            }
            assert core.queue(part(), "root.open").max == capacity  # the same, asked of the partition
            samples = eventually(
                lambda count=count: (
                    (s := scrape(url)[0])
                    and value(s, "yunikorn_queue_resource", queue="root", **labels) == MEMORY * count
                    and s
                )
            )
            assert value(samples, "yunikorn_queue_resource", queue="root.capped", **labels) == 150_000_000
            # a queue without a max of its own has no max series, as in YuniKorn
            assert value(samples, "yunikorn_queue_resource", queue="root.open", **labels) is None
            assert value(samples, "yunikorn_queue_resource", queue="root.capped.inside", **labels) is None

        core.update_node(t.nodes(rm.rm_id, ["n0", "n1"], NODE, action=si.NodeAction.DECOMISSION))
        core.wait_until_idle()
        assert maxima()["root.open"] == NODE and maxima()["root.capped.inside"]["vcore"] == NODE["vcore"]
        eventually(lambda: value(scrape(url)[0], "yunikorn_queue_resource", queue="root", **labels) == MEMORY)
