"""The decision stage alone: the sequential reference's scheduling cycles on YuniKorn's shape.

The scheduler actor's view decides with the same model code (``SchedulingView`` is a ``PartitionModel``),
so this is the cost the decision stage of ``korral bench`` pays per allocation, without the actors
around it. Three measures, the last two independent of how loaded the machine is:

    python bench/decision_path.py [--nodes 1000] [--asks 10000] [--repeat 5]   # CPU µs per allocation
    python bench/decision_path.py --bytecodes        # bytecodes per allocation, by function
    python bench/decision_path.py --callgrind        # machine instructions per allocation (valgrind)

With ``--whole`` the last two measure a whole ``korral bench`` run instead (the actors, every thread,
from the asks' submission to the last allocation's arrival at the RM, the bench's window): bytecodes
per allocation by stage (the handler each ran under, grouped as the bench's stage timers group them)
and by function, or the window's machine instructions per allocation.

``--callgrind`` needs valgrind, gcc and valgrind's headers: it builds a two-function helper that starts
callgrind's counting when the cycles start and stops it when they end, then runs itself under
valgrind. Run it from a checkout whose ``korral`` is the code to measure (each worktree's own venv).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import gc
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

from korral.actors.timing import HandlerTiming
from korral.harness.benchmark.runner import STAGES, reference_with_asks, run_korral
from korral.harness.benchmark.workloads import yunikorn
from korral.harness.reference import ReferenceScheduler


def _ready(nodes: int, asks: int) -> ReferenceScheduler:
    """The reference with the nodes, applications and asks in, and the collector's passes over them done."""
    reference, _ = reference_with_asks(yunikorn(nodes, asks))
    gc.collect()
    return reference


def _cycles(reference: ReferenceScheduler) -> int:
    made = 0
    while batch := reference.schedule(1000):
        made += len(batch)
    return made


def cpu_per_allocation(nodes: int, asks: int) -> float:
    reference = _ready(nodes, asks)
    started = time.process_time()
    made = _cycles(reference)
    return (time.process_time() - started) * 1e6 / max(made, 1)


def bytecodes(nodes: int, asks: int) -> tuple[float, list[tuple[str, float]]]:
    """Bytecodes per allocation, and the functions that ran them (most first)."""
    reference = _ready(nodes, asks)
    counts: collections.Counter[str] = collections.Counter()

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            counts[f"{code.co_filename.rsplit('korral/', 1)[-1]}:{code.co_name}"] += 1
        return tracer

    sys.settrace(tracer)
    try:
        made = max(_cycles(reference), 1)
    finally:
        sys.settrace(None)
    return sum(counts.values()) / made, [(name, count / made) for name, count in counts.most_common(20)]


@contextlib.contextmanager
def _in_window(begin: Any, end: Any) -> Iterator[None]:
    """Call ``begin`` when the bench's window opens (its handler timing starts) and ``end`` when it
    closes, while in the block: the timing brackets exactly the span the bench's clock and stage
    timers cover."""
    start, stop = HandlerTiming.start, HandlerTiming.stop

    def started(self: HandlerTiming) -> None:
        start(self)
        begin()

    def stopped(self: HandlerTiming) -> dict[str, float]:
        end()
        return stop(self)

    HandlerTiming.start, HandlerTiming.stop = started, stopped  # type: ignore[method-assign]
    try:
        yield
    finally:
        HandlerTiming.start, HandlerTiming.stop = start, stop  # type: ignore[method-assign]


# handler (on_<message type>) -> the bench's stage; the thread that submits the asks pays intake, and
# the scheduler takes a bundle's new asks in one call (timed as ViewOps)
_STAGE_OF = {f"on_{name}": stage for stage, names in STAGES.items() for name in names}
_STAGE_OF["_put_new_asks"] = _STAGE_OF["update_allocation"] = "intake"


def _stage_of(frame: FrameType | None) -> str:
    """The stage of the handler this frame runs under (the nearest ``on_X`` below it)."""
    while frame is not None:
        name = frame.f_code.co_name
        stage = _STAGE_OF.get(name)
        if stage is not None:
            return stage
        if name.startswith("on_") and name[3:4].isupper():
            return "other handlers"
        frame = frame.f_back
    return "plumbing"


def whole_bytecodes(nodes: int, asks: int) -> tuple[float, dict[str, float], list[tuple[str, float]]]:
    """A whole korral run's bytecodes per allocation, by stage and by (stage, function), every thread."""
    counting = [False]
    by_stage: collections.Counter[str] = collections.Counter()
    by_function: collections.Counter[str] = collections.Counter()
    counters: dict[str, Any] = {}

    def counter(stage: str) -> Any:
        def count(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode":
                by_stage[stage] += 1
                code = frame.f_code
                by_function[f"{stage:<12} {code.co_filename.rsplit('korral/', 1)[-1]}:{code.co_name}"] += 1
            return count

        return counters.setdefault(stage, count)

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if not counting[0] or event != "call":
            return None
        frame.f_trace_opcodes = True
        stage = _stage_of(frame)
        return counters.get(stage) or counter(stage)

    with _in_window(lambda: counting.__setitem__(0, True), lambda: counting.__setitem__(0, False)):
        threading.settrace(tracer)  # the core's threads start after this (and count only in the window)
        sys.settrace(tracer)
        try:
            made = max(run_korral(yunikorn(nodes, asks)).allocations, 1)
        finally:
            sys.settrace(None)
            threading.settrace(None)  # type: ignore[arg-type]
    stages = {stage: count / made for stage, count in by_stage.most_common()}
    return sum(by_stage.values()) / made, stages, [(n, c / made) for n, c in by_function.most_common(30)]


def callgrind(nodes: int, asks: int, whole: bool = False) -> int:
    """Run this script under callgrind around the cycles only; the instructions per allocation."""
    from callgrind_window import count_window  # bench/ is the script's directory: on sys.path

    arguments = ["--nodes", str(nodes), "--asks", str(asks), *(["--whole"] if whole else [])]
    return count_window(__file__, arguments)[0] // asks


def _under_callgrind(library: str, nodes: int, asks: int, whole: bool) -> None:
    toggle = ctypes.CDLL(library)
    if whole:
        with _in_window(toggle.cg_start, toggle.cg_stop):
            run_korral(yunikorn(nodes, asks))
        return
    reference = _ready(nodes, asks)
    toggle.cg_start()
    _cycles(reference)
    toggle.cg_stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--asks", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5, help="fresh runs for the CPU time (median)")
    parser.add_argument("--bytecodes", action="store_true")
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--whole", action="store_true", help="a whole korral run, not the cycles alone")
    parser.add_argument("--under-callgrind", metavar="LIBRARY", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.under_callgrind:
        _under_callgrind(args.under_callgrind, args.nodes, args.asks, args.whole)
    elif args.callgrind:
        print(f"instructions per allocation: {callgrind(args.nodes, args.asks, args.whole):,}")
    elif args.bytecodes and args.whole:
        total, stages, functions = whole_bytecodes(args.nodes, args.asks)
        print(f"bytecodes per allocation, whole run: {total:,.0f}")
        print("  " + ", ".join(f"{stage} {count:,.0f}" for stage, count in stages.items()))
        for name, count in functions:
            print(f"{count:8.1f}  {name}")
    elif args.bytecodes:
        total, functions = bytecodes(args.nodes, args.asks)
        print(f"bytecodes per allocation: {total:,.0f}")
        for name, count in functions:
            print(f"{count:8.1f}  {name}")
    else:
        runs = [cpu_per_allocation(args.nodes, args.asks) for _ in range(args.repeat)]
        print(
            f"decision CPU per allocation: median {statistics.median(runs):.2f} µs "
            f"(min {min(runs):.2f}, max {max(runs):.2f}, {len(runs)} runs)"
        )


if __name__ == "__main__":
    main()
