"""Config values YuniKorn accepts and silently replaces with a default, found so they can be said.

YuniKorn's queue (``UpdateQueueProperties``) reads each property it knows and, when the value is not
one it understands, logs at debug level and runs with the default: ``application.sort.policy: fiar``
sorts fifo, ``priority.offset: high`` is 0, ``preemption.delay: 10`` is 30s. korral accepts the same
configs and runs them the same way, but names every such value: ``korral validate-config`` prints one
warning per value on stderr (still exit 0) and the core logs one line when an RM registers or reloads.

A property key YuniKorn does not read is skipped by YuniKorn (it logs it at debug level); korral warns
about it too, since a misspelt key is the same silent no-op.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from korral import log_text
from korral.config.quantity import parse_go_duration, parse_go_int32, parse_go_uint64
from korral.config.schema import ChildTemplateConfig, QueueConfig, SchedulerConfig

log = log_text.logger("korral.config")


def _sort_policy(value: str) -> str | None:
    # case-sensitive in YuniKorn (SortPolicyFromString); "" is fifo
    if value in ("", "fifo", "fair"):
        return None
    if value == "stateaware":
        return None  # the seeds' policy, kept (docs/api.md: today's YuniKorn runs it as fifo)
    return "not a sort policy YuniKorn knows (fifo, fair, stateaware): the queue sorts fifo"


def _sort_priority(value: str) -> str | None:
    if value.lower() in ("enabled", "disabled"):
        return None
    return "not enabled or disabled: priority sorting stays enabled"


def _priority_policy(value: str) -> str | None:
    if value.lower() in ("", "default", "fence"):
        return None
    return "not a priority policy YuniKorn knows (default, fence): it runs as default"


def _priority_offset(value: str) -> str | None:
    if parse_go_int32(value) is not None:  # Go's ParseInt(value, 10, 32)
        return None
    return "not a 32-bit integer: the offset is 0"


def _preemption_policy(value: str) -> str | None:
    if value.lower() in ("", "default", "fence", "disabled"):
        return None
    return "not a preemption policy YuniKorn knows (default, fence, disabled): it runs as default"


def _delay(default: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        delay = parse_go_duration(value)
        if delay is not None and delay > 0:
            return None
        return f"not a positive Go duration up to 2562047h (such as 30s or 1m): it is {default}"

    return check


def _backoff(value: str) -> str | None:
    if parse_go_uint64(value) is not None:  # Go's ParseUint(value, 10, 64)
        return None
    return "not a 64-bit unsigned integer: no backoff"


# the properties YuniKorn reads, and what makes a value one it silently replaces
CHECKS: dict[str, Callable[[str], str | None]] = {
    "application.sort.policy": _sort_policy,
    "application.sort.priority": _sort_priority,
    "priority.policy": _priority_policy,
    "priority.offset": _priority_offset,
    "preemption.policy": _preemption_policy,
    "preemption.delay": _delay("30s"),
    "application.unschedasks.backoff": _backoff,
    "application.unschedasks.backoff.delay": _delay("30s"),
    "quota.preemption.delay": _delay("0 (no quota preemption)"),
}


def _properties(queue: QueueConfig, path: str) -> Iterator[tuple[str, dict[str, str]]]:
    yield f"queue {path}", queue.properties
    template: ChildTemplateConfig | None = queue.child_template
    if template is not None:
        yield f"queue {path} child template", template.properties
    for child in queue.queues:
        yield from _properties(child, f"{path}.{child.name}")


def defaulted_values(config: SchedulerConfig) -> list[str]:
    """One message per property value YuniKorn would silently replace (or key it would skip), in the
    order of the config."""
    found: list[str] = []
    for partition in config.partitions:
        resolver = partition.user_group_resolver
        if resolver not in ("", "os", "ldap"):
            found.append(
                f"partition {partition.name}: usergroupresolver type {resolver!r} is not one YuniKorn "
                "knows (os, ldap): no resolver, a user's only group is named as the user"
            )
        for where, properties in _properties(partition.root, partition.root.name):
            for key, value in properties.items():
                check = CHECKS.get(key)
                if check is None:
                    found.append(
                        f"partition {partition.name}: {where}: property {key!r} is not one YuniKorn "
                        "reads: it is ignored"
                    )
                    continue
                problem = check(value)
                if problem is not None:
                    found.append(f"partition {partition.name}: {where}: {key} {value!r} is {problem}")
    return found


def log_defaulted_values(config: SchedulerConfig, rm_id: str) -> None:
    """The core's one line about a config it takes (registration or reload) that holds such values."""
    found = defaulted_values(config)
    if found:
        log.warning(
            "RM %s: %d queue property value(s) YuniKorn silently defaults: %s",
            rm_id,
            len(found),
            "; ".join(found),
        )
