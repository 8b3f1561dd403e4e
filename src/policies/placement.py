"""Application placement rules: map a submitted application to a fully qualified queue path.

Rules are tried in configured order (YuniKorn's `pkg/scheduler/placement`). Each rule generates a candidate
queue path (optionally below the result of a chain of parent rules) and the manager accepts the first
candidate that the application may use: an existing, non-draining leaf the user may submit to, or a missing
queue whose deepest existing ancestor the user may submit to (the caller creates it). The internal
`recovery` rule always runs last, after which `root.default` is the final fallback.

Decisions where YuniKorn is ambiguous or quirky (see the module tests for each):

* A rule *error* (a generated name that is not a valid queue name, or a parent rule result that exists as a
  leaf queue) rejects the application at once with that reason, as YuniKorn does; it does not fall through
  to the next rule. A rule that merely does not match (filtered, empty provided queue, missing tag, queue
  missing without create, an existing queue that is a parent, draining or closed to the user, a missing
  queue whose deepest existing ancestor is closed to the user) lets the next rule run.
* A missing queue is accepted whatever its deepest existing ancestor is, as YuniKorn's placement does; when
  that ancestor is a leaf or draining, creating the queue fails and the application is rejected (it does
  not fall through to the next rule).
* The recovery queue `root.@recovery@` is reserved: `@` is a valid queue name character, so a normal rule can
  generate that path, but such a candidate is always refused (YuniKorn's ACL check on it always fails
  once it exists; while it does not, YuniKorn checks the root's ACL and creates it: not copied, api.md).
  Only the recovery rule places there, and it bypasses the ACL, leaf and draining checks.
* A provided queue or tag value is fully qualified only when it starts with `root.` as given (case
  included): `root` alone, or `Root.x`, is a short name placed below the parent (`root.root`,
  `root.root_dot_x`), as YuniKorn's rules read it. A user name is always a short name. A fixed value is
  qualified when it is `root` or starts with `root.` (YuniKorn's fixed rule uses a bare `root` prefix test,
  so its `rootx` would count as qualified; that quirk is not copied).
* The fixed rule keeps the dots in an unqualified value as the hierarchy separator (seed document); only
  user, provided and tag results have dots replaced by `_dot_`.
* The `root.default` fallback is checked like any candidate: it must exist, be a leaf, not be draining and
  the user must have submit access. Its `Placement.rule` is ``"default"``.
* `application.create.force` is read case-insensitively and is true for Go's `strconv.ParseBool` true values.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import attrs

from korral.config.schema import FilterConfig, PlacementRuleConfig

# queue names and regular-expression filter entries: one definition, the config validator's
from korral.config.validator import QUEUE_NAME_RE, REGEXP_SPECIAL_RE
from korral.errors import KorralError
from korral.policies.acl import ACL, GROUP_NAME_PATTERN, USER_NAME_PATTERN, ACLQueue, has_access

ROOT_QUEUE = "root"
DOT = "."
DOT_REPLACEMENT = "_dot_"
RECOVERY_QUEUE = "@recovery@"
RECOVERY_QUEUE_PATH = f"{ROOT_QUEUE}.{RECOVERY_QUEUE}"
DEFAULT_QUEUE_PATH = f"{ROOT_QUEUE}.default"
CREATE_FORCE_TAG = "application.create.force"
NO_RULE_MATCHED = "application rejected: no placement rule matched"

RULE_PROVIDED = "provided"
RULE_USER = "user"
RULE_FIXED = "fixed"
RULE_TAG = "tag"
RULE_RECOVERY = "recovery"
FALLBACK_RULE = "default"
CONFIGURABLE_RULES = frozenset({RULE_PROVIDED, RULE_USER, RULE_FIXED, RULE_TAG})

_TRUE_VALUES = frozenset({"1", "t", "T", "true", "TRUE", "True"})


class PlacementQueue(ACLQueue, Protocol):
    """What placement needs from a queue of the model's queue tree."""

    @property
    def path(self) -> str: ...

    @property
    def is_leaf(self) -> bool: ...

    @property
    def is_draining(self) -> bool: ...

    @property
    def submit_acl(self) -> ACL: ...

    @property
    def admin_acl(self) -> ACL: ...

    @property
    def parent(self) -> PlacementQueue | None: ...


class QueueLookup(Protocol):
    def get_queue(self, path: str) -> PlacementQueue | None: ...


def _names(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen
class PlacementRequest:
    application_id: str
    queue_name: str  # as submitted: "" or a short name or a fully qualified path
    user: str
    groups: tuple[str, ...] = attrs.field(default=(), converter=_names)
    tags: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class Placement:
    queue_path: str  # fully qualified, lower case
    create: bool  # the queue does not exist yet; the caller creates it (and any missing parents)
    rule: str


class PlacementError(KorralError):
    """The application cannot be placed; `reason` is the rejection message."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class PlacementRuleError(KorralError):
    """The configured rule set cannot be built."""


@attrs.frozen
class _Filter:
    allow: bool
    empty: bool
    users: frozenset[str]
    groups: frozenset[str]
    user_exp: re.Pattern[str] | None
    group_exp: re.Pattern[str] | None

    @classmethod
    def from_config(cls, conf: FilterConfig) -> _Filter:
        users, user_exp = _filter_entries(conf.users, USER_NAME_PATTERN)
        groups, group_exp = _filter_entries(conf.groups, GROUP_NAME_PATTERN)
        return cls(
            allow=conf.type != "deny",
            empty=not conf.users and not conf.groups,
            users=users,
            groups=groups,
            user_exp=user_exp,
            group_exp=group_exp,
        )

    def describe(self) -> dict[str, Any] | None:
        """YuniKorn's FilterDAO fields (None: no filter)."""
        if self.empty and self.allow:
            return None
        described: dict[str, Any] = {"type": "allow" if self.allow else "deny"}
        if self.users:
            described["userList"] = sorted(self.users)
        if self.groups:
            described["groupList"] = sorted(self.groups)
        if self.user_exp is not None:
            described["userExp"] = self.user_exp.pattern
        if self.group_exp is not None:
            described["groupExp"] = self.group_exp.pattern
        return described

    def allows(self, user: str, groups: tuple[str, ...]) -> bool:
        if self.empty:
            return self.allow
        if self._matches_user(user):
            return self.allow
        for group in groups:
            if self._matches_group(group):
                return self.allow
        return not self.allow

    def _matches_user(self, user: str) -> bool:
        if self.user_exp is not None:
            return self.user_exp.search(user) is not None
        return user in self.users

    def _matches_group(self, group: str) -> bool:
        if self.group_exp is not None:
            return self.group_exp.search(group) is not None
        return group in self.groups


_NO_FILTER = _Filter(
    allow=True, empty=True, users=frozenset(), groups=frozenset(), user_exp=None, group_exp=None
)


def _filter_entries(
    entries: tuple[str, ...], name_pattern: re.Pattern[str]
) -> tuple[frozenset[str], re.Pattern[str] | None]:
    """A single entry may be a regexp (unanchored, like Go's MatchString); lists keep valid names only."""
    if len(entries) == 1 and REGEXP_SPECIAL_RE.search(entries[0]):
        try:
            return frozenset(), re.compile(entries[0])
        except re.error:
            # YuniKorn ignores an expression that does not compile: the entry then matches nobody.
            return frozenset(), None
    return frozenset(entry for entry in entries if name_pattern.fullmatch(entry)), None


def _is_qualified(name: str) -> bool:
    """A fixed rule's value: ``root`` or below it."""
    return name == ROOT_QUEUE or name.startswith(ROOT_QUEUE + DOT)


def _is_given_qualified(rule_name: str, raw: str) -> bool:
    """A generated name used as a full path: a provided or tag value starting ``root.`` as given (YuniKorn
    compares before lower-casing), a fixed value per ``_is_qualified``; a user name never."""
    if rule_name == RULE_FIXED:
        return _is_qualified(raw)
    return rule_name != RULE_USER and raw.startswith(ROOT_QUEUE + DOT)


def _check_queue_names(path: str) -> None:
    for part in path.split(DOT):
        if not QUEUE_NAME_RE.fullmatch(part):
            raise PlacementError(
                f"invalid queue name '{part}' in '{path}': a queue name must only have alphanumeric "
                "characters, '-', '_', ':', '#', '/' or '@' and be 1 to 64 characters long"
            )


def _is_recovery_path(path: str) -> bool:
    return path == RECOVERY_QUEUE_PATH or path.startswith(RECOVERY_QUEUE_PATH + DOT)


def is_create_forced(tags: Mapping[str, str]) -> bool:
    """YuniKorn's IsAppCreationForced: the tag's key in any case, its value a Go ParseBool true."""
    value = tags.get(CREATE_FORCE_TAG)
    if value is None:
        value = next((val for key, val in tags.items() if key.lower() == CREATE_FORCE_TAG), "")
    return value in _TRUE_VALUES


def tag_value(tags: Mapping[str, str], tag_name: str) -> str:
    """An application's tag as YuniKorn's GetTag reads it: the key in any case (``tag_name`` lower case)."""
    value = tags.get(tag_name)
    if value is not None:
        return value
    return next((val for key, val in tags.items() if key.lower() == tag_name), "")


@attrs.frozen
class _Rule:
    name: str
    create: bool
    filter: _Filter
    parent: _Rule | None
    value: str  # lower case: the fixed queue or the tag name

    @classmethod
    def from_config(cls, conf: PlacementRuleConfig) -> _Rule:
        name = conf.name.lower()
        if name == RULE_RECOVERY:
            raise PlacementRuleError("recovery rule cannot be part of the config")
        if name not in CONFIGURABLE_RULES:
            raise PlacementRuleError(
                f"unknown rule name specified {conf.name}, failing placement rule config"
            )
        value = conf.value.lower()
        if name == RULE_FIXED:
            if not value:
                raise PlacementRuleError("a fixed queue rule must have a queue name set")
            if _is_qualified(value) and conf.parent is not None:
                raise PlacementRuleError(
                    "cannot have a fixed queue rule with a qualified queue name and a parent rule: "
                    f"{conf.value}"
                )
        if name == RULE_TAG and not value:
            raise PlacementRuleError("a tag queue rule must have a tag name set")
        has_filter = bool(conf.filter.type or conf.filter.users or conf.filter.groups)
        return cls(
            name=name,
            create=conf.create,
            filter=_Filter.from_config(conf.filter) if has_filter else _NO_FILTER,
            parent=cls.from_config(conf.parent) if conf.parent is not None else None,
            value=value,
        )

    def describe(self) -> dict[str, Any]:
        """YuniKorn's RuleDAO fields: name, parameters, filter, parentRule (empty ones left out)."""
        parameters = {"create": "true" if self.create else "false"}
        if self.name == RULE_FIXED:
            parameters = {"queue": self.value, **parameters}
            parameters["qualified"] = "true" if _is_qualified(self.value) else "false"
        elif self.name == RULE_TAG:
            parameters = {"tagName": self.value, **parameters}
        described: dict[str, Any] = {"name": self.name, "parameters": parameters}
        filter_described = self.filter.describe()
        if filter_described is not None:
            described["filter"] = filter_described
        if self.parent is not None:
            described["parentRule"] = self.parent.describe()
        return described

    def _raw_name(self, request: PlacementRequest) -> str:
        if self.name == RULE_PROVIDED:
            return request.queue_name
        if self.name == RULE_USER:
            return request.user
        if self.name == RULE_FIXED:
            return self.value
        return tag_value(request.tags, self.value)

    def generate(self, request: PlacementRequest, queues: QueueLookup) -> str | None:
        """The rule's fully qualified queue path, or None when the rule does not match.

        Raises PlacementError for a rule error (invalid name, parent result that is a leaf queue).
        """
        raw = self._raw_name(request)
        if not raw and self.name in (RULE_PROVIDED, RULE_TAG):
            return None
        if not self.filter.allows(request.user, request.groups):
            return None
        qualified = _is_given_qualified(self.name, raw)
        raw = raw.lower()
        if qualified:
            _check_queue_names(raw)
            path = raw
        else:
            child = raw if self.name == RULE_FIXED else raw.replace(DOT, DOT_REPLACEMENT)
            _check_queue_names(child)
            parent_path = ROOT_QUEUE
            if self.parent is not None:
                generated = self.parent.generate(request, queues)
                if generated is None:
                    return None
                parent_queue = queues.get_queue(generated)
                if parent_queue is not None and parent_queue.is_leaf:
                    raise PlacementError(f"parent rule returned a leaf queue: {generated}")
                parent_path = generated
            path = f"{parent_path}{DOT}{child}"
        if not self.create and queues.get_queue(path) is None:
            return None
        return path


class PlacementManager:
    """An immutable, built rule set; `place` is called once per application add."""

    __slots__ = ("_rules",)

    def __init__(self, rules: tuple[_Rule, ...]) -> None:
        self._rules = rules

    @classmethod
    def build(cls, rules: tuple[PlacementRuleConfig, ...]) -> PlacementManager:
        """Build the rule set; raises PlacementRuleError if any rule (or parent rule) is broken."""
        if not rules:
            rules = (PlacementRuleConfig(name=RULE_PROVIDED, create=False),)
        return cls(tuple(_Rule.from_config(conf) for conf in rules))

    def describe(self) -> list[dict[str, Any]]:
        """The rules in the order they run, as YuniKorn's REST API shows them (RuleDAO), the implicit
        recovery rule last."""
        return [*(rule.describe() for rule in self._rules), {"name": RULE_RECOVERY}]

    @property
    def rule_names(self) -> tuple[str, ...]:
        """Top-level rule names in execution order, including the implicit trailing recovery rule."""
        return (*(rule.name for rule in self._rules), RULE_RECOVERY)

    def place(self, request: PlacementRequest, queues: QueueLookup) -> Placement:
        for rule in self._rules:
            path = rule.generate(request, queues)
            if path is None or _is_recovery_path(path):
                continue
            placement = _accept(path, rule.name, request, queues)
            if placement is not None:
                return placement
        if is_create_forced(request.tags):
            exists = queues.get_queue(RECOVERY_QUEUE_PATH) is not None
            return Placement(queue_path=RECOVERY_QUEUE_PATH, create=not exists, rule=RULE_RECOVERY)
        default = queues.get_queue(DEFAULT_QUEUE_PATH)
        if default is not None and _usable_leaf(default, request):
            return Placement(queue_path=DEFAULT_QUEUE_PATH, create=False, rule=FALLBACK_RULE)
        raise PlacementError(NO_RULE_MATCHED)


def _usable_leaf(queue: PlacementQueue, request: PlacementRequest) -> bool:
    return queue.is_leaf and not queue.is_draining and has_access(queue, request.user, request.groups)


def _accept(path: str, rule_name: str, request: PlacementRequest, queues: QueueLookup) -> Placement | None:
    queue = queues.get_queue(path)
    if queue is not None:
        if _usable_leaf(queue, request):
            return Placement(queue_path=path, create=False, rule=rule_name)
        return None
    # The rule may create the queue: the deepest existing ancestor's submit access decides (whether it
    # can take a child is for the creation to say: a leaf or draining one rejects the application).
    ancestor: PlacementQueue | None = None
    current = path
    while ancestor is None:
        cut = current.rfind(DOT)
        if cut < 0:
            return None
        current = current[:cut]
        ancestor = queues.get_queue(current)
    if not has_access(ancestor, request.user, request.groups):
        return None
    return Placement(queue_path=path, create=True, rule=rule_name)
