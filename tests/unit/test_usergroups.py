"""The usergroupresolver (korral.policies.usergroups): YuniKorn's resolvers and cache, on a fake clock."""

from __future__ import annotations

import grp
import os
import pwd

import pytest

from korral.policies.usergroups import (
    NEGATIVE_TTL,
    POSITIVE_TTL,
    UserGroupCache,
    UserGroupError,
    echo_user,
    os_groups,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_no_resolver_gives_a_group_named_as_the_user() -> None:
    assert echo_user("alice") == ("alice",)
    assert UserGroupCache("", Clock()).groups("alice") == ("alice",)
    assert UserGroupCache("unknown-kind", Clock()).groups("bob") == ("bob",)


def test_the_os_resolver_reads_the_users_groups_primary_first() -> None:
    me = pwd.getpwuid(os.getuid())
    groups = os_groups(me.pw_name)
    assert groups[0] == grp.getgrgid(me.pw_gid).gr_name
    expected = {grp.getgrgid(gid).gr_name for gid in os.getgrouplist(me.pw_name, me.pw_gid)}
    assert set(groups) == expected and len(groups) == len(set(groups))
    assert os_groups("root")[0] == "root"


def test_an_unknown_os_user_is_a_failure_with_a_reason() -> None:
    with pytest.raises(UserGroupError, match="user no-such-user-k26 does not exist"):
        os_groups("no-such-user-k26")


def test_ldap_without_its_settings_is_a_failure_with_a_reason(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KORRAL_LDAP_SECRETS", str(tmp_path / "none"))
    with pytest.raises(UserGroupError, match="LDAP settings directory"):
        UserGroupCache("ldap", Clock()).groups("alice")


# (seconds after the first lookup, whether the resolver is asked again)
POSITIVE = [(POSITIVE_TTL - 1, False), (POSITIVE_TTL, True)]
NEGATIVE = [(NEGATIVE_TTL - 1, False), (NEGATIVE_TTL, True)]


@pytest.mark.parametrize(("later", "asked_again"), POSITIVE)
def test_a_resolved_user_is_cached_for_300_seconds(later: float, asked_again: bool) -> None:
    clock, calls = Clock(), []
    cache = UserGroupCache("", clock)
    cache._resolve = lambda user: calls.append(user) or (user, "extra")  # type: ignore[method-assign]
    assert cache.groups("alice") == ("alice", "extra")
    clock.now = later
    assert cache.groups("alice") == ("alice", "extra")
    assert len(calls) == (2 if asked_again else 1)


@pytest.mark.parametrize(("later", "asked_again"), NEGATIVE)
def test_a_failed_user_is_remembered_for_30_seconds(later: float, asked_again: bool) -> None:
    clock, calls = Clock(), []
    cache = UserGroupCache("os", clock)

    def failing(user: str) -> tuple[str, ...]:
        calls.append(user)
        raise UserGroupError(f"{user} unknown")

    cache._resolve = failing  # type: ignore[method-assign]
    for moment in (0.0, later):
        clock.now = moment
        with pytest.raises(UserGroupError, match="ghost unknown"):
            cache.groups("ghost")
    assert len(calls) == (2 if asked_again else 1)


def test_expired_entries_are_dropped() -> None:
    clock = Clock()
    cache = UserGroupCache("", clock)
    for index in range(50):
        cache.groups(f"user-{index}")
    assert len(cache) == 50
    clock.now = POSITIVE_TTL + 1
    cache.groups("late")
    assert len(cache) == 1
