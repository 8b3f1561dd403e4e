"""Builders for the queues.yaml tests: plain data to YAML, and a check that a config is rejected."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
import yaml

from korral.config import QueueConfig, SchedulerConfig, load_config
from korral.errors import ConfigError

# --- helpers ---


def doc(queues: Any = None, **partition: Any) -> str:
    """A one-partition queues.yaml built from plain data (partition keys as keyword arguments)."""
    body: dict[str, Any] = {"name": "default", **partition}
    if queues is not None:
        body["queues"] = queues
    return yaml.safe_dump({"partitions": [body]})


def root(*children: dict[str, Any], **fields: Any) -> list[dict[str, Any]]:
    queue: dict[str, Any] = {"name": "root", **fields}
    if children:
        queue["queues"] = list(children)
    return [queue]


def leaf(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, **fields}


def parent(name: str, *children: dict[str, Any], **fields: Any) -> dict[str, Any]:
    queue: dict[str, Any] = {"name": name, **fields}
    if children:
        queue["queues"] = list(children)
    else:
        queue["parent"] = True
    return queue


def res(guaranteed: dict[str, Any] | None = None, max: dict[str, Any] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if guaranteed is not None:
        resources["guaranteed"] = guaranteed
    if max is not None:
        resources["max"] = max
    return resources


def limit(users: list[str] | None = None, groups: list[str] | None = None, **fields: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"limit": "test limit", **fields}
    if users is not None:
        entry["users"] = users
    if groups is not None:
        entry["groups"] = groups
    return entry


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def find(config: SchedulerConfig, path: str, partition: str = "default") -> QueueConfig:
    part = config.partition(partition)
    assert part is not None
    queue = part.root
    for name in path.split(".")[1:]:
        queue = next(child for child in queue.queues if child.name == name)
    return queue


def assert_rejected(text: str, *fragments: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_config(text)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return caught.value
