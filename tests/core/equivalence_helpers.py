"""The drivers of the equivalence tests (test_equivalence_*.py): the actor system against the reference.

Issue bar: "on seeded random workloads the actor system and the sequential reference end with the same
allocated resources per queue and application".

Both drivers get the same SI requests. The actor system is driven one step at a time (a step is one SI
request, and the steps that can lead to allocations touch one application or one node at a time) with
``wait_until_idle`` after each; the reference calls ``schedule()`` at the same points. With that, the
scheduler actor sees every change in the same order as the reference and decides with the same code
on the same walk, so the allocations must match exactly: same resources per queue and application,
same (allocation key, node) pairs, even the same uuids. Reservations are kept out of it with a large
``reservation_delay`` (they depend on wall-clock time), and completing applications are not expired
(the reference has no timer), so ``completing_timeout`` is large too.

A second family of cases ("burst") sends changes for several applications at once, while the RM's
predicate keeps every node closed: the scheduler sees all of them before it may place anything. The
gate then opens and one node update wakes the scheduler, so the result must again match the
reference scheduling the same burst in one go.
"""

from __future__ import annotations

import random
import re
import threading
from collections import Counter
from typing import Any

import attrs

import korral
from korral import resource as res
from korral import si
from korral import testing as t
from korral.config import load_config
from korral.errors import ConfigError
from korral.harness.reference import ReferenceScheduler

RM = "rm"
PARTITION = "[rm]default"
# a step takes well under a second; a slow machine beside CPU hogs and a starting Ray cluster once
# starved one past wait_until_idle's default 10 s
IDLE_TIMEOUT = 60.0
# each life of a partition numbers its allocation uuids after a random token of its own
UUID_TOKEN = re.compile(r"-[0-9a-f]{8}-")
SETTINGS = {
    "completing_timeout": 3600.0,
    "queue_cleanup_interval": 0.2,
    # An ask that fits no node is timed work: every tick runs a cycle to retry it. Where one such cycle
    # takes longer than the tick (a slow machine under coverage tracing took ~40 ms), a tick is always
    # queued and the core is never idle: 20 ms made test_matches_reference_in_bursts[2] wait forever.
    # The steps' own changes wake the cycles these tests compare; the ticks only retry.
    "scheduling_interval": 0.2,
    "reservation_delay": 3600.0,
}
SEEDS = list(range(12))


# ---- workload generation ---------------------------------------------------------------------------


def _limits(rng: random.Random, memory: int, vcore: int) -> dict[str, Any]:
    """Random guaranteed / max for a queue, in config units (vcore in cores)."""
    resources: dict[str, Any] = {}
    if rng.random() < 0.5:
        resources["max"] = {
            "memory": rng.randrange(memory // 4, memory + 1, 100),
            "vcore": rng.randint(2, vcore),
        }
    if rng.random() < 0.5:
        top = resources.get("max", {"memory": memory, "vcore": vcore})
        resources["guaranteed"] = {
            "memory": rng.randrange(100, max(200, top["memory"] // 2), 100),
            "vcore": rng.randint(1, max(1, top["vcore"] // 2)),
        }
    return resources


def _queue_yaml(queue: dict[str, Any], indent: int) -> list[str]:
    pad = " " * indent
    lines = [f"{pad}- name: {queue['name']}"]
    if queue.get("parent"):
        lines.append(f"{pad}  parent: true")
    resources = queue.get("resources")
    if resources:
        lines.append(f"{pad}  resources:")
        for kind, values in resources.items():
            lines.append(f"{pad}    {kind}: {{memory: {values['memory']}, vcore: {values['vcore']}}}")
    if queue.get("policy"):
        lines.append(f"{pad}  properties:")
        lines.append(f"{pad}    application.sort.policy: {queue['policy']}")
    if queue.get("children"):
        lines.append(f"{pad}  queues:")
        for child in queue["children"]:
            lines.extend(_queue_yaml(child, indent + 4))
    return lines


def random_config(rng: random.Random, depth: int) -> tuple[str, list[str]]:
    """A 2- or 3-level queue tree with random guarantees and maxima; returns (yaml, leaf paths)."""
    for _ in range(100):
        leaves: list[str] = []
        top: list[dict[str, Any]] = []
        for index in range(rng.randint(2, 3)):
            name = f"q{index}"
            queue: dict[str, Any] = {"name": name, "resources": _limits(rng, 20000, 24)}
            if depth == 3 and rng.random() < 0.7:
                queue["parent"] = True
                queue["children"] = []
                for child_index in range(rng.randint(2, 3)):
                    child_name = f"{name}c{child_index}"
                    queue["children"].append(
                        {
                            "name": child_name,
                            "resources": _limits(rng, 12000, 12),
                            "policy": rng.choice(["fifo", "fair"]),
                        }
                    )
                    leaves.append(f"root.{name}.{child_name}")
            else:
                queue["policy"] = rng.choice(["fifo", "fair"])
                leaves.append(f"root.{name}")
            top.append(queue)
        lines = [
            "partitions:",
            "  - name: default",
            f"    nodesortpolicy: {{type: {rng.choice(['fair', 'binpacking'])}}}",
            "    queues:",
            "      - name: root",
            '        submitacl: "*"',
            "        queues:",
        ]
        for queue in top:
            lines.extend(_queue_yaml(queue, 10))
        text = "\n".join(lines) + "\n"
        try:
            load_config(text)
        except ConfigError:
            continue  # limits that do not nest: draw again (deterministic for the seed)
        return text, leaves
    raise AssertionError("no valid random config in 100 draws")


def random_asks(rng: random.Random, app_id: str, prefix: str, count: int) -> si.AllocationRequest:
    asks = [
        si.AllocationAsk(
            allocation_key=f"{prefix}{index}",
            application_id=app_id,
            resource_ask={
                "memory": rng.choice([100, 200, 300, 500, 800, 1000, 1500, 2500]),
                "vcore": rng.choice([100, 250, 500, 1000, 2000]),
            },
            priority=rng.choice([0, 0, 0, 1, 5, 10]),
            max_allocations=rng.choice([1, 1, 1, 2, 3, 5]),
        )
        for index in range(count)
    ]
    return si.AllocationRequest(rm_id=RM, asks=asks)


def random_node(rng: random.Random, node_id: str) -> si.NodeRequest:
    capacity = {"memory": rng.randrange(2000, 8001, 500), "vcore": rng.randrange(2000, 8001, 1000)}
    occupied = {"memory": rng.choice([0, 0, 0, 500])}
    return t.nodes(RM, [node_id], capacity, occupied=res.prune(occupied))


# ---- the two drivers -------------------------------------------------------------------------------


class Gate:
    """An RM predicate: while closed, no node accepts anything (the scheduler walks but cannot place)."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.open.set()

    def __call__(self, args: si.PredicatesArgs) -> bool:
        return self.open.is_set()


class Pair:
    """One workload fed to the actor system and to the reference scheduler, step by step."""

    def __init__(self, core: korral.Core, config: str) -> None:
        self.core = core
        self.gate = Gate()
        self.rm = t.RecordingRM(RM, predicate=self.gate)
        self.ref = ReferenceScheduler(config, rm_id=RM, reservation_delay=3600.0)
        self.ref_released: list[si.AllocationRelease] = []
        self.ref_rejected: list[si.RejectedAllocationAsk] = []
        core.register_resource_manager(t.register(RM, config), self.rm)

    @property
    def model(self):
        partition = self.ref.partition("default")
        assert partition is not None
        return partition

    def step(self, request: Any, *, schedule: bool = True) -> None:
        if isinstance(request, si.NodeRequest):
            self.core.update_node(request)
            _, response = self.ref.update_node(request)
            self.ref_released.extend(response.released)
        elif isinstance(request, si.ApplicationRequest):
            self.core.update_application(request)
            self.ref.update_application(request)
            self.ref_released.extend(self.ref.take_released().released)
        else:
            self.core.update_allocation(self.with_core_uuids(request))
            response = self.ref.update_allocation(request)
            self.ref_released.extend(response.released)
            self.ref_rejected.extend(response.rejected)
        self.core.wait_until_idle(IDLE_TIMEOUT)
        if schedule:
            self.ref.schedule()
            # placeholders a real ask replaces are released to the RM by the scheduling itself
            self.ref_released.extend(self.ref.take_released().released)

    def confirm(self) -> None:
        """The RM echoes every release the core made (replaced placeholders), to both drivers."""
        made: dict[str, list[si.AllocationRelease]] = {}
        for release in self.ref_released:
            if release.termination_type in t.CORE_RELEASES:
                made.setdefault(release.application_id, []).append(release)
        with self.rm.lock:
            self.rm.to_confirm.clear()
        for releases in made.values():  # one application per step, as every step here
            self.step(
                si.AllocationRequest(
                    rm_id=RM, releases=si.AllocationReleasesRequest(allocations_to_release=releases)
                )
            )

    def with_core_uuids(self, request: si.AllocationRequest) -> si.AllocationRequest:
        """The request with the reference's uuids swapped for the core's: each has its own token."""
        if request.releases is None or not any(r.uuid for r in request.releases.allocations_to_release):
            return request
        with self.rm.lock:
            core_uuid = {series(uuid): uuid for uuid in self.rm.live}
            # allocations the core released itself are no longer live for the RM, but still booked
            core_uuid.update(
                (series(r.uuid), r.uuid) for r in self.rm.released if series(r.uuid) not in core_uuid
            )
        releases = [
            attrs.evolve(r, uuid=core_uuid.get(series(r.uuid), r.uuid))
            for r in request.releases.allocations_to_release
        ]
        return attrs.evolve(request, releases=attrs.evolve(request.releases, allocations_to_release=releases))

    def feed(self, requests: list[Any], *, burst: bool) -> None:
        """The requests at once (``burst``: one decision run) or one after another."""
        if burst:
            self.burst(requests)
        else:
            for request in requests:
                self.step(request)

    def burst(self, requests: list[Any]) -> None:
        """Several requests at once with every node closed, then one wake-up: one decision run."""
        self.gate.open.clear()
        for request in requests:
            self.step(request, schedule=False)
        self.gate.open.set()
        # any node change wakes the scheduler; an update to the same capacity changes nothing else
        node_id = sorted(self.model.nodes)[0]
        node = self.model.nodes[node_id]
        self.step(
            si.NodeRequest(
                rm_id=RM,
                nodes=[
                    si.NodeInfo(
                        node_id=node_id,
                        action=si.NodeAction.UPDATE,
                        schedulable_resource=dict(node.capacity),
                    )
                ],
            )
        )

    # ---- comparison --------------------------------------------------------------------------------

    def compare(self, where: str) -> None:
        core, model = self.core, self.model
        for path, queue in model.queues.items():
            info = core.queue(PARTITION, path)
            assert info is not None, f"{where}: queue {path} missing in the actor system"
            assert info.allocated == res.prune(queue.allocated), f"{where}: {path} allocated"
            assert info.pending == res.prune(queue.pending), f"{where}: {path} pending"
        infos = {info.application_id: info for info in core.applications(PARTITION)}
        assert set(infos) == set(model.applications), f"{where}: applications"
        for app_id, app in model.applications.items():
            info = infos[app_id]
            assert info.allocated == res.prune(app.allocated), f"{where}: {app_id} allocated"
            assert info.pending == res.prune(app.pending), f"{where}: {app_id} pending"
            assert info.queue == app.queue_path
            assert info.state == app.state.value, f"{where}: {app_id} state"
            assert info.placeholder == res.prune(app.placeholder_allocated), f"{where}: {app_id} placeholder"
            assert {series(a.uuid) for a in info.allocations if a.releasing} == {
                series(uuid) for uuid in app.releasing
            }, f"{where}: {app_id} releasing"
            got = Counter((a.allocation_key, a.node_id) for a in info.allocations)
            want = Counter((a.allocation_key, a.node_id) for a in app.allocations.values())
            assert got == want, f"{where}: {app_id} placements"
            # same decisions in the same order: even the uuids agree, but for each partition's token
            assert {series(a.uuid) for a in info.allocations} == {series(u) for u in app.allocations}, (
                f"{where}: {app_id} uuids"
            )
        for node_id, node in model.nodes.items():
            info = core.node(PARTITION, node_id)
            assert info is not None
            assert info.allocated == node.allocated, f"{where}: node {node_id} allocated"
            assert info.available == res.prune(node.available), f"{where}: node {node_id} available"
        partition = core.partition(PARTITION)
        assert partition is not None
        assert partition.allocated == res.prune(model.root.allocated)
        assert partition.capacity == res.prune(model.capacity)
        # the RM was told exactly what runs
        with self.rm.lock:
            live = {series(uuid): a.application_id for uuid, a in self.rm.live.items()}
            released = {series(r.uuid) for r in self.rm.released}
            rejected = sorted((r.application_id, r.allocation_key) for r in self.rm.rejected_asks)
        want_live = {
            series(uuid): app.application_id
            for app in model.applications.values()
            for uuid in app.allocations
            if uuid not in app.releasing  # released to the RM, booked until it confirms
        }
        assert live == want_live, f"{where}: RM's live allocations"
        assert released == {series(r.uuid) for r in self.ref_released}, f"{where}: releases reported"
        assert rejected == sorted((r.application_id, r.allocation_key) for r in self.ref_rejected)
        assert core.tracker.errors == 0


def series(uuid: str) -> str:
    """An allocation uuid without its partition-life token: "[rm]default-1a2b3c4d-7" -> "[rm]default-7"."""
    return UUID_TOKEN.sub("-", uuid)


# ---- preemption ------------------------------------------------------------------------------------------


class FakeClock:
    """One clock for both drivers: the preemption delay passes when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def preempting_asks(rng: random.Random, app_id: str, prefix: str, count: int) -> si.AllocationRequest:
    asks = [
        si.AllocationAsk(
            max_allocations=1,
            allocation_key=f"{prefix}{index}",
            application_id=app_id,
            resource_ask={"memory": rng.choice([300, 500, 1000]), "vcore": rng.choice([100, 500, 1000])},
            priority=rng.choice([0, 5, 10]),
            preemption_policy=si.PreemptionPolicy(allow_preempt_self=False, allow_preempt_other=True),
        )
        for index in range(count)
    ]
    return si.AllocationRequest(rm_id=RM, asks=asks)


def filler_asks(rng: random.Random, app_id: str, prefix: str, count: int) -> si.AllocationRequest:
    asks = [
        si.AllocationAsk(
            allocation_key=f"{prefix}{index}",
            application_id=app_id,
            resource_ask={"memory": rng.choice([100, 200, 500]), "vcore": rng.choice([100, 250, 500])},
            priority=rng.choice([0, 0, 5, 20]),
            max_allocations=rng.choice([1, 2, 4]),
            preemption_policy=rng.choice([None, si.PreemptionPolicy(allow_preempt_self=rng.random() < 0.7)]),
            originator=rng.random() < 0.1,
        )
        for index in range(count)
    ]
    return si.AllocationRequest(rm_id=RM, asks=asks)


def advance_both(pair: Pair, clock: FakeClock, seconds: float) -> None:
    """Move the shared clock on; the actors decide on their next tick, the reference on schedule()."""
    clock.now += seconds
    pair.core.poke_timers()  # tells every timer now due before it returns
    pair.core.wait_until_idle(IDLE_TIMEOUT)
    pair.ref.schedule()
    pair.ref_released.extend(pair.ref.take_released().released)
