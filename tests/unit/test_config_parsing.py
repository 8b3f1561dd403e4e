"""queues.yaml loading: the default config, the checksum, strict parsing and normalisation (reference 2.3)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from config_helpers import assert_rejected, dedent, doc, find, leaf, limit, parent, res, root

from korral.config import (
    DEFAULT_CONFIG_TEXT,
    DEFAULT_RESOURCE_WEIGHTS,
    ChildTemplateConfig,
    PlacementRuleConfig,
    ResourcesConfig,
    config_checksum,
    default_config,
    load_config,
    parse_quantity,
    validate_config,
)
from korral.errors import ConfigError, KorralError

# --- the default config ---


@pytest.mark.parametrize(
    "text", ["", "   ", "\n\t\n", DEFAULT_CONFIG_TEXT], ids=["empty", "spaces", "blank", "text"]
)
def test_default_config(text: str) -> None:
    config = load_config(text)
    assert config == default_config()
    (partition,) = config.partitions
    assert partition.name == "default"
    assert partition.root.name == "root"
    assert partition.root.is_parent
    assert partition.root.submit_acl == "*"
    assert partition.root.queues == ()
    assert partition.placement_rules == (PlacementRuleConfig(name="tag", value="namespace", create=True),)
    assert partition.preemption.enabled is True
    assert partition.preemption.quota_preemption_enabled is False
    assert partition.node_sort_policy.type == "fair"
    assert partition.node_sort_policy.resource_weights == DEFAULT_RESOURCE_WEIGHTS
    assert partition.user_group_resolver == ""
    assert config.checksum == config_checksum(DEFAULT_CONFIG_TEXT)


def test_default_config_is_cached_and_frozen() -> None:
    assert default_config() is default_config()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        default_config().partitions = ()  # type: ignore[misc]


def test_package_exports() -> None:
    assert parse_quantity("1", "vcore") == 1000
    assert issubclass(ConfigError, KorralError)


# --- checksum ---


def test_checksum_is_stable_and_ignores_the_checksum_line() -> None:
    text = doc(root(leaf("a")))
    first = load_config(text).checksum
    assert first == load_config(text).checksum
    assert len(first) == 64 and first == first.upper()
    with_line = "checksum: " + "A" * 64 + "\n" + text
    assert load_config(with_line).checksum == first
    assert load_config(text + "checksum: whatever\n").checksum == first


def test_checksum_changes_with_the_content() -> None:
    assert load_config(doc(root(leaf("a")))).checksum != load_config(doc(root(leaf("b")))).checksum


def test_checksum_keeps_nested_checksum_text() -> None:
    # only a top-level `checksum:` line is removed; the same words inside a value still count
    a = doc(root(leaf("a", properties={"note": "checksum: x"})))
    b = doc(root(leaf("a", properties={"note": "checksum: y"})))
    assert load_config(a).checksum != load_config(b).checksum


# --- YAML and strict parsing ---


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        pytest.param("partitions: [", ["invalid YAML"], id="unclosed-flow"),
        pytest.param("partitions:\n  - name: a\n   queues: x", ["invalid YAML"], id="bad-indent"),
        pytest.param("a: *unknown", ["invalid YAML"], id="undefined-alias"),
        pytest.param("partitions: !!python/object:os.system {}", ["invalid YAML"], id="unsafe-tag"),
        pytest.param(
            "partitions:\n  - name: a\n    name: b\n    queues: [{name: root}]",
            ["invalid YAML", "duplicate key 'name'"],
            id="duplicate-key",
        ),
    ],
)
def test_yaml_errors(text: str, fragments: list[str]) -> None:
    assert_rejected(text, *fragments)


def test_yaml_merge_keys_still_work() -> None:
    text = dedent(
        """
        partitions:
          - name: default
            queues:
              - &base {name: a, maxapplications: 3}
              - <<: *base
                name: b
        """
    )
    assert find(load_config(text), "root.b").max_applications == 3


def test_not_text_is_rejected() -> None:
    with pytest.raises(ConfigError, match="must be text"):
        load_config(b"partitions: []")  # type: ignore[arg-type]


UNKNOWN_KEYS = [
    pytest.param("partitions: []\nextra: 1", "'extra'", "top level", id="top-level"),
    pytest.param("Partitions: []", "'Partitions'", "top level", id="top-level-case-sensitive"),
    pytest.param(doc(root(), nodes=1), "'nodes'", "partitions[0]", id="partition"),
    pytest.param(
        doc(root(), statedumpfilepath="/tmp/x"), "'statedumpfilepath'", "partitions[0]", id="partition-old"
    ),
    pytest.param(doc(root(leaf("a", weight=1))), "'weight'", "queue 'root.a'", id="queue"),
    pytest.param(doc([leaf("a", Name="b")]), "'Name'", "queue 'root.a'", id="queue-key-case"),
    pytest.param(
        doc(root(leaf("a", resources={"min": {}}))), "'min'", "queue 'root.a': resources", id="resources"
    ),
    pytest.param(
        doc(root(parent("p", childtemplate={"maxapps": 1}))),
        "'maxapps'",
        "root.p': childtemplate",
        id="template",
    ),
    pytest.param(
        doc(root(parent("p", childtemplate={"resources": {"limit": {}}}))),
        "'limit'",
        "childtemplate: resources",
        id="template-resources",
    ),
    pytest.param(
        doc(root(leaf("a", limits=[limit(["bob"], maxapplications=1, maxapps=1)]))),
        "'maxapps'",
        "queue 'root.a': limits[0]",
        id="queue-limit",
    ),
    pytest.param(
        doc(root(), limits=[limit(["bob"], maxapplications=1, note="x")]),
        "'note'",
        "limits[0]",
        id="partition-limit",
    ),
    pytest.param(
        doc(root(), placementrules=[{"name": "user", "created": True}]),
        "'created'",
        "placementrules[0]",
        id="rule",
    ),
    pytest.param(
        doc(root(), placementrules=[{"name": "user", "filter": {"kind": "allow"}}]),
        "'kind'",
        "placementrules[0]: filter",
        id="filter",
    ),
    pytest.param(
        doc(root(), placementrules=[{"name": "user", "parent": {"name": "tag", "val": "x"}}]),
        "'val'",
        "placementrules[0]: parent",
        id="parent-rule",
    ),
    pytest.param(doc(root(), preemption={"enable": True}), "'enable'", "preemption", id="preemption"),
    pytest.param(
        doc(root(), nodesortpolicy={"policy": "fair"}), "'policy'", "nodesortpolicy", id="nodesortpolicy"
    ),
    pytest.param(doc(root(), usergroupresolver={"kind": "os"}), "'kind'", "usergroupresolver", id="resolver"),
]


@pytest.mark.parametrize(("text", "key", "where"), UNKNOWN_KEYS)
def test_unknown_keys_are_rejected(text: str, key: str, where: str) -> None:
    assert_rejected(text, "unknown key", key, where)


WRONG_TYPES = [
    pytest.param("- partitions", ["top level", "expected a map", "a list"], id="top-level-list"),
    pytest.param("partitions: default", ["'partitions' must be a list"], id="partitions-string"),
    pytest.param("partitions: [default]", ["partitions[0]", "expected a map"], id="partition-string"),
    pytest.param("checksum: [1]\npartitions: []", ["'checksum' must be a string"], id="checksum-list"),
    pytest.param(doc([], name=["a"]), ["'name' must be a string"], id="partition-name-list"),
    pytest.param(doc("root"), ["'queues' must be a list"], id="queues-string"),
    pytest.param(doc(["root"]), ["queues[0]", "expected a map"], id="queue-string"),
    pytest.param(doc(root(leaf({"x": 1}))), ["'name' must be a string"], id="queue-name-map"),
    pytest.param(
        doc(root(leaf("a", parent="true"))), ["root.a", "'parent' must be true or false"], id="parent-str"
    ),
    pytest.param(
        doc(root(leaf("a", maxapplications=-1))),
        ["root.a", "'maxapplications' must not be negative"],
        id="negative-maxapps",
    ),
    pytest.param(
        doc(root(leaf("a", maxapplications="5"))),
        ["'maxapplications' must be a non-negative integer"],
        id="maxapps-string",
    ),
    pytest.param(
        doc(root(leaf("a", maxapplications=1.5))),
        ["'maxapplications' must be a non-negative integer"],
        id="maxapps-float",
    ),
    pytest.param(
        doc(root(leaf("a", maxapplications=True))),
        ["'maxapplications' must be a non-negative integer"],
        id="maxapps-bool",
    ),
    pytest.param(
        doc(root(leaf("a", maxapplications=2**64))), ["'maxapplications' is too large"], id="maxapps-huge"
    ),
    pytest.param(
        doc(root(leaf("a", queues={"name": "b"}))), ["root.a", "'queues' must be a list"], id="children-map"
    ),
    pytest.param(
        doc(root(leaf("a", properties=["x"]))),
        ["root.a", "'properties'", "expected a map"],
        id="properties-list",
    ),
    pytest.param(
        doc(root(leaf("a", properties={"x": [1]}))),
        ["'properties' value for 'x' must be a string"],
        id="property-value-list",
    ),
    pytest.param(doc(root(leaf("a", submitacl=["bob"]))), ["'submitacl' must be a string"], id="acl-list"),
    pytest.param(
        doc(root(leaf("a", resources="max"))), ["root.a': resources", "expected a map"], id="resources-string"
    ),
    pytest.param(
        doc(root(leaf("a", resources={"max": ["1"]}))), ["resources: max", "expected a map"], id="max-list"
    ),
    pytest.param(
        doc(root(leaf("a", resources={"max": {"memory": "1X"}}))),
        ["queue 'root.a': resources: max", "'memory'", "'1X'"],
        id="bad-quantity",
    ),
    pytest.param(
        doc(root(leaf("a", resources={"guaranteed": {"vcore": "-1"}}))),
        ["queue 'root.a': resources: guaranteed", "negative"],
        id="negative-quantity",
    ),
    pytest.param(
        doc(root(parent("p", childtemplate={"resources": {"max": {"vcore": "x"}}}))),
        ["root.p': childtemplate: resources: max", "'vcore'"],
        id="template-bad-quantity",
    ),
    pytest.param(
        doc(root(parent("p", childtemplate={"maxapplications": -2}))),
        ["childtemplate", "must not be negative"],
        id="template-negative-maxapps",
    ),
    pytest.param(
        doc(root(parent("p", childtemplate=[1]))), ["childtemplate", "expected a map"], id="template-list"
    ),
    pytest.param(doc(root(), limits={"users": ["bob"]}), ["'limits' must be a list"], id="limits-map"),
    pytest.param(doc(root(), limits=["bob"]), ["limits[0]", "expected a map"], id="limit-string"),
    pytest.param(
        doc(root(), limits=[{"users": "bob", "maxapplications": 1}]),
        ["'users' must be a list"],
        id="limit-users-string",
    ),
    pytest.param(
        doc(root(), limits=[{"users": [["bob"]], "maxapplications": 1}]),
        ["'users' entries must be strings"],
        id="limit-user-list",
    ),
    pytest.param(
        doc(root(), limits=[{"users": [None], "maxapplications": 1}]),
        ["'users' entries must be strings"],
        id="limit-user-null",
    ),
    pytest.param(
        doc(root(), limits=[{"users": ["bob"], "maxresources": {"memory": "lots"}}]),
        ["limits[0]: maxresources", "'lots'"],
        id="limit-bad-quantity",
    ),
    pytest.param(
        doc(root(), limits=[{"users": ["bob"], "maxapplications": -1}]),
        ["limits[0]", "must not be negative"],
        id="limit-negative-maxapps",
    ),
    pytest.param(
        doc(root(), placementrules={"name": "user"}), ["'placementrules' must be a list"], id="rules-map"
    ),
    pytest.param(
        doc(root(), placementrules=[{"name": "user", "create": "yes"}]),
        ["placementrules[0]", "'create' must be true or false"],
        id="create-string",
    ),
    pytest.param(
        doc(root(), placementrules=[{"name": "user", "create": 1}]),
        ["'create' must be true or false"],
        id="create-int",
    ),
    pytest.param(
        doc(root(), placementrules=[{"name": "user", "filter": "allow"}]),
        ["placementrules[0]: filter", "expected a map"],
        id="filter-string",
    ),
    pytest.param(
        doc(root(), placementrules=[{"name": "user", "filter": {"users": "bob"}}]),
        ["'users' must be a list"],
        id="filter-users-string",
    ),
    pytest.param(
        doc(root(), placementrules=[{"name": "user", "parent": "tag"}]),
        ["placementrules[0]: parent", "expected a map"],
        id="parent-rule-string",
    ),
    pytest.param(
        doc(root(), placementrules=[{"name": "user", "parent": [{"name": "a"}, {"name": "b"}]}]),
        ["'parent' must be a single rule"],
        id="parent-rule-two",
    ),
    pytest.param(
        doc(root(), placementrules=[{"name": "fixed", "value": ["a"]}]),
        ["'value' must be a string"],
        id="value-list",
    ),
    pytest.param(
        doc(root(), preemption={"enabled": "false"}),
        ["preemption", "'enabled' must be true or false"],
        id="preemption-string",
    ),
    pytest.param(
        doc(root(), preemption={"quotapreemptionenabled": 0}),
        ["'quotapreemptionenabled' must be true or false"],
        id="quota-preemption-int",
    ),
    pytest.param(doc(root(), preemption=True), ["preemption", "expected a map"], id="preemption-bool"),
    pytest.param(
        doc(root(), nodesortpolicy="fair"), ["nodesortpolicy", "expected a map"], id="nodesort-string"
    ),
    pytest.param(
        doc(root(), nodesortpolicy={"resourceweights": {"vcore": "high"}}),
        ["resourceweights value for 'vcore' must be a number"],
        id="weight-string",
    ),
    pytest.param(
        doc(root(), nodesortpolicy={"resourceweights": {"vcore": True}}),
        ["resourceweights value for 'vcore' must be a number"],
        id="weight-bool",
    ),
    pytest.param(
        doc(root(), nodesortpolicy={"resourceweights": [1]}),
        ["resourceweights", "expected a map"],
        id="weights-list",
    ),
    pytest.param(
        doc(root(), usergroupresolver="os"), ["usergroupresolver", "expected a map"], id="resolver-string"
    ),
]


@pytest.mark.parametrize(("text", "fragments"), WRONG_TYPES)
def test_wrong_types_are_rejected(text: str, fragments: list[str]) -> None:
    assert_rejected(text, *fragments)


def test_scalars_become_strings_like_go() -> None:
    text = doc(
        root(leaf("a", properties={"priority.offset": 10, "flag": True, "ratio": 0.5, "empty": None})),
        placementrules=[{"name": "tag", "value": 42}],
    )
    config = load_config(text)
    assert find(config, "root.a").properties == {
        "priority.offset": "10",
        "flag": "true",
        "ratio": "0.5",
        "empty": "",
    }
    assert config.partitions[0].placement_rules[0].value == "42"


@pytest.mark.parametrize(
    "text",
    ["partitions: []", "partitions:", "# nothing but a comment", "---\n"],
    ids=["empty-list", "null", "comment-only", "empty-document"],
)
def test_no_partitions_is_rejected(text: str) -> None:
    assert_rejected(text, "no partitions defined")


# --- normalisation ---


def test_names_are_normalised() -> None:
    text = doc(
        [leaf("Sales", submitacl="Bob"), parent("ENG", leaf("Backend"))],
        name="Production",
        placementrules=[{"name": "Fixed", "value": "Sales", "filter": {"type": "ALLOW", "users": ["Bob"]}}],
        nodesortpolicy={"type": "BinPacking"},
        usergroupresolver={"type": "OS"},
    )
    config = load_config(text)
    partition = config.partitions[0]
    assert partition.name == "production"
    assert [queue.name for queue in partition.root.queues] == ["sales", "eng"]
    assert find(config, "root.eng.backend", "production").name == "backend"
    assert find(config, "root.sales", "production").submit_acl == "Bob"  # ACLs keep their case
    rule = partition.placement_rules[0]
    assert (rule.name, rule.value, rule.filter.type, rule.filter.users) == (
        "fixed",
        "Sales",
        "allow",
        ("Bob",),
    )
    assert partition.node_sort_policy.type == "binpacking"
    assert partition.user_group_resolver == "os"


@pytest.mark.parametrize("name", ["", "DEFAULT", "Default"], ids=["empty", "upper", "title"])
def test_default_partition_name(name: str) -> None:
    assert load_config(doc(root(), name=name)).partitions[0].name == "default"


def test_missing_partition_name_is_default() -> None:
    assert load_config("partitions:\n  - queues: [{name: root}]\n").partitions[0].name == "default"


@pytest.mark.parametrize(
    ("queues", "children"),
    [
        pytest.param([leaf("a"), leaf("b")], ["a", "b"], id="several-top-level"),
        pytest.param([leaf("a")], ["a"], id="single-not-root"),
        pytest.param([parent("rooted", leaf("x"))], ["rooted"], id="root-prefix-is-not-root"),
        pytest.param([leaf("root"), leaf("other")], ["root", "other"], id="root-among-others"),
    ],
)
def test_root_is_inserted(queues: list[dict[str, Any]], children: list[str]) -> None:
    partition = load_config(doc(queues)).partitions[0]
    assert len(partition.queues) == 1
    assert partition.root.name == "root"
    assert partition.root.parent is True
    assert [child.name for child in partition.root.queues] == children


@pytest.mark.parametrize("name", ["root", "ROOT", "Root"])
def test_single_root_is_kept_and_forced_parent(name: str) -> None:
    partition = load_config(doc([{"name": name, "submitacl": "bob", "parent": False}])).partitions[0]
    assert partition.root.name == "root"
    assert partition.root.parent is True
    assert partition.root.submit_acl == "bob"
    assert partition.root.queues == ()


def test_inserted_root_paths_appear_in_messages() -> None:
    assert_rejected(doc([leaf("a", resources=res({"memory": 2}, {"memory": 1}))]), "queue 'root.a'")


def test_all_zero_resources_are_dropped_but_mixed_zero_kept() -> None:
    text = doc(
        root(
            leaf("a", resources=res({"vcore": 0}, {"vcore": 0, "memory": 0})),
            leaf("b", resources=res(max={"vcore": 0, "memory": "1G"})),
            parent("p", childtemplate={"resources": res({"vcore": 0}, {"vcore": 2})}),
        )
    )
    config = load_config(text)
    assert find(config, "root.a").resources == ResourcesConfig()
    assert find(config, "root.b").resources.max == {"vcore": 0, "memory": 10**9}
    template = find(config, "root.p").child_template
    assert template is not None
    assert template.resources == ResourcesConfig(guaranteed={}, max={"vcore": 2000})


def test_resources_are_converted() -> None:
    text = doc(
        root(leaf("a", resources=res({"vcore": "500m", "memory": "1Gi"}, {"vcore": 2, "memory": "2G"})))
    )
    assert find(load_config(text), "root.a").resources == ResourcesConfig(
        guaranteed={"vcore": 500, "memory": 2**30}, max={"vcore": 2000, "memory": 2 * 10**9}
    )


def test_child_template_parsed_and_empty_template_is_none() -> None:
    text = doc(
        root(
            parent(
                "p",
                childtemplate={
                    "maxapplications": 4,
                    "properties": {"application.sort.policy": "fair"},
                    "resources": res({"memory": "1Mi"}),
                },
            ),
            parent("q", childtemplate={}),
        )
    )
    config = load_config(text)
    assert find(config, "root.p").child_template == ChildTemplateConfig(
        max_applications=4,
        properties={"application.sort.policy": "fair"},
        resources=ResourcesConfig(guaranteed={"memory": 2**20}),
    )
    assert find(config, "root.q").child_template is None


def test_preemption_and_node_sort_settings() -> None:
    text = doc(
        root(),
        preemption={"enabled": False, "quotapreemptionenabled": True},
        nodesortpolicy={"type": "", "resourceweights": {"vcore": 2, "memory": 0.5, "nvidia.com/gpu": 4.0}},
    )
    partition = load_config(text).partitions[0]
    assert partition.preemption.enabled is False
    assert partition.preemption.quota_preemption_enabled is True
    assert partition.node_sort_policy.type == "fair"
    assert partition.node_sort_policy.resource_weights == {"vcore": 2.0, "memory": 0.5, "nvidia.com/gpu": 4.0}


def test_empty_resource_weights_mean_default() -> None:
    partition = load_config(doc(root(), nodesortpolicy={"resourceweights": {}})).partitions[0]
    assert partition.node_sort_policy.resource_weights == DEFAULT_RESOURCE_WEIGHTS


def test_validate_config_is_idempotent() -> None:
    config = load_config(
        doc(
            [leaf("a", resources=res({"vcore": 1}, {"vcore": 2})), parent("b")],
            limits=[limit(["bob"], maxapplications=3)],
            placementrules=[{"name": "user", "create": True}],
        )
    )
    assert validate_config(config) == config


def test_parent_rule_list_spelling_from_the_guide() -> None:
    text = doc(root(), placementrules=[{"name": "user", "parent": [{"name": "tag", "value": "namespace"}]}])
    rule = load_config(text).partitions[0].placement_rules[0]
    assert rule.parent == PlacementRuleConfig(name="tag", value="namespace")
