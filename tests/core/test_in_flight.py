"""What an in-process RM has in flight inside the core is bounded (``korral.actors.in_flight``): past
the bound its ``update_*`` call waits until the core has caught up, and only until then."""

from __future__ import annotations

import threading

import pytest
from core_helpers import MB, SINGLE_LEAF, add_apps, eventually, mem, part, running

import korral
from korral import si
from korral import testing as t
from korral.actors.application import ApplicationActor
from korral.actors.in_flight import MAX_IN_FLIGHT
from korral.actors.messages import AddAsks
from korral.actors.setup import ActorSetup

P = part()
LEAF = "root.singleleaf"
WAIT = 240  # seconds: far beyond taking 50,000 asks in on a loaded machine


def test_one_request_past_the_bound_returns_once_the_core_has_taken_it_in() -> None:
    """A single request carrying more asks than an RM may have in flight: the call returns once the
    core has handled it (no node: every ask stays pending), never waits for good on itself."""
    asks = [
        si.AllocationAsk(
            allocation_key=f"ask-{i}", application_id="app-1", resource_ask={"memory": MB}, max_allocations=1
        )
        for i in range(MAX_IN_FLIGHT + 1)
    ]
    with running(SINGLE_LEAF) as (core, rm):
        add_apps(core, rm, {"app-1": LEAF})
        returned = threading.Event()

        def submit() -> None:
            core.update_allocation(si.AllocationRequest(rm_id="rm", asks=asks))
            returned.set()

        threading.Thread(target=submit, daemon=True).start()
        assert returned.wait(WAIT), "update_allocation still waits for a request the core has handled"
        core.wait_until_idle()
        app = core.application(P, "app-1")
        assert app is not None and mem(app.pending) == (MAX_IN_FLIGHT + 1) * MB


def test_the_max_in_flight_setting_is_the_bound_an_rm_waits_at() -> None:
    """With ``max_in_flight=3``: an RM's two asks held in their application's mailbox leave it under
    the bound; its next ask brings it to the bound, and that ``update_allocation`` waits until the
    core has handled them, and not longer."""
    hold, release = threading.Event(), threading.Event()

    class HeldApplication(ApplicationActor):
        def on_AddAsks(self, message: AddAsks) -> None:
            if hold.is_set():
                hold.clear()
                release.wait(timeout=WAIT)
            super().on_AddAsks(message)

    with running(SINGLE_LEAF, setup=ActorSetup(application_actor=HeldApplication), max_in_flight=3) as (
        core,
        rm,
    ):
        add_apps(core, rm, {"app-1": LEAF})
        hold.set()
        core.update_allocation(t.asks("rm", "app-1", 2, {"memory": MB}))
        eventually(lambda: not hold.is_set())  # its asks are held in the application's mailbox
        _third_ask_waits_until(core, release, "the core had not caught up")


def test_max_in_flight_must_be_a_positive_whole_number() -> None:
    with pytest.raises(ValueError, match="max_in_flight"):
        korral.start(max_in_flight=0)


def test_what_a_burst_produced_counts_in_flight_until_it_is_sent() -> None:
    """An application handles an RM's asks and sends what they produced (their view ops, events, the
    RM's answers) at the end of its burst. Until then the asks still count against the RM's bound: a
    burst under a flood held every request's output since its start (``korral serve`` grew past 1.3 GB
    with one RM streaming 5,000-ask requests), while the RM was let on as if they were done."""
    in_flush, release = threading.Event(), threading.Event()

    class SlowFlush(ApplicationActor):
        def flush_due(self) -> None:
            if not in_flush.is_set():
                in_flush.set()
                release.wait(timeout=WAIT)
            super().flush_due()

    with running(SINGLE_LEAF, setup=ActorSetup(application_actor=SlowFlush), max_in_flight=3) as (core, rm):
        add_apps(core, rm, {"app-1": LEAF})
        core.update_allocation(t.asks("rm", "app-1", 2, {"memory": MB}))
        assert in_flush.wait(WAIT)  # the asks are handled; what they produced is not sent yet
        _third_ask_waits_until(core, release, "its asks' output still waited to be sent")


def _third_ask_waits_until(core: korral.Core, release: threading.Event, held: str) -> None:
    """With two of the RM's asks still in flight and ``max_in_flight=3``, its next ask's call waits
    until ``release`` lets the core go on, then returns; all three asks end pending."""
    returned = threading.Event()

    def submit() -> None:
        core.update_allocation(t.asks("rm", "app-1", 1, {"memory": MB}, prefix="late"))
        returned.set()

    threading.Thread(target=submit, daemon=True).start()
    assert not returned.wait(1.0), f"the RM went on past max_in_flight while {held}"
    release.set()
    assert returned.wait(WAIT), "the RM still waits after the core has caught up"
    core.wait_until_idle()
    app = core.application(P, "app-1")
    assert app is not None and mem(app.pending) == 3 * MB
