"""Whether a threaded ``korral stress`` run held its memory and threads flat.

The run samples the process's RSS and thread count when its RMs have registered, after every
checkpoint (its RM threads joined) and at its end. The first quarter of the run, and at least its
first two minutes, is warm-up (the allocator reaches its high-water mark, the RMs their working set
of nodes, applications and asks: ~90 s for three RMs);
after it, a straight line is fitted to each measure against time, and the measure grows when the
line's slope is over its limit per minute and what it adds up to over the judged span is over its
allowance (``STRESS_LIMITS``; the rule is ``harness.measures.GrowthLimit``'s). A run with fewer than
``MIN_JUDGED_SAMPLES`` samples after warm-up is not judged (too short to tell a trend from the ups
and downs of its working set).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from korral.harness.measures import Growth, GrowthLimit, fit_growth, process_threads, rss_mb

WARMUP_FRACTION = 0.25  # the first quarter of the run is warm-up: not judged ...
WARMUP_SECONDS = 120.0  # ... and at least this much of it
MIN_JUDGED_SAMPLES = 10


@attrs.frozen(kw_only=True)
class ResourceSample:
    seconds: float  # since the run started
    rss_mb: float
    threads: int


def sample(seconds: float) -> ResourceSample:
    return ResourceSample(seconds=seconds, rss_mb=rss_mb(), threads=process_threads())


# A three-RM run's RSS levels off within its first two minutes (~130 MB) and then moves by a few MB
# with its working set; a harness keeping every record grows ~130 MB a minute.
# Threads: the core's fixed set, its tiers' workers started as first needed, a callback dispatcher
# per RM: up and down by a few, never a trend.
STRESS_LIMITS: tuple[GrowthLimit, ...] = (
    GrowthLimit(name="RSS", unit=" MB", per="a minute", slope=2.0, allowance=5.0, relative=0.1),
    GrowthLimit(name="threads", unit="", per="a minute", slope=0.5, allowance=4.0),
)


@attrs.frozen(kw_only=True)
class FlatnessVerdict:
    """``trends`` is empty and ``missing`` says why when the run was too short to judge."""

    samples: int
    warmup_seconds: float
    trends: tuple[Growth, ...] = ()
    missing: str = ""

    @property
    def grows(self) -> list[str]:
        return [trend.limit.name for trend in self.trends if trend.grows]


def judge(
    samples: Sequence[ResourceSample], limits: Sequence[GrowthLimit] = STRESS_LIMITS
) -> FlatnessVerdict:
    """Whether RSS or threads grew after warm-up faster than ``limits`` allow."""
    if not samples:
        return FlatnessVerdict(samples=0, warmup_seconds=0.0, missing="no sample was taken")
    warmup = max(WARMUP_FRACTION * samples[-1].seconds, WARMUP_SECONDS)
    judged = [one for one in samples if one.seconds >= warmup]
    if len(judged) < MIN_JUDGED_SAMPLES:
        return FlatnessVerdict(
            samples=len(samples),
            warmup_seconds=warmup,
            missing=f"{len(judged)} sample(s) after warm-up, {MIN_JUDGED_SAMPLES} needed (a longer run)",
        )
    xs = [one.seconds / 60.0 for one in judged]

    def measure(one: ResourceSample, name: str) -> float:
        return one.rss_mb if name == "RSS" else float(one.threads)

    trends = tuple(
        fit_growth(limit, xs, [measure(one, limit.name) for one in judged], measure(samples[0], limit.name))
        for limit in limits
    )
    return FlatnessVerdict(samples=len(samples), warmup_seconds=warmup, trends=trends)
