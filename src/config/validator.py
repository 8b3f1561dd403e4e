"""YuniKorn's configuration validation (`configs/configvalidator.go Validate`), rule by rule.

`validate_config` takes the config as parsed (top-level queues as written, partition limits not yet copied)
and returns it normalised: a single parent `root` per partition, partition limits copied to root, the node
sort policy type resolved, all-zero resource maps dropped. Rules run per partition in the reference order:

 1. unique partition names            7. queue resources (guaranteed, max, child sums)
 2. queues set, root inserted         8. placement rules
 3. no resources on root              9. node sort policy
 4. partition limits == root limits  10. queue maxapplications
 5. ACLs and child queue names       11. user/group limit hierarchy
 6. user/group limit entries
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs

from korral import resource as res
from korral.config.schema import (
    ChildTemplateConfig,
    FilterConfig,
    LimitConfig,
    NodeSortPolicyConfig,
    PartitionConfig,
    PlacementRuleConfig,
    QueueConfig,
    ResourcesConfig,
    SchedulerConfig,
)
from korral.errors import ConfigError

ROOT = "root"
DEFAULT_PARTITION = "default"
WILDCARD = "*"

QUEUE_NAME_RE = re.compile(r"[a-zA-Z0-9_:#/@-]{1,64}")
USER_NAME_RE = re.compile(r"[_a-zA-Z][a-zA-Z0-9:#/_.@-]*\$?")
GROUP_NAME_RE = re.compile(r"[_a-zA-Z][a-zA-Z0-9:_.-]*")
RULE_NAME_RE = re.compile(r"[_a-zA-Z][a-zA-Z0-9_]*")
# characters that make a single filter entry a regular expression rather than a name
REGEXP_SPECIAL_RE = re.compile(r"[\^$*+?()\[{}|]")

FILTER_TYPES = ("", "allow", "deny")
NODE_SORT_TYPES = {"": "fair", "fair": "fair", "binpacking": "binpacking"}
RECOVERY_RULE = "recovery"
FIXED_RULE = "fixed"
TAG_RULE = "tag"
# the rules korral places with; YuniKorn also builds a "test" rule, for its own tests only
KNOWN_RULES = ("provided", "user", FIXED_RULE, TAG_RULE)

Resource = Mapping[str, int]


def validate_config(config: SchedulerConfig) -> SchedulerConfig:
    """Check every partition; return the normalised config or raise the first ConfigError found."""
    if not config.partitions:
        raise ConfigError("no partitions defined in the configuration")
    seen: set[str] = set()
    return attrs.evolve(
        config, partitions=tuple(_validate_partition(partition, seen) for partition in config.partitions)
    )


def _validate_partition(partition: PartitionConfig, seen: set[str]) -> PartitionConfig:
    # rule 1
    name = partition.name.lower() or DEFAULT_PARTITION
    if "[" in name or "]" in name:
        # korral's own rule: the core names a partition "[rmID]name", so a bracket would let one RM's
        # config name (and shadow) another RM's partition
        raise ConfigError(f"partition name {partition.name!r} must not contain '[' or ']'")
    if name in seen:
        raise ConfigError(f"duplicate partition name found with name {name}")
    seen.add(name)
    check = _PartitionChecker(name)

    # rule 2
    if not partition.queues:
        raise check.error("queue config is not set")
    top = partition.queues
    if len(top) == 1 and top[0].name.lower() == ROOT:
        root = attrs.evolve(top[0], name=ROOT, parent=True)
    else:
        root = QueueConfig(name=ROOT, parent=True, queues=top)

    # rule 3
    if root.resources.guaranteed or root.resources.max:
        raise check.error("root queue must not have resource limits set")

    # rule 4
    limits = partition.limits
    if limits and root.limits and limits != root.limits:
        raise check.error("partition limits and root queue limits must be the same when both are set")
    if not root.limits:
        root = attrs.evolve(root, limits=limits)
    limits = root.limits

    check.names_and_acls(root, ROOT, level=1)  # rule 5
    check.limit_entries(root, ROOT)  # rule 6
    check.queue_resources(root, ROOT, parent_max=None)  # rule 7
    check.placement_rules(partition.placement_rules, root)  # rule 8
    sort_type = check.node_sort_policy(partition.node_sort_policy)  # rule 9
    check.max_applications(root, ROOT)  # rule 10
    check.limit_hierarchy(root, ROOT, {}, {})  # rule 11

    return attrs.evolve(
        partition,
        name=name,
        queues=(_finalise_queue(root),),
        limits=limits,
        node_sort_policy=attrs.evolve(partition.node_sort_policy, type=sort_type),
    )


# --- resource arithmetic: korral.resource, with YuniKorn's semantics for sparse resources ---


def format_resource(resource: Resource) -> str:
    return "{" + ", ".join(f"{key}:{value}" for key, value in sorted(resource.items())) + "}"


def _acl_error(acl: str) -> str | None:
    """An ACL is "users groups": at most one space may separate the two comma-separated lists."""
    if acl.strip() in ("", WILDCARD):
        return None
    if acl.count(" ") > 1:
        return f"multiple spaces found in ACL: '{acl}'"
    return None


def _is_qualified(queue_path: str) -> bool:
    lowered = queue_path.lower()
    return lowered == ROOT or lowered.startswith(ROOT + ".")


def _rule_chain(rule: PlacementRuleConfig) -> list[PlacementRuleConfig]:
    """The rule and its parents, outermost parent first: the order in which the path is built."""
    chain = [rule]
    while chain[0].parent is not None:
        chain.insert(0, chain[0].parent)
    return chain


@attrs.frozen
class _StaticPath:
    """The fixed prefix of a rule chain's queue path, e.g. `root.users` for fixed(root.users)->user."""

    path: str
    chain: str
    has_dynamic_part: bool


def _static_path(rule: PlacementRuleConfig) -> _StaticPath:
    path = ""
    dynamic = False
    chain = _rule_chain(rule)
    for link in chain:
        if link.name != FIXED_RULE:
            dynamic = True
            break
        value = link.value.strip().lower()
        # a qualified value can only be first in the chain: a qualified fixed rule with a parent was rejected
        path = value if _is_qualified(value) else f"{path or ROOT}.{value}"
    return _StaticPath(path=path, chain="->".join(link.name for link in chain), has_dynamic_part=dynamic)


class _PartitionChecker:
    """Runs the per-partition rules; every error it raises names the partition first."""

    def __init__(self, partition: str) -> None:
        self.partition = partition

    def error(self, message: str) -> ConfigError:
        return ConfigError(f"partition '{self.partition}': {message}")

    # rule 5
    def names_and_acls(self, queue: QueueConfig, path: str, level: int) -> None:
        for key, acl in (("adminacl", queue.admin_acl), ("submitacl", queue.submit_acl)):
            problem = _acl_error(acl)
            if problem is not None:
                raise self.error(f"queue '{path}': {key}: {problem}")
        seen: set[str] = set()
        for child in queue.queues:
            if not QUEUE_NAME_RE.fullmatch(child.name):
                raise self.error(
                    f"queue '{path}': invalid child name '{child.name}', a name must only have alphanumeric "
                    "characters, _ : # / @ or -, and be no longer than 64 characters"
                )
            lowered = child.name.lower()
            if lowered in seen:
                raise self.error(
                    f"queue '{path}': duplicate child name found with name '{child.name}', level {level}"
                )
            seen.add(lowered)
        for child in queue.queues:
            self.names_and_acls(child, f"{path}.{child.name.lower()}", level + 1)

    # rule 6
    def limit_entries(self, queue: QueueConfig, path: str) -> None:
        users: set[str] = set()
        groups: set[str] = set()
        for index, limit in enumerate(queue.limits):
            self._limit_entry(
                limit, f"queue '{path}': limit #{index} '{limit.limit}'", queue, path, users, groups
            )
        for child in queue.queues:
            self.limit_entries(child, f"{path}.{child.name.lower()}")

    def _limit_entry(
        self, limit: LimitConfig, where: str, queue: QueueConfig, path: str, users: set[str], groups: set[str]
    ) -> None:
        if not limit.users and not limit.groups:
            raise self.error(f"{where}: empty user and group lists defined in limit")
        for kind, names, seen, pattern in (
            ("user", limit.users, users, USER_NAME_RE),
            ("group", limit.groups, groups, GROUP_NAME_RE),
        ):
            for name in names:
                if name != WILDCARD and not pattern.fullmatch(name):
                    raise self.error(f"{where}: invalid limit {kind} name '{name}' in limit definition")
                if name in seen:
                    raise self.error(f"{where}: duplicated {kind} name '{name}', already existed")
                if WILDCARD in seen:
                    raise self.error(
                        f"{where}: should not set no wildcard {kind} {name} after wildcard {kind} limit"
                    )
                seen.add(name)
        # A lone wildcard group limit would just repeat the queue limit for everyone (YuniKorn refuses it).
        if groups == {WILDCARD}:
            raise self.error(
                f"{where}: should not specify only one group limit that is using the wildcard. "
                "There must be at least one limit with a group name defined"
            )
        if limit.max_resources and res.is_zero(limit.max_resources):
            raise self.error(f"{where}: maxresources is zero in limit, all resource types are zero")
        if limit.max_applications == 0 and res.is_zero(limit.max_resources):
            raise self.error(
                f"{where}: invalid resource combination for limit, all resource limits are null "
                "(set maxapplications or maxresources)"
            )
        if queue.max_applications and limit.max_applications > queue.max_applications:
            raise self.error(
                f"{where}: invalid maxapplications settings for limit: {limit.max_applications} exceeds "
                f"the queue maxapplications {queue.max_applications}"
            )
        # root has no configured max: its limit is the cluster size, only known at run time
        if path != ROOT and not res.fits_in_max(limit.max_resources, queue.resources.max):
            raise self.error(
                f"{where}: invalid maxresources settings for limit: {format_resource(limit.max_resources)} "
                f"exceeds the queue max resources {format_resource(queue.resources.max)}"
            )

    # rule 7
    def queue_resources(self, queue: QueueConfig, path: str, parent_max: Resource | None) -> Resource:
        """Check the queue and its subtree; return its guarantee (its own, else its children's sum)."""
        guaranteed, maximum = queue.resources.guaranteed, queue.resources.max
        if not res.fits_in_max(guaranteed, maximum):
            raise self.error(
                f"queue '{path}': guaranteed resource {format_resource(guaranteed)} is larger than "
                f"maximum resource {format_resource(maximum)}"
            )
        if parent_max is not None and not res.fits_in_max(maximum, parent_max):
            raise self.error(
                f"queue '{path}': max resource of parent {format_resource(parent_max)} is smaller than "
                f"maximum resource {format_resource(maximum)}"
            )
        effective_max = res.min_of_limits(maximum, parent_max) or {}
        children_guaranteed: dict[str, int] = {}
        for child in queue.queues:
            children_guaranteed = res.add(
                children_guaranteed,
                self.queue_resources(child, f"{path}.{child.name.lower()}", effective_max),
            )
        if not res.fits_in_max(children_guaranteed, guaranteed):
            raise self.error(
                f"queue '{path}': guaranteed resource of parent {format_resource(guaranteed)} is smaller "
                f"than sum of guaranteed resources {format_resource(children_guaranteed)} of the children"
            )
        if not res.fits_in_max(children_guaranteed, effective_max):
            raise self.error(
                f"queue '{path}': max resource {format_resource(effective_max)} is smaller than sum of "
                f"guaranteed resources {format_resource(children_guaranteed)} of the children"
            )
        return children_guaranteed if res.is_zero(guaranteed) else guaranteed

    # rule 8
    def placement_rules(self, rules: tuple[PlacementRuleConfig, ...], root: QueueConfig) -> None:
        for index, rule in enumerate(rules):
            self._rule(rule, f"placement rule #{index} ({rule.name})")
        for index, rule in enumerate(rules):
            static = _static_path(rule)
            if _is_qualified(static.path):
                self._static_path(static, rule.create, root, f"placement rule no. #{index} ({static.chain})")

    def _rule(self, rule: PlacementRuleConfig, where: str) -> None:
        if not RULE_NAME_RE.fullmatch(rule.name):
            raise self.error(f"{where}: invalid rule name '{rule.name}', a name must be a valid identifier")
        if rule.name == RECOVERY_RULE:
            raise self.error(f"{where}: recovery rule cannot be part of the config")
        if rule.name.lower() not in KNOWN_RULES:
            # Stricter than YuniKorn, whose validator passes the name and whose partition then
            # rejects every application; korral refuses the config instead (docs/api.md)
            raise self.error(
                f"{where}: unknown placement rule name '{rule.name}', "
                f"known rules are {', '.join(KNOWN_RULES)} (korral is stricter than YuniKorn here: "
                "YuniKorn accepts this config and then runs the partition without placement rules, "
                "rejecting every application)"
            )
        if rule.parent is not None:
            self._rule(rule.parent, f"{where}: parent rule ({rule.parent.name})")
        self._filter(rule.filter, where)
        value = rule.value.strip()
        if rule.name == TAG_RULE and not value:
            raise self.error(f"{where}: a tag rule must have the tag name set in 'value'")
        if rule.name == FIXED_RULE:
            if not value:
                raise self.error(f"{where}: a fixed rule must have a queue name set in 'value'")
            if _is_qualified(value) and rule.parent is not None:
                raise self.error(
                    f"{where}: a fixed rule with a fully qualified queue name ({value}) "
                    "cannot have a parent rule"
                )
            for part in value.split("."):
                if not QUEUE_NAME_RE.fullmatch(part):
                    raise self.error(f"{where}: invalid queue name '{part}' in fixed rule value '{value}'")

    def _filter(self, rule_filter: FilterConfig, where: str) -> None:
        if rule_filter.type.lower() not in FILTER_TYPES:
            raise self.error(
                f"{where}: invalid rule filter type {rule_filter.type}, "
                "filter type must be either '', allow or deny"
            )
        for kind, entries, pattern in (
            ("user", rule_filter.users, USER_NAME_RE),
            ("group", rule_filter.groups, GROUP_NAME_RE),
        ):
            # one entry is a name or a regexp; in a longer list anything that is not a name is ignored later
            if len(entries) == 1 and not pattern.fullmatch(entries[0]) and not _is_regexp(entries[0]):
                raise self.error(
                    f"{where}: invalid rule filter {kind} list is not a proper list or regexp: "
                    f"{list(entries)}"
                )

    def _static_path(self, static: _StaticPath, create: bool, root: QueueConfig, where: str) -> None:
        parts = static.path.split(".")
        level: tuple[QueueConfig, ...] = (root,)
        parent: QueueConfig | None = None
        for depth, part in enumerate(parts):
            if parent is not None and not parent.is_parent:
                raise self.error(
                    f"{where} references non-existing queues ({static.path}) which cannot be created because "
                    f"the last queue ({'.'.join(parts[:depth])}) in the hierarchy is a leaf"
                )
            found = next((queue for queue in level if queue.name.lower() == part), None)
            if found is None:
                if create:
                    return
                raise self.error(
                    f"{where} references non-existing queues ({static.path}) and create is 'false'"
                )
            if depth == len(parts) - 1:
                if static.has_dynamic_part and not found.is_parent:
                    raise self.error(
                        f"{where} references a queue ({static.path}) which is a leaf: the rules that follow "
                        "need it to be a parent"
                    )
                if not static.has_dynamic_part and found.is_parent:
                    raise self.error(f"{where} references a queue ({static.path}) which is not a leaf")
                return
            parent, level = found, found.queues

    # rule 9
    def node_sort_policy(self, policy: NodeSortPolicyConfig) -> str:
        sort_type = NODE_SORT_TYPES.get(policy.type.lower())
        if sort_type is None:
            raise self.error(f"nodesortpolicy: undefined policy: {policy.type}")
        for key, weight in policy.resource_weights.items():
            if weight < 0:
                raise self.error(f"nodesortpolicy: negative resource weight for {key} is not allowed")
        return sort_type

    # rule 10
    def max_applications(self, queue: QueueConfig, path: str) -> None:
        for child in queue.queues:
            child_path = f"{path}.{child.name.lower()}"
            if queue.max_applications and (
                child.max_applications == 0 or child.max_applications > queue.max_applications
            ):
                raise self.error(
                    f"queue '{child_path}': parent maxRunningApps must be larger than child maxRunningApps "
                    f"(parent {path} maxapplications {queue.max_applications}, "
                    f"child maxapplications {child.max_applications or 'unset'})"
                )
            self.max_applications(child, child_path)

    # rule 11
    def limit_hierarchy(
        self,
        queue: QueueConfig,
        path: str,
        users: dict[str, tuple[Resource, int]],
        groups: dict[str, tuple[Resource, int]],
    ) -> None:
        """Walk down carrying, per user and group, the tightest ancestor limit (0 apps = unlimited)."""
        if queue.limits:
            users, groups = dict(users), dict(groups)
            inherited_users, inherited_groups = dict(users), dict(groups)
            for limit in queue.limits:
                for kind, names, inherited, current in (
                    ("user", limit.users, inherited_users, users),
                    ("group", limit.groups, inherited_groups, groups),
                ):
                    for name in names:
                        current[name] = self._fit_ancestor(kind, name, limit, path, inherited)
        for child in queue.queues:
            self.limit_hierarchy(child, f"{path}.{child.name.lower()}", users, groups)

    def _fit_ancestor(
        self, kind: str, name: str, limit: LimitConfig, path: str, inherited: dict[str, tuple[Resource, int]]
    ) -> tuple[Resource, int]:
        ancestor = inherited.get(name)
        if ancestor is None and name != WILDCARD:
            ancestor = inherited.get(WILDCARD)
        if ancestor is None:
            return limit.max_resources, limit.max_applications
        ancestor_resources, ancestor_apps = ancestor
        if not res.fits_in_max(limit.max_resources, ancestor_resources):
            raise self.error(
                f"queue '{path}': {kind} {name} max resource {format_resource(limit.max_resources)} is "
                "greater than immediate or ancestor parent maximum resource "
                f"{format_resource(ancestor_resources)}"
            )
        if ancestor_apps and (limit.max_applications == 0 or limit.max_applications > ancestor_apps):
            raise self.error(
                f"queue '{path}': {kind} {name} max applications {limit.max_applications} is greater than "
                f"immediate or ancestor parent max applications {ancestor_apps}"
            )
        apps = min(ancestor_apps, limit.max_applications) if ancestor_apps else limit.max_applications
        return res.min_of_limits(limit.max_resources, ancestor_resources) or {}, apps


def _is_regexp(entry: str) -> bool:
    if not REGEXP_SPECIAL_RE.search(entry):
        return False
    try:
        re.compile(entry)
    except re.error:
        return False
    return True


def _prune(resources: ResourcesConfig) -> ResourcesConfig:
    # YuniKorn ignores an all-zero max or guaranteed ("cannot set zero max resources"); a zero next to a
    # non-zero value stays, as it means "none of this type".
    return ResourcesConfig(
        guaranteed={} if res.is_zero(resources.guaranteed) else dict(resources.guaranteed),
        max={} if res.is_zero(resources.max) else dict(resources.max),
    )


def _finalise_queue(queue: QueueConfig) -> QueueConfig:
    template: ChildTemplateConfig | None = queue.child_template
    if template is not None:
        template = attrs.evolve(template, resources=_prune(template.resources))
    return attrs.evolve(
        queue,
        name=queue.name.lower(),
        resources=_prune(queue.resources),
        child_template=template,
        queues=tuple(_finalise_queue(child) for child in queue.queues),
    )
