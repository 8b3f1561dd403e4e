"""What a violation is, apart from the run that found it, and a shrunk run as a pytest case.

``signature``: a violation's kind and subject (the application, ask, node or queue it names) without
what a shorter run renumbers or resizes (allocation uuids, resource amounts): shrinking keeps a
candidate only when it shows the same signature, not just some violation. ``pytest_case``: the
operations of a shrunk run as a self-contained test that replays them and fails while the bug is
there.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from typing import Any

import attrs

from korral.harness.stress import Op

# an allocation uuid: "[rm0]default-" (its partition), a token, a counter
_UUID = re.compile(r"\[[^\]]*\][\w.-]*?-[0-9a-f]{8}-\d+")
_RESOURCE = re.compile(r"\{[^{}]*\}")


def signature(violation: str) -> str:
    """The violation's kind and subject: its text with allocation uuids and resources masked."""
    return _RESOURCE.sub("{...}", _UUID.sub("<uuid>", violation))


def shows(violations: Iterable[str], target: str) -> bool:
    """Whether ``violations`` hold one with ``target``'s signature."""
    wanted = signature(target)
    return any(signature(violation) == wanted for violation in violations)


def _default(field: Any) -> Any:
    default = field.default
    return default.factory() if isinstance(default, attrs.Factory) else default  # type: ignore[arg-type]


def python(value: Any) -> str:
    """Source that evaluates to ``value``: SI messages as ``si.Name(field=...)``, enums by name."""
    if isinstance(value, enum.Enum):
        return f"si.{type(value).__name__}.{value.name}"
    if attrs.has(type(value)):
        fields = ", ".join(
            f"{field.name}={python(getattr(value, field.name))}"
            for field in attrs.fields(type(value))
            if getattr(value, field.name) != _default(field)
        )
        return f"si.{type(value).__name__}({fields})"
    if isinstance(value, list):
        return "[" + ", ".join(python(item) for item in value) + "]"
    if isinstance(value, tuple):
        return "(" + "".join(f"{python(item)}, " for item in value) + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{python(k)}: {python(v)}" for k, v in value.items()) + "}"
    return repr(value)


def pytest_case(
    ops: Iterable[Op],
    *,
    seed: int,
    schedule_seed: int,
    rms: int,
    operations: int,
    fault: str | None,
    perturb: bool,
    violation: str,
    explore: str = "uniform",
    env_faults: frozenset[str] | None = None,
) -> str:
    """A test module replaying ``ops`` with the schedule seed: it fails while ``violation`` shows."""
    lines = [
        f'"""korral stress --simulated --seed {seed} --schedule-seed {schedule_seed}, shrunk: fails while',
        f"{violation!r} shows (its kind and subject: korral.harness.repro.signature).",
        '"""',
        "",
        "from korral import si",
        "from korral.harness import repro",
        "from korral.harness.stress import Op",
        "from korral.harness.stress_simulated import SimulatedStress",
        "",
        "OPS = [",
    ]
    for op in ops:
        expect = ", expect_error=True" if op.expect_error else ""
        lines.append(
            f"    Op(seq={op.seq}, rm={op.rm}, kind={op.kind!r}, request={python(op.request)}, "
            f"description={op.description!r}{expect}),"
        )
    lines += [
        "]",
        "",
        "",
        f"def test_stress_simulated_seed_{_name(seed)}_schedule_{_name(schedule_seed)}() -> None:",
        f"    harness = SimulatedStress(rms={rms}, operations={operations}, fault={fault!r}, "
        f"perturb={perturb!r}"
        + ("" if explore == "uniform" else f", explore={explore!r}")
        + ("" if env_faults is None else f", env_faults=frozenset({sorted(env_faults)!r})")
        + ")",
        f"    outcome = harness.replay({seed}, OPS, schedule_seed={schedule_seed})",
        f"    assert not repro.shows(outcome.violations, {violation!r}), outcome.violations",
        "",
    ]
    return "\n".join(lines)


def _name(seed: int) -> str:
    return str(seed).replace("-", "minus")
