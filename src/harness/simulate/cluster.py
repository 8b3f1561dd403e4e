"""``korral simulate``: a small cluster scheduled by korral, live, for a newcomer to watch.

A simulated RM registers the bundled queues.yaml (or ``--config``), adds nodes, submits applications
over time (Poisson arrivals; each with a few tasks), "runs" every allocation for a drawn duration and
then releases it, and removes applications whose tasks are done. The core runs on the deterministic
simulated runtime (``korral.start(runtime="simulated")``) and the whole run on its virtual clock: the
same ``--seed`` gives the same run, figure for figure, so two configs can be compared on the same
workload (``--compare``). On a terminal the live view plays the virtual time at the wall clock's pace;
piped, the run goes as fast as it can. The live view shows each queue's usage against its guarantee
and max as it happens; the summary (``report``) gives, over one window for every queue that existed,
mean usage, pending demand, fairness among siblings and how long asks waited (pending ones included).
"""

from __future__ import annotations

import heapq
import importlib.resources
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable

import attrs
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

import korral
from korral import si
from korral.config import load_config
from korral.harness.simulate.report import (
    QueueFigures,
    RunFigures,
    fmt,
    percent,
    share,
)
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

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock  # the simulation's virtual clock
        self.lock = threading.Lock()
        self.new: list[tuple[si.Allocation, float]] = []
        self.rejected_apps: dict[str, str] = {}
        self.rejected_asks: list[str] = []
        self.accepted_nodes = 0

    def update_allocation(self, response: si.AllocationResponse) -> None:
        now = self.clock()
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


def _ancestors(path: str) -> Iterable[str]:
    """``root.a.b`` -> root, root.a, root.a.b."""
    parts = path.split(".")
    for depth in range(1, len(parts) + 1):
        yield ".".join(parts[:depth])


def _add(total: dict[str, float], resource: dict[str, int] | dict[str, float]) -> None:
    for name, quantity in resource.items():
        total[name] = total.get(name, 0) + quantity


@attrs.define
class QueueSample:
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


class SimulateRun:
    """One ``korral simulate`` run: a config, a cluster and a workload on the simulated runtime."""

    def __init__(
        self, config: str, nodes: int, duration: float, seed: int, arrival_rate: float, label: str = ""
    ) -> None:
        self.config_text = config
        self.config = load_config(config)
        self.label = label
        self.partition = normalize_partition_name(self.config.partitions[0].name, RM_ID)
        self.node_count = nodes
        self.duration = duration
        self.seed = seed
        self.rng = random.Random(seed)
        self.arrival_rate = arrival_rate
        self.rm = SimulatedRM()
        self.apps: dict[str, SimApp] = {}
        self.finishing: list[tuple[float, int, str, str, str]] = []  # (end, seq, app, uuid, key)
        self.submitted_at: dict[str, float] = {}  # asks not allocated yet: when they were submitted
        self.waits: list[tuple[str, float]] = []  # allocated asks: (application, submitted -> allocated)
        self.app_queue: dict[str, str] = {}  # where each application was placed
        self.asks_submitted = 0
        self.asks_rejected = 0
        self.rejections_counted: set[str] = set()
        self.allocations = 0
        self.released = 0
        self.completed_apps = 0
        self.scheduler_errors = 0
        self.interrupted = False
        self.stop_requested = False
        self._seq = 0
        self._finish_seq = 0
        self._leaves = [q for q in self._leaf_queues() if q != "root.batch"]
        # the samples: the latest one (the live view), the sums over all of them (the summary), and
        # every sample's usage per queue (the chart)
        self.latest: dict[str, QueueSample] = {}
        self.totals: dict[str, QueueTotals] = {}
        self.history: list[tuple[float, dict[str, dict[str, float]]]] = []
        self.first_seen: dict[str, int] = {}  # display order: a parent before its children
        self.sample_count = 0
        self.cluster: dict[str, int] = {}
        for _, resource in self.node_list():
            for name, quantity in resource.items():
                self.cluster[name] = self.cluster.get(name, 0) + quantity

    def node_list(self) -> list[tuple[str, dict[str, int]]]:
        """The cluster's nodes: (id, schedulable resource)."""
        return [(f"node-{index:03d}", dict(NODE_RESOURCE)) for index in range(self.node_count)]

    def _acl_hint(self) -> str:
        """Why a rejection may be the config's ACLs: without a submitacl or adminacl on any queue,
        YuniKorn (and korral) deny every submission."""
        stack = [self.config.partitions[0].root]
        while stack:
            queue = stack.pop()
            if getattr(queue, "submit_acl", "") or getattr(queue, "admin_acl", ""):
                return ""
            stack.extend(getattr(queue, "queues", ()))
        return " (no queue has a submitacl or adminacl: YuniKorn denies every submission by default)"

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

    def _arrive(self, core: korral.Core, elapsed: float, due: float) -> float:
        """Submit what arrives by ``elapsed`` (the next arrival was ``due``); the next arrival's time."""
        while due <= elapsed:
            self._submit(core, self._new_app(elapsed), elapsed)
            due += self.rng.expovariate(self.arrival_rate)
        return due

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

    def run(self, console: Console | None) -> None:
        """The whole run on the virtual clock; live on ``console`` (None: quietly, for a comparison)."""
        try:
            self._run(console)
        except KeyboardInterrupt:  # Ctrl-C outside the events' loop (which takes its own): starting, stopping
            if not self.interrupted:
                self.interrupted, self.duration = True, SAMPLE_INTERVAL  # before the first event: nothing ran

    def _run(self, console: Console | None) -> None:
        with korral.start(
            runtime="simulated", seed=self.seed, completing_timeout=1.0, queue_cleanup_interval=2.0
        ) as core:
            simulation = core.simulation
            assert simulation is not None
            self.rm.clock = simulation.clock
            core.register_resource_manager(
                si.RegisterResourceManagerRequest(rm_id=RM_ID, config=self.config_text), self.rm
            )
            core.update_node(
                si.NodeRequest(
                    rm_id=RM_ID,
                    nodes=[
                        si.NodeInfo(
                            node_id=node_id, action=si.NodeAction.CREATE, schedulable_resource=resource
                        )
                        for node_id, resource in self.node_list()
                    ],
                )
            )
            core.wait_until_idle()
            start = simulation.now
            if console is None:
                self._loop(core, start, None, None)
            else:
                with Live(self._render(console, 0.0), console=console, refresh_per_second=4) as live:
                    self._loop(core, start, console, live)
                if not console.is_terminal:
                    console.print()  # piped: the last live frame does not end its line
                console.print()
            self.scheduler_errors = core.tracker.errors

    def _loop(self, core: korral.Core, start: float, console: Console | None, live: Live | None) -> None:
        """Events in virtual time: arrivals, task ends, samples; the core runs its timers in between."""
        simulation = core.simulation
        assert simulation is not None
        paced = console is not None and console.is_terminal  # watchable: virtual time at the wall's pace
        wall_start = time.monotonic()
        try:
            self._events(core, start, console, live, paced, wall_start)
        except KeyboardInterrupt:  # Ctrl-C: the figures cover the part that ran (korral simulate: exit 130)
            self.interrupted = True
            self.duration = max(SAMPLE_INTERVAL, simulation.now - start)
        # what korral still had in hand when the arrivals stopped counts, nothing after
        core.wait_until_idle()
        self._collect(start)
        self._learn_queues(core)
        self._sample(core, self.duration)
        if live is not None and console is not None:
            live.update(self._render(console, self.duration))

    def _events(
        self,
        core: korral.Core,
        start: float,
        console: Console | None,
        live: Live | None,
        paced: bool,
        wall: float,
    ) -> None:
        simulation = core.simulation
        assert simulation is not None
        next_arrival = 0.0
        next_sample = 0.0
        while True:
            if self.stop_requested:  # Ctrl-C (simulate.runs): between two events, never inside an actor
                raise KeyboardInterrupt
            elapsed = simulation.now - start
            due = min(next_arrival, next_sample, self.duration)
            if self.finishing:
                due = min(due, self.finishing[0][0] - start)
            core.advance(max(0.0, due - elapsed))
            elapsed = simulation.now - start
            self._collect(start)
            if elapsed >= self.duration:
                break
            next_arrival = self._arrive(core, elapsed, next_arrival)
            self._release_finished(core, elapsed + start)
            core.wait_until_idle()
            self._collect(start)
            self._learn_queues(core)
            if elapsed >= next_sample:
                self._sample(core, elapsed)
                if live is not None and console is not None:
                    live.update(self._render(console, elapsed))
                while next_sample <= elapsed:
                    next_sample += SAMPLE_INTERVAL
            if paced:
                time.sleep(max(0.0, wall + elapsed - time.monotonic()))

    def _learn_queues(self, core: korral.Core) -> None:
        """Where the applications submitted since the last call were placed (the rules may choose)."""
        # in submission order (a set difference would iterate in hash order, and app_queue's order shows)
        for app_id in [app_id for app_id in self.apps if app_id not in self.app_queue]:
            app = self.apps[app_id]
            if app_id in self.rm.rejected_apps:
                continue
            info = core.application(self.partition, app_id)
            if info is not None:
                self.app_queue[app_id] = info.queue
            elif app.queue:
                self.app_queue[app_id] = app.queue

    def _collect(self, start: float) -> None:
        """Allocations and rejections heard since the last call; times relative to the run's start."""
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
        for allocation, heard in new:
            arrived = heard - start
            self.allocations += 1
            submitted = self.submitted_at.pop(allocation.allocation_key, None)
            if submitted is not None:
                self.waits.append((allocation.application_id, arrived - submitted))
            app = self.apps.get(allocation.application_id)
            if app is None:
                continue
            index = int(allocation.allocation_key.rsplit("-", 1)[1])
            self._finish_seq += 1
            heapq.heappush(
                self.finishing,
                (
                    heard + app.durations[index],
                    self._finish_seq,
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

    def _sample(self, core: korral.Core, elapsed: float) -> None:
        """Every queue at this moment, and the run's sums with it (one window for all queues).

        Usage comes from one snapshot of the partition's applications, summed up the tree, so a parent
        is exactly the sum of its children; the queues' own reports give the structure, guarantees
        and maxes.
        """
        states: dict[str, QueueSample] = {}
        for info in self._queues(core):
            states[info.path] = QueueSample(guaranteed=info.guaranteed, max=info.max, is_leaf=info.is_leaf)
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
        self.history.append((elapsed, {path: dict(state.allocated) for path, state in states.items()}))
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

    def _bar(self, state: QueueSample, width: int = 24) -> Text:
        """Used against the queue's max (or the cluster): filled cells, the guarantee as a mark."""
        scale = state.max or self.cluster
        used = min(1.0, share(state.allocated, scale))
        guarantee = share(state.guaranteed, scale) if state.guaranteed else math.nan
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
            title=f"korral simulate: {plural(self.node_count, 'node')} ({fmt(self.cluster)}), "
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
                fmt(state.allocated),
                fmt(state.guaranteed, unset="-"),
                fmt(state.max, unset="-"),
                fmt(state.pending),
                str(len(state.applications)),
                percent(share(state.allocated, state.guaranteed) if state.guaranteed else math.nan),
            ]
            table.add_row(*row, *([self._bar(state)] if wide else []))
        status = Text(
            f"applications: {self._seq:,} submitted, {self.completed_apps:,} completed, "
            f"{len(self.rm.rejected_apps):,} rejected\n"
            f"asks: {self.asks_submitted:,} submitted, {self.allocations:,} allocated, "
            f"{len(self.submitted_at):,} waiting; {self.released:,} allocations released"
        )
        return Group(table, status)

    def figures(self) -> RunFigures:
        """The run reduced to per-queue figures over one window (every sample, 0 where a queue was not)."""
        samples = max(1, self.sample_count)
        end = self.duration
        subtree_waits: dict[str, list[float]] = {}
        every = [(app_id, wait) for app_id, wait in self.waits]
        every += [
            (key.rsplit("-task-", 1)[0], end - submitted) for key, submitted in self.submitted_at.items()
        ]
        for app_id, wait in every:
            for path in _ancestors(self.app_queue.get(app_id, "root")):
                subtree_waits.setdefault(path, []).append(wait)
        queues = {}
        for path in self._tree_order(self.totals):
            totals = self.totals[path]
            queues[path] = QueueFigures(
                path=path,
                guaranteed=totals.guaranteed,
                max=totals.max,
                mean_used={name: quantity / samples for name, quantity in totals.allocated.items()},
                mean_pending={name: quantity / samples for name, quantity in totals.pending.items()},
                applications=len(totals.applications),
                waits=tuple(sorted(subtree_waits.get(path, ()))),
            )
        return RunFigures(
            label=self.label,
            duration=self.duration,
            samples=samples,
            queues=queues,
            applications=(self._seq, self.completed_apps, len(self.rm.rejected_apps)),
            asks=(self.asks_submitted, self.allocations, len(self.submitted_at), self.asks_rejected),
            released=self.released,
            offered=(self._seq / self.duration, self.asks_submitted / self.duration),
            waits=tuple(sorted(wait for _, wait in every)),
            allocated_waits=tuple(sorted(wait for _, wait in self.waits)),
            scheduler_errors=self.scheduler_errors,
            rejections=tuple(
                (reason + self._acl_hint(), count)
                for reason, count in Counter(self.rm.rejected_apps.values()).most_common()
            ),
            interrupted=self.interrupted,
        )
