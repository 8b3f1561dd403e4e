"""DAO fields of queues, partitions, applications and nodes, served by ``core.serve_rest`` and read with the
stdlib HTTP client: a queue's real ``currentPriority`` (yunikorn-core's GetCurrentPriority: the highest
pending priority, adjusted by priority offsets and fences), a partition's ``quotaPreemptionEnabled``,
an application's ``placeholderData`` and reservations (``hasReserved``, ``reservations``) and a
node's reservation keys."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import attrs
import pytest
from core_helpers import add_apps, running
from gang_requests import PH, gang_asks

pytest.importorskip("aiohttp")

MIN = -(1 << 31)
CONFIG = """
partitions:
  - name: default
    preemption:
      quotapreemptionenabled: true
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: fenced
            properties:
              priority.policy: fence
              priority.offset: "5"
          - name: up
            properties:
              priority.offset: "100"
            queues:
              - name: leaf
          - name: plain
          - name: idle
"""


def ok(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        return json.loads(response.read())


def by_path(tree: dict) -> dict[str, dict]:
    found = {tree["queuename"]: tree}
    for child in tree.get("children") or []:
        found.update(by_path(child))
    return found


def test_queues_show_their_current_priority_and_partitions_quota_preemption() -> None:
    from korral import testing as t

    with running(CONFIG) as (core, rm):
        # no node: every ask stays pending, so each queue's priority is its highest pending one
        add_apps(core, rm, {"f": "root.fenced", "l": "root.up.leaf", "p": "root.plain"})
        core.update_allocation(t.asks("rm", "f", 1, {"memory": 10}, priority=50))
        core.update_allocation(t.asks("rm", "l", 1, {"memory": 10}, priority=7))
        core.update_allocation(t.asks("rm", "p", 1, {"memory": 10}, priority=20))
        core.update_allocation(t.asks("rm", "p", 1, {"memory": 10}, priority=-3, prefix="low-"))
        core.wait_until_idle()
        url = core.serve_rest("127.0.0.1:0")
        queues = by_path(ok(url + "/ws/v1/partition/default/queues"))
        priorities = {path: document["currentPriority"] for path, document in queues.items()}
        assert priorities == {
            "root.fenced": 5,  # a fence shows its offset, whatever is pending below it
            "root.up.leaf": 7,
            "root.up": 107,  # its child's 7 plus its own offset
            "root.plain": 20,  # the highest of its pending asks
            "root.idle": MIN,  # nothing pending: YuniKorn's minimum, not omitted
            "root": 107,
        }
        assert ok(url + "/ws/v1/partition/default/queue/root.up")["currentPriority"] == 107
        (partition,) = ok(url + "/ws/v1/partitions")
        assert partition["quotaPreemptionEnabled"] is True and partition["preemptionEnabled"] is True
        # the asks gone: the priorities fall back to the minimum
        core.update_allocation(t.release_asks("rm", "f"))
        core.update_allocation(t.release_asks("rm", "p"))
        core.update_allocation(t.release_asks("rm", "l"))
        core.wait_until_idle()
        queues = by_path(ok(url + "/ws/v1/partition/default/queues"))
        assert {document["currentPriority"] for document in queues.values()} == {MIN}


def test_quota_preemption_is_shown_off_by_default() -> None:
    with running() as (core, _):
        url = core.serve_rest("127.0.0.1:0")
        (partition,) = ok(url + "/ws/v1/partitions")
        assert partition["quotaPreemptionEnabled"] is False  # no omitempty: false is shown


GANG = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: gang
"""


def test_an_application_shows_its_placeholder_data_per_task_group() -> None:
    from core_helpers import add_nodes

    from korral import testing as t

    with running(GANG) as (core, rm):
        add_nodes(core, rm, ["n1"], {"memory": 1000, "vcore": 1000})
        core.update_application(
            t.applications("rm", {"g": "root.gang"}, user="u", placeholder_ask={"memory": 300, "vcore": 300})
        )
        core.update_allocation(gang_asks("g", 3, PH, placeholder=True, prefix="ph"))
        core.wait_until_idle()
        url = core.serve_rest("127.0.0.1:0")
        app_url = url + "/ws/v1/partition/default/application/g"
        # three placeholders asked for and placed: none replaced or timed out yet (omitempty)
        assert ok(app_url)["placeholderData"] == [{"taskGroupName": "tg", "count": 3, "minResource": PH}]
        assert "hasReserved" not in ok(app_url) and "reservations" not in ok(app_url)

        # a real ask of the group replaces one placeholder once the RM confirms the replacement
        core.update_allocation(
            gang_asks("g", 1, {"memory": 60, "vcore": 100}, placeholder=False, prefix="real")
        )
        core.wait_until_idle()
        core.update_allocation(rm.take_confirmations())
        core.wait_until_idle()
        # the RM stops another placeholder: YuniKorn counts every other end as timed out
        app = core.application(core.partitions()[0].name, "g")
        assert app is not None
        other = next(a.uuid for a in app.allocations if a.placeholder)
        core.update_allocation(t.release("rm", "g", uuid=other))
        core.wait_until_idle()
        (data,) = ok(app_url)["placeholderData"]
        assert data == {"taskGroupName": "tg", "count": 3, "minResource": PH, "replaced": 1, "timedout": 1}


def test_a_reservation_shows_on_its_application_and_node_with_yunikorns_keys() -> None:
    from core_helpers import MB, SMALL, add_nodes, eventually, part

    from korral import testing as t

    two = GANG.replace("          - name: gang\n", "          - name: a\n          - name: b\n")
    with running(two) as (core, rm):
        add_nodes(core, rm, ["n1", "n2"], {"memory": 30 * MB, "vcore": 20_000})
        add_apps(core, rm, {"app-1": "root.a", "app-2": "root.b"})
        core.update_allocation(t.asks("rm", "app-1", 4, SMALL))
        core.wait_until_idle()
        url = core.serve_rest("127.0.0.1:0")
        # 10M free on each node: the 20M ask fits neither, but fits a node's size: it reserves one
        core.update_allocation(t.asks("rm", "app-2", 1, {"memory": 20 * MB, "vcore": 1_000}))
        [node] = eventually(lambda: [n for n in core.nodes(part()) if n.reservations])
        app = ok(url + "/ws/v1/partition/default/application/app-2")
        assert app["hasReserved"] is True and app["reservations"] == ["app-2-ask-0"]
        served = ok(url + f"/ws/v1/partition/default/node/{node.node_id}")
        assert served["isReserved"] is True and served["reservations"] == ["app-2-ask-0"]
        other = "n2" if node.node_id == "n1" else "n1"
        unreserved = ok(url + f"/ws/v1/partition/default/node/{other}")
        assert unreserved["isReserved"] is False and "reservations" not in unreserved  # omitempty
        listed = ok(url + "/ws/v1/partition/default/applications/active")
        assert {a["applicationID"]: a.get("hasReserved", False) for a in listed} == {
            "app-1": False,
            "app-2": True,
        }
        # the ask removed: the reservation goes, and with it both fields (omitempty)
        core.update_allocation(t.release_asks("rm", "app-2"))
        core.wait_until_idle()
        eventually(lambda: not any(n.reservations for n in core.nodes(part())))
        app = ok(url + "/ws/v1/partition/default/application/app-2")
        assert "hasReserved" not in app and "reservations" not in app


PREEMPT = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: high
            resources:
              guaranteed: {memory: 500}
            properties:
              preemption.delay: 10s
          - name: low
            queues:
              - name: leaf
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_queues_show_what_their_preemption_victims_hold_until_confirmed() -> None:
    from core_helpers import FAST, add_nodes, eventually, part

    import korral
    from korral import si
    from korral import testing as t

    clock = Clock()
    rm = t.RecordingRM("rm")
    with korral.start(**FAST, clock=clock) as core:
        core.register_resource_manager(t.register("rm", PREEMPT), rm)
        add_nodes(core, rm, ["n1"], {"memory": 1000, "vcore": 10})
        add_apps(core, rm, {"low-app": "root.low.leaf", "hi": "root.high"})
        core.update_allocation(t.asks("rm", "low-app", 10, {"memory": 100}))
        core.wait_until_idle()
        assert rm.wait_for_allocations(10)
        urgent = t.asks("rm", "hi", 1, {"memory": 300}, prefix="urgent-")
        policy = si.PreemptionPolicy(allow_preempt_self=True, allow_preempt_other=True)
        core.update_allocation(
            attrs.evolve(urgent, asks=[attrs.evolve(urgent.asks[0], preemption_policy=policy)])
        )
        core.wait_until_idle()
        url = core.serve_rest("127.0.0.1:0")
        queues = by_path(ok(url + "/ws/v1/partition/default/queues"))
        assert all("preemptingResource" not in q for q in queues.values())  # nothing preempting: omitted
        cycles = core.scheduler_stats(part())["cycles"]
        clock.now += 11.0  # past the preemption delay
        core.poke_timers()
        eventually(lambda: core.scheduler_stats(part())["cycles"] > cycles)

        def preempted() -> list[si.AllocationRelease]:
            with rm.lock:
                return [
                    r for r in rm.released if r.termination_type == si.TerminationType.PREEMPTED_BY_SCHEDULER
                ]

        assert rm.wait_for(lambda r: len(preempted()) == 3)
        expected = {"memory": 300}  # three victims of 100 in root.low.leaf, counted up to the root
        eventually(lambda: ok(url + "/ws/v1/partition/default/queue/root.low.leaf").get("preemptingResource"))
        queues = by_path(ok(url + "/ws/v1/partition/default/queues"))
        got = {path: q.get("preemptingResource") for path, q in queues.items()}
        assert got == {"root": expected, "root.low": expected, "root.low.leaf": expected, "root.high": None}
        # the RM confirms the victims gone: nothing is preempting any more
        core.update_allocation(rm.take_confirmations())
        core.wait_until_idle()
        eventually(lambda: "preemptingResource" not in ok(url + "/ws/v1/partition/default/queues"))
        queues = by_path(ok(url + "/ws/v1/partition/default/queues"))
        assert all("preemptingResource" not in q for q in queues.values())


def test_an_accepted_application_holding_placeholders_is_allocating_in_its_queues() -> None:
    from core_helpers import add_nodes

    from korral import testing as t

    with running(GANG) as (core, rm):
        add_nodes(core, rm, ["n1"], {"memory": 1000, "vcore": 1000})
        core.update_application(
            t.applications("rm", {"g": "root.gang"}, user="u", placeholder_ask={"memory": 200, "vcore": 200})
        )
        url = core.serve_rest("127.0.0.1:0")
        core.wait_until_idle()
        assert all(
            "allocatingAcceptedApps" not in q
            for q in by_path(ok(url + "/ws/v1/partition/default/queues")).values()
        )
        # one of its two placeholders placed: still Accepted, counted as allocating up to the root
        core.update_allocation(gang_asks("g", 1, PH, placeholder=True, prefix="ph"))
        core.wait_until_idle()
        assert ok(url + "/ws/v1/partition/default/application/g")["applicationState"] == "Accepted"
        queues = by_path(ok(url + "/ws/v1/partition/default/queues"))
        assert {p: q.get("allocatingAcceptedApps") for p, q in queues.items()} == {
            "root": ["g"],
            "root.gang": ["g"],
        }
        assert ok(url + "/ws/v1/partition/default/queue/root.gang")["allocatingAcceptedApps"] == ["g"]
        # the second placeholder placed: Running, no longer allocating
        core.update_allocation(gang_asks("g", 1, PH, placeholder=True, prefix="ph2"))
        core.wait_until_idle()
        assert ok(url + "/ws/v1/partition/default/application/g")["applicationState"] == "Running"
        queues = by_path(ok(url + "/ws/v1/partition/default/queues"))
        assert all("allocatingAcceptedApps" not in q for q in queues.values())
        assert queues["root.gang"]["runningApps"] == 1
