"""Property-based fuzzing of the SI: random sequences of operations from two hostile RMs.

Each example starts a core, registers two RMs and runs a hypothesis-chosen list of steps: one RM's
operation (nodes added / updated / drained / decommissioned, applications added / removed, asks added /
updated / released, allocations released, config reloads valid and invalid, re-registration), invalid
and extreme items (wrong types, None among the items, quantities 2**63-1, 2**64, floats, bools, strings),
wrong message types, names into the other RM's namespace, both RMs at once from two threads, and core
restarts with recovery (stop, start a new core, re-register, re-add applications, re-add nodes with the
allocations the RM believes live). At every restart and at the end it checks ``korral.harness.invariants``
plus what the RMs were told: every accepted ask is pending, allocated, released or rejected; every invalid
item was rejected with a reason; no uuid is booked twice or told twice; each RM's view equals the core's;
neither RM ever hears of the other's objects.

Profiles: ``ci`` (default: derandomized, no example database, bounded to well under a minute) and
``long`` for local runs: ``KORRAL_FUZZ_PROFILE=long pytest tests/core/test_fuzz.py``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import korral
from korral.harness import faults, invariants
from korral.harness.stress import SETTINGS, HostileDriver, StressRun, Violation

PROFILES = {
    "ci": settings(
        max_examples=50,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=True,
    ),
    "long": settings(
        max_examples=400,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=True,
    ),
}
PROFILE = PROFILES[os.environ.get("KORRAL_FUZZ_PROFILE", "ci")]
MAX_STEPS = 40 if os.environ.get("KORRAL_FUZZ_PROFILE") == "long" else 24

# operation -> weight (repeated in the sampled list): building blocks more often than the rest
OPERATIONS = {
    "_create_nodes": 3,
    "_update_node": 1,
    "_drain_node": 1,
    "_decommission_node": 1,
    "_add_app": 3,
    "_remove_app": 1,
    "_add_asks": 4,
    "_update_ask": 1,
    "_release_asks": 1,
    "_release_allocation": 3,
    "_release_app_allocations": 1,
    "_reload_config": 1,
    "_reload_invalid_config": 1,
    "_add_bad_asks": 2,
    "_create_bad_nodes": 2,
    "_add_bad_apps": 2,
    "_add_extreme_asks": 1,
    "_create_extreme_node": 1,
    "_wrong_message_type": 1,
    "_name_into_another_rm": 1,
    "_recover_onto_new_node": 2,
    "_reach_into_another_rm": 1,
    "register": 1,
}
WEIGHTED = [name for name, weight in OPERATIONS.items() for _ in range(weight)]

operation = st.sampled_from(WEIGHTED)
seed = st.integers(min_value=0, max_value=2**16)
step = st.one_of(
    st.tuples(st.just("op"), st.integers(0, 1), operation, seed),
    st.tuples(st.just("both"), operation, operation, seed),
    st.tuples(st.just("restart")),
)
steps = st.lists(step, min_size=1, max_size=MAX_STEPS)


@pytest.fixture(autouse=True)
def quiet_callbacks() -> Iterator[None]:
    # rm1's callbacks raise on purpose now and then (and are sometimes slow); korral contains each one
    logger = logging.getLogger("korral.callbacks")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def _perform(driver: HostileDriver, core: korral.Core, name: str, op_seed: int, errors: list[str]) -> None:
    try:
        driver.perform(core, name, op_seed)
    except Violation as violation:
        errors.append(str(violation))
    except Exception as error:  # an SI call the core should have taken (or answered by callback)
        errors.append(f"{driver.rm_id} {name}: {type(error).__name__}: {error}")


def run_steps(plan: list[tuple]) -> list[str]:
    """Run the plan on a fresh core; the violations found (empty: every property held)."""
    run = StressRun(rms=2, duration=0.0, seed=1)
    record = run._record
    drivers = [
        HostileDriver(0, 1, record, misbehave=False, rm_count=2),
        HostileDriver(1, 1, record, misbehave=True, slow=True, rm_count=2),
    ]
    core = korral.start(**SETTINGS, **faults.start_options())
    try:
        for driver in drivers:
            driver.register(core)
        for item in plan:
            errors: list[str] = []
            if item[0] == "op":
                _, rm, name, op_seed = item
                _perform(drivers[rm], core, name, op_seed, errors)
            elif item[0] == "both":
                _, first, second, op_seed = item
                threads = [
                    threading.Thread(target=_perform, args=(driver, core, name, op_seed, errors))
                    for driver, name in zip(drivers, (first, second), strict=True)
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join(timeout=60.0)
            else:
                errors.extend(run._checkpoint(core, drivers))
                if not errors:
                    core, restart_problems = run._restart(core, drivers)
                    errors.extend(restart_problems)
            if errors:
                return [f"step {item}: {error}" for error in errors]
            # the next step's choices (which allocation to release) read what the RM was told
            try:
                core.wait_until_idle(timeout=60.0)
            except TimeoutError as error:
                return [f"step {item}: no progress (deadlock watchdog): {error}"]
        return run._checkpoint(core, drivers)
    finally:
        core.stop()


def _explain(problems: list[str]) -> str:
    return "\n".join(problems[:20])


@pytest.mark.no_cover  # a long run over code other tests cover (pyproject.toml: no_cover)
@pytest.mark.slow
@pytest.mark.timeout(300)
@PROFILE
@given(plan=steps)
def test_two_hostile_rms_never_lose_cross_or_double_book(plan: list[tuple]) -> None:
    problems = run_steps(plan)
    assert problems == [], _explain(problems)


def test_the_invariants_see_a_uuid_booked_twice() -> None:
    """The duplicate check itself can fail: the same allocation on two applications is reported."""
    with korral.start(**SETTINGS, **faults.start_options()) as core:
        run = StressRun(rms=1, duration=0.0, seed=1)
        driver = HostileDriver(0, 1, run._record, misbehave=False, rm_count=1)
        driver.register(core)
        driver.perform(core, "_create_nodes", 1)
        driver.perform(core, "_add_app", 1)
        driver.perform(core, "_add_asks", 1)
        core.wait_until_idle()
        state = invariants.stable_collect(core, driver.partition)
    assert state is not None and state.applications and state.applications[0].allocations
    assert invariants.check_unique_uuids([state]) == []
    assert invariants.check_unique_uuids([state, state]) != []


@pytest.mark.timeout(300)
def test_the_fuzz_catches_an_injected_fault() -> None:
    """The property can fail: with a node that keeps released allocations, a short plan is caught."""
    plan: list[tuple] = [
        ("op", 0, "_create_nodes", 1),
        *[("op", 0, "_create_nodes", s) for s in range(2, 8)],
        ("op", 0, "_add_app", 3),
        *[("op", 0, "_add_asks", s) for s in range(8)],
        ("op", 0, "_release_app_allocations", 4),
    ]
    faults.enable("node-keeps-released")
    try:
        problems = run_steps(plan)
    finally:
        faults.disable_all()
    assert any("has no application" in p or "on no node" in p for p in problems), problems
