"""The end of a ``korral stress --simulated`` run: the final settle and what is judged after it.

The core settles (the clock past the delays scheduling serves, then past every pending deadline) and
is checked; the RMs confirm every release the core made and send nothing else while the clock moves
past every deadline again, and the books are checked once more; a partition a reload dropped must be
gone; then liveness from the published state (``simulated.liveness``) and, last since it changes the
state, one more cycle of each scheduler (``simulated.checks.check_stuck_work``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from korral import testing as t
from korral.actors.simulated import SimulationError
from korral.core import Core
from korral.harness.simulated import checks as simulated_checks
from korral.harness.simulated import liveness as simulated_liveness
from korral.harness.simulated.scenarios import ScenarioDriver, SeedSettings
from korral.harness.simulated.workloads import BACKOFF_DELAY, SPARE_PARTITION
from korral.model.naming import normalize_partition_name

if TYPE_CHECKING:
    from korral.harness.simulated.stress import SimulatedStress


def settle(stress: SimulatedStress, core: Core, drivers: Sequence[ScenarioDriver]) -> list[str]:
    """The end of a run: settle, check, quiet the RMs (``quiet_past_deadlines``), and then look for
    stuck work from the published state and with one more cycle of each scheduler."""
    rms: list[t.RecordingRM] = [driver.rm for driver in drivers]
    try:
        past_deadlines(core, drivers)
    except SimulationError as error:
        return [f"livelock: {error}"]
    violations = stress._check(core, rms, drivers)
    if violations:
        return violations
    violations = quiet_past_deadlines(stress, core, rms, drivers)
    if violations:
        return violations
    violations = simulated_liveness.check_drained_partitions_gone(core, drivers)
    if violations:
        return violations
    # from the published state; then the scheduler's own belief and one more of its cycles
    # (which changes the state: last)
    spares = [normalize_partition_name(SPARE_PARTITION, driver.rm_id) for driver in drivers]
    partitions = [driver.partition for driver in drivers] + spares
    return liveness(core, drivers) + simulated_checks.check_stuck_work(core, partitions)


def quiet_past_deadlines(
    stress: SimulatedStress, core: Core, rms: list[t.RecordingRM], drivers: Sequence[ScenarioDriver]
) -> list[str]:
    """The RMs confirm every release the core made (as a shim does once the containers stopped)
    and send nothing else; the clock moves past every deadline (``simulated.liveness``), and
    the books are checked again."""
    for _ in range(8):
        sent = [(d, request) for d in drivers if (request := d.rm.take_confirmations()) is not None]
        for driver, request in sent:
            if stress.coverage is not None:  # SI operations too, though not recorded
                stress.coverage.operation("allocations", request, "final confirmation")
            try:
                core.update_allocation(request)
            except Exception as error:
                return [f"{driver.rm_id}: final confirmation: {type(error).__name__}: {error}"]
        try:
            simulated_liveness.advance_past_deadlines(core)
            if not sent:
                past_deadlines(core, drivers)
        except SimulationError as error:
            return [f"livelock: {error}"]
        if not sent and not any(d.rm.to_confirm for d in drivers):
            break
    return stress._check(core, rms, drivers)


def liveness(core: Core, drivers: Sequence[ScenarioDriver]) -> list[str]:
    """With the RMs quiet and every deadline past, from the published state alone: nothing could
    be placed now, and no application is in a state time should have ended."""
    simulation = core.simulation
    assert simulation is not None
    violations: list[str] = []
    settings = drivers[0].settings if drivers else SeedSettings()
    timeouts = {"completing": settings.completing_timeout, "placeholder": settings.placeholder_timeout}
    with simulation.frozen():
        for driver in drivers:
            state = simulated_checks.collect_direct(core, driver.partition)
            if state is None:
                continue
            violations.extend(simulated_liveness.check_timed_states(state, simulation.now, timeouts))
            violations.extend(
                simulated_liveness.check_placeable(
                    state, driver.config, driver.rm_id, simulation.now, driver.app_requests
                )
            )
    return violations


def past_deadlines(core: Core, drivers: Sequence[ScenarioDriver]) -> None:
    """The clock jumps past the delays a seed sets (the reservation delay, root.b's backoff) and a
    few scheduling intervals more, every periodic timer firing once, and then past every pending
    deadline (``simulated.liveness.advance_past_deadlines``). Each of those delays has a timer of its
    own (the scheduler's ``DeadlineDue``): ticking through them one interval at a time, as ``advance``
    does, ran a scheduling cycle per tick that could change nothing."""
    simulation = core.simulation
    assert simulation is not None
    settings = drivers[0].settings if drivers else SeedSettings()
    simulation.jump(max(settings.reservation_delay, BACKOFF_DELAY) + 3 * settings.scheduling_interval)
    simulated_liveness.advance_past_deadlines(core)
