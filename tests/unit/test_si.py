"""The SI messages behave like protobuf messages a Python user can rely on: defaults, immutability, enums."""

from __future__ import annotations

import enum
from typing import Any

import attrs
import pytest

from korral import si
from korral.si import messages

# Every message with every field's protobuf default.
DEFAULTS: list[tuple[type, dict[str, Any]]] = [
    (
        si.RegisterResourceManagerRequest,
        {"rm_id": "", "version": "", "policy_group": "", "build_info": {}, "config": "", "extra_config": {}},
    ),
    (si.RegisterResourceManagerResponse, {}),
    (si.AllocationRequest, {"asks": (), "releases": None, "rm_id": ""}),
    (si.ApplicationRequest, {"new": (), "remove": (), "rm_id": ""}),
    (si.NodeRequest, {"nodes": (), "rm_id": ""}),
    (si.AllocationResponse, {"new": (), "released": (), "released_asks": (), "rejected": ()}),
    (si.ApplicationResponse, {"rejected": (), "accepted": (), "updated": ()}),
    (si.NodeResponse, {"rejected": (), "accepted": ()}),
    (
        si.UpdatedApplication,
        {"application_id": "", "state": "", "state_transition_timestamp": 0, "message": ""},
    ),
    (si.RejectedApplication, {"application_id": "", "reason": ""}),
    (si.AcceptedApplication, {"application_id": ""}),
    (si.RejectedNode, {"node_id": "", "reason": ""}),
    (si.AcceptedNode, {"node_id": ""}),
    (
        si.AllocationAsk,
        {
            "allocation_key": "",
            "application_id": "",
            "partition_name": "",
            "resource_ask": {},
            "max_allocations": 0,
            "priority": 0,
            "execution_timeout_milliseconds": 0,
            "tags": {},
            "task_group_name": "",
            "placeholder": False,
            "originator": False,
            "preemption_policy": None,
        },
    ),
    (si.PreemptionPolicy, {"allow_preempt_self": False, "allow_preempt_other": False}),
    (
        si.AddApplicationRequest,
        {
            "application_id": "",
            "queue_name": "",
            "partition_name": "",
            "ugi": None,
            "tags": {},
            "execution_timeout_milliseconds": 0,
            "placeholder_ask": {},
            "gang_scheduling_style": "",
        },
    ),
    (si.RemoveApplicationRequest, {"application_id": "", "partition_name": ""}),
    (si.UserGroupInformation, {"user": "", "groups": ()}),
    (
        si.Allocation,
        {
            "allocation_key": "",
            "allocation_tags": {},
            "uuid": "",
            "resource_per_alloc": {},
            "priority": 0,
            "node_id": "",
            "application_id": "",
            "partition_name": "",
            "task_group_name": "",
            "placeholder": False,
        },
    ),
    (si.AllocationReleasesRequest, {"allocations_to_release": (), "allocation_asks_to_release": ()}),
    (
        si.AllocationRelease,
        {
            "partition_name": "",
            "application_id": "",
            "uuid": "",
            "termination_type": si.TerminationType.UNKNOWN_TERMINATION_TYPE,
            "message": "",
            "allocation_key": "",
        },
    ),
    (
        si.AllocationAskRelease,
        {
            "partition_name": "",
            "application_id": "",
            "allocation_key": "",
            "termination_type": si.TerminationType.UNKNOWN_TERMINATION_TYPE,
            "message": "",
        },
    ),
    (
        si.NodeInfo,
        {
            "node_id": "",
            "action": si.NodeAction.UNKNOWN_ACTION_FROM_RM,
            "attributes": {},
            "schedulable_resource": {},
            "occupied_resource": {},
            "existing_allocations": (),
        },
    ),
    (si.RejectedAllocationAsk, {"allocation_key": "", "application_id": "", "reason": ""}),
    (si.PredicatesArgs, {"allocation_key": "", "node_id": "", "allocate": False}),
    (
        si.UpdateContainerSchedulingStateRequest,
        {
            "application_id": "",
            "allocation_key": "",
            "state": si.SchedulingState.UNKNOWN_SCHEDULING_STATE,
            "reason": "",
        },
    ),
    (si.UpdateConfigurationRequest, {"rm_id": "", "policy_group": "", "config": "", "extra_config": {}}),
    (
        si.EventRecord,
        {
            "type": si.EventRecordType.UNKNOWN_EVENTRECORD_TYPE,
            "object_id": "",
            "group_id": "",
            "reason": "",
            "message": "",
            "timestamp_nano": 0,
            "event_change_type": si.EventChangeType.NONE,
            "event_change_detail": si.EventChangeDetail.DETAILS_NONE,
            "reference_id": "",
            "resource": {},
        },
    ),
]

MESSAGE_CLASSES = [cls for cls, _ in DEFAULTS]


def _ids(cls: type) -> str:
    return cls.__name__


@pytest.mark.parametrize(("cls", "expected"), DEFAULTS, ids=[cls.__name__ for cls, _ in DEFAULTS])
def test_defaults_are_protobuf_defaults(cls: type, expected: dict[str, Any]) -> None:
    msg = cls()
    assert attrs.asdict(msg, recurse=False) == expected
    for name, value in expected.items():
        assert type(getattr(msg, name)) is type(value), name


@pytest.mark.parametrize("cls", MESSAGE_CLASSES, ids=_ids)
def test_every_message_is_exported_and_named_after_protobuf(cls: type) -> None:
    assert cls.__name__ in si.__all__
    assert getattr(si, cls.__name__) is cls
    assert attrs.has(cls)


@pytest.mark.parametrize("cls", [cls for cls, fields in DEFAULTS if fields], ids=_ids)
def test_messages_are_frozen(cls: type) -> None:
    msg = cls()
    name = attrs.fields(cls)[0].name
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(msg, name, getattr(msg, name))


@pytest.mark.parametrize("cls", [cls for cls, fields in DEFAULTS if fields], ids=_ids)
def test_messages_are_keyword_only(cls: type) -> None:
    with pytest.raises(TypeError):
        cls(getattr(cls(), attrs.fields(cls)[0].name))


def test_unknown_field_is_rejected() -> None:
    with pytest.raises(TypeError):
        si.AllocationAsk(allocationKey="a")  # type: ignore[call-arg]


def test_messages_compare_by_value() -> None:
    a = si.AllocationAsk(allocation_key="k", resource_ask={"memory": 10}, tags={"t": "v"})
    b = si.AllocationAsk(allocation_key="k", resource_ask={"memory": 10}, tags={"t": "v"})
    assert a == b
    assert a != si.AllocationAsk(allocation_key="k", resource_ask={"memory": 11}, tags={"t": "v"})


def test_repeated_fields_become_tuples_detached_from_the_callers_list() -> None:
    asks = [si.AllocationAsk(allocation_key="a1"), si.AllocationAsk(allocation_key="a2")]
    request = si.AllocationRequest(asks=asks, rm_id="rm1")
    assert request.asks == tuple(asks)
    assert isinstance(request.asks, tuple)
    asks.append(si.AllocationAsk(allocation_key="a3"))
    asks[0] = si.AllocationAsk(allocation_key="changed")
    assert [a.allocation_key for a in request.asks] == ["a1", "a2"]


def test_repeated_fields_accept_any_iterable() -> None:
    ugi = si.UserGroupInformation(user="u", groups=(g for g in ["g1", "g2"]))
    assert ugi.groups == ("g1", "g2")
    node = si.NodeInfo(node_id="n1")
    assert si.NodeRequest(nodes=iter([node])).nodes == (node,)


def test_repeated_field_rejects_a_bare_string() -> None:
    with pytest.raises(TypeError):
        si.UserGroupInformation(user="u", groups="admins")


def test_repeated_field_none_means_empty() -> None:
    assert si.UserGroupInformation(groups=None).groups == ()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cls", "field"),
    [
        (si.RegisterResourceManagerRequest, "build_info"),
        (si.RegisterResourceManagerRequest, "extra_config"),
        (si.UpdateConfigurationRequest, "extra_config"),
        (si.AllocationAsk, "resource_ask"),
        (si.AllocationAsk, "tags"),
        (si.AddApplicationRequest, "tags"),
        (si.AddApplicationRequest, "placeholder_ask"),
        (si.Allocation, "allocation_tags"),
        (si.Allocation, "resource_per_alloc"),
        (si.NodeInfo, "attributes"),
        (si.NodeInfo, "schedulable_resource"),
        (si.NodeInfo, "occupied_resource"),
        (si.EventRecord, "resource"),
    ],
)
def test_map_fields_are_copied_from_the_callers_dict(cls: type, field: str) -> None:
    source: dict[str, Any] = {"memory": 1, "vcore": 2}
    msg = cls(**{field: source})
    value = getattr(msg, field)
    assert value == {"memory": 1, "vcore": 2}
    assert type(value) is dict
    assert value is not source
    source["memory"] = 99
    source["extra"] = 3
    assert getattr(msg, field) == {"memory": 1, "vcore": 2}


def test_map_field_accepts_none_and_any_mapping() -> None:
    assert si.NodeInfo(attributes=None).attributes == {}  # type: ignore[arg-type]
    assert si.NodeInfo(attributes=[("a", "b")]).attributes == {"a": "b"}  # type: ignore[arg-type]


def test_default_containers_are_not_shared_between_instances() -> None:
    a, b = si.NodeInfo(), si.NodeInfo()
    assert a.attributes is not b.attributes
    assert a.schedulable_resource is not b.schedulable_resource


def test_resource_is_a_plain_dict_alias() -> None:
    ask = si.AllocationAsk(resource_ask={si.MEMORY: 10_000_000, si.CPU: 1000})
    assert ask.resource_ask == {"memory": 10_000_000, "vcore": 1000}
    assert si.Resource == dict[str, int]


def test_sub_messages_nest() -> None:
    request = si.AllocationRequest(
        rm_id="rm1",
        releases=si.AllocationReleasesRequest(
            allocations_to_release=[si.AllocationRelease(uuid="u1", termination_type=1)],
            allocation_asks_to_release=[si.AllocationAskRelease(allocation_key="k1")],
        ),
    )
    assert request.releases is not None
    assert request.releases.allocations_to_release[0].termination_type is si.TerminationType.STOPPED_BY_RM
    app = si.AddApplicationRequest(application_id="app1", ugi=si.UserGroupInformation(user="u", groups=["g"]))
    assert app.ugi == si.UserGroupInformation(user="u", groups=("g",))
    ask = si.AllocationAsk(preemption_policy=si.PreemptionPolicy(allow_preempt_self=True))
    assert ask.preemption_policy is not None and ask.preemption_policy.allow_preempt_self


def test_evolve_keeps_the_conversions() -> None:
    node = si.NodeInfo(node_id="n1", action=si.NodeAction.CREATE)
    drained = attrs.evolve(node, action=3, attributes={"ready": "true"})
    assert drained.action is si.NodeAction.DRAIN_NODE
    assert node.action is si.NodeAction.CREATE
    assert drained.attributes == {"ready": "true"}


ENUMS: list[tuple[type[enum.IntEnum], dict[str, int]]] = [
    (
        si.TerminationType,
        {
            "UNKNOWN_TERMINATION_TYPE": 0,
            "STOPPED_BY_RM": 1,
            "TIMEOUT": 2,
            "PREEMPTED_BY_SCHEDULER": 3,
            "PLACEHOLDER_REPLACED": 4,
        },
    ),
    (
        si.NodeAction,
        {
            "UNKNOWN_ACTION_FROM_RM": 0,
            "CREATE": 1,
            "UPDATE": 2,
            "DRAIN_NODE": 3,
            "DECOMISSION": 4,
            "DRAIN_TO_SCHEDULABLE": 5,
            "CREATE_DRAIN": 6,
        },
    ),
    (
        si.SchedulingState,
        {"UNKNOWN_SCHEDULING_STATE": 0, "SKIPPED": 1, "SCHEDULED": 2, "RESERVED": 3, "FAILED": 4},
    ),
    (
        si.EventRecordType,
        {"UNKNOWN_EVENTRECORD_TYPE": 0, "REQUEST": 1, "APP": 2, "NODE": 3, "QUEUE": 4, "USERGROUP": 5},
    ),
    (si.EventChangeType, {"NONE": 0, "SET": 1, "ADD": 2, "REMOVE": 3}),
    (
        si.EventChangeDetail,
        {
            "DETAILS_NONE": 0,
            "REQUEST_CANCEL": 100,
            "REQUEST_ALLOC": 101,
            "REQUEST_TIMEOUT": 102,
            "APP_ALLOC": 200,
            "APP_REQUEST": 201,
            "APP_REJECT": 202,
            "APP_NEW": 203,
            "APP_ACCEPTED": 204,
            "APP_STARTING": 205,
            "APP_RUNNING": 206,
            "APP_COMPLETING": 207,
            "APP_COMPLETED": 208,
            "APP_FAILING": 209,
            "APP_FAILED": 210,
            "APP_RESUMING": 211,
            "APP_EXPIRED": 212,
            "APP_CANNOTRUN_QUEUE": 213,
            "APP_RUNNABLE_QUEUE": 214,
            "APP_CANNOTRUN_QUOTA": 215,
            "APP_RUNNABLE_QUOTA": 216,
            "NODE_DECOMISSION": 300,
            "NODE_READY": 301,
            "NODE_SCHEDULABLE": 302,
            "NODE_ALLOC": 303,
            "NODE_CAPACITY": 304,
            "NODE_OCCUPIED": 305,
            "NODE_RESERVATION": 306,
            "QUEUE_CONFIG": 400,
            "QUEUE_DYNAMIC": 401,
            "QUEUE_TYPE": 402,
            "QUEUE_MAX": 403,
            "QUEUE_GUARANTEED": 404,
            "QUEUE_APP": 405,
            "QUEUE_ALLOC": 406,
            "QUEUE_PREEMPTION": 407,
            "ALLOC_CANCEL": 500,
            "ALLOC_PREEMPT": 501,
            "ALLOC_TIMEOUT": 502,
            "ALLOC_REPLACED": 503,
            "ALLOC_NODEREMOVED": 504,
            "UG_USER_LIMIT": 600,
            "UG_GROUP_LIMIT": 601,
            "UG_APP_LINK": 602,
            "UG_USER_RESOURCE": 603,
            "UG_GROUP_RESOURCE": 604,
        },
    ),
]


@pytest.mark.parametrize(("enum_cls", "members"), ENUMS, ids=[e.__name__ for e, _ in ENUMS])
def test_enum_names_and_numbers_match_the_spec(enum_cls: type[enum.IntEnum], members: dict[str, int]) -> None:
    assert issubclass(enum_cls, enum.IntEnum)
    assert {m.name: m.value for m in enum_cls} == members
    assert enum_cls.__name__ in si.__all__


@pytest.mark.parametrize(
    ("cls", "field", "raw", "expected"),
    [
        (si.NodeInfo, "action", 4, si.NodeAction.DECOMISSION),
        (si.NodeInfo, "action", 6, si.NodeAction.CREATE_DRAIN),
        (si.AllocationRelease, "termination_type", 3, si.TerminationType.PREEMPTED_BY_SCHEDULER),
        (si.AllocationAskRelease, "termination_type", 2, si.TerminationType.TIMEOUT),
        (si.UpdateContainerSchedulingStateRequest, "state", 4, si.SchedulingState.FAILED),
        (si.EventRecord, "type", 5, si.EventRecordType.USERGROUP),
        (si.EventRecord, "event_change_type", 2, si.EventChangeType.ADD),
        (si.EventRecord, "event_change_detail", 604, si.EventChangeDetail.UG_GROUP_RESOURCE),
    ],
)
def test_ints_convert_to_enums(cls: type, field: str, raw: int, expected: enum.IntEnum) -> None:
    value = getattr(cls(**{field: raw}), field)
    assert value is expected
    assert getattr(cls(**{field: expected}), field) is expected


def test_unknown_enum_number_is_rejected() -> None:
    with pytest.raises(ValueError):
        si.NodeInfo(action=42)


def test_nested_enum_names_match_protobuf() -> None:
    assert si.NodeInfo.ActionFromRM is si.NodeAction
    assert si.UpdateContainerSchedulingStateRequest.SchedulingState is si.SchedulingState
    assert si.EventRecord.Type is si.EventRecordType
    assert si.EventRecord.ChangeType is si.EventChangeType
    assert si.EventRecord.ChangeDetail is si.EventChangeDetail
    node = si.NodeInfo(node_id="n1", action=si.NodeInfo.ActionFromRM.DRAIN_TO_SCHEDULABLE)
    assert node.action == 5
    # the nested alias lives on the class, so instances stay frozen
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        node.action = si.NodeAction.CREATE  # type: ignore[misc]


def test_event_record_carries_the_change_fields() -> None:
    event = si.EventRecord(
        type=si.EventRecord.Type.APP,
        object_id="app1",
        message="allocated",
        timestamp_nano=123,
        event_change_type=si.EventChangeType.ADD,
        event_change_detail=si.EventChangeDetail.APP_ALLOC,
        reference_id="alloc-1",
        resource={"memory": 5},
    )
    assert event.type is si.EventRecordType.APP
    assert event.event_change_detail == 200
    assert event.resource == {"memory": 5}


CONSTANTS = {
    "ARCH": "si/arch",
    "HOST_NAME": "si/hostname",
    "RACK_NAME": "si/rackname",
    "OS": "si/os",
    "INSTANCE_TYPE": "si/instance-type",
    "FAILURE_DOMAIN_ZONE": "si/zone",
    "FAILURE_DOMAIN_REGION": "si/region",
    "LOCAL_IMAGES": "si/local-images",
    "NODE_PARTITION": "si/node-partition",
    "APPLICATION_ID": "si/application-id",
    "CONTAINER_IMAGE": "si/container-image",
    "CONTAINER_PORTS": "si/container-ports",
    "DOMAIN_K8S": "kubernetes.io/",
    "DOMAIN_YUNIKORN": "yunikorn.apache.org/",
    "GROUP_META": "meta/",
    "GROUP_LABEL": "label/",
    "GROUP_ANNOTATION": "annotation/",
    "KEY_POD_NAME": "podName",
    "KEY_NAMESPACE": "namespace",
    "KEY_REQUIRED_NODE": "requiredNode",
    "KEY_ALLOW_PREEMPTION": "allowPreemption",
    "CREATION_TIME": "creationTime",
    "MEMORY": "memory",
    "CPU": "vcore",
    "APP_TAG_NAMESPACE_RESOURCE_QUOTA": "namespace.resourcequota",
    "APP_TAG_NAMESPACE_RESOURCE_GUARANTEED": "namespace.resourceguaranteed",
    "APP_TAG_NAMESPACE_RESOURCE_MAX_APPS": "namespace.resourcemaxapps",
    "APP_TAG_STATE_AWARE_DISABLE": "application.stateaware.disable",
    "APP_TAG_CREATE_FORCE": "application.create.force",
    "NODE_READY_ATTRIBUTE": "ready",
}


@pytest.mark.parametrize(("name", "value"), CONSTANTS.items())
def test_constants(name: str, value: str) -> None:
    assert getattr(si, name) == value
    assert name in si.__all__


def test_allocation_tag_key_composition() -> None:
    assert si.DOMAIN_K8S + si.GROUP_META + si.KEY_NAMESPACE == "kubernetes.io/meta/namespace"


def test_all_is_complete_and_star_import_works() -> None:
    assert set(si.__all__) == set(messages.__all__)
    for name in si.__all__:
        assert hasattr(si, name), name
    namespace: dict[str, Any] = {}
    exec("from korral.si import *", namespace)
    assert "AllocationAsk" in namespace and "NODE_READY_ATTRIBUTE" in namespace
    public_classes = {
        name
        for name, obj in vars(messages).items()
        if not name.startswith("_") and isinstance(obj, type) and obj.__module__ == messages.__name__
    }
    assert public_classes <= set(messages.__all__)
