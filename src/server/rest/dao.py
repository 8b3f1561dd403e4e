"""The JSON of YuniKorn's REST API (yunikorn-core ``pkg/webservice/dao``) built from korral snapshots.

Plain functions of ``korral.info`` snapshots: field names are YuniKorn's json tags. Where YuniKorn's
tag has ``omitempty`` an empty value is left out; a fact korral does not keep (request times, state
logs, placeholder data) is left out rather than made up, as YuniKorn leaves out an empty one.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from korral import si
from korral.info import AllocationInfo, ApplicationInfo, AskInfo, NodeInfo, PartitionInfo, QueueInfo
from korral.model.naming import partition_without_rm
from korral.server.rest.dao_config import config as config  # dao.config: the routes' one module

JSON = dict[str, Any]
# the active states of an application (YuniKorn: ?status= of /applications/active)
ACTIVE_STATES = ("new", "accepted", "running", "completing", "failing", "resuming")


def _omit_empty(document: JSON, *keys: str) -> JSON:
    for key in keys:
        if not document.get(key):
            document.pop(key, None)
    return document


def error(status: int, message: str) -> JSON:
    """``dao.YAPIError``: the body of every error response."""
    return {"status_code": status, "message": message, "description": message}


_MAX_INT32 = (1 << 31) - 1


def utilization(capacity: Mapping[str, int], used: Mapping[str, int]) -> dict[str, int]:
    """YuniKorn's CalculateAbsUsedCapacity: per resource of ``capacity`` that ``used`` names, used as a
    whole percentage of it (nothing used: 0; used of a capacity of 0: 100; at most 2^31 - 1)."""
    percentages: dict[str, int] = {}
    for name, total in capacity.items():
        if name not in used:
            continue
        quantity = used[name]
        if quantity <= 0:
            percentages[name] = 0
        elif total <= 0:
            percentages[name] = 100
        else:
            percentages[name] = int(min(quantity / total * 100, _MAX_INT32))
    return percentages


def partition(info: PartitionInfo, applications: Iterable[ApplicationInfo], containers: int) -> JSON:
    states = Counter(app.state for app in applications)
    counts: dict[str, int] = dict(states)
    counts["total"] = sum(states.values())
    document: JSON = {
        "clusterId": info.rm_id,
        "name": partition_without_rm(info.name),
        "capacity": _omit_empty(
            {
                "capacity": info.capacity,
                "usedCapacity": info.allocated,
                "utilization": utilization(info.capacity, info.allocated),
            },
            "capacity",
            "usedCapacity",
            "utilization",
        ),
        "nodeSortingPolicy": {"type": info.node_sort_policy},
        "preemptionEnabled": info.preemption_enabled,
        "quotaPreemptionEnabled": info.quota_preemption_enabled,
        "totalNodes": info.node_count,
        "applications": counts,
        "totalContainers": containers,
        "state": info.state,
    }
    return _omit_empty(document, "totalNodes", "totalContainers")


def queue(
    info: QueueInfo,
    partition_name: str,
    children: list[JSON] | None,
    headroom: Mapping[str, int] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> JSON:
    """``dao.PartitionQueueDAOInfo``; ``children`` None when not asked for (no subtree); ``headroom``
    and ``extra`` fields (the priority fields) as the REST layer derives them."""
    parent, _, _ = info.path.rpartition(".")
    document = {
        "queuename": info.path,
        "status": info.state,
        "partition": partition_without_rm(partition_name),
        "pendingResource": info.pending,
        "maxResource": info.own_max,  # YuniKorn's: the queue's own (the limit that applies is ``max``)
        "guaranteedResource": info.guaranteed,
        "allocatedResource": info.allocated,
        "isLeaf": info.is_leaf,
        "isManaged": info.is_managed,
        "properties": info.properties,
        "parent": parent,
        "children": children,
        "childNames": list(info.children),
        "absUsedCapacity": utilization(info.own_max, info.allocated),
        "maxRunningApps": info.max_applications,
        "runningApps": info.running_applications,
        "currentPriority": info.current_priority,
        "preemptingResource": info.preempting,
        "allocatingAcceptedApps": info.allocating_accepted,
        "sortingPolicy": info.sort_policy,
        "prioritySorting": info.priority_sorting,
        "preemptionEnabled": info.preemption_policy != "disabled",
        "isPreemptionFence": info.preemption_policy == "fence",
        "headroom": dict(headroom) if headroom else None,
        **(extra or {}),
    }
    return _omit_empty(
        document,
        "headroom",
        "preemptingResource",
        "allocatingAcceptedApps",
        "template",
        "priorityOffset",
        "preemptionDelay",
        "pendingResource",
        "maxResource",
        "guaranteedResource",
        "allocatedResource",
        "properties",
        "parent",
        "children",
        "childNames",
        "absUsedCapacity",
        "maxRunningApps",
        "runningApps",
        "sortingPolicy",
    )


def allocation(info: AllocationInfo) -> JSON:
    """``dao.AllocationDAOInfo`` (times in Unix ns; a time korral does not know is left out)."""
    delay = (
        info.allocation_time_ns - info.request_time_ns
        if info.request_time_ns and info.allocation_time_ns
        else 0
    )
    return _omit_empty(
        {
            "allocationKey": info.allocation_key,
            "allocationTags": info.tags,
            "requestTime": info.request_time_ns,
            "allocationTime": info.allocation_time_ns,
            "allocationDelay": delay,
            "resource": info.resource,
            "priority": str(info.priority),
            "nodeId": info.node_id,
            "applicationId": info.application_id,
            "placeholder": info.placeholder,
            "placeholderUsed": info.placeholder_used,
            "taskGroupName": info.task_group_name,
            "preempted": info.releasing == "PREEMPTED_BY_SCHEDULER",
        },
        "allocationTags",
        "requestTime",
        "allocationTime",
        "allocationDelay",
        "resource",
        "nodeId",
        "applicationId",
        "placeholder",
        "placeholderUsed",
        "taskGroupName",
        "preempted",
    )


def ask(info: AskInfo) -> JSON:
    """``dao.AllocationAskDAOInfo`` of an ask with allocations still to make (korral keeps no
    allocation log, nor whether the ask triggered preemption or a scale-up: left out, as empty)."""
    return _omit_empty(
        {
            "allocationKey": info.allocation_key,
            "allocationTags": info.tags,
            "requestTime": info.request_time_ns,
            "resource": info.resource,
            "pendingCount": info.pending,
            "priority": str(info.priority),
            "requiredNodeId": info.required_node,
            "applicationId": info.application_id,
            "placeholder": info.placeholder,
            "taskGroupName": info.task_group_name,
            "originator": info.originator,
        },
        "allocationTags",
        "requestTime",
        "resource",
        "pendingCount",
        "priority",
        "requiredNodeId",
        "applicationId",
        "placeholder",
        "taskGroupName",
        "originator",
    )


# the states whose entry YuniKorn stamps as the application's finishedTime
FINISHED_STATES = ("Completed", "Failed", "Rejected")


def application(info: ApplicationInfo, rejected_message: str = "") -> JSON:
    """``dao.ApplicationDAOInfo``: its allocations, and its requests (the asks with allocations
    still to make). Times are Unix ns (``startTime``: ms, as YuniKorn); ``resourceHistory``: the
    resource-seconds of its released allocations per instance type."""
    finished = [at for at, state in info.state_log if state in FINISHED_STATES]
    started = [at for at, state in info.state_log if state == "Running"]
    priorities = [a.priority for a in info.asks]
    document: JSON = {
        "applicationID": info.application_id,
        "usedResource": info.allocated,
        "maxUsedResource": info.max_allocated,
        "pendingResource": info.pending,
        "partition": partition_without_rm(info.partition),
        "queueName": info.queue,
        "submissionTime": info.submission_time_ns,
        "finishedTime": finished[-1] if finished else None,
        "requests": [ask(a) for a in info.asks],
        "allocations": [allocation(a) for a in info.allocations],
        "applicationState": info.state,
        "user": info.user,
        "groups": info.groups,
        "rejectedMessage": rejected_message,
        "stateLog": [{"time": at, "applicationState": state} for at, state in info.state_log],
        "maxRequestPriority": max(priorities) if priorities else 0,
        "startTime": started[-1] // 1_000_000 if started else 0,
        "resourceHistory": dict(info.resource_seconds),
        "placeholderResource": info.placeholder,  # korral's: the placeholders it holds
        "placeholderData": [
            _omit_empty(
                {
                    "taskGroupName": data.task_group_name,
                    "count": data.count,
                    "minResource": data.min_resource,
                    "replaced": data.replaced,
                    "timedout": data.timed_out,
                },
                "taskGroupName",
                "count",
                "minResource",
                "replaced",
                "timedout",
            )
            for data in info.placeholder_data
        ],
        "hasReserved": bool(info.reservations),
        "reservations": info.reservations,
    }
    if info.backoff_deadline is not None:  # YUNIKORN-3115, omitted when never set (Go's omitempty)
        moment = datetime.datetime.fromtimestamp(info.backoff_deadline, datetime.UTC)
        document["backoffDeadline"] = moment.isoformat().replace("+00:00", "Z")
    return _omit_empty(
        document,
        "usedResource",
        "maxUsedResource",
        "pendingResource",
        "submissionTime",
        "finishedTime",
        "requests",
        "allocations",
        "applicationState",
        "user",
        "groups",
        "rejectedMessage",
        "stateLog",
        "maxRequestPriority",
        "startTime",
        "placeholderResource",
        "placeholderData",
        "hasReserved",
        "reservations",
    )


def rejected_application(application_id: str, partition_name: str, reason: str) -> JSON:
    return {
        "applicationID": application_id,
        "partition": partition_without_rm(partition_name),
        "queueName": "",
        "applicationState": "Rejected",
        "rejectedMessage": reason,
        "resourceHistory": {},
    }


def node(info: NodeInfo) -> JSON:
    """``dao.NodeDAOInfo``."""
    return _omit_empty(
        {
            "nodeID": info.node_id,
            "hostName": info.attributes.get(si.HOST_NAME, ""),
            "rackName": info.attributes.get(si.RACK_NAME, ""),
            "attributes": info.attributes,
            "capacity": info.capacity,
            "allocated": info.allocated,
            "occupied": info.occupied,
            "available": info.available,
            # YuniKorn's GetUtilizedResource: the percentage of each allocated resource the node has
            "utilized": {
                name: value
                for name, value in utilization(info.capacity, info.allocated).items()
                if name in info.allocated
            },
            "allocations": [allocation(a) for a in info.allocations],
            "schedulable": info.schedulable,
            "isReserved": bool(info.reservations),
            "reservations": info.reserved_asks,  # YuniKorn's keys: the holding asks' allocation keys
        },
        "hostName",
        "rackName",
        "attributes",
        "capacity",
        "allocated",
        "occupied",
        "available",
        "utilized",
        "allocations",
        "reservations",
    )


def cluster(info: PartitionInfo, start_time_ns: int, build_info: Mapping[str, str]) -> JSON:
    """``dao.ClusterDAOInfo`` as yunikorn-core fills it: the RM's build information with its rmId."""
    return {
        "startTime": start_time_ns,
        "rmBuildInformation": [{**build_info, "rmId": info.rm_id}],
        "partition": partition_without_rm(info.name),
        "clusterName": "kubernetes",
    }


def event(event_id: int, record: si.EventRecord) -> JSON:
    """An ``si.EventRecord`` as YuniKorn's REST API writes it (the protobuf's json names), with its id."""
    return _omit_empty(
        {
            "id": event_id,
            "type": int(record.type),
            "objectID": record.object_id,
            "referenceID": record.reference_id or record.group_id,
            "message": record.message or record.reason,
            "timestampNano": record.timestamp_nano,
            "eventChangeType": int(record.event_change_type),
            "eventChangeDetail": int(record.event_change_detail),
            "resource": {"resources": {name: {"value": v} for name, v in record.resource.items()}}
            if record.resource
            else None,
        },
        "objectID",
        "referenceID",
        "message",
        "resource",
    )


# ---- user and group usage (dao/ugm_info.go) ----------------------------------------------------------


def _resource(resource: Mapping[str, int]) -> JSON | None:
    """A resource as yunikorn-core's DAOMap writes it today: a flat map (be3bb487)."""
    return dict(resource) if resource else None


def usage_tree(rows: Iterable[Any]) -> JSON | None:
    """``dao.ResourceUsageDAOInfo``: per-queue rows (``queue_path``, ``resource``,
    ``running_applications``, ``max_resources``, ``max_applications``) as the tree from root."""
    documents: dict[str, JSON] = {}
    top: JSON | None = None
    for row in sorted(rows, key=lambda r: (r.queue_path.count("."), r.queue_path)):
        document = _omit_empty(
            {
                "queuePath": row.queue_path,
                "resourceUsage": _resource(row.resource),
                "runningApplications": sorted(row.running_applications),
                "maxResources": _resource(row.max_resources),
                "maxApplications": row.max_applications,
                "children": [],
            },
            "resourceUsage",
            "runningApplications",
            "maxResources",
            "maxApplications",
        )
        documents[row.queue_path] = document
        parent = documents.get(row.queue_path.rpartition(".")[0])
        if parent is not None:
            parent["children"].append(document)
        elif top is None:
            top = document
    for document in documents.values():
        _omit_empty(document, "children")
    return top


def user_usage(info: Any) -> JSON:
    """``dao.UserResourceUsageDAOInfo`` of a user's usage snapshot (``user``, ``queues`` rows)."""
    groups = dict(getattr(info, "groups", {}))  # application -> the group it is tracked against
    return _omit_empty(
        {"userName": info.user, "groups": groups, "queues": usage_tree(info.queues)}, "groups", "queues"
    )


def group_usage(info: Any) -> JSON:
    """``dao.GroupResourceUsageDAOInfo`` of a group's usage snapshot (``group``, ``queues`` rows)."""
    applications = sorted({app for row in info.queues for app in row.running_applications})
    return _omit_empty(
        {"groupName": info.group, "applications": applications, "queues": usage_tree(info.queues)},
        "applications",
        "queues",
    )


# ---- the health checks (yunikorn-core scheduler/health_checker.go), run on request -----------------


def _check(succeeded: bool, name: str, description: str, message: str) -> JSON:
    return {"Name": name, "Succeeded": succeeded, "Description": description, "DiagnosisMessage": message}


def _negative(resource: Mapping[str, int]) -> bool:
    return any(value < 0 for value in resource.values())


def _sum(resources: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for resource in resources:
        for name, value in resource.items():
            total[name] = total.get(name, 0) + value
    return {name: value for name, value in total.items() if value != 0}


def _pruned(resource: Mapping[str, int]) -> dict[str, int]:
    return {name: value for name, value in resource.items() if value != 0}


def health(
    scheduling_errors: int,
    failed_nodes: int,
    partitions: Iterable[tuple[PartitionInfo, list[NodeInfo], list[ApplicationInfo]]],
) -> JSON:
    """``dao.SchedulerHealthDAOInfo`` from one snapshot of each partition, its nodes and applications."""
    negative_partitions: list[str] = []
    negative_nodes: list[str] = []
    allocation_mismatch: list[str] = []
    total_mismatch: list[str] = []
    node_total_mismatch: list[str] = []
    node_capacity_mismatch: list[str] = []
    ratios: list[float] = []
    orphans_on_node: list[str] = []
    orphans_on_app: list[str] = []
    for info, nodes, apps in partitions:
        if _negative(info.allocated) or _negative(info.capacity):
            negative_partitions.append(info.name)
        app_allocations = {app.application_id: {a.uuid for a in app.allocations} for app in apps}
        node_allocations: dict[str, set[str]] = {}
        reservations = 0
        for node_info in nodes:
            node_allocations[node_info.node_id] = {a.uuid for a in node_info.allocations}
            reservations += len(node_info.reservations)
            parts = _sum([node_info.allocated, node_info.occupied, node_info.available])
            if parts != _pruned(node_info.capacity):
                node_total_mismatch.append(node_info.node_id)
            if any(_negative(r) for r in (node_info.allocated, node_info.available, node_info.capacity)) or (
                _negative(node_info.occupied)
            ):
                negative_nodes.append(node_info.node_id)
            if any(value > node_info.capacity.get(name, 0) for name, value in node_info.allocated.items()):
                node_capacity_mismatch.append(node_info.node_id)
            for alloc in node_info.allocations:
                if alloc.uuid not in app_allocations.get(alloc.application_id, ()):
                    orphans_on_node.append(alloc.uuid)
        for app in apps:
            for alloc in app.allocations:
                if alloc.uuid not in node_allocations.get(alloc.node_id, ()):
                    orphans_on_app.append(alloc.uuid)
        ratios.append(reservations / len(nodes) if nodes else 0.0)
        if _sum(n.allocated for n in nodes) != _pruned(info.allocated):
            allocation_mismatch.append(info.name)
        node_capacity = _sum(n.capacity for n in nodes)
        if node_capacity and node_capacity != _pruned(info.capacity):
            total_mismatch.append(info.name)
    checks = [
        _check(
            scheduling_errors == 0,
            "Scheduling errors",
            "Check for scheduling error entries in metrics",
            f"There were {scheduling_errors} scheduling errors logged in the metrics",
        ),
        _check(
            failed_nodes == 0,
            "Failed nodes",
            "Check for failed nodes entries in metrics",
            f"There were {failed_nodes} failed nodes logged in the metrics",
        ),
        _check(
            not negative_partitions,
            "Negative resources",
            "Check for negative resources in the partitions",
            f"Partitions with negative resources: {negative_partitions}",
        ),
        _check(
            not negative_nodes,
            "Negative resources",
            "Check for negative resources in the nodes",
            f"Nodes with negative resources: {negative_nodes}",
        ),
        _check(
            not allocation_mismatch,
            "Consistency of data",
            "Check if a partition's allocated resource == sum of the allocated resources of its nodes",
            f"Partitions with inconsistent data: {allocation_mismatch}",
        ),
        _check(
            not total_mismatch,
            "Consistency of data",
            "Check if total partition resource == sum of the node resources from the partition",
            f"Partitions with inconsistent data: {total_mismatch}",
        ),
        _check(
            not node_total_mismatch,
            "Consistency of data",
            "Check if node total resource = allocated resource + occupied resource + available resource",
            f"Nodes with inconsistent data: {node_total_mismatch}",
        ),
        _check(
            not node_capacity_mismatch,
            "Consistency of data",
            "Check if node capacity >= allocated resources on the node",
            f"Nodes with inconsistent data: {node_capacity_mismatch}",
        ),
        _check(
            True,
            "Reservation check",
            "Check the reservation nr compared to the number of nodes",
            f"Reservation/node nr ratio: {ratios}",
        ),
        _check(
            not orphans_on_node,
            "Orphan allocation on node check",
            "Check if there are orphan allocations on the nodes",
            f"Orphan allocations: {orphans_on_node}",
        ),
        _check(
            not orphans_on_app,
            "Orphan allocation on app check",
            "Check if there are orphan allocations on the applications",
            f"OrphanAllocations: {orphans_on_app}",
        ),
    ]
    return {"Healthy": all(check["Succeeded"] for check in checks), "HealthChecks": checks}
