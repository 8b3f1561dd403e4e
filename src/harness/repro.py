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

from korral import si
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
    deep_queues: bool = True,
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
        "from korral.harness.simulated.workloads import Workloads  # noqa: F401",
        "from korral.harness.simulated.stress import SimulatedStress",
        "",
        "OPS = [",
    ]
    lines += _op_lines(ops)
    lines += [
        "]",
        "",
        "",
        f"def test_stress_simulated_seed_{_name(seed)}_schedule_{_name(schedule_seed)}() -> None:",
        _harness_line(rms, operations, fault, perturb, explore, env_faults, deep_queues),
        f"    outcome = harness.replay({seed}, OPS, schedule_seed={schedule_seed})",
        f"    assert not repro.shows(outcome.violations, {violation!r}), outcome.violations",
        "",
    ]
    return "\n".join(lines)


def _op_lines(ops: Iterable[Op]) -> list[str]:
    """Each recorded operation as a line of the printed case's ``OPS`` list."""
    lines = []
    for op in ops:
        expect = ", expect_error=True" if op.expect_error else ""
        lines.append(
            f"    Op(seq={op.seq}, rm={op.rm}, kind={op.kind!r}, request={python(op.request)}, "
            f"description={op.description!r}{expect}),"
        )
    return lines


def _harness_line(
    rms: int,
    operations: int,
    fault: str | None,
    perturb: bool,
    explore: str,
    env_faults: frozenset[str] | None,
    deep_queues: bool,
) -> str:
    """The printed case's ``SimulatedStress(...)``: the settings that differ from its defaults."""
    return (
        f"    harness = SimulatedStress(rms={rms}, operations={operations}, fault={fault!r}, "
        f"perturb={perturb!r}"
        + ("" if explore == "uniform" else f", explore={explore!r}")
        + ("" if env_faults is None else f", env_faults=frozenset({sorted(env_faults)!r})")
        + ("" if deep_queues else ", workloads=Workloads(deep_queues=False)")
        + ")"
    )


def _name(seed: int) -> str:
    return str(seed).replace("-", "minus")


def seed_pytest_case(
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
    deep_queues: bool = True,
) -> str:
    """A test module that runs the seed itself (its workload and schedule seeds): it fails while
    ``violation`` shows. For a violation its recorded operations replayed do not show."""
    return "\n".join(
        [
            f'"""korral stress --simulated --seed {seed} --schedule-seed {schedule_seed}, run as a seed:',
            f"fails while {violation!r} shows (its kind and subject: korral.harness.repro.signature).",
            '"""',
            "",
            "from korral.harness import repro",
            "from korral.harness.simulated.workloads import Workloads  # noqa: F401",
            "from korral.harness.simulated.stress import SimulatedStress",
            "",
            "",
            f"def test_stress_simulated_seed_{_name(seed)}_schedule_{_name(schedule_seed)}() -> None:",
            _harness_line(rms, operations, fault, perturb, explore, env_faults, deep_queues),
            f"    outcome = harness.run_seed({seed}, schedule_seed={schedule_seed})",
            f"    assert not repro.shows(outcome.violations, {violation!r}), outcome.violations",
            "",
        ]
    )


def threaded_pytest_case(
    ops: Iterable[Op], *, seed: int, rms: int, fault: str | None, recorded_keys: dict[str, tuple[str, str]]
) -> str:
    """A test module replaying the threaded stress's shrunk ``ops`` one at a time on a fresh core (as
    ``StressRun.replay`` does): it fails while the replay shows a violation."""
    ops = list(ops)
    named = {
        release.uuid
        for op in ops
        if isinstance(op.request, si.AllocationRequest) and op.request.releases is not None
        for release in op.request.releases.allocations_to_release
        if isinstance(release, si.AllocationRelease)
    }
    keys = {uuid: recorded_keys[uuid] for uuid in sorted(named) if uuid in recorded_keys}
    lines = [
        f'"""korral stress --seed {seed} --rms {rms}'
        + (f" --inject-fault {fault}" if fault else "")
        + ", shrunk:",
        "fails while replaying its operations shows a violation.",
        '"""',
        "",
        "from korral import si",
        "from korral.harness.stress import Op, StressRun",
        "",
        f"RECORDED_KEYS = {python(keys)}  # uuid -> (application, allocation key), as the run told them",
        "OPS = [",
    ]
    lines += _op_lines(ops)
    lines += [
        "]",
        "",
        "",
        f"def test_stress_seed_{_name(seed)}() -> None:",
        f"    run = StressRun({rms}, 1.0, {seed}, fault={fault!r})",
        "    run.recorded_keys = dict(RECORDED_KEYS)",
        "    violations = run.replay(OPS)",
        "    assert violations == [], violations",
        "",
    ]
    return "\n".join(lines)
