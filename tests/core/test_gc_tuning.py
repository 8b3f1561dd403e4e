"""korral.start(tune_gc=True) raises the cyclic GC's thresholds while the core runs and puts them back;
the library leaves them alone unless asked, since they are the whole process's, and korral bench asks."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from core_helpers import NODE, ROOT_ONLY

import korral
from korral import testing as t
from korral.actors import gc_tuning
from korral.harness.benchmark.runner import run_korral
from korral.harness.benchmark.workloads import yunikorn


@pytest.fixture
def default_thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_tuned_thresholds_raise_young_and_full_collections_and_never_lower_a_setting() -> None:
    assert gc_tuning.tuned((700, 10, 10)) == (10_000, 10, 100)
    assert gc_tuning.tuned((50_000, 20, 5_000)) == (50_000, 20, 5_000)


@pytest.mark.usefixtures("default_thresholds")
def test_a_core_that_is_asked_tunes_the_collector_and_stop_restores_it() -> None:
    with korral.start(tune_gc=True):
        assert gc.get_threshold() == (10_000, 10, 100)
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.usefixtures("default_thresholds")
def test_the_library_leaves_the_process_collector_alone_by_default() -> None:
    with korral.start():
        assert gc.get_threshold() == (700, 10, 10)
    with korral.start(tune_gc=False):
        assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.usefixtures("default_thresholds")
def test_korral_bench_runs_its_cores_with_the_collector_tuned(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int, int]] = []
    start = korral.start

    def observed(**settings: Any) -> korral.Core:
        core = start(**settings)
        seen.append(gc.get_threshold())
        return core

    monkeypatch.setattr(korral, "start", observed)
    result = run_korral(yunikorn(4, 40))
    assert result.allocations == 40
    assert seen == [(10_000, 10, 100)]
    assert gc.get_threshold() == (700, 10, 10)  # restored when its core stopped


@pytest.mark.usefixtures("default_thresholds")
def test_stop_leaves_thresholds_alone_that_someone_changed_meanwhile() -> None:
    with korral.start(tune_gc=True):
        gc.set_threshold(2_000, 10, 10)
    assert gc.get_threshold() == (2_000, 10, 10)


class Young:
    """An object the collector tracks (a plain instance)."""


def test_promote_survivors_moves_young_objects_to_the_oldest_generation() -> None:
    gc.collect()
    young = Young()
    # young (or in generation 1, should a young collection come in between), not yet the oldest
    assert not any(obj is young for obj in gc.get_objects(generation=2))
    gc_tuning.promote_survivors()
    assert any(obj is young for obj in gc.get_objects(generation=2))


def registers_nodes(monkeypatch: pytest.MonkeyPatch, counts: list[int], **settings: bool) -> list[str]:
    """Register nodes through a core in steps of ``counts``; for each step, a "p" per promotion of the
    young objects that the step caused."""
    promotions: list[str] = []
    monkeypatch.setattr(gc_tuning, "promote_survivors", lambda: promotions.append("p"))
    seen: list[str] = []
    rm = t.RecordingRM("rm")
    with korral.start(**settings) as core:
        core.register_resource_manager(t.register("rm", ROOT_ONLY), rm)
        first = 0
        for count in counts:
            core.update_node(t.nodes("rm", [f"n{i}" for i in range(first, first + count)], NODE))
            core.wait_until_idle(timeout=300)  # 1,500 nodes on a loaded machine
            first += count
            seen.append("".join(promotions))
            promotions.clear()
        assert len(rm.accepted_nodes) == first
    return seen


def test_a_partition_promotes_its_node_actors_once_a_thousand_have_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # one promotion per thousand started nodes, once the warmup has started them all: a registration
    # of 1,500 promotes once; 400 and 700 more promote once the second thousand is reached
    assert registers_nodes(monkeypatch, [1_500, 400, 700], tune_gc=True) == ["p", "", "p"]


def test_a_core_that_leaves_the_collector_alone_never_collects(monkeypatch: pytest.MonkeyPatch) -> None:
    assert registers_nodes(monkeypatch, [1_500], tune_gc=False) == [""]
    assert registers_nodes(monkeypatch, [1_500]) == [""]  # the default
