"""``korral stress --soak``: is anything growing under steady load?

Application cycles on one RM (an application added, its asks allocated, released, the application
removed) while a second RM never lets the core go idle; a sample of RSS, threads and live actors
every ``every`` cycles. The run ends with a verdict (``soak_verdict``): after a warm-up (the first
quarter of the cycles: the allocator reaches its high-water mark, pools and caches fill), a straight
line is fitted to each measure against the cycles, and the run fails when one grows faster than its
limit (``LIMITS``, per 10,000 cycles) by more than its noise allowance over the run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import attrs

import korral
from korral import si
from korral import testing as t
from korral.core import Core
from korral.harness import faults
from korral.harness.measures import Growth, GrowthLimit, fit_growth, rss_mb
from korral.harness.stress import SETTINGS, rm_config


@attrs.frozen(kw_only=True)
class SoakSample:
    cycles: int
    seconds: float
    rss_mb: float
    threads: int
    live_actors: int
    busy_rounds: int  # the second RM's rounds so far: it never let the core go idle


def live_actor_count() -> int:
    """Every live pykka actor: threaded ones and the pooled ones (``PooledActor.start`` registers them
    in pykka's ActorRegistry like any other actor)."""
    import pykka

    return len(pykka.ActorRegistry.get_all())


class LeanRM(korral.ResourceManagerCallback):
    """An RM that keeps only what it needs (live allocations per application): a recording RM's
    history would grow and hide whether the core does."""

    def __init__(self, rm_id: str) -> None:
        self.rm_id = rm_id
        self.lock = threading.Condition()
        self.live: dict[str, str] = {}  # uuid -> application id

    def update_allocation(self, response: si.AllocationResponse) -> None:
        with self.lock:
            for allocation in response.new:
                self.live[allocation.uuid] = allocation.application_id
            for release in response.released:
                self.live.pop(release.uuid, None)
            self.lock.notify_all()

    def count(self, app_id: str) -> int:
        return sum(1 for owner in self.live.values() if owner == app_id)

    def wait_count(self, app_id: str, count: int, timeout: float) -> bool:
        with self.lock:
            return self.lock.wait_for(lambda: self.count(app_id) == count, timeout)


SOAK_ASK = {"memory": 1000, "vcore": 500}
BUSY_BACKLOG = 6  # the never-idle RM sends more once fewer messages than this are in flight


def _soak_cycle(core: Core, rm: LeanRM, app_id: str, asks: int, timeout: float) -> None:
    """One application's life: added, its asks allocated, its allocations released, removed."""
    core.update_application(t.applications(rm.rm_id, {app_id: "root.a"}))
    core.update_allocation(t.asks(rm.rm_id, app_id, asks, SOAK_ASK))
    if not rm.wait_count(app_id, asks, timeout):
        raise TimeoutError(f"{app_id}: {asks} allocations not made within {timeout}s")
    core.update_allocation(t.release(rm.rm_id, app_id))
    if not rm.wait_count(app_id, 0, timeout):
        raise TimeoutError(f"{app_id}: allocations not released within {timeout}s")
    core.update_application(t.remove_applications(rm.rm_id, [app_id]))


def soak(
    cycles: int | None,
    duration: float,
    every: int = 1000,
    on_sample: Callable[[SoakSample], None] | None = None,
    timeout: float = 60.0,
) -> list[SoakSample]:
    """Application cycles on one RM while a second RM keeps the core busy (it never lets it go idle);
    a sample of RSS, threads and live actors every ``every`` cycles. Stops after ``cycles`` cycles or
    ``duration`` seconds, whichever comes first. The core runs as ``korral serve`` runs it (``tune_gc``
    on: what a long-lived core holds waits longer for a full collection) with the harness's short
    timeouts (``korral.harness.stress.SETTINGS``)."""
    samples: list[SoakSample] = []
    stop = threading.Event()
    busy_rounds = [0]
    failure: list[BaseException] = []
    core = korral.start(tune_gc=True, **SETTINGS, **faults.start_options())
    try:
        soaker, busy = LeanRM("soak"), LeanRM("busy")
        for rm in (soaker, busy):
            core.register_resource_manager(t.register(rm.rm_id, rm_config(0)), rm)
            core.update_node(
                t.nodes(
                    rm.rm_id, [f"{rm.rm_id}-node-{i}" for i in range(4)], {"memory": 32000, "vcore": 16000}
                )
            )

        def keep_busy() -> None:
            # fire and forget, with a bounded backlog: the core always has something in flight, so
            # nothing that waits for the whole core to be idle ever gets its chance
            try:
                while not stop.is_set():
                    app_id = f"busy-app-{busy_rounds[0]}"
                    core.update_application(t.applications(busy.rm_id, {app_id: "root.b"}))
                    core.update_allocation(t.asks(busy.rm_id, app_id, 3, SOAK_ASK))
                    core.update_application(t.remove_applications(busy.rm_id, [app_id]))
                    busy_rounds[0] += 1
                    while core.tracker.in_flight() > BUSY_BACKLOG and not stop.is_set():
                        time.sleep(0.0005)
            except BaseException as error:  # reported by the main loop
                failure.append(error)

        thread = threading.Thread(target=keep_busy, name="soak-busy-rm", daemon=True)
        thread.start()
        started = time.monotonic()
        done = 0
        while (cycles is None or done < cycles) and time.monotonic() - started < duration:
            if failure:
                raise failure[0]
            _soak_cycle(core, soaker, f"soak-app-{done}", 2, timeout)
            done += 1
            if done % every == 0:
                sample = SoakSample(
                    cycles=done,
                    seconds=time.monotonic() - started,
                    rss_mb=rss_mb(),
                    threads=threading.active_count(),
                    live_actors=live_actor_count(),
                    busy_rounds=busy_rounds[0],
                )
                samples.append(sample)
                if on_sample is not None:
                    on_sample(sample)
        stop.set()
        thread.join(timeout=timeout)
        if failure:
            raise failure[0]
    finally:
        stop.set()
        core.stop()
    return samples


# ---- the verdict ----------------------------------------------------------------------------------

WARMUP_FRACTION = 0.25  # the first quarter of the cycles is warm-up: not judged
MIN_JUDGED_SAMPLES = 4  # samples from the end of warm-up on, at least, for a line to mean anything
PER_CYCLES = 10_000  # slopes are per this many cycles
PER_CYCLES_TEXT = f"per {PER_CYCLES:,} cycles"


# RSS: with removed actors left in reference cycles the default soak grew by ~115 MB per 10,000 cycles;
# without, by less than 1.
# Threads are a fixed set (12). Live actors are counted at an instant, the busy RM's work in flight
# included (tens to ~1,300 up and down); before removed actors retired themselves they grew by ~45,000
# per 10,000 cycles.
LIMITS: tuple[GrowthLimit, ...] = (
    GrowthLimit(name="RSS", unit=" MB", per=PER_CYCLES_TEXT, slope=2.0, allowance=0.0, relative=0.2),
    GrowthLimit(name="threads", unit="", per=PER_CYCLES_TEXT, slope=0.5, allowance=2.0),
    GrowthLimit(name="live actors", unit="", per=PER_CYCLES_TEXT, slope=200.0, allowance=2_000.0),
)


@attrs.frozen(kw_only=True)
class SoakVerdict:
    """``growths`` is empty (and ``missing`` says why) when too few samples came after warm-up."""

    warmup: SoakSample | None
    judged: int  # samples from the end of warm-up on
    growths: tuple[Growth, ...] = ()
    missing: str = ""

    @property
    def ok(self) -> bool:
        return not self.missing and not any(growth.grows for growth in self.growths)


def soak_verdict(samples: Sequence[SoakSample], limits: Sequence[GrowthLimit] = LIMITS) -> SoakVerdict:
    """Whether RSS, threads or live actors grow after warm-up faster than ``limits`` allow."""
    if not samples:
        return SoakVerdict(warmup=None, judged=0, missing="no sample was taken")
    end_of_warmup = WARMUP_FRACTION * samples[-1].cycles
    judged = [sample for sample in samples if sample.cycles >= end_of_warmup]
    if len(judged) < MIN_JUDGED_SAMPLES:
        return SoakVerdict(
            warmup=judged[0] if judged else None,
            judged=len(judged),
            missing=f"{len(judged)} sample(s) after warm-up, at least {MIN_JUDGED_SAMPLES} are needed "
            "(more cycles, or a smaller --every)",
        )
    xs = [sample.cycles / PER_CYCLES for sample in judged]
    growths = tuple(
        fit_growth(
            limit, xs, [_measure(sample, limit.name) for sample in judged], _measure(samples[0], limit.name)
        )
        for limit in limits
    )
    return SoakVerdict(warmup=judged[0], judged=len(judged), growths=growths)


def _measure(sample: SoakSample, name: str) -> float:
    return float({"RSS": sample.rss_mb, "threads": sample.threads, "live actors": sample.live_actors}[name])


def run_soak(print_: Callable[[str], object], cycles: int | None, duration: float, every: int) -> bool:
    """``korral stress --soak``: a line per sample, so a person sees whether anything grows, then the
    verdict. True when nothing grew past its limit."""
    limit = f"{cycles:,} cycles or {duration:g}s" if cycles is not None else f"{duration:g}s"
    print_(f"korral stress --soak: {limit}, a sample every {every:,} cycles, a never-idle second RM")
    print_(f"{'cycles':>9} {'seconds':>8} {'RSS MB':>8} {'threads':>8} {'actors':>8} {'busy RM rounds':>15}")

    def show(sample: SoakSample) -> None:
        print_(
            f"{sample.cycles:>9,} {sample.seconds:>8.1f} {sample.rss_mb:>8.1f} {sample.threads:>8} "
            f"{sample.live_actors:>8,} {sample.busy_rounds:>15,}"
        )

    samples = soak(cycles, duration, every, on_sample=show)
    if len(samples) >= 2:
        first, last = samples[0], samples[-1]
        print_(
            f"first -> last sample: RSS {last.rss_mb - first.rss_mb:+.1f} MB, threads "
            f"{last.threads - first.threads:+}, live actors {last.live_actors - first.live_actors:+,}"
        )
    verdict = soak_verdict(samples)
    print_(
        f"limits after warm-up (the first {WARMUP_FRACTION:.0%} of the cycles), a line fitted to the "
        "samples: " + "; ".join(limit.describe() for limit in LIMITS)
    )
    if verdict.missing:
        print_(f"NO VERDICT: {verdict.missing}")
        return False
    assert verdict.warmup is not None
    print_(f"from warm-up ({verdict.warmup.cycles:,} cycles) on, {verdict.judged} samples:")
    for growth in verdict.growths:
        print_(f"  {growth.label():<6} {growth.describe()}")
    grown = [growth.limit.name for growth in verdict.growths if growth.grows]
    if grown:
        print_(f"GROWTH: {', '.join(grown)} grew past the limit")
        return False
    noisy = [growth.limit.name for growth in verdict.growths if growth.label() == "noise"]
    print_(
        "OK: no measure grew past its limit after warm-up"
        + (
            f" ({', '.join(noisy)}: a slope over its limit, but a fitted rise within the allowance over "
            "the run: a short run's ups and downs, not a trend)"
            if noisy
            else ""
        )
    )
    return True
