"""YuniKorn's tracked resources of an application and its summary line (``YK_APP_SUMMARY``).

When an allocation is released, its resource times the whole seconds it was held is added to the
application's used, preempted or placeholder resource-seconds under its node's instance type
(yunikorn-core ``TrackedResource.AggregateTrackedResource``). The REST API shows them as the
application's ``resourceHistory``; when the application completes, one INFO line sums it up, as
yunikorn-core's ``ApplicationSummary.DoLogging`` does, for usage accounting.
"""

from __future__ import annotations

from collections.abc import Iterable

from korral import log_text, si
from korral.model.allocation import Allocation
from korral.model.app.application import Application

log = log_text.logger("korral.application.usage")

USED, PREEMPTED, PLACEHOLDER = "resourceUsage", "preemptedResource", "placeholderResource"


def track_released(
    app: Application, released: Iterable[tuple[Allocation, si.TerminationType, str]], now: float
) -> None:
    """Add each released allocation's resource-seconds (now less when it was made, whole seconds)."""
    for allocation, kind, _ in released:
        if not allocation.create_time:
            continue  # recovered from the RM: when it was made is not known
        if kind is si.TerminationType.PREEMPTED_BY_SCHEDULER:
            which = PREEMPTED
        elif allocation.placeholder:
            which = PLACEHOLDER
        else:
            which = USED
        seconds = int(now - allocation.create_time)
        by_type = app.resource_seconds.setdefault(which, {}).setdefault(allocation.instance_type, {})
        for name, value in allocation.resource.items():
            by_type[name] = by_type.get(name, 0) + value * seconds


def _tracked(by_type: dict[str, dict[str, int]] | None) -> str:
    items = [
        f"{kind}:{name}={value}"
        for kind, resource in (by_type or {}).items()
        for name, value in resource.items()
    ]
    return "TrackedResource{" + ",".join(items) + "}"


def summary(app: Application, wall_offset_ns: int, rm_id: str) -> str | None:
    """The summary line of an application that ran (None if it never did), times in Unix ms."""
    started = [at for at, state in app.state_log if state == "Running"]
    if not started:
        return None

    def ms(at: float) -> int:
        return (wall_offset_ns + int(at * 1e9)) // 1_000_000

    finished = [at for at, state in app.state_log if state in ("Completed", "Failed", "Rejected")]
    return (
        f"YK_APP_SUMMARY: {{ApplicationID: {app.application_id}, SubmissionTime: {ms(app.submission_time)}, "
        f"StartTime: {ms(started[-1])}, FinishTime: {ms(finished[-1]) if finished else 0}, User: {app.user}, "
        f"Queue: {app.queue_path}, State: {app.state.value}, RmID: {rm_id}, "
        f"ResourceUsage: {_tracked(app.resource_seconds.get(USED))}, "
        f"PreemptedResource: {_tracked(app.resource_seconds.get(PREEMPTED))}, "
        f"PlaceholderResource: {_tracked(app.resource_seconds.get(PLACEHOLDER))}}}"
    )


def log_summary(app: Application, wall_offset_ns: int, rm_id: str) -> None:
    line = summary(app, wall_offset_ns, rm_id)
    if line is not None:
        log.info(line)


def rm_of(partition: str) -> str:
    """The RM of a partition from the core's name: ``[rm1]default`` -> ``rm1``."""
    return partition[1 : partition.index("]")] if partition.startswith("[") and "]" in partition else ""
