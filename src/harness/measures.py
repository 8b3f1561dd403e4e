"""What the long runs measure of the process itself (RSS, threads), and the one rule that says
whether a measure grows: a line fitted after warm-up, judged against its limit."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import attrs


def rss_mb() -> float:
    """Resident set size now (VmRSS), falling back to the peak where /proc is missing."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def process_threads() -> int:
    """The process's threads, native ones included (/proc), else the Python threads."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return threading.active_count()


def fitted_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys against xs (0 for a single distinct x)."""
    mean_x = sum(xs) / len(xs)
    mean_y = sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


@attrs.frozen(kw_only=True)
class GrowthLimit:
    """How fast a measure may grow after a run's warm-up, per unit of the run's axis (``per``: "a
    minute", "per 10,000 cycles"). A measure grows only when its fitted line's slope is over ``slope``
    and the line's rise over the judged span is over ``allowance`` plus ``relative`` times its value
    at warm-up: a short run's ups and downs are not a trend."""

    name: str
    unit: str
    per: str
    slope: float
    allowance: float
    relative: float = 0.0

    def describe(self) -> str:
        allowed = f"{self.allowance:,g}{self.unit}" if self.allowance or not self.relative else ""
        if self.relative:
            allowed = f"{self.relative:.0%} of its value at warm-up" + (f" + {allowed}" if allowed else "")
        return f"{self.name} +{self.slope:g}{self.unit} {self.per} (and over {allowed} in all)"


@attrs.frozen(kw_only=True)
class Growth:
    """One measure judged against its limit: its values, the fitted slope and what it adds up to."""

    limit: GrowthLimit
    at_start: float  # the run's first sample, warm-up included
    at_warmup: float
    at_end: float
    slope: float  # per the limit's unit of the axis, least squares over the judged samples
    rise: float  # slope times the judged span

    @property
    def allowed_rise(self) -> float:
        return self.limit.allowance + self.limit.relative * self.at_warmup

    @property
    def grows(self) -> bool:
        return self.slope > self.limit.slope and self.rise > self.allowed_rise

    def label(self) -> str:
        """GROWS (past both), noise (a slope over the limit, a rise within the allowance) or flat."""
        if self.grows:
            return "GROWS"
        return "noise" if self.slope > self.limit.slope else "flat"

    def describe(self) -> str:
        unit = self.limit.unit
        return (
            f"{self.limit.name}: start {self.at_start:,.1f}{unit}, "
            f"after warm-up {self.at_warmup:,.1f}{unit}, end {self.at_end:,.1f}{unit}; "
            f"{self.slope:+,.2f}{unit} {self.limit.per} "
            f"(limit +{self.limit.slope:g}), fitted rise {self.rise:+,.1f}{unit} "
            f"(allowed {self.allowed_rise:,.1f})"
        )


def fit_growth(limit: GrowthLimit, xs: Sequence[float], ys: Sequence[float], at_start: float) -> Growth:
    """``limit``'s measure ``ys`` after warm-up against the axis ``xs``, in the limit's units."""
    slope = fitted_slope(xs, ys)
    return Growth(
        limit=limit,
        at_start=at_start,
        at_warmup=ys[0],
        at_end=ys[-1],
        slope=slope,
        rise=slope * (xs[-1] - xs[0]),
    )
