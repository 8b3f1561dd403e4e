"""``/ws/v1/config``'s JSON and YAML (yunikorn-core ``dao.ConfigDAOInfo``) from korral's parsed
configuration; split from ``dao`` to keep each module short."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from korral.config.quantity import VCORE

JSON = dict[str, Any]


# ---- the configuration (dao.ConfigDAOInfo: configs.SchedulerConfig inline) ----------------------------
# Go's encoders name a field without a tag by the field's name: JSON keeps it (``Partitions``), yaml.v2
# lower-cases it (``partitions``). ``omitempty`` leaves an empty value out; encoding/json never leaves a
# struct out, yaml.v2 leaves out a struct whose fields are all empty. Quantities are korral's parsed
# integers as strings (memory in bytes, vcore in millicores with YuniKorn's ``m``): read back the same.

_Field = tuple[str, Any, bool, bool]  # Go field name, value, omitempty, is a struct


def _struct(fields: list[_Field], yaml_keys: bool) -> JSON:
    document: JSON = {}
    for name, value, omit_empty, is_struct in fields:
        if omit_empty and not value and (yaml_keys or not is_struct):
            continue
        document[name.lower() if yaml_keys else name] = value
    return document


def _quantities(resource: Mapping[str, int]) -> dict[str, str]:
    # vcore is kept in millicores: written with YuniKorn's "m" so that it reads back the same
    return {name: f"{value}m" if name == VCORE else str(value) for name, value in resource.items()}


def _resources(config: Any, yaml_keys: bool) -> JSON:
    return _struct(
        [
            ("Guaranteed", _quantities(config.guaranteed), True, False),
            ("Max", _quantities(config.max), True, False),
        ],
        yaml_keys,
    )


def _limit(limit: Any, yaml_keys: bool) -> JSON:
    return _struct(
        [
            ("Limit", limit.limit, False, False),
            ("Users", list(limit.users), True, False),
            ("Groups", list(limit.groups), True, False),
            ("MaxResources", _quantities(limit.max_resources), True, False),
            ("MaxApplications", limit.max_applications, True, False),
        ],
        yaml_keys,
    )


def _queue_config(queue: Any, yaml_keys: bool) -> JSON:
    template = queue.child_template
    child_template = (
        _struct(
            [
                ("MaxApplications", template.max_applications, True, False),
                ("Properties", dict(template.properties), True, False),
                ("Resources", _resources(template.resources, yaml_keys), True, True),
            ],
            yaml_keys,
        )
        if template is not None
        else _struct([("Resources", _resources_empty(yaml_keys), True, True)], yaml_keys)
    )
    return _struct(
        [
            ("Name", queue.name, False, False),
            ("Parent", queue.parent, True, False),
            ("Resources", _resources(queue.resources, yaml_keys), True, True),
            ("MaxApplications", queue.max_applications, True, False),
            ("Properties", dict(queue.properties), True, False),
            ("AdminACL", queue.admin_acl, True, False),
            ("SubmitACL", queue.submit_acl, True, False),
            ("ChildTemplate", child_template, True, True),
            ("Queues", [_queue_config(child, yaml_keys) for child in queue.queues], True, False),
            ("Limits", [_limit(limit, yaml_keys) for limit in queue.limits], True, False),
        ],
        yaml_keys,
    )


def _resources_empty(yaml_keys: bool) -> JSON:
    return _struct([("Guaranteed", {}, True, False), ("Max", {}, True, False)], yaml_keys)


def _placement_rule(rule: Any, yaml_keys: bool) -> JSON:
    rule_filter = _struct(
        [
            ("Type", rule.filter.type, False, False),
            ("Users", list(rule.filter.users), True, False),
            ("Groups", list(rule.filter.groups), True, False),
        ],
        yaml_keys,
    )
    if yaml_keys and not any(rule_filter.values()):
        rule_filter = {}
    return _struct(
        [
            ("Name", rule.name, False, False),
            ("Create", rule.create, True, False),
            ("Filter", rule_filter, True, True),
            (
                "Parent",
                _placement_rule(rule.parent, yaml_keys) if rule.parent is not None else None,
                True,
                False,
            ),
            ("Value", rule.value, True, False),
        ],
        yaml_keys,
    )


def _partition_config(partition: Any, name: str, yaml_keys: bool) -> JSON:
    policy = partition.node_sort_policy
    return _struct(
        [
            ("Name", name, False, False),
            ("Queues", [_queue_config(queue, yaml_keys) for queue in partition.queues], False, False),
            (
                "PlacementRules",
                [_placement_rule(r, yaml_keys) for r in partition.placement_rules],
                True,
                False,
            ),
            ("Limits", [_limit(limit, yaml_keys) for limit in partition.limits], True, False),
            (
                "Preemption",
                _struct([("Enabled", partition.preemption.enabled, False, False)], yaml_keys),
                True,
                True,
            ),
            (
                "NodeSortPolicy",
                _struct(
                    [
                        ("Type", policy.type, False, False),
                        ("ResourceWeights", dict(policy.resource_weights), True, False),
                    ],
                    yaml_keys,
                ),
                True,
                True,
            ),
        ],
        yaml_keys,
    )


def config(configs: Mapping[str, Any], yaml_keys: bool) -> JSON:
    """``dao.ConfigDAOInfo`` of the core's configuration: one RM's config as it runs it; with several
    RMs, every RM's partitions under the core's full names (``[rm1]default``) and no checksum."""
    if len(configs) == 1:
        (only,) = configs.values()
        partitions = [_partition_config(p, p.name, yaml_keys) for p in only.partitions]
        checksum = only.checksum
    else:
        partitions = [
            _partition_config(p, f"[{rm_id}]{p.name}", yaml_keys)
            for rm_id, scheduler_config in sorted(configs.items())
            for p in scheduler_config.partitions
        ]
        checksum = ""
    return _struct([("Partitions", partitions, False, False), ("Checksum", checksum, True, False)], yaml_keys)
