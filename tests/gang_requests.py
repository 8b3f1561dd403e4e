"""The gang requests the gang tests send (tests/unit, tests/core, tests/cli): an application that names
its placeholders' total, and its placeholder or real asks of one task group, from RM "rm"."""

from __future__ import annotations

from korral import si
from korral import testing as t

RM = "rm"
PH = {"memory": 100, "vcore": 100}  # one placeholder's resource


def gang_app(
    app_id: str = "g",
    queue: str = "root.gang",
    *,
    placeholders: int = 4,
    timeout_ms: int = 0,
    style: str = "",
) -> si.ApplicationRequest:
    """A gang application whose placeholders total ``placeholders`` times ``PH``."""
    total = {name: quantity * placeholders for name, quantity in PH.items()}
    return t.applications(
        RM,
        {app_id: queue},
        user="u",
        placeholder_ask=total,
        gang_style=style,
        execution_timeout_ms=timeout_ms,
    )


def gang_asks(
    app_id: str,
    count: int,
    resource: dict[str, int],
    *,
    placeholder: bool = False,
    group: str = "tg",
    prefix: str = "",
    timeout_ms: int = 0,
) -> si.AllocationRequest:
    """Keys ``ph-0``, ``ph-1``... for placeholders, ``real-0``... for real asks, unless ``prefix`` says."""
    prefix = prefix or ("ph" if placeholder else "real")
    return t.asks(
        RM,
        app_id,
        count,
        resource,
        prefix=f"{prefix}-",
        task_group=group,
        placeholder=placeholder,
        execution_timeout_ms=timeout_ms,
    )
