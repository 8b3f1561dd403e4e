"""``korral simulate``: a small cluster scheduled by korral, live, for a newcomer to watch.

A simulated RM registers the bundled queues.yaml (or ``--config``), adds nodes, submits applications
over time (Poisson arrivals; each with a few tasks), "runs" every allocation for a drawn duration and
then releases it, and removes applications whose tasks are done. The display shows each queue's usage
against its guarantee and max as it happens; the summary reports utilisation, fairness, wait times and
throughput.
"""

from __future__ import annotations

import heapq
import importlib.resources
import math
import random
import statistics
import threading
import time
from collections import defaultdict

import attrs
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

import korral
from korral import si
from korral.config import load_config
from korral.model.naming import normalize_partition_name

RM_ID = "simulator"
GiB = 2**30


def bundled_config() -> str:
    return (importlib.resources.files("korral") / "examples" / "queues.yaml").read_text()


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
    """Records allocations with their arrival time; the simulation loop releases them later."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.new: list[tuple[si.Allocation, float]] = []
        self.rejected_apps: dict[str, str] = {}
        self.accepted_nodes = 0

    def update_allocation(self, response: si.AllocationResponse) -> None:
        now = time.monotonic()
        with self.lock:
            self.new.extend((allocation, now) for allocation in response.new)

    def update_application(self, response: si.ApplicationResponse) -> None:
        with self.lock:
            for rejected in response.rejected:
                self.rejected_apps[rejected.application_id] = rejected.reason

    def update_node(self, response: si.NodeResponse) -> None:
        with self.lock:
            self.accepted_nodes += len(response.accepted)

    def take_new(self) -> list[tuple[si.Allocation, float]]:
        with self.lock:
            new, self.new = self.new, []
        return new


@attrs.define
class QueueSample:
    allocated: dict[str, int]
    guaranteed: dict[str, int]
    max: dict[str, int]
    pending: dict[str, int]


def _share(used: dict[str, int], total: dict[str, int]) -> float:
    shares = [used.get(name, 0) / quantity for name, quantity in total.items() if quantity > 0]
    return max(shares) if shares else 0.0


def _fmt(resource: dict[str, int]) -> str:
    if not resource:
        return "-"
    memory = resource.get("memory", 0) / GiB
    vcore = resource.get("vcore", 0) / 1000
    return f"{memory:,.0f}G/{vcore:,.0f}c"


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
        self.submitted_at: dict[str, float] = {}
        self.waits: list[float] = []
        self.allocations = 0
        self.released = 0
        self.completed_apps = 0
        self.samples: dict[str, list[QueueSample]] = defaultdict(list)
        self._seq = 0
        self._leaves = [q for q in self._leaf_queues() if q != "root.batch"]

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
                            schedulable_resource={"memory": 64 * GiB, "vcore": 16_000},
                        )
                        for index in range(self.node_count)
                    ],
                )
            )
            core.wait_until_idle()
            start = time.monotonic()
            next_arrival = start
            next_sample = start
            with Live(self._render(core, 0.0), console=console, refresh_per_second=4) as live:
                while True:
                    now = time.monotonic()
                    elapsed = now - start
                    if elapsed >= self.duration:
                        break
                    while next_arrival <= now:
                        self._submit(core, self._new_app(now), now)
                        next_arrival += self.rng.expovariate(self.arrival_rate)
                    self._collect(now)
                    self._release_finished(core, now)
                    if now >= next_sample:
                        self._sample(core)
                        live.update(self._render(core, elapsed))
                        next_sample = now + 0.5
                    time.sleep(0.02)
                core.wait_until_idle(30)
                self._collect(time.monotonic())
                live.update(self._render(core, self.duration))
            if not console.is_terminal:
                console.print()  # piped: the last live frame does not end its line
            self._summary(console, core)

    def _collect(self, now: float) -> None:
        for allocation, arrived in self.rm.take_new():
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

    def _sample(self, core: korral.Core) -> None:
        for info in self._queues(core):
            if info.is_leaf or info.path == "root":
                self.samples[info.path].append(
                    QueueSample(
                        allocated=info.allocated,
                        guaranteed=info.guaranteed,
                        max=info.max,
                        pending=info.pending,
                    )
                )

    # ---- display -----------------------------------------------------------------------------------

    def _render(self, core: korral.Core, elapsed: float) -> Group:
        table = Table(title=f"korral simulation  t={elapsed:4.1f}s / {self.duration:.0f}s", expand=False)
        for column in ("queue", "used", "guaranteed", "max", "pending", "apps", "used/guar."):
            table.add_column(column, justify="right" if column != "queue" else "left", no_wrap=True)
        for info in self._queues(core):
            if not info.is_leaf and info.path != "root":
                continue
            ratio = _share(info.allocated, info.guaranteed) if info.guaranteed else math.nan
            table.add_row(
                info.path,
                _fmt(info.allocated),
                _fmt(info.guaranteed),
                _fmt(info.max),
                _fmt(info.pending),
                str(len(info.applications)),
                "-" if math.isnan(ratio) else f"{ratio:5.0%}",
            )
        rate = self.allocations / elapsed if elapsed > 0 else 0.0
        status = Table.grid(padding=(0, 2))
        status.add_row(
            f"applications submitted {self._seq}",
            f"completed {self.completed_apps}",
            f"allocations {self.allocations}",
            f"released {self.released}",
            f"{rate:,.1f} allocations/s",
        )
        return Group(table, status)

    def _summary(self, console: Console, core: korral.Core) -> None:
        table = Table(title="summary: time-averaged queue usage")
        for column in ("queue", "mean used", "used/guar.", "used/max", "peak used/max"):
            table.add_column(column, justify="right" if column != "queue" else "left", no_wrap=True)
        guaranteed_shares: list[float] = []
        for path, samples in sorted(self.samples.items()):
            memory = statistics.fmean(s.allocated.get("memory", 0) for s in samples)
            vcore = statistics.fmean(s.allocated.get("vcore", 0) for s in samples)
            use_guarantee = (
                statistics.fmean(_share(s.allocated, s.guaranteed) for s in samples)
                if samples[-1].guaranteed
                else math.nan
            )
            use_max = [_share(s.allocated, s.max) for s in samples] if samples[-1].max else []
            if not math.isnan(use_guarantee) and path != "root":
                guaranteed_shares.append(use_guarantee)
            table.add_row(
                path,
                _fmt({"memory": int(memory), "vcore": int(vcore)}),
                "-" if math.isnan(use_guarantee) else f"{use_guarantee:.0%}",
                f"{statistics.fmean(use_max):.0%}" if use_max else "-",
                f"{max(use_max):.0%}" if use_max else "-",
            )
        console.print(table)
        waits = sorted(self.waits)
        fairness = (
            sum(guaranteed_shares) ** 2 / (len(guaranteed_shares) * sum(x * x for x in guaranteed_shares))
            if guaranteed_shares and any(guaranteed_shares)
            else math.nan
        )
        p50 = waits[len(waits) // 2] if waits else 0.0
        p99 = waits[min(len(waits) - 1, int(len(waits) * 0.99))] if waits else 0.0
        console.print(
            f"applications: {self._seq} submitted, {self.completed_apps} completed, "
            f"{len(self.rm.rejected_apps)} rejected\n"
            f"allocations: {self.allocations} made, {self.released} released, "
            f"{self.allocations / self.duration:,.1f} per second\n"
            f"wait (ask submitted -> allocated): p50 {p50 * 1000:,.0f} ms, p99 {p99 * 1000:,.0f} ms\n"
            f"fairness between guaranteed queues (Jain's index of use/guarantee, 1.0 = equal): "
            f"{'-' if math.isnan(fairness) else f'{fairness:.2f}'}\n"
            f"scheduler errors: {core.tracker.errors}"
        )


def simulate(config: str | None, nodes: int, duration: float, seed: int, arrival_rate: float) -> None:
    """Run the simulation on a queues.yaml text (None: the bundled example)."""
    text = config if config is not None else bundled_config()
    console = Console()
    if not console.is_terminal:
        console = Console(width=110)  # piped or in CI: wide enough for the tables
    Simulation(text, nodes, duration, seed, arrival_rate).run(console)
