"""Nodes without occupied resources or attributes share one empty dict each, never changed in place."""

from __future__ import annotations

from korral.model.node import Node


def test_nodes_without_occupied_or_attributes_share_the_empties_and_replace_them_whole():
    first = Node("n1", {"memory": 10})
    second = Node("n2", {"memory": 10}, occupied={}, attributes={})
    assert first.occupied is second.occupied == {} and first.attributes is second.attributes == {}
    first.set_occupied({"memory": 4})
    first.attributes = {"zone": "a"}
    assert first.occupied == {"memory": 4} and first.available == {"memory": 6}
    assert second.occupied == {} and second.attributes == {} and second.available == {"memory": 10}


def test_given_occupied_and_attributes_are_copied():
    occupied, attributes = {"memory": 2, "vcore": 0}, {"zone": "a"}
    node = Node("n1", {"memory": 10}, occupied=occupied, attributes=attributes)
    assert node.occupied == {"memory": 2} and node.attributes == attributes
    assert node.occupied is not occupied and node.attributes is not attributes
