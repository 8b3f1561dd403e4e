"""Deterministic regression tests for the races YuniKorn users hit.

Each test forces one interleaving instead of hoping a storm finds it, with two tools:
- ``Hold``: the RM's predicate, which the scheduler calls in the middle of a decision. Armed, it blocks
  the scheduler there until released, so the test can change the world under a decision in flight
  (YuniKorn's predicates call into the shim, so a slow one is an everyday event).
- ``frozen``: a blocker actor on the partition's pool keeps every queue, application and node actor
  of the partition waiting, so messages pile up in their mailboxes in a known order; the test checks
  that they are there (mailbox peeks) before it lets the pool go.

After each: the core is idle and settled, the invariants of test_concurrency hold (books balance, the
RM's view equals the core's, the scheduler's view equals the owners', no handler failed), nothing is
lost (every ask is pending, allocated, released, rejected or withdrawn by the RM) and nothing is
double-booked (no uuid twice, no node above its capacity).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

import korral
from korral import si
from korral import testing as t
from korral.actors.base import PoolActor, Tracker, start_actor
from korral.actors.messages import (
    CompletingTimeout,
    DecommissionNode,
    NodeGone,
    Place,
    RecoverAllocations,
    RemoveApplication,
    RemoveAsks,
)
from korral.actors.runtime import ActorPool

try:  # the shared invariants live with the concurrency tests
    import test_concurrency as shared
except ImportError:  # pragma: no cover - tests imported as a package
    from tests import test_concurrency as shared

check_system = shared.check_system
settle = shared.settle
view_probe = shared.view_probe  # a fixture

RM = "rm"
PARTITION = "[rm]default"
SETTINGS = {
    "completing_timeout": 0.2,
    "queue_cleanup_interval": 0.2,
    "scheduling_interval": 0.02,
    "reservation_delay": 3600.0,
}
CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
          - name: b
            resources: {max: {memory: 4000, vcore: 4000}}
"""
BIG = {"memory": 10000, "vcore": 10000}
SMALL = {"memory": 100, "vcore": 100}


# ---- tools -----------------------------------------------------------------------------------------------


class Hold:
    """The RM's predicate, able to stop the scheduler in the middle of a decision."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._countdown: int | None = None
        self._release = threading.Event()
        self.entered = threading.Event()
        self.closed = False
        self.passed: list[str] = []  # nodes accepted while armed, in order

    def arm(self, let_through: int = 0) -> None:
        """Let ``let_through`` placement checks pass, then block the next one until ``release``."""
        with self._lock:
            self._countdown = let_through
            self.passed = []
        self.entered.clear()
        self._release.clear()

    def release(self) -> None:
        self._release.set()

    def __call__(self, args: si.PredicatesArgs) -> bool:
        block = False
        with self._lock:
            if self._countdown is not None and args.allocate:
                if self._countdown == 0:
                    block, self._countdown = True, None
                else:
                    self._countdown -= 1
                    self.passed.append(args.node_id)
        if block:
            self.entered.set()
            assert self._release.wait(20), "the test never released the scheduler"
        return not self.closed


def partition_actor(core: korral.Core, name: str = PARTITION) -> Any:
    """The partition actor itself (test-only access to its handles and pool)."""
    return core._partition_handles(name)[name].ref._actor_weakref()


def mailbox(handle: Any) -> list[Any]:
    """The messages waiting in an actor's mailbox (a peek from the test thread)."""
    inbox = handle.ref.actor_inbox
    messages = getattr(inbox, "_messages", None)
    if messages is None:
        messages = inbox.queue  # a threading actor's queue.Queue
    for _ in range(100):
        try:
            return [envelope.message for envelope in list(messages)]
        except RuntimeError:  # mutated while copied: look again
            continue
    raise AssertionError("cannot read the mailbox")


def wait_until(condition: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.002)


def has(handle: Any, message_type: type) -> bool:
    return any(isinstance(message, message_type) for message in mailbox(handle))


@attrs.frozen
class Block:
    release: Any
    started: Any


class Blocker(PoolActor):
    def on_Block(self, message: Block) -> None:
        message.started.set()
        message.release.wait(20)


@contextlib.contextmanager
def frozen(core: korral.Core, name: str = PARTITION) -> Iterator[None]:
    """Keep the partition's pooled actors (queues, applications, nodes) from running."""
    pool: ActorPool = partition_actor(core, name).pool
    release, started = threading.Event(), threading.Event()
    blocker = start_actor(Blocker, Tracker(), "blocker", pool=pool)
    blocker.tell(Block(release=release, started=started))
    assert started.wait(10), "the pool did not run the blocker"
    try:
        yield
    finally:
        release.set()
        blocker.stop()


class Run:
    """A core, a recording RM with a Hold predicate, and the ledger of what the RM asked for."""

    def __init__(self, core: korral.Core, config: str = CONFIG) -> None:
        self.core = core
        self.hold = Hold()
        self.rm = t.RecordingRM(RM, predicate=self.hold)
        self.asked: dict[tuple[str, str], int] = {}  # (application, key) -> max allocations
        self.withdrawn: set[tuple[str, str]] = set()
        self.removed_apps: set[str] = set()
        core.register_resource_manager(t.register(RM, config), self.rm)

    def nodes(self, node_ids: list[str], capacity: dict[str, int] = BIG) -> None:
        self.core.update_node(t.nodes(RM, node_ids, capacity))

    def apps(self, apps: dict[str, str]) -> None:
        self.core.update_application(t.applications(RM, apps))

    def asks(
        self, app_id: str, count: int, resource: dict[str, int] = SMALL, prefix: str = "", start: int = 0
    ):
        request = t.asks(RM, app_id, count, resource, prefix=prefix or f"{app_id}-k", start=start)
        for ask in request.asks:
            self.asked[(app_id, ask.allocation_key)] = 1
        return request

    def withdraw(self, app_id: str, key: str) -> si.AllocationRequest:
        self.withdrawn.add((app_id, key))
        return t.release_asks(RM, app_id, key)

    def scheduler(self) -> Any:
        return partition_actor(self.core).scheduler

    def app_handle(self, app_id: str) -> Any:
        return partition_actor(self.core).apps[app_id]

    def node_handle(self, node_id: str) -> Any:
        return partition_actor(self.core).nodes[node_id]

    def proposals(self) -> int:
        stats = self.core.scheduler_stats(PARTITION)
        assert stats is not None
        return stats["proposals"]

    # ---- the checks ------------------------------------------------------------------------------------

    def check(self, probe: Any, **kwargs: Any) -> None:
        settle(self.core)
        check_system(self.core, {RM: self.rm}, probe, **kwargs)
        self.check_ledger()

    def check_ledger(self) -> None:
        """Nothing lost: every ask the RM made is pending, allocated, released, rejected or withdrawn,
        and none was allocated more often than it asked for."""
        core, rm = self.core, self.rm
        infos = {info.application_id: info for info in core.applications(PARTITION)}
        pending = {(app_id, key) for app_id, info in infos.items() for key in info.pending_asks}
        with rm.lock:
            live = [(a.application_id, a.allocation_key) for a in rm.live.values()]
            released = [(r.application_id, r.allocation_key) for r in rm.released]
            rejected = {(r.application_id, r.allocation_key) for r in rm.rejected_asks}
            total = rm.allocated_total
            live_count = len(rm.live)
        assert total == live_count + len(released), "every allocation the RM got is live or released once"
        assert len(set(live)) == len(live), "two live allocations for one ask"
        allocated_ever: dict[tuple[str, str], int] = {}
        for key in live + released:
            allocated_ever[key] = allocated_ever.get(key, 0) + 1
        for key, maximum in self.asked.items():
            app_id = key[0]
            assert allocated_ever.get(key, 0) <= maximum, f"{key} allocated {allocated_ever[key]} times"
            assert not (key in pending and key in live), f"{key} both pending and allocated"
            gone = app_id in self.removed_apps or app_id not in infos
            accounted = (
                key in pending or key in allocated_ever or key in rejected or key in self.withdrawn or gone
            )
            assert accounted, f"ask {key} was lost: not pending, allocated, released, rejected or withdrawn"
            if key in pending:
                assert key not in self.withdrawn, f"{key} withdrawn by the RM but still pending"
                assert app_id not in self.removed_apps


@pytest.fixture
def run(request) -> Iterator[Run]:
    settings = {**SETTINGS, **getattr(request, "param", {})}
    with korral.start(**settings) as core:
        yield Run(core)


# ---- ask removed while its allocation is being made --------------------------------------------------------


def test_ask_and_its_release_in_one_request(run: Run, view_probe) -> None:
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    ask = run.asks("app", 1).asks[0]
    release = run.withdraw("app", ask.allocation_key)
    run.core.update_allocation(si.AllocationRequest(rm_id=RM, asks=[ask], releases=release.releases))
    run.core.update_allocation(run.asks("app", 3, start=1))
    run.core.wait_until_idle()
    live_keys = {a.allocation_key for a in run.rm.live.values()}
    assert ask.allocation_key not in live_keys, "an ask released in the same request was allocated"
    assert live_keys == {"app-k1", "app-k2", "app-k3"}
    run.check(view_probe)


def test_ask_then_release_in_consecutive_requests_without_waiting(run: Run, view_probe) -> None:
    run.nodes(["n1", "n2"])
    run.apps({"app": "root.a", "other": "root.b"})
    for index in range(60):
        run.core.update_allocation(run.asks("app", 1, start=index))
        if index % 3 != 2:
            run.core.update_allocation(run.withdraw("app", f"app-k{index}"))
        run.core.update_allocation(run.asks("other", 1, start=index))
    run.core.wait_until_idle()
    info = run.core.application(PARTITION, "app")
    assert info is not None
    kept = {f"app-k{i}" for i in range(60) if i % 3 == 2}
    allocated = {a.allocation_key for a in info.allocations}
    assert kept <= allocated, "asks that were never withdrawn must be allocated"
    assert not info.pending_asks, "a withdrawn ask came back"
    run.check(view_probe)


def test_ask_withdrawn_while_its_placement_is_in_flight(run: Run, view_probe) -> None:
    """The scheduler has proposed, the node holds the Place, the RM withdraws the ask: the node's
    booking is undone, the view rolls back, and the RM never hears of an allocation."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    run.hold.closed = True  # the scheduler sees the ask but cannot place it yet
    run.core.update_allocation(run.asks("app", 1))
    run.core.wait_until_idle()
    before = run.proposals()
    with frozen(run.core):
        run.hold.closed = False  # the next tick places it: a Place waits at the frozen node
        wait_until(lambda: has(run.node_handle("n1"), Place), "the Place at the node")
        assert run.proposals() == before + 1
        run.core.update_allocation(run.withdraw("app", "app-k0"))
        wait_until(lambda: has(run.app_handle("app"), RemoveAsks), "the withdrawal at the application")
    run.core.wait_until_idle()
    assert not run.rm.live and run.rm.allocated_total == 0, "a withdrawn ask was allocated"
    stats = run.core.scheduler_stats(PARTITION)
    assert stats is not None and stats["rollbacks"] == 1
    node = run.core.node(PARTITION, "n1")
    assert node is not None and not node.allocations and node.allocated == {}
    # the application goes on normally
    run.core.update_allocation(run.asks("app", 2, start=1))
    run.core.wait_until_idle()
    assert len(run.rm.live) == 2
    run.check(view_probe)


def test_ask_withdrawn_just_after_its_placement_was_confirmed(run: Run, view_probe) -> None:
    """The other order: the application confirms first; the allocation stays, the ask is gone."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    run.hold.closed = True
    run.core.update_allocation(run.asks("app", 1))
    run.core.wait_until_idle()
    with frozen(run.core):
        run.hold.closed = False
        wait_until(lambda: has(run.node_handle("n1"), Place), "the Place at the node")
    # the node books and the application confirms, then the withdrawal arrives
    run.core.wait_until_idle()
    run.core.update_allocation(run.withdraw("app", "app-k0"))
    run.core.wait_until_idle()
    assert len(run.rm.live) == 1
    info = run.core.application(PARTITION, "app")
    assert info is not None and len(info.allocations) == 1 and not info.pending_asks
    run.check(view_probe)


def test_ask_replaced_while_its_placement_is_in_flight(run: Run, view_probe) -> None:
    """The RM sends the same key again (new resources) while the old ask's Place waits at the node:
    the old placement is refused as stale, and the new ask is placed once, with its own size."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    run.hold.closed = True
    run.core.update_allocation(run.asks("app", 1))
    run.core.wait_until_idle()
    with frozen(run.core):
        run.hold.closed = False
        wait_until(lambda: has(run.node_handle("n1"), Place), "the Place at the node")
        run.core.update_allocation(run.asks("app", 1, {"memory": 200, "vcore": 200}))
        wait_until(lambda: len(mailbox(run.app_handle("app"))) >= 1, "the new ask at the application")
    run.core.wait_until_idle()
    info = run.core.application(PARTITION, "app")
    assert info is not None
    assert [(a.allocation_key, a.resource) for a in info.allocations] == [
        ("app-k0", {"memory": 200, "vcore": 200})
    ], "the stale placement of the replaced ask was kept"
    assert [a.resource_per_alloc for a in run.rm.live.values()] == [{"memory": 200, "vcore": 200}]
    assert run.rm.allocated_total == 1
    run.check(view_probe)


# ---- node decommissioned while allocations are placed on it ------------------------------------------------


def test_node_decommissioned_with_placements_waiting_at_it(run: Run, view_probe) -> None:
    """Place reaches the node before the decommission: booked, confirmed, then released with the node."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    run.hold.closed = True
    run.core.update_allocation(run.asks("app", 5))
    run.core.wait_until_idle()
    with frozen(run.core):
        run.hold.closed = False
        wait_until(lambda: has(run.node_handle("n1"), Place), "the Place at the node")
        node = run.node_handle("n1")
        run.core.update_node(t.node_action(RM, "n1", si.NodeAction.DECOMISSION))
        wait_until(lambda: has(node, DecommissionNode), "the decommission at the node")
    run.core.wait_until_idle()
    assert run.core.node(PARTITION, "n1") is None
    assert not run.rm.live, "allocations on a decommissioned node live on"
    released = {r.allocation_key for r in run.rm.released}
    assert released == {f"app-k{i}" for i in range(5)}
    assert all(r.termination_type == si.TerminationType.STOPPED_BY_RM for r in run.rm.released)
    assert run.core.queue(PARTITION, "root.a").allocated == {}
    run.check(view_probe)


def test_node_decommissioned_during_a_decision_gives_the_asks_back(run: Run, view_probe) -> None:
    """The scheduler decides on n1 while n1 is removed: the node refuses the Place after the view has
    already dropped the node. The asks must come back and go to n2, not be lost in the view."""
    run.core.update_node(t.nodes(RM, ["n1"], BIG))
    run.core.update_node(t.nodes(RM, ["n2"], BIG))
    run.apps({"app": "root.a"})
    run.core.wait_until_idle()
    run.hold.arm(let_through=1)  # the first placement passes, the second check blocks the scheduler
    run.core.update_allocation(run.asks("app", 2))
    assert run.hold.entered.wait(10), "the scheduler never asked the predicate"
    first = run.hold.passed[0]
    node = run.node_handle(first)
    run.core.update_node(t.node_action(RM, first, si.NodeAction.DECOMISSION))
    wait_until(lambda: node.ref._actor_weakref().removed, "the node actor to leave")
    wait_until(lambda: has(run.scheduler(), NodeGone), "the NodeGone queued at the scheduler")
    run.hold.release()
    run.core.wait_until_idle()
    other = "n2" if first == "n1" else "n1"
    info = run.core.application(PARTITION, "app")
    assert info is not None
    assert not info.pending_asks, f"asks lost after their node left mid-decision: {info.pending_asks}"
    assert sorted(a.node_id for a in info.allocations) == [other, other]
    run.check(view_probe)


def test_recovered_allocation_on_a_node_removed_before_it_was_booked(run: Run, view_probe) -> None:
    """A node comes with an existing allocation and leaves at once: the decommission reaches the node
    before the application's BookRecovered. The allocation must not outlive its node."""
    run.apps({"app": "root.b"})
    run.core.wait_until_idle()
    existing = si.Allocation(
        allocation_key="running",
        uuid="rec-1",
        application_id="app",
        node_id="n1",
        resource_per_alloc={"memory": 500, "vcore": 500},
    )
    run.asked[("app", "running")] = 1
    with frozen(run.core):
        run.core.update_node(t.nodes(RM, ["n1"], BIG, existing=[existing]))
        wait_until(lambda: has(run.app_handle("app"), RecoverAllocations), "the recovery at the app")
        node = run.node_handle("n1")
        run.core.update_node(t.node_action(RM, "n1", si.NodeAction.DECOMISSION))
        wait_until(lambda: has(node, DecommissionNode), "the decommission at the node")
    run.core.wait_until_idle()
    assert run.core.node(PARTITION, "n1") is None
    info = run.core.application(PARTITION, "app")
    assert info is None or not info.allocations, "a recovered allocation outlived its node"
    assert "rec-1" not in run.rm.live
    assert run.core.queue(PARTITION, "root.b").allocated == {}
    run.check(view_probe)


def test_recovered_allocation_for_an_application_completing_at_that_moment(run: Run, view_probe) -> None:
    """The application's completing timeout is handled just before a recovery for it arrives (the
    partition has not yet heard that it completed): the recovery is refused, not booked on the node."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    run.core.update_allocation(run.asks("app", 1))
    run.core.wait_until_idle()
    run.core.update_allocation(t.release(RM, "app"))  # -> Completing, the 0.2 s timer starts
    run.core.wait_until_idle()
    assert run.core.application(PARTITION, "app").state == "Completing"
    existing = si.Allocation(
        allocation_key="running",
        uuid="rec-1",
        application_id="app",
        node_id="n2",
        resource_per_alloc={"memory": 500, "vcore": 500},
    )
    run.asked[("app", "running")] = 1
    app = run.app_handle("app")
    with frozen(run.core):
        wait_until(lambda: has(app, CompletingTimeout), "the completing timeout at the application")
        run.core.update_node(t.nodes(RM, ["n2"], BIG, existing=[existing]))
        wait_until(lambda: has(app, RecoverAllocations), "the recovery at the application")
    run.core.wait_until_idle()
    info = run.core.application(PARTITION, "app")
    assert info is not None and info.state == "Completed"
    assert "rec-1" not in run.rm.live, "recovered onto a completed application"
    assert [r.allocation_key for r in run.rm.rejected_asks] == ["running"]
    node = run.core.node(PARTITION, "n2")
    assert node is not None and node.allocations == [], "the node books an allocation nobody owns"
    run.check(view_probe)


def test_node_with_existing_allocations_gets_nothing_before_they_are_booked(run: Run, view_probe) -> None:
    """A node registers full of allocations the RM already runs while asks wait. YuniKorn adds the node
    and its existing allocations in one step, so nothing new goes there. Here the scheduler must not
    see the node empty: a Place decided before the recovered allocations are booked would double-book
    the node (recovered allocations are booked whatever the room)."""
    run.apps({"old": "root.a", "new": "root.a"})
    run.core.update_allocation(run.asks("new", 5))  # waiting: no node yet
    run.core.wait_until_idle()
    existing = [
        si.Allocation(
            allocation_key=f"running-{index}",
            uuid=f"rec-{index}",
            application_id="old",
            node_id="n1",
            resource_per_alloc={"memory": 5000, "vcore": 5000},
        )
        for index in range(2)
    ]
    for allocation in existing:
        run.asked[("old", allocation.allocation_key)] = 1
    with frozen(run.core):
        run.core.update_node(t.nodes(RM, ["n1"], BIG, existing=existing))  # exactly full
        wait_until(lambda: has(run.app_handle("old"), RecoverAllocations), "the recovery at the app")
        node = run.node_handle("n1")
        # give the scheduler the chance to decide on the node while the recovery waits
        with contextlib.suppress(AssertionError):
            wait_until(lambda: has(node, Place), "a Place at the node", timeout=1.0)
    run.core.wait_until_idle()
    info = run.core.node(PARTITION, "n1")
    assert info is not None
    assert sorted(a.uuid for a in info.allocations) == ["rec-0", "rec-1"], (
        f"placed on a node whose existing allocations fill it: {[a.allocation_key for a in info.allocations]}"
    )
    assert sorted(run.core.application(PARTITION, "new").pending_asks) == [f"new-k{i}" for i in range(5)]
    run.check(view_probe)


# ---- application removed while being scheduled -----------------------------------------------------------


def test_application_removed_during_a_decision(run: Run, view_probe) -> None:
    run.nodes(["n1"])
    run.apps({"app": "root.a", "other": "root.a"})
    run.core.wait_until_idle()
    run.hold.arm(let_through=2)
    run.core.update_allocation(run.asks("app", 5))
    assert run.hold.entered.wait(10)
    app = run.app_handle("app")
    run.removed_apps.add("app")
    run.core.update_application(t.remove_applications(RM, ["app"]))
    wait_until(lambda: app.ref._actor_weakref().owner.removed, "the application to be removed")
    run.hold.release()
    run.core.wait_until_idle()
    assert run.core.application(PARTITION, "app") is None
    assert not [a for a in run.rm.live.values() if a.application_id == "app"]
    node = run.core.node(PARTITION, "n1")
    assert node is not None and node.allocations == []
    # proposals for the removed application were refused and undone, the node has its room back
    run.core.update_allocation(run.asks("other", 3))
    run.core.wait_until_idle()
    assert len(run.rm.live) == 3
    run.check(view_probe)


def test_application_removed_with_placements_waiting_at_the_node(run: Run, view_probe) -> None:
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    run.hold.closed = True
    run.core.update_allocation(run.asks("app", 4))
    run.core.wait_until_idle()
    with frozen(run.core):
        run.hold.closed = False
        wait_until(lambda: has(run.node_handle("n1"), Place), "the Place at the node")
        app = run.app_handle("app")
        run.removed_apps.add("app")
        run.core.update_application(t.remove_applications(RM, ["app"]))
        wait_until(lambda: has(app, RemoveApplication), "the removal at the application")
    run.core.wait_until_idle()
    assert run.core.application(PARTITION, "app") is None
    assert not run.rm.live
    node = run.core.node(PARTITION, "n1")
    assert node is not None and node.allocations == [] and node.allocated == {}
    run.check(view_probe)


def test_application_removed_before_its_placements_are_booked(run: Run, view_probe) -> None:
    """The removal waits at the application while the scheduler, not told yet, proposes for it."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    run.hold.closed = True
    run.core.update_allocation(run.asks("app", 4))
    run.core.wait_until_idle()
    app = run.app_handle("app")
    with frozen(run.core):
        run.removed_apps.add("app")
        run.core.update_application(t.remove_applications(RM, ["app"]))
        wait_until(lambda: has(app, RemoveApplication), "the removal at the application")
        run.hold.closed = False  # the scheduler has not heard of the removal yet: it proposes
        wait_until(lambda: has(run.node_handle("n1"), Place), "the Place at the node")
    run.core.wait_until_idle()
    assert not run.rm.live and run.rm.allocated_total == 0
    node = run.core.node(PARTITION, "n1")
    assert node is not None and node.allocations == []
    run.check(view_probe)


# ---- queue removed by a config reload while applications run in it ----------------------------------------


WITHOUT_B = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
"""


def test_queue_removed_by_reload_while_applications_run(run: Run, view_probe) -> None:
    run.nodes(["n1"], {"memory": 1000, "vcore": 1000})
    run.apps({"app": "root.b", "keep": "root.a"})
    run.core.update_allocation(run.asks("keep", 1))
    run.core.wait_until_idle()
    run.core.update_allocation(run.asks("app", 15))  # more than the node holds
    run.core.wait_until_idle()
    assert len(run.rm.live) == 10
    # reload without root.b while its application runs and waits for more
    run.core.update_configuration(si.UpdateConfigurationRequest(rm_id=RM, config=WITHOUT_B))
    run.core.wait_until_idle()
    queue = run.core.queue(PARTITION, "root.b")
    assert queue is not None and queue.state == "Draining"
    assert queue.allocated == {"memory": 900, "vcore": 900}
    # no new applications in a draining queue; the running one goes on
    run.core.update_application(t.applications(RM, {"late": "root.b"}))
    run.core.wait_until_idle()
    assert "late" in run.rm.rejected_apps
    run.check(view_probe)
    # it finishes: allocations released, asks withdrawn -> completed -> the queue goes away
    run.core.update_allocation(t.release(RM, "app", allocation_key="app-k0"))
    run.core.wait_until_idle()
    info = run.core.application(PARTITION, "app")
    assert info is not None and len(info.allocations) == 9, "the draining queue's app still gets room"
    for key in list(info.pending_asks):
        run.core.update_allocation(run.withdraw("app", key))
    run.core.update_allocation(t.release(RM, "app"))
    wait_until(lambda: run.core.queue(PARTITION, "root.b") is None, "the drained queue to go", 10)
    run.check(view_probe)
    assert run.core.application(PARTITION, "app").state == "Completed"
    # the queue comes back with the next reload, and works
    run.core.update_configuration(si.UpdateConfigurationRequest(rm_id=RM, config=CONFIG))
    run.apps({"again": "root.b"})
    run.core.update_allocation(run.asks("again", 2))
    run.core.wait_until_idle()
    assert len(run.core.application(PARTITION, "again").allocations) == 2
    run.check(view_probe)


def test_queue_removed_and_restored_while_asks_are_in_flight(run: Run, view_probe) -> None:
    run.nodes(["n1"])
    run.apps({"app": "root.b"})
    run.core.wait_until_idle()
    for index in range(20):
        run.core.update_allocation(run.asks("app", 1, start=index))
        if index == 5:
            run.core.update_configuration(si.UpdateConfigurationRequest(rm_id=RM, config=WITHOUT_B))
        if index == 12:
            run.core.update_configuration(si.UpdateConfigurationRequest(rm_id=RM, config=CONFIG))
    run.core.wait_until_idle()
    queue = run.core.queue(PARTITION, "root.b")
    assert queue is not None and queue.state == "Active"
    assert len(run.rm.live) == 20
    run.check(view_probe)


# ---- RM re-registered mid-stream ---------------------------------------------------------------------------


def test_rm_reregistered_with_requests_in_flight(view_probe) -> None:
    with korral.start(**SETTINGS) as core:
        old = t.RecordingRM(RM)
        core.register_resource_manager(t.register(RM, CONFIG), old)
        core.update_node(t.nodes(RM, [f"n{i}" for i in range(5)], BIG))
        core.update_application(t.applications(RM, {f"app{i}": "root.a" for i in range(5)}))
        for i in range(5):
            core.update_allocation(t.asks(RM, f"app{i}", 50, SMALL))
        # no waiting: the registration comes in behind the requests, mid-stream
        new = t.RecordingRM(RM)
        core.register_resource_manager(t.register(RM, CONFIG), new)
        core.update_node(t.nodes(RM, ["m1"], BIG))
        core.update_application(t.applications(RM, {"fresh": "root.a"}))
        core.update_allocation(t.asks(RM, "fresh", 5, SMALL))
        core.wait_until_idle()
        nodes = core.nodes(PARTITION)
        assert [n.node_id for n in nodes] == ["m1"], "the old registration's nodes survived"
        apps = core.applications(PARTITION)
        assert [a.application_id for a in apps] == ["fresh"]
        assert len(apps[0].allocations) == 5
        with new.lock:
            assert {a.application_id for a in new.live.values()} == {"fresh"}, "old allocations leaked"
            assert not new.rejected_asks and not new.rejected_apps
        settle(core)
        check_system(core, {RM: new}, view_probe)
        # no message count leaked for the stopped registration's actors: the core can still go idle
        # (in_flight() itself may read 1 at any instant: timer ticks are counted messages too)
        core.wait_until_idle(timeout=10)
        assert len([p for p in core.partitions() if p.rm_id == RM]) == 1


def test_rm_reregistered_while_the_scheduler_is_mid_decision(view_probe) -> None:
    with korral.start(**SETTINGS) as core:
        hold = Hold()
        old = t.RecordingRM(RM, predicate=hold)
        core.register_resource_manager(t.register(RM, CONFIG), old)
        core.update_node(t.nodes(RM, ["n1"], BIG))
        core.update_application(t.applications(RM, {"app": "root.a"}))
        core.wait_until_idle()
        hold.arm(let_through=1)
        core.update_allocation(t.asks(RM, "app", 5, SMALL))
        assert hold.entered.wait(10)
        new = t.RecordingRM(RM)
        registered = threading.Thread(
            target=core.register_resource_manager, args=(t.register(RM, CONFIG), new), daemon=True
        )
        registered.start()
        registered.join(0.5)  # it may wait for the old partition to stop; it must not hang for good
        hold.release()
        registered.join(20)
        assert not registered.is_alive(), "re-registration hung behind a decision in flight"
        core.update_node(t.nodes(RM, ["n1"], BIG))
        core.update_application(t.applications(RM, {"app": "root.a"}))
        core.update_allocation(t.asks(RM, "app", 2, SMALL))
        core.wait_until_idle()
        settle(core)
        check_system(core, {RM: new}, view_probe)
        assert len(new.live) == 2


# ---- release racing the completing timeout -----------------------------------------------------------------


@pytest.mark.parametrize("run", [{"completing_timeout": 0.01}], indirect=True)
def test_release_then_new_ask_racing_the_completing_timeout(run: Run, view_probe) -> None:
    run.nodes(["n1"])
    outcomes = {"allocated": 0, "rejected": 0}
    for round_ in range(24):
        app_id = f"app{round_}"
        run.apps({app_id: "root.a"})
        run.core.update_allocation(run.asks(app_id, 1))
        run.core.wait_until_idle()
        assert len(run.core.application(PARTITION, app_id).allocations) == 1
        run.core.update_allocation(t.release(RM, app_id))  # -> Completing, the timer starts
        time.sleep((round_ % 8) * 0.003)  # before, around and after the 10 ms timeout
        run.core.update_allocation(run.asks(app_id, 1, start=1))
        run.core.wait_until_idle()
        info = run.core.application(PARTITION, app_id)
        key = (app_id, f"{app_id}-k1")
        with run.rm.lock:
            live = {(a.application_id, a.allocation_key) for a in run.rm.live.values()}
            rejected = {(r.application_id, r.allocation_key) for r in run.rm.rejected_asks}
        if key in live:
            outcomes["allocated"] += 1
            assert info is not None and info.state == "Running"
        else:
            assert key in rejected, f"round {round_}: the new ask was neither allocated nor rejected"
            outcomes["rejected"] += 1
            assert info is not None and info.state == "Completed"
            assert not info.allocations
    assert outcomes["allocated"] > 0, outcomes
    run.check(view_probe)
    # a completed application's id can be used again
    completed = [
        a for a in (f"app{i}" for i in range(24)) if run.core.application(PARTITION, a).state == "Completed"
    ]
    if completed:
        again = completed[0]
        run.apps({again: "root.a"})
        run.core.update_allocation(run.asks(again, 1, start=5))
        run.core.wait_until_idle()
        info = run.core.application(PARTITION, again)
        assert info is not None and info.state in ("Starting", "Running") and len(info.allocations) == 1
        run.check(view_probe)


@pytest.mark.parametrize("run", [{"completing_timeout": 0.0}], indirect=True)
def test_release_and_ask_in_one_request_with_an_instant_completing_timeout(run: Run, view_probe) -> None:
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    run.core.update_allocation(run.asks("app", 1))
    run.core.wait_until_idle()
    for index in range(1, 30):
        release = t.release(RM, "app")
        ask = run.asks("app", 1, start=index).asks[0]
        # release everything and ask again, in one request: the ask comes first, so the application
        # never has nothing left and must not complete under the new ask
        run.core.update_allocation(si.AllocationRequest(rm_id=RM, asks=[ask], releases=release.releases))
        run.core.wait_until_idle()
        info = run.core.application(PARTITION, "app")
        assert info is not None and info.state == "Running", f"round {index}: {info and info.state}"
        assert [a.allocation_key for a in info.allocations] == [f"app-k{index}"]
    run.check(view_probe)


# ---- a node fills up under a decision ----------------------------------------------------------------------


def test_node_fills_up_under_a_decision(run: Run, view_probe) -> None:
    """The node's room shrinks (occupied by someone else) after the scheduler looked at it and before
    the Place arrives: the node books what still fits, refuses the rest, and the view rolls those back
    so that they go elsewhere once there is room."""
    run.nodes(["n1"], {"memory": 1000, "vcore": 1000})
    run.apps({"app": "root.a"})
    run.core.wait_until_idle()
    run.hold.arm(let_through=2)
    run.core.update_allocation(run.asks("app", 4, {"memory": 250, "vcore": 250}))
    assert run.hold.entered.wait(10)
    node = run.node_handle("n1")
    run.core.update_node(t.node_action(RM, "n1", si.NodeAction.UPDATE, occupied_resource={"memory": 600}))
    wait_until(lambda: node.ref._actor_weakref().node.occupied == {"memory": 600}, "the node's update")
    run.hold.release()
    run.core.wait_until_idle()
    stats = run.core.scheduler_stats(PARTITION)
    assert stats is not None and stats["rollbacks"] == 3, stats
    info = run.core.node(PARTITION, "n1")
    assert info is not None and len(info.allocations) == 1
    assert run.core.application(PARTITION, "app").pending_asks != []
    run.check(view_probe)
    run.core.update_node(t.nodes(RM, ["n2"], {"memory": 1000, "vcore": 1000}))
    run.core.wait_until_idle()
    assert len(run.rm.live) == 4
    assert sorted(a.node_id for a in run.rm.live.values()) == ["n1", "n2", "n2", "n2"]
    run.check(view_probe)
