"""``korral stress --simulated``: many seeds of a small scenario on the deterministic simulated runtime.

Per seed, RMs (``korral.harness.stress.Driver``) issue a seeded stream of SI calls, and between calls the
seed lets the core run a few steps, to quiescence or for some virtual time. Every quiescent point is
checked: the invariants of ``korral.harness.invariants`` and the RMs' own ledgers. A seed replays
exactly (the same calls, the same deliveries, the same trace); a violating run is shrunk by delta
debugging over its recorded operations.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

import korral
from korral import testing as t
from korral.actors.messages import Snapshot
from korral.actors.simulated import SimulationError
from korral.actors.simulated_trace import CallbackRecord, callback_line
from korral.core import Core
from korral.harness import faults, invariants, repro
from korral.harness.simulated import checks as simulated_checks
from korral.harness.simulated import faults as simulated_faults
from korral.harness.simulated import pct as simulated_pct
from korral.harness.simulated import restart as simulated_restart
from korral.harness.simulated import settle as simulated_settle
from korral.harness.simulated import workloads as simulated_workloads
from korral.harness.simulated.coverage import Coverage
from korral.harness.simulated.injected import Injector, setup_with_injection
from korral.harness.simulated.runs import Cores, initial_registrations, learn
from korral.harness.simulated.scenarios import ScenarioDriver, SeedSettings
from korral.harness.simulated.workloads import (
    ALL_WORKLOADS,
    LOWERED_QUEUE,
    SPARE_PARTITION,
    Workloads,
    has_spare,
    lowers_max,
)
from korral.harness.stress import (
    Driver,
    Op,
    StressRun,
    Violation,
    delta_debug,
)
from korral.model.naming import normalize_partition_name

# deliveries without quiescence that make a run a livelock (a seed's whole run takes a few thousand)
LIVELOCK_STEPS = 50_000


@attrs.frozen(kw_only=True)
class SimulatedOutcome:
    """One seed's run: what it did, what it found, and the callbacks it delivered (its trace)."""

    seed: int  # the workload's
    ops: tuple[Op, ...]
    violations: tuple[str, ...]
    steps: int
    virtual_seconds: float
    # every RM callback delivered, in order, restarts marked: ``callbacks`` writes them out
    callback_records: tuple[str | CallbackRecord, ...]
    trace: tuple[str, ...]  # every message delivered, when a full trace was asked for
    schedule_seed: int = 0  # the delivery order's (the workload seed unless one was given apart)
    callback_failures: int = 0  # RM callbacks that raised on purpose (--env-faults callbacks)
    handler_failures: int = 0  # actor handlers that raised on purpose (--env-faults handlers)
    batches_cut: int = 0  # scheduling batches ended early on purpose (--env-faults cutoffs)
    restarts: int = 0  # core restarts with recovery (--env-faults restarts)

    @property
    def callbacks(self) -> tuple[str, ...]:
        """``core.trace()`` of each of the run's cores in turn: every RM callback delivered, in order."""
        return tuple(r if isinstance(r, str) else callback_line(r) for r in self.callback_records)


@attrs.frozen(kw_only=True)
class ShrunkCase:
    """A violating run shrunk: the operations kept, whether replaying exactly them shows the
    violation, and what that replay showed."""

    ops: tuple[Op, ...]
    reproduced: bool
    replayed: tuple[str, ...]


class SimulatedStress:
    """A small scenario per seed, interleaved by a schedule seed: the same pair replays it exactly.

    The workload seed drives the RMs' operations (``Driver``) and when the test lets the core run a
    few steps, to quiescence or for some virtual time between them; the schedule seed (the workload
    seed unless given apart) drives the order the simulation delivers messages in (with perturbation:
    mailboxes held back, timers skewed, time per delivery) and the core's uuid tokens. One workload
    can so be re-run under other schedules (an RM's choices still follow what it has heard back, so
    a workload's later calls may differ between schedules). Every quiescent point is checked: the
    invariants of ``korral.harness.invariants`` and the RMs' own ledgers.
    """

    def __init__(
        self,
        rms: int = 1,
        operations: int = 30,
        fault: str | None = None,
        perturb: bool = True,
        explore: str = "uniform",
        env_faults: frozenset[str] = frozenset(simulated_faults.ENV_FAULTS),
        workloads: Workloads = ALL_WORKLOADS,
    ) -> None:
        if explore not in simulated_pct.EXPLORERS:
            raise ValueError(f"unknown exploration {explore!r}: one of {', '.join(simulated_pct.EXPLORERS)}")
        self.rm_count = rms
        self.operations = operations
        self.fault = fault
        self.perturb = perturb
        self.explore = explore  # the delivery order: uniform among ready mailboxes, or PCT
        self.env_faults = env_faults  # the environment's faults in the mix (simulated.faults)
        self.workloads = workloads  # the operations of simulated.workloads in the mix
        self._clean_at: tuple[Any, int] | None = None  # (simulation, steps) of the last clean check
        # what the seeds run so far reached (``simulated.coverage``), when asked for (None: not counted)
        self.coverage: Coverage | None = None

    def _start(self, seed: int, full_trace: bool, settings: SeedSettings) -> Core:
        options = setup_with_injection(faults.start_options(), self.env_faults)
        # the cyclic collector's thresholds raised while the core runs (actors.gc_tuning): at Python's
        # defaults its collections took a tenth of a seed's CPU, and they decide nothing in a run
        core = korral.start(
            runtime="simulated", seed=seed, tune_gc=True, **settings.core_settings(), **options
        )
        assert core.simulation is not None
        core.simulation.max_steps_per_run = LIVELOCK_STEPS
        if self.env_faults & {"handlers", "cutoffs"}:
            core.simulation.injector = Injector(seed, self.env_faults)
        # a check reads each application three times (its state, its user's and group's usage)
        core.simulation.repeatable_reads = frozenset({Snapshot})
        simulated_pct.install(core.simulation, self.explore, seed)
        if self.perturb:
            core.simulation.perturb()
        if full_trace:
            core.record_full_trace()
        core.simulation.coverage = self.coverage
        return core

    def run_seed(
        self, seed: int, *, schedule_seed: int | None = None, full_trace: bool = False
    ) -> SimulatedOutcome:
        """The scenario the seed chooses, delivered in the schedule seed's order (default: the seed),
        checked at every quiescent point."""
        schedule = seed if schedule_seed is None else schedule_seed
        ops: list[Op] = []

        def record(op: Op) -> None:
            ops.append(attrs.evolve(op, seq=len(ops) + 1))

        rng = random.Random(seed)
        settings = SeedSettings.of(seed)
        drivers = [
            ScenarioDriver(
                index, seed, record, settings=settings, env_faults=self.env_faults, workloads=self.workloads
            )
            for index in range(self.rm_count)
        ]
        with self._faults():
            cores = Cores(self, schedule, full_trace, settings)
            try:
                for driver in drivers:
                    driver.register(cores.core)
                violations: list[str] = []
                for _ in range(self.operations):
                    try:
                        if (
                            "restarts" in self.env_faults
                            and rng.random() < simulated_restart.RESTART_PROBABILITY
                        ):
                            violations = self._restart(cores, drivers, record)
                        else:
                            rng.choice(drivers).step(cores.core)
                    except Violation as violation:
                        violations = [str(violation)]
                    except Exception as error:  # an SI call the core should have taken
                        violations = [f"{type(error).__name__}: {error}"]
                    if violations:
                        break
                    pause = self._pause(rng)
                    record(Op(seq=0, rm=0, kind="run", request=pause, description=f"run {pause}"))
                    violations = self._run_and_check(cores.core, pause, [d.rm for d in drivers], drivers)
                    if violations:
                        break
                if not violations:
                    violations = simulated_settle.settle(self, cores.core, drivers)
                if self.coverage is not None:
                    self._count(ops)
                return self._outcome(cores, seed, schedule, ops, violations, drivers)
            finally:
                cores.stop()

    def _count(self, ops: Sequence[Op]) -> None:
        """A seed's operations in the coverage (an RM's registration after its first: again)."""
        coverage = self.coverage
        assert coverage is not None
        coverage.seeds += 1
        registered: set[int] = set()
        for op in ops:
            if op.kind == "register" and op.rm in registered:
                coverage.operations["register again"] += 1
                continue
            if op.kind == "register":
                registered.add(op.rm)
            coverage.operation(op.kind, op.request, op.description)

    def _restart(
        self, cores: Cores, drivers: Sequence[ScenarioDriver], record: Callable[[Op], None]
    ) -> list[str]:
        """A core restart with recovery (``simulated.restart``): each RM re-registers and recovers; the
        core runs to quiescence and is checked (each RM's recovered allocations among them); then the
        asks still waiting are resubmitted."""
        record(Op(seq=0, rm=0, kind="restart", request=None, description="restart the core"))
        cores.restart()
        waiting = [simulated_restart.recover(driver, cores.core) for driver in drivers]
        settle = ("idle", 0.0)
        record(Op(seq=0, rm=0, kind="run", request=settle, description=f"run {settle}"))
        violations = self._run_and_check(cores.core, settle, [d.rm for d in drivers], drivers)
        if not violations:
            for driver, asks in zip(drivers, waiting, strict=True):
                simulated_restart.resubmit(driver, cores.core, asks)
        return violations

    def _pause(self, rng: random.Random) -> tuple[str, float]:
        if "jumps" in self.env_faults and rng.random() < simulated_faults.JUMP_PROBABILITY:
            return ("jump", round(rng.uniform(*simulated_faults.JUMP_SECONDS), 3))
        roll = rng.random()
        if roll < 0.3:
            return ("steps", float(rng.randint(0, 3)))  # calls overlap: the next lands in this one's work
        if roll < 0.5:
            return ("steps", float(rng.randint(4, 30)))  # part of the work, the next call lands mid-way
        if roll < 0.8:
            return ("idle", 0.0)
        return ("advance", round(rng.uniform(0.0, 0.6), 3))

    @staticmethod
    def _run(core: Core, pause: tuple[str, float]) -> bool:
        """Let the core run as the pause says; True when it ends quiescent (a point to check)."""
        simulation = core.simulation
        assert simulation is not None
        kind, amount = pause
        if kind == "steps":
            for _ in range(int(amount)):
                if not simulation.step():
                    return True
            return False
        if kind == "jump":
            simulation.jump(amount)
        elif kind == "advance":
            core.advance(amount)
        else:
            core.wait_until_idle()
        return True

    def _run_and_check(
        self, core: Core, pause: tuple[str, float], rms: list[t.RecordingRM], drivers: Sequence[Driver] | None
    ) -> list[str]:
        """Run as the pause says and check if it ends quiescent; a run that never gets quiet (a
        livelock: ``LIVELOCK_STEPS`` deliveries without quiescence) is a violation too."""
        try:
            quiescent = self._run(core, pause)
        except SimulationError as error:
            return [f"livelock: {error}"]
        return self._check(core, rms, drivers) if quiescent else []

    def _check(self, core: Core, rms: list[t.RecordingRM], drivers: Sequence[Driver] | None) -> list[str]:
        """The invariants and the RMs' ledgers, read with virtual time frozen: no timer fires between
        two reads of one check (``Simulation.frozen``)."""
        simulation = core.simulation
        assert simulation is not None
        # nothing delivered since a clean check of this core: the same state, the same verdict
        if self._clean_at == (simulation, simulation.steps):
            return []
        with simulation.frozen():
            problems = self._check_frozen(core, rms, drivers)
        self._clean_at = None if problems else (simulation, simulation.steps)
        return problems

    def _check_frozen(
        self, core: Core, rms: list[t.RecordingRM], drivers: Sequence[Driver] | None
    ) -> list[str]:
        problems: list[str] = []
        states = []
        usages = {}
        lowered_limits: dict[str, frozenset[str]] = {}
        expected = set()
        for index, rm in enumerate(rms):
            rm_id = f"rm{index}"
            default = normalize_partition_name("default", rm_id)
            expected.add(default)
            driver = drivers[index] if drivers is not None else None
            config = driver.config if driver is not None else ""
            # the RM's spare partition, while its config has it or while it drains (a reload dropped it)
            spare = normalize_partition_name(SPARE_PARTITION, rm_id)
            spare_state = None
            if driver is not None and simulated_checks.live_partition(core, spare) is not None:
                spare_state = simulated_checks.collect_direct(core, spare)
            if spare_state is not None and (has_spare(config) or spare_state.info.state == "Draining"):
                expected.add(spare)
            own = [simulated_checks.collect_direct(core, default), spare_state]
            lowered = frozenset({LOWERED_QUEUE}) if lowers_max(config) else frozenset()
            for state in own:
                if state is None:
                    continue
                states.append(state)
                if self.coverage is not None:
                    self.coverage.state_seen(state)
                usage = usages[state.info.name] = simulated_checks.read_usage(core, state.info.name)
                lowered_limits[state.info.name] = lowered
                # a queue's max lowered under its usage may stay above it (quota preemption ends at
                # the queue's guarantee and rounds down) like one recovered allocations put there
                exempt = simulated_checks.recovered_queues(state) | lowered
                problems.extend(simulated_checks.judge_partition(core, state, rm, usage, exempt))
            present = [state for state in own if state is not None]
            if present:
                problems.extend(invariants.check_rm_view(rm, present))
            if driver is not None:
                driver.other_states = present[1:] if own[0] is not None else present
                problems.extend(p for p in driver.check(own[0]) if p not in problems)
        problems.extend(simulated_checks.check_all(core, states, usages, lowered_limits))
        problems.extend(simulated_checks.check_partitions_gone(core, expected))
        injector: Injector | None = core.simulation.injector if core.simulation is not None else None
        errors = core.tracker.errors - (injector.raised if injector is not None else 0)
        if errors:
            problems.append(f"{errors} actor handler(s) failed (see the log)")
        return problems

    def _faults(self) -> Any:
        run = self

        class _Scope:
            def __enter__(self) -> None:
                faults.disable_all()
                if run.fault:
                    faults.enable(run.fault)

            def __exit__(self, *exc: object) -> None:
                faults.disable_all()

        return _Scope()

    @staticmethod
    def _outcome(
        cores: Cores,
        seed: int,
        schedule_seed: int,
        ops: list[Op],
        violations: list[str],
        drivers: Sequence[ScenarioDriver],
    ) -> SimulatedOutcome:
        core = cores.core
        simulation = core.simulation
        assert simulation is not None
        injector: Injector | None = simulation.injector
        return SimulatedOutcome(
            seed=seed,
            schedule_seed=schedule_seed,
            ops=tuple(ops),
            violations=tuple(violations),
            steps=cores.steps + simulation.steps,
            virtual_seconds=simulation.now,
            callback_records=(*cores.callbacks, *simulation.delivery_trace.callbacks),
            trace=(*cores.trace, *core.trace(full=True)),
            callback_failures=sum(driver.rm.raised + driver.raised_before for driver in drivers),
            handler_failures=cores.raised + (injector.raised if injector is not None else 0),
            batches_cut=cores.cut + (injector.cut if injector is not None else 0),
            restarts=cores.restarts,
        )

    def replay(
        self,
        seed: int,
        ops: list[Op] | tuple[Op, ...],
        *,
        schedule_seed: int | None = None,
        full_trace: bool = False,
    ) -> SimulatedOutcome:
        """Replay recorded operations (and pauses) in the schedule seed's order (default: the seed),
        with every check of a run: the RMs' ledgers (``Driver.check``) are rebuilt from the operations."""
        schedule = seed if schedule_seed is None else schedule_seed
        settings = SeedSettings.of(seed)
        ledgers = [
            ScenarioDriver(
                index,
                0,
                lambda op: None,
                settings=settings,
                env_faults=self.env_faults,
                rm_seed=seed,
                workloads=self.workloads,
            )
            for index in range(self.rm_count)
        ]
        with self._faults():
            cores = Cores(self, schedule, full_trace, settings)
            try:
                # an RM whose initial registration is among the operations registers where it did
                registered = {op.rm for op in ops if op.seq in initial_registrations(ops)}
                for index, ledger in enumerate(ledgers):
                    if index not in registered:
                        request = t.register(ledger.rm_id, ledger.config)  # the scenario's, as a run's
                        cores.core.register_resource_manager(request, ledger.rm)
                violations: list[str] = []
                for op in ops:
                    rms: list[t.RecordingRM] = [ledger.rm for ledger in ledgers]
                    if op.kind == "run":
                        violations = self._run_and_check(cores.core, op.request, rms, ledgers)
                    elif op.kind == "restart":
                        cores.restart()
                    else:
                        if op.kind != "register":
                            learn(ledgers[op.rm], op)
                        try:
                            if op.kind == "recover":  # a fresh callback object (_learn): it keeps live
                                cores.core.register_resource_manager(op.request, ledgers[op.rm].rm)
                            elif op.kind in simulated_workloads.OWN_KINDS:  # reads, an RM leaving
                                violations = simulated_workloads.apply_op(cores.core, op)
                            else:
                                StressRun._apply(cores.core, rms[op.rm], op)
                        except Exception as error:
                            if not op.expect_error:
                                violations = [f"{op.description}: {type(error).__name__}: {error}"]
                        if op.kind == "register":
                            learn(ledgers[op.rm], op)
                    if violations:
                        break
                if not violations:
                    violations = simulated_settle.settle(self, cores.core, ledgers)
                return self._outcome(cores, seed, schedule, list(ops), violations, ledgers)
            finally:
                cores.stop()

    def shrink(
        self,
        seed: int,
        ops: tuple[Op, ...],
        budget: float = 60.0,
        *,
        schedule_seed: int | None = None,
        violation: str | None = None,
    ) -> list[Op]:
        """Delta debugging over the operations, each candidate replayed (every check) with the same
        schedule seed, and kept only when it shows the same violation: ``violation``'s kind and
        subject (``repro.signature``; default: the first violation of the whole replay)."""
        # each RM's initial registration stays where it was (between another RM's first calls, say):
        # the rest is shrunk around them
        pinned_seqs = initial_registrations(ops)
        pinned = [op for op in ops if op.seq in pinned_seqs]
        current = [op for op in ops if op.seq not in pinned_seqs]

        def merged(candidate: list[Op]) -> list[Op]:
            return sorted([*pinned, *candidate], key=lambda op: op.seq)

        if violation is None:
            found = self.replay(seed, merged(current), schedule_seed=schedule_seed).violations
            if not found:
                return merged(current)
            violation = found[0]
        target = violation

        def fails(candidate: list[Op]) -> bool:
            replayed = self.replay(seed, merged(candidate), schedule_seed=schedule_seed)
            return repro.shows(replayed.violations, target)

        if not fails(current):
            return merged(current)
        return merged(delta_debug(current, fails, budget))

    def shrink_case(
        self,
        seed: int,
        ops: tuple[Op, ...],
        violation: str,
        budget: float = 60.0,
        *,
        schedule_seed: int | None = None,
    ) -> ShrunkCase:
        """``shrink``, and then the shortest sequence replayed once more from its operations: a case is
        ``reproduced`` only when that replay shows ``violation``'s kind and subject. When the recorded
        operations replayed do not show it at all (an RM's choice that followed an answer the replay
        does not give, say), ``ops`` is every operation and ``reproduced`` False."""
        schedule = seed if schedule_seed is None else schedule_seed
        minimal = self.shrink(seed, ops, budget, schedule_seed=schedule, violation=violation)
        final = self.replay(seed, minimal, schedule_seed=schedule).violations
        return ShrunkCase(ops=tuple(minimal), reproduced=repro.shows(final, violation), replayed=final)

    def search(
        self,
        seeds: Iterable[int | tuple[int, int]],
        *,
        budget: float | None = 60.0,
        progress: Callable[[int, int], None] | None = None,
    ) -> tuple[SimulatedOutcome | None, int, int]:
        """Run seeds (a workload seed, or a pair: workload seed, schedule seed) until one violates or
        the budget (wall seconds; None: none) is spent.

        Returns the violating outcome (or None), the seeds run and the simulated steps they took: fewer
        seeds than given, with no violation, means the budget ran out."""
        deadline = None if budget is None else time.monotonic() + budget
        count = steps = 0
        for seed in seeds:
            workload, schedule = seed if isinstance(seed, tuple) else (seed, seed)
            outcome = self.run_seed(workload, schedule_seed=schedule)
            count += 1
            steps += outcome.steps
            if progress is not None:
                progress(count, steps)
            if outcome.violations:
                return outcome, count, steps
            if deadline is not None and time.monotonic() >= deadline:
                break
        return None, count, steps
