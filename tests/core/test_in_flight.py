"""What an in-process RM has in flight inside the core is bounded (``korral.actors.in_flight``): past
the bound its ``update_*`` call waits until the core has caught up, and only until then."""

from __future__ import annotations

import threading

from core_helpers import MB, SINGLE_LEAF, add_apps, mem, part, running

from korral import si
from korral.actors.in_flight import MAX_IN_FLIGHT

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
