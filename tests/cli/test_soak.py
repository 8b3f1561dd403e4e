"""The soak's verdict (korral.harness.soak.soak_verdict) on made-up samples: growth is caught, noise
is not, and a run too short to tell says so."""

from __future__ import annotations

import random

from korral.harness.soak import LIMITS, SoakSample, soak_verdict


def samples(
    count: int = 40,
    every: int = 2_000,
    rss: float = 80.0,
    rss_per_cycle: float = 0.0,
    threads_per_cycle: float = 0.0,
    actors_per_cycle: float = 0.0,
    seed: int = 1,
) -> list[SoakSample]:
    """A run of ``count`` samples: the warm-up climbs, then each measure follows its slope with noise
    like the real soak's (RSS +-3 MB, live actors anywhere from 30 to 1,300, threads steady)."""
    rng = random.Random(seed)
    made = []
    for index in range(1, count + 1):
        cycles = index * every
        warming = min(1.0, index / (count / 8))  # the allocator's high-water mark in the first eighth
        made.append(
            SoakSample(
                cycles=cycles,
                seconds=cycles / 300,
                rss_mb=rss * (0.7 + 0.3 * warming) + rss_per_cycle * cycles + rng.uniform(-3, 3),
                threads=12 + int(threads_per_cycle * cycles),
                live_actors=rng.randint(30, 1_300) + int(actors_per_cycle * cycles),
                busy_rounds=cycles * 3,
            )
        )
    return made


def growing(**slopes: float) -> list[str]:
    verdict = soak_verdict(samples(**slopes))
    assert not verdict.missing
    return [growth.limit.name for growth in verdict.growths if growth.grows]


def test_flat_measures_with_the_soaks_noise_pass() -> None:
    for seed in range(50):
        verdict = soak_verdict(samples(seed=seed))
        assert verdict.ok, [growth.describe() for growth in verdict.growths]
        assert verdict.warmup is not None and verdict.warmup.cycles == 20_000


def test_rss_growing_as_before_the_fix_fails_the_run() -> None:
    # issue 22: 76 -> 1,099 MB over 89,000 cycles
    assert growing(rss_per_cycle=1_023 / 89_000) == ["RSS"]
    verdict = soak_verdict(samples(rss_per_cycle=1_023 / 89_000))
    assert not verdict.ok
    rss = verdict.growths[0]
    assert 100 < rss.slope < 130 and rss.rise > rss.allowed_rise


def test_a_slow_leak_past_a_fifth_of_the_rss_fails_but_a_small_drift_does_not() -> None:
    # 80 MB at warm-up: +40 MB over the 60,000 judged cycles is past 20 %, +8 MB is not
    assert growing(rss_per_cycle=40 / 60_000) == ["RSS"]
    assert growing(rss_per_cycle=8 / 60_000) == []


def test_threads_and_live_actors_that_grow_fail_the_run() -> None:
    assert growing(threads_per_cycle=1 / 10_000) == ["threads"]
    # before removed actors retired themselves: +2,255 live actors per 500 cycles
    assert growing(actors_per_cycle=2_255 / 500) == ["live actors"]
    assert growing(rss_per_cycle=0.001, threads_per_cycle=0.001, actors_per_cycle=1.0) == [
        limit.name for limit in LIMITS
    ]


def test_too_few_samples_after_warm_up_give_no_verdict_and_fail() -> None:
    verdict = soak_verdict(samples(count=3))  # 2,000 to 6,000 cycles: all of them after warm-up
    assert verdict.missing.startswith("3 sample(s) after warm-up, at least 4") and not verdict.ok
    assert soak_verdict([]).missing == "no sample was taken"
    assert soak_verdict(samples(count=6)).ok


def test_a_slope_over_its_limit_within_the_allowance_is_called_noise_beside_the_ok(monkeypatch) -> None:
    """The verdict never says OK beside a figure over its limit without saying why: live actors whose
    fitted slope is past +200 per 10,000 cycles but whose rise stays within the 2,000 allowed."""
    from korral.harness import soak

    noisy = [
        SoakSample(
            cycles=c, seconds=c / 300, rss_mb=80.0, threads=12, live_actors=300 + c // 8, busy_rounds=c
        )
        for c in range(250, 2_250, 250)
    ]
    monkeypatch.setattr(soak, "soak", lambda *_, **__: noisy)
    printed: list[str] = []
    assert soak.run_soak(printed.append, cycles=2_000, duration=60.0, every=250)
    actors = next(line for line in printed if line.lstrip().split()[1:3] == ["live", "actors:"])
    assert actors.split()[0] == "noise", printed
    assert printed[-1].startswith(
        "OK: no measure grew past its limit after warm-up (live actors: a slope over"
    )
