"""A partition a reload leaves out drains, as YuniKorn's: it takes no new application, keeps booking
what runs until the RM releases it (each release confirmed), shows ``Draining`` over REST, and is
removed once it holds no application."""

from __future__ import annotations

import json
import urllib.request

from core_helpers import collect_errors

import korral
from korral import si
from korral import testing as t

TWO = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: '*'
  - name: p2
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: q
"""

ONE = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: '*'
"""

P2 = "[rm]p2"


def partition_states(base: str) -> dict[str, str]:
    with urllib.request.urlopen(f"{base}/ws/v1/partitions", timeout=60) as response:
        return {p["name"]: p["state"] for p in json.loads(response.read())}


def draining_metric(base: str) -> list[str]:
    with urllib.request.urlopen(f"{base}/ws/v1/metrics", timeout=60) as response:
        return [
            line for line in response.read().decode().splitlines() if line.startswith("korral_partition_")
        ]


def test_a_partition_a_reload_drops_drains_and_goes_once_empty() -> None:
    rm = t.RecordingRM("rm")
    with collect_errors() as errors, korral.start() as core:
        base = core.serve_rest("127.0.0.1:0")
        core.register_resource_manager(t.register("rm", TWO), rm)
        core.update_node(t.nodes("rm", ["n1"], {"memory": 1000}, partition="p2"))
        core.update_application(t.applications("rm", {"app": "root.q"}, partition="p2"))
        core.update_allocation(t.asks("rm", "app", 3, {"memory": 100}, partition="p2"))
        assert rm.wait_for_allocations(3)
        core.wait_until_idle()

        core.update_configuration(si.UpdateConfigurationRequest(rm_id="rm", config=ONE))
        core.wait_until_idle()
        # still there, draining, with what runs booked
        assert partition_states(base) == {"default": "Active", "p2": "Draining"}
        assert draining_metric(base) == ['korral_partition_draining{partition="[rm]p2"} 1.0']
        (info,) = [p for p in core.partitions() if p.name == P2]
        assert info.state == "Draining" and info.allocated == {"memory": 300}
        # no new application
        core.update_application(t.applications("rm", {"late": "root.q"}, partition="p2"))
        core.wait_until_idle()
        assert rm.rejected_apps["late"] == f"partition {P2} is stopped cannot add a new application late"
        # nor a new node
        core.update_node(t.nodes("rm", ["n2"], {"memory": 1000}, partition="p2"))
        core.wait_until_idle()
        assert rm.rejected_nodes["n2"] == f"partition {P2} is stopped cannot add a new node n2"
        # each release is booked and confirmed
        uuids = sorted(rm.live)
        core.update_allocation(t.release("rm", "app", uuid=uuids[0], partition="p2"))
        core.wait_until_idle()
        assert uuids[0] in {r.uuid for r in rm.released}
        assert (core.partition(P2) or info).allocated == {"memory": 200}
        for uuid in uuids[1:]:
            core.update_allocation(t.release("rm", "app", uuid=uuid, partition="p2"))
        core.wait_until_idle()
        assert {r.uuid for r in rm.released} == set(uuids)
        assert P2 in core.partition_names()  # the application is still there
        # once it holds no application it goes
        core.update_application(t.remove_applications("rm", ["app"], partition="p2"))
        core.wait_until_idle()
        assert core.partition_names() == ["[rm]default"]
        assert partition_states(base) == {"default": "Active"}
        assert draining_metric(base) == []
    assert errors.messages() == []


def test_a_partition_taken_back_before_it_drained_is_active_again() -> None:
    rm = t.RecordingRM("rm")
    with korral.start() as core:
        core.register_resource_manager(t.register("rm", TWO), rm)
        core.update_node(t.nodes("rm", ["n1"], {"memory": 1000}, partition="p2"))
        core.update_application(t.applications("rm", {"app": "root.q"}, partition="p2"))
        core.update_allocation(t.asks("rm", "app", 1, {"memory": 100}, partition="p2"))
        assert rm.wait_for_allocations(1)
        core.update_configuration(si.UpdateConfigurationRequest(rm_id="rm", config=ONE))
        core.wait_until_idle()
        draining = core.partition(P2)
        assert draining is not None and draining.state == "Draining"
        core.update_configuration(si.UpdateConfigurationRequest(rm_id="rm", config=TWO))
        core.wait_until_idle()
        active = core.partition(P2)
        assert active is not None and active.state == "Active"
        core.update_application(t.applications("rm", {"next": "root.q"}, partition="p2"))
        core.wait_until_idle()
        assert "next" in rm.accepted_apps
