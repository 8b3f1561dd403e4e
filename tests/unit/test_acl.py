"""ACL parsing (YuniKorn's `security/acl.go` rules) and the inherited submit-access check."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from korral.policies.acl import ACL, has_access

EVERYONE = ACL(all_allowed=True)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", ACL(), id="empty-is-nobody"),
        pytest.param(" ", ACL(), id="single-space-is-nobody"),
        pytest.param("*", EVERYONE, id="wildcard"),
        pytest.param(" *", EVERYONE, id="wildcard-leading-space"),
        pytest.param("* ", EVERYONE, id="wildcard-trailing-space"),
        pytest.param("user1", ACL(users=frozenset({"user1"})), id="single-user"),
        pytest.param("user1,user2", ACL(users=frozenset({"user1", "user2"})), id="user-list"),
        pytest.param("user1 ", ACL(users=frozenset({"user1"})), id="user-only-trailing-space"),
        pytest.param(" group1", ACL(groups=frozenset({"group1"})), id="group-only"),
        pytest.param(" group1,group2", ACL(groups=frozenset({"group1", "group2"})), id="group-list-only"),
        pytest.param(
            "user1,user2 group1,group2",
            ACL(users=frozenset({"user1", "user2"}), groups=frozenset({"group1", "group2"})),
            id="users-and-groups",
        ),
        pytest.param("user1 *", EVERYONE, id="group-wildcard-allows-all"),
        pytest.param("*,user1", ACL(users=frozenset({"user1"})), id="wildcard-inside-list-ignored"),
        pytest.param("user1,,user2", ACL(users=frozenset({"user1", "user2"})), id="empty-entry-skipped"),
        pytest.param("bad!user,good", ACL(users=frozenset({"good"})), id="invalid-user-ignored"),
        pytest.param(" bad.group,ok", ACL(groups=frozenset({"ok"})), id="invalid-group-ignored"),
        pytest.param(
            "svc$,first.last@corp", ACL(users=frozenset({"svc$", "first.last@corp"})), id="user-chars"
        ),
        pytest.param("* *", EVERYONE, id="wildcard-both-parts"),
    ],
)
def test_parse(text: str, expected: ACL) -> None:
    assert ACL.parse(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("  ", id="two-spaces"),
        pytest.param("user1  group1", id="double-space-between"),
        pytest.param("user1 group1 group2", id="three-parts"),
        pytest.param(" group1 ", id="group-only-trailing-space"),
    ],
)
def test_parse_multiple_spaces(text: str) -> None:
    with pytest.raises(ValueError, match="multiple spaces found in ACL"):
        ACL.parse(text)


@pytest.mark.parametrize(
    ("text", "user", "groups", "allowed"),
    [
        pytest.param("*", "anyone", (), True, id="wildcard"),
        pytest.param("", "anyone", ("g",), False, id="nobody"),
        pytest.param("sue", "sue", (), True, id="user-listed"),
        pytest.param("sue", "bob", (), False, id="user-not-listed"),
        pytest.param("sue dev", "john", ("dev",), True, id="group-member"),
        pytest.param("sue dev", "sue", ("other",), True, id="user-wins-without-group"),
        pytest.param("sue dev", "bob", ("test", "other"), False, id="no-match"),
        pytest.param(" dev,test", "bob", ("x", "test"), True, id="any-group-matches"),
        pytest.param("Sue", "sue", (), False, id="case-sensitive"),
    ],
)
def test_allows(text: str, user: str, groups: tuple[str, ...], allowed: bool) -> None:
    assert ACL.parse(text).allows(user, groups) is allowed


def test_everyone_and_nobody() -> None:
    assert ACL.everyone().allows("x", ())
    assert not ACL.nobody().allows("x", ("y",))
    assert ACL.everyone() == ACL.parse("*")
    assert ACL.nobody() == ACL.parse("")


def test_acl_is_immutable() -> None:
    acl = ACL.parse("a b")
    with pytest.raises(AttributeError):
        acl.all_allowed = True  # type: ignore[misc]


@dataclass
class Q:
    submit_acl: ACL
    admin_acl: ACL
    parent: Q | None = None


def chain(*levels: tuple[str, str]) -> Q:
    """Build root → ... → leaf from (submit, admin) pairs, root first; returns the leaf."""
    queue: Q | None = None
    for submit, admin in levels:
        queue = Q(ACL.parse(submit), ACL.parse(admin), queue)
    assert queue is not None
    return queue


@pytest.mark.parametrize(
    ("levels", "user", "groups", "allowed"),
    [
        pytest.param([("*", ""), ("", "")], "alice", (), True, id="root-submit-wildcard"),
        pytest.param([("", ""), ("", "")], "alice", (), False, id="nothing-set-denied"),
        pytest.param([("", ""), ("", "alice")], "alice", (), True, id="admin-implies-submit"),
        pytest.param([("", "alice"), ("", "")], "alice", (), True, id="root-admin-inherited"),
        pytest.param([("", ""), ("bob", "")], "alice", (), False, id="leaf-denies-other-user"),
        pytest.param([("", ""), (" devs", ""), ("", "")], "carol", ("devs",), True, id="mid-group"),
        pytest.param([("bob", ""), ("alice", "")], "bob", (), True, id="leaf-no-but-root-yes"),
    ],
)
def test_has_access(levels: list[tuple[str, str]], user: str, groups: tuple[str, ...], allowed: bool) -> None:
    assert has_access(chain(*levels), user, iter(groups)) is allowed


def test_an_acl_shows_its_names_sorted_whatever_the_string_hashing() -> None:
    # a message's repr is in the simulated runtime's trace, which must replay byte for byte in any process
    acl = ACL.parse("user,ann,ben,cid dev,ops")
    assert repr(acl) == (
        "ACL(users=frozenset({'ann', 'ben', 'cid', 'user'}), groups=frozenset({'dev', 'ops'}), "
        "all_allowed=False)"
    )
    assert repr(ACL()) == "ACL(users=frozenset(), groups=frozenset(), all_allowed=False)"
