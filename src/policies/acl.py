"""Queue access control lists with YuniKorn's syntax and the inherited submit-access check.

An ACL string is ``"user1,user2 group1,group2"``: a comma separated user list, one single space, and a comma
separated group list. ``"*"`` grants everyone access, ``""`` (or a single space) grants nobody access, and
``" group1"`` (leading space) is a group-only ACL. Names that are not valid user or group names are ignored,
as YuniKorn does, rather than rejected.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Protocol

import attrs

WILDCARD = "*"

# Must accept at least what the config validator accepts for users and groups (YuniKorn's configs.UserRegExp
# and configs.GroupRegExp); placement rule filters use the same patterns.
USER_NAME_PATTERN = re.compile(r"[_a-zA-Z][a-zA-Z0-9_.@-]*\$?")
GROUP_NAME_PATTERN = re.compile(r"[_a-zA-Z][a-zA-Z0-9_-]*")


def _sorted_repr(names: frozenset[str]) -> str:
    """A set of names shown in sorted order: a message's repr (the simulated runtime's trace) must not
    depend on the process's string hashing."""
    return "frozenset({" + ", ".join(repr(name) for name in sorted(names)) + "})" if names else "frozenset()"


@attrs.frozen
class ACL:
    """An immutable, parsed access control list."""

    users: frozenset[str] = attrs.field(default=frozenset(), repr=_sorted_repr)
    groups: frozenset[str] = attrs.field(default=frozenset(), repr=_sorted_repr)
    all_allowed: bool = False

    @classmethod
    def parse(cls, text: str) -> ACL:
        """Parse YuniKorn's ACL syntax; ValueError when parts are separated by more than one space."""
        if text == "":
            return _NOBODY
        # Split on single spaces before any trimming: a double space yields an extra (empty) field.
        fields = text.split(" ")
        if len(fields) > 2:
            raise ValueError(f"multiple spaces found in ACL: '{text}'")
        if text.strip() == WILDCARD:
            return _EVERYONE
        user_entries = fields[0].split(",")
        if user_entries == [WILDCARD]:
            return _EVERYONE
        users = frozenset(user for user in user_entries if user and USER_NAME_PATTERN.fullmatch(user))
        groups: frozenset[str] = frozenset()
        if len(fields) == 2:
            group_entries = fields[1].split(",")
            if group_entries == [WILDCARD]:
                return _EVERYONE
            groups = frozenset(
                group for group in group_entries if group and GROUP_NAME_PATTERN.fullmatch(group)
            )
        return cls(users=users, groups=groups)

    @classmethod
    def everyone(cls) -> ACL:
        return _EVERYONE

    @classmethod
    def nobody(cls) -> ACL:
        return _NOBODY

    def allows(self, user: str, groups: Iterable[str]) -> bool:
        """Wildcard first, then the user list, then each of the user's groups (all case sensitive)."""
        if self.all_allowed or user in self.users:
            return True
        if not self.groups:
            return False
        return any(group in self.groups for group in groups)


_EVERYONE = ACL(all_allowed=True)
_NOBODY = ACL()


class ACLQueue(Protocol):
    """The part of a queue that the submit-access check needs."""

    @property
    def submit_acl(self) -> ACL: ...

    @property
    def admin_acl(self) -> ACL: ...

    @property
    def parent(self) -> ACLQueue | None: ...


def has_access(queue: ACLQueue, user: str, groups: Iterable[str]) -> bool:
    """Submit access on `queue`: its submit or admin ACL (admin implies submit), or that of any ancestor."""
    group_tuple = tuple(groups)
    current: ACLQueue | None = queue
    while current is not None:
        if current.submit_acl.allows(user, group_tuple) or current.admin_acl.allows(user, group_tuple):
            return True
        current = current.parent
    return False
