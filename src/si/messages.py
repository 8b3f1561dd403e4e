"""The scheduler interface (SI): YuniKorn's protobuf messages, enums and constants as immutable classes.

Each protobuf message is a frozen, keyword-only attrs class with the protobuf name and snake_case fields,
every field defaulting to its protobuf default. A protobuf ``Resource`` is a plain ``dict[str, int]``.
Repeated fields are stored as tuples and map fields as private dict copies, so a message never shares
mutable state with the caller that built it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

__all__ = [
    "APPLICATION_ID",
    "APP_TAG_CREATE_FORCE",
    "APP_TAG_NAMESPACE_RESOURCE_GUARANTEED",
    "APP_TAG_NAMESPACE_RESOURCE_MAX_APPS",
    "APP_TAG_NAMESPACE_RESOURCE_QUOTA",
    "APP_TAG_STATE_AWARE_DISABLE",
    "ARCH",
    "CONTAINER_IMAGE",
    "CONTAINER_PORTS",
    "CPU",
    "CREATION_TIME",
    "DOMAIN_K8S",
    "DOMAIN_YUNIKORN",
    "FAILURE_DOMAIN_REGION",
    "FAILURE_DOMAIN_ZONE",
    "GROUP_ANNOTATION",
    "GROUP_LABEL",
    "GROUP_META",
    "HOST_NAME",
    "INSTANCE_TYPE",
    "KEY_ALLOW_PREEMPTION",
    "KEY_NAMESPACE",
    "KEY_POD_NAME",
    "KEY_REQUIRED_NODE",
    "LOCAL_IMAGES",
    "MEMORY",
    "NODE_PARTITION",
    "NODE_READY_ATTRIBUTE",
    "OS",
    "RACK_NAME",
    "AcceptedApplication",
    "AcceptedNode",
    "AddApplicationRequest",
    "Allocation",
    "AllocationAsk",
    "AllocationAskRelease",
    "AllocationRelease",
    "AllocationReleasesRequest",
    "AllocationRequest",
    "AllocationResponse",
    "ApplicationRequest",
    "ApplicationResponse",
    "EventChangeDetail",
    "EventChangeType",
    "EventRecord",
    "EventRecordType",
    "NodeAction",
    "NodeInfo",
    "NodeRequest",
    "NodeResponse",
    "PredicatesArgs",
    "PreemptionPolicy",
    "RegisterResourceManagerRequest",
    "RegisterResourceManagerResponse",
    "RejectedAllocationAsk",
    "RejectedApplication",
    "RejectedNode",
    "RemoveApplicationRequest",
    "Resource",
    "SchedulingState",
    "TerminationType",
    "UpdateConfigurationRequest",
    "UpdateContainerSchedulingStateRequest",
    "UpdatedApplication",
    "UserGroupInformation",
]

# A protobuf Resource (map<string, Quantity>) flattened to resource name -> quantity.
Resource = dict[str, int]


def _to_tuple(value: Iterable[Any] | None) -> tuple[Any, ...]:
    # (not generic: the attrs plugin of mypy cannot bind a converter's type variable to the field)
    # A bare string is iterable too: reject it rather than silently splitting it into characters.
    if isinstance(value, str | bytes):
        raise TypeError(f"expected an iterable of items for a repeated field, got {type(value).__name__}")
    return tuple(value) if value is not None else ()


def _to_dict(value: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(value) if value is not None else {}


def slot_setters(message_type: type) -> dict[str, Callable[[Any, Any], None]]:
    """Each field's slot setter of a message class, by field name, in field order.

    For korral's own converters (``korral.model.si_convert``, ``korral.server.convert``), which build
    many messages from values already in their converted form (private copies of dicts, tuples, enum
    members): setting the slots skips the frozen guard and the converters, which would copy each dict
    a second time. Everyone else builds messages by keyword."""
    return {field.name: getattr(message_type, field.name).__set__ for field in attrs.fields(message_type)}


# ---------------------------------------------------------------------------------------------------------
# Enums
# ---------------------------------------------------------------------------------------------------------


class TerminationType(enum.IntEnum):
    UNKNOWN_TERMINATION_TYPE = 0
    STOPPED_BY_RM = 1  # created by the RM
    TIMEOUT = 2  # executionTimeoutMilliSeconds passed (created by the core)
    PREEMPTED_BY_SCHEDULER = 3  # created by the core
    PLACEHOLDER_REPLACED = 4  # gang placeholder swapped for the real allocation (created by the core)


class NodeAction(enum.IntEnum):
    """``NodeInfo.ActionFromRM``."""

    UNKNOWN_ACTION_FROM_RM = 0
    CREATE = 1
    UPDATE = 2
    DRAIN_NODE = 3
    DECOMISSION = 4  # the spec's spelling
    DRAIN_TO_SCHEDULABLE = 5
    CREATE_DRAIN = 6  # later SI addition: create the node unschedulable


class SchedulingState(enum.IntEnum):
    """``UpdateContainerSchedulingStateRequest.SchedulingState``."""

    UNKNOWN_SCHEDULING_STATE = 0
    SKIPPED = 1
    SCHEDULED = 2
    RESERVED = 3
    FAILED = 4


class EventRecordType(enum.IntEnum):
    """``EventRecord.Type``."""

    UNKNOWN_EVENTRECORD_TYPE = 0
    REQUEST = 1
    APP = 2
    NODE = 3
    QUEUE = 4
    USERGROUP = 5


class EventChangeType(enum.IntEnum):
    """``EventRecord.ChangeType``."""

    NONE = 0
    SET = 1
    ADD = 2
    REMOVE = 3


class EventChangeDetail(enum.IntEnum):
    """``EventRecord.ChangeDetail``."""

    DETAILS_NONE = 0

    REQUEST_CANCEL = 100
    REQUEST_ALLOC = 101
    REQUEST_TIMEOUT = 102

    APP_ALLOC = 200
    APP_REQUEST = 201
    APP_REJECT = 202
    APP_NEW = 203
    APP_ACCEPTED = 204
    APP_STARTING = 205
    APP_RUNNING = 206
    APP_COMPLETING = 207
    APP_COMPLETED = 208
    APP_FAILING = 209
    APP_FAILED = 210
    APP_RESUMING = 211
    APP_EXPIRED = 212
    APP_CANNOTRUN_QUEUE = 213
    APP_RUNNABLE_QUEUE = 214
    APP_CANNOTRUN_QUOTA = 215
    APP_RUNNABLE_QUOTA = 216

    NODE_DECOMISSION = 300
    NODE_READY = 301
    NODE_SCHEDULABLE = 302
    NODE_ALLOC = 303
    NODE_CAPACITY = 304
    NODE_OCCUPIED = 305
    NODE_RESERVATION = 306

    QUEUE_CONFIG = 400
    QUEUE_DYNAMIC = 401
    QUEUE_TYPE = 402
    QUEUE_MAX = 403
    QUEUE_GUARANTEED = 404
    QUEUE_APP = 405
    QUEUE_ALLOC = 406
    QUEUE_PREEMPTION = 407

    ALLOC_CANCEL = 500
    ALLOC_PREEMPT = 501
    ALLOC_TIMEOUT = 502
    ALLOC_REPLACED = 503
    ALLOC_NODEREMOVED = 504

    UG_USER_LIMIT = 600
    UG_GROUP_LIMIT = 601
    UG_APP_LINK = 602
    UG_USER_RESOURCE = 603
    UG_GROUP_RESOURCE = 604


# ---------------------------------------------------------------------------------------------------------
# RM registration and configuration
# ---------------------------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class RegisterResourceManagerRequest:
    rm_id: str = ""
    version: str = ""
    policy_group: str = ""
    build_info: dict[str, str] = attrs.field(factory=dict, converter=_to_dict)
    config: str = ""
    extra_config: dict[str, str] = attrs.field(factory=dict, converter=_to_dict)


@attrs.frozen(kw_only=True)
class RegisterResourceManagerResponse:
    pass


@attrs.frozen(kw_only=True)
class UpdateConfigurationRequest:
    rm_id: str = ""
    policy_group: str = ""
    config: str = ""
    extra_config: dict[str, str] = attrs.field(factory=dict, converter=_to_dict)


# ---------------------------------------------------------------------------------------------------------
# Applications
# ---------------------------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class UserGroupInformation:
    user: str = ""
    groups: tuple[str, ...] = attrs.field(factory=tuple, converter=_to_tuple)


@attrs.frozen(kw_only=True)
class AddApplicationRequest:
    application_id: str = ""
    queue_name: str = ""
    partition_name: str = ""
    ugi: UserGroupInformation | None = None
    tags: dict[str, str] = attrs.field(factory=dict, converter=_to_dict)
    execution_timeout_milliseconds: int = 0
    placeholder_ask: Resource = attrs.field(factory=dict, converter=_to_dict)
    gang_scheduling_style: str = ""


@attrs.frozen(kw_only=True)
class RemoveApplicationRequest:
    application_id: str = ""
    partition_name: str = ""


@attrs.frozen(kw_only=True)
class ApplicationRequest:
    new: tuple[AddApplicationRequest, ...] = attrs.field(factory=tuple, converter=_to_tuple)
    remove: tuple[RemoveApplicationRequest, ...] = attrs.field(factory=tuple, converter=_to_tuple)
    rm_id: str = ""


@attrs.frozen(kw_only=True)
class UpdatedApplication:
    application_id: str = ""
    state: str = ""
    state_transition_timestamp: int = 0
    message: str = ""


@attrs.frozen(kw_only=True)
class RejectedApplication:
    application_id: str = ""
    reason: str = ""


@attrs.frozen(kw_only=True)
class AcceptedApplication:
    application_id: str = ""


@attrs.frozen(kw_only=True)
class ApplicationResponse:
    rejected: tuple[RejectedApplication, ...] = attrs.field(factory=tuple, converter=_to_tuple)
    accepted: tuple[AcceptedApplication, ...] = attrs.field(factory=tuple, converter=_to_tuple)
    updated: tuple[UpdatedApplication, ...] = attrs.field(factory=tuple, converter=_to_tuple)


# ---------------------------------------------------------------------------------------------------------
# Asks, allocations and releases
# ---------------------------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class PreemptionPolicy:
    allow_preempt_self: bool = False
    allow_preempt_other: bool = False


@attrs.frozen(kw_only=True)
class AllocationAsk:
    allocation_key: str = ""
    application_id: str = ""
    partition_name: str = ""
    resource_ask: Resource = attrs.field(factory=dict, converter=_to_dict)
    max_allocations: int = 0
    priority: int = 0
    execution_timeout_milliseconds: int = 0
    tags: dict[str, str] = attrs.field(factory=dict, converter=_to_dict)
    task_group_name: str = ""
    placeholder: bool = False
    originator: bool = False
    preemption_policy: PreemptionPolicy | None = None


@attrs.frozen(kw_only=True)
class Allocation:
    allocation_key: str = ""
    allocation_tags: dict[str, str] = attrs.field(factory=dict, converter=_to_dict)
    uuid: str = ""
    resource_per_alloc: Resource = attrs.field(factory=dict, converter=_to_dict)
    priority: int = 0
    node_id: str = ""
    application_id: str = ""
    partition_name: str = ""
    task_group_name: str = ""
    placeholder: bool = False


@attrs.frozen(kw_only=True)
class AllocationRelease:
    partition_name: str = ""
    application_id: str = ""
    uuid: str = ""
    termination_type: TerminationType = attrs.field(
        default=TerminationType.UNKNOWN_TERMINATION_TYPE, converter=TerminationType
    )
    message: str = ""
    allocation_key: str = ""


@attrs.frozen(kw_only=True)
class AllocationAskRelease:
    partition_name: str = ""
    application_id: str = ""
    allocation_key: str = ""
    termination_type: TerminationType = attrs.field(
        default=TerminationType.UNKNOWN_TERMINATION_TYPE, converter=TerminationType
    )
    message: str = ""


@attrs.frozen(kw_only=True)
class AllocationReleasesRequest:
    allocations_to_release: tuple[AllocationRelease, ...] = attrs.field(factory=tuple, converter=_to_tuple)
    allocation_asks_to_release: tuple[AllocationAskRelease, ...] = attrs.field(
        factory=tuple, converter=_to_tuple
    )


@attrs.frozen(kw_only=True)
class AllocationRequest:
    asks: tuple[AllocationAsk, ...] = attrs.field(factory=tuple, converter=_to_tuple)
    releases: AllocationReleasesRequest | None = None
    rm_id: str = ""


@attrs.frozen(kw_only=True)
class RejectedAllocationAsk:
    allocation_key: str = ""
    application_id: str = ""
    reason: str = ""


@attrs.frozen(kw_only=True)
class AllocationResponse:
    new: tuple[Allocation, ...] = attrs.field(factory=tuple, converter=_to_tuple)
    released: tuple[AllocationRelease, ...] = attrs.field(factory=tuple, converter=_to_tuple)
    released_asks: tuple[AllocationAskRelease, ...] = attrs.field(factory=tuple, converter=_to_tuple)
    rejected: tuple[RejectedAllocationAsk, ...] = attrs.field(factory=tuple, converter=_to_tuple)


# ---------------------------------------------------------------------------------------------------------
# Nodes
# ---------------------------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class NodeInfo:
    node_id: str = ""
    action: NodeAction = attrs.field(default=NodeAction.UNKNOWN_ACTION_FROM_RM, converter=NodeAction)
    attributes: dict[str, str] = attrs.field(factory=dict, converter=_to_dict)
    schedulable_resource: Resource = attrs.field(factory=dict, converter=_to_dict)
    occupied_resource: Resource = attrs.field(factory=dict, converter=_to_dict)
    existing_allocations: tuple[Allocation, ...] = attrs.field(factory=tuple, converter=_to_tuple)


@attrs.frozen(kw_only=True)
class NodeRequest:
    nodes: tuple[NodeInfo, ...] = attrs.field(factory=tuple, converter=_to_tuple)
    rm_id: str = ""


@attrs.frozen(kw_only=True)
class RejectedNode:
    node_id: str = ""
    reason: str = ""


@attrs.frozen(kw_only=True)
class AcceptedNode:
    node_id: str = ""


@attrs.frozen(kw_only=True)
class NodeResponse:
    rejected: tuple[RejectedNode, ...] = attrs.field(factory=tuple, converter=_to_tuple)
    accepted: tuple[AcceptedNode, ...] = attrs.field(factory=tuple, converter=_to_tuple)


# ---------------------------------------------------------------------------------------------------------
# Scheduler plugins: predicates, container scheduling state, events
# ---------------------------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class PredicatesArgs:
    allocation_key: str = ""
    node_id: str = ""
    allocate: bool = False  # True: checking an allocation, False: checking a reservation


@attrs.frozen(kw_only=True)
class UpdateContainerSchedulingStateRequest:
    application_id: str = ""  # the spec's `applicartionID`
    allocation_key: str = ""
    state: SchedulingState = attrs.field(
        default=SchedulingState.UNKNOWN_SCHEDULING_STATE, converter=SchedulingState
    )
    reason: str = ""


@attrs.frozen(kw_only=True)
class EventRecord:
    # group_id and reason are from the seed spec; later SI versions replaced them with the change fields.
    type: EventRecordType = attrs.field(
        default=EventRecordType.UNKNOWN_EVENTRECORD_TYPE, converter=EventRecordType
    )
    object_id: str = ""
    group_id: str = ""
    reason: str = ""
    message: str = ""
    timestamp_nano: int = 0
    event_change_type: EventChangeType = attrs.field(default=EventChangeType.NONE, converter=EventChangeType)
    event_change_detail: EventChangeDetail = attrs.field(
        default=EventChangeDetail.DETAILS_NONE, converter=EventChangeDetail
    )
    reference_id: str = ""
    resource: Resource = attrs.field(factory=dict, converter=_to_dict)


# The protobuf nests these enums in their messages; keep the nested names reachable as well.
NodeInfo.ActionFromRM = NodeAction  # type: ignore[attr-defined]
UpdateContainerSchedulingStateRequest.SchedulingState = SchedulingState  # type: ignore[attr-defined]
EventRecord.Type = EventRecordType  # type: ignore[attr-defined]
EventRecord.ChangeType = EventChangeType  # type: ignore[attr-defined]
EventRecord.ChangeDetail = EventChangeDetail  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------------------------------------

# Node attributes
ARCH = "si/arch"
HOST_NAME = "si/hostname"
RACK_NAME = "si/rackname"
OS = "si/os"
INSTANCE_TYPE = "si/instance-type"
FAILURE_DOMAIN_ZONE = "si/zone"
FAILURE_DOMAIN_REGION = "si/region"
LOCAL_IMAGES = "si/local-images"
NODE_PARTITION = "si/node-partition"

# Allocation attributes
APPLICATION_ID = "si/application-id"
CONTAINER_IMAGE = "si/container-image"
CONTAINER_PORTS = "si/container-ports"

# Allocation tags: keys are <domain><group><key>, e.g. "kubernetes.io/meta/namespace"
DOMAIN_K8S = "kubernetes.io/"
DOMAIN_YUNIKORN = "yunikorn.apache.org/"
GROUP_META = "meta/"
GROUP_LABEL = "label/"
GROUP_ANNOTATION = "annotation/"
KEY_POD_NAME = "podName"
KEY_NAMESPACE = "namespace"
KEY_REQUIRED_NODE = "requiredNode"
KEY_ALLOW_PREEMPTION = "allowPreemption"
CREATION_TIME = "creationTime"

# Core and shim
MEMORY = "memory"
CPU = "vcore"
APP_TAG_NAMESPACE_RESOURCE_QUOTA = "namespace.resourcequota"
APP_TAG_NAMESPACE_RESOURCE_GUARANTEED = "namespace.resourceguaranteed"
APP_TAG_NAMESPACE_RESOURCE_MAX_APPS = "namespace.resourcemaxapps"
APP_TAG_STATE_AWARE_DISABLE = "application.stateaware.disable"
APP_TAG_CREATE_FORCE = "application.create.force"
NODE_READY_ATTRIBUTE = "ready"
