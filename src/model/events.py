"""EventRecords about applications, nodes, queues and requests (YuniKorn's event system, reference 2.18).

Plain builders: the actors collect these per burst and send them to the RM in one ``send_event`` call,
and only when someone takes them (``wanted``): the RM's callback overrides ``send_event``, or the core
logs them for its REST API (its metrics are on) - whatever the RM is, in-process, gRPC or Ray.
"""

from __future__ import annotations

import time
from typing import Any

from korral import si
from korral.callback import ResourceManagerCallback
from korral.model.allocation import Allocation

Detail = si.EventChangeDetail
Change = si.EventChangeType
Kind = si.EventRecordType

# application state -> the detail YuniKorn reports for entering it
APP_STATE_DETAIL: dict[str, si.EventChangeDetail] = {
    "New": Detail.APP_NEW,
    "Accepted": Detail.APP_ACCEPTED,
    "Starting": Detail.APP_STARTING,
    "Running": Detail.APP_RUNNING,
    "Completing": Detail.APP_COMPLETING,
    "Completed": Detail.APP_COMPLETED,
    "Rejected": Detail.APP_REJECT,
    "Failing": Detail.APP_FAILING,
    "Failed": Detail.APP_FAILED,
    "Resuming": Detail.APP_RESUMING,
    "Expired": Detail.APP_EXPIRED,
}


class Wanted:
    """Whether events are made for an RM, asked at each burst: when its callback takes them, or while
    the core logs them for a reader (its metrics are on and a REST server serves it: ``/ws/v1/events``).
    Made otherwise, events would cost every allocation ~10 us for no one."""

    __slots__ = ("callback_takes", "metrics")

    def __init__(self, callback_takes: bool, metrics: Any) -> None:
        self.callback_takes = callback_takes
        self.metrics = metrics

    def __bool__(self) -> bool:
        return self.callback_takes or (self.metrics is not None and self.metrics.events_read)


def wanted(callback: object, metrics: Any) -> Wanted:
    """Are events made for this RM (``metrics``: the core's metrics, None when they are off)?"""
    takes = type(callback).send_event is not ResourceManagerCallback.send_event  # type: ignore[attr-defined]
    return Wanted(takes, metrics)


def _now() -> int:
    return time.time_ns()


_new = object.__new__
_set = object.__setattr__


def stamped(records: list[si.EventRecord], timestamp_nano: int) -> list[si.EventRecord]:
    """The records as sent: stamped with the sender's clock (a simulated core's is virtual).

    Stamped in place: every record is the sender's own, built by ``record`` for this burst and not
    yet shared (an ``attrs.evolve`` copy cost ~5 us a record, three records an allocation)."""
    for r in records:
        _set(r, "timestamp_nano", timestamp_nano)
    return records


def record(
    kind: si.EventRecordType,
    object_id: str,
    message: str,
    change: si.EventChangeType = Change.NONE,
    detail: si.EventChangeDetail = Detail.DETAILS_NONE,
    *,
    reference_id: str = "",
    resource: dict[str, int] | None = None,
    group_id: str = "",
) -> si.EventRecord:
    """An ``si.EventRecord`` of values already of its fields' types, built without its converters
    (~1 us instead of ~6 us: made up to three times per allocation while events are wanted)."""
    r = _new(si.EventRecord)
    _set(r, "type", kind)
    _set(r, "object_id", object_id)
    _set(r, "group_id", group_id)
    _set(r, "reason", "")
    _set(r, "message", message)
    _set(r, "timestamp_nano", _now())
    _set(r, "event_change_type", change)
    _set(r, "event_change_detail", detail)
    _set(r, "reference_id", reference_id)
    _set(r, "resource", dict(resource) if resource else {})
    return r


def app_state(application_id: str, state: str, queue: str) -> si.EventRecord:
    return record(
        Kind.APP,
        application_id,
        f"application {application_id} is {state}",
        Change.SET,
        APP_STATE_DETAIL.get(state, Detail.DETAILS_NONE),
        group_id=queue,
    )


# why an allocation went -> the detail YuniKorn reports for its removal
REMOVAL_DETAIL: dict[si.TerminationType, si.EventChangeDetail] = {
    si.TerminationType.TIMEOUT: Detail.ALLOC_TIMEOUT,
    si.TerminationType.PREEMPTED_BY_SCHEDULER: Detail.ALLOC_PREEMPT,
    si.TerminationType.PLACEHOLDER_REPLACED: Detail.ALLOC_REPLACED,
}


def app_allocation(
    allocation: Allocation,
    change: si.EventChangeType,
    message: str = "",
    termination: si.TerminationType = si.TerminationType.STOPPED_BY_RM,
    node_removed: bool = False,
) -> si.EventRecord:
    """``node_removed``: released because its node went (YuniKorn's ALLOC_NODEREMOVED)."""
    detail = Detail.APP_ALLOC
    if change == Change.REMOVE:
        detail = (
            Detail.ALLOC_NODEREMOVED if node_removed else REMOVAL_DETAIL.get(termination, Detail.ALLOC_CANCEL)
        )
    return record(
        Kind.APP,
        allocation.application_id,
        message or f"allocation {allocation.uuid} on node {allocation.node_id}",
        change,
        detail,
        reference_id=allocation.uuid,
        resource=dict(allocation.resource),
    )


def request(
    application_id: str,
    allocation_key: str,
    change: si.EventChangeType,
    message: str,
    detail: si.EventChangeDetail | None = None,
    resource: dict[str, int] | None = None,
) -> si.EventRecord:
    """An ask's record; an added ask carries its resource, as YuniKorn's APP_REQUEST does (what a
    recorded history needs to replay an ask that was never allocated: korral simulate --replay)."""
    if detail is None:
        detail = Detail.APP_REQUEST if change == Change.ADD else Detail.REQUEST_CANCEL
    return record(
        Kind.REQUEST, allocation_key, message, change, detail, group_id=application_id, resource=resource
    )


def node(
    node_id: str, change: si.EventChangeType, detail: si.EventChangeDetail, message: str
) -> si.EventRecord:
    return record(Kind.NODE, node_id, message, change, detail)


def queue(
    path: str, change: si.EventChangeType, detail: si.EventChangeDetail, message: str
) -> si.EventRecord:
    return record(Kind.QUEUE, path, message, change, detail)


def user_group_usage(
    allocation: Allocation, user: str, group: str, change: si.EventChangeType
) -> list[si.EventRecord]:
    """YuniKorn's UG_USER_RESOURCE / UG_GROUP_RESOURCE records for one allocation's usage change: the
    user (and the group its application is tracked against, if any), referencing the queue path."""
    records = [
        record(
            Kind.USERGROUP,
            user,
            "",
            change,
            Detail.UG_USER_RESOURCE,
            reference_id=allocation.queue_path,
            resource=dict(allocation.resource),
        )
    ]
    if group:
        records.append(
            record(
                Kind.USERGROUP,
                group,
                "",
                change,
                Detail.UG_GROUP_RESOURCE,
                reference_id=allocation.queue_path,
                resource=dict(allocation.resource),
            )
        )
    return records


# ---- the partition's records of its structure -------------------------------------------------------


def node_added(node_id: str) -> si.EventRecord:
    return node(node_id, Change.ADD, Detail.NODE_READY, f"node {node_id} added")


def node_updated(node_id: str) -> si.EventRecord:
    return node(node_id, Change.SET, Detail.NODE_CAPACITY, f"node {node_id} updated")


def node_schedulable(node_id: str, schedulable: bool) -> si.EventRecord:
    return node(node_id, Change.SET, Detail.NODE_SCHEDULABLE, f"node {node_id} schedulable: {schedulable}")


def node_occupied(node_id: str, occupied: dict[str, int]) -> si.EventRecord:
    """YuniKorn's NODE_OCCUPIED: the RM set what other pods occupy on the node."""
    return record(Kind.NODE, node_id, "", Change.SET, Detail.NODE_OCCUPIED, resource=occupied)


def node_allocation(allocation: Allocation, change: si.EventChangeType) -> si.EventRecord:
    """YuniKorn's NODE_ALLOC: an allocation added to (ADD) or removed from (REMOVE) its node
    (reference: its allocation key)."""
    return record(
        Kind.NODE,
        allocation.node_id,
        "",
        change,
        Detail.NODE_ALLOC,
        reference_id=allocation.allocation_key,
        resource=allocation.resource,
    )


def node_reservation(
    node_id: str, allocation_key: str, change: si.EventChangeType, resource: dict[str, int] | None
) -> si.EventRecord:
    """YuniKorn's NODE_RESERVATION: an ask reserved (ADD) or no longer reserves (REMOVE) the node."""
    return record(
        Kind.NODE,
        node_id,
        "",
        change,
        Detail.NODE_RESERVATION,
        reference_id=allocation_key,
        resource=resource,
    )


def node_removed(node_id: str) -> si.EventRecord:
    return node(node_id, Change.REMOVE, Detail.NODE_DECOMISSION, f"node {node_id} removed")


def queue_created(path: str) -> si.EventRecord:
    return queue(path, Change.ADD, Detail.QUEUE_DYNAMIC, f"dynamic queue {path} created")


def queue_configured(path: str) -> si.EventRecord:
    """YuniKorn's record of a queue its configuration added (ADD, no detail: a managed queue)."""
    return queue(path, Change.ADD, Detail.DETAILS_NONE, "")


def queue_removed(path: str) -> si.EventRecord:
    return queue(path, Change.REMOVE, Detail.DETAILS_NONE, f"queue {path} removed")


def queue_changes(
    before: dict[str, tuple[Any, Any, bool]], after: dict[str, tuple[Any, Any, bool]]
) -> list[si.EventRecord]:
    """YuniKorn's QUEUE_MAX, QUEUE_GUARANTEED and QUEUE_TYPE records of a configuration update: every
    queue there before and after, per (max, guaranteed, is leaf) that changed."""
    records = []
    for path in sorted(set(before) & set(after)):
        (old_max, old_guaranteed, was_leaf), (new_max, new_guaranteed, is_leaf) = before[path], after[path]
        if (old_max or {}) != (new_max or {}):
            records.append(record(Kind.QUEUE, path, "", Change.SET, Detail.QUEUE_MAX, resource=new_max))
        if (old_guaranteed or {}) != (new_guaranteed or {}):
            records.append(
                record(Kind.QUEUE, path, "", Change.SET, Detail.QUEUE_GUARANTEED, resource=new_guaranteed)
            )
        if was_leaf != is_leaf:
            records.append(
                record(Kind.QUEUE, path, f"leaf queue: {str(is_leaf).lower()}", Change.SET, Detail.QUEUE_TYPE)
            )
    return records


def group_link(group: str, application_id: str, linked: bool) -> si.EventRecord:
    """YuniKorn's UG_APP_LINK: an application tracked against (SET) or no longer against (REMOVE) a
    group's limits."""
    change = Change.SET if linked else Change.REMOVE
    return record(Kind.USERGROUP, group, "", change, Detail.UG_APP_LINK, reference_id=application_id)


def limits_of(config: Any) -> dict[tuple[str, str, str], tuple[Any, int]]:
    """Every user and group limit of a partition's configuration: (kind "user" or "group", name,
    queue path) -> (max resources, max applications); the partition's own limits are root's."""
    found: dict[tuple[str, str, str], tuple[Any, int]] = {}

    def add(limits: Any, path: str) -> None:
        for limit in limits:
            value = (dict(limit.max_resources), limit.max_applications)
            for user in limit.users:
                found[("user", user, path)] = value
            for group in limit.groups:
                found[("group", group, path)] = value

    def walk(queue: Any, prefix: str) -> None:
        path = f"{prefix}.{queue.name}".lower() if prefix else queue.name.lower()
        add(queue.limits, path)
        for child in queue.queues:
            walk(child, path)

    if config is not None:
        add(config.limits, "root")
        for queue in config.queues:
            walk(queue, "")
    return found


def limit_changes(
    before: dict[tuple[str, str, str], tuple[Any, int]], after: dict[tuple[str, str, str], tuple[Any, int]]
) -> list[si.EventRecord]:
    """YuniKorn's UG_USER_LIMIT / UG_GROUP_LIMIT records of a configuration update: SET for a limit
    that is new or changed, REMOVE for one that is gone (object: the user or group; reference: the
    queue path)."""
    records = []
    for key in sorted(set(before) | set(after)):
        kind, name, path = key
        detail = Detail.UG_USER_LIMIT if kind == "user" else Detail.UG_GROUP_LIMIT
        if key not in after:
            records.append(record(Kind.USERGROUP, name, "", Change.REMOVE, detail, reference_id=path))
        elif before.get(key) != after[key]:
            records.append(record(Kind.USERGROUP, name, "", Change.SET, detail, reference_id=path))
    return records


def queue_config_updated() -> si.EventRecord:
    return queue("root", Change.SET, Detail.QUEUE_CONFIG, "queue configuration updated")


# (runnable again, by "queue" or "quota") -> YuniKorn's detail
RUNNABLE_DETAIL = {
    (False, "queue"): Detail.APP_CANNOTRUN_QUEUE,
    (True, "queue"): Detail.APP_RUNNABLE_QUEUE,
    (False, "quota"): Detail.APP_CANNOTRUN_QUOTA,
    (True, "quota"): Detail.APP_RUNNABLE_QUOTA,
}


def app_runnable(application_id: str, runnable: bool, by: str) -> si.EventRecord:
    """YuniKorn's APP_CANNOTRUN_* / APP_RUNNABLE_*: an application stopped or started being
    runnable under its queues' ("queue") or its user's or group's ("quota") maxapplications."""
    return record(Kind.APP, application_id, "", Change.NONE, RUNNABLE_DETAIL[(runnable, by)])


def app_rejected(application_id: str, reason: str) -> si.EventRecord:
    return record(Kind.APP, application_id, reason, Change.ADD, Detail.APP_REJECT)
