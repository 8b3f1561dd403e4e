"""Sparse resource maths (YuniKorn's `pkg/common/resources`, reference 2.6): arithmetic and limits."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from korral import resource as res
from korral.resource import MAX_INT64, MIN_INT64

MAX = MAX_INT64
MIN = MIN_INT64


def _unchanged(*resources):
    """Deep copies of the inputs, to check later that a function did not touch them."""
    return [copy.deepcopy(r) for r in resources]


# ---- add / sub ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        pytest.param({}, {}, {}, id="both-empty"),
        pytest.param({"memory": 10}, {}, {"memory": 10}, id="right-empty"),
        pytest.param({}, {"memory": 10}, {"memory": 10}, id="left-empty"),
        pytest.param({"memory": 10}, {"memory": 5}, {"memory": 15}, id="same-type"),
        pytest.param({"memory": 10}, {"vcore": 5}, {"memory": 10, "vcore": 5}, id="union-of-types"),
        pytest.param({"memory": 10}, {"memory": -10}, {"memory": 0}, id="zero-result-kept"),
        pytest.param({"memory": -3}, {"memory": 1}, {"memory": -2}, id="negative"),
        pytest.param({"memory": MAX}, {"memory": 1}, {"memory": MAX + 1}, id="exact-past-max"),
        pytest.param({"memory": MAX - 1}, {"memory": MAX}, {"memory": 2 * MAX - 1}, id="exact-two-large"),
        pytest.param({"memory": MIN}, {"memory": -1}, {"memory": MIN - 1}, id="exact-past-min"),
        pytest.param({"memory": MAX}, {"memory": MIN}, {"memory": -1}, id="max-plus-min"),
    ],
)
def test_add(left, right, expected):
    before = _unchanged(left, right)
    result = res.add(left, right)
    assert result == expected
    assert [left, right] == before, "inputs must not change"
    assert result is not left and result is not right


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        pytest.param({}, {}, {}, id="both-empty"),
        pytest.param({"memory": 10}, {}, {"memory": 10}, id="right-empty"),
        pytest.param({}, {"memory": 10}, {"memory": -10}, id="missing-left-is-zero"),
        pytest.param({"memory": 10}, {"memory": 4}, {"memory": 6}, id="same-type"),
        pytest.param({"memory": 10}, {"vcore": 4}, {"memory": 10, "vcore": -4}, id="union-of-types"),
        pytest.param({"memory": 10}, {"memory": 10}, {"memory": 0}, id="zero-result-kept"),
        pytest.param({"memory": MIN}, {"memory": 1}, {"memory": MIN - 1}, id="exact-past-min"),
        pytest.param({"memory": MIN + 1}, {"memory": MAX}, {"memory": MIN + 1 - MAX}, id="exact-large-sub"),
        pytest.param({"memory": MAX}, {"memory": -1}, {"memory": MAX + 1}, id="exact-past-max"),
        pytest.param({}, {"memory": MIN}, {"memory": -MIN}, id="negating-min-exact"),
    ],
)
def test_sub(left, right, expected):
    before = _unchanged(left, right)
    result = res.sub(left, right)
    assert result == expected
    assert [left, right] == before, "inputs must not change"
    assert result is not left


# ---- add_into / sub_into --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "delta", "times", "expected"),
    [
        pytest.param({}, {"memory": 10}, 1, {"memory": 10}, id="into-empty"),
        pytest.param({"memory": 10}, {"memory": 5}, 1, {"memory": 15}, id="same-type"),
        pytest.param({"memory": 10}, {"vcore": 5}, 1, {"memory": 10, "vcore": 5}, id="new-type"),
        pytest.param({"memory": 10}, {"memory": 5}, 3, {"memory": 25}, id="times"),
        pytest.param({"memory": 10}, {"memory": -10}, 1, {}, id="zero-entry-dropped"),
        pytest.param({"memory": 10, "vcore": 1}, {"memory": -5}, 2, {"vcore": 1}, id="times-to-zero-dropped"),
        pytest.param({}, {"memory": 0}, 1, {}, id="zero-delta-not-added"),
        pytest.param({"memory": 1}, {"memory": 5}, 0, {"memory": 1}, id="times-zero-keeps"),
        pytest.param({"memory": MAX}, {"memory": 1}, 1, {"memory": MAX + 1}, id="exact-past-max"),
        pytest.param({}, {"memory": MAX}, 3, {"memory": 3 * MAX}, id="times-exact-past-max"),
        pytest.param({"memory": MIN}, {"memory": -1}, 1, {"memory": MIN - 1}, id="exact-past-min"),
        pytest.param({}, {"memory": MAX}, -3, {"memory": -3 * MAX}, id="negative-times-exact"),
    ],
)
def test_add_into(target, delta, times, expected):
    before_delta = copy.deepcopy(delta)
    result = res.add_into(target, delta, times)
    assert result is None, "updates in place"
    assert target == expected
    assert delta == before_delta


@pytest.mark.parametrize(
    ("target", "delta", "times", "expected"),
    [
        pytest.param({"memory": 10}, {"memory": 4}, 1, {"memory": 6}, id="same-type"),
        pytest.param({"memory": 10}, {"memory": 4}, 2, {"memory": 2}, id="times"),
        pytest.param({"memory": 10}, {"vcore": 4}, 1, {"memory": 10, "vcore": -4}, id="new-type-negative"),
        pytest.param({"memory": 10, "vcore": 2}, {"memory": 10}, 1, {"vcore": 2}, id="zero-entry-dropped"),
        pytest.param({"memory": 8}, {"memory": 4}, 2, {}, id="times-to-zero-dropped"),
        pytest.param({"memory": MIN}, {"memory": 1}, 1, {"memory": MIN - 1}, id="exact-past-min"),
        pytest.param({"memory": MAX}, {"memory": -1}, 1, {"memory": MAX + 1}, id="exact-past-max"),
        pytest.param({}, {"memory": MAX}, 5, {"memory": -5 * MAX}, id="times-exact-below-min"),
    ],
)
def test_sub_into(target, delta, times, expected):
    before_delta = copy.deepcopy(delta)
    res.sub_into(target, delta, times)
    assert target == expected
    assert delta == before_delta


def test_sub_into_default_times_is_one():
    target = {"memory": 10}
    res.sub_into(target, {"memory": 3})
    assert target == {"memory": 7}


@pytest.mark.parametrize(
    ("pending", "allocated", "items", "pending_after", "allocated_after"),
    [
        pytest.param(
            {"memory": 30, "vcore": 3},
            {},
            (("memory", 10), ("vcore", 1)),
            {"memory": 20, "vcore": 2},
            {"memory": 10, "vcore": 1},
            id="first-allocation",
        ),
        pytest.param(
            {"memory": 10, "vcore": 5},
            {"memory": 5},
            (("memory", 10),),
            {"vcore": 5},
            {"memory": 15},
            id="pending-type-drained-is-pruned",
        ),
    ],
)
def test_pending_to_allocated(pending, allocated, items, pending_after, allocated_after):
    res.pending_to_allocated(((pending, allocated),), items)
    assert (pending, allocated) == (pending_after, allocated_after)


def test_pending_to_allocated_books_every_pair_on_the_path():
    leaf = ({"memory": 10, "vcore": 1}, {"memory": 5})
    root = ({"memory": 30, "vcore": 3}, {})
    res.pending_to_allocated((leaf, root), (("memory", 10), ("vcore", 1)))
    assert leaf == ({}, {"memory": 15, "vcore": 1})
    assert root == ({"memory": 20, "vcore": 2}, {"memory": 10, "vcore": 1})


# ---- multiply / prune ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "factor", "expected"),
    [
        pytest.param({}, 5, {}, id="empty"),
        pytest.param({"memory": 10, "vcore": 2}, 3, {"memory": 30, "vcore": 6}, id="positive"),
        pytest.param({"memory": 10}, 0, {}, id="zero-factor-empty"),
        pytest.param({"memory": 10, "vcore": 0}, 2, {"memory": 20}, id="zero-entry-dropped"),
        pytest.param({"memory": 10}, -2, {"memory": -20}, id="negative-factor"),
        pytest.param({"memory": MAX}, 2, {"memory": 2 * MAX}, id="exact-past-max"),
        pytest.param({"memory": MAX}, -2, {"memory": -2 * MAX}, id="exact-below-min"),
        pytest.param({"memory": MIN}, -1, {"memory": -MIN}, id="min-times-minus-one-exact"),
        pytest.param({"memory": MIN}, 2, {"memory": 2 * MIN}, id="min-doubled-exact"),
    ],
)
def test_multiply(resource, factor, expected):
    before = copy.deepcopy(resource)
    assert res.multiply(resource, factor) == expected
    assert resource == before


@pytest.mark.parametrize(
    ("resource", "expected"),
    [
        pytest.param({}, {}, id="empty"),
        pytest.param({"memory": 0}, {}, id="only-zero"),
        pytest.param({"memory": 0, "vcore": 1}, {"vcore": 1}, id="zero-dropped"),
        pytest.param({"memory": -1, "vcore": 0}, {"memory": -1}, id="negative-kept"),
        pytest.param({"memory": 5, "vcore": 1}, {"memory": 5, "vcore": 1}, id="nothing-to-drop"),
    ],
)
def test_prune(resource, expected):
    before = copy.deepcopy(resource)
    result = res.prune(resource)
    assert result == expected
    assert resource == before
    assert result is not resource


# ---- predicates ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "expected"),
    [
        pytest.param(None, True, id="none"),
        pytest.param({}, True, id="empty"),
        pytest.param({"memory": 0, "vcore": 0}, True, id="all-zero"),
        pytest.param({"memory": 0, "vcore": 1}, False, id="one-positive"),
        pytest.param({"memory": -1}, False, id="negative"),
    ],
)
def test_is_zero(resource, expected):
    assert res.is_zero(resource) is expected


@pytest.mark.parametrize(
    ("resource", "expected"),
    [
        pytest.param({}, False, id="empty"),
        pytest.param({"memory": 0}, False, id="zero"),
        pytest.param({"memory": 5, "vcore": 1}, False, id="positive"),
        pytest.param({"memory": 5, "vcore": -1}, True, id="one-negative"),
        pytest.param({"memory": MIN}, True, id="min-int64"),
    ],
)
def test_has_negative(resource, expected):
    assert res.has_negative(resource) is expected


@pytest.mark.parametrize(
    ("resource", "expected"),
    [
        pytest.param({}, False, id="empty"),
        pytest.param({"memory": 0}, False, id="all-zero"),
        pytest.param({"memory": 1}, True, id="one-positive"),
        pytest.param({"memory": 0, "vcore": 1}, True, id="positive-and-zero"),
        pytest.param({"memory": 1, "vcore": -1}, False, id="positive-and-negative"),
        pytest.param({"memory": -1, "vcore": 1}, False, id="negative-first"),
        pytest.param({"memory": -1}, False, id="only-negative"),
    ],
)
def test_strictly_greater_than_zero(resource, expected):
    assert res.strictly_greater_than_zero(resource) is expected


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        pytest.param(None, None, True, id="none-none"),
        pytest.param(None, {}, True, id="none-empty"),
        pytest.param({}, {"memory": 0}, True, id="empty-vs-explicit-zero"),
        pytest.param({"memory": 5}, {"memory": 5, "vcore": 0}, True, id="missing-is-zero"),
        pytest.param({"memory": 5}, {"memory": 6}, False, id="different-value"),
        pytest.param({"memory": 5}, {"vcore": 5}, False, id="different-type"),
        pytest.param(None, {"memory": 1}, False, id="none-vs-set"),
        pytest.param({"memory": -1}, {}, False, id="negative-vs-empty"),
    ],
)
def test_equals(left, right, expected):
    assert res.equals(left, right) is expected
    assert res.equals(right, left) is expected, "equality is symmetric"


# ---- fit checks ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ask", "available", "expected"),
    [
        pytest.param({}, {}, True, id="empty-ask-fits-empty"),
        pytest.param({"memory": 5}, {"memory": 5}, True, id="exact-fit"),
        pytest.param({"memory": 5}, {"memory": 10, "vcore": 1}, True, id="smaller-fits"),
        pytest.param({"memory": 6}, {"memory": 5}, False, id="too-big"),
        pytest.param({"gpu": 1}, {"memory": 10}, False, id="undefined-type-in-larger-is-zero"),
        pytest.param({"memory": 5, "gpu": 1}, {"memory": 10}, False, id="one-undefined-type-fails"),
        pytest.param({"gpu": 0}, {"memory": 10}, True, id="zero-ask-of-undefined-type-fits"),
        pytest.param({"memory": 1}, {"memory": -5}, False, id="negative-available"),
        pytest.param({"memory": 0}, {"memory": -5}, True, id="zero-ask-negative-available"),
        pytest.param({"memory": -1}, {}, True, id="negative-ask-fits"),
    ],
)
def test_fits_in(ask, available, expected):
    assert res.fits_in(ask, available) is expected


@pytest.mark.parametrize(
    ("usage", "limit", "expected"),
    [
        pytest.param({"memory": 100}, None, True, id="none-limit-unlimited"),
        pytest.param({"memory": 100}, {}, True, id="empty-limit-unlimited"),
        pytest.param({"memory": 100}, {"memory": 100}, True, id="at-limit"),
        pytest.param({"memory": 101}, {"memory": 100}, False, id="over-limit"),
        pytest.param({"gpu": 10**9}, {"memory": 100}, True, id="undefined-type-in-limit-unlimited"),
        pytest.param({"memory": 50, "gpu": 4}, {"memory": 100, "gpu": 4}, True, id="all-types-within"),
        pytest.param({"memory": 50, "gpu": 5}, {"memory": 100, "gpu": 4}, False, id="one-type-over"),
        pytest.param({"vcore": 1}, {"memory": 100, "vcore": 0}, False, id="explicit-zero-limit-is-none"),
        pytest.param({}, {"memory": 100, "vcore": 0}, True, id="no-usage-fits-explicit-zero"),
    ],
)
def test_fits_in_max(usage, limit, expected):
    assert res.fits_in_max(usage, limit) is expected


# ---- component-wise min / max, limits, headroom ---------------------------------------------------


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        pytest.param({}, {}, {}, id="empty"),
        pytest.param({"memory": 5}, {"memory": 3}, {"memory": 3}, id="right-smaller"),
        pytest.param({"memory": 3}, {"memory": 5}, {"memory": 3}, id="left-smaller"),
        pytest.param(
            {"memory": 5, "vcore": 1}, {"memory": 3, "vcore": 4}, {"memory": 3, "vcore": 1}, id="per-type"
        ),
        pytest.param({"memory": 5}, {"vcore": 3}, {"memory": 0, "vcore": 0}, id="missing-is-zero"),
        pytest.param({}, {"memory": -3}, {"memory": -3}, id="negative-below-missing-zero"),
        pytest.param({"memory": -3}, {}, {"memory": -3}, id="negative-left-below-missing-zero"),
    ],
)
def test_component_min(left, right, expected):
    before = _unchanged(left, right)
    result = res.component_min(left, right)
    assert res.equals(result, expected), result
    assert res.equals(res.component_min(right, left), expected), "symmetric"
    assert [left, right] == before


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        pytest.param({}, {}, {}, id="empty"),
        pytest.param({"memory": 5}, {"memory": 3}, {"memory": 5}, id="left-larger"),
        pytest.param({"memory": 3}, {"memory": 5}, {"memory": 5}, id="right-larger"),
        pytest.param({"memory": 5}, {"vcore": 3}, {"memory": 5, "vcore": 3}, id="union-of-types"),
        pytest.param(
            {"memory": 5, "vcore": 9}, {"memory": 7, "vcore": 1}, {"memory": 7, "vcore": 9}, id="per-type"
        ),
        pytest.param({"memory": -5}, {}, {}, id="negative-left-vs-missing-zero"),
        pytest.param({}, {"memory": -5}, {}, id="negative-right-vs-missing-zero"),
    ],
)
def test_component_max(left, right, expected):
    before = _unchanged(left, right)
    result = res.component_max(left, right)
    assert res.equals(result, expected), result
    assert res.equals(res.component_max(right, left), expected), "symmetric"
    assert [left, right] == before


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        pytest.param(None, None, None, id="both-unlimited"),
        pytest.param({"memory": 5}, None, {"memory": 5}, id="right-unlimited"),
        pytest.param(None, {"memory": 5}, {"memory": 5}, id="left-unlimited"),
        pytest.param({"memory": 5}, {"memory": 3}, {"memory": 3}, id="min-where-both-define"),
        pytest.param({"memory": 5}, {"vcore": 3}, {"memory": 5, "vcore": 3}, id="union-undefined-unlimited"),
        pytest.param(
            {"memory": 5, "vcore": 1},
            {"memory": 9, "gpu": 2},
            {"memory": 5, "vcore": 1, "gpu": 2},
            id="mixed",
        ),
        pytest.param({"memory": 5}, {"memory": 0}, {"memory": 0}, id="explicit-zero-wins"),
        pytest.param({}, {}, {}, id="empty-limits"),
    ],
)
def test_min_of_limits(left, right, expected):
    before = _unchanged(left, right)
    result = res.min_of_limits(left, right)
    assert result == expected
    assert [left, right] == before
    if result is not None:
        assert result is not left and result is not right, "a new dict, never an alias"


@pytest.mark.parametrize(
    ("limit", "usage", "expected"),
    [
        pytest.param(None, {"memory": 5}, None, id="unlimited"),
        pytest.param({}, {"memory": 5}, {}, id="empty-limit"),
        pytest.param({"memory": 10}, {"memory": 4}, {"memory": 6}, id="left-under-limit"),
        pytest.param({"memory": 10}, {"memory": 14}, {"memory": -4}, id="over-limit-negative"),
        pytest.param({"memory": 10}, {"vcore": 4}, {"memory": 10}, id="only-limit-types"),
        pytest.param({"memory": 10, "vcore": 2}, {}, {"memory": 10, "vcore": 2}, id="no-usage"),
        pytest.param({"memory": MAX}, {"memory": -1}, {"memory": MAX + 1}, id="exact-past-max"),
        pytest.param({"memory": MIN}, {"memory": 1}, {"memory": MIN - 1}, id="exact-past-min"),
    ],
)
def test_headroom(limit, usage, expected):
    assert res.headroom(limit, usage) == expected


# ---- properties ------------------------------------------------------------------------------------

TYPES = st.sampled_from(["memory", "vcore", "gpu", "pods", "ephemeral-storage"])
QUANTITIES = st.integers(min_value=-(10**12), max_value=10**12)
RESOURCES = st.dictionaries(TYPES, QUANTITIES, max_size=5)
NON_NEGATIVE = st.dictionaries(TYPES, st.integers(min_value=0, max_value=10**12), max_size=5)


@given(RESOURCES, RESOURCES)
def test_property_add_then_sub_returns_pruned_original(a, b):
    assert res.prune(res.sub(res.add(a, b), b)) == res.prune(a)


@given(RESOURCES, RESOURCES)
def test_property_add_into_matches_add_pruned(a, b):
    target = res.prune(a)
    res.add_into(target, b)
    assert target == res.prune(res.add(a, b)), "add_into leaves no zero entry behind"


@given(NON_NEGATIVE, NON_NEGATIVE)
def test_property_fits_in_sum(a, b):
    assert res.fits_in(a, res.add(a, b))


@given(NON_NEGATIVE, NON_NEGATIVE)
def test_property_fits_in_max_sum(a, b):
    assert res.fits_in_max(a, res.add(a, b))


@given(RESOURCES, RESOURCES)
def test_property_component_min_le_max(a, b):
    low, high = res.component_min(a, b), res.component_max(a, b)
    for name in set(a) | set(b):
        assert low.get(name, 0) <= min(a.get(name, 0), b.get(name, 0)) <= high.get(name, 0)
