"""Placement rules: create, parents and queue names."""

from __future__ import annotations

import pytest
from placement_helpers import Expected, FakeTree, Rejected, cases, check, placed, req, rule, tree

from korral.config.schema import PlacementRuleConfig
from korral.policies.placement import PlacementRequest

# --- create, parents, names ---------------------------------------------------------------------------------

TWO_LEVEL = (
    rule(
        "user",
        create=True,
        parent=rule("tag", value="namespace", create=True, parent=rule("fixed", value="tenants")),
    ),
)


@cases(
    pytest.param(
        (rule("provided"),),
        tree("root.a"),
        req(queue="a"),
        placed("root.a", False, "provided"),
        id="provided-exists-no-create",
    ),
    pytest.param((rule("provided"),), tree(), req(queue="a"), Rejected(), id="provided-missing-no-create"),
    pytest.param(
        (rule("provided", create=True),),
        tree(),
        req(queue="a"),
        placed("root.a", True, "provided"),
        id="provided-missing-create",
    ),
    pytest.param(
        (rule("provided", create=True),), tree(), req(queue=""), Rejected(), id="provided-empty-fails"
    ),
    pytest.param(
        (rule("provided"),),
        tree("root.a.b"),
        req(queue="root.a.b"),
        placed("root.a.b", False, "provided"),
        id="provided-qualified-exists",
    ),
    pytest.param(
        (rule("provided", create=True),),
        tree(),
        req(queue="a.b"),
        placed("root.a_dot_b", True, "provided"),
        id="provided-short-dots-replaced",
    ),
    pytest.param(
        (rule("provided"),),
        tree("root.sales"),
        req(queue="root.Sales"),
        placed("root.sales", False, "provided"),
        id="provided-lower-cased",
    ),
    pytest.param(
        (rule("provided", create=True),),
        tree("root.sales"),
        req(queue="Root.Sales"),
        placed("root.root_dot_sales", True, "provided"),
        id="provided-qualified-only-as-given",
    ),
    pytest.param(
        (rule("provided", create=True),),
        tree(),
        req(queue="root"),
        placed("root.root", True, "provided"),
        id="provided-root-is-a-short-name",
    ),
    pytest.param(
        (rule("tag", create=True, value="namespace"),),
        tree(),
        req(tags={"namespace": "root"}),
        placed("root.root", True, "tag"),
        id="tag-root-is-a-short-name",
    ),
    pytest.param(
        (rule("user", create=True),),
        tree("root.x"),
        req(user="root.x"),
        placed("root.root_dot_x", True, "user"),
        id="user-name-never-qualified",
    ),
    pytest.param(
        (rule("user", create=True),),
        tree(),
        req("Alice"),
        placed("root.alice", True, "user"),
        id="user-lower-cased",
    ),
    pytest.param(
        (rule("user", create=True, parent=rule("fixed", value="users")),),
        tree(parents=("root.users",)),
        req("alice"),
        placed("root.users.alice", True, "user"),
        id="user-under-fixed-parent",
    ),
    pytest.param(
        (rule("user", create=True, parent=rule("fixed", value="root.users")),),
        tree(parents=("root.users",)),
        req("alice"),
        placed("root.users.alice", True, "user"),
        id="parent-fixed-qualified",
    ),
    pytest.param(
        (rule("user", create=True, parent=rule("fixed", value="users")),),
        tree(),
        req("alice"),
        Rejected(),
        id="parent-missing-no-create",
    ),
    pytest.param(
        (rule("user", create=True, parent=rule("fixed", value="users", create=True)),),
        tree(),
        req("alice"),
        placed("root.users.alice", True, "user"),
        id="parent-missing-create",
    ),
    pytest.param(
        TWO_LEVEL,
        tree(parents=("root.tenants",)),
        req("alice", tags={"namespace": "ns1"}),
        placed("root.tenants.ns1.alice", True, "user"),
        id="two-level-chain",
    ),
    pytest.param(
        TWO_LEVEL,
        tree("root.tenants.ns1.alice"),
        req("alice", tags={"namespace": "ns1"}),
        placed("root.tenants.ns1.alice", False, "user"),
        id="two-level-chain-exists",
    ),
    pytest.param(
        TWO_LEVEL, tree(parents=("root.tenants",)), req("alice"), Rejected(), id="two-level-middle-fails"
    ),
    pytest.param(
        TWO_LEVEL, tree(), req("alice", tags={"namespace": "ns1"}), Rejected(), id="two-level-top-missing"
    ),
    pytest.param(
        (rule("tag", value="queue", parent=rule("user", create=True)),),
        tree("root.x.y"),
        req("alice", tags={"queue": "root.x.y"}),
        placed("root.x.y", False, "tag"),
        id="tag-qualified-ignores-parent",
    ),
    pytest.param(
        (rule("tag", value="Namespace", create=True),),
        tree(),
        req(tags={"NAMESPACE": "Testing"}),
        placed("root.testing", True, "tag"),
        id="tag-case-insensitive",
    ),
    pytest.param(
        (rule("tag", value="namespace", create=True),),
        tree(),
        req(tags={"namespace": ""}),
        Rejected(),
        id="tag-empty-value-fails",
    ),
    pytest.param(
        (rule("fixed", value="a.b", create=True),),
        tree(),
        req(),
        placed("root.a.b", True, "fixed"),
        id="fixed-keeps-hierarchy",
    ),
    pytest.param(
        (rule("fixed", value="Root.Q"),),
        tree("root.q"),
        req(),
        placed("root.q", False, "fixed"),
        id="fixed-lower-cased",
    ),
    pytest.param(
        (rule("fixed", value="q", parent=rule("user", create=True)),),
        tree("root.alice.q"),
        req("alice"),
        placed("root.alice.q", False, "fixed"),
        id="fixed-with-parent",
    ),
    pytest.param((rule("fixed", value="root"),), tree(), req(), Rejected(), id="fixed-root-is-not-leaf"),
    pytest.param(
        (rule("user", create=True, parent=rule("fixed", value="root")),),
        tree(),
        req("alice"),
        placed("root.alice", True, "user"),
        id="parent-root-not-doubled",
    ),
)
def test_rules(
    rules: tuple[PlacementRuleConfig, ...], queues: FakeTree, request_: PlacementRequest, want: Expected
) -> None:
    check(rules, queues, request_, want)


@cases(
    pytest.param(
        (rule("provided", create=True),),
        tree(),
        req(queue="bad name"),
        Rejected("invalid queue name"),
        id="provided-invalid",
    ),
    pytest.param(
        (rule("provided", create=True),),
        tree(),
        req(queue="root.a..b"),
        Rejected("invalid queue name"),
        id="provided-qualified-empty-part",
    ),
    pytest.param(
        (rule("provided", create=True),),
        tree(),
        req(queue="root.a!"),
        Rejected("invalid queue name"),
        id="provided-qualified-invalid-part",
    ),
    pytest.param(
        (rule("user", create=True),),
        tree(),
        req("a" * 65),
        Rejected("invalid queue name"),
        id="user-too-long",
    ),
    pytest.param(
        (rule("user", create=True),), tree(), req(""), Rejected("invalid queue name"), id="user-empty"
    ),
    pytest.param(
        (rule("tag", value="ns", create=True),),
        tree(),
        req(tags={"ns": "a b"}),
        Rejected("invalid queue name"),
        id="tag-invalid",
    ),
    pytest.param(
        (rule("fixed", value="a..b", create=True),),
        tree(),
        req(),
        Rejected("invalid queue name"),
        id="fixed-invalid",
    ),
    # A rule error rejects at once; the next rule is not tried.
    pytest.param(
        (rule("provided", create=True), rule("fixed", value="ok")),
        tree("root.ok"),
        req(queue="x y"),
        Rejected("invalid queue name 'x y'"),
        id="error-stops-rules",
    ),
    pytest.param(
        (rule("user", create=True, parent=rule("fixed", value="team")), rule("fixed", value="ok")),
        tree("root.team", "root.ok"),
        req("alice"),
        Rejected("parent rule returned a leaf queue: root.team"),
        id="parent-is-leaf-error",
    ),
    pytest.param(
        (rule("provided", create=True),),
        tree(),
        req(queue="a:b#c/d@e-f_g"),
        placed("root.a:b#c/d@e-f_g", True, "provided"),
        id="all-allowed-chars",
    ),
    pytest.param(
        (rule("user", create=True),),
        tree(),
        req("a" * 64),
        placed("root." + "a" * 64, True, "user"),
        id="user-64-chars",
    ),
)
def test_names(
    rules: tuple[PlacementRuleConfig, ...], queues: FakeTree, request_: PlacementRequest, want: Expected
) -> None:
    check(rules, queues, request_, want)
