"""Records that cross actors are immutable values, defined once and built by keyword only.

A field moved or renamed in the record must not land silently in another: a positional build is
refused, and every field built by keyword reads back under its own name.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from korral.model.allocation import Allocation, Ask, AskSpec
from korral.model.app.application import Application
from korral.model.app.spec import AppSpec


def _distinct_values(fields: dict[str, Any]) -> dict[str, Any]:
    """A value per field that no other field has, of the field's type."""
    values: dict[str, Any] = {}
    for index, (name, default) in enumerate(fields.items()):
        if isinstance(default, bool):
            values[name] = index % 2 == 0  # two booleans may share a value: checked below by pairs
        elif isinstance(default, int):
            values[name] = 1000 + index
        elif isinstance(default, float):
            values[name] = 1000.5 + index
        elif isinstance(default, dict):
            values[name] = {f"k{index}": index}
        else:
            values[name] = f"v{index}"
    return values


ALLOCATION_FIELDS: dict[str, Any] = {
    "uuid": "",
    "allocation_key": "",
    "application_id": "",
    "node_id": "",
    "resource": {},
    "partition": "",
    "queue_path": "",
    "priority": 0,
    "placeholder": False,
    "task_group_name": "",
    "tags": {},
    "ask_generation": 0,
    "recovered": False,
    "replaces": "",
    "request_time": 0.0,
    "create_time": 0.0,
    "instance_type": "",
}


def test_an_allocation_reads_back_every_field_under_its_own_name():
    assert set(Allocation.__struct_fields__) == set(ALLOCATION_FIELDS), (
        "a field was added or renamed: list it here"
    )
    for flip in (False, True):  # every boolean seen both ways
        values = _distinct_values(ALLOCATION_FIELDS)
        if flip:
            values = {n: (not v) if isinstance(v, bool) else v for n, v in values.items()}
        allocation = Allocation(**values)
        assert {name: getattr(allocation, name) for name in Allocation.__struct_fields__} == values
        assert allocation.replace(uuid="other").uuid == "other"


def test_an_allocation_cannot_be_built_by_position():
    with pytest.raises(TypeError):
        Allocation("u", "k", "app", "n", {"vcore": 1})  # type: ignore[misc]


ASK_FIELDS: dict[str, Any] = {
    "allocation_key": "",
    "application_id": "",
    "resource": {},
    "max_allocations": 0,
    "priority": 0,
    "create_time": 0.0,
    "tags": {},
    "placeholder": False,
    "task_group_name": "",
    "originator": False,
    "allow_preempt_self": False,
    "allow_preempt_other": False,
    "execution_timeout_ms": 0,
    "generation": 0,
}


def test_an_ask_spec_reads_back_every_field_under_its_own_name():
    derived = {"layout"}
    assert set(AskSpec.__struct_fields__) == set(ASK_FIELDS) | derived, (
        "a field was added or renamed: list it here"
    )
    for flip in (False, True):
        values = _distinct_values(ASK_FIELDS)
        if flip:
            values = {n: (not v) if isinstance(v, bool) else v for n, v in values.items()}
        values["resource"] = {"memory": 3, "vcore": 1}
        values["tags"] = {"yunikorn.apache.org/requiredNode": "n7"}
        spec = AskSpec.build(**values)
        assert {name: getattr(spec, name) for name in ASK_FIELDS} == values
        assert spec.resource_items == (("memory", 3), ("vcore", 1)) and spec.required_node == "n7"
        # a holder's ask reads every field of its spec through, under the same name
        ask = Ask(spec, create_seq=9)
        read_through = (set(AskSpec.__struct_fields__) - derived) | {
            "resource_items",
            "shape",
            "required_node",
        }
        assert {name: getattr(ask, name) for name in read_through} == {
            name: getattr(spec, name) for name in read_through
        }
        assert ask.pending == values["max_allocations"]
        assert ask.sort_key == (-spec.priority, spec.create_time, 9)
        assert spec.with_generation(77).generation == 77 and spec.with_generation(77).shape is spec.shape


def test_an_ask_spec_cannot_be_built_by_position():
    with pytest.raises(TypeError):
        AskSpec("k", "app", {"vcore": 1})  # type: ignore[misc]


def test_an_ask_spec_is_built_with_its_derived_fields_and_never_rewrites_them():
    spec = AskSpec.build(
        allocation_key="k", application_id="a", resource={"vcore": 2, "memory": 5}, max_allocations=0, tags={}
    )
    assert spec.max_allocations == 1  # YuniKorn counts an ask for none as an ask for one
    assert dict(spec.resource_items) == {"memory": 5, "vcore": 2} and spec.required_node == ""
    assert not spec.tags
    # the constructor takes what it is given: nothing derived behind the caller's back
    raw = AskSpec(
        allocation_key="k",
        application_id="a",
        resource={"vcore": 2},
        max_allocations=0,
        layout=((), ()),
    )
    assert raw.max_allocations == 0 and raw.resource_items == ()
    with pytest.raises(TypeError):  # the derived fields are required: a spec never lacks them
        AskSpec(allocation_key="k", application_id="a", resource={"vcore": 1})  # type: ignore[call-arg]


def test_records_are_frozen():
    allocation = Allocation(uuid="u", allocation_key="k", application_id="a", node_id="n", resource={})
    spec = AskSpec.build(allocation_key="k", application_id="a", resource={"vcore": 1})
    with pytest.raises(AttributeError):
        allocation.uuid = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        spec.priority = 3  # type: ignore[misc]


def test_an_application_reads_every_field_of_its_spec_through():
    fields = [field.name for field in attrs.fields(AppSpec)]
    spec = AppSpec(
        application_id="app",
        partition="[rm]p",
        queue_path="root.q",
        user="u",
        groups=("g",),
        tags={"t": "v"},
        submission_seq=4,
        placeholder_ask={"memory": 5},
        execution_timeout_ms=6,
        gang_scheduling_style="Hard",
    )
    app = Application(spec)
    assert {name: getattr(app, name) for name in fields} == attrs.asdict(spec, recurse=False)
    assert all(getattr(spec, name) != attrs.fields_dict(AppSpec)[name].default for name in fields), (
        "every field given a value other than its default: a new field must be added above"
    )
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        spec.queue_path = "root.other"  # type: ignore[misc]


def test_si_allocation_built_through_its_slots_is_the_attrs_built_one() -> None:
    """``to_si_allocation`` builds the RM's record without attrs' ``__init__``: it must set every field
    of ``si.Allocation`` (a field added there fails here), to what the attrs-built one holds, and hand
    the RM its own copies of the dicts."""
    from korral import si
    from korral.model.si_convert import SI_ALLOCATION_FIELDS, to_si_allocation, to_si_allocations

    assert set(SI_ALLOCATION_FIELDS) == {field.name for field in attrs.fields(si.Allocation)}
    for tags, placeholder in (({}, False), ({"kubernetes.io/label/app": "web"}, True)):
        allocation = Allocation(
            uuid="uuid-1",
            allocation_key="ask-1",
            application_id="app-1",
            node_id="node-1",
            resource={"memory": 10, "vcore": 2},
            partition="[rm-1]default",
            priority=7,
            placeholder=placeholder,
            task_group_name="group" if placeholder else "",
            tags=tags,
        )
        expected = si.Allocation(
            allocation_key="ask-1",
            allocation_tags=tags,
            uuid="uuid-1",
            resource_per_alloc={"memory": 10, "vcore": 2},
            priority=7,
            node_id="node-1",
            application_id="app-1",
            partition_name="default",
            task_group_name="group" if placeholder else "",
            placeholder=placeholder,
        )
        for converted in (
            to_si_allocation(allocation),
            to_si_allocation(allocation, "default"),
            *to_si_allocations([allocation, allocation], "default"),
        ):
            assert converted == expected
            assert converted.resource_per_alloc is not allocation.resource
            assert converted.allocation_tags is not allocation.tags
            with pytest.raises(attrs.exceptions.FrozenInstanceError):
                converted.uuid = "other"  # type: ignore[misc]


def test_every_si_message_built_through_its_slot_setters_is_the_keyword_built_one() -> None:
    """``slot_setters`` (the converters' shared way in) names every field of each message, and what
    the setters build is the message a keyword call builds, still frozen."""
    from korral import si
    from korral.si.messages import slot_setters

    classes = [value for name in si.__all__ if attrs.has(value := getattr(si, name))]
    assert si.Allocation in classes and si.AllocationAsk in classes
    for message_type in classes:
        expected = message_type()
        setters = slot_setters(message_type)
        assert list(setters) == [field.name for field in attrs.fields(message_type)]
        built = object.__new__(message_type)
        for name, set_slot in setters.items():
            set_slot(built, getattr(expected, name))
        assert built == expected
        for name in setters:  # (a message without fields has nothing to guard)
            with pytest.raises(attrs.exceptions.FrozenInstanceError):
                built.__setattr__(name, None)
