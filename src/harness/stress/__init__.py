"""``korral stress``: simulated RMs on threads hammering one core with random SI operations.

Each RM has its own configuration, nodes and applications and issues a seeded stream of operations:
node create / update / drain / decommission, application add / remove, asks added, updated and
released, allocations released, configuration reloads (valid and invalid), re-registration, and a
callback that sometimes raises or is slow. Every ``checkpoint`` seconds all RMs pause, the core is
waited on (a watchdog: no progress in time is a deadlock), and the invariants of
``korral.harness.invariants`` are checked, plus per-RM ones: every ask is pending, allocated, released or
rejected; no RM ever saw another RM's allocation.

The RMs are hostile (``HostileDriver``): they also send wrong-typed and extreme items, wrong message
types and names into another RM's namespace (each must be rejected with a reason), re-register with a
fresh callback object (the old one must hear nothing more), one has slow callbacks, and every fourth
checkpoint the core is restarted and each RM recovers exactly what it believes live. ``soak``
(``korral.harness.soak``) runs application cycles beside a never-idle second RM and samples RSS,
threads and live actors.

On a violation the run stops, prints the seed, and shrinks the recorded operations (delta debugging,
replaying them one at a time on a fresh core) to the shortest sequence that still shows it. The run's
memory does not grow with its length: the operations spill to disk, each RM keeps the records of its
live registration only, and the run judges its own RSS and threads (``flatness``).
"""

# One module per job (common: settings and records; driver; run: the threaded mode and its shrinking;
# hostile_rm and hostile; preemption.setup, preemption.driver and preemption): everything importable
# from here as before.
from __future__ import annotations

from typing import Any

from korral.harness.stress.common import (
    A_USER_LIMITS,
    INVALID_CONFIG,
    LIMITED_GROUPS,
    REPRODUCTIONS,
    ROOT_USER_LIMITS,
    SETTINGS,
    SIMULATED_SETTLE,
    USERS,
    Op,
    ReplayRM,
    StressRM,
    Violation,
    rm_config,
)
from korral.harness.stress.driver import Driver
from korral.harness.stress.hostile import HostileDriver
from korral.harness.stress.hostile_rm import (
    BAD_QUANTITIES,
    EXTREME_QUANTITIES,
    REJECTION_ERRORS,
    SHADOW_CONFIG,
    HostileRM,
    UuidLedger,
)
from korral.harness.stress.preemption.driver import PreemptionDriver
from korral.harness.stress.preemption.run import PreemptionResult, PreemptionStress
from korral.harness.stress.preemption.setup import (
    BORROWER_QUEUES,
    DAEMON_QUEUE,
    FINISHED_STATES,
    OUTSTANDING_LIMITS,
    PREEMPTION_DELAY,
    PREEMPTION_LAWS,
    PREEMPTION_NODE,
    PREEMPTION_NODES,
    PREEMPTION_OFFSETS,
    PREEMPTOR_GRACE,
    PREEMPTOR_GUARANTEES,
    PREEMPTOR_QUEUES,
    QUOTA_MESSAGE,
    QUOTA_QUEUE,
    SHRINK_MAX,
    PreemptionRM,
    PreemptionWindow,
    effective_priority,
    preemption_config,
)
from korral.harness.stress.run import StressResult, StressRun, core_release_counts, delta_debug

__all__ = [
    "A_USER_LIMITS",
    "BAD_QUANTITIES",
    "BORROWER_QUEUES",
    "DAEMON_QUEUE",
    "EXTREME_QUANTITIES",
    "FINISHED_STATES",
    "INVALID_CONFIG",
    "LIMITED_GROUPS",
    "OUTSTANDING_LIMITS",
    "PREEMPTION_DELAY",
    "PREEMPTION_LAWS",
    "PREEMPTION_NODE",
    "PREEMPTION_NODES",
    "PREEMPTION_OFFSETS",
    "PREEMPTOR_GRACE",
    "PREEMPTOR_GUARANTEES",
    "PREEMPTOR_QUEUES",
    "QUOTA_MESSAGE",
    "QUOTA_QUEUE",
    "REJECTION_ERRORS",
    "REPRODUCTIONS",
    "ROOT_USER_LIMITS",
    "SETTINGS",
    "SHADOW_CONFIG",
    "SHRINK_MAX",
    "SIMULATED_SETTLE",
    "USERS",
    "Driver",
    "HostileDriver",
    "HostileRM",
    "Op",
    "PreemptionDriver",
    "PreemptionRM",
    "PreemptionResult",
    "PreemptionStress",
    "PreemptionWindow",
    "ReplayRM",
    "StressRM",
    "StressResult",
    "StressRun",
    "UuidLedger",
    "Violation",
    "core_release_counts",
    "delta_debug",
    "effective_priority",
    "preemption_config",
    "rm_config",
]


def __getattr__(name: str) -> Any:
    """``SimulatedStress`` and ``SimulatedOutcome`` live in ``korral.harness.simulated.stress`` (which
    imports this module); still importable from here."""
    if name in ("SimulatedStress", "SimulatedOutcome"):
        from korral.harness.simulated import stress as stress_simulated

        return getattr(stress_simulated, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
