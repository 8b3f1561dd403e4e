"""``korral bench --remote``'s CPU by stage is read thread by thread: a thread that ends between the
two readings never makes its stage negative (the served run's per-RM threads end as its RM leaves)."""

from __future__ import annotations

import threading
import time

from korral.harness.benchmark.remote import stage_us, thread_cpu

ROLES = {"worker": "bench-test-worker"}


def _busy_thread(done: threading.Event) -> threading.Thread:
    def work() -> None:
        end = time.thread_time() + 0.05
        while time.thread_time() < end:  # CPU, not sleep: the thread's clock must move
            pass
        done.wait(timeout=60)

    thread = threading.Thread(target=work, name="bench-test-worker-1", daemon=True)
    thread.start()
    return thread


def test_a_thread_that_ended_between_the_readings_leaves_its_stage_at_zero_not_below() -> None:
    done = threading.Event()
    thread = _busy_thread(done)
    while time.clock_gettime(time.pthread_getcpuclockid(thread.ident or 0)) < 0.05:
        time.sleep(0.01)
    before = thread_cpu(ROLES)
    done.set()
    thread.join(timeout=60)
    after = thread_cpu(ROLES)
    stages = stage_us(before, after, 1, "rest")
    assert stages["worker"] == 0.0
    assert all(value >= 0 for value in stages.values()), stages


def test_a_thread_started_between_the_readings_counts_from_nothing() -> None:
    before = thread_cpu(ROLES)
    done = threading.Event()
    thread = _busy_thread(done)
    while time.clock_gettime(time.pthread_getcpuclockid(thread.ident or 0)) < 0.05:
        time.sleep(0.01)
    after = thread_cpu(ROLES)
    done.set()
    thread.join(timeout=60)
    assert stage_us(before, after, 1, "rest")["worker"] >= 0.05 * 1e6
