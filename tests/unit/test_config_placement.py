"""queues.yaml validation of placement rules (reference 2.3)."""

from __future__ import annotations

from typing import Any

import pytest
from config_helpers import assert_rejected, doc, leaf, parent, root

from korral.config import load_config

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
