"""korral.start(tune_gc=True) raises the cyclic GC's thresholds while the core runs and puts them back."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

import korral
from korral.actors import gc_tuning


@pytest.fixture
def default_thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_tuned_thresholds_raise_young_and_full_collections_and_never_lower_a_setting() -> None:
    assert gc_tuning.tuned((700, 10, 10)) == (10_000, 10, 1_000)
    assert gc_tuning.tuned((50_000, 20, 5_000)) == (50_000, 20, 5_000)


@pytest.mark.usefixtures("default_thresholds")
def test_a_running_core_tunes_the_collector_and_stop_restores_it() -> None:
    with korral.start():
        assert gc.get_threshold() == (10_000, 10, 1_000)
    assert gc.get_threshold() == (700, 10, 10)
    with korral.start(tune_gc=False):
        assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.usefixtures("default_thresholds")
def test_stop_leaves_thresholds_alone_that_someone_changed_meanwhile() -> None:
    with korral.start():
        gc.set_threshold(2_000, 10, 10)
    assert gc.get_threshold() == (2_000, 10, 10)
