"""queues.yaml validation of the queue tree: names, resources, ACLs, node sorting, rule order (ref. 2.3)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from config_helpers import assert_rejected, doc, find, leaf, parent, res, root

from korral.config import ResourcesConfig, load_config

# --- rule 1: partition names ---


def test_rule1_distinct_partitions_pass() -> None:
    text = yaml.safe_dump(
        {"partitions": [{"name": "default", "queues": root()}, {"name": "gpu", "queues": root()}]}
    )
    config = load_config(text)
    assert [p.name for p in config.partitions] == ["default", "gpu"]
    assert config.partition("gpu") is not None
    assert config.partition("missing") is None


@pytest.mark.parametrize(
    ("names", "duplicate"),
    [
        pytest.param(["default", "default"], "default", id="same"),
        pytest.param(["default", "DEFAULT"], "default", id="case"),
        pytest.param(["", "default"], "default", id="empty-is-default"),
        pytest.param(["gpu", "a", "GPU"], "gpu", id="third"),
    ],
)
def test_rule1_duplicate_partition_names(names: list[str], duplicate: str) -> None:
    text = yaml.safe_dump({"partitions": [{"name": name, "queues": root()} for name in names]})
    assert_rejected(text, f"duplicate partition name found with name {duplicate}")


# --- rule 2: queues set ---


@pytest.mark.parametrize(
    "text",
    [doc(None), doc([]), "partitions:\n  - name: x\n    queues:\n"],
    ids=["missing", "empty-list", "null"],
)
def test_rule2_queues_must_be_set(text: str) -> None:
    assert_rejected(text, "partition '", "queue config is not set")


# --- rule 3: root resources ---


@pytest.mark.parametrize(
    "resources",
    [
        pytest.param(res({"vcore": 1}), id="guaranteed"),
        pytest.param(res(max={"memory": "1G"}), id="max"),
        pytest.param(res(max={"memory": 0}), id="zero-max"),
    ],
)
def test_rule3_root_must_not_have_resources(resources: dict[str, Any]) -> None:
    assert_rejected(
        doc(root(resources=resources)), "partition 'default'", "root queue must not have resource limits set"
    )


def test_rule3_root_without_resources_passes() -> None:
    config = load_config(doc(root(leaf("a", resources=res({"vcore": 1})))))
    assert config.partitions[0].root.resources == ResourcesConfig()


# --- rule 5: ACLs and child names ---


@pytest.mark.parametrize(
    "acl",
    ["", "*", " *", "bob", "bob,sue", "bob,sue admins", " admins", "bob ", "bob,sue admins,devs"],
    ids=[
        "empty",
        "wildcard",
        "space-wildcard",
        "user",
        "users",
        "users-groups",
        "groups-only",
        "trailing-space",
        "lists",
    ],
)
@pytest.mark.parametrize("key", ["submitacl", "adminacl"])
def test_rule5_valid_acls(key: str, acl: str) -> None:
    assert (
        getattr(find(load_config(doc(root(leaf("a", **{key: acl})))), "root.a"), key.replace("acl", "_acl"))
        == acl
    )


@pytest.mark.parametrize(
    ("acl", "path"),
    [
        pytest.param("bob admins extra", "root.a", id="three-fields"),
        pytest.param("bob  admins", "root.a", id="double-space"),
        pytest.param("  admins", "root.a", id="two-leading-spaces"),
    ],
)
@pytest.mark.parametrize("key", ["submitacl", "adminacl"])
def test_rule5_multiple_spaces_in_acl(key: str, acl: str, path: str) -> None:
    assert_rejected(
        doc(root(leaf("a", **{key: acl}))), f"queue '{path}'", key, "multiple spaces found in ACL"
    )


def test_rule5_root_acl_checked() -> None:
    assert_rejected(doc(root(adminacl="a b c")), "queue 'root'", "adminacl", "multiple spaces found in ACL")


@pytest.mark.parametrize(
    "name",
    ["a", "A-b_c", "ns:team#1/x@y", "0", "x" * 64],
    ids=["simple", "dash-underscore", "special", "digit", "64-chars"],
)
def test_rule5_valid_child_names(name: str) -> None:
    assert (
        find(load_config(doc(root(parent("p", leaf(name))))), f"root.p.{name.lower()}").name == name.lower()
    )


@pytest.mark.parametrize(
    ("name", "parent_path"),
    [
        pytest.param("a.b", "root.p", id="dot"),
        pytest.param("a b", "root.p", id="space"),
        pytest.param("", "root.p", id="empty"),
        pytest.param("x" * 65, "root.p", id="65-chars"),
        pytest.param("a$", "root.p", id="dollar"),
    ],
)
def test_rule5_invalid_child_names(name: str, parent_path: str) -> None:
    assert_rejected(doc(root(parent("p", leaf(name)))), f"queue '{parent_path}'", "invalid child name")


def test_rule5_invalid_top_level_name_under_inserted_root() -> None:
    assert_rejected(doc([leaf("a.b"), leaf("c")]), "queue 'root'", "invalid child name 'a.b'")


@pytest.mark.parametrize(
    ("queues", "fragments"),
    [
        pytest.param(
            root(leaf("a"), leaf("A")),
            ["queue 'root'", "duplicate child name found with name 'a', level 1"],
            id="level-1-case",
        ),
        pytest.param(
            [leaf("x"), leaf("x")], ["duplicate child name found with name 'x', level 1"], id="inserted-root"
        ),
        pytest.param(
            root(parent("p", leaf("b"), leaf("B"))),
            ["queue 'root.p'", "duplicate child name found with name 'b', level 2"],
            id="level-2",
        ),
    ],
)
def test_rule5_duplicate_child_names(queues: list[dict[str, Any]], fragments: list[str]) -> None:
    assert_rejected(doc(queues), *fragments)


def test_rule5_same_name_on_different_branches_passes() -> None:
    config = load_config(doc(root(leaf("testqueue"), parent("parent", leaf("testqueue")))))
    assert find(config, "root.parent.testqueue").name == "testqueue"


# --- rule 7: queue resources ---


@pytest.mark.parametrize(
    "queues",
    [
        pytest.param(root(leaf("a", resources=res({"vcore": 1}, {"vcore": 1}))), id="guaranteed-equals-max"),
        pytest.param(
            root(leaf("a", resources=res({"vcore": 1, "memory": "1G"}, {"vcore": 2}))),
            id="type-undefined-in-max-unlimited",
        ),
        pytest.param(
            root(parent("p", leaf("a", resources=res(max={"vcore": 5})), resources=res(max={"memory": 1}))),
            id="child-type-undefined-in-parent-max",
        ),
        pytest.param(
            root(
                parent(
                    "p",
                    leaf("a", resources=res({"vcore": 2})),
                    leaf("b", resources=res({"vcore": 3})),
                    resources=res({"vcore": 5}, {"vcore": 5}),
                )
            ),
            id="children-sum-equals-parent",
        ),
        pytest.param(
            root(
                parent(
                    "p",
                    leaf("a", resources=res({"vcore": 2})),
                    leaf("b", resources=res({"memory": 3})),
                    resources=res({"vcore": 5}),
                )
            ),
            id="children-type-not-guaranteed-by-parent",
        ),
        pytest.param(
            root(
                parent(
                    "p", parent("q", leaf("a", resources=res({"vcore": 4}))), resources=res(max={"vcore": 4})
                )
            ),
            id="grandchild-guarantee-within-max",
        ),
    ],
)
def test_rule7_valid_resources(queues: list[dict[str, Any]]) -> None:
    load_config(doc(queues))


@pytest.mark.parametrize(
    ("queues", "fragments"),
    [
        pytest.param(
            root(leaf("a", resources=res({"vcore": 2}, {"vcore": 1}))),
            [
                "queue 'root.a'",
                "guaranteed resource {vcore:2000} is larger than maximum resource {vcore:1000}",
            ],
            id="guaranteed-over-max",
        ),
        pytest.param(
            root(leaf("a", resources=res({"vcore": 1}, {"vcore": 0, "memory": 5}))),
            ["queue 'root.a'", "is larger than maximum resource"],
            id="guaranteed-over-zero-max",
        ),
        pytest.param(
            root(parent("p", leaf("a", resources=res(max={"vcore": 3})), resources=res(max={"vcore": 2}))),
            ["queue 'root.p.a'", "max resource of parent {vcore:2000} is smaller than maximum resource"],
            id="child-max-over-parent",
        ),
        pytest.param(
            root(
                parent(
                    "p",
                    parent("q", leaf("a", resources=res(max={"vcore": 3}))),
                    resources=res(max={"vcore": 2}),
                )
            ),
            ["queue 'root.p.q.a'", "max resource of parent {vcore:2000}"],
            id="child-max-over-grandparent",
        ),
        pytest.param(
            root(
                parent(
                    "p",
                    leaf("a", resources=res({"vcore": 3})),
                    leaf("b", resources=res({"vcore": 3})),
                    resources=res({"vcore": 5}),
                )
            ),
            [
                "queue 'root.p'",
                "guaranteed resource of parent {vcore:5000} is smaller than sum of guaranteed "
                "resources {vcore:6000} of the children",
            ],
            id="children-sum-over-guaranteed",
        ),
        pytest.param(
            root(
                parent(
                    "p",
                    leaf("a", resources=res({"vcore": 3})),
                    leaf("b", resources=res({"vcore": 3})),
                    resources=res(max={"vcore": 5}),
                )
            ),
            ["queue 'root.p'", "max resource {vcore:5000} is smaller than sum of guaranteed resources"],
            id="children-sum-over-max",
        ),
        pytest.param(
            root(
                parent("p", parent("q", leaf("a", resources=res({"vcore": 3}))), resources=res({"vcore": 2}))
            ),
            ["queue 'root.p'", "guaranteed resource of parent {vcore:2000}"],
            id="grandchild-sum-passes-up",
        ),
        pytest.param(
            [leaf("a", resources=res({"memory": 2}, {"memory": 1}))],
            ["queue 'root.a'"],
            id="under-inserted-root",
        ),
    ],
)
def test_rule7_invalid_resources(queues: list[dict[str, Any]], fragments: list[str]) -> None:
    assert_rejected(doc(queues), "partition 'default'", *fragments)


# --- rule 9: node sort policy ---


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("", "fair"),
        ("fair", "fair"),
        ("FAIR", "fair"),
        ("binpacking", "binpacking"),
        ("BinPacking", "binpacking"),
    ],
)
def test_rule9_valid_node_sort_policy(policy: str, expected: str) -> None:
    config = load_config(doc(root(), nodesortpolicy={"type": policy, "resourceweights": {"vcore": 0}}))
    assert config.partitions[0].node_sort_policy.type == expected


@pytest.mark.parametrize(
    ("policy", "fragments"),
    [
        pytest.param(
            {"type": "stateaware"}, ["nodesortpolicy", "undefined policy: stateaware"], id="unknown-type"
        ),
        pytest.param({"type": "bin packing"}, ["undefined policy"], id="spaced-type"),
        pytest.param(
            {"resourceweights": {"vcore": 1, "memory": -0.5}},
            ["negative resource weight for memory is not allowed"],
            id="negative-weight",
        ),
    ],
)
def test_rule9_invalid_node_sort_policy(policy: dict[str, Any], fragments: list[str]) -> None:
    assert_rejected(doc(root(), nodesortpolicy=policy), "partition 'default'", *fragments)


# --- rules run in the reference order ---


def test_first_broken_rule_is_reported() -> None:
    # broken for rule 5 (ACL) and rule 7 (resources): the ACL error comes first
    queues = root(leaf("a", submitacl="a b c", resources=res({"vcore": 2}, {"vcore": 1})))
    assert_rejected(doc(queues), "multiple spaces found in ACL")
    # broken for rule 7 and rule 10: resources first
    queues = root(parent("p", leaf("a", resources=res({"vcore": 2}, {"vcore": 1})), maxapplications=1))
    assert_rejected(doc(queues), "is larger than maximum resource")


def test_error_names_the_partition_that_is_broken() -> None:
    text = yaml.safe_dump(
        {
            "partitions": [
                {"name": "good", "queues": root(leaf("a"))},
                {
                    "name": "bad",
                    "queues": root(leaf("a", maxapplications=1), maxapplications=0, submitacl="x y z"),
                },
            ]
        }
    )
    assert_rejected(text, "partition 'bad'", "queue 'root'", "multiple spaces")
