"""Replaying a differential scenario (a scenario with YuniKorn's recorded outcome) through ``korral.Core``.

The scenario format and what is compared are those of the recorded set's README
(tests/data/differential/README.md): each step is applied for one RM and the partition ``default``,
the core is waited on until idle, and korral's outcome is read through the public snapshots in the
shape YuniKorn's outcome was recorded in. ``compare`` gives every difference as a line of text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import korral
from korral import si
from korral import testing as t

DATA = Path(__file__).resolve().parent.parent / "data" / "differential"
RM_ID = "rm"
PARTITION = f"[{RM_ID}]default"

# YuniKorn's scheduling cycle runs every 100 ms; the recording ran it until it placed nothing more. Every
# other timing is YuniKorn's default (a dynamic queue's cleanup every 10 s, completing 30 s), so no timer
# ends a state while a scenario runs, as none did while it was recorded.
SETTINGS: dict[str, Any] = {"scheduling_interval": 0.02, "reservation_delay": 3600.0}

# korral's states that YuniKorn names otherwise (api.md: korral's Starting is YuniKorn's Running)
_STATE_NAMES = {"Starting": "Running"}
# an application korral no longer lists as live: YuniKorn's outcome calls it Gone
_GONE = "Gone"


def scenario_files() -> list[Path]:
    """Every recorded scenario: YuniKorn's own recordings and those written from its code."""
    return sorted(DATA.glob("*/*.json"))


def load(path: Path) -> dict[str, Any]:
    scenario: dict[str, Any] = json.loads(path.read_text())
    return scenario


def clock_driven(scenario: dict[str, Any]) -> bool:
    """Whether a step moves the clock: such a scenario runs on the simulated runtime's virtual clock."""
    return any(step["op"] == "advance" for step in scenario["scenario"].get("steps", []))


@contextmanager
def started(*, simulated: bool = False) -> Iterator[korral.Core]:
    # a clock-driven scenario runs with YuniKorn's own reservation delay: its timers are what it tests
    settings = (
        {**SETTINGS, "reservation_delay": 2.0, "runtime": "simulated", "seed": 1} if simulated else SETTINGS
    )
    with korral.start(**settings) as core:
        yield core


def replay(core: korral.Core, scenario: dict[str, Any]) -> dict[str, Any] | list[dict[str, Any]]:
    """Apply the scenario's steps; korral's outcome in YuniKorn's recorded shape."""
    body = scenario["scenario"]
    rm = t.RecordingRM(RM_ID)
    try:
        core.register_resource_manager(t.register(RM_ID, body["config"]), rm)
    except korral.KorralError as error:
        return {"config_error": str(error)}
    outcomes: list[dict[str, Any]] = []
    known_apps: list[str] = []
    node_count = 0
    for step in body["steps"]:
        node_count += _apply(core, rm, step, scenario.get("send_ask_release", False))
        if step["op"] == "apps":
            known_apps.extend(app["id"] for app in step["apps"])
        core.wait_until_idle(timeout=60.0)
        outcomes.append(_outcome(core, rm, known_apps, single_node=node_count == 1))
    return outcomes


def _apply(core: korral.Core, rm: t.RecordingRM, step: dict[str, Any], send_ask_release: bool) -> int:
    """Apply one step; the number of nodes it added."""
    op = step["op"]
    if op == "nodes":
        core.update_node(
            si.NodeRequest(
                rm_id=RM_ID,
                nodes=[
                    si.NodeInfo(
                        node_id=node["id"], action=si.NodeAction.CREATE, schedulable_resource=node["res"]
                    )
                    for node in step["nodes"]
                ],
            )
        )
        return len(step["nodes"])
    if op == "apps":
        core.update_application(
            si.ApplicationRequest(
                rm_id=RM_ID,
                new=[
                    si.AddApplicationRequest(
                        application_id=app["id"],
                        queue_name=app["queue"],
                        partition_name="default",
                        ugi=si.UserGroupInformation(user=app["user"], groups=list(app["groups"])),
                        tags=dict(app.get("tags") or {}),
                        execution_timeout_milliseconds=app.get("placeholder_timeout_ms", 0),
                        placeholder_ask=app.get("placeholder_ask") or {},
                        gang_scheduling_style=app.get("gang_style", ""),
                    )
                    for app in step["apps"]
                ],
            )
        )
    elif op == "asks":
        core.update_allocation(
            si.AllocationRequest(
                rm_id=RM_ID,
                asks=[
                    si.AllocationAsk(
                        allocation_key=ask["key"],
                        application_id=ask["app"],
                        partition_name="default",
                        resource_ask=ask["res"],
                        max_allocations=1,
                        priority=ask.get("priority", 0),
                        task_group_name=ask.get("task_group", ""),
                        placeholder=ask.get("placeholder", False),
                        preemption_policy=si.PreemptionPolicy(allow_preempt_other=True)
                        if ask.get("preempt_other")
                        else None,
                    )
                    for ask in step["asks"]
                ],
            )
        )
    elif op == "release":
        for release in step["releases"]:
            core.update_allocation(
                t.release(RM_ID, release["app"], allocation_key=release["key"], partition="default")
            )
            if send_ask_release:
                core.update_allocation(
                    t.release_asks(RM_ID, release["app"], release["key"], partition="default")
                )
    elif op == "confirm":
        confirmations = rm.take_confirmations()
        if confirmations is not None:
            core.update_allocation(confirmations)
    elif op == "advance":
        core.advance(step["seconds"])
    elif op == "remove":
        core.update_application(t.remove_applications(RM_ID, step["remove"], partition="default"))
    else:
        raise ValueError(f"unknown scenario step {op!r}")
    return 0


def _outcome(
    core: korral.Core, rm: t.RecordingRM, known_apps: list[str], *, single_node: bool
) -> dict[str, Any]:
    apps: dict[str, Any] = {}
    for app_id in dict.fromkeys(known_apps):
        if app_id in rm.rejected_apps:
            continue
        info = core.application(PARTITION, app_id)
        if info is None or app_id in _removed(core):
            apps[app_id] = {"state": _GONE, "allocs": {}}
            continue
        apps[app_id] = {
            "state": _STATE_NAMES.get(info.state, info.state),
            "queue": info.queue,
            "allocs": {a.allocation_key: a.node_id for a in info.allocations},
        }
    queues = {
        queue.path: {
            "allocated": _nonzero(queue.allocated),
            "leaf": queue.is_leaf,
            "managed": queue.is_managed,
        }
        for queue in core.queues(PARTITION)
    }
    return {
        "apps": apps,
        "rejected_apps": dict(rm.rejected_apps),
        "rejected_asks": {ask.allocation_key: ask.reason for ask in rm.rejected_asks},
        "queues": queues,
        "single_node": single_node,
    }


def _removed(core: korral.Core) -> set[str]:
    """Applications the RM removed: korral keeps them among the completed ones."""
    return {info.application_id for info in core.completed_applications(PARTITION)}


def _nonzero(resource: dict[str, int]) -> dict[str, int]:
    return {name: quantity for name, quantity in resource.items() if quantity}


def compare(
    expected: dict[str, Any] | list[dict[str, Any]], actual: dict[str, Any] | list[dict[str, Any]]
) -> list[str]:
    """Every difference the README's comparison sees, one line each (empty: the outcomes agree)."""
    if isinstance(expected, dict) or isinstance(actual, dict):
        expected_error = isinstance(expected, dict) and "config_error" in expected
        actual_error = isinstance(actual, dict) and "config_error" in actual
        if expected_error != actual_error:
            return [f"config refused: expected {expected_error}, korral {actual_error} ({actual})"]
        return []
    differences: list[str] = []
    for index, (want, got) in enumerate(zip(expected, actual, strict=True)):
        differences.extend(f"step {index}: {line}" for line in _compare_step(want, got))
    return differences


def _compare_step(want: dict[str, Any], got: dict[str, Any]) -> Iterator[str]:
    if set(want["apps"]) != set(got["apps"]):
        yield f"applications: expected {sorted(want['apps'])}, korral {sorted(got['apps'])}"
    for app_id in sorted(set(want["apps"]) & set(got["apps"])):
        expected, actual = want["apps"][app_id], got["apps"][app_id]
        if expected["state"] != actual["state"]:
            yield f"{app_id} state: expected {expected['state']}, korral {actual['state']}"
        if expected.get("queue") != actual.get("queue") and expected["state"] != _GONE:
            yield f"{app_id} queue: expected {expected.get('queue')}, korral {actual.get('queue')}"
        if got["single_node"]:
            want_keys, got_keys = sorted(expected["allocs"]), sorted(actual["allocs"])
            if want_keys != got_keys:
                yield f"{app_id} allocations: expected {want_keys}, korral {got_keys}"
        elif len(expected["allocs"]) != len(actual["allocs"]):
            yield f"{app_id} allocations: expected {len(expected['allocs'])}, korral {len(actual['allocs'])}"
    for kind in ("rejected_apps", "rejected_asks"):
        if set(want[kind]) != set(got[kind]):
            yield f"{kind}: expected {sorted(want[kind])}, korral {sorted(got[kind])}"
    if want["queues"] != got["queues"]:
        for path in sorted(set(want["queues"]) | set(got["queues"])):
            if want["queues"].get(path) != got["queues"].get(path):
                yield f"queue {path}: expected {want['queues'].get(path)}, korral {got['queues'].get(path)}"
