"""Placement rules: every seed example, and filters."""

from __future__ import annotations

import pytest
from placement_helpers import OPEN, Expected, FakeTree, Rejected, cases, check, placed, req, rule, tree

from korral.config.schema import FilterConfig, PlacementRuleConfig
from korral.policies.placement import NO_RULE_MATCHED, PlacementError, PlacementManager, PlacementRequest


def allow(users: tuple[str, ...] = (), groups: tuple[str, ...] = ()) -> FilterConfig:
    return FilterConfig(type="allow", users=users, groups=groups)


def deny(users: tuple[str, ...] = (), groups: tuple[str, ...] = ()) -> FilterConfig:
    return FilterConfig(type="deny", users=users, groups=groups)


# --- the seed document's examples ---------------------------------------------------------------------------

PROVIDED_UNDER_USER = (rule("provided", create=True, parent=rule("user", create=True)),)
USER_NO_CREATE = (rule("user"),)
FIXED_LAST_RESORT = (rule("fixed", value="last_resort"),)
TAG_NAMESPACE = (rule("tag", value="namespace", create=True),)

COMPLEX = (
    rule("user", create=True, filter=allow(groups=("dev*",)), parent=rule("tag", value="namespace")),
    rule(
        "tag",
        value="namespace",
        create=True,
        parent=rule("fixed", value="root.namespaces"),
        filter=allow(users=("john",)),
    ),
    rule("fixed", value="root.default"),
)
COMPLEX_TREE = tree("root.default", parents=("root.namespaces", "root.newapp"))
SARAH_GROUPS = ("sarah", "test_app", "dev_app")

PRODUCTION = (rule("fixed", value="root.production"), rule("user", create=True))
PRODUCTION_ACL = {"root.production": "john,bob"}


@cases(
    pytest.param(
        PROVIDED_UNDER_USER,
        tree(),
        req(queue="my_special_queue"),
        placed("root.developer.my_special_queue", True, "provided"),
        id="provided-parent-user",
    ),
    pytest.param(
        PROVIDED_UNDER_USER,
        tree(),
        req(queue="root.dev_queue"),
        placed("root.dev_queue", True, "provided"),
        id="provided-qualified-ignores-parent",
    ),
    pytest.param(
        USER_NO_CREATE,
        tree("root.finance_dot_test"),
        req("finance.test"),
        placed("root.finance_dot_test", False, "user"),
        id="user-dot-replaced",
    ),
    pytest.param(USER_NO_CREATE, tree(), req("developer"), Rejected(), id="user-missing-no-create"),
    pytest.param(
        FIXED_LAST_RESORT,
        tree("root.last_resort"),
        req(queue="my_special_queue"),
        placed("root.last_resort", False, "fixed"),
        id="fixed-last-resort",
    ),
    pytest.param(
        TAG_NAMESPACE,
        tree("root.default"),
        req(queue="my_special_queue", tags={"namespace": "default"}),
        placed("root.default", False, "tag"),
        id="tag-namespace-default",
    ),
    pytest.param(
        TAG_NAMESPACE,
        tree(),
        req(tags={"namespace": "testing"}),
        placed("root.testing", True, "tag"),
        id="tag-namespace-testing",
    ),
    pytest.param(TAG_NAMESPACE, tree(), req(), Rejected(), id="tag-missing-rejected"),
    pytest.param(
        (*TAG_NAMESPACE, *FIXED_LAST_RESORT),
        tree("root.last_resort"),
        req(),
        placed("root.last_resort", False, "fixed"),
        id="tag-missing-next-rule",
    ),
    pytest.param(
        COMPLEX,
        COMPLEX_TREE,
        req("john", groups=("john",), tags={"namespace": "testing"}),
        placed("root.namespaces.testing", True, "tag"),
        id="complex-john-rule2",
    ),
    pytest.param(
        COMPLEX,
        COMPLEX_TREE,
        req("sarah", groups=SARAH_GROUPS, tags={"namespace": "newapp"}),
        placed("root.newapp.sarah", True, "user"),
        id="complex-sarah-rule1",
    ),
    pytest.param(
        COMPLEX,
        tree("root.default", parents=("root.namespaces",)),
        req("sarah", groups=SARAH_GROUPS, tags={"namespace": "newapp"}),
        placed("root.default", False, "fixed"),
        id="complex-sarah-parent-missing-rule3",
    ),
    pytest.param(
        COMPLEX,
        COMPLEX_TREE,
        req("bob", groups=("bob",), tags={"namespace": "testapp"}),
        placed("root.default", False, "fixed"),
        id="complex-bob-rule3",
    ),
    pytest.param(
        PRODUCTION,
        tree("root.production", submit=PRODUCTION_ACL),
        req("john"),
        placed("root.production", False, "fixed"),
        id="production-john",
    ),
    pytest.param(
        PRODUCTION,
        tree("root.production", submit=PRODUCTION_ACL),
        req("bob"),
        placed("root.production", False, "fixed"),
        id="production-bob",
    ),
    pytest.param(
        PRODUCTION,
        tree("root.production", "root.sarah", submit={**PRODUCTION_ACL, "root.sarah": "sarah"}),
        req("sarah"),
        placed("root.sarah", False, "user"),
        id="production-sarah-own-queue",
    ),
    # Creating root.sarah needs submit access on root, which would also open root.production to sarah.
    pytest.param(
        PRODUCTION,
        tree("root.production", submit=PRODUCTION_ACL),
        req("sarah"),
        Rejected(),
        id="production-sarah-cannot-create",
    ),
    pytest.param(
        PRODUCTION,
        tree("root.production", submit={**OPEN, **PRODUCTION_ACL}),
        req("sarah"),
        placed("root.production", False, "fixed"),
        id="production-root-wildcard-inherits",
    ),
)
def test_seed_examples(
    rules: tuple[PlacementRuleConfig, ...], queues: FakeTree, request_: PlacementRequest, want: Expected
) -> None:
    check(rules, queues, request_, want)


# --- filters ------------------------------------------------------------------------------------------------


def filtered(f: FilterConfig) -> tuple[PlacementRuleConfig, ...]:
    return (rule("user", create=True, filter=f), rule("fixed", value="other"))


FILTER_TREE = tree("root.other")
USER_WINS = "user"
NEXT = "fixed"


@pytest.mark.parametrize(
    ("filter_", "user", "groups", "winner"),
    [
        pytest.param(allow(users=("john", "bob")), "john", (), USER_WINS, id="allow-user-listed"),
        pytest.param(allow(users=("john", "bob")), "alice", (), NEXT, id="allow-user-not-listed"),
        pytest.param(deny(users=("alice",)), "alice", (), NEXT, id="deny-user-listed"),
        pytest.param(deny(users=("alice",)), "bob", (), USER_WINS, id="deny-user-not-listed"),
        pytest.param(allow(groups=("dev",)), "alice", ("staff", "dev"), USER_WINS, id="allow-group"),
        pytest.param(allow(groups=("dev",)), "alice", (), NEXT, id="allow-group-no-groups"),
        pytest.param(deny(groups=("dev", "ops")), "alice", ("ops",), NEXT, id="deny-group"),
        pytest.param(deny(groups=("dev", "ops")), "alice", ("qa",), USER_WINS, id="deny-group-other"),
        pytest.param(
            allow(users=("john",), groups=("ops",)), "alice", ("ops",), USER_WINS, id="allow-either"
        ),
        pytest.param(allow(users=("^dev.*",)), "developer", (), USER_WINS, id="user-regexp-match"),
        pytest.param(allow(users=("^dev.*",)), "ops", (), NEXT, id="user-regexp-no-match"),
        pytest.param(allow(users=("dev*",)), "mydev", (), USER_WINS, id="user-regexp-unanchored"),
        pytest.param(allow(groups=("^dev_.*$",)), "x", ("a", "dev_app"), USER_WINS, id="group-regexp-each"),
        pytest.param(deny(groups=("^adm.*",)), "x", ("admins",), NEXT, id="deny-group-regexp"),
        pytest.param(allow(users=("([",)), "anyone", (), NEXT, id="bad-regexp-matches-nobody"),
        pytest.param(allow(users=("john", "b(a)d")), "john", (), USER_WINS, id="list-skips-invalid"),
        pytest.param(allow(users=("not valid",)), "alice", (), NEXT, id="single-invalid-name"),
        pytest.param(deny(), "anyone", ("any",), NEXT, id="deny-empty-denies-all"),
        pytest.param(allow(), "anyone", (), USER_WINS, id="allow-empty-allows-all"),
        pytest.param(FilterConfig(users=("alice",)), "alice", (), USER_WINS, id="untyped-filter-allows"),
        pytest.param(allow(users=("Alice",)), "alice", (), NEXT, id="list-case-sensitive"),
    ],
)
def test_filters(filter_: FilterConfig, user: str, groups: tuple[str, ...], winner: str) -> None:
    placement = PlacementManager.build(filtered(filter_)).place(req(user, groups=groups), FILTER_TREE)
    assert placement.rule == winner


def test_filter_on_parent_rule_fails_child() -> None:
    rules = (rule("user", create=True, parent=rule("fixed", value="team", filter=deny(users=("alice",)))),)
    queues = tree(parents=("root.team",))
    manager = PlacementManager.build(rules)
    assert manager.place(req("bob"), queues) == placed("root.team.bob", True, "user")
    with pytest.raises(PlacementError, match=NO_RULE_MATCHED):
        manager.place(req("alice"), queues)
