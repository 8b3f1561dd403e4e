"""``PreemptionStress``: the preemption mode's run, on threads or on simulated seeds."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable

import attrs

import korral
from korral.core import Core
from korral.harness import invariants
from korral.harness.stress.common import SETTINGS, SIMULATED_SETTLE, Op
from korral.harness.stress.preemption.driver import PreemptionDriver
from korral.harness.stress.preemption.setup import QUOTA_QUEUE


@attrs.define
class PreemptionResult:
    seed: int
    operations: int
    checkpoints: int
    violations: list[str]
    victims: int = 0
    preemptions: int = 0
    preemptors_allocated: int = 0
    required_node_allocated: int = 0
    resubmitted: int = 0
    seeds: int = 0  # simulated: the seeds run


def _preemption_totals(result: PreemptionResult, drivers: Iterable[PreemptionDriver]) -> PreemptionResult:
    for driver in drivers:
        result.victims += driver.rm.victims
        result.preemptions += driver.rm.preemptions
        result.preemptors_allocated += driver.rm.preemptors_allocated
        result.required_node_allocated += driver.rm.required_node_allocated
        result.resubmitted += driver.resubmitted
    return result


class PreemptionStress:
    """``korral stress --preemption``: RMs on threads (``run``) or seeds on the simulated runtime
    (``run_seeds``), checking the preemption laws as each victim is heard of and at every quiescent
    point, with the invariants of every stress run (nothing lost, nothing booked twice)."""

    def __init__(
        self,
        rms: int = 2,
        seed: int = 1,
        checkpoint: float = 2.0,
        pause: float = 0.002,
        required_node_asks: bool = True,
    ) -> None:
        self.required_node_asks = required_node_asks
        self.rm_count = rms
        self.seed = seed
        self.checkpoint_interval = checkpoint
        self.pause = pause  # between one RM's operations: a shim's pace, and room for the core
        self.ops: list[Op] = []
        self._lock = threading.Lock()

    def _record(self, op: Op) -> None:
        with self._lock:
            self.ops.append(attrs.evolve(op, seq=len(self.ops) + 1))

    def _check(
        self,
        core: Core,
        drivers: list[PreemptionDriver],
        collect: Callable[[Core, str], invariants.PartitionState | None] = invariants.stable_collect,
    ) -> list[str]:
        """The laws over each RM's window and the invariants of every partition. On the simulated
        runtime the state is collected once (``invariants.collect``): the run is already quiescent."""
        problems: list[str] = []
        states = []
        windows = [driver.take_window() for driver in drivers]
        for driver, window in zip(drivers, windows, strict=True):
            state = collect(core, driver.partition)
            if state is not None:
                # a lowered max may stand below the usage until quota preemption has brought it down
                problems.extend(invariants.check_partition(state, recovered_queues=(QUOTA_QUEUE,)))
                states.append(state)
            problems.extend(driver.check_window(state, window))
        problems.extend(invariants.check_unique_uuids(states))
        if core.tracker.errors:
            problems.append(f"{core.tracker.errors} actor handler(s) failed (see the log)")
        return problems

    def run(
        self, duration: float, progress: Callable[[float, PreemptionResult], None] | None = None
    ) -> PreemptionResult:
        """RMs on threads for ``duration`` seconds, checked every ``checkpoint`` seconds and at the end."""
        drivers = [PreemptionDriver(index, self.seed, self._record) for index in range(self.rm_count)]
        for driver in drivers:
            driver.required_node_asks = self.required_node_asks
        result = PreemptionResult(seed=self.seed, operations=0, checkpoints=0, violations=[])
        core = korral.start(**SETTINGS)
        try:
            for driver in drivers:
                driver.register(core)
            deadline = time.monotonic() + duration
            while time.monotonic() < deadline and not result.violations:
                until = min(deadline, time.monotonic() + self.checkpoint_interval)
                result.violations = self._window(core, drivers, until)
                if not result.violations:
                    try:
                        core.wait_until_idle(timeout=60.0)
                        result.violations = self._check(core, drivers)
                    except TimeoutError as error:
                        result.violations = [f"no progress (deadlock watchdog): {error}"]
                result.checkpoints += 1
                if progress is not None:
                    progress(
                        max(0.0, deadline - time.monotonic()),
                        _preemption_totals(attrs.evolve(result), drivers),
                    )
            if not result.violations:
                # the end: every late victim confirmed; then nothing may remain awaiting
                for driver in drivers:
                    driver.confirm_all(core)
                core.wait_until_idle(timeout=60.0)
                result.violations = self._check(core, drivers)
                result.checkpoints += 1
        finally:
            core.stop()
        result.operations = len(self.ops)
        return _preemption_totals(result, drivers)

    def _window(self, core: Core, drivers: list[PreemptionDriver], until: float) -> list[str]:
        errors: list[str] = []

        def drive(driver: PreemptionDriver) -> None:
            try:
                while time.monotonic() < until:
                    driver.step(core)
                    time.sleep(self.pause)
            except Exception as error:  # an SI call the core should have taken
                errors.append(f"{driver.rm_id}: {type(error).__name__}: {error}")

        threads = [threading.Thread(target=drive, args=(d,), name=f"preempt-{d.rm_id}") for d in drivers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return errors

    def run_seed(self, seed: int, operations: int = 60) -> PreemptionResult:
        """One seed on the simulated runtime: operations, with virtual time passing between them (so
        preemption delays expire), checked at every quiescent point and after the victims are confirmed."""
        self.ops = []
        rng = random.Random(seed)
        core = korral.start(runtime="simulated", seed=seed, **SETTINGS)
        simulation = core.simulation
        assert simulation is not None
        drivers = [
            PreemptionDriver(index, seed, self._record, clock=lambda: simulation.now)
            for index in range(self.rm_count)
        ]
        for driver in drivers:
            driver.required_node_asks = self.required_node_asks
        result = PreemptionResult(seed=seed, operations=0, checkpoints=0, violations=[], seeds=1)
        try:
            simulation.perturb()
            for driver in drivers:
                driver.register(core)
            for _ in range(operations):
                try:
                    rng.choice(drivers).step(core)
                except Exception as error:
                    result.violations = [f"{type(error).__name__}: {error}"]
                    break
                if rng.random() < 0.5:
                    core.advance(round(rng.uniform(0.0, 0.4), 3))
                core.wait_until_idle()  # a quiescent point: what was sent before is taken in
                result.violations = self._check(core, drivers, invariants.collect)
                result.checkpoints += 1
                if result.violations:
                    break
            if not result.violations:
                for driver in drivers:
                    driver.confirm_all(core)
                core.advance(SIMULATED_SETTLE)
                result.violations = self._check(core, drivers, invariants.collect)
                result.checkpoints += 1
        finally:
            core.stop()
        result.operations = len(self.ops)
        return _preemption_totals(result, drivers)

    def run_seeds(
        self, seeds: Iterable[int], *, operations: int = 60, budget: float = 60.0
    ) -> PreemptionResult:
        """Seeds until one violates or ``budget`` wall seconds are spent; totals over the seeds run."""
        deadline = time.monotonic() + budget
        total = PreemptionResult(seed=0, operations=0, checkpoints=0, violations=[])
        for seed in seeds:
            outcome = self.run_seed(seed, operations)
            total.seed = seed
            total.seeds += 1
            total.operations += outcome.operations
            total.checkpoints += outcome.checkpoints
            total.victims += outcome.victims
            total.preemptions += outcome.preemptions
            total.preemptors_allocated += outcome.preemptors_allocated
            total.required_node_allocated += outcome.required_node_allocated
            total.resubmitted += outcome.resubmitted
            if outcome.violations:
                total.violations = outcome.violations
                break
            if time.monotonic() >= deadline:
                break
        return total
