"""YuniKorn's metric families at ``/ws/v1/metrics`` (issue 27), parsed with prometheus_client's parser:
names, types, labels and buckets of yunikorn-core be3bb487, values the scenario implies, one RM and
two; application totals that follow a removal; no ``*_created`` series."""

from __future__ import annotations

import json
import sys
import urllib.request
from typing import Any

import pytest
from core_helpers import SMALL, TWO_LEAVES, add_apps, add_nodes, eventually, part, running
from prometheus_client.parser import text_string_to_metric_families

from korral import testing as t

pytest.importorskip("aiohttp")

LIMITED = TWO_LEAVES.replace("          - name: b\n", "          - name: b\n            maxapplications: 7\n")


def scrape(url: str) -> tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float], dict[str, str]]:
    """The exposition text, every sample by (name, labels), and every family's type by name."""
    with urllib.request.urlopen(url + "/ws/v1/metrics", timeout=30) as response:
        text = response.read().decode()
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types.setdefault(family.name, family.type)
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return text, samples, types


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def test_families_values_and_a_removal_followed() -> None:
    with running(LIMITED) as (core, rm):
        url = core.serve_rest("127.0.0.1:0")
        add_nodes(core, rm, ["n1"])  # 100 MB, 20 vcore
        add_apps(core, rm, {"app": "root.a"})
        core.update_allocation(t.asks("rm", "app", 2, SMALL))
        assert rm.wait_for_allocations(2)
        core.wait_until_idle()
        _, samples, _ = scrape(url)
        assert value(samples, "yunikorn_scheduler_application_total", state="running") == 1
        # 2 x 10 MB of 100 MB: 20 % -> "(10%,20%]"; 2 x 1 of 20 vcore: 10 % -> "[0,10%]"
        assert value(samples, "yunikorn_scheduler_memory_node_usage_total", range="(10%,20%]") == 1
        assert value(samples, "yunikorn_scheduler_memory_node_usage_total", range="[0,10%]") == 0
        assert value(samples, "yunikorn_scheduler_vcore_node_usage_total", range="[0,10%]") == 1

        uuid = sorted(rm.live)[0]
        core.update_allocation(t.release("rm", "app", uuid=uuid))
        core.update_application(t.remove_applications("rm", ["app"]))
        core.wait_until_idle()
        text, samples, types = scrape(url)
        queue = {"partition": part(), "queue": "root.a"}

        # the removed running application left the running count, through Completing to Completed
        for state, count in (("running", 0), ("completing", 0), ("completed", 1)):
            assert value(samples, "yunikorn_scheduler_application_total", state=state) == count, state
            assert value(samples, "yunikorn_queue_app", state=state, **queue) == count, state
        assert value(samples, "yunikorn_queue_app_total", state="completed", **queue) == 1
        assert "# TYPE yunikorn_queue_app_total counter\n" in text

        # per-queue containers, named after the queue as YuniKorn names them: its Go client writes a
        # counter under the name it was given, with no _total added
        assert "# TYPE yunikorn_root_a_queue_container counter\n" in text
        assert '\nyunikorn_root_a_queue_container{partition="[rm]default",state="allocated"} 2.0\n' in text
        assert "queue_container_total" not in text
        containers = "yunikorn_root_a_queue_container_total"  # prometheus_client's parser adds _total
        assert value(samples, containers, partition=part(), state="allocated") == 2
        assert (
            value(samples, containers, partition=part(), state="released") == 2
        )  # one by the RM, one by removal

        # maxRunningApps of a queue with a limit, none of one without
        assert (
            value(
                samples,
                "yunikorn_queue_resource",
                state="maxRunningApps",
                resource="apps",
                partition=part(),
                queue="root.b",
            )
            == 7
        )
        assert (
            value(samples, "yunikorn_queue_resource", state="maxRunningApps", resource="apps", **queue)
            is None
        )

        # YuniKorn's latency histograms: 8 exponential buckets from 0.1 ms, and the cycle
        buckets = sorted(
            float(dict(labels)["le"])
            for name, labels in samples
            if name == "yunikorn_scheduler_scheduling_latency_milliseconds_bucket"
        )
        assert buckets == [0.0001, 0.001, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0, float("inf")]
        assert (value(samples, "yunikorn_scheduler_scheduling_cycle_milliseconds_count") or 0) > 0
        assert types["yunikorn_scheduler_scheduling_cycle_milliseconds"] == "histogram"

        # the event counters count what /ws/v1/events logged (Go's names: no _total suffix added)
        with urllib.request.urlopen(url + "/ws/v1/events/batch", timeout=30) as response:
            logged = len(json.loads(response.read())["EventRecords"])
        assert logged > 0
        for stage, expected in (("created", logged), ("stored", logged), ("not_stored", 0)):
            assert f"# TYPE yunikorn_event_total_{stage} counter\n" in text
            assert f"\nyunikorn_event_total_{stage} {float(expected)}\n" in text

        # no *_created series (YuniKorn's Go client has none)
        assert not [name for name, _ in samples if name.endswith("_created")]


def test_two_rms_queue_containers_apart() -> None:
    with running(TWO_LEAVES, rm_id="rm1") as (core, rm1):
        rm2 = t.RecordingRM("rm2")
        core.register_resource_manager(t.register("rm2", TWO_LEAVES), rm2)
        add_nodes(core, rm1, ["a1"])
        add_nodes(core, rm2, ["b1"])
        for rm, count in ((rm1, 1), (rm2, 3)):
            add_apps(core, rm, {f"{rm.rm_id}-app": "root.a"})
            core.update_allocation(t.asks(rm.rm_id, f"{rm.rm_id}-app", count, SMALL))
            assert rm.wait_for_allocations(count)
        core.wait_until_idle()
        url = core.serve_rest("127.0.0.1:0")

        def counted() -> Any:
            _, samples, _ = scrape(url)
            return (
                samples
                if value(
                    samples,
                    "yunikorn_root_a_queue_container_total",
                    partition="[rm2]default",
                    state="allocated",
                )
                == 3
                else None
            )

        samples = eventually(counted)
        assert (
            value(
                samples, "yunikorn_root_a_queue_container_total", partition="[rm1]default", state="allocated"
            )
            == 1
        )
        # node usage covers every partition: a1 at 10 % memory, b1 at 30 %
        assert value(samples, "yunikorn_scheduler_memory_node_usage_total", range="[0,10%]") == 1
        assert value(samples, "yunikorn_scheduler_memory_node_usage_total", range="(20%,30%]") == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process metrics are read from /proc")
def test_the_process_series_yunikorns_default_registry_serves_are_there() -> None:
    # YuniKorn's /ws/v1/metrics is the Go client's default registry: process_* beside yunikorn_*
    with running(TWO_LEAVES) as (core, _):
        _, samples, types = scrape(core.serve_rest("127.0.0.1:0"))
        assert types["process_resident_memory_bytes"] == "gauge"
        assert (value(samples, "process_resident_memory_bytes") or 0) > 1_000_000
        assert (value(samples, "process_open_fds") or 0) > 0
        assert types["process_cpu_seconds"] == "counter"
        assert value(samples, "process_start_time_seconds")
