"""``korral stress``: simulated RMs on threads hammering one core with random SI operations.

Each RM has its own configuration, nodes and applications and issues a seeded stream of operations:
node create / update / drain / decommission, application add / remove, asks added, updated and
released, allocations released, configuration reloads (valid and invalid), re-registration, and a
callback that sometimes raises or is slow. Every ``checkpoint`` seconds all RMs pause, the core is
waited on (a watchdog: no progress in time is a deadlock), and the invariants of
``korral.invariants`` are checked, plus per-RM ones: every ask is pending, allocated, released or
rejected; no RM ever saw another RM's allocation.

On a violation the run stops, prints the seed, and shrinks the recorded operations (delta debugging,
replaying them one at a time on a fresh core) to the shortest sequence that still shows it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

import korral
from korral import faults, invariants, si
from korral import testing as t
from korral.core import Core
from korral.errors import ConfigError
from korral.model.naming import normalize_partition_name

SETTINGS = {
    "completing_timeout": 0.5,
    "queue_cleanup_interval": 0.5,
    "reservation_delay": 0.2,
    "scheduling_interval": 0.05,
}


# User and group limits in every config (the same on every reload, so usage never ends up above one
# legitimately): at most 4 applications per user in the partition and 3 (and 20G memory) in root.a;
# group dev shares 40G and 6 applications. Users take turns by application (``USERS``).
ROOT_USER_LIMITS = """        limits:
          - limit: each user
            users: ["*"]
            maxapplications: 4
          - limit: dev group
            groups: [dev]
            maxresources: {memory: 40000}
            maxapplications: 6
"""
A_USER_LIMITS = """            limits:
              - limit: each user in a
                users: ["*"]
                maxresources: {memory: 20000}
                maxapplications: 3
"""
USERS: tuple[tuple[str, tuple[str, ...]], ...] = (("ann", ("dev",)), ("ben", ("dev", "ops")), ("cid", ()))
LIMITED_GROUPS = ("dev",)


def rm_config(
    variant: int, *, extra_queue: bool = False, binpacking: bool = False, guarantee: int = 20
) -> str:
    """A config per RM: two leaves with limits, a fair leaf, a parent with a child template."""
    extra = "          - name: d\n" if extra_queue else ""
    policy = "binpacking" if binpacking else "fair"
    return f"""
partitions:
  - name: default
    nodesortpolicy:
      type: {policy}
    placementrules:
      - name: provided
      - name: tag
        value: namespace
        create: true
        parent:
          name: fixed
          value: root.c
    queues:
      - name: root
        submitacl: "*"
{ROOT_USER_LIMITS}        queues:
          - name: a
            resources:
              guaranteed: {{memory: {guarantee}000, vcore: {guarantee // 2}}}
              max: {{memory: {60 + variant * 10}000, vcore: 40}}
{A_USER_LIMITS}          - name: b
            properties:
              application.sort.policy: fair
          - name: c
            parent: true
            childtemplate:
              resources:
                max: {{memory: 30000, vcore: 20}}
{extra}"""


INVALID_CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        resources:
          max: {memory: 1}
"""


@attrs.frozen(kw_only=True)
class Op:
    """One SI call, recorded in issue order so that a run can be replayed."""

    seq: int
    rm: int
    kind: str  # nodes | apps | allocations | config | register
    request: Any
    description: str
    expect_error: bool = False


class Violation(Exception):
    pass


class StressRM(t.RecordingRM):
    """Records like RecordingRM; sometimes raises after recording, sometimes is slow."""

    def __init__(self, rm_id: str, seed: int, misbehave: bool) -> None:
        super().__init__(rm_id)
        self._rng = random.Random(seed)
        self.misbehave = misbehave
        self.raised = 0

    def update_allocation(self, response: si.AllocationResponse) -> None:
        super().update_allocation(response)
        self._misbehave()

    def update_application(self, response: si.ApplicationResponse) -> None:
        super().update_application(response)
        self._misbehave()

    def _misbehave(self) -> None:
        if not self.misbehave:
            return
        roll = self._rng.random()
        if roll < 0.01:
            time.sleep(0.005)
        elif roll < 0.03:
            self.raised += 1
            raise RuntimeError("simulated RM callback failure (after recording)")


class Driver:
    """One simulated RM: chooses operations from its own seeded stream."""

    def __init__(self, index: int, seed: int, record: Callable[[Op], None], misbehave: bool) -> None:
        self.index = index
        self.rm_id = f"rm{index}"
        self.rng = random.Random(seed * 1000 + index)
        self.record = record
        self.rm = StressRM(self.rm_id, seed * 7 + index, misbehave)
        self.partition = normalize_partition_name("default", self.rm_id)
        self.config = rm_config(index)
        self.nodes: dict[str, bool] = {}  # node id -> schedulable
        self.apps: set[str] = set()
        self.node_seq = 0
        self.app_seq = 0
        self.ask_seq = 0
        # asks this RM submitted that must be accounted for: key -> application
        self.asks: dict[str, str] = {}
        self.asks_released: set[str] = set()
        self.generation = 0  # registrations so far

    # ---- operations --------------------------------------------------------------------------------

    def register(self, core: Core) -> None:
        self.generation += 1
        self.record(
            Op(
                seq=0,
                rm=self.index,
                kind="register",
                request=t.register(self.rm_id, self.config),
                description=f"{self.rm_id}: register",
            )
        )
        core.register_resource_manager(t.register(self.rm_id, self.config), self.rm)
        with self.rm.lock:
            self.rm.live.clear()
        self.nodes.clear()
        self.apps.clear()
        self.asks.clear()
        self.asks_released.clear()

    def step(self, core: Core) -> None:
        choices: list[tuple[float, Callable[[Core], None]]] = [
            (8 if len(self.nodes) < 12 else 1, self._create_nodes),
            (3, self._update_node),
            (3, self._drain_node),
            (1.5, self._decommission_node),
            (7 if len(self.apps) < 10 else 1, self._add_app),
            (2.5, self._remove_app),
            (20, self._add_asks),
            (3, self._update_ask),
            (3, self._release_asks),
            (15, self._release_allocation),
            (1.5, self._release_app_allocations),
            (0.8, self._reload_config),
            (0.4, self._reload_invalid_config),
            (0.15, self.register),
        ]
        total = sum(weight for weight, _ in choices)
        roll = self.rng.random() * total
        for weight, action in choices:
            roll -= weight
            if roll <= 0:
                action(core)
                return

    def _send(self, core: Core, kind: str, request: Any, description: str) -> None:
        self.record(Op(seq=0, rm=self.index, kind=kind, request=request, description=description))
        if kind == "nodes":
            core.update_node(request)
        elif kind == "apps":
            core.update_application(request)
        else:
            core.update_allocation(request)

    def _create_nodes(self, core: Core) -> None:
        ids = []
        for _ in range(self.rng.randint(1, 3)):
            self.node_seq += 1
            ids.append(f"{self.rm_id}-node-{self.node_seq}")
        capacity = {
            "memory": self.rng.choice([8000, 16000, 32000]),
            "vcore": self.rng.choice([4000, 8000, 16000]),
        }
        occupied = {"memory": 1000} if self.rng.random() < 0.2 else None
        for node_id in ids:
            self.nodes[node_id] = True
        self._send(
            core, "nodes", t.nodes(self.rm_id, ids, capacity, occupied=occupied), f"create nodes {ids}"
        )

    def _pick_node(self) -> str | None:
        return self.rng.choice(sorted(self.nodes)) if self.nodes else None

    def _update_node(self, core: Core) -> None:
        node_id = self._pick_node()
        if node_id is None:
            return
        capacity = {
            "memory": self.rng.choice([8000, 16000, 32000, 48000]),
            "vcore": self.rng.choice([4000, 16000]),
        }
        request = t.node_action(self.rm_id, node_id, si.NodeAction.UPDATE, schedulable_resource=capacity)
        self._send(core, "nodes", request, f"update {node_id} capacity {capacity}")

    def _drain_node(self, core: Core) -> None:
        node_id = self._pick_node()
        if node_id is None:
            return
        schedulable = not self.nodes[node_id]
        self.nodes[node_id] = schedulable
        action = si.NodeAction.DRAIN_TO_SCHEDULABLE if schedulable else si.NodeAction.DRAIN_NODE
        self._send(core, "nodes", t.node_action(self.rm_id, node_id, action), f"{action.name} {node_id}")

    def _decommission_node(self, core: Core) -> None:
        node_id = self._pick_node()
        if node_id is None:
            return
        del self.nodes[node_id]
        self._send(
            core,
            "nodes",
            t.node_action(self.rm_id, node_id, si.NodeAction.DECOMISSION),
            f"decommission {node_id}",
        )

    def _add_app(self, core: Core) -> None:
        self.app_seq += 1
        app_id = f"{self.rm_id}-app-{self.app_seq}"
        user, groups = USERS[self.app_seq % len(USERS)]  # by turn: the seeded stream stays as it was
        if self.rng.random() < 0.3:
            request = t.applications(
                self.rm_id,
                {app_id: ""},
                tags={"namespace": self.rng.choice(["x", "y"])},
                user=user,
                groups=groups,
            )
        else:
            request = t.applications(
                self.rm_id,
                {app_id: self.rng.choice(["root.a", "root.b", "root.d"])},
                user=user,
                groups=groups,
            )
        self.apps.add(app_id)
        self._send(core, "apps", request, f"add application {app_id}")

    def _pick_app(self) -> str | None:
        return self.rng.choice(sorted(self.apps)) if self.apps else None

    def _remove_app(self, core: Core) -> None:
        app_id = self._pick_app()
        if app_id is None:
            return
        self.apps.discard(app_id)
        for key, owner in list(self.asks.items()):
            if owner == app_id:
                del self.asks[key]
        self._send(core, "apps", t.remove_applications(self.rm_id, [app_id]), f"remove application {app_id}")

    def _add_asks(self, core: Core) -> None:
        app_id = self._pick_app()
        if app_id is None:
            return
        count = self.rng.randint(1, 5)
        resource = {
            "memory": self.rng.choice([500, 1000, 2000, 4000]),
            "vcore": self.rng.choice([250, 500, 1000, 2000]),
        }
        request = t.asks(
            self.rm_id,
            app_id,
            count,
            resource,
            prefix=f"{app_id}-ask-",
            start=self.ask_seq,
            priority=self.rng.choice([0, 0, 5]),
            max_allocations=self.rng.choice([1, 1, 2, 3]),
        )
        for index in range(self.ask_seq, self.ask_seq + count):
            self.asks[f"{app_id}-ask-{index}"] = app_id
        self.ask_seq += count
        self._send(core, "allocations", request, f"add {count} asks to {app_id}")

    def _pick_ask(self) -> tuple[str, str] | None:
        if not self.asks:
            return None
        key = self.rng.choice(sorted(self.asks))
        return key, self.asks[key]

    def _update_ask(self, core: Core) -> None:
        picked = self._pick_ask()
        if picked is None:
            return
        key, app_id = picked
        index = int(key.rsplit("-", 1)[1])
        request = t.asks(
            self.rm_id, app_id, 1, {"memory": 750, "vcore": 300}, prefix=f"{app_id}-ask-", start=index
        )
        self._send(core, "allocations", request, f"update ask {key}")

    def _release_asks(self, core: Core) -> None:
        picked = self._pick_ask()
        if picked is None:
            return
        key, app_id = picked
        self.asks_released.add(key)
        self._send(core, "allocations", t.release_asks(self.rm_id, app_id, key), f"release ask {key}")

    def _release_allocation(self, core: Core) -> None:
        with self.rm.lock:
            live = sorted(self.rm.live.values(), key=lambda a: a.uuid)
        if not live:
            return
        allocation = self.rng.choice(live)
        request = t.release(self.rm_id, allocation.application_id, uuid=allocation.uuid)
        self._send(core, "allocations", request, f"release allocation {allocation.uuid}")

    def _release_app_allocations(self, core: Core) -> None:
        app_id = self._pick_app()
        if app_id is not None:
            self._send(
                core, "allocations", t.release(self.rm_id, app_id), f"release all allocations of {app_id}"
            )

    def _reload_config(self, core: Core) -> None:
        self.config = rm_config(
            self.index,
            extra_queue=self.rng.random() < 0.5,
            binpacking=self.rng.random() < 0.3,
            guarantee=self.rng.choice([10, 20, 30]),
        )
        request = si.UpdateConfigurationRequest(rm_id=self.rm_id, config=self.config)
        self.record(
            Op(seq=0, rm=self.index, kind="config", request=request, description=f"{self.rm_id}: reload")
        )
        core.update_configuration(request)

    def _reload_invalid_config(self, core: Core) -> None:
        request = si.UpdateConfigurationRequest(rm_id=self.rm_id, config=INVALID_CONFIG)
        self.record(
            Op(
                seq=0,
                rm=self.index,
                kind="config",
                request=request,
                description=f"{self.rm_id}: invalid reload",
                expect_error=True,
            )
        )
        try:
            core.update_configuration(request)
        except ConfigError:
            return
        raise Violation(f"{self.rm_id}: an invalid configuration reload was accepted")

    # ---- checks ------------------------------------------------------------------------------------

    def check(self, state: invariants.PartitionState | None) -> list[str]:
        if state is None:
            return [f"{self.rm_id}: partition {self.partition} disappeared"]
        problems = invariants.check_rm_view(self.rm, [state])
        apps = {app.application_id: app for app in state.applications}
        for app_id in apps:
            if not app_id.startswith(self.rm_id + "-"):
                problems.append(f"{self.rm_id}: partition holds another RM's application {app_id}")
        with self.rm.lock:
            rejected = {r.allocation_key for r in self.rm.rejected_asks}
            released = {r.allocation_key for r in self.rm.released}
            rejected_apps = set(self.rm.rejected_apps)
        for key, app_id in self.asks.items():
            if app_id in rejected_apps or key in rejected or key in released or key in self.asks_released:
                continue
            app = apps.get(app_id)
            if app is None:
                continue  # completed: it had nothing pending
            if key not in app.pending_asks and not any(a.allocation_key == key for a in app.allocations):
                problems.append(
                    f"{self.rm_id}: ask {key} of {app_id} is neither pending, allocated, released "
                    "nor rejected (lost)"
                )
        return problems


@attrs.define
class StressResult:
    seed: int
    operations: int
    checkpoints: int
    violations: list[str]
    minimal: list[Op]
    callback_failures: int


class StressRun:
    def __init__(
        self,
        rms: int,
        duration: float,
        seed: int,
        checkpoint: float = 2.0,
        fault: str | None = None,
        progress: Callable[[float, int, int], None] | None = None,
        minimize_budget: float = 120.0,
    ) -> None:
        self.rm_count = rms
        self.duration = duration
        self.seed = seed
        self.checkpoint_interval = checkpoint
        self.fault = fault
        self.progress = progress
        self.minimize_budget = minimize_budget
        self.ops: list[Op] = []
        self._ops_lock = threading.Lock()
        self._seq = 0

    def _record(self, op: Op) -> None:
        with self._ops_lock:
            self._seq += 1
            self.ops.append(attrs.evolve(op, seq=self._seq))

    def run(self) -> StressResult:
        faults.disable_all()
        if self.fault:
            faults.enable(self.fault)
        drivers = [Driver(index, self.seed, self._record, misbehave=True) for index in range(self.rm_count)]
        checkpoints = 0
        violations: list[str] = []
        try:
            with korral.start(**SETTINGS) as core:
                for driver in drivers:
                    driver.register(core)
                deadline = time.monotonic() + self.duration
                while time.monotonic() < deadline and not violations:
                    window_end = min(deadline, time.monotonic() + self.checkpoint_interval)
                    violations = self._run_window(core, drivers, window_end)
                    if not violations:
                        violations = self._checkpoint(core, drivers)
                    checkpoints += 1
                    if self.progress is not None:
                        self.progress(max(0.0, deadline - time.monotonic()), len(self.ops), checkpoints)
        finally:
            faults.disable_all()
        minimal = self.minimize(violations, self.minimize_budget) if violations else []
        return StressResult(
            seed=self.seed,
            operations=len(self.ops),
            checkpoints=checkpoints,
            violations=violations,
            minimal=minimal,
            callback_failures=sum(d.rm.raised for d in drivers),
        )

    def _run_window(self, core: Core, drivers: list[Driver], until: float) -> list[str]:
        errors: list[str] = []

        def drive(driver: Driver) -> None:
            try:
                while time.monotonic() < until:
                    driver.step(core)
            except Violation as violation:
                errors.append(str(violation))
            except Exception as error:  # an SI call the core should have taken
                errors.append(f"{driver.rm_id}: {type(error).__name__}: {error}")

        threads = [
            threading.Thread(target=drive, args=(driver,), name=f"stress-{driver.rm_id}")
            for driver in drivers
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return errors

    def _checkpoint(self, core: Core, drivers: list[Driver]) -> list[str]:
        try:
            core.wait_until_idle(timeout=60.0)
        except TimeoutError as error:
            return [f"no progress (deadlock watchdog): {error}"]
        problems: list[str] = []
        for driver in drivers:
            state = invariants.stable_collect(core, driver.partition)
            if state is not None:
                problems.extend(invariants.check_partition(state))
                problems.extend(invariants.check_user_limits(core, state, LIMITED_GROUPS))
            problems.extend(driver.check(state))
        if core.tracker.errors:
            problems.append(f"{core.tracker.errors} actor handler(s) failed (see the log)")
        return problems

    # ---- shrinking ---------------------------------------------------------------------------------

    def replay(self, ops: list[Op]) -> list[str]:
        """Replay operations one at a time on a fresh core; the violations found at the end."""
        faults.disable_all()
        if self.fault:
            faults.enable(self.fault)
        rms = {index: t.RecordingRM(f"rm{index}") for index in range(self.rm_count)}
        try:
            with korral.start(**SETTINGS) as core:
                for index, rm in rms.items():
                    core.register_resource_manager(t.register(rm.rm_id, rm_config(index)), rm)
                for op in ops:
                    try:
                        self._apply(core, rms[op.rm], op)
                    except Exception as error:
                        if not op.expect_error:
                            return [f"{op.description}: {type(error).__name__}: {error}"]
                    core.wait_until_idle(timeout=30.0)
                problems: list[str] = []
                for index, rm in rms.items():
                    state = invariants.stable_collect(core, normalize_partition_name("default", f"rm{index}"))
                    if state is not None:
                        problems.extend(invariants.check_partition(state))
                        problems.extend(invariants.check_rm_view(rm, [state]))
                        problems.extend(invariants.check_user_limits(core, state, LIMITED_GROUPS))
                if core.tracker.errors:
                    problems.append(f"{core.tracker.errors} actor handler(s) failed")
                return problems
        except TimeoutError as error:
            return [f"no progress (deadlock watchdog): {error}"]
        finally:
            faults.disable_all()

    @staticmethod
    def _apply(core: Core, rm: t.RecordingRM, op: Op) -> None:
        if op.kind == "register":
            core.register_resource_manager(op.request, rm)
            with rm.lock:
                rm.live.clear()
        elif op.kind == "nodes":
            core.update_node(op.request)
        elif op.kind == "apps":
            core.update_application(op.request)
        elif op.kind == "allocations":
            core.update_allocation(op.request)
        elif op.kind == "config":
            core.update_configuration(op.request)

    def minimize(self, violations: list[str], budget: float = 120.0) -> list[Op]:
        """Delta debugging over the recorded operations: the shortest sequence still failing."""
        ops = [op for op in self.ops if not (op.kind == "register" and op.seq <= self.rm_count)]
        if not self.replay(ops):
            return ops  # not reproducible one at a time (a timing-dependent race): report it whole
        deadline = time.monotonic() + budget
        chunks = 2
        while len(ops) >= 2 and time.monotonic() < deadline:
            size = max(1, len(ops) // chunks)
            reduced = False
            for start in range(0, len(ops), size):
                candidate = ops[:start] + ops[start + size :]
                if candidate and self.replay(candidate):
                    ops = candidate
                    chunks = max(chunks - 1, 2)
                    reduced = True
                    break
                if time.monotonic() >= deadline:
                    break
            if not reduced:
                if size == 1:
                    break
                chunks = min(len(ops), chunks * 2)
        return ops
