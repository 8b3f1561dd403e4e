"""Asks of equal resources share their items and shape tuples (memory), without changing either."""

from __future__ import annotations

import pytest

from korral.model import allocation
from korral.model.allocation import Ask, items_and_shape


def test_equal_resources_share_one_pair_of_tuples():
    first = Ask.of(allocation_key="a", application_id="app", resource={"vcore": 1, "memory": 10})
    second = Ask.of(allocation_key="b", application_id="app", resource={"vcore": 1, "memory": 10})
    assert first.resource_items == (("vcore", 1), ("memory", 10))
    assert first.shape == (("memory", 10), ("vcore", 1))
    assert second.resource_items is first.resource_items and second.shape is first.shape
    assert Ask(first.spec).shape is first.shape


def test_the_order_of_a_resource_is_kept_in_its_items_and_not_in_its_shape():
    items, shape = items_and_shape({"memory": 10, "vcore": 1})
    other_items, other_shape = items_and_shape({"vcore": 1, "memory": 10})
    assert items == (("memory", 10), ("vcore", 1)) and other_items == (("vcore", 1), ("memory", 10))
    assert shape == other_shape
    assert items_and_shape({"memory": 10}) == ((("memory", 10),), (("memory", 10),))
    assert items_and_shape({}) == ((), ())


def test_past_the_bound_new_resources_are_not_remembered(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(allocation, "_SHAPES", {})
    monkeypatch.setattr(allocation, "_SHAPES_MAX", 2)
    for size in range(5):
        items, shape = items_and_shape({"memory": size, "vcore": 1})
        assert items == (("memory", size), ("vcore", 1)) == shape
    assert len(allocation._SHAPES) == 2
    assert items_and_shape({"memory": 0, "vcore": 1}) is items_and_shape({"memory": 0, "vcore": 1})


def test_an_ask_without_tags_shares_the_empty_tags():
    plain = Ask.of(allocation_key="a", application_id="app", resource={"memory": 1})
    empty = Ask.of(allocation_key="b", application_id="app", resource={"memory": 1}, tags={})
    assert plain.tags is empty.tags == {}
    assert Ask.of(allocation_key="c", application_id="app", resource={"memory": 1}, tags={"k": "v"}).tags == {
        "k": "v"
    }
