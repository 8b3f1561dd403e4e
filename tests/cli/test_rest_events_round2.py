"""Events YuniKorn sends that round one of issue 27 did not, read through ``/ws/v1/events/batch``
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
