"""What an application is, as submitted and placed: one immutable value shared by every holder.

The partition builds it once when it places the application. The Partition actor holds it as it is
(``PartitionMembers``); the application's owner, the scheduler's view and the reference partition each
keep an ``Application`` (state, asks, allocations) around the same ``AppSpec``. Its dicts are never
mutated once built.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from korral import resource as res
from korral.resource import Resource

GANG_STYLE_HARD = "Hard"


def _groups(groups: Iterable[str]) -> tuple[str, ...]:
    return tuple(groups)


def _tags(tags: Mapping[str, str] | None) -> dict[str, str]:
    return dict(tags or {})


def _placeholder_ask(ask: Mapping[str, int] | None) -> Resource:
    return res.prune(ask or {})


def _gang_style(style: str) -> str:
    return GANG_STYLE_HARD if style == GANG_STYLE_HARD else "Soft"


@attrs.frozen(slots=True, kw_only=True)
class AppSpec:
    application_id: str
    # the partition's full name ("[rm]name")
    partition: str = ""
    # the leaf queue it was placed in
    queue_path: str = ""
    user: str = ""
    groups: tuple[str, ...] = attrs.field(default=(), converter=_groups)
    tags: dict[str, str] = attrs.field(factory=dict, converter=_tags)
    # the order of submission within its partition
    submission_seq: int = 0
    # the gang's total placeholder ask (no zero quantities)
    placeholder_ask: Resource = attrs.field(factory=dict, converter=_placeholder_ask)
    execution_timeout_ms: int = 0
    # "Hard" or "Soft" (anything else reads as "Soft", as YuniKorn does)
    gang_scheduling_style: str = attrs.field(default="Soft", converter=_gang_style)
