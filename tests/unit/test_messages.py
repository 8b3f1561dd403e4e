"""Messages between actors: typed; an RM callback is named by its argument's type, and an argument no
callback takes fails where the message is built."""

from __future__ import annotations

import pytest

from korral import si
from korral.actors.messages import CALLBACK_METHODS, Deliver
from korral.callback import ResourceManagerCallback


def test_deliver_refuses_an_argument_no_rm_callback_takes() -> None:
    with pytest.raises(TypeError, match="no RM callback takes a AllocationRequest"):
        Deliver(argument=si.AllocationRequest())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="no RM callback takes a NoneType"):
        Deliver(argument=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="no RM callback takes a tuple"):
        Deliver(argument=())  # type: ignore[arg-type]


# one argument of the type each callback method takes
ARGUMENTS: dict[str, object] = {
    "update_allocation": si.AllocationResponse(),
    "update_application": si.ApplicationResponse(),
    "update_node": si.NodeResponse(),
    "send_event": [],
    "update_container_scheduling_state": si.UpdateContainerSchedulingStateRequest(
        application_id="app", allocation_key="ask", state=si.SchedulingState.FAILED, reason="full"
    ),
}


def test_every_callback_method_the_core_delivers_exists_on_the_callback_and_its_argument_names_it() -> None:
    assert set(ARGUMENTS) == CALLBACK_METHODS
    for method in CALLBACK_METHODS:
        assert callable(getattr(ResourceManagerCallback, method))
        assert Deliver(argument=ARGUMENTS[method]).method == method  # type: ignore[arg-type]


class Recorder(ResourceManagerCallback):
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def update_allocation(self, response: si.AllocationResponse) -> None:
        self.calls.append(("update_allocation", response))

    def update_application(self, response: si.ApplicationResponse) -> None:
        self.calls.append(("update_application", response))

    def update_node(self, response: si.NodeResponse) -> None:
        self.calls.append(("update_node", response))

    def send_event(self, events: list[si.EventRecord]) -> None:
        self.calls.append(("send_event", events))

    def update_container_scheduling_state(self, request: si.UpdateContainerSchedulingStateRequest) -> None:
        self.calls.append(("update_container_scheduling_state", request))


def test_deliver_calls_the_rm_method_that_takes_its_argument() -> None:
    rm = Recorder()
    for method in sorted(CALLBACK_METHODS):
        Deliver(argument=ARGUMENTS[method]).call(rm)  # type: ignore[arg-type]
    assert rm.calls == [(method, ARGUMENTS[method]) for method in sorted(CALLBACK_METHODS)]
