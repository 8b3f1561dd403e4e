"""YuniKorn's queues.yaml: strict parsing, normalisation and validation into immutable config objects."""

from korral.config.loader import DEFAULT_CONFIG_TEXT, MAX_QUEUES, config_checksum, default_config, load_config
from korral.config.quantity import parse_quantity, parse_resources
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
from korral.config.yaml_reader import MAX_CONFIG_BYTES, MAX_NESTING_DEPTH, MAX_YAML_NODES

__all__ = [
    "DEFAULT_CONFIG_TEXT",
    "DEFAULT_RESOURCE_WEIGHTS",
    "MAX_CONFIG_BYTES",
    "MAX_NESTING_DEPTH",
    "MAX_QUEUES",
    "MAX_YAML_NODES",
    "ChildTemplateConfig",
    "FilterConfig",
    "LimitConfig",
    "NodeSortPolicyConfig",
    "PartitionConfig",
    "PlacementRuleConfig",
    "PreemptionConfig",
    "QueueConfig",
    "ResourcesConfig",
    "SchedulerConfig",
    "config_checksum",
    "default_config",
    "load_config",
    "parse_quantity",
    "parse_resources",
    "validate_config",
]
