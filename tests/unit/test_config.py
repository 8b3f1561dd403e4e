"""queues.yaml loading: strict parsing, normalisation and every validation rule (reference 2.3)."""

from __future__ import annotations

import textwrap
from typing import Any

import attrs
import pytest
import yaml

from korral.config import (
    DEFAULT_CONFIG_TEXT,
    DEFAULT_RESOURCE_WEIGHTS,
    ChildTemplateConfig,
    LimitConfig,
    PlacementRuleConfig,
    QueueConfig,
    ResourcesConfig,
    SchedulerConfig,
    config_checksum,
    default_config,
    load_config,
    parse_quantity,
    validate_config,
)
from korral.errors import ConfigError, KorralError

# --- helpers ---


def doc(queues: Any = None, **partition: Any) -> str:
    """A one-partition queues.yaml built from plain data (partition keys as keyword arguments)."""
    body: dict[str, Any] = {"name": "default", **partition}
    if queues is not None:
        body["queues"] = queues
    return yaml.safe_dump({"partitions": [body]})


def root(*children: dict[str, Any], **fields: Any) -> list[dict[str, Any]]:
    queue: dict[str, Any] = {"name": "root", **fields}
    if children:
        queue["queues"] = list(children)
    return [queue]


def leaf(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, **fields}


def parent(name: str, *children: dict[str, Any], **fields: Any) -> dict[str, Any]:
    queue: dict[str, Any] = {"name": name, **fields}
    if children:
        queue["queues"] = list(children)
    else:
        queue["parent"] = True
    return queue


def res(guaranteed: dict[str, Any] | None = None, max: dict[str, Any] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if guaranteed is not None:
        resources["guaranteed"] = guaranteed
    if max is not None:
        resources["max"] = max
    return resources


def limit(users: list[str] | None = None, groups: list[str] | None = None, **fields: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"limit": "test limit", **fields}
    if users is not None:
        entry["users"] = users
    if groups is not None:
        entry["groups"] = groups
    return entry


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def find(config: SchedulerConfig, path: str, partition: str = "default") -> QueueConfig:
    part = config.partition(partition)
    assert part is not None
    queue = part.root
    for name in path.split(".")[1:]:
        queue = next(child for child in queue.queues if child.name == name)
    return queue


def assert_rejected(text: str, *fragments: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_config(text)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return caught.value


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


# --- rule 4: partition limits and root limits ---

BOB = limit(["bob"], maxapplications=2)
SUE = limit(["sue"], maxapplications=3)


def test_rule4_partition_limits_copied_to_root() -> None:
    partition = load_config(doc(root(leaf("a")), limits=[BOB])).partitions[0]
    expected = (LimitConfig(limit="test limit", users=("bob",), max_applications=2),)
    assert partition.root.limits == expected
    assert partition.limits == expected


def test_rule4_partition_limits_copied_to_inserted_root() -> None:
    partition = load_config(doc([leaf("a"), leaf("b")], limits=[BOB])).partitions[0]
    assert partition.root.limits[0].users == ("bob",)


def test_rule4_root_limits_only() -> None:
    partition = load_config(doc(root(limits=[BOB]))).partitions[0]
    assert partition.root.limits[0].users == ("bob",)
    assert partition.limits == partition.root.limits


def test_rule4_equal_limits_pass() -> None:
    partition = load_config(doc(root(limits=[BOB]), limits=[BOB])).partitions[0]
    assert len(partition.root.limits) == 1


def test_rule4_different_limits_fail() -> None:
    assert_rejected(
        doc(root(limits=[BOB]), limits=[SUE]), "partition 'default'", "partition limits and root queue limits"
    )


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


# --- rule 6: limit entries ---


@pytest.mark.parametrize(
    "limits",
    [
        pytest.param([limit(["sue", "bob"], maxapplications=10)], id="users-maxapps"),
        pytest.param([limit(groups=["dev"], maxresources={"memory": "1G"})], id="group-maxresources"),
        pytest.param([limit(["bob"], maxresources={"memory": "1G", "vcore": 0})], id="zero-next-to-nonzero"),
        pytest.param(
            [limit(["bob"], maxapplications=1), limit(["*"], maxapplications=1)], id="user-wildcard-last"
        ),
        pytest.param(
            [limit(groups=["dev"], maxapplications=1), limit(groups=["*"], maxapplications=1)],
            id="group-wildcard-with-named",
        ),
        pytest.param([limit(groups=["dev", "*"], maxapplications=1)], id="group-wildcard-same-list"),
        pytest.param(
            [limit(["_svc:acct#1/x@y.z-w$"], groups=["grp:a_b.c-d"], maxapplications=1)], id="name-characters"
        ),
        pytest.param([limit(["bob"], groups=["dev"], maxapplications=5)], id="users-and-groups"),
    ],
)
def test_rule6_valid_limits(limits: list[dict[str, Any]]) -> None:
    config = load_config(
        doc(root(leaf("a", limits=limits, maxapplications=10, resources=res(max={"memory": "2G"}))))
    )
    assert len(find(config, "root.a").limits) == len(limits)


@pytest.mark.parametrize(
    ("limits", "fragments"),
    [
        pytest.param([limit(maxapplications=1)], ["empty user and group lists"], id="no-users-or-groups"),
        pytest.param([limit([], [], maxapplications=1)], ["empty user and group lists"], id="empty-lists"),
        pytest.param([limit(["1bob"], maxapplications=1)], ["invalid limit user name '1bob'"], id="bad-user"),
        pytest.param([limit(["bob smith"], maxapplications=1)], ["invalid limit user name"], id="user-space"),
        pytest.param(
            [limit(groups=["dev@x"], maxapplications=1)], ["invalid limit group name 'dev@x'"], id="bad-group"
        ),
        pytest.param(
            [limit(groups=["dev$"], maxapplications=1)], ["invalid limit group name"], id="group-dollar"
        ),
        pytest.param(
            [limit(["bob"], maxapplications=1), limit(["bob"], maxapplications=2)],
            ["limit #1", "duplicated user name 'bob'"],
            id="duplicate-user",
        ),
        pytest.param(
            [limit(["bob", "bob"], maxapplications=1)],
            ["duplicated user name 'bob'"],
            id="duplicate-user-same-list",
        ),
        pytest.param(
            [limit(groups=["dev"], maxapplications=1), limit(groups=["dev"], maxapplications=1)],
            ["duplicated group name 'dev'"],
            id="duplicate-group",
        ),
        pytest.param(
            [limit(["*"], maxapplications=1), limit(["bob"], maxapplications=1)],
            ["should not set no wildcard user bob after wildcard user limit"],
            id="user-after-wildcard",
        ),
        pytest.param(
            [limit(["*", "bob"], maxapplications=1)],
            ["should not set no wildcard user bob"],
            id="user-after-wildcard-same-list",
        ),
        pytest.param(
            [limit(["*"], maxapplications=1), limit(["*"], maxapplications=1)],
            ["duplicated user name '*'"],
            id="two-user-wildcards",
        ),
        pytest.param(
            [limit(["bob"], groups=["*"], maxapplications=1)],
            ["should not specify only one group limit that is using the wildcard"],
            id="lone-group-wildcard",
        ),
        pytest.param(
            [limit(groups=["*", "dev"], maxapplications=1)],
            ["should not set no wildcard group dev after wildcard group limit"],
            id="group-after-wildcard",
        ),
        pytest.param(
            [limit(groups=["*"], maxapplications=1), limit(groups=["dev"], maxapplications=1)],
            ["only one group limit that is using the wildcard"],
            id="group-wildcard-first",
        ),
        pytest.param(
            [limit(["bob"], maxresources={"memory": 0, "vcore": 0}, maxapplications=1)],
            ["maxresources is zero"],
            id="all-zero-maxresources",
        ),
        pytest.param([limit(["bob"])], ["all resource limits are null"], id="nothing-limited"),
        pytest.param(
            [limit(["bob"], maxapplications=11)],
            ["limit #0 'test limit'", "exceeds the queue maxapplications 10"],
            id="maxapps-over-queue",
        ),
        pytest.param(
            [limit(["bob"], maxresources={"memory": "3G"})],
            ["exceeds the queue max resources"],
            id="maxresources-over-queue",
        ),
    ],
)
def test_rule6_invalid_limits(limits: list[dict[str, Any]], fragments: list[str]) -> None:
    text = doc(root(leaf("a", limits=limits, maxapplications=10, resources=res(max={"memory": "2G"}))))
    assert_rejected(text, "partition 'default'", "queue 'root.a'", *fragments)


def test_rule6_limit_types_undefined_in_queue_max_are_unlimited() -> None:
    text = doc(
        root(
            leaf("a", limits=[limit(["bob"], maxresources={"vcore": 100})], resources=res(max={"memory": 1}))
        )
    )
    assert find(load_config(text), "root.a").limits[0].max_resources == {"vcore": 100_000}


def test_rule6_partition_limits_checked_against_root() -> None:
    assert_rejected(
        doc(root(), limits=[limit(["1x"], maxapplications=1)]), "queue 'root'", "invalid limit user name"
    )


def test_rule6_root_limit_resources_not_checked_against_cluster() -> None:
    config = load_config(doc(root(limits=[limit(["bob"], maxresources={"memory": "1E"})])))
    assert config.partitions[0].root.limits[0].max_resources == {"memory": 10**18}


def test_rule6_root_limit_maxapps_checked_against_root_maxapps() -> None:
    assert_rejected(
        doc(root(maxapplications=2, limits=[limit(["bob"], maxapplications=3)])),
        "queue 'root'",
        "exceeds the queue maxapplications 2",
    )


def test_rule6_wildcard_order_is_per_queue() -> None:
    # a wildcard at the root does not constrain the order of entries in a child queue
    text = doc(
        root(leaf("a", limits=[limit(["bob"], maxapplications=1)]), limits=[limit(["*"], maxapplications=1)])
    )
    assert find(load_config(text), "root.a").limits[0].users == ("bob",)


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


# --- rule 8: placement rules ---

RULE_QUEUES = root(
    leaf("leafq"),
    parent("users"),
    parent("deep", parent("inner")),
    leaf("default"),
)


@pytest.mark.parametrize(
    "rules",
    [
        pytest.param([{"name": "provided"}], id="provided"),
        pytest.param([{"name": "Provided", "create": True}], id="case-insensitive"),
        pytest.param([{"name": "user", "create": True}], id="user"),
        pytest.param([{"name": "tag", "value": "namespace"}], id="tag"),
        pytest.param([{"name": "fixed", "value": "leafq"}], id="fixed-existing-leaf"),
        pytest.param([{"name": "fixed", "value": "root.leafq"}], id="fixed-qualified-leaf"),
        pytest.param([{"name": "fixed", "value": "ROOT.LeafQ"}], id="fixed-qualified-case"),
        pytest.param([{"name": "fixed", "value": "newq", "create": True}], id="fixed-create"),
        pytest.param(
            [{"name": "fixed", "value": "root.users.new.deeper", "create": True}],
            id="fixed-create-under-parent",
        ),
        pytest.param(
            [{"name": "fixed", "value": "root.deep.new", "create": True}], id="fixed-create-sibling"
        ),
        pytest.param(
            [{"name": "user", "parent": {"name": "fixed", "value": "users"}}], id="fixed-parent-is-parent"
        ),
        pytest.param(
            [{"name": "user", "parent": {"name": "fixed", "value": "root.deep.inner"}}],
            id="fixed-parent-nested",
        ),
        pytest.param(
            [
                {
                    "name": "user",
                    "parent": {
                        "name": "fixed",
                        "value": "inner",
                        "parent": {"name": "fixed", "value": "root.deep"},
                    },
                }
            ],
            id="fixed-chain-qualified-first",
        ),
        pytest.param(
            [{"name": "user", "create": True, "parent": {"name": "fixed", "value": "root.newparent"}}],
            id="dynamic-chain-create",
        ),
        pytest.param(
            [{"name": "fixed", "value": "leafq", "parent": {"name": "user"}}],
            id="fixed-after-dynamic-not-checked",
        ),
        pytest.param(
            [{"name": "User"}, {"name": "PROVIDED"}, {"name": "Tag", "value": "ns"}], id="name-case"
        ),
        pytest.param(
            [{"name": "user", "filter": {"type": "allow", "users": ["bob", "sue"]}}], id="filter-users"
        ),
        pytest.param(
            [{"name": "user", "filter": {"type": "DENY", "groups": ["dev"]}}], id="filter-deny-case"
        ),
        pytest.param([{"name": "user", "filter": {"type": "", "users": ["dev.*"]}}], id="filter-user-regexp"),
        pytest.param([{"name": "user", "filter": {"groups": ["^dev-[a-z]+$"]}}], id="filter-group-regexp"),
        pytest.param(
            [{"name": "user", "filter": {"users": ["bad user!", "bob"]}}], id="filter-list-ignores-bad-names"
        ),
        pytest.param([{"name": "user", "filter": {"users": ["bob@corp.com"]}}], id="filter-single-user"),
        pytest.param([{"name": "user", "filter": {"type": "deny"}}], id="filter-deny-all"),
    ],
)
def test_rule8_valid_placement_rules(rules: list[dict[str, Any]]) -> None:
    config = load_config(doc(RULE_QUEUES, placementrules=rules))
    assert len(config.partitions[0].placement_rules) == len(rules)


@pytest.mark.parametrize(
    ("rules", "fragments"),
    [
        pytest.param(
            [{"name": "1rule"}], ["placement rule #0 (1rule)", "invalid rule name '1rule'"], id="digit-first"
        ),
        pytest.param([{"name": "my-rule"}], ["invalid rule name 'my-rule'"], id="dash"),
        pytest.param([{"name": ""}], ["invalid rule name ''"], id="empty-name"),
        pytest.param([{}], ["invalid rule name ''"], id="missing-name"),
        pytest.param([{"name": "recovery"}], ["recovery rule cannot be part of the config"], id="recovery"),
        # korral is stricter than YuniKorn here: its validator passes these names, and then its
        # partition rejects every application (docs/api.md)
        pytest.param(
            [{"name": "custom_rule"}],
            ["placement rule #0 (custom_rule)", "unknown placement rule name 'custom_rule'"],
            id="unknown-but-valid-identifier",
        ),
        pytest.param([{"name": "_x1"}], ["unknown placement rule name '_x1'"], id="underscore-identifier"),
        pytest.param([{"name": "test"}], ["unknown placement rule name 'test'"], id="yunikorns-test-rule"),
        pytest.param(
            [{"name": "user", "parent": {"name": "namespaces"}}],
            ["parent rule (namespaces)", "unknown placement rule name 'namespaces'"],
            id="unknown-parent",
        ),
        pytest.param(
            [{"name": "Recovery"}], ["recovery rule cannot be part of the config"], id="recovery-case"
        ),
        pytest.param(
            [{"name": "user"}, {"name": "user", "parent": {"name": "recovery"}}],
            ["placement rule #1 (user): parent rule (recovery)", "recovery rule cannot"],
            id="recovery-parent",
        ),
        pytest.param(
            [{"name": "user", "parent": {"name": "bad-name"}}],
            ["parent rule", "invalid rule name"],
            id="bad-parent-name",
        ),
        pytest.param(
            [{"name": "user", "parent": {"name": "tag", "parent": {"name": "x y"}}}],
            ["invalid rule name 'x y'"],
            id="bad-grandparent-name",
        ),
        pytest.param(
            [{"name": "user", "filter": {"type": "maybe"}}],
            ["invalid rule filter type maybe"],
            id="filter-type",
        ),
        pytest.param(
            [{"name": "user", "filter": {"users": ["bad user!"]}}],
            ["invalid rule filter user list is not a proper list or regexp"],
            id="filter-user-not-regexp",
        ),
        pytest.param(
            [{"name": "user", "filter": {"users": ["dev["]}}],
            ["invalid rule filter user list"],
            id="filter-user-bad-regexp",
        ),
        pytest.param(
            [{"name": "user", "filter": {"groups": ["dev@corp"]}}],
            ["invalid rule filter group list"],
            id="filter-group-not-regexp",
        ),
        pytest.param(
            [{"name": "user", "filter": {"groups": ["(dev"]}}],
            ["invalid rule filter group list"],
            id="filter-group-bad-regexp",
        ),
        pytest.param(
            [{"name": "user", "parent": {"name": "tag", "value": "ns", "filter": {"type": "no"}}}],
            ["parent rule (tag)", "invalid rule filter type"],
            id="parent-filter",
        ),
        pytest.param([{"name": "tag"}], ["a tag rule must have the tag name set"], id="tag-no-value"),
        pytest.param(
            [{"name": "tag", "value": "  "}], ["a tag rule must have the tag name set"], id="tag-blank-value"
        ),
        pytest.param([{"name": "fixed"}], ["a fixed rule must have a queue name set"], id="fixed-no-value"),
        pytest.param(
            [{"name": "user", "parent": {"name": "fixed"}}],
            ["a fixed rule must have a queue name"],
            id="fixed-parent-no-value",
        ),
        pytest.param(
            [{"name": "fixed", "value": "root.leafq", "parent": {"name": "user"}}],
            ["fully qualified queue name (root.leafq) cannot have a parent rule"],
            id="qualified-with-parent",
        ),
        pytest.param(
            [
                {
                    "name": "fixed",
                    "value": "leafq",
                    "parent": {"name": "fixed", "value": "root.deep", "parent": {"name": "user"}},
                }
            ],
            ["parent rule (fixed)", "cannot have a parent rule"],
            id="qualified-parent-with-parent",
        ),
        pytest.param(
            [{"name": "fixed", "value": "a b", "create": True}],
            ["invalid queue name 'a b'"],
            id="fixed-bad-queue-name",
        ),
        pytest.param(
            [{"name": "fixed", "value": "root..a", "create": True}],
            ["invalid queue name ''"],
            id="fixed-empty-part",
        ),
        pytest.param(
            [{"name": "fixed", "value": "missing"}],
            [
                "placement rule no. #0 (fixed) references non-existing queues (root.missing) "
                "and create is 'false'"
            ],
            id="fixed-missing",
        ),
        pytest.param(
            [{"name": "provided"}, {"name": "fixed", "value": "root.deep.missing"}],
            ["placement rule no. #1 (fixed)", "non-existing queues (root.deep.missing)"],
            id="fixed-missing-second-rule",
        ),
        pytest.param(
            [{"name": "fixed", "value": "users.x"}],
            ["non-existing queues (root.users.x)"],
            id="fixed-missing-under-empty-parent",
        ),
        pytest.param(
            [{"name": "fixed", "value": "users"}],
            ["references a queue (root.users) which is not a leaf"],
            id="fixed-parent-queue",
        ),
        pytest.param(
            [{"name": "fixed", "value": "root", "create": True}],
            ["references a queue (root) which is not a leaf"],
            id="fixed-root",
        ),
        pytest.param(
            [{"name": "user", "parent": {"name": "fixed", "value": "leafq"}}],
            ["(fixed->user)", "references a queue (root.leafq) which is a leaf"],
            id="dynamic-under-leaf",
        ),
        pytest.param(
            [{"name": "fixed", "value": "root.leafq.sub", "create": True}],
            [
                "non-existing queues (root.leafq.sub) which cannot be created because the last queue "
                "(root.leafq) in the hierarchy is a leaf"
            ],
            id="create-under-leaf",
        ),
        pytest.param(
            [{"name": "user", "parent": {"name": "fixed", "value": "root.missing"}}],
            ["(fixed->user) references non-existing queues (root.missing)"],
            id="dynamic-chain-missing",
        ),
        pytest.param(
            [
                {
                    "name": "tag",
                    "value": "ns",
                    "parent": {
                        "name": "fixed",
                        "value": "sub",
                        "parent": {"name": "fixed", "value": "root.deep"},
                    },
                }
            ],
            ["(fixed->fixed->tag) references non-existing queues (root.deep.sub)"],
            id="three-rule-chain",
        ),
    ],
)
def test_rule8_invalid_placement_rules(rules: list[dict[str, Any]], fragments: list[str]) -> None:
    assert_rejected(doc(RULE_QUEUES, placementrules=rules), "partition 'default'", *fragments)


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


# --- rule 10: maxapplications ---


@pytest.mark.parametrize(
    "queues",
    [
        pytest.param(root(parent("p", leaf("a", maxapplications=5), maxapplications=10)), id="child-smaller"),
        pytest.param(root(parent("p", leaf("a", maxapplications=10), maxapplications=10)), id="child-equal"),
        pytest.param(root(parent("p", leaf("a", maxapplications=50))), id="parent-unset"),
        pytest.param(root(parent("p", leaf("a"))), id="both-unset"),
        pytest.param(
            root(
                parent("p", parent("q", leaf("a", maxapplications=2), maxapplications=3), maxapplications=4)
            ),
            id="three-levels",
        ),
    ],
)
def test_rule10_valid_max_applications(queues: list[dict[str, Any]]) -> None:
    load_config(doc(queues))


@pytest.mark.parametrize(
    ("queues", "fragments"),
    [
        pytest.param(
            root(parent("p", leaf("a", maxapplications=11), maxapplications=10)),
            ["queue 'root.p.a'", "parent maxRunningApps must be larger than child maxRunningApps"],
            id="child-larger",
        ),
        pytest.param(
            root(parent("p", leaf("a"), maxapplications=10)),
            ["queue 'root.p.a'", "parent maxRunningApps", "child maxapplications unset"],
            id="child-unset",
        ),
        pytest.param(
            root(
                parent("p", parent("q", leaf("a", maxapplications=5), maxapplications=3), maxapplications=4)
            ),
            ["queue 'root.p.q.a'", "parent root.p.q maxapplications 3"],
            id="grandchild-larger",
        ),
        pytest.param(
            root(leaf("a", maxapplications=3), maxapplications=2),
            ["queue 'root.a'", "parent root"],
            id="root-set",
        ),
    ],
)
def test_rule10_invalid_max_applications(queues: list[dict[str, Any]], fragments: list[str]) -> None:
    assert_rejected(doc(queues), "partition 'default'", *fragments)


# --- rule 11: user/group limit hierarchy ---


@pytest.mark.parametrize(
    "queues",
    [
        pytest.param(
            root(
                leaf("a", limits=[limit(["bob"], maxapplications=5)]),
                limits=[limit(["bob"], maxapplications=10)],
            ),
            id="child-user-smaller",
        ),
        pytest.param(
            root(
                leaf("a", limits=[limit(["bob"], maxapplications=20)]),
                limits=[limit(["sue"], maxapplications=10)],
            ),
            id="different-user",
        ),
        pytest.param(
            root(
                leaf("a", limits=[limit(groups=["dev"], maxresources={"memory": "1G"})]),
                limits=[limit(groups=["dev"], maxresources={"memory": "2G"})],
            ),
            id="child-group-smaller",
        ),
        pytest.param(
            root(
                leaf("a", limits=[limit(["bob"], maxresources={"vcore": 100})]),
                limits=[limit(["bob"], maxresources={"memory": "2G"})],
            ),
            id="type-undefined-upstream",
        ),
        pytest.param(
            root(
                leaf("a", limits=[limit(["bob"], maxapplications=3)]),
                limits=[limit(["bob"], maxresources={"memory": "2G"})],
            ),
            id="ancestor-apps-unlimited",
        ),
        pytest.param(
            root(
                leaf("a", limits=[limit(["bob"], maxapplications=2)]),
                limits=[limit(["*"], maxapplications=2)],
            ),
            id="under-wildcard-within",
        ),
        pytest.param(
            root(
                parent("p", leaf("a", limits=[limit(["bob"], maxapplications=4)])),
                limits=[limit(["bob"], maxapplications=5)],
            ),
            id="through-queue-without-limits",
        ),
    ],
)
def test_rule11_valid_limit_hierarchy(queues: list[dict[str, Any]]) -> None:
    load_config(doc(queues))


@pytest.mark.parametrize(
    ("queues", "fragments"),
    [
        pytest.param(
            root(
                leaf("a", limits=[limit(["bob"], maxapplications=20)]),
                limits=[limit(["bob"], maxapplications=10)],
            ),
            ["queue 'root.a'", "user bob max applications 20", "ancestor parent max applications 10"],
            id="user-apps-over",
        ),
        pytest.param(
            root(
                leaf("a", limits=[limit(["bob"], maxresources={"memory": 1})]),
                limits=[limit(["bob"], maxapplications=10)],
            ),
            ["user bob max applications 0"],
            id="user-apps-unlimited-under-set",
        ),
        pytest.param(
            root(
                leaf("a", limits=[limit(groups=["dev"], maxresources={"memory": "3G"})]),
                limits=[limit(groups=["dev"], maxresources={"memory": "2G"})],
            ),
            [
                "queue 'root.a'",
                "group dev max resource {memory:3000000000}",
                "ancestor parent maximum resource {memory:2000000000}",
            ],
            id="group-resources-over",
        ),
        pytest.param(
            root(
                leaf("a", limits=[limit(["bob"], maxapplications=3)]),
                limits=[limit(["*"], maxapplications=2)],
            ),
            ["user bob max applications 3", "max applications 2"],
            id="over-wildcard",
        ),
        pytest.param(
            root(
                parent("p", leaf("a", limits=[limit(["bob"], maxapplications=6)])),
                limits=[limit(["bob"], maxapplications=5)],
            ),
            ["queue 'root.p.a'", "user bob max applications 6"],
            id="through-queue-without-limits",
        ),
        pytest.param(
            root(
                parent(
                    "p",
                    leaf("a", limits=[limit(["bob"], maxapplications=4)]),
                    limits=[limit(["bob"], maxapplications=3)],
                ),
                limits=[limit(["bob"], maxapplications=5)],
            ),
            ["queue 'root.p.a'", "user bob max applications 4", "max applications 3"],
            id="tightest-ancestor-wins",
        ),
        pytest.param(
            root(
                parent(
                    "p",
                    leaf("a", limits=[limit(["bob"], maxresources={"vcore": 3})]),
                    limits=[limit(["sue"], maxapplications=3)],
                ),
                limits=[limit(["bob"], maxresources={"vcore": 2})],
            ),
            ["queue 'root.p.a'", "user bob max resource {vcore:3000}"],
            id="skips-unrelated-limits",
        ),
        pytest.param(
            [leaf("a", limits=[limit(["bob"], maxapplications=9)])],
            ["user bob max applications 9"],
            id="partition-limits-are-root-limits",
        ),
    ],
)
def test_rule11_invalid_limit_hierarchy(queues: list[dict[str, Any]], fragments: list[str]) -> None:
    text = doc(queues)
    if queues[0]["name"] != "root":
        text = doc(queues, limits=[limit(["bob"], maxapplications=5)])
    assert_rejected(text, "partition 'default'", *fragments)


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


# --- documented examples (yunikorn-site queue_config.md, acls.md, placement-rules seed) ---

QUEUE_CONFIG_NAMESPACES = """
partitions:
  - name: default
    queues:
      - name: namespaces
        parent: true
        maxapplications: 12
        resources:
          guaranteed:
            {memory: 1G, vcore: 10}
          max:
            {memory: 10G, vcore: 100}
        queues:
          - name: level1
            maxapplications: 8
            resources:
              guaranteed:
                {memory: 500M, vcore: 5}
              max:
                {memory: 5G, vcore: 50}
"""

QUEUE_CONFIG_CHILD_TEMPLATE = """
 partitions:
   - name: default
     placementrules:
       - name: provided
         create: true
     queues:
       - name: root
         submitacl: '*'
         childtemplate:
           maxapplications: 10
           properties:
             application.sort.policy: fifo
           resources:
             guaranteed:
               vcore: 1
               memory: 1G
             max:
               vcore: 20
               memory: 600G
         queues:
           - name: parent
             parent: true
             childtemplate:
               resources:
                 max:
                   vcore: 21
                   memory: 610G
           - name: notemplate
             parent: true
"""

QUEUE_CONFIG_LIMITS = """
partitions:
  - name: default
    queues:
      - name: root
        queues:
          - name: team
            limits:
              - limit: "example entry"
                maxapplications: 10
                users:
                - sue
                - bob
"""

SEED_PROVIDED = """
partitions:
  - name: default
    placementrules:
      - name: provided
        create: true
        parent:
          name: user
          create: true
    queues:
      - name: root
        submitacl: '*'
"""

SEED_USER = """
partitions:
  - name: default
    placementrules:
      - name: user
        create: false
    queues:
      - name: root
        queues:
          - name: finance_dot_test
"""

SEED_FIXED = """
partitions:
  - name: default
    placementrules:
      - name: fixed
        value: last_resort
    queues:
      - name: root
        queues:
          - name: last_resort
"""

SEED_TAG = """
partitions:
  - name: default
    placementrules:
      - name: tag
        value: namespace
        create: true
    queues:
      - name: root
"""

# The guide's first complex example, parent rules spelled as one-entry lists as the guide writes them.
SEED_COMPLEX = """
partitions:
  - name: default
    placementrules:
      - name: user
        create: true
        filter:
          type: allow
          groups:
            - dev*
        parent:
          - name: tag
            value: namespace
      - name: tag
        value: namespace
        create: true
        parent:
          - name: fixed
            value: root.namespaces
            filter:
              type: allow
              users:
                - john
      - name: fixed
        value: root.default
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: namespaces
            parent: true
          - name: default
"""

SEED_PRODUCTION = """
partitions:
- name: default
  queues:
  - name: production
    submitacl: john,bob
  placementrules:
  - name: fixed
    value: root.production
  - name: user
    create: true
"""


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(QUEUE_CONFIG_NAMESPACES, id="queue-config-namespaces"),
        pytest.param(QUEUE_CONFIG_CHILD_TEMPLATE, id="queue-config-child-template"),
        pytest.param(QUEUE_CONFIG_LIMITS, id="queue-config-limits"),
        pytest.param(SEED_PROVIDED, id="seed-provided"),
        pytest.param(SEED_USER, id="seed-user"),
        pytest.param(SEED_FIXED, id="seed-fixed"),
        pytest.param(SEED_TAG, id="seed-tag"),
        pytest.param(SEED_COMPLEX, id="seed-complex"),
        pytest.param(SEED_PRODUCTION, id="seed-production"),
    ],
)
def test_documented_examples_load(text: str) -> None:
    config = load_config(text)
    assert config.partitions[0].root.name == "root"


def test_documented_namespaces_example_values() -> None:
    config = load_config(QUEUE_CONFIG_NAMESPACES)
    namespaces = find(config, "root.namespaces")
    assert namespaces.is_parent and namespaces.max_applications == 12
    assert namespaces.resources.guaranteed == {"memory": 10**9, "vcore": 10_000}
    level1 = find(config, "root.namespaces.level1")
    assert level1.resources.max == {"memory": 5 * 10**9, "vcore": 50_000}
    assert not level1.is_parent


def test_documented_child_template_example_values() -> None:
    config = load_config(QUEUE_CONFIG_CHILD_TEMPLATE)
    template = config.partitions[0].root.child_template
    assert template == ChildTemplateConfig(
        max_applications=10,
        properties={"application.sort.policy": "fifo"},
        resources=ResourcesConfig(
            guaranteed={"vcore": 1000, "memory": 10**9}, max={"vcore": 20_000, "memory": 600 * 10**9}
        ),
    )
    assert find(config, "root.notemplate").child_template is None
    parent_template = find(config, "root.parent").child_template
    assert parent_template is not None
    assert parent_template.resources.max == {"vcore": 21_000, "memory": 610 * 10**9}


def test_documented_complex_example_rules() -> None:
    rules = load_config(SEED_COMPLEX).partitions[0].placement_rules
    assert [rule.name for rule in rules] == ["user", "tag", "fixed"]
    assert rules[0].filter.groups == ("dev*",)
    assert rules[0].parent == PlacementRuleConfig(name="tag", value="namespace")
    assert rules[1].parent is not None and rules[1].parent.filter.users == ("john",)


def test_documented_fixed_example_needs_the_queue() -> None:
    # the guide's fixed rule has no create flag, so root.last_resort must be configured as a leaf
    assert_rejected(
        SEED_FIXED.replace("        queues:\n          - name: last_resort\n", ""),
        "references non-existing queues (root.last_resort) and create is 'false'",
    )


def test_documented_partition_example_with_string_nodesortpolicy_is_rejected() -> None:
    # queue_config.md shows `nodesortpolicy: fair`; YuniKorn's strict parser refuses a string there
    text = dedent(
        """
        partitions:
          - name: default
            nodesortpolicy: fair
            preemption:
              enabled: false
            queues:
              - name: root
        """
    )
    assert_rejected(text, "nodesortpolicy", "expected a map")
