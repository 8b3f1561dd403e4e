"""Each check of ``korral stress --simulated`` that judges from outside the scheduler catches a
deliberately broken variant, and the same seed on the product's actors shows nothing.

The broken variants are test-only subclasses of product actors, handed to the core through the
harness's fault seam (``korral.harness.faults``) under a name of their own for the test's duration.
All on the virtual clock: nothing depends on the machine's speed.
"""

from __future__ import annotations

from typing import Any

import pytest

from korral import resource as res
from korral.actors.application import ApplicationActor
from korral.actors.messages import CompletingTimeout, RunCycle, ViewOps
from korral.actors.scheduler.actor import SchedulerActor
from korral.harness import faults, faults_planted
from korral.harness.simulated import books as simulated_books
from korral.harness.simulated import liveness as simulated_liveness
from korral.harness.simulated.stress import SimulatedStress
from korral.harness.simulated.workloads import ALL_WORKLOADS, Workloads
from korral.model.view_ops import Forget

SEEDS = 200


pytestmark = pytest.mark.usefixtures("quiet_simulation")


def plant(monkeypatch: pytest.MonkeyPatch, name: str, key: str, actor_class: type) -> None:
    """Make ``name`` a known fault that starts ``actor_class`` as the partition's ``key`` actor."""
    monkeypatch.setitem(faults.KNOWN, name, f"test-only: {actor_class.__doc__}")
    monkeypatch.setitem(faults_planted.CLASSES, name, (key, actor_class))


def first_violation(name: str, wanted: str, workloads: Workloads = ALL_WORKLOADS) -> tuple[int, list[str]]:
    """The first seed whose run with ``name`` planted violates; asserts one of its violations
    contains ``wanted`` and that the same seed on the product's actors is clean."""
    harness = SimulatedStress(rms=2, operations=30, fault=name, workloads=workloads)
    found, _, _ = harness.search(range(1, SEEDS + 1), budget=None)
    assert found is not None, f"{name}: no violation in seeds 1..{SEEDS}"
    assert any(wanted in violation for violation in found.violations), found.violations
    clean = SimulatedStress(rms=2, operations=30, workloads=workloads).run_seed(found.seed)
    assert clean.violations == (), clean.violations
    return found.seed, list(found.violations)


class UserUsageLeaks(SchedulerActor):
    """the scheduler's user/group limit tracker keeps what an owner released (keys ending in 1): usage
    leaks while staying below every limit"""

    def on_ViewOps(self, message: ViewOps) -> None:
        released = [op.allocation for op in message.ops if isinstance(op, Forget)]
        super().on_ViewOps(message)
        tracking = self.view.ugm.apps.get(message.application_id)
        if tracking is None:
            return
        for allocation in released:
            if allocation.allocation_key.endswith("1"):
                for usage in tracking.usages:  # the bug: counted again after its release
                    res.add_into(usage.resource, allocation.resource)


def test_exact_books_catch_a_user_usage_leak_below_every_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    plant(monkeypatch, "user-usage-leaks", "scheduler_actor", UserUsageLeaks)
    # the mix without partition spare and quota preemption: on the first seed of the whole mix that
    # shows the leak, it also blocks work that the liveness check then sees
    workloads = Workloads(quota_preemption=False, partitions=False)
    seed, _ = first_violation("user-usage-leaks", "the scheduler's limit tracker counts", workloads)
    # below the limits: without the exact books, the other checks do not see it on that seed
    monkeypatch.setattr(simulated_books, "check_books", lambda *args, **kwargs: [])
    harness = SimulatedStress(rms=2, operations=30, fault="user-usage-leaks", workloads=workloads)
    assert harness.run_seed(seed).violations == ()


class MemoSaysFitsNowhere(SchedulerActor):
    """the scheduler's walk wrongly remembers every ask whose key ends in 2 as fitting no node (and
    never reserves one for it): those asks stay pending with room for them"""

    def on_RunCycle(self, message: RunCycle) -> None:
        walker: Any = self.view.walker
        if not getattr(walker, "planted", False):
            find_node, try_reserve = walker._find_node, walker._try_reserve

            def wrong_find_node(ask: Any) -> Any:
                return None if ask.allocation_key.endswith("2") else find_node(ask)

            def wrong_try_reserve(app: Any, ask: Any, now: float) -> Any:
                return None if ask.allocation_key.endswith("2") else try_reserve(app, ask, now)

            walker._find_node, walker._try_reserve = wrong_find_node, wrong_try_reserve  # the bug
            walker.planted = True
        super().on_RunCycle(message)


def test_liveness_from_the_published_state_catches_a_memo_that_says_an_ask_fits_nowhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plant(monkeypatch, "memo-fits-nowhere", "scheduler_actor", MemoSaysFitsNowhere)
    seed, _ = first_violation("memo-fits-nowhere", "the reference scheduler loaded with the published")
    # one more cycle of the same scheduler, with the same memo (the check before), does not see it
    monkeypatch.setattr(simulated_liveness, "check_placeable", lambda *args, **kwargs: [])
    assert SimulatedStress(rms=2, operations=30, fault="memo-fits-nowhere").run_seed(seed).violations == ()


class CompletingTimeoutLost(ApplicationActor):
    """an application whose id ends in 3 ignores its completing timeout: it stays Completing"""

    def on_CompletingTimeout(self, message: CompletingTimeout) -> None:
        if self.owner.app.application_id.endswith("3"):
            return  # the bug
        super().on_CompletingTimeout(message)


def test_timed_states_catch_an_application_left_completing(monkeypatch: pytest.MonkeyPatch) -> None:
    plant(monkeypatch, "completing-timeout-lost", "application_actor", CompletingTimeoutLost)
    seed, _ = first_violation("completing-timeout-lost", "still Completing with its completing timeout")
    monkeypatch.setattr(simulated_liveness, "check_timed_states", lambda *args, **kwargs: [])
    assert (
        SimulatedStress(rms=2, operations=30, fault="completing-timeout-lost").run_seed(seed).violations == ()
    )
