"""The threaded ``korral stress`` holds its memory flat over a run's length: its RMs keep the records
of their live registration only, and the run judges its own RSS and threads."""

from __future__ import annotations

import logging

import pytest

from korral.harness.stress import HostileDriver, StressRun, UuidLedger
from korral.harness.stress.flatness import MIN_JUDGED_SAMPLES, ResourceSample, judge


@pytest.fixture(autouse=True)
def quiet_callbacks():
    logger = logging.getLogger("korral.callbacks")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_threaded_run_keeps_only_its_live_registrations_records() -> None:
    # a restart after every checkpoint: each RM has had several callback objects by the end
    run = StressRun(rms=2, duration=6.0, seed=20261129, checkpoint=0.5, restart_every=1)
    result = run.run()
    assert result.violations == [], result.violations
    assert result.restarts >= 1
    assert result.core_releases, "releases the core made are still counted across callback objects"
    for driver in run.drivers:
        assert isinstance(driver, HostileDriver)
        rm = driver.rm
        # events are counted, not kept (~4,000 a second in a three-RM run)
        assert rm.events == [] and rm.events_received > 0
        # a replaced callback object keeps nothing of what it was told
        for retired in driver.retired:
            assert retired.retired
            assert not (retired.live or retired.released or retired.rejected_asks or retired.keys_of)
            assert not (retired.told or retired.accepted_apps or retired.allocation_times)
        # the uuid ledger holds the uuids of the live registration only
        assert driver.ledger.seen <= set(rm.keys_of), driver.ledger.seen - set(rm.keys_of)
        ledger = driver.ledger
        assert ledger.released_ever <= ledger.seen | set(driver.believed) | ledger.resent


def test_the_ledger_forgets_an_earlier_registrations_uuids_yet_catches_one_issued_again() -> None:
    ledger = UuidLedger()
    first = [f"[rm0]default-aaaa-{n}" for n in range(1, 6)]
    for uuid in first:
        ledger.told(uuid)
        ledger.released(uuid)
    ledger.new_registration({first[4]})  # the RM believes the fifth live (a restart recovers it)
    assert ledger.seen == set() and ledger.released_ever == set()
    ledger.told(first[4])  # the recovered allocation's echo
    ledger.told("[rm0]default-bbbb-1")  # the new partition's own series
    assert ledger.collisions == []
    ledger.told(first[1])  # the earlier partition's uuid, issued again
    assert ledger.collisions == [f"{first[1]} (issued again by the core)"]
    ledger.told("rm0-recovered-3")  # a uuid the RM chose itself is the RM's to reuse
    assert len(ledger.collisions) == 1


def _samples(rss: list[float], threads: list[int], every: float = 2.0) -> list[ResourceSample]:
    return [
        ResourceSample(seconds=index * every, rss_mb=mb, threads=count)
        for index, (mb, count) in enumerate(zip(rss, threads, strict=True))
    ]


def test_the_run_judges_growth_after_warm_up_and_not_its_ups_and_downs() -> None:
    count = 300  # a 600 s run: a sample every 2 s
    growing = [60.0 + index * 4.4 for index in range(count)]  # ~130 MB a minute, as before the bound
    verdict = judge(_samples(growing, [20] * count))
    assert verdict.grows == ["RSS"], [trend.describe() for trend in verdict.trends]
    # a working set that levels off within the warm-up, then moves up and down by a few MB
    levelled = [min(130.0, 60.0 + index) + (3.0 if index % 7 == 3 else 0.0) for index in range(count)]
    threads = [18 + index % 5 for index in range(count)]
    verdict = judge(_samples(levelled, threads))
    assert verdict.grows == [], [trend.describe() for trend in verdict.trends]
    assert verdict.trends[0].at_start == 60.0 and verdict.trends[0].at_end == 130.0
    # a thread left behind at every checkpoint
    verdict = judge(_samples(levelled, [18 + index // 4 for index in range(count)]))
    assert verdict.grows == ["threads"]
    # too short a run is not judged
    short = judge(_samples([100.0] * MIN_JUDGED_SAMPLES, [20] * MIN_JUDGED_SAMPLES))
    assert short.missing and short.grows == []
