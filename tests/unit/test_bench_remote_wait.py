"""``korral bench --remote``'s RM gives up with what it knows instead of waiting out its timeout."""

from __future__ import annotations

import threading
import time

import pytest

from korral.harness.benchmark.remote import RemoteBenchRM, wait_for


def test_a_stalled_wait_says_how_far_it_got_and_dumps_the_threads(capfd: pytest.CaptureFixture[str]) -> None:
    rm = RemoteBenchRM(expected_nodes=1, expected_apps=1)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"allocations arrived: 3 of 10, none more for"):
        wait_for(threading.Event(), lambda: 3, 10, "allocations arrived", rm, stall_seconds=0.3)
    assert time.monotonic() - started < 30  # not the bench's 600 s
    assert "test_a_stalled_wait" in capfd.readouterr().err  # where every thread was


def test_a_cut_off_rm_fails_at_once_with_the_cores_reason() -> None:
    rm = RemoteBenchRM(expected_nodes=1, expected_apps=1)
    rm.resync_required("RmID=bench: more than 1000 allocation responses not read by the RM")
    with pytest.raises(RuntimeError, match="the core cut the RM off: RmID=bench: more than 1000"):
        wait_for(threading.Event(), lambda: 0, 10, "allocations arrived", rm, stall_seconds=30)


def test_a_wait_that_keeps_moving_is_not_a_stall() -> None:
    rm = RemoteBenchRM(expected_nodes=1, expected_apps=1)
    done = threading.Event()
    arrived = [0]

    def arrive() -> None:
        for _ in range(40):
            time.sleep(0.05)
            arrived[0] += 1
        done.set()

    thread = threading.Thread(target=arrive)
    thread.start()
    # the whole run is longer than a stall would be allowed, but it never pauses that long
    wait_for(done, lambda: arrived[0], 40, "allocations arrived", rm, stall_seconds=1.5, timeout=60)
    thread.join()
    assert arrived[0] == 40


def test_a_wait_that_moves_but_never_finishes_says_so_at_its_timeout() -> None:
    rm = RemoteBenchRM(expected_nodes=1, expected_apps=1)
    moving = iter(range(1_000_000)).__next__  # a new count at every look: never a stall
    with pytest.raises(TimeoutError, match=r"allocations arrived: \d+ of 10, not done within 1s"):
        wait_for(threading.Event(), moving, 10, "allocations arrived", rm, stall_seconds=30, timeout=1)
