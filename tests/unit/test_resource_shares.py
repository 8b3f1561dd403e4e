"""Sparse resource maths (YuniKorn's `pkg/common/resources`, reference 2.6): shares, scores, printing."""

from __future__ import annotations

import pytest

from korral import resource as res

# ---- shares ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "total", "expected"),
    [
        pytest.param({}, {"memory": 10}, {}, id="no-usage"),
        pytest.param({"memory": 5}, {"memory": 10}, {"memory": 0.5}, id="half"),
        pytest.param({"memory": 20}, {"memory": 10}, {"memory": 2.0}, id="over-total"),
        pytest.param({"memory": 5}, None, {"memory": 1.0}, id="none-total-used"),
        pytest.param({"memory": 5}, {}, {"memory": 1.0}, id="undefined-total-used"),
        pytest.param({"memory": 5}, {"memory": 0}, {"memory": 1.0}, id="zero-total-used"),
        pytest.param({"memory": 5}, {"memory": -3}, {"memory": 1.0}, id="negative-total-used"),
        pytest.param({"memory": 0}, {"memory": 0}, {"memory": 0.0}, id="zero-total-unused"),
        pytest.param({"memory": 0}, {"memory": -1}, {"memory": 0.0}, id="negative-total-unused"),
        pytest.param(
            {"memory": 5, "vcore": 3},
            {"memory": 10, "vcore": 4},
            {"memory": 0.5, "vcore": 0.75},
            id="per-type",
        ),
    ],
)
def test_shares(usage, total, expected):
    assert res.shares(usage, total) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("usage", "guaranteed", "fair_max", "expected"),
    [
        pytest.param({}, {"memory": 10}, None, 0.0, id="no-usage"),
        pytest.param({"memory": 5}, {"memory": 10}, None, 0.5, id="against-guaranteed"),
        pytest.param(
            {"memory": 5, "vcore": 3}, {"memory": 10, "vcore": 4}, None, 0.75, id="largest-share-dominates"
        ),
        pytest.param({"memory": 5}, {"memory": 10}, {"memory": 5}, 0.5, id="guaranteed-before-fair-max"),
        pytest.param({"memory": 5}, None, {"memory": 20}, 0.25, id="fair-max-fallback-no-guarantee"),
        pytest.param(
            {"memory": 5, "vcore": 8}, {"memory": 10}, {"vcore": 10}, 0.8, id="fair-max-for-unguaranteed-type"
        ),
        pytest.param({"memory": 5}, {"memory": 0}, {"memory": 20}, 1.0, id="explicit-zero-guarantee-used"),
        pytest.param({"memory": 5}, {"memory": -1}, None, 1.0, id="negative-guarantee-used"),
        pytest.param({"memory": 0}, {"memory": 0}, None, 0.0, id="explicit-zero-guarantee-unused"),
        pytest.param({"memory": 5}, None, {"memory": 0}, 1.0, id="explicit-zero-fair-max-used"),
        pytest.param({"gpu": 5}, {"memory": 10}, {"vcore": 10}, 0.0, id="ungoverned-type-ignored"),
        pytest.param({"memory": 5}, None, None, 0.0, id="nothing-governs"),
        pytest.param({"memory": -5}, {"memory": 10}, None, 0.0, id="negative-usage-no-share"),
        pytest.param({"memory": 30}, {"memory": 10}, None, 3.0, id="over-guarantee"),
    ],
)
def test_dominant_share(usage, guaranteed, fair_max, expected):
    assert res.dominant_share(usage, guaranteed, fair_max) == pytest.approx(expected)


def test_dominant_share_fair_max_defaults_to_none():
    assert res.dominant_share({"memory": 5}, {"memory": 10}) == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("smaller", "larger", "total", "types"),
    [
        pytest.param({"memory": 1}, {"memory": 2}, {"memory": 10}, (), id="less-memory-first"),
        pytest.param(
            {"memory": 5, "vcore": 1},
            {"memory": 1, "vcore": 6},
            {"memory": 10, "vcore": 10},
            (),
            id="compares-largest-share-first",
        ),
        pytest.param(
            {"memory": 5, "vcore": 1},
            {"memory": 5, "vcore": 2},
            {"memory": 10, "vcore": 10},
            (),
            id="tie-on-largest-then-next",
        ),
        pytest.param({}, {"memory": 1}, {"memory": 10}, ("memory",), id="nothing-used-first"),
        pytest.param({"memory": 1}, {"gpu": 1}, {"memory": 10}, ("memory",), id="unbounded-type-counts-full"),
    ],
)
def test_usage_ratio_key_orders_less_used_first(smaller, larger, total, types):
    assert res.usage_ratio_key(smaller, total, types) < res.usage_ratio_key(larger, total, types)


@pytest.mark.parametrize(
    ("usage", "total", "types", "expected"),
    [
        pytest.param(
            {"memory": 5, "vcore": 9}, {"memory": 10, "vcore": 10}, (), (0.9, 0.5), id="largest-first"
        ),
        pytest.param(
            {}, {"memory": 10, "vcore": 10}, ("memory", "vcore"), (0.0, 0.0), id="padded-with-types"
        ),
        pytest.param(
            {"memory": 5}, {"memory": 10}, ("memory", "vcore"), (0.5, 0.0), id="padded-missing-type"
        ),
        pytest.param({}, None, (), (), id="empty"),
    ],
)
def test_usage_ratio_key_values(usage, total, types, expected):
    assert res.usage_ratio_key(usage, total, types) == pytest.approx(expected)


def test_usage_ratio_key_padding_makes_equal_usage_equal():
    total = {"memory": 10, "vcore": 10}
    types = tuple(total)
    assert res.usage_ratio_key({"memory": 5}, total, types) == res.usage_ratio_key({"vcore": 5}, total, types)


# ---- fit score, weighted usage ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ask", "available", "expected"),
    [
        pytest.param({"memory": 5}, {"memory": 10}, 0.0, id="fits"),
        pytest.param({"memory": 10}, {"memory": 10}, 0.0, id="exact-fit"),
        pytest.param({}, {}, 0.0, id="empty-ask"),
        pytest.param({"memory": 10}, {"memory": 5}, 0.5, id="half-missing"),
        pytest.param({"memory": 10}, {"memory": 9}, 0.1, id="little-missing"),
        pytest.param({"memory": 10}, {}, 1.0, id="type-absent-fully-missing"),
        pytest.param({"memory": 10, "vcore": 2}, {"memory": 5, "vcore": 1}, 1.0, id="sums-per-type"),
        pytest.param({"memory": 10, "vcore": 2}, {"vcore": 1}, 1.5, id="sums-absent-and-partial"),
        pytest.param({"memory": 0, "vcore": -1}, {}, 0.0, id="non-positive-ask-ignored"),
        pytest.param({"memory": 10}, {"memory": -5}, 1.0, id="negative-available-counts-as-zero"),
    ],
)
def test_fit_score(ask, available, expected):
    assert res.fit_score(ask, available) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("ask", "better", "worse"),
    [
        pytest.param({"memory": 10}, {"memory": 8}, {"memory": 2}, id="less-missing-scores-lower"),
        pytest.param({"memory": 10, "vcore": 2}, {"memory": 5}, {}, id="fewer-types-missing-scores-lower"),
        pytest.param({"memory": 10}, {"memory": 10}, {"memory": 9}, id="fit-beats-near-fit"),
    ],
)
def test_fit_score_grows_with_what_is_missing(ask, better, worse):
    assert res.fit_score(ask, better) < res.fit_score(ask, worse)


DOC_CAPACITY = {"vcore": 1000, "memory": 2000}
DOC_ALLOCATED = {"vcore": 900, "memory": 1000}  # 90% vcore, 50% memory


@pytest.mark.parametrize(
    ("allocated", "capacity", "weights", "expected"),
    [
        pytest.param(
            DOC_ALLOCATED, DOC_CAPACITY, {"vcore": 1.0, "memory": 1.0}, 0.70, id="doc-default-weights"
        ),
        pytest.param(
            DOC_ALLOCATED, DOC_CAPACITY, {"vcore": 4.0, "memory": 1.0}, 0.82, id="doc-vcore-4-memory-1"
        ),
        pytest.param(
            DOC_ALLOCATED, DOC_CAPACITY, {"vcore": 1.0, "memory": 0.25}, 0.82, id="weights-relative"
        ),
        pytest.param(DOC_ALLOCATED, DOC_CAPACITY, {"vcore": 1.0}, 0.90, id="only-weighted-types"),
        pytest.param(
            DOC_ALLOCATED, DOC_CAPACITY, {"vcore": 1.0, "memory": 0.0}, 0.90, id="zero-weight-ignored"
        ),
        pytest.param(
            DOC_ALLOCATED, DOC_CAPACITY, {"vcore": 1.0, "memory": -2.0}, 0.90, id="negative-weight-ignored"
        ),
        pytest.param(
            {"vcore": 900, "gpu": 1},
            {"vcore": 1000},
            {"vcore": 1.0, "gpu": 1.0},
            0.90,
            id="no-capacity-ignored",
        ),
        pytest.param(
            {"vcore": 900},
            {"vcore": 1000, "gpu": 0},
            {"vcore": 1.0, "gpu": 1.0},
            0.90,
            id="zero-capacity-ignored",
        ),
        pytest.param(
            {"vcore": 900, "gpu": 1},
            DOC_CAPACITY,
            {"vcore": 1.0, "memory": 1.0},
            0.45,
            id="unweighted-type-ignored",
        ),
        pytest.param({}, DOC_CAPACITY, {"vcore": 1.0, "memory": 1.0}, 0.0, id="nothing-allocated"),
        pytest.param(DOC_ALLOCATED, DOC_CAPACITY, {}, 0.0, id="no-weights"),
        pytest.param(DOC_ALLOCATED, {}, {"vcore": 1.0, "memory": 1.0}, 0.0, id="no-capacity-at-all"),
    ],
)
def test_weighted_usage(allocated, capacity, weights, expected):
    assert res.weighted_usage(allocated, capacity, weights) == pytest.approx(expected)


# ---- to_string -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "expected"),
    [
        pytest.param(None, "map[]", id="none"),
        pytest.param({}, "map[]", id="empty"),
        pytest.param({"memory": 10}, "map[memory:10]", id="single"),
        pytest.param({"vcore": 1, "memory": 10}, "map[memory:10 vcore:1]", id="sorted-by-name"),
        pytest.param({"memory": -5, "gpu": 0}, "map[gpu:0 memory:-5]", id="zero-and-negative"),
    ],
)
def test_to_string(resource, expected):
    assert res.to_string(resource) == expected
