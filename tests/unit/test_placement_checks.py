"""Placement rules: candidate checks (leaf, draining, ACLs), fallback, recovery, building the rule set."""

from __future__ import annotations

import pytest
from placement_helpers import OPEN, Expected, FakeTree, Rejected, cases, check, placed, req, rule, tree

from korral.config.schema import PlacementRuleConfig
from korral.policies.placement import (
    NO_RULE_MATCHED,
    PlacementError,
    PlacementManager,
    PlacementQueue,
    PlacementRequest,
    PlacementRuleError,
)

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
        placed("root.leaf.child", True, "provided"),  # creating it is for the partition: it rejects
        id="cannot-create-under-leaf",
    ),
    pytest.param(
        PROVIDED_CREATE_THEN_FIXED,
        tree("root.fallback", "root.leaf"),
        req(queue="root.leaf.a.b"),
        placed("root.leaf.a.b", True, "provided"),  # creating it is for the partition: it rejects
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
        placed("root.p.new", True, "provided"),  # creating it is for the partition: it rejects
        id="create-under-draining",
    ),
    pytest.param(
        PROVIDED_CREATE_THEN_FIXED,
        tree("root.fallback", parents=("root.p.q",), draining=("root.p",)),
        req(queue="root.p.q.new"),
        placed("root.p.q.new", True, "provided"),  # creating it is for the partition: it rejects
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
