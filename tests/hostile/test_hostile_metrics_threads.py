"""Metrics are written by every partition's actors, each on its own thread: one partition forgetting
its removed queues while another publishes new ones must not break either (a queue cleanup once failed
with "dictionary changed size during iteration" in a three-RM stress run)."""

from __future__ import annotations

import sys
import threading

from korral.server.metrics import CoreMetrics


def test_forgetting_queues_while_another_partition_publishes_new_ones() -> None:
    metrics = CoreMetrics()
    for index in range(2_000):  # a long iteration for the forgetting thread
        metrics.queue_resources("[a]default", f"root.q{index}", "allocated", {"vcore": 1})
    failures: list[BaseException] = []

    def publish() -> None:
        try:
            for index in range(3_000):
                metrics.queue_resources("[b]default", f"root.n{index}", "allocated", {"vcore": 1})
        except BaseException as error:  # reported below
            failures.append(error)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can: the race shows
    publisher = threading.Thread(target=publish)
    publisher.start()
    try:
        for _ in range(100):  # bounded: the publisher may finish first on a fast machine
            if not publisher.is_alive():
                break
            metrics.forget_queues("[a]default", ["root.gone"])
    except BaseException as error:  # reported below
        failures.append(error)
    finally:
        publisher.join(60)
        sys.setswitchinterval(interval)
    assert not failures, failures
