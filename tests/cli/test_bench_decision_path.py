"""bench/decision_path.py: the decision stage alone, counted on a small YuniKorn shape."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "decision_path.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("decision_path", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bytecodes_are_counted_per_allocation_and_by_the_walks_functions() -> None:
    per_allocation, functions = load().bytecodes(10, 200)
    names = [name for name, _ in functions]
    assert per_allocation > 100  # a cycle runs hundreds of bytecodes, whatever the machine
    assert any(name.endswith(":commit") for name in names)  # the booking is counted with the walk
    assert any(name.endswith(":_try_app") for name in names)


def test_cpu_per_allocation_is_measured_over_every_allocation() -> None:
    assert load().cpu_per_allocation(10, 200) > 0


def test_a_whole_runs_bytecodes_are_counted_by_stage_in_the_benchs_window_only() -> None:
    from korral.actors.timing import HandlerTiming

    start, stop = HandlerTiming.start, HandlerTiming.stop
    per_allocation, stages, functions = load().whole_bytecodes(10, 200)
    assert {"intake", "decision", "confirmation"} <= set(stages)
    assert per_allocation >= sum(stages[name] for name in ("intake", "decision", "confirmation")) > 300
    names = [name for name, _ in functions]
    assert any(name.startswith("decision") and name.endswith(":commit") for name in names)
    assert any(name.startswith("confirmation") and name.endswith(":confirm") for name in names)
    # the window's hooks are gone with the run: nothing else in the process counts or is slowed
    assert (HandlerTiming.start, HandlerTiming.stop) == (start, stop)
