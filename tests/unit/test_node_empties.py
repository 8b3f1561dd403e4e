"""Nodes without occupied resources or attributes share one empty dict each, never changed in place; a
node holds its owner's spec by reference and takes a new one whole."""

from __future__ import annotations

import attrs
import pytest

from korral.model.node import Node, NodeSpec


def test_nodes_without_occupied_or_attributes_share_the_empties_and_replace_them_whole():
    first = Node("n1", {"memory": 10})
    second = Node("n2", {"memory": 10}, occupied={}, attributes={})
    assert first.occupied is second.occupied == {} and first.attributes is second.attributes == {}
    first.set_spec(first.spec.updated(occupied={"memory": 4}, attributes={"zone": "a"}))
    assert first.occupied == {"memory": 4} and first.available == {"memory": 6}
    assert second.occupied == {} and second.attributes == {} and second.available == {"memory": 10}


def test_given_occupied_and_attributes_are_copied():
    occupied, attributes = {"memory": 2, "vcore": 0}, {"zone": "a"}
    node = Node("n1", {"memory": 10}, occupied=occupied, attributes=attributes)
    assert node.occupied == {"memory": 2} and node.attributes == attributes
    assert node.occupied is not occupied and node.attributes is not attributes


def test_a_node_holds_its_owners_spec_and_reads_the_rms_facts_through_it():
    spec = NodeSpec.of("n1", {"memory": 10, "vcore": 0}, {"memory": 2}, {"zone": "a"})
    node = Node.of(spec)
    assert node.spec is spec and node.capacity is spec.capacity and node.attributes is spec.attributes
    assert node.capacity == {"memory": 10} and node.available == {"memory": 8}
    drained = attrs.evolve(spec, schedulable=False)
    assert node.set_spec(drained) == {} and node.spec is drained and not node.schedulable
    assert node.available == {"memory": 8}
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        spec.capacity = {}  # type: ignore[misc]
