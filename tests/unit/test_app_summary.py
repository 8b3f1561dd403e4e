"""Resource-seconds of released allocations and YuniKorn's YK_APP_SUMMARY line (model/app/summary.py)."""

from __future__ import annotations

from korral import si
from korral.model.allocation import Allocation
from korral.model.app.application import Application
from korral.model.app.summary import summary, track_released

STOPPED = si.TerminationType.STOPPED_BY_RM


def _alloc(uuid: str, created: float, instance: str = "m5.large", **fields: object) -> Allocation:
    return Allocation(
        uuid=uuid,
        allocation_key="key",
        application_id="app",
        node_id="n1",
        resource={"memory": 10, "vcore": 2},
        create_time=created,
        instance_type=instance,
        **fields,  # type: ignore[arg-type]
    )


def test_released_allocations_add_whole_seconds_per_kind_and_instance_type() -> None:
    app = Application.new("app", queue_path="root.a", user="alice")
    track_released(
        app,
        [
            (_alloc("u1", 100.0), STOPPED, ""),  # 12.9 s -> 12
            (_alloc("u2", 110.0, "UNKNOWN"), STOPPED, ""),  # 2.9 s -> 2
            (_alloc("u3", 101.0), si.TerminationType.PREEMPTED_BY_SCHEDULER, ""),  # 11
            (_alloc("u4", 103.0, placeholder=True), si.TerminationType.PLACEHOLDER_REPLACED, ""),  # 9
            (_alloc("u5", 0.0), STOPPED, ""),  # recovered: when it was made is not known
        ],
        112.9,
    )
    assert app.resource_seconds == {
        "resourceUsage": {"m5.large": {"memory": 120, "vcore": 24}, "UNKNOWN": {"memory": 20, "vcore": 4}},
        "preemptedResource": {"m5.large": {"memory": 110, "vcore": 22}},
        "placeholderResource": {"m5.large": {"memory": 90, "vcore": 18}},
    }


def test_summary_line_of_an_application_that_ran() -> None:
    app = Application.new("app", queue_path="root.a", user="alice", submission_time=1.0)
    assert summary(app, 0, "rm") is None  # never ran: no line, as YuniKorn
    app.state_log = [(2.0, "Accepted"), (3.0, "Running"), (5.5, "Completing"), (35.5, "Completed")]
    app.state = app.state.COMPLETED
    track_released(app, [(_alloc("u1", 3.0), STOPPED, "")], 5.5)
    line = summary(app, 1_000_000_000_000, "rm")
    assert line == (
        "YK_APP_SUMMARY: {ApplicationID: app, SubmissionTime: 1001000, StartTime: 1003000, "
        "FinishTime: 1035500, User: alice, Queue: root.a, State: Completed, RmID: rm, "
        "ResourceUsage: TrackedResource{m5.large:memory=20,m5.large:vcore=4}, "
        "PreemptedResource: TrackedResource{}, PlaceholderResource: TrackedResource{}}"
    )
