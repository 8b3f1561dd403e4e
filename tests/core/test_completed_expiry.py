"""A completed application is kept for queries, then expires as YuniKorn's does (3 days after it
ended): a core that completes applications for months does not keep every one of them."""

from __future__ import annotations

from core_helpers import SMALL, TWO_LEAVES, add_apps, add_nodes, eventually, part, running

from korral import testing as t
from korral.model.completed import TERMINATED_TIMEOUT


def test_a_completed_application_expires_after_yunikorns_terminated_timeout() -> None:
    clock = [1000.0]
    with running(TWO_LEAVES, clock=lambda: clock[0]) as (core, rm):  # type: ignore[arg-type]
        add_nodes(core, rm, ["n1"])
        add_apps(core, rm, {"app-done": "root.a"})
        core.update_allocation(t.asks("rm", "app-done", 1, SMALL))
        assert rm.wait_for_allocations(1)
        (allocation,) = rm.live.values()
        core.update_allocation(t.release("rm", "app-done", uuid=allocation.uuid))
        core.wait_until_idle()
        clock[0] += 1.0  # past the completing timeout: Completed, and it leaves the partition
        core.poke_timers()
        eventually(lambda: [a.application_id for a in core.completed_applications(part())] == ["app-done"])
        assert core.application(part(), "app-done") is not None  # still answered, as YuniKorn does

        clock[0] += TERMINATED_TIMEOUT - 5.0  # not yet
        core.poke_timers()
        core.wait_until_idle()
        assert [a.application_id for a in core.completed_applications(part())] == ["app-done"]

        clock[0] += 5.0  # ended three days ago: the next cleanup pass lets it go
        core.poke_timers()
        eventually(lambda: core.completed_applications(part()) == [])
        assert core.application(part(), "app-done") is None
