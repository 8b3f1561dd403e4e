"""The door check of an ask: its one-pass fast path accepts only what the field-by-field checks accept."""

from __future__ import annotations

import attrs
import pytest

from korral import si
from korral.si.validate import BadItem, check_ask

GOOD = si.AllocationAsk(
    allocation_key="k",
    application_id="app",
    partition_name="default",
    resource_ask={"memory": 10, "vcore": 1},
    max_allocations=1,
    tags={"a": "b"},
)

BAD_FIELDS = [
    ("allocation_key", 1),
    ("application_id", None),
    ("partition_name", b"default"),
    ("resource_ask", {"memory": 1.5}),
    ("resource_ask", {"memory": True}),
    ("resource_ask", {"memory": 2**63}),
    ("resource_ask", {1: 10}),
    ("resource_ask", [("memory", 10)]),
    ("max_allocations", 2**31),
    ("max_allocations", "1"),
    ("priority", -(2**31) - 1),
    ("execution_timeout_milliseconds", 1.0),
    ("tags", {"a": 1}),
    ("tags", {1: "a"}),
    ("tags", "a=b"),
    ("task_group_name", 0),
    ("placeholder", 1),
    ("originator", None),
    ("preemption_policy", {"allow_preempt_self": True}),
    ("preemption_policy", si.PreemptionPolicy(allow_preempt_self=1)),  # type: ignore[arg-type]
]


def _with(field: str, value: object) -> si.AllocationAsk:
    ask = attrs.evolve(GOOD)
    object.__setattr__(ask, field, value)  # past the converters, as a careless RM's object could be
    return ask


def test_a_plain_ask_passes_with_or_without_optional_fields():
    check_ask(GOOD, "asks[0]")
    check_ask(si.AllocationAsk(), "asks[0]")
    check_ask(attrs.evolve(GOOD, preemption_policy=si.PreemptionPolicy(allow_preempt_other=True)), "asks[0]")


@pytest.mark.parametrize(("field", "value"), BAD_FIELDS, ids=[f"{f}-{v!r}" for f, v in BAD_FIELDS])
def test_a_bad_field_is_named_in_the_rejection(field: str, value: object):
    with pytest.raises(BadItem, match=f"asks\\[3\\]\\.{field}"):
        check_ask(_with(field, value), "asks[3]")


def test_something_else_than_an_ask_is_rejected():
    with pytest.raises(BadItem, match=r"must be a korral\.si\.AllocationAsk"):
        check_ask(si.Allocation(), "asks[0]")
