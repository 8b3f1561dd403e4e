"""``yunikorn_queue_resource`` as a scrape reads it: written from the series each publication left."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from korral.server.metrics import CoreMetrics

PARTITION = "[rm1]default"


def series(metrics: CoreMetrics) -> dict[tuple[str, str, str, str], float]:
    found: dict[tuple[str, str, str, str], float] = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        if family.name == "yunikorn_queue_resource":
            assert family.type == "gauge"
            for sample in family.samples:
                labels = sample.labels
                key = (labels["partition"], labels["queue"], labels["state"], labels["resource"])
                found[key] = sample.value
    return found


def test_a_resource_that_drops_out_reads_zero_once_then_its_series_goes() -> None:
    metrics = CoreMetrics()
    metrics.queue_usage(PARTITION, "root.a", {"memory": 300, "vcore": 2}, {"memory": 100})
    assert series(metrics) == {
        (PARTITION, "root.a", "allocated", "memory"): 300,
        (PARTITION, "root.a", "allocated", "vcore"): 2,
        (PARTITION, "root.a", "pending", "memory"): 100,
    }
    metrics.queue_usage(PARTITION, "root.a", {"memory": 200}, {})
    assert series(metrics) == {
        (PARTITION, "root.a", "allocated", "memory"): 200,
        (PARTITION, "root.a", "allocated", "vcore"): 0,
        (PARTITION, "root.a", "pending", "memory"): 0,
    }
    metrics.queue_usage(PARTITION, "root.a", {"memory": 100}, {})
    assert series(metrics) == {(PARTITION, "root.a", "allocated", "memory"): 100}
    metrics.queue_usage(PARTITION, "root.a", {"memory": 100, "vcore": 1}, {})  # back again
    assert series(metrics)[PARTITION, "root.a", "allocated", "vcore"] == 1


def test_the_partitions_limits_and_usage_share_one_family_and_a_forgotten_queue_leaves_it() -> None:
    metrics = CoreMetrics()
    metrics.queue_resources(PARTITION, "root.a", "max", {"memory": 1000})
    metrics.queue_resources(PARTITION, "root.a", "guaranteed", {"memory": 500})
    metrics.queue_usage(PARTITION, "root.a", {"memory": 300}, {})
    metrics.queue_usage("[rm2]default", "root.a", {"memory": 7}, {})
    text = metrics.exposition().decode()
    assert text.count("# TYPE yunikorn_queue_resource gauge") == 1
    assert len(series(metrics)) == 4
    metrics.forget_queues(PARTITION, ["root.a"])
    assert series(metrics) == {("[rm2]default", "root.a", "allocated", "memory"): 7}
