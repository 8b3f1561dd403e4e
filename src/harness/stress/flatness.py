"""Whether a threaded ``korral stress`` run held its memory and threads flat.

The run samples the process's RSS and thread count when its RMs have registered, after every
checkpoint (its RM threads joined) and at its end. The first quarter of the run, and at least its
first two minutes, is warm-up (the allocator reaches its high-water mark, the RMs their working set
of nodes, applications and asks: ~90 s for three RMs);
after it, a straight line is fitted to each measure against time, and the measure grows when the
line's slope is over its limit per minute and what it adds up to over the judged span is over its
allowance (``STRESS_LIMITS``). A run with fewer than ``MIN_JUDGED_SAMPLES`` samples after warm-up is
not judged (too short to tell a trend from the ups and downs of its working set).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from korral.harness.measures import fitted_slope, process_threads, rss_mb

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


@attrs.frozen(kw_only=True)
class FlatLimit:
    name: str
    unit: str
    per_minute: float  # the fitted slope above which the measure may grow
    allowance: float  # ... and the fitted rise over the judged span above which it does
    relative: float = 0.0  # added to the allowance, as a fraction of the value at warm-up

    def describe(self) -> str:
        allowed = f"{self.allowance:g}{self.unit}"
        if self.relative:
            allowed = f"{self.relative:.0%} of its value at warm-up + {allowed}"
        return f"{self.name} +{self.per_minute:g}{self.unit} a minute and over {allowed} in all"


# A three-RM run's RSS levels off within its first two minutes (~130 MB) and then moves by a few MB
# with its working set; a harness keeping every record grows ~130 MB a minute.
# Threads: the core's fixed set, its tiers' workers started as first needed, a callback dispatcher
# per RM: up and down by a few, never a trend.
STRESS_LIMITS: tuple[FlatLimit, ...] = (
    FlatLimit(name="RSS", unit=" MB", per_minute=2.0, allowance=5.0, relative=0.1),
    FlatLimit(name="threads", unit="", per_minute=0.5, allowance=4.0),
)


@attrs.frozen(kw_only=True)
class Trend:
    limit: FlatLimit
    at_start: float
    at_warmup: float
    at_end: float
    per_minute: float  # least squares over the judged samples
    rise: float  # per_minute times the judged span

    @property
    def allowed_rise(self) -> float:
        return self.limit.allowance + self.limit.relative * self.at_warmup

    @property
    def grows(self) -> bool:
        return self.per_minute > self.limit.per_minute and self.rise > self.allowed_rise

    def describe(self) -> str:
        unit = self.limit.unit
        return (
            f"{self.limit.name}: start {self.at_start:,.1f}{unit}, after warm-up {self.at_warmup:,.1f}"
            f"{unit}, end {self.at_end:,.1f}{unit}; after warm-up {self.per_minute:+,.2f}{unit} a minute, "
            f"fitted rise {self.rise:+,.1f}{unit} (allowed {self.allowed_rise:,.1f}): "
            + ("GROWS" if self.grows else "flat")
        )


@attrs.frozen(kw_only=True)
class FlatnessVerdict:
    """``trends`` is empty and ``missing`` says why when the run was too short to judge."""

    samples: int
    warmup_seconds: float
    trends: tuple[Trend, ...] = ()
    missing: str = ""

    @property
    def grows(self) -> list[str]:
        return [trend.limit.name for trend in self.trends if trend.grows]


def judge(samples: Sequence[ResourceSample], limits: Sequence[FlatLimit] = STRESS_LIMITS) -> FlatnessVerdict:
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
    trends = []
    for limit in limits:

        def measure(one: ResourceSample, name: str = limit.name) -> float:
            return one.rss_mb if name == "RSS" else float(one.threads)

        ys = [measure(one) for one in judged]
        slope = fitted_slope(xs, ys)
        trends.append(
            Trend(
                limit=limit,
                at_start=measure(samples[0]),
                at_warmup=ys[0],
                at_end=ys[-1],
                per_minute=slope,
                rise=slope * (xs[-1] - xs[0]),
            )
        )
    return FlatnessVerdict(samples=len(samples), warmup_seconds=warmup, trends=tuple(trends))
