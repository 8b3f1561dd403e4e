"""Events on their way to the event log are bounded, as YuniKorn bounds its event channel: an RM whose
asks make events faster than the core logs them (with the REST API on, every ask makes an "ask added"
event) cannot grow ``korral serve``'s memory without end (unbounded: 1.8 GB in 110 s from one RM that
read every response); past 100,000 events on their way, new ones are dropped and counted in
``yunikorn_event_total_not_channeled``, and everything goes on being served."""

from __future__ import annotations

import re
import threading
import urllib.request
from collections.abc import Iterator

import korral
from korral import si
from korral import testing as t
from korral.callback import ResourceManagerCallback
from korral.si import si_pb2

SERVICE = "/si.v1.Scheduler/"
WAIT = 60
CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: a
"""
ASKS_PER_REQUEST = 5_000  # the same keys each time: what the core holds for them stays the same
MAX_REQUESTS = 600  # 3 million asks, each an event: thirty times the bound


def event_totals(url: str) -> dict[str, float]:
    """yunikorn_event_total_<stage> of one scrape, by stage."""
    with urllib.request.urlopen(url + "/ws/v1/metrics", timeout=WAIT) as response:
        assert response.status == 200
        text = response.read().decode()
    return {
        stage: float(value) for stage, value in re.findall(r"^yunikorn_event_total_(\w+) (\S+)$", text, re.M)
    }


def flood(rm_id: str, stop: threading.Event) -> Iterator[bytes]:
    """One node too small for any ask, one application, then the same asks again and again."""
    node = si_pb2.NodeInfo(
        nodeID="n1",
        action=si_pb2.NodeInfo.CREATE,
        attributes={"si/node-partition": f"[{rm_id}]default"},
        schedulableResource=si_pb2.Resource(resources={"vcore": si_pb2.Quantity(value=1)}),
    )
    app = si_pb2.AddApplicationRequest(
        applicationID="app",
        queueName="root.a",
        partitionName="default",
        ugi=si_pb2.UserGroupInformation(user="u"),
    )
    asks = [
        si_pb2.AllocationAsk(
            allocationKey=f"k{index}",
            applicationID="app",
            partitionName="default",
            maxAllocations=1,
            resourceAsk=si_pb2.Resource(resources={"vcore": si_pb2.Quantity(value=1000)}),
        )
        for index in range(ASKS_PER_REQUEST)
    ]
    yield si_pb2.OrderedRequest(node=si_pb2.NodeRequest(rmID=rm_id, nodes=[node])).SerializeToString()
    yield si_pb2.OrderedRequest(
        application=si_pb2.ApplicationRequest(rmID=rm_id, new=[app])
    ).SerializeToString()
    heavy = si_pb2.OrderedRequest(
        allocation=si_pb2.AllocationRequest(rmID=rm_id, asks=asks)
    ).SerializeToString()
    for _ in range(MAX_REQUESTS):
        if stop.is_set():
            return
        yield heavy


class _StuckRM(ResourceManagerCallback):
    """An in-process RM whose callbacks do not return until told: its dispatcher takes no event."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def send_event(self, events: list[si.EventRecord]) -> None:
        self.release.wait(WAIT)

    def update_allocation(self, response: si.AllocationResponse) -> None:
        self.release.wait(WAIT)


def test_events_past_the_channel_bound_are_dropped_and_counted() -> None:
    """Served, one RM can no longer outrun the core (test_hostile_backpressure: its next request waits
    until the core has handled what it sent, and the event log keeps up). Events still pile up behind an
    RM whose callbacks do not return: the channel's bound holds there."""
    stuck = _StuckRM()
    with korral.start() as core:
        url = core.serve_rest("127.0.0.1:0")
        try:
            core.register_resource_manager(t.register("stuck", CONFIG), stuck)
            core.update_node(t.nodes("stuck", ["n1"], {"vcore": 1}))
            core.update_application(t.applications("stuck", {"app": "root.a"}))
            request = t.asks("stuck", "app", ASKS_PER_REQUEST, {"vcore": 1000})
            dropped = 0.0
            for _ in range(MAX_REQUESTS):
                core.update_allocation(request)  # the same keys: the asks are replaced, not added
                dropped = event_totals(url)["not_channeled"]
                if dropped:
                    break
            assert dropped > 0, "3 million events and none dropped: the event channel is unbounded"
            totals = event_totals(url)
            assert totals["created"] == totals["channeled"] + totals["not_channeled"]
        finally:
            stuck.release.set()
