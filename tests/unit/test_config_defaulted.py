"""Queue property values YuniKorn silently replaces with a default: each is found and named, one message
per value; valid values and the seeds' ``stateaware`` are not."""

from __future__ import annotations

import pytest

from korral.config import load_config
from korral.config.defaulted import CHECKS, defaulted_values


def config_with(properties: dict[str, str], template: dict[str, str] | None = None) -> str:
    lines = ["partitions:", "  - name: default", "    queues:", "      - name: root", "        queues:"]
    lines += ["          - name: a", "            properties:"]
    lines += [f"              {key}: {value!r}" for key, value in properties.items()] or ["              {}"]
    if template is not None:
        lines += ["            childtemplate:", "              properties:"]
        lines += [f"                {key}: {value!r}" for key, value in template.items()]
    return "\n".join(lines) + "\n"


# (key, value, what the warning says YuniKorn does instead; None: no warning)
TABLE = [
    ("application.sort.policy", "fifo", None),
    ("application.sort.policy", "fair", None),
    ("application.sort.policy", "stateaware", None),
    ("application.sort.policy", "fiar", "the queue sorts fifo"),
    ("application.sort.policy", "FAIR", "the queue sorts fifo"),  # case-sensitive in YuniKorn
    ("application.sort.priority", "Disabled", None),
    ("application.sort.priority", "off", "priority sorting stays enabled"),
    ("priority.policy", "Fence", None),
    ("priority.policy", "fenced", "it runs as default"),
    ("priority.offset", "-5", None),
    ("priority.offset", "+2147483647", None),
    ("priority.offset", "2147483648", "the offset is 0"),
    ("priority.offset", "1_0", "the offset is 0"),
    ("priority.offset", "high", "the offset is 0"),
    ("preemption.policy", "disabled", None),
    ("preemption.policy", "never", "it runs as default"),
    ("preemption.delay", "1m30s", None),
    ("preemption.delay", "10", "it is 30s"),
    ("preemption.delay", "-5s", "it is 30s"),
    ("application.unschedasks.backoff", "3", None),
    ("application.unschedasks.backoff", "-1", "no backoff"),
    ("application.unschedasks.backoff", "three", "no backoff"),
    ("application.unschedasks.backoff.delay", "45s", None),
    ("application.unschedasks.backoff.delay", "0s", "it is 30s"),
    ("quota.preemption.delay", "5m", None),
    ("quota.preemption.delay", "soon", "it is 0 (no quota preemption)"),
]


@pytest.mark.parametrize(("key", "value", "instead"), TABLE, ids=[f"{k}={v}" for k, v, _ in TABLE])
def test_each_value_yunikorn_defaults_is_named_with_what_runs_instead(
    key: str, value: str, instead: str | None
):
    found = defaulted_values(load_config(config_with({key: value})))
    if instead is None:
        assert found == []
    else:
        [message] = found
        assert message.startswith(f"partition default: queue root.a: {key} {value!r} is not ")
        assert message.endswith(instead)


def test_every_property_yunikorn_reads_has_a_check() -> None:
    assert set(CHECKS) == {key for key, _, _ in TABLE}


def test_one_message_per_value_unknown_keys_included_child_templates_too() -> None:
    text = config_with(
        {"application.sort.policy": "fiar", "priority.offset": "x", "application.sort.polcy": "fair"},
        template={"preemption.policy": "sometimes"},
    )
    found = defaulted_values(load_config(text))
    assert len(found) == 4
    assert "property 'application.sort.polcy' is not one YuniKorn reads: it is ignored" in found[2]
    assert found[3].startswith("partition default: queue root.a child template: preemption.policy")


def test_a_clean_config_has_nothing_to_say() -> None:
    assert defaulted_values(load_config("")) == []


@pytest.mark.parametrize(
    ("kind", "warned"),
    [("", None), ("os", None), ("ldap", None), ("test", "no resolver")],
)
def test_the_user_group_resolver_type_is_named_when_it_does_not_do_what_it_says(
    kind: str, warned: str | None
):
    text = "partitions:\n  - name: default\n    usergroupresolver:\n      type: " + (kind or "''") + "\n"
    text += "    queues:\n      - name: root\n"
    found = defaulted_values(load_config(text))
    if warned is None:
        assert found == []
    else:
        [message] = found
        assert message.startswith("partition default: usergroupresolver") and warned in message
