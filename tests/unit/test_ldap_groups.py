"""The ldap usergroupresolver against a real OpenLDAP server on loopback (tests/slapd.py), and its
settings as YuniKorn reads them from a secrets directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from slapd import running_slapd, write_secrets

from korral.policies.ldap_groups import LdapError, LdapSettings, ldap_groups, read_settings
from korral.policies.usergroups import UserGroupCache, UserGroupError


@pytest.fixture(scope="module")
def ldap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with running_slapd(tmp_path_factory.mktemp("slapd")) as settings:
        yield settings


def settings_of(values: dict[str, str]) -> LdapSettings:
    return LdapSettings(
        host=values["Host"],
        port=int(values["Port"]),
        base_dn=values["BaseDN"],
        filter=values["Filter"],
        group_attr=values["GroupAttr"],
        return_attr=(values["ReturnAttr"],),
        bind_user=values["BindUser"],
        bind_password=values["BindPassword"],
    )


@pytest.mark.parametrize(
    ("user", "groups"),
    [
        ("alice", ("alice", "devs", "ops")),
        ("bob", ("bob",)),  # in no group: only the group named as the user
        ("carol", ("carol", "ops")),
        ("nobody", ("nobody",)),  # not in the directory: YuniKorn gives the user's own group too
        ("*", ("*",)),  # escaped: not a wildcard that would match every user
    ],
)
def test_a_users_groups_come_from_the_server(
    ldap: dict[str, str], user: str, groups: tuple[str, ...]
) -> None:
    assert ldap_groups(settings_of(ldap), user) == groups


def test_a_wrong_password_is_an_error_with_the_reason(ldap: dict[str, str]) -> None:
    with pytest.raises(LdapError, match=r"LDAP lookup of user alice at 127\.0\.0\.1"):
        ldap_groups(settings_of({**ldap, "BindPassword": "wrong"}), "alice")


def test_a_server_that_is_not_there_is_an_error(ldap: dict[str, str]) -> None:
    with pytest.raises(LdapError, match="failed"):
        ldap_groups(settings_of({**ldap, "Port": "1"}), "alice")


def test_the_resolver_reads_the_secrets_directory_and_caches(
    ldap: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KORRAL_LDAP_SECRETS", str(write_secrets(tmp_path / "secrets", **ldap)))
    cache = UserGroupCache("ldap", lambda: 0.0)
    assert cache.groups("alice") == ("alice", "devs", "ops")
    assert len(cache) == 1


FULL = {
    "Host": "h",
    "Port": "389",
    "BaseDN": "dc=x",
    "Filter": "(uid=%s)",
    "GroupAttr": "memberOf",
    "ReturnAttr": "memberOf,cn",
    "BindUser": "cn=admin",
    "BindPassword": "pw",
}


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({}, None),
        ({"SSL": "true", "Insecure": "1"}, None),
        ({"Port": None}, "lack Port"),
        ({"BindPassword": "", "Filter": None}, "lack Filter, BindPassword"),
        ({"Port": "ldap"}, "Port: 'ldap' is not a number"),
        ({"Port": "70000"}, "not between 1 and 65535"),
        ({"Filter": "(uid=alice)"}, "Filter must hold one '%s'"),
        ({"SSL": "yes"}, "SSL: 'yes' is not a boolean"),
    ],
)
def test_settings_as_yunikorn_reads_them(
    tmp_path: Path, changes: dict[str, str | None], problem: str | None
) -> None:
    values = {key: value for key, value in {**FULL, **changes}.items() if value is not None}
    directory = write_secrets(tmp_path / "secrets", **values)
    (directory / "..data").mkdir()  # Kubernetes' metadata: ignored
    if problem is None:
        settings = read_settings(str(directory))
        assert settings.return_attr == ("memberOf", "cn") and settings.port == 389
        assert settings.ssl is (changes.get("SSL") == "true")
    else:
        with pytest.raises(LdapError, match=problem):
            read_settings(str(directory))


def test_missing_settings_reject_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KORRAL_LDAP_SECRETS", str(tmp_path / "absent"))
    with pytest.raises(UserGroupError, match=r"LDAP settings directory .*absent does not exist"):
        UserGroupCache("ldap", lambda: 0.0).groups("alice")
