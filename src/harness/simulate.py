"""``korral simulate``: a small cluster scheduled by korral, live, for a newcomer to watch.

A simulated RM registers the bundled queues.yaml (or ``--config``), adds nodes, submits applications
over time (Poisson arrivals; each with a few tasks), "runs" every allocation for a drawn duration and
then releases it, and removes applications whose tasks are done. The live view shows each queue's
usage against its guarantee and max as it happens; the summary reports, over one time window for
every queue that existed, mean usage, pending demand, fairness between guaranteed queues and how long
asks waited -- those still pending at the end included.
"""

from __future__ import annotations

import heapq
import importlib.resources
import math
import random
import threading
import time
from collections.abc import Iterable, Mapping

import attrs
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

import korral
from korral import si
from korral.config import load_config
from korral.model.naming import normalize_partition_name

RM_ID = "simulator"
GiB = 2**30
SAMPLE_INTERVAL = 0.5  # seconds between two samples of every queue (live view and summary)
NODE_RESOURCE = {"memory": 64 * GiB, "vcore": 16_000}
BAR_MIN_WIDTH = 120  # terminals at least this wide also get a usage bar per queue


def bundled_config() -> str:
    return (importlib.resources.files("korral") / "examples" / "queues.yaml").read_text()


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


@attrs.define
class SimApp:
    app_id: str
    queue: str  # what the RM asks for ("" lets the tag rule place it)
    tags: dict[str, str]
    tasks: int
    resource: dict[str, int]
    durations: list[float]
    submitted: float = 0.0
    done: int = 0


class SimulatedRM(korral.ResourceManagerCallback):
    """Records allocations with their arrival time and what was rejected; the loop releases later."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.new: list[tuple[si.Allocation, float]] = []
        self.rejected_apps: dict[str, str] = {}
        self.rejected_asks: list[str] = []
        self.accepted_nodes = 0

    def update_allocation(self, response: si.AllocationResponse) -> None:
        now = time.monotonic()
        with self.lock:
            self.new.extend((allocation, now) for allocation in response.new)
            self.rejected_asks.extend(rejected.allocation_key for rejected in response.rejected)

    def update_application(self, response: si.ApplicationResponse) -> None:
        with self.lock:
            for rejected in response.rejected:
                self.rejected_apps[rejected.application_id] = rejected.reason

    def update_node(self, response: si.NodeResponse) -> None:
        with self.lock:
            self.accepted_nodes += len(response.accepted)

    def take_new(self) -> tuple[list[tuple[si.Allocation, float]], list[str], set[str]]:
        """Allocations since the last call, asks rejected since then, every application rejected."""
        with self.lock:
            new, self.new = self.new, []
            rejected_asks, self.rejected_asks = self.rejected_asks, []
            return new, rejected_asks, set(self.rejected_apps)


def _share(used: Mapping[str, float], total: Mapping[str, float]) -> float:
    """used / total of the resource closest to its total (the dominant share); 0 with no total."""
    shares = [used.get(name, 0) / quantity for name, quantity in total.items() if quantity > 0]
    return max(shares) if shares else 0.0


def _fmt(resource: dict[str, int] | dict[str, float] | None, unset: str = "0") -> str:
    """``48G/24c``: memory in GiB, vcores (whole), short enough for an 80-column table.

    ``unset`` stands for no resource at all: ``0`` for a usage, ``-`` for a guarantee or max not set.
    """
    if not resource:
        return unset
    memory = resource.get("memory", 0) / GiB
    vcore = resource.get("vcore", 0) / 1000
    return f"{memory:.0f}G/{vcore:.0f}c"


def _percent(share: float) -> str:
    return "-" if math.isnan(share) else f"{share:.0%}"


def _ancestors(path: str) -> Iterable[str]:
    """``root.a.b`` -> root, root.a, root.a.b."""
    parts = path.split(".")
    for depth in range(1, len(parts) + 1):
        yield ".".join(parts[:depth])


def _add(total: dict[str, float], resource: dict[str, int] | dict[str, float]) -> None:
    for name, quantity in resource.items():
        total[name] = total.get(name, 0) + quantity


@attrs.define
class QueueState:
    """One queue at one sample: what korral reports for it, its usage summed from its applications."""

    guaranteed: dict[str, int]
    max: dict[str, int]
    is_leaf: bool
    allocated: dict[str, float] = attrs.Factory(dict)
    pending: dict[str, float] = attrs.Factory(dict)
    applications: set[str] = attrs.Factory(set)


@attrs.define
class QueueTotals:
    """A queue over the whole run: sums over every sample of the run (0 while the queue did not exist)."""

    guaranteed: dict[str, int]
    max: dict[str, int]
    allocated: dict[str, float] = attrs.Factory(dict)
    pending: dict[str, float] = attrs.Factory(dict)
    applications: set[str] = attrs.Factory(set)


def _grid(rows: list[tuple[str, str]], style: str = "") -> Table:
    """Term and meaning side by side; a long meaning wraps in its own column, under itself."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, style=style or "bold")
    grid.add_column(style=style)
    for term, meaning in rows:
        grid.add_row(term, meaning)
    return grid


def percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * fraction))]


class Simulation:
    def __init__(self, config: str, nodes: int, duration: float, seed: int, arrival_rate: float) -> None:
        self.config_text = config
        self.config = load_config(config)
        self.partition = normalize_partition_name(self.config.partitions[0].name, RM_ID)
        self.node_count = nodes
        self.duration = duration
        self.rng = random.Random(seed)
        self.arrival_rate = arrival_rate
        self.rm = SimulatedRM()
        self.apps: dict[str, SimApp] = {}
        self.finishing: list[tuple[float, int, str, str, str]] = []  # (end, seq, app, uuid, key)
        self.submitted_at: dict[str, float] = {}  # asks not allocated yet: when they were submitted
        self.waits: list[float] = []  # allocated asks: submitted -> allocation received
        self.asks_submitted = 0
        self.asks_rejected = 0
        self.rejections_counted: set[str] = set()
        self.allocations = 0
        self.released = 0
        self.completed_apps = 0
        self._seq = 0
        self._leaves = [q for q in self._leaf_queues() if q != "root.batch"]
        # the samples: the latest one (the live view) and the sums over all of them (the summary)
        self.latest: dict[str, QueueState] = {}
        self.totals: dict[str, QueueTotals] = {}
        self.first_seen: dict[str, int] = {}  # display order: a parent before its children
        self.sample_count = 0
        self.cluster = {name: quantity * nodes for name, quantity in NODE_RESOURCE.items()}

    def _leaf_queues(self) -> list[str]:
        leaves: list[str] = []

        def walk(queue: object, path: str) -> None:
            children = getattr(queue, "queues", ())
            if not children and not getattr(queue, "parent", False):
                leaves.append(path)
            for child in children:
                walk(child, f"{path}.{child.name}")

        walk(self.config.partitions[0].root, "root")
        return leaves

    # ---- workload ----------------------------------------------------------------------------------

    def _new_app(self, now: float) -> SimApp:
        self._seq += 1
        app_id = f"app-{self._seq:04d}"
        # no configured leaf to pick (a lone root): every application goes by the placement rules
        if not self._leaves or self.rng.random() < 0.3:
            namespace = self.rng.choice(["analytics", "etl", "ml"])
            queue, tags = "", {"namespace": namespace}
        else:
            # the first leaves of the config (production, development) see most of the demand
            weights = [max(1, len(self._leaves) - index) ** 2 for index in range(len(self._leaves))]
            queue, tags = self.rng.choices(self._leaves, weights)[0], {}
        tasks = self.rng.choice([1, 2, 4, 8, 16])
        vcore, memory = self.rng.choice([(1, 2), (2, 4), (4, 8), (8, 16)])
        durations = [self.rng.uniform(1.0, 6.0) for _ in range(tasks)]
        return SimApp(
            app_id=app_id,
            queue=queue,
            tags=tags,
            tasks=tasks,
            resource={"memory": memory * GiB, "vcore": vcore * 1000},
            durations=durations,
            submitted=now,
        )

    def _submit(self, core: korral.Core, app: SimApp, now: float) -> None:
        self.apps[app.app_id] = app
        core.update_application(
            si.ApplicationRequest(
                rm_id=RM_ID,
                new=[
                    si.AddApplicationRequest(
                        application_id=app.app_id,
                        queue_name=app.queue,
                        ugi=si.UserGroupInformation(user="sim"),
                        tags=app.tags,
                    )
                ],
            )
        )
        asks = []
        for index in range(app.tasks):
            key = f"{app.app_id}-task-{index}"
            self.submitted_at[key] = now
            self.asks_submitted += 1
            asks.append(
                si.AllocationAsk(
                    allocation_key=key,
                    application_id=app.app_id,
                    resource_ask=dict(app.resource),
                    max_allocations=1,
                )
            )
        core.update_allocation(si.AllocationRequest(rm_id=RM_ID, asks=asks))

    # ---- run ---------------------------------------------------------------------------------------

    def run(self, console: Console) -> None:
        with korral.start(completing_timeout=1.0, queue_cleanup_interval=2.0) as core:
            core.register_resource_manager(
                si.RegisterResourceManagerRequest(rm_id=RM_ID, config=self.config_text), self.rm
            )
            core.update_node(
                si.NodeRequest(
                    rm_id=RM_ID,
                    nodes=[
                        si.NodeInfo(
                            node_id=f"node-{index:03d}",
                            action=si.NodeAction.CREATE,
                            schedulable_resource=dict(NODE_RESOURCE),
                        )
                        for index in range(self.node_count)
                    ],
                )
            )
            core.wait_until_idle()
            start = time.monotonic()
            next_arrival = start
            next_sample = start
            self._sample(core)
            with Live(self._render(console, 0.0), console=console, refresh_per_second=4) as live:
                while True:
                    now = time.monotonic()
                    elapsed = now - start
                    if elapsed >= self.duration:
                        break
                    while next_arrival <= now:
                        self._submit(core, self._new_app(now), now)
                        next_arrival += self.rng.expovariate(self.arrival_rate)
                    self._collect()
                    self._release_finished(core, now)
                    if now >= next_sample:
                        self._sample(core)
                        live.update(self._render(console, elapsed))
                        while next_sample <= now:  # late: skip, never sample twice in a row
                            next_sample += SAMPLE_INTERVAL
                    time.sleep(0.02)
                # what korral still had in hand when the arrivals stopped counts, nothing after
                core.wait_until_idle(30)
                self._collect()
                self._sample(core)
                live.update(self._render(console, self.duration))
            if not console.is_terminal:
                console.print()  # piped: the last live frame does not end its line
            console.print()
            self._summary(console, core, end=time.monotonic())

    def _collect(self) -> None:
        new, rejected_asks, rejected_apps = self.rm.take_new()
        for key in rejected_asks:
            if self.submitted_at.pop(key, None) is not None:
                self.asks_rejected += 1
        # the asks of a rejected application are not waiting for anything: out of the wait figures
        for app_id in rejected_apps - self.rejections_counted:
            self.rejections_counted.add(app_id)
            app = self.apps.get(app_id)
            for index in range(app.tasks if app is not None else 0):
                if self.submitted_at.pop(f"{app_id}-task-{index}", None) is not None:
                    self.asks_rejected += 1
        for allocation, arrived in new:
            self.allocations += 1
            submitted = self.submitted_at.pop(allocation.allocation_key, None)
            if submitted is not None:
                self.waits.append(arrived - submitted)
            app = self.apps.get(allocation.application_id)
            if app is None:
                continue
            index = int(allocation.allocation_key.rsplit("-", 1)[1])
            heapq.heappush(
                self.finishing,
                (
                    arrived + app.durations[index],
                    self._seq + len(self.finishing),
                    allocation.application_id,
                    allocation.uuid,
                    allocation.allocation_key,
                ),
            )

    def _release_finished(self, core: korral.Core, now: float) -> None:
        releases: list[si.AllocationRelease] = []
        finished_apps: list[str] = []
        while self.finishing and self.finishing[0][0] <= now:
            _, _, app_id, uuid, _ = heapq.heappop(self.finishing)
            releases.append(
                si.AllocationRelease(
                    application_id=app_id,
                    uuid=uuid,
                    termination_type=si.TerminationType.STOPPED_BY_RM,
                    message="task finished",
                )
            )
            app = self.apps[app_id]
            app.done += 1
            if app.done == app.tasks:
                finished_apps.append(app_id)
        if releases:
            self.released += len(releases)
            core.update_allocation(
                si.AllocationRequest(
                    rm_id=RM_ID, releases=si.AllocationReleasesRequest(allocations_to_release=releases)
                )
            )
        if finished_apps:
            self.completed_apps += len(finished_apps)
            core.update_application(
                si.ApplicationRequest(
                    rm_id=RM_ID,
                    remove=[si.RemoveApplicationRequest(application_id=app_id) for app_id in finished_apps],
                )
            )
            for app_id in finished_apps:
                del self.apps[app_id]

    def _queues(self, core: korral.Core) -> list[korral.QueueInfo]:
        found: list[korral.QueueInfo] = []
        pending = ["root"]
        while pending:
            info = core.queue(self.partition, pending.pop(0))
            if info is None:
                continue
            found.append(info)
            pending.extend(info.children)
        return found

    # ---- samples -----------------------------------------------------------------------------------

    def _sample(self, core: korral.Core) -> None:
        """Every queue at this moment, and the run's sums with it (one window for all queues).

        Usage comes from one snapshot of the partition's applications, summed up the tree, so a parent
        is exactly the sum of its children; the queues' own reports give the structure, guarantees
        and maxes.
        """
        states: dict[str, QueueState] = {}
        for info in self._queues(core):
            states[info.path] = QueueState(guaranteed=info.guaranteed, max=info.max, is_leaf=info.is_leaf)
            self.first_seen.setdefault(info.path, len(self.first_seen))
        for app in core.applications(self.partition):
            for path in _ancestors(app.queue):
                state = states.get(path)
                if state is None:  # created or removed between the two reads: next sample has it
                    continue
                _add(state.allocated, app.allocated)
                _add(state.pending, app.pending)
                state.applications.add(app.application_id)
        self.latest = states
        self.sample_count += 1
        for path, state in states.items():
            totals = self.totals.get(path)
            if totals is None:
                totals = self.totals[path] = QueueTotals(guaranteed=state.guaranteed, max=state.max)
            totals.guaranteed, totals.max = state.guaranteed, state.max
            _add(totals.allocated, state.allocated)
            _add(totals.pending, state.pending)
            totals.applications |= state.applications

    def _tree_order(self, paths: Iterable[str]) -> list[str]:
        return sorted(paths, key=lambda path: [self.first_seen.get(p, 0) for p in _ancestors(path)])

    @staticmethod
    def _tree_name(path: str) -> str:
        depth = path.count(".")
        return "  " * depth + path.rsplit(".", 1)[-1]

    # ---- display -----------------------------------------------------------------------------------

    def _bar(self, state: QueueState, width: int = 24) -> Text:
        """Used against the queue's max (or the cluster): filled cells, the guarantee as a mark."""
        scale = state.max or self.cluster
        used = min(1.0, _share(state.allocated, scale))
        guarantee = _share(state.guaranteed, scale) if state.guaranteed else math.nan
        filled = round(used * width)
        bar = Text("█" * filled, style="green" if not state.guaranteed or used <= guarantee else "yellow")
        bar.append("·" * (width - filled), style="dim")
        if not math.isnan(guarantee):
            mark = min(width - 1, round(guarantee * width))
            bar = bar[:mark] + Text("┃", style="bold cyan") + bar[mark + 1 :]
        return bar

    def _render(self, console: Console, elapsed: float) -> Group:
        wide = console.width >= BAR_MIN_WIDTH
        table = Table(
            title=f"korral simulate: {plural(self.node_count, 'node')} ({_fmt(self.cluster)}), "
            f"t={elapsed:4.1f}s of {self.duration:g}s",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
        )
        for column in ("queue", "used", "guar.", "max", "pending", "apps", "used/guar."):
            table.add_column(column, justify="left" if column == "queue" else "right", no_wrap=True)
        if wide:
            table.add_column("used of max, ┃ guaranteed", no_wrap=True)
        for path in self._tree_order(self.latest):
            state = self.latest[path]
            row = [
                self._tree_name(path),
                _fmt(state.allocated),
                _fmt(state.guaranteed, unset="-"),
                _fmt(state.max, unset="-"),
                _fmt(state.pending),
                str(len(state.applications)),
                _percent(_share(state.allocated, state.guaranteed) if state.guaranteed else math.nan),
            ]
            table.add_row(*row, *([self._bar(state)] if wide else []))
        status = Text(
            f"applications: {self._seq:,} submitted, {self.completed_apps:,} completed, "
            f"{len(self.rm.rejected_apps):,} rejected\n"
            f"asks: {self.asks_submitted:,} submitted, {self.allocations:,} allocated, "
            f"{len(self.submitted_at):,} waiting; {self.released:,} allocations released"
        )
        return Group(table, status)

    def _summary(self, console: Console, core: korral.Core, end: float) -> None:
        samples = max(1, self.sample_count)
        table = Table(
            title=f"summary: every queue over the same {self.duration:g}s ({plural(samples, 'sample')})",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
        )
        for column in ("queue", "mean used", "used/guar.", "used/max", "mean pending", "apps"):
            table.add_column(column, justify="left" if column == "queue" else "right", no_wrap=True)
        guaranteed_shares: dict[str, float] = {}
        for path in self._tree_order(self.totals):
            totals = self.totals[path]
            mean_used = {name: quantity / samples for name, quantity in totals.allocated.items()}
            mean_pending = {name: quantity / samples for name, quantity in totals.pending.items()}
            use_guarantee = _share(mean_used, totals.guaranteed) if totals.guaranteed else math.nan
            use_max = _share(mean_used, totals.max) if totals.max else math.nan
            if totals.guaranteed and path != "root":
                guaranteed_shares[path] = use_guarantee
            table.add_row(
                self._tree_name(path),
                _fmt(mean_used),
                _percent(use_guarantee),
                _percent(use_max),
                _fmt(mean_pending),
                str(len(totals.applications)),
            )
        console.print(table)
        legend = [
            (
                "mean used, mean pending:",
                f"allocated and still-asked resources averaged over the same {plural(samples, 'sample')} "
                f"({SAMPLE_INTERVAL:g}s apart) for every queue, 0 while a queue did not exist: children "
                "add up to their parent",
            ),
            (
                "used/guar., used/max:",
                "mean used against the queue's guaranteed or max resource, of the resource closest to it "
                "(- : none set)",
            ),
            ("apps:", "applications that were in the queue or below it at some sample"),
        ]
        console.print(_grid(legend, style="dim"))
        console.print()
        self._print_waits_and_totals(console, core, end, guaranteed_shares)

    def _print_waits_and_totals(
        self, console: Console, core: korral.Core, end: float, guaranteed_shares: dict[str, float]
    ) -> None:
        still_pending = [end - submitted for submitted in self.submitted_at.values()]
        every_wait = sorted(self.waits + still_pending)
        allocated_waits = sorted(self.waits)
        shares = list(guaranteed_shares.values())
        fairness = (
            sum(shares) ** 2 / (len(shares) * sum(x * x for x in shares))
            if shares and any(shares)
            else math.nan
        )
        offered_asks = self.asks_submitted / self.duration
        rows = [
            (
                "applications:",
                f"{self._seq:,} submitted, {self.completed_apps:,} completed, "
                f"{len(self.rm.rejected_apps):,} rejected",
            ),
            (
                "asks:",
                f"{self.asks_submitted:,} submitted, {self.allocations:,} allocated, "
                f"{len(still_pending):,} still pending at the end, {self.asks_rejected:,} rejected; "
                f"{self.released:,} allocations released",
            ),
            (
                "offered load:",
                f"{self._seq / self.duration:,.1f} applications/s, {offered_asks:,.1f} asks/s "
                f"(--arrival-rate {self.arrival_rate:g}): the pace of this simulation, not korral's "
                "speed (korral bench measures that)",
            ),
            (
                "wait:",
                "ask submitted -> allocated, every ask: "
                f"p50 {percentile(every_wait, 0.5) * 1000:,.0f} ms, "
                f"p99 {percentile(every_wait, 0.99) * 1000:,.0f} ms; the {plural(len(still_pending), 'ask')} "
                "still pending at the end count with their wait so far, so the true figures are at least "
                + (
                    f"these (allocated asks only: p50 {percentile(allocated_waits, 0.5) * 1000:,.0f} ms, "
                    f"p99 {percentile(allocated_waits, 0.99) * 1000:,.0f} ms)"
                    if allocated_waits
                    else "these (no ask was allocated)"
                ),
            ),
            (
                "fairness:",
                f"Jain's index of used/guar. {'-' if math.isnan(fairness) else f'{fairness:.2f}'} "
                f"between the queues with a guarantee ({', '.join(guaranteed_shares) or 'none'}); "
                "1.0 = all equally served",
            ),
            ("scheduler errors:", f"{core.tracker.errors}"),
        ]
        console.print(_grid(rows))


def simulate(config: str | None, nodes: int, duration: float, seed: int, arrival_rate: float) -> None:
    """Run the simulation on a queues.yaml text (None: the bundled example)."""
    text = config if config is not None else bundled_config()
    Simulation(text, nodes, duration, seed, arrival_rate).run(Console())
