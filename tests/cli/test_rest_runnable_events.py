"""YuniKorn's runnable events, read through ``/ws/v1/events/batch``
with the stdlib HTTP client: APP_CANNOTRUN / APP_RUNNABLE under a queue's and a user's
maxapplications."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from core_helpers import FAST, NODE, SMALL, eventually

import korral
from korral import si
from korral import testing as t

pytest.importorskip("aiohttp")

Kind = si.EventRecordType
Detail = si.EventChangeDetail

LIMITED = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: one
            maxapplications: 1
          - name: users
            limits:
              - limit: alice
                users: [alice]
                maxapplications: 1
"""


def ok(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def runnable_records(url: str) -> list[tuple[str, int, int, int]]:
    details = {
        int(d)
        for d in (
            Detail.APP_CANNOTRUN_QUEUE,
            Detail.APP_RUNNABLE_QUEUE,
            Detail.APP_CANNOTRUN_QUOTA,
            Detail.APP_RUNNABLE_QUOTA,
        )
    }
    return [
        (r["objectID"], r["type"], r["eventChangeType"], r["eventChangeDetail"])
        for r in ok(url + "/ws/v1/events/batch")["EventRecords"]
        if r["eventChangeDetail"] in details
    ]


@pytest.mark.parametrize(
    ("queue", "blocked", "runnable"),
    [
        ("root.one", Detail.APP_CANNOTRUN_QUEUE, Detail.APP_RUNNABLE_QUEUE),
        ("root.users", Detail.APP_CANNOTRUN_QUOTA, Detail.APP_RUNNABLE_QUOTA),
    ],
)
def test_an_application_held_back_by_maxapplications_and_let_run(
    queue: str, blocked: si.EventChangeDetail, runnable: si.EventChangeDetail
) -> None:
    with korral.start(**FAST) as core:
        url = core.serve_rest("127.0.0.1:0")
        rm = t.RecordingRM("rm")
        core.register_resource_manager(t.register("rm", LIMITED), rm)
        core.update_node(t.nodes("rm", ["n1"], NODE))
        core.update_application(t.applications("rm", {"first": queue, "second": queue}, user="alice"))
        assert rm.wait_for(lambda r: len(r.accepted_apps) == 2)
        core.update_allocation(t.asks("rm", "first", 1, SMALL))
        assert rm.wait_for_allocations(1)
        core.update_allocation(t.asks("rm", "second", 1, SMALL))
        core.wait_until_idle()
        none = int(si.EventChangeType.NONE)
        # the second may not run while the first does: said once, however often it is tried
        expected = [("second", int(Kind.APP), none, int(blocked))]
        assert eventually(lambda: runnable_records(url) == expected)
        assert rm.allocated_total == 1
        # the first gone, the second runs: runnable again
        core.update_application(t.remove_applications("rm", ["first"]))
        assert rm.wait_for(lambda r: "second" in r.live_by_app())
        core.wait_until_idle()
        expected.append(("second", int(Kind.APP), none, int(runnable)))
        assert eventually(lambda: runnable_records(url) == expected)


def node_records(url: str) -> list[tuple[str, int, int, str, dict | None]]:
    return [
        (
            r["objectID"],
            r["eventChangeType"],
            r["eventChangeDetail"],
            r.get("referenceID", ""),
            r.get("resource"),
        )
        for r in ok(url + "/ws/v1/events/batch")["EventRecords"]
        if r["type"] == int(Kind.NODE)
    ]


def wire(resource: dict[str, int]) -> dict:
    return {"resources": {name: {"value": value} for name, value in resource.items()}}


def test_allocations_reservations_and_occupied_resources_on_a_node_are_logged() -> None:
    from core_helpers import MB, TWO_LEAVES

    add, remove, set_ = (
        int(si.EventChangeType.ADD),
        int(si.EventChangeType.REMOVE),
        int(si.EventChangeType.SET),
    )
    alloc, reservation, occupied = (
        int(Detail.NODE_ALLOC),
        int(Detail.NODE_RESERVATION),
        int(Detail.NODE_OCCUPIED),
    )
    with korral.start(**FAST) as core:
        url = core.serve_rest("127.0.0.1:0")
        rm = t.RecordingRM("rm")
        core.register_resource_manager(t.register("rm", TWO_LEAVES), rm)
        core.update_node(t.nodes("rm", ["n1", "n2"], {"memory": 30 * MB, "vcore": 20_000}))
        core.update_application(t.applications("rm", {"app-1": "root.a", "app-2": "root.b"}))
        assert rm.wait_for(lambda r: len(r.accepted_apps) == 2)
        core.update_allocation(t.asks("rm", "app-1", 4, SMALL))
        assert rm.wait_for_allocations(4)
        core.wait_until_idle()
        made = sorted(rm.live.values(), key=lambda a: a.allocation_key)
        first = made[0]
        core.update_allocation(t.release("rm", "app-1", uuid=first.uuid))
        assert rm.wait_for(lambda r: first.uuid not in r.live)
        core.wait_until_idle()
        small = wire(SMALL)
        # each allocation added to its node, the released one removed from it (reference: its key)
        expected = sorted([(a.node_id, add, alloc, a.allocation_key, small) for a in made])
        expected.append((first.node_id, remove, alloc, first.allocation_key, small))

        def allocs() -> list:
            found = [r for r in node_records(url) if r[2] == alloc]
            return sorted(found[:4]) + found[4:]

        eventually(lambda: allocs() == expected)

        # 20 MB free at most on a node: a 25 MB ask fits a node's size, not its room: it reserves one
        big = {"memory": 25 * MB, "vcore": 1_000}
        core.update_allocation(t.asks("rm", "app-2", 1, big))
        key = "app-2-ask-0"
        [node] = eventually(lambda: [n for n in core.nodes(core.partitions()[0].name) if n.reservations])
        eventually(lambda: (node.node_id, add, reservation, key, wire(big)) in node_records(url))
        core.update_allocation(t.release_asks("rm", "app-2"))
        core.wait_until_idle()
        eventually(
            lambda: (
                [(r[0], r[1]) for r in node_records(url) if r[2] == reservation]
                == [(node.node_id, add), (node.node_id, remove)]
            )
        )

        # the RM says other pods occupy part of a node
        core.update_node(
            si.NodeRequest(
                rm_id="rm",
                nodes=[
                    si.NodeInfo(
                        node_id="n1", action=si.NodeAction.UPDATE, occupied_resource={"memory": 5 * MB}
                    )
                ],
            )
        )
        core.wait_until_idle()
        eventually(lambda: ("n1", set_, occupied, "", wire({"memory": 5 * MB})) in node_records(url))


def test_the_first_configuration_logs_its_queues_and_limits() -> None:
    with korral.start(**FAST) as core:
        url = core.serve_rest("127.0.0.1:0")  # served before the RM registers: its first events read
        rm = t.RecordingRM("rm")
        core.register_resource_manager(t.register("rm", LIMITED), rm)
        core.wait_until_idle()
        records = ok(url + "/ws/v1/events/batch")["EventRecords"]
        add, set_ = int(si.EventChangeType.ADD), int(si.EventChangeType.SET)
        queues = sorted(
            r["objectID"]
            for r in records
            if r["type"] == int(Kind.QUEUE) and r["eventChangeType"] == add and r["eventChangeDetail"] == 0
        )
        assert queues == ["root", "root.one", "root.users"]
        limits = [
            (r["objectID"], r["referenceID"], r["eventChangeType"])
            for r in records
            if r["eventChangeDetail"] == int(Detail.UG_USER_LIMIT)
        ]
        assert limits == [("alice", "root.users", set_)]
