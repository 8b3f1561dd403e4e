"""A stress run's operation log keeps a long run's operations on disk, in order, for its replay."""

from __future__ import annotations

import tracemalloc

from korral import testing as t
from korral.harness.stress.common import Op, OpLog


def _op(seq: int) -> Op:
    request = t.asks(f"rm{seq % 3}", f"app-{seq}", 3, {"memory": 10, "vcore": 1}, prefix=f"k{seq}-")
    return Op(seq=seq, rm=seq % 3, kind="allocations", request=request, description=f"asks {seq}")


def test_the_log_gives_back_every_operation_in_order_across_its_spilled_chunks() -> None:
    log = OpLog()
    log.CHUNK = 7
    ops = [_op(seq) for seq in range(1, 31)]
    for op in ops:
        log.append(op)
    assert len(log) == 30
    assert list(log) == ops  # read twice: the file is read from its start each time
    assert list(log) == ops
    log.append(_op(31))
    assert [op.seq for op in log] == list(range(1, 32))


def test_a_long_runs_log_holds_one_chunk_in_memory() -> None:
    log = OpLog()
    log.CHUNK = 500
    tracemalloc.start()
    try:
        for seq in range(1, 501):
            log.append(_op(seq))
        _, one_chunk = tracemalloc.get_traced_memory()
        for seq in range(501, 10_001):
            log.append(_op(seq))
        current, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(log) == 10_000
    # twenty times the operations, no more memory than the first chunk took (a list would hold 20x)
    assert current < 2 * one_chunk
