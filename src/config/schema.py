"""The parsed form of YuniKorn's queues.yaml: immutable, already normalised and validated.

`korral.config.load_config` produces these; the model builds partitions and queue trees from them.
Resource quantities are already converted to raw integers (``vcore`` in millicores, memory in bytes).
"""

from __future__ import annotations

import attrs

DEFAULT_RESOURCE_WEIGHTS: dict[str, float] = {"vcore": 1.0, "memory": 1.0}


@attrs.frozen(kw_only=True)
class ResourcesConfig:
    guaranteed: dict[str, int] = attrs.field(factory=dict)
    max: dict[str, int] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class ChildTemplateConfig:
    max_applications: int = 0
    properties: dict[str, str] = attrs.field(factory=dict)
    resources: ResourcesConfig = attrs.field(factory=ResourcesConfig)


@attrs.frozen(kw_only=True)
class LimitConfig:
    limit: str = ""
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    max_resources: dict[str, int] = attrs.field(factory=dict)
    max_applications: int = 0


@attrs.frozen(kw_only=True)
class QueueConfig:
    name: str
    parent: bool = False
    resources: ResourcesConfig = attrs.field(factory=ResourcesConfig)
    max_applications: int = 0
    properties: dict[str, str] = attrs.field(factory=dict)
    admin_acl: str = ""
    submit_acl: str = ""
    child_template: ChildTemplateConfig | None = None
    queues: tuple[QueueConfig, ...] = ()
    limits: tuple[LimitConfig, ...] = ()

    @property
    def is_parent(self) -> bool:
        """A queue is a parent when configured so or when it has children (YuniKorn's rule)."""
        return self.parent or bool(self.queues)


@attrs.frozen(kw_only=True)
class FilterConfig:
    type: str = ""  # "" (no filter), "allow" or "deny", lower-cased
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class PlacementRuleConfig:
    name: str  # lower-cased rule name: provided, user, fixed, tag (test is allowed for tests)
    create: bool = False
    filter: FilterConfig = attrs.field(factory=FilterConfig)
    parent: PlacementRuleConfig | None = None
    value: str = ""


@attrs.frozen(kw_only=True)
class PreemptionConfig:
    enabled: bool = True
    quota_preemption_enabled: bool = False


@attrs.frozen(kw_only=True)
class NodeSortPolicyConfig:
    type: str = "fair"  # "fair" or "binpacking"
    resource_weights: dict[str, float] = attrs.field(factory=lambda: dict(DEFAULT_RESOURCE_WEIGHTS))


@attrs.frozen(kw_only=True)
class PartitionConfig:
    name: str  # lower-cased; "" becomes "default"
    # Exactly one element after normalisation: the root queue (parent, no resources).
    queues: tuple[QueueConfig, ...]
    placement_rules: tuple[PlacementRuleConfig, ...] = ()
    limits: tuple[LimitConfig, ...] = ()
    preemption: PreemptionConfig = attrs.field(factory=PreemptionConfig)
    node_sort_policy: NodeSortPolicyConfig = attrs.field(factory=NodeSortPolicyConfig)
    user_group_resolver: str = ""

    @property
    def root(self) -> QueueConfig:
        return self.queues[0]


@attrs.frozen(kw_only=True)
class SchedulerConfig:
    partitions: tuple[PartitionConfig, ...]
    # SHA-256 of the configuration text with any `checksum:` line removed; equal checksums mean an
    # unchanged config, and a reload with an unchanged checksum is a no-op (YuniKorn's behaviour).
    checksum: str = ""

    def partition(self, name: str) -> PartitionConfig | None:
        for partition in self.partitions:
            if partition.name == name:
                return partition
        return None
