"""Turn queues.yaml text into a validated `SchedulerConfig` (YuniKorn's `LoadSchedulerConfigFromByteArray`).

Parsing is strict like YuniKorn's (`KnownFields(true)`): an unknown key or a value of the wrong type anywhere
is a `ConfigError` that names the key and where it is. The parsed form is then normalised and validated by
`korral.config.validator.validate_config`.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from typing import Any

import attrs

from korral.config.quantity import parse_resources
from korral.config.schema import (
    DEFAULT_RESOURCE_WEIGHTS,
    ChildTemplateConfig,
    FilterConfig,
    LimitConfig,
    NodeSortPolicyConfig,
    PartitionConfig,
    PlacementRuleConfig,
    PreemptionConfig,
    QueueConfig,
    ResourcesConfig,
    SchedulerConfig,
)
from korral.config.validator import validate_config
from korral.config.yaml_reader import LongInteger, read_yaml
from korral.errors import ConfigError, ConfigLimitError

# YuniKorn's configs.DefaultSchedulerConfig, used when a resource manager registers without a config.
DEFAULT_CONFIG_TEXT = """\
partitions:
  - name: default
    placementrules:
      - name: tag
        value: namespace
        create: true
    queues:
      - name: root
        submitacl: '*'
"""

_TOP_KEYS = frozenset({"partitions", "checksum"})
_PARTITION_KEYS = frozenset(
    {"name", "queues", "placementrules", "limits", "preemption", "nodesortpolicy", "usergroupresolver"}
)
_QUEUE_KEYS = frozenset(
    {
        "name",
        "parent",
        "resources",
        "maxapplications",
        "properties",
        "adminacl",
        "submitacl",
        "childtemplate",
        "queues",
        "limits",
    }
)
_RESOURCES_KEYS = frozenset({"guaranteed", "max"})
_TEMPLATE_KEYS = frozenset({"maxapplications", "properties", "resources"})
_RULE_KEYS = frozenset({"name", "create", "filter", "parent", "value"})
_FILTER_KEYS = frozenset({"type", "users", "groups"})
_LIMIT_KEYS = frozenset({"limit", "users", "groups", "maxresources", "maxapplications"})
_PREEMPTION_KEYS = frozenset({"enabled", "quotapreemptionenabled"})
_NODE_SORT_KEYS = frozenset({"type", "resourceweights"})
_RESOLVER_KEYS = frozenset({"type"})

_MAX_UINT64 = 2**64 - 1
# queues one configuration may define, over all its partitions (each becomes an actor): 100,000 is a
# case korral is measured with (docs/api.md, "Bounds of a configuration")
MAX_QUEUES = 200_000
_CHECKSUM_LINE = re.compile(r"^checksum:[^\n]*(?:\n|\Z)", re.MULTILINE)


# the same text parses to the same immutable config: the last few small texts are kept (RMs
# re-register and reload with the text they sent before), at most this many of at most this size
_CACHED_CONFIGS = 32
_CACHED_TEXT_CHARS = 64 * 1024


def load_config(text: str) -> SchedulerConfig:
    """Parse, normalise and validate a queues.yaml document; empty text means YuniKorn's default config."""
    if not isinstance(text, str):
        raise ConfigError(f"configuration must be text, got {type(text).__name__}")
    if len(text) <= _CACHED_TEXT_CHARS:
        return _load_cached(text)
    return _load(text)


@functools.lru_cache(maxsize=_CACHED_CONFIGS)
def _load_cached(text: str) -> SchedulerConfig:
    return _load(text)  # a ConfigError is raised again on every call: only successes are kept


def _load(text: str) -> SchedulerConfig:
    if not text.strip():
        text = DEFAULT_CONFIG_TEXT
    data = read_yaml(text)  # bounded: size, nesting, aliases (korral.config.yaml_reader)
    config = validate_config(_parse_config(data))
    return attrs.evolve(config, checksum=config_checksum(text))


@functools.cache
def default_config() -> SchedulerConfig:
    """YuniKorn's default configuration: partition `default`, rule `tag` (namespace, create), open root."""
    return load_config(DEFAULT_CONFIG_TEXT)


def config_checksum(text: str) -> str:
    """SHA-256 of the text without its top-level `checksum:` line, upper-case hex as YuniKorn prints it."""
    stripped = _CHECKSUM_LINE.sub("", text)
    return hashlib.sha256(stripped.encode("utf-8")).hexdigest().upper()


# --- typed accessors: every one names the key and the place when the value has the wrong type ---


def _type_name(value: object) -> str:
    if isinstance(value, Mapping):
        return "a map"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return f"the boolean {value!r}"
    return f"{type(value).__name__} {value!r}"


def _as_map(value: object, where: str, allowed: frozenset[str] | None = None) -> Mapping[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a map, got {_type_name(value)}")
    if allowed is not None:
        for key in value:
            if key not in allowed:
                raise ConfigError(f"{where}: unknown key {key!r} (known keys: {', '.join(sorted(allowed))})")
    return value


def _as_list(value: object, key: str, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{where}: '{key}' must be a list, got {_type_name(value)}")
    return value


def _scalar_text(value: object) -> str | None:
    """The text a Go string field would receive for a YAML scalar, None when it is not a scalar."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return None


def _as_str(value: object, key: str, where: str) -> str:
    text = _scalar_text(value)
    if text is None:
        raise ConfigError(f"{where}: '{key}' must be a string, got {_type_name(value)}")
    return text


def _as_bool(value: object, key: str, where: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: '{key}' must be true or false, got {_type_name(value)}")
    return value


def _as_uint(value: object, key: str, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, LongInteger):
        raise ConfigError(f"{where}: '{key}' is too large: an integer of {len(value):,} characters")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: '{key}' must be a non-negative integer, got {_type_name(value)}")
    if value < 0:
        raise ConfigError(f"{where}: '{key}' must not be negative, got {value}")
    if value > _MAX_UINT64:
        raise ConfigError(f"{where}: '{key}' is too large: {value}")
    return value


def _as_str_list(value: object, key: str, where: str) -> tuple[str, ...]:
    items: list[str] = []
    for item in _as_list(value, key, where):
        text = None if item is None else _scalar_text(item)
        if text is None:
            raise ConfigError(f"{where}: '{key}' entries must be strings, got {_type_name(item)}")
        items.append(text)
    return tuple(items)


def _as_str_map(value: object, key: str, where: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for map_key, map_value in _as_map(value, f"{where}: '{key}'").items():
        text = _scalar_text(map_value)
        if text is None:
            raise ConfigError(
                f"{where}: '{key}' value for {map_key!r} must be a string, got {_type_name(map_value)}"
            )
        result[str(map_key)] = text
    return result


# --- the document ---


def _count_queues(raw_partitions: list[Any]) -> int:
    """The queues the document defines, before any is parsed: a list shared through YAML aliases is
    counted once per place it appears (so as often as the parse would build it), but walked once."""
    seen: dict[int, int] = {}

    def in_list(queues: object) -> int:
        if not isinstance(queues, list):
            return 0
        known = seen.get(id(queues))
        if known is None:
            known = seen[id(queues)] = sum(
                1 + in_list(queue.get("queues")) for queue in queues if isinstance(queue, Mapping)
            )
        return known

    return sum(in_list(p.get("queues")) for p in raw_partitions if isinstance(p, Mapping))


def _parse_config(data: object) -> SchedulerConfig:
    top = _as_map(data, "configuration (top level)", _TOP_KEYS)
    _as_str(top.get("checksum"), "checksum", "configuration (top level)")
    raw_partitions = _as_list(top.get("partitions"), "partitions", "configuration (top level)")
    queues = _count_queues(raw_partitions)
    if queues > MAX_QUEUES:
        raise ConfigLimitError(f"too many queues: {queues:,}, over the limit of {MAX_QUEUES:,} queues")
    return SchedulerConfig(
        partitions=tuple(_parse_partition(raw, index) for index, raw in enumerate(raw_partitions))
    )


def _parse_partition(raw: object, index: int) -> PartitionConfig:
    partition = _as_map(raw, f"partitions[{index}]", _PARTITION_KEYS)
    name = _as_str(partition.get("name"), "name", f"partitions[{index}]").lower() or "default"
    where = f"partition '{name}'"

    raw_queues = _as_list(partition.get("queues"), "queues", where)
    # Paths in messages are the final ones: YuniKorn wraps the top level in `root` unless it is a lone root.
    top_is_root = (
        len(raw_queues) == 1
        and isinstance(raw_queues[0], Mapping)
        and str(raw_queues[0].get("name") or "").lower() == "root"
    )
    parent_path = None if top_is_root else "root"
    queues = tuple(
        _parse_queue(raw_queue, parent_path, f"{where}: queues[{pos}]", where)
        for pos, raw_queue in enumerate(raw_queues)
    )

    rules = tuple(
        _parse_rule(raw_rule, f"{where}: placementrules[{pos}]")
        for pos, raw_rule in enumerate(_as_list(partition.get("placementrules"), "placementrules", where))
    )
    limits = _parse_limits(partition.get("limits"), where)

    preemption = _as_map(partition.get("preemption"), f"{where}: preemption", _PREEMPTION_KEYS)
    node_sort = _as_map(partition.get("nodesortpolicy"), f"{where}: nodesortpolicy", _NODE_SORT_KEYS)
    resolver = _as_map(partition.get("usergroupresolver"), f"{where}: usergroupresolver", _RESOLVER_KEYS)
    return PartitionConfig(
        name=name,
        queues=queues,
        placement_rules=rules,
        limits=limits,
        preemption=PreemptionConfig(
            enabled=_as_bool(preemption.get("enabled"), "enabled", f"{where}: preemption", True),
            quota_preemption_enabled=_as_bool(
                preemption.get("quotapreemptionenabled"),
                "quotapreemptionenabled",
                f"{where}: preemption",
                False,
            ),
        ),
        node_sort_policy=NodeSortPolicyConfig(
            type=_as_str(node_sort.get("type"), "type", f"{where}: nodesortpolicy").lower(),
            resource_weights=_parse_weights(node_sort.get("resourceweights"), f"{where}: nodesortpolicy"),
        ),
        user_group_resolver=_as_str(resolver.get("type"), "type", f"{where}: usergroupresolver").lower(),
    )


def _parse_queue(raw: object, parent_path: str | None, position: str, partition_where: str) -> QueueConfig:
    queue = _as_map(raw, position)
    name = _as_str(queue.get("name"), "name", position).lower()
    path = name if parent_path is None else f"{parent_path}.{name}"
    where = f"{partition_where}: queue '{path}'"
    _as_map(queue, where, _QUEUE_KEYS)

    template_raw = queue.get("childtemplate")
    template = None if template_raw is None else _parse_template(template_raw, f"{where}: childtemplate")
    children = tuple(
        _parse_queue(child, path, f"{where}: queues[{pos}]", partition_where)
        for pos, child in enumerate(_as_list(queue.get("queues"), "queues", where))
    )
    return QueueConfig(
        name=name,
        parent=_as_bool(queue.get("parent"), "parent", where, False),
        resources=_parse_resources_block(queue.get("resources"), f"{where}: resources"),
        max_applications=_as_uint(queue.get("maxapplications"), "maxapplications", where),
        properties=_as_str_map(queue.get("properties"), "properties", where),
        admin_acl=_as_str(queue.get("adminacl"), "adminacl", where),
        submit_acl=_as_str(queue.get("submitacl"), "submitacl", where),
        child_template=template,
        queues=children,
        limits=_parse_limits(queue.get("limits"), where),
    )


def _parse_resources_block(raw: object, where: str) -> ResourcesConfig:
    block = _as_map(raw, where, _RESOURCES_KEYS)
    # zeros are kept: validation compares them, and for a max an explicit zero means "none of this type"
    return ResourcesConfig(
        guaranteed=parse_resources(
            _as_map(block.get("guaranteed"), f"{where}: guaranteed"), f"{where}: guaranteed", keep_zero=True
        ),
        max=parse_resources(_as_map(block.get("max"), f"{where}: max"), f"{where}: max", keep_zero=True),
    )


def _parse_template(raw: object, where: str) -> ChildTemplateConfig | None:
    template = _as_map(raw, where, _TEMPLATE_KEYS)
    parsed = ChildTemplateConfig(
        max_applications=_as_uint(template.get("maxapplications"), "maxapplications", where),
        properties=_as_str_map(template.get("properties"), "properties", where),
        resources=_parse_resources_block(template.get("resources"), f"{where}: resources"),
    )
    # an empty template is no template, so the queue still inherits its parent's
    return None if parsed == ChildTemplateConfig() else parsed


def _parse_limits(raw: object, where: str) -> tuple[LimitConfig, ...]:
    limits: list[LimitConfig] = []
    for pos, raw_limit in enumerate(_as_list(raw, "limits", where)):
        limit_where = f"{where}: limits[{pos}]"
        limit = _as_map(raw_limit, limit_where, _LIMIT_KEYS)
        limits.append(
            LimitConfig(
                limit=_as_str(limit.get("limit"), "limit", limit_where),
                users=_as_str_list(limit.get("users"), "users", limit_where),
                groups=_as_str_list(limit.get("groups"), "groups", limit_where),
                max_resources=parse_resources(
                    _as_map(limit.get("maxresources"), f"{limit_where}: maxresources"),
                    f"{limit_where}: maxresources",
                    keep_zero=True,
                ),
                max_applications=_as_uint(limit.get("maxapplications"), "maxapplications", limit_where),
            )
        )
    return tuple(limits)


def _parse_rule(raw: object, where: str) -> PlacementRuleConfig:
    rule = _as_map(raw, where, _RULE_KEYS)
    filter_where = f"{where}: filter"
    rule_filter = _as_map(rule.get("filter"), filter_where, _FILTER_KEYS)
    raw_parent = rule.get("parent")
    # The placement-rules guide writes the parent as a one-entry list; accept that spelling too.
    if isinstance(raw_parent, list):
        if len(raw_parent) != 1:
            raise ConfigError(f"{where}: 'parent' must be a single rule, got a list of {len(raw_parent)}")
        raw_parent = raw_parent[0]
    parent = None if raw_parent is None else _parse_rule(raw_parent, f"{where}: parent")
    return PlacementRuleConfig(
        name=_as_str(rule.get("name"), "name", where).lower(),
        create=_as_bool(rule.get("create"), "create", where, False),
        filter=FilterConfig(
            type=_as_str(rule_filter.get("type"), "type", filter_where).lower(),
            users=_as_str_list(rule_filter.get("users"), "users", filter_where),
            groups=_as_str_list(rule_filter.get("groups"), "groups", filter_where),
        ),
        parent=parent,
        value=_as_str(rule.get("value"), "value", where),
    )


def _parse_weights(raw: object, where: str) -> dict[str, float]:
    weights: dict[str, float] = {}
    for key, value in _as_map(raw, f"{where}: resourceweights").items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(
                f"{where}: resourceweights value for {key!r} must be a number, got {_type_name(value)}"
            )
        weights[str(key)] = float(value)
    return weights or dict(DEFAULT_RESOURCE_WEIGHTS)
