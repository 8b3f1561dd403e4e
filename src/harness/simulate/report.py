"""What ``korral simulate`` reports once a run is over: per-queue figures, the summary, a comparison.

A run's figures (``RunFigures``) are plain numbers taken from one ``SimulateRun``: per queue its mean
usage and pending demand over one window of samples, how long the asks of its subtree waited (those
still pending at the end counted with their wait so far), and, for a parent, Jain's fairness index of
its *children's* usage against their guarantees -- siblings only, never a parent beside its own
children (a parent's usage is the sum of theirs: mixing them measures the tree's shape, not fairness).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import attrs
from rich import box
from rich.console import Console
from rich.table import Table

GiB = 2**30


def share(used: Mapping[str, float], total: Mapping[str, float]) -> float:
    """used / total of the resource closest to its total (the dominant share); 0 with no total."""
    shares = [used.get(name, 0) / quantity for name, quantity in total.items() if quantity > 0]
    return max(shares) if shares else 0.0


def fmt(resource: Mapping[str, float] | None, unset: str = "0") -> str:
    """``48G/24c``: memory in GiB, vcores (whole), short enough for an 80-column table.

    ``unset`` stands for no resource at all: ``0`` for a usage, ``-`` for a guarantee or max not set.
    """
    if not resource:
        return unset
    memory = resource.get("memory", 0) / GiB
    vcore = resource.get("vcore", 0) / 1000
    return f"{memory:.0f}G/{vcore:.0f}c"


def percent(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.0%}"


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * fraction))]


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: 1.0 when all are equal, 1/n when one has everything; NaN for none."""
    if not values or not any(values):
        return math.nan
    return sum(values) ** 2 / (len(values) * sum(x * x for x in values))


def grid(rows: Iterable[Sequence[str]], style: str = "") -> Table:
    """Term and meaning side by side; a long meaning wraps in its own column, under itself."""
    table = Table.grid(padding=(0, 1))
    rows = list(rows)
    width = max((len(row) for row in rows), default=2)
    table.add_column(no_wrap=True, style=style or "bold")
    for _ in range(width - 1):
        table.add_column(style=style)
    for row in rows:
        table.add_row(*row)
    return table


@attrs.frozen
class QueueFigures:
    path: str
    guaranteed: dict[str, int]
    max: dict[str, int]
    mean_used: dict[str, float]
    mean_pending: dict[str, float]
    applications: int
    waits: tuple[float, ...]  # sorted: every ask of the queue's subtree, pending ones with their wait so far

    @property
    def used_of_guarantee(self) -> float:
        return share(self.mean_used, self.guaranteed) if self.guaranteed else math.nan

    @property
    def used_of_max(self) -> float:
        return share(self.mean_used, self.max) if self.max else math.nan


@attrs.frozen
class RunFigures:
    """One run, reduced to what the summary and a comparison print."""

    label: str
    duration: float
    samples: int
    queues: dict[str, QueueFigures]  # in tree order: a parent before its children
    applications: tuple[int, int, int]  # submitted, completed, rejected
    asks: tuple[int, int, int, int]  # submitted, allocated, still pending at the end, rejected
    released: int
    offered: tuple[float, float]  # applications/s, asks/s
    waits: tuple[float, ...]  # every ask, sorted
    allocated_waits: tuple[float, ...]  # allocated asks only, sorted
    scheduler_errors: int
    # why applications were rejected: (reason, how many), most frequent first
    rejections: tuple[tuple[str, int], ...] = ()
    interrupted: bool = False  # Ctrl-C: the figures cover the part of the run before it

    def children(self, path: str) -> list[str]:
        return [p for p in self.queues if p.rsplit(".", 1)[0] == path and p != path]

    def sibling_fairness(self, parent: str) -> tuple[float, list[str]]:
        """Jain's index of used/guar. among ``parent``'s children that have a guarantee (two or more)."""
        guaranteed = [child for child in self.children(parent) if self.queues[child].guaranteed]
        if len(guaranteed) < 2:
            return math.nan, guaranteed
        return jain([self.queues[child].used_of_guarantee for child in guaranteed]), guaranteed

    def fairness_groups(self) -> list[tuple[str, float, list[str]]]:
        groups = []
        for path in self.queues:
            index, siblings = self.sibling_fairness(path)
            if not math.isnan(index):
                groups.append((path, index, siblings))
        return groups


def _ancestors(path: str) -> list[str]:
    parts = path.split(".")
    return [".".join(parts[: depth + 1]) for depth in range(len(parts))]


def _name(path: str) -> str:
    return "  " * path.count(".") + path.rsplit(".", 1)[-1]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def _short_wait(waits: Sequence[float], fraction: float) -> str:
    return f"{percentile(waits, fraction):.1f}s" if waits else "-"


def _fairness(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}"


def print_summary(console: Console, run: RunFigures, sample_interval: float) -> None:
    samples = max(1, run.samples)
    table = Table(
        title=f"summary: every queue over the same {run.duration:g}s ({samples:,} sample"
        f"{'' if samples == 1 else 's'})",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for column in ("queue", "mean used", "used/guar.", "used/max", "mean pending", "apps"):
        table.add_column(column, justify="left" if column == "queue" else "right", no_wrap=True)
    for path, queue in run.queues.items():
        table.add_row(
            _name(path),
            fmt(queue.mean_used),
            percent(queue.used_of_guarantee),
            percent(queue.used_of_max),
            fmt(queue.mean_pending),
            str(queue.applications),
        )
    console.print(table)
    legend = [
        (
            "mean used, mean pending:",
            f"allocated and still-asked resources averaged over the same {samples:,} samples "
            f"({sample_interval:g}s apart) for every queue, 0 while a queue did not exist: children "
            "add up to their parent",
        ),
        (
            "used/guar., used/max:",
            "mean used against the queue's guaranteed or max resource, of the resource closest to it "
            "(- : none set)",
        ),
        ("apps:", "applications that were in the queue or below it at some sample"),
    ]
    console.print(grid(legend, style="dim"))
    console.print()
    console.print(grid(_totals(run)))


def _totals(run: RunFigures) -> list[tuple[str, str]]:
    submitted, completed, rejected = run.applications
    asks, allocated, pending, asks_rejected = run.asks
    groups = run.fairness_groups()
    fairness = (
        "; ".join(
            f"{parent}: {index:.2f} ({', '.join(s.rsplit('.', 1)[-1] for s in siblings)})"
            for parent, index, siblings in groups
        )
        or "- (no parent has two children with a guarantee)"
    )
    rows = [
        ("applications:", f"{submitted:,} submitted, {completed:,} completed, {rejected:,} rejected"),
        (
            "asks:",
            f"{asks:,} submitted, {allocated:,} allocated, {pending:,} still pending at the end, "
            f"{asks_rejected:,} rejected; {run.released:,} allocations released",
        ),
        (
            "offered load:",
            f"{run.offered[0]:,.1f} applications/s, {run.offered[1]:,.1f} asks/s: the pace of this "
            "simulation, not korral's speed (korral bench measures that)",
        ),
        (
            "wait:",
            "ask submitted -> allocated"
            + (
                f", allocated asks: p50 {_ms(percentile(run.allocated_waits, 0.5))}, "
                f"p99 {_ms(percentile(run.allocated_waits, 0.99))}"
                if run.allocated_waits
                else " (no ask was allocated)"
            )
            + f"; every ask, the {pending:,} still pending at the end counted with their wait so far: "
            f"p50 {_ms(percentile(run.waits, 0.5))}, p99 {_ms(percentile(run.waits, 0.99))} (an ask "
            "submitted just before the end has waited little so far: these can be below the allocated "
            "asks' figures)",
        ),
        (
            "fairness:",
            f"Jain's index of used/guar. among siblings with a guarantee, per parent: {fairness}; "
            "1.0 = all equally served",
        ),
        ("scheduler errors:", f"{run.scheduler_errors}"),
    ]
    if run.rejections:
        # why, beside how many: a config that denies every submission (YuniKorn denies by default when
        # no queue has a submitacl) otherwise shows only zeros
        reasons = "; ".join(f"{count:,} x {reason}" for reason, count in run.rejections)
        rows.insert(1, ("rejected because:", reasons))
    return rows


def print_comparison(console: Console, a: RunFigures, b: RunFigures) -> None:
    """Two runs of the same workload on two configs, queue by queue, side by side."""
    seen = list(a.queues) + [path for path in b.queues if path not in a.queues]
    order = {path: index for index, path in enumerate(seen)}  # a parent before its children
    paths = sorted(seen, key=lambda path: [order.get(p, 0) for p in _ancestors(path)])
    console.print(f"A: {a.label}\nB: {b.label}\n")
    # three narrow tables rather than one wide one: each fits 80 columns
    usage = Table(title="mean used and pending, per queue", box=box.SIMPLE_HEAD, pad_edge=False)
    shares = Table(
        title="used against guarantee, and fairness among its children", box=box.SIMPLE_HEAD, pad_edge=False
    )
    waits = Table(title="asks' wait (s) per queue", box=box.SIMPLE_HEAD, pad_edge=False)
    for table, columns in (
        (usage, ("used A", "used B", "pending A", "pending B")),
        (shares, ("used/guar. A", "used/guar. B", "fairness A", "fairness B")),
        (waits, ("p50 A", "p50 B", "p99 A", "p99 B")),
    ):
        table.add_column("queue", no_wrap=True)
        for column in columns:
            table.add_column(column, justify="right", no_wrap=True)
    for path in paths:
        qa, qb = a.queues.get(path), b.queues.get(path)
        usage.add_row(
            _name(path),
            fmt(qa.mean_used) if qa else "-",
            fmt(qb.mean_used) if qb else "-",
            fmt(qa.mean_pending) if qa else "-",
            fmt(qb.mean_pending) if qb else "-",
        )
        shares.add_row(
            _name(path),
            percent(qa.used_of_guarantee) if qa else "-",
            percent(qb.used_of_guarantee) if qb else "-",
            _fairness(a.sibling_fairness(path)[0]),
            _fairness(b.sibling_fairness(path)[0]),
        )
        waits.add_row(
            _name(path),
            _short_wait(qa.waits, 0.5) if qa else "-",
            _short_wait(qb.waits, 0.5) if qb else "-",
            _short_wait(qa.waits, 0.99) if qa else "-",
            _short_wait(qb.waits, 0.99) if qb else "-",
        )
    for table in (usage, shares, waits):
        console.print(table)
    totals_a, totals_b = dict(_totals(a)), dict(_totals(b))
    rows = [("", "A", "B")]
    for term in ("applications:", "rejected because:", "asks:", "scheduler errors:"):
        if term in totals_a or term in totals_b:
            rows.append((term, totals_a.get(term, "-"), totals_b.get(term, "-")))
    rows.append(
        (
            "wait (every ask):",
            f"p50 {_ms(percentile(a.waits, 0.5))}, p99 {_ms(percentile(a.waits, 0.99))}",
            f"p50 {_ms(percentile(b.waits, 0.5))}, p99 {_ms(percentile(b.waits, 0.99))}",
        )
    )
    console.print(grid(rows))
    console.print(
        grid(
            [
                (
                    "same workload:",
                    "both configs got the same applications at the same virtual times (the same "
                    "options, or the same --replay recording) on the deterministic simulated runtime, "
                    "and a run repeated gives the same figures: a difference above is the configs' doing",
                ),
                (
                    "waits:",
                    "asks of the queue's subtree, pending ones counted with their wait so far; "
                    "fairness: Jain's index of used/guar. among the queue's children with a guarantee",
                ),
            ],
            style="dim",
        )
    )
