"""The groups of a user who was submitted without any: the partition's ``usergroupresolver``.

YuniKorn (``pkg/common/security``) converts an application's user and groups once, when it is added:
groups the RM sends are taken as they are; only a user sent without groups is resolved, by the
configured resolver, through a cache:

- no resolver (type absent, or one YuniKorn does not know): the user's only group is one named as the
  user (Linux's default: a user's primary group has the user's name);
- ``os``: the operating system's user and group databases (pwd/grp here, ``os/user`` there): the
  primary group first, then the other groups the user belongs to; a group id without a name is
  kept as the id; an unknown user is a failure;
- ``ldap``: an LDAP server, with YuniKorn's settings from a secrets directory
  (korral.policies.ldap_groups); settings missing or a server that fails reject the application
  with the reason.

The cache keeps a resolved user for 300 s and a failed one for 30 s (YuniKorn's poscache and
negcache; its cleaner runs every 60 s, so a failure there may be remembered up to 90 s), on the
partition's clock.
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Callable

from korral.policies.ldap_groups import LdapError, LdapSettings, ldap_groups, read_settings

POSITIVE_TTL = 300.0
NEGATIVE_TTL = 30.0
CLEANER_INTERVAL = 60.0  # expired entries are dropped at most this often
OS = "os"
LDAP = "ldap"


class UserGroupError(Exception):
    """A user's groups could not be resolved; the message says why."""


def echo_user(user: str) -> tuple[str, ...]:
    """YuniKorn's no-resolver: the user's only group is named as the user."""
    return (user,)


def os_groups(user: str) -> tuple[str, ...]:
    """The user's groups from the operating system: primary group first, names where they exist."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise UserGroupError(f"user {user} does not exist on this host") from None

    def name(gid: int) -> str:
        try:
            return grp.getgrgid(gid).gr_name
        except KeyError:
            return str(gid)

    groups = [name(entry.pw_gid)]
    for gid in os.getgrouplist(user, entry.pw_gid):
        if gid != entry.pw_gid:
            groups.append(name(gid))
    return tuple(groups)


def ldap_resolver() -> Callable[[str], tuple[str, ...]]:
    """YuniKorn's LDAP resolver (korral.policies.ldap_groups); its settings are read at first use."""
    settings: list[LdapSettings] = []

    def resolve(user: str) -> tuple[str, ...]:
        try:
            if not settings:
                settings.append(read_settings())
            return ldap_groups(settings[0], user)
        except LdapError as error:
            raise UserGroupError(str(error)) from None

    return resolve


def resolver_for(kind: str) -> Callable[[str], tuple[str, ...]]:
    if kind == OS:
        return os_groups
    if kind == LDAP:
        return ldap_resolver()
    return echo_user


class UserGroupCache:
    """Resolved users, kept for ``POSITIVE_TTL`` (failures for ``NEGATIVE_TTL``)."""

    def __init__(self, kind: str, clock: Callable[[], float]) -> None:
        self.kind = kind
        self._resolve = resolver_for(kind)
        self._clock = clock
        # user -> (resolved at, groups, failure reason or "")
        self._entries: dict[str, tuple[float, tuple[str, ...], str]] = {}
        self._cleaned = clock()

    def groups(self, user: str) -> tuple[str, ...]:
        """The user's groups; UserGroupError (cached too) when they cannot be resolved."""
        now = self._clock()
        if now - self._cleaned >= CLEANER_INTERVAL:
            self._clean(now)
        entry = self._entries.get(user)
        if entry is not None:
            resolved_at, groups, failure = entry
            if now - resolved_at < (NEGATIVE_TTL if failure else POSITIVE_TTL):
                if failure:
                    raise UserGroupError(failure)
                return groups
        try:
            groups = self._resolve(user)
        except UserGroupError as error:
            self._entries[user] = (now, (), str(error))
            raise
        self._entries[user] = (now, groups, "")
        return groups

    def _clean(self, now: float) -> None:
        """Drop expired entries, so the cache does not grow with every user ever seen."""
        self._cleaned = now
        for user, (resolved_at, _, failure) in list(self._entries.items()):
            if now - resolved_at >= (NEGATIVE_TTL if failure else POSITIVE_TTL):
                del self._entries[user]

    def __len__(self) -> int:
        return len(self._entries)
