"""Placement rules: every seed example, filters, parents, create, ACLs, draining, fallback and recovery."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from korral.config.schema import FilterConfig, PlacementRuleConfig
from korral.policies.acl import ACL
from korral.policies.placement import (
    NO_RULE_MATCHED,
    Placement,
    PlacementError,
    PlacementManager,
    PlacementQueue,
    PlacementRequest,
    PlacementRuleError,
    QueueLookup,
)

# --- fakes --------------------------------------------------------------------------------------------------


@dataclass(eq=False)
class FakeQueue:
    path: str
    is_leaf: bool
    parent: FakeQueue | None = None
    is_draining: bool = False
    submit_acl: ACL = field(default_factory=ACL.nobody)
    admin_acl: ACL = field(default_factory=ACL.nobody)


class FakeTree:
    """A queue tree from leaf paths; every proper prefix of a path is a parent queue."""

    def __init__(
        self,
        leaves: tuple[str, ...] = (),
        parents: tuple[str, ...] = (),
        submit: Mapping[str, str] | None = None,
        admin: Mapping[str, str] | None = None,
        draining: tuple[str, ...] = (),
    ) -> None:
        self.queues: dict[str, FakeQueue] = {"root": FakeQueue("root", is_leaf=False)}
        for path, leaf in [*((p, False) for p in parents), *((p, True) for p in leaves)]:
            parts = path.split(".")
            for depth in range(2, len(parts) + 1):
                sub = ".".join(parts[:depth])
                if sub not in self.queues:
                    is_leaf = leaf and depth == len(parts)
                    self.queues[sub] = FakeQueue(
                        sub, is_leaf, parent=self.queues[".".join(parts[: depth - 1])]
                    )
        for path, text in (submit or {}).items():
            self.queues[path].submit_acl = ACL.parse(text)
        for path, text in (admin or {}).items():
            self.queues[path].admin_acl = ACL.parse(text)
        for path in draining:
            self.queues[path].is_draining = True

    def get_queue(self, path: str) -> PlacementQueue | None:
        return self.queues.get(path)


OPEN = {"root": "*"}


def tree(
    *leaves: str, parents: tuple[str, ...] = (), submit: Mapping[str, str] = OPEN, **kw: object
) -> FakeTree:
    return FakeTree(leaves=leaves, parents=parents, submit=submit, **kw)  # type: ignore[arg-type]


def rule(
    name: str,
    *,
    create: bool = False,
    value: str = "",
    parent: PlacementRuleConfig | None = None,
    filter: FilterConfig | None = None,
) -> PlacementRuleConfig:
    return PlacementRuleConfig(
        name=name, create=create, value=value, parent=parent, filter=filter or FilterConfig()
    )


def allow(users: tuple[str, ...] = (), groups: tuple[str, ...] = ()) -> FilterConfig:
    return FilterConfig(type="allow", users=users, groups=groups)


def deny(users: tuple[str, ...] = (), groups: tuple[str, ...] = ()) -> FilterConfig:
    return FilterConfig(type="deny", users=users, groups=groups)


def req(
    user: str = "developer",
    queue: str = "",
    groups: tuple[str, ...] = (),
    tags: Mapping[str, str] | None = None,
) -> PlacementRequest:
    return PlacementRequest("app-1", queue, user, groups, dict(tags or {}))


def placed(path: str, create: bool, rule_name: str) -> Placement:
    return Placement(queue_path=path, create=create, rule=rule_name)


@dataclass(frozen=True)
class Rejected:
    match: str = NO_RULE_MATCHED


Expected = Placement | Rejected


def check(
    rules: tuple[PlacementRuleConfig, ...], queues: QueueLookup, request: PlacementRequest, want: Expected
) -> None:
    manager = PlacementManager.build(rules)
    if isinstance(want, Rejected):
        with pytest.raises(PlacementError) as info:
            manager.place(request, queues)
        assert want.match in info.value.reason
        assert str(info.value) == info.value.reason
    else:
        assert manager.place(request, queues) == want


def cases(*params: object) -> pytest.MarkDecorator:
    return pytest.mark.parametrize(("rules", "queues", "request_", "want"), params)


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
        req(queue="Root.Sales"),
        placed("root.sales", False, "provided"),
        id="provided-lower-cased",
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


# --- candidate checks: leaf, draining, ACL ------------------------------------------------------------------

PROVIDED_CREATE_THEN_FIXED = (rule("provided", create=True), rule("fixed", value="fallback"))


@cases(
    pytest.param(
        PROVIDED_CREATE_THEN_FIXED,
        tree("root.fallback", parents=("root.p",)),
        req(queue="root.p"),
        placed("root.fallback", False, "fixed"),
        id="existing-parent-refused",
    ),
    pytest.param(
        PROVIDED_CREATE_THEN_FIXED,
        tree("root.fallback", "root.leaf"),
        req(queue="root.leaf.child"),
        placed("root.fallback", False, "fixed"),
        id="cannot-create-under-leaf",
    ),
    pytest.param(
        PROVIDED_CREATE_THEN_FIXED,
        tree("root.fallback", "root.leaf"),
        req(queue="root.leaf.a.b"),
        placed("root.fallback", False, "fixed"),
        id="cannot-create-deep-under-leaf",
    ),
    pytest.param(
        PROVIDED_CREATE_THEN_FIXED,
        tree("root.fallback", "root.q", draining=("root.q",)),
        req(queue="q"),
        placed("root.fallback", False, "fixed"),
        id="draining-leaf-refused",
    ),
    pytest.param(
        PROVIDED_CREATE_THEN_FIXED,
        tree("root.fallback", parents=("root.p",), draining=("root.p",)),
        req(queue="root.p.new"),
        placed("root.fallback", False, "fixed"),
        id="create-under-draining",
    ),
    pytest.param(
        PROVIDED_CREATE_THEN_FIXED,
        tree("root.fallback", parents=("root.p.q",), draining=("root.p",)),
        req(queue="root.p.q.new"),
        placed("root.fallback", False, "fixed"),
        id="create-under-draining-grandparent",
    ),
    pytest.param(
        PROVIDED_CREATE_THEN_FIXED,
        tree("root.fallback", parents=("root.p",)),
        req(queue="root.p.new"),
        placed("root.p.new", True, "provided"),
        id="create-under-parent",
    ),
    pytest.param(
        PROVIDED_CREATE_THEN_FIXED,
        tree("root.fallback", parents=("root.p",)),
        req(queue="root.p.x.y"),
        placed("root.p.x.y", True, "provided"),
        id="create-two-levels",
    ),
)
def test_candidate_checks(
    rules: tuple[PlacementRuleConfig, ...], queues: FakeTree, request_: PlacementRequest, want: Expected
) -> None:
    check(rules, queues, request_, want)


PROVIDED_CREATE = (rule("provided", create=True),)


@cases(
    pytest.param(
        PROVIDED_CREATE,
        tree("root.q", submit=OPEN),
        req("anyone", queue="q"),
        placed("root.q", False, "provided"),
        id="root-submit-wildcard",
    ),
    pytest.param(
        PROVIDED_CREATE, tree("root.q", submit={}), req("anyone", queue="q"), Rejected(), id="no-acl-anywhere"
    ),
    pytest.param(
        PROVIDED_CREATE,
        tree("root.q", submit={}, admin={"root": "alice"}),
        req("alice", queue="q"),
        placed("root.q", False, "provided"),
        id="root-admin-implies-submit",
    ),
    pytest.param(
        PROVIDED_CREATE,
        tree("root.q", submit={}, admin={"root": "alice"}),
        req("bob", queue="q"),
        Rejected(),
        id="root-admin-other-user",
    ),
    pytest.param(
        PROVIDED_CREATE,
        tree("root.q", submit={"root.q": "bob"}),
        req("bob", queue="q"),
        placed("root.q", False, "provided"),
        id="leaf-submit-user",
    ),
    pytest.param(
        PROVIDED_CREATE,
        tree("root.q", submit={"root.q": "bob"}),
        req("alice", queue="q"),
        Rejected(),
        id="leaf-submit-denies-other",
    ),
    pytest.param(
        PROVIDED_CREATE,
        tree("root.t.q", submit={"root.t": " devs"}),
        req("carol", queue="root.t.q", groups=("devs",)),
        placed("root.t.q", False, "provided"),
        id="parent-group-inherited",
    ),
    pytest.param(
        PROVIDED_CREATE,
        tree(parents=("root.team",), submit={"root.team": "alice"}),
        req("alice", queue="root.team.new"),
        placed("root.team.new", True, "provided"),
        id="create-ancestor-allows",
    ),
    pytest.param(
        PROVIDED_CREATE,
        tree(parents=("root.team",), submit={"root.team": "alice"}),
        req("bob", queue="root.team.new"),
        Rejected(),
        id="create-ancestor-denies",
    ),
    pytest.param(
        PROVIDED_CREATE, tree(submit={}), req("bob", queue="new"), Rejected(), id="create-root-denies"
    ),
)
def test_acl_checks(
    rules: tuple[PlacementRuleConfig, ...], queues: FakeTree, request_: PlacementRequest, want: Expected
) -> None:
    check(rules, queues, request_, want)


# --- root.default fallback and the recovery rule ------------------------------------------------------------

FORCE = {"application.create.force": "true"}
NO_MATCH = (rule("user"),)


@cases(
    pytest.param(
        NO_MATCH,
        tree("root.default"),
        req("alice"),
        placed("root.default", False, "default"),
        id="fallback-default",
    ),
    pytest.param(
        NO_MATCH,
        tree("root.default", draining=("root.default",)),
        req("alice"),
        Rejected(),
        id="fallback-default-draining",
    ),
    pytest.param(
        NO_MATCH, tree(parents=("root.default",)), req("alice"), Rejected(), id="fallback-default-parent"
    ),
    pytest.param(
        NO_MATCH, tree("root.default", submit={}), req("alice"), Rejected(), id="fallback-default-no-acl"
    ),
    pytest.param(NO_MATCH, tree(), req("alice"), Rejected(), id="no-default-rejected"),
    pytest.param(
        (), tree("root.a"), req(queue="a"), placed("root.a", False, "provided"), id="implicit-provided"
    ),
    pytest.param((), tree(), req(queue="a"), Rejected(), id="implicit-provided-no-create"),
    pytest.param(
        NO_MATCH,
        tree(submit={}),
        req("alice", tags=FORCE),
        placed("root.@recovery@", True, "recovery"),
        id="recovery-creates-without-acl",
    ),
    pytest.param(
        NO_MATCH,
        tree("root.@recovery@", submit={}),
        req("alice", tags=FORCE),
        placed("root.@recovery@", False, "recovery"),
        id="recovery-exists",
    ),
    pytest.param(
        NO_MATCH,
        tree("root.default"),
        req("alice", tags=FORCE),
        placed("root.@recovery@", True, "recovery"),
        id="recovery-before-default",
    ),
    pytest.param(
        NO_MATCH,
        tree("root.alice"),
        req("alice", tags=FORCE),
        placed("root.alice", False, "user"),
        id="forced-but-rule-matches",
    ),
    pytest.param(
        NO_MATCH,
        tree("root.default"),
        req("alice", tags={"application.create.force": "false"}),
        placed("root.default", False, "default"),
        id="force-false",
    ),
    pytest.param(
        NO_MATCH,
        tree(),
        req("alice", tags={"Application.Create.Force": "True"}),
        placed("root.@recovery@", True, "recovery"),
        id="force-tag-case-insensitive",
    ),
    pytest.param(
        NO_MATCH,
        tree(),
        req("alice", tags={"application.create.force": "yes"}),
        Rejected(),
        id="force-not-a-bool",
    ),
    pytest.param(
        PROVIDED_CREATE,
        tree(),
        req(queue="root.@recovery@"),
        Rejected(),
        id="provided-cannot-target-recovery",
    ),
    pytest.param(
        PROVIDED_CREATE,
        tree("root.@recovery@"),
        req(queue="root.@recovery@"),
        Rejected(),
        id="provided-cannot-use-existing-recovery",
    ),
    pytest.param(
        PROVIDED_CREATE, tree(), req(queue="root.@recovery@.x"), Rejected(), id="nothing-below-recovery"
    ),
    pytest.param(PROVIDED_CREATE, tree(), req(queue="@recovery@"), Rejected(), id="short-recovery-name"),
)
def test_fallback_and_recovery(
    rules: tuple[PlacementRuleConfig, ...], queues: FakeTree, request_: PlacementRequest, want: Expected
) -> None:
    check(rules, queues, request_, want)


# --- building the rule set ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        pytest.param((rule("group"),), "unknown rule name specified group", id="unknown-rule"),
        pytest.param((rule("test"),), "unknown rule name", id="test-rule-not-supported"),
        pytest.param(
            (rule("recovery"),), "recovery rule cannot be part of the config", id="recovery-configured"
        ),
        pytest.param(
            (rule("fixed"),), "a fixed queue rule must have a queue name set", id="fixed-without-value"
        ),
        pytest.param((rule("tag"),), "a tag queue rule must have a tag name set", id="tag-without-value"),
        pytest.param(
            (rule("fixed", value="root.q", parent=rule("user")),),
            "qualified queue name and a parent",
            id="fixed-qualified-with-parent",
        ),
        pytest.param(
            (rule("user", parent=rule("user", parent=rule("bogus"))),),
            "unknown rule name specified bogus",
            id="nested-parent-unknown",
        ),
        pytest.param(
            (rule("user"), rule("user", parent=rule("recovery"))),
            "recovery rule cannot",
            id="recovery-as-parent",
        ),
    ],
)
def test_build_errors(rules: tuple[PlacementRuleConfig, ...], message: str) -> None:
    with pytest.raises(PlacementRuleError, match=message):
        PlacementManager.build(rules)


@pytest.mark.parametrize(
    ("rules", "names"),
    [
        pytest.param((), ("provided", "recovery"), id="implicit-provided"),
        pytest.param(
            (rule("User"), rule("FIXED", value="q")), ("user", "fixed", "recovery"), id="names-normalised"
        ),
    ],
)
def test_rule_names(rules: tuple[PlacementRuleConfig, ...], names: tuple[str, ...]) -> None:
    assert PlacementManager.build(rules).rule_names == names


def test_request_and_placement_are_frozen() -> None:
    request = PlacementRequest("app", "q", "u", ["g1", "g2"])  # type: ignore[arg-type]
    assert request.groups == ("g1", "g2")
    assert request.tags == {}
    with pytest.raises(AttributeError):
        request.user = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        placed("root.a", False, "user").create = True  # type: ignore[misc]


class NoQueues:
    def get_queue(self, path: str) -> PlacementQueue | None:
        return None


def test_lookup_without_root_rejects() -> None:
    with pytest.raises(PlacementError, match=NO_RULE_MATCHED):
        PlacementManager.build(PROVIDED_CREATE).place(req(queue="a"), NoQueues())


def test_placement_error_carries_reason() -> None:
    error = PlacementError("why")
    assert error.reason == "why"
    assert str(error) == "why"
