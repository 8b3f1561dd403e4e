"""``StressRun``: RMs on threads against one core, checkpoints, core restarts, and shrinking a violation."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable

import attrs

import korral
from korral import si
from korral import testing as t
from korral.core import Core
from korral.harness import faults, invariants
from korral.harness.stress.common import (
    LIMITED_GROUPS,
    REPRODUCTIONS,
    SETTINGS,
    USERS,
    Op,
    OpLog,
    ReplayRM,
    Violation,
    rm_config,
)
from korral.harness.stress.driver import Driver
from korral.harness.stress.flatness import FlatnessVerdict, ResourceSample, judge, sample
from korral.harness.stress.hostile import HostileDriver
from korral.model.naming import normalize_partition_name


def delta_debug(items: list[Op], still_fails: Callable[[list[Op]], bool], budget: float) -> list[Op]:
    """Zeller's delta debugging: drop chunks of ``items`` while ``still_fails``, finer and finer, until
    no single item can go or ``budget`` seconds have passed. ``items`` must fail to begin with."""
    deadline = time.monotonic() + budget
    chunks = 2
    while len(items) >= 2 and time.monotonic() < deadline:
        size = max(1, len(items) // chunks)
        reduced = False
        for start in range(0, len(items), size):
            candidate = items[:start] + items[start + size :]
            if candidate and still_fails(candidate):
                items = candidate
                chunks = max(chunks - 1, 2)
                reduced = True
                break
            if time.monotonic() >= deadline:
                break
        if not reduced:
            if size == 1:
                break
            chunks = min(len(items), chunks * 2)
    return items


def core_release_counts(drivers: list[Driver]) -> dict[str, int]:
    """The releases the core made that the RMs were told of, by termination type name."""
    counts: Counter[str] = Counter()
    for driver in drivers:
        # a driver that re-registered or restarted counted what its earlier callback objects were told
        counts += getattr(driver, "retired_releases", Counter())
        counts += driver.rm.core_release_counts()
    return dict(counts)


def recorded_keys(ops: Iterable[Op]) -> dict[str, tuple[str, str]]:
    """uuid -> (application, allocation key) of every allocation ``ops`` release by uuid, as the run
    knew them: what a replay needs to release the same allocations (``ReplayRM``)."""
    return {uuid: (app_id, key) for op in ops for uuid, app_id, key in op.released_keys}


@attrs.define
class StressResult:
    seed: int
    operations: int
    checkpoints: int
    violations: list[str]
    minimal: list[Op]
    callback_failures: int
    restarts: int = 0
    # whether ``minimal`` failed on each of REPRODUCTIONS fresh replays (False: a timing-dependent
    # race that one-at-a-time replays do not show; ``minimal`` is then every operation)
    reproduced: bool = False
    # releases the core made, by termination type name (placeholders replaced, timeouts)
    core_releases: dict[str, int] = attrs.Factory(dict)
    # uuid -> (application, allocation key) of every allocation the RMs were told of: what a replay
    # of ``minimal`` needs to translate releases by uuid (``ReplayRM``)
    recorded_keys: dict[str, tuple[str, str]] = attrs.Factory(dict)
    # RSS and threads when the RMs had registered, after each checkpoint and at the end
    samples: list[ResourceSample] = attrs.Factory(list)

    @property
    def flatness(self) -> FlatnessVerdict:
        return judge(self.samples)


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
        hostile: bool = True,
        restart_every: int = 4,
    ) -> None:
        self.hostile = hostile  # invalid items, slow and re-registering RMs, core restarts
        self.restart_every = restart_every  # checkpoints between core restarts (0: never)
        self.restarts = 0
        self.rm_count = rms
        self.duration = duration
        self.seed = seed
        self.checkpoint_interval = checkpoint
        self.fault = fault
        self.progress = progress
        self.minimize_budget = minimize_budget
        self.ops = OpLog()
        self._ops_lock = threading.Lock()
        self._seq = 0
        # uuid -> (application, allocation key) a replay releases besides those its operations name
        # (a printed case's operations carry none: it sets them here)
        self.recorded_keys: dict[str, tuple[str, str]] = {}
        self.drivers: list[Driver] = []

    def _record(self, op: Op) -> None:
        with self._ops_lock:
            self._seq += 1
            self.ops.append(attrs.evolve(op, seq=self._seq))

    def run(self) -> StressResult:
        faults.disable_all()
        if self.fault:
            faults.enable(self.fault)
        drivers = self.drivers = self._drivers()  # kept: what they hold can be inspected after a run
        checkpoints = 0
        violations: list[str] = []
        core = korral.start(**SETTINGS, **faults.start_options())
        started = time.monotonic()
        samples: list[ResourceSample] = []
        try:
            for driver in drivers:
                driver.register(core)
            samples.append(sample(0.0))
            deadline = time.monotonic() + self.duration
            while time.monotonic() < deadline and not violations:
                window_end = min(deadline, time.monotonic() + self.checkpoint_interval)
                violations = self._run_window(core, drivers, window_end)
                if not violations:
                    violations = self._checkpoint(core, drivers)
                checkpoints += 1
                restart_due = self.restart_every and checkpoints % self.restart_every == 0
                if not violations and self.hostile and restart_due:
                    core, violations = self._restart(core, drivers)  # type: ignore[arg-type]
                samples.append(sample(time.monotonic() - started))
                if self.progress is not None:
                    self.progress(max(0.0, deadline - time.monotonic()), len(self.ops), checkpoints)
        finally:
            core.stop()
            faults.disable_all()
        minimal, reproduced = self.minimize(violations, self.minimize_budget) if violations else ([], False)
        return StressResult(
            seed=self.seed,
            operations=len(self.ops),
            checkpoints=checkpoints,
            violations=violations,
            minimal=minimal,
            reproduced=reproduced,
            callback_failures=sum(d.rm.raised for d in drivers),
            restarts=self.restarts,
            core_releases=core_release_counts(drivers),
            recorded_keys=recorded_keys(minimal),
            samples=samples,
        )

    def _drivers(self) -> list[Driver]:
        if not self.hostile:
            return [Driver(index, self.seed, self._record, misbehave=True) for index in range(self.rm_count)]
        # the last RM (of two or more) has slow callbacks: the others must not wait on it
        return [
            HostileDriver(
                index,
                self.seed,
                self._record,
                misbehave=True,
                slow=self.rm_count > 1 and index == self.rm_count - 1,
                rm_count=self.rm_count,
            )
            for index in range(self.rm_count)
        ]

    def _restart(self, core: Core, drivers: list[HostileDriver]) -> tuple[Core, list[str]]:
        """Stop the core and start a new one; every RM recovers what it believes live."""
        self.restarts += 1
        self._record(Op(seq=0, rm=0, kind="restart", request=None, description="core restart"))
        core.stop()
        for driver in drivers:
            # a stopped core delivers nothing more: a callback entered from now on is a violation
            driver.rm.retired = True
            for rm in [*driver.retired, driver.rm]:
                rm.core_stopped = True
        core = korral.start(**SETTINGS, **faults.start_options())
        believed = {driver.rm_id: driver.recover(core) for driver in drivers}
        problems: list[str] = []
        try:
            core.wait_until_idle(timeout=60.0)
        except TimeoutError as error:
            return core, [f"no progress after the restart (deadlock watchdog): {error}"]
        for driver in drivers:
            state = invariants.stable_collect(core, driver.partition)
            problems.extend(driver.check_recovery(state, believed[driver.rm_id]))
        for driver in drivers:
            driver.resubmit(core)
        return core, problems

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
        states = []
        for driver in drivers:
            state = invariants.stable_collect(core, driver.partition)
            if state is not None:
                # recovered allocations are booked even above a queue's max (YuniKorn's recovery)
                recovered: set[str] = getattr(driver, "recovered_apps", set())
                queues = {app.queue for app in state.applications if app.application_id in recovered}
                problems.extend(invariants.check_partition(state, recovered_queues=queues))
                states.append(state)
                # ... and above a user's or group's limits too: the owners of recovered work are exempt
                users = {app.user for app in state.applications if app.application_id in recovered}
                groups = {group for user, member_of in USERS if user in users for group in member_of}
                problems.extend(
                    invariants.check_user_limits(
                        core, state, LIMITED_GROUPS, recovered_users=users, recovered_groups=groups
                    )
                )
            problems.extend(driver.check(state))
        problems.extend(invariants.check_unique_uuids(states))
        if core.tracker.errors:
            problems.append(f"{core.tracker.errors} actor handler(s) failed (see the log)")
        return problems

    # ---- shrinking ---------------------------------------------------------------------------------

    def replay(self, ops: list[Op]) -> list[str]:
        """Replay operations one at a time on a fresh core; the violations found at the end."""
        faults.disable_all()
        if self.fault:
            faults.enable(self.fault)
        keys = {**self.recorded_keys, **recorded_keys(ops)}
        rms = {index: ReplayRM(f"rm{index}", keys) for index in range(self.rm_count)}
        try:
            with korral.start(**SETTINGS, **faults.start_options()) as core:
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
                # as in a run: the owners of recovered work may be above their limits
                recovered = {
                    allocation.application_id
                    for op in ops
                    if isinstance(op.request, si.NodeRequest)
                    for node in op.request.nodes
                    if isinstance(node, si.NodeInfo)
                    for allocation in node.existing_allocations
                    if isinstance(allocation, si.Allocation)
                }
                for index, rm in rms.items():
                    state = invariants.stable_collect(core, normalize_partition_name("default", f"rm{index}"))
                    if state is not None:
                        problems.extend(invariants.check_partition(state))
                        problems.extend(invariants.check_rm_view(rm, [state]))
                        users = {a.user for a in state.applications if a.application_id in recovered}
                        groups = {g for user, member_of in USERS if user in users for g in member_of}
                        problems.extend(
                            invariants.check_user_limits(
                                core, state, LIMITED_GROUPS, recovered_users=users, recovered_groups=groups
                            )
                        )
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
            core.update_allocation(rm.translate(op.request) if isinstance(rm, ReplayRM) else op.request)
        elif op.kind == "config":
            core.update_configuration(op.request)

    def reproduces(self, ops: list[Op], times: int = REPRODUCTIONS) -> bool:
        """Whether ``ops`` fail on each of ``times`` fresh replays. The core's timers run on the wall
        clock (reservation delay, completing and placeholder timeouts), so a sequence may fail only when
        a replay is slow enough for one to fire; such a sequence is no reproduction to hand a person."""
        return all(self.replay(ops) for _ in range(times))

    def minimize(self, violations: list[str], budget: float = 120.0) -> tuple[list[Op], bool]:
        """Delta debugging over the recorded operations: the shortest sequence still failing every time,
        and whether there was one (False: the whole sequence, which replayed does not fail every time)."""
        ops = [op for op in self.ops if not (op.kind == "register" and op.seq <= self.rm_count)]
        if not self.replay(ops):  # (the whole run is replayed once here: it can take minutes)
            return ops, False
        minimal = delta_debug(ops, self.reproduces, budget)
        if len(minimal) == len(ops):  # nothing could go: held to the bar every candidate met
            return ops, self.reproduces(ops, REPRODUCTIONS - 1)
        return minimal, True
