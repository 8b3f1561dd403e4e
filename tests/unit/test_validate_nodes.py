"""The door check of a node request: its one-pass fast path accepts only what the item-by-item checks
accept, and a bad node is still rejected on its own with the field named."""

from __future__ import annotations

import attrs
import pytest

from korral import si
from korral.si.validate import _plain_node, check_node, check_node_request

GOOD = si.NodeInfo(
    node_id="n1",
    action=si.NodeAction.CREATE,
    attributes={"zone": "a"},
    schedulable_resource={"memory": 10, "vcore": 1},
    occupied_resource={"memory": 1},
)

BAD_FIELDS = [
    ("node_id", 1),
    ("action", 1),
    ("attributes", {"zone": 1}),
    ("attributes", {1: "a"}),
    ("attributes", "zone=a"),
    ("schedulable_resource", {"memory": 1.5}),
    ("schedulable_resource", {"memory": True}),
    ("schedulable_resource", {"memory": 2**63}),
    ("schedulable_resource", {1: 10}),
    ("occupied_resource", [("memory", 1)]),
]


def _with(field: str, value: object) -> si.NodeInfo:
    node = attrs.evolve(GOOD)
    object.__setattr__(node, field, value)  # past the converters, as a careless RM's object could be
    return node


def test_plain_nodes_take_the_fast_path_and_pass_unchanged():
    request = si.NodeRequest(rm_id="rm", nodes=[GOOD, si.NodeInfo(node_id="n2")])
    assert all(_plain_node(node) for node in request.nodes)
    checked = check_node_request(request)
    assert checked.request is request and not checked.node_rejections


@pytest.mark.parametrize(("field", "value"), BAD_FIELDS, ids=[f"{f}-{v!r}" for f, v in BAD_FIELDS])
def test_a_bad_field_leaves_the_fast_path_and_only_its_node_is_rejected(field: str, value: object):
    bad = _with(field, value)
    assert not _plain_node(bad)
    checked = check_node_request(si.NodeRequest(rm_id="rm", nodes=[GOOD, bad]))
    assert [node.node_id for node in checked.request.nodes] == ["n1"]
    [rejection] = checked.node_rejections
    assert f"nodes[1].{field}" in rejection.reason


def test_a_node_with_existing_allocations_is_checked_item_by_item():
    existing = si.Allocation(allocation_key="k", uuid="u", node_id="n1", application_id="app")
    node = attrs.evolve(GOOD, existing_allocations=[existing])
    assert not _plain_node(node)
    check_node(node, "nodes[0]")
    assert check_node_request(si.NodeRequest(rm_id="rm", nodes=[node])).request.nodes[0] is node


def test_something_else_than_a_node_is_rejected():
    assert not _plain_node(si.NodeRequest())
    checked = check_node_request(si.NodeRequest(rm_id="rm", nodes=[GOOD, "n2"]))  # type: ignore[list-item]
    assert [node.node_id for node in checked.request.nodes] == ["n1"] and len(checked.node_rejections) == 1
