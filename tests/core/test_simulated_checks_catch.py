"""Each check of ``korral stress --simulated`` that judges from outside the scheduler catches a
deliberately broken variant, and the same seed on the product's actors shows nothing.

The broken variants are test-only subclasses of product actors, handed to the core through the
harness's fault seam (``korral.harness.faults``) under a name of their own for the test's duration.
All on the virtual clock: nothing depends on the machine's speed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from korral.actors.messages import ViewOps
from korral.actors.scheduler import SchedulerActor
from korral.harness import faults, faults_planted
from korral.harness.stress_simulated import SimulatedStress
from korral.model import resource as res
from korral.model.view_ops import Forget

SEEDS = 200


@pytest.fixture(autouse=True)
def _quiet_and_clean() -> Iterator[None]:
    level = logging.getLogger("korral").level
    logging.getLogger("korral").setLevel(logging.CRITICAL)
    yield
    logging.getLogger("korral").setLevel(level)
    faults.disable_all()


def plant(monkeypatch: pytest.MonkeyPatch, name: str, key: str, actor_class: type) -> None:
    """Make ``name`` a known fault that starts ``actor_class`` as the partition's ``key`` actor."""
    monkeypatch.setitem(faults.KNOWN, name, f"test-only: {actor_class.__doc__}")
    monkeypatch.setitem(faults_planted.CLASSES, name, (key, actor_class))


def first_violation(name: str, wanted: str) -> tuple[int, list[str]]:
    """The first seed whose run with ``name`` planted violates; asserts one of its violations
    contains ``wanted`` and that the same seed on the product's actors is clean."""
    found, _, _ = SimulatedStress(rms=2, operations=30, fault=name).search(range(1, SEEDS + 1), budget=None)
    assert found is not None, f"{name}: no violation in seeds 1..{SEEDS}"
    assert any(wanted in violation for violation in found.violations), found.violations
    clean = SimulatedStress(rms=2, operations=30).run_seed(found.seed)
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
    _, violations = first_violation("user-usage-leaks", "the scheduler's limit tracker counts")
    # below the limits: the check of usage above a max alone would not have seen it
    assert not any("above its maxresources" in violation for violation in violations)
