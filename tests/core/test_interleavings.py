"""Regression tests for the races YuniKorn users hit, each pinned to one interleaving on the simulated
runtime (``korral.start(runtime="simulated")``): no threads, no sleeps, no peeking into pykka.

Each test names the order of messages it pins and gets it in one of two ways:
- a scripted schedule (``Script``): deliveries to some actors are held back while the rest of the core
  runs, so messages pile up in those mailboxes in a known order (``Run.queued`` shows them), then let go;
- a decision in flight (``Run.during_decision``): the RM's predicate, which the scheduler calls in the
  middle of a decision, changes the world there (SI calls, and the rest of the core running while the
  scheduler is still inside its handler, as a slow predicate lets it run on threads).
Every test also runs under several seeds: whatever the script leaves free is interleaved by the seed.

After each: the core is idle and settled, the invariants of test_concurrency hold (books balance, the
RM's view equals the core's, the scheduler's view equals the owners', no handler failed), nothing is
lost (every ask is pending, allocated, released, rejected or withdrawn by the RM) and nothing is
double-booked (no uuid twice, no node above its capacity).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

import korral
from korral import si
from korral import testing as t
from korral.actors.base import Rank
from korral.actors.messages import (
    AddAsks,
    CompletingTimeout,
    NodeGone,
    NodeRemoved,
    Placed,
    RecoverAllocations,
    ReleaseAllocations,
    RemoveApplication,
    RemoveAsks,
    UpdateNode,
)
from korral.actors.simulated import HOLD, Pending

try:  # the shared invariants live with the concurrency tests
    import test_concurrency as shared
except ImportError:  # pragma: no cover - tests imported as a package
    from tests import test_concurrency as shared

check_system = shared.check_system

RM = "rm"
PARTITION = "[rm]default"
SEEDS = [0, 1, 2]
SETTINGS = {
    "completing_timeout": 0.2,
    "queue_cleanup_interval": 0.2,
    "scheduling_interval": 0.02,
    "reservation_delay": 3600.0,
}
TICK = SETTINGS["scheduling_interval"]
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


def pooled(pending: Pending) -> bool:
    """A delivery to one of the partition's pooled actors (queues, applications, nodes)."""
    return pending.actor.startswith(PARTITION + "/") and not pending.actor.endswith("/scheduler")


def to(actor: str) -> Callable[[Pending], bool]:
    """Deliveries to one actor, named by what follows the partition: ``node/n1``, ``app/x``."""
    name = f"{PARTITION}/{actor}"
    return lambda pending: pending.actor == name


class Script:
    """A scripted schedule: deliveries matching a held rule wait; the seed interleaves the rest."""

    def __init__(self, seed: int) -> None:
        import random

        self.rng = random.Random(seed)
        self.rules: list[Callable[[Pending], bool]] = []

    @contextlib.contextmanager
    def holding(self, rule: Callable[[Pending], bool]) -> Iterator[None]:
        self.rules.append(rule)
        try:
            yield
        finally:
            self.rules.remove(rule)

    def __call__(self, ready: Sequence[Pending]) -> int | None:
        if not self.rules:
            return None
        free = [index for index, pending in enumerate(ready) if not any(rule(pending) for rule in self.rules)]
        return free[self.rng.randrange(len(free))] if free else HOLD


class Run:
    """A simulated core, a recording RM whose predicate can act mid-decision, and the RM's ledger."""

    def __init__(self, seed: int, settings: dict[str, float] | None = None, config: str = CONFIG) -> None:
        self.seed = seed
        self.core = korral.start(runtime="simulated", seed=seed, **{**SETTINGS, **(settings or {})})
        simulation = self.core.simulation
        assert simulation is not None
        self.simulation = simulation
        self.script = Script(seed)
        simulation.chooser = self.script
        self.delivered: list[tuple[str, type]] = []
        traced = simulation.on_deliver

        def record(actor: str, message: Any) -> None:
            self.delivered.append((actor, type(message)))
            if traced is not None:
                traced(actor, message)

        simulation.on_deliver = record
        self.closed = False  # the predicate refuses every node
        self._decision: tuple[int, Callable[[si.PredicatesArgs], None]] | None = None
        self.passed: list[str] = []  # nodes the predicate accepted while a decision hook was armed
        self.acted: bool | BaseException = False  # the decision hook ran (or what it raised)
        self.rm = t.RecordingRM(RM, predicate=self._predicate)
        self.asked: dict[tuple[str, str], int] = {}  # (application, key) -> max allocations
        self.withdrawn: set[tuple[str, str]] = set()
        self.removed_apps: set[str] = set()
        self.core.register_resource_manager(t.register(RM, config), self.rm)

    # ---- driving ---------------------------------------------------------------------------------------

    def _predicate(self, args: si.PredicatesArgs) -> bool:
        if self._decision is not None and args.allocate:
            let_through, action = self._decision
            if let_through == 0:
                self._decision = None
                try:
                    action(args)
                except BaseException as error:  # the scheduler would contain it: keep it for the test
                    self.acted = error
                else:
                    self.acted = True
            else:
                self._decision = (let_through - 1, action)
                self.passed.append(args.node_id)
        return not self.closed

    def during_decision(self, action: Callable[[si.PredicatesArgs], None], let_through: int = 0) -> None:
        """Let ``let_through`` placement checks pass, then run ``action`` inside the next one: the
        scheduler is in the middle of its handler, the rest of the core may run (``run_others``)."""
        self._decision = (let_through, action)

    def run_others(self) -> None:
        """Inside a decision: run every other actor to quiescence (the scheduler is not eligible)."""
        self.simulation.run_until_idle()

    def idle(self) -> None:
        self.core.wait_until_idle()

    def tick(self) -> None:
        """One scheduling interval of virtual time."""
        self.core.advance(TICK)

    def queued(self, rule: Callable[[Pending], bool], message_type: type) -> bool:
        return any(rule(p) and isinstance(p.message, message_type) for p in self.simulation.queued())

    def was_delivered(self, actor: str, message_type: type) -> bool:
        return (f"{PARTITION}/{actor}", message_type) in self.delivered

    # ---- requests --------------------------------------------------------------------------------------

    def nodes(self, node_ids: list[str], capacity: dict[str, int] = BIG) -> None:
        self.core.update_node(t.nodes(RM, node_ids, capacity))

    def apps(self, apps: dict[str, str]) -> None:
        self.core.update_application(t.applications(RM, apps))

    def remove_app(self, app_id: str) -> None:
        self.removed_apps.add(app_id)
        self.core.update_application(t.remove_applications(RM, [app_id]))

    def asks(
        self, app_id: str, count: int, resource: dict[str, int] = SMALL, prefix: str = "", start: int = 0
    ) -> si.AllocationRequest:
        request = t.asks(RM, app_id, count, resource, prefix=prefix or f"{app_id}-k", start=start)
        for ask in request.asks:
            self.asked[(app_id, ask.allocation_key)] = 1
        return request

    def withdraw(self, app_id: str, key: str) -> si.AllocationRequest:
        self.withdrawn.add((app_id, key))
        return t.release_asks(RM, app_id, key)

    def proposals(self) -> int:
        stats = self.core.scheduler_stats(PARTITION)
        assert stats is not None
        return stats["proposals"]

    def rollbacks(self) -> int:
        stats = self.core.scheduler_stats(PARTITION)
        assert stats is not None
        return stats["rollbacks"]

    # ---- the checks ------------------------------------------------------------------------------------

    def probe(self, core: korral.Core, partition: str) -> dict[str, Any]:
        """The scheduler's view of the partition (the test-only ViewProbe of test_concurrency)."""
        scheduler = self.simulation.actors[f"{partition}/scheduler"]
        view = scheduler.handle.ask(shared.ViewProbe(), caller=Rank.OUTSIDE, timeout=10.0)
        assert view["name"] == partition
        return view

    def settle(self, rounds: int = 20) -> None:
        """Idle, and nothing left for the timers to do (completing timeouts, queue cleanup): virtual
        half-seconds pass until two looks agree and no application is still Completing."""
        self.idle()
        before = shared._fingerprint(self.core)
        for _ in range(rounds):
            self.core.advance(0.5)
            after = shared._fingerprint(self.core)
            completing = any(app.state == "Completing" for app in self.core.applications(PARTITION))
            if after == before and not completing:
                return
            before = after
        raise AssertionError("the core does not settle: timers keep changing its state")

    def check(self, **kwargs: Any) -> None:
        self.settle()
        check_system(self.core, {RM: self.rm}, self.probe, **kwargs)
        self.check_ledger()

    def check_ledger(self) -> None:
        """Nothing lost: every ask the RM made is pending, allocated, released, rejected or withdrawn,
        and none was allocated more often than it asked for."""
        core, rm = self.core, self.rm
        infos = {info.application_id: info for info in core.applications(PARTITION)}
        pending = {(app_id, key) for app_id, info in infos.items() for key in info.pending_asks}
        live = [(a.application_id, a.allocation_key) for a in rm.live.values()]
        released = [(r.application_id, r.allocation_key) for r in rm.released]
        rejected = {(r.application_id, r.allocation_key) for r in rm.rejected_asks}
        assert rm.allocated_total == len(rm.live) + len(released), "an allocation neither live nor released"
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


@pytest.fixture(autouse=True)
def _view_probe_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    shared.add_view_probe(monkeypatch)


@contextlib.contextmanager
def running(seed: int, settings: dict[str, float] | None = None) -> Iterator[Run]:
    simulated = Run(seed, settings)
    try:
        yield simulated
    finally:
        simulated.core.stop()


@pytest.fixture(params=SEEDS, ids=lambda seed: f"seed{seed}")
def seed(request: pytest.FixtureRequest) -> int:
    return request.param


@pytest.fixture
def run(seed: int) -> Iterator[Run]:
    with running(seed) as simulated:
        yield simulated


def place_held_at(run: Run, node: str, app_id: str, count: int) -> None:
    """Asks the scheduler sees but cannot place (the predicate refuses), then one tick with the
    predicate open while the pooled actors are held: the Placed waits in the application's mailbox."""
    run.closed = True
    run.core.update_allocation(run.asks(app_id, count))
    run.idle()
    run.closed = False


# ---- ask removed while its allocation is being made --------------------------------------------------------


def test_ask_and_its_release_in_one_request(run: Run) -> None:
    """Any order: an ask released in the request that brings it is never allocated."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    ask = run.asks("app", 1).asks[0]
    release = run.withdraw("app", ask.allocation_key)
    run.core.update_allocation(si.AllocationRequest(rm_id=RM, asks=[ask], releases=release.releases))
    run.core.update_allocation(run.asks("app", 3, start=1))
    run.idle()
    live_keys = {a.allocation_key for a in run.rm.live.values()}
    assert ask.allocation_key not in live_keys, "an ask released in the same request was allocated"
    assert live_keys == {"app-k1", "app-k2", "app-k3"}
    run.check()


def test_ask_then_release_in_consecutive_requests_without_waiting(run: Run) -> None:
    """Any order of asks and their withdrawals in flight together: withdrawn ones never come back."""
    run.nodes(["n1", "n2"])
    run.apps({"app": "root.a", "other": "root.b"})
    for index in range(60):
        run.core.update_allocation(run.asks("app", 1, start=index))
        if index % 3 != 2:
            run.core.update_allocation(run.withdraw("app", f"app-k{index}"))
        run.core.update_allocation(run.asks("other", 1, start=index))
        if index % 7 == 0:
            run.simulation.step()  # some of the work lands between the requests
    run.idle()
    info = run.core.application(PARTITION, "app")
    assert info is not None
    kept = {f"app-k{i}" for i in range(60) if i % 3 == 2}
    allocated = {a.allocation_key for a in info.allocations}
    assert kept <= allocated, "asks that were never withdrawn must be allocated"
    assert not info.pending_asks, "a withdrawn ask came back"
    run.check()


def test_ask_withdrawn_while_its_placement_is_in_flight(run: Run) -> None:
    """Pinned: the scheduler is deciding the ask when its withdrawal reaches the application, which has
    handled it before the Placed arrives: the application refuses the placement, the view rolls it
    back (its node shows nothing), and the RM never hears of an allocation."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    run.idle()

    def withdraw(args: si.PredicatesArgs) -> None:
        run.core.update_allocation(run.withdraw("app", "app-k0"))
        run.run_others()
        assert run.was_delivered("app/app", RemoveAsks)

    run.during_decision(withdraw)
    run.core.update_allocation(run.asks("app", 1))
    run.idle()
    assert run.acted is True, f"the decision the test pins never happened: {run.acted!r}"
    assert not run.rm.live and run.rm.allocated_total == 0, "a withdrawn ask was allocated"
    assert run.rollbacks() == 1
    node = run.core.node(PARTITION, "n1")
    assert node is not None and not node.allocations and node.allocated == {}
    # the application goes on normally
    run.core.update_allocation(run.asks("app", 2, start=1))
    run.idle()
    assert len(run.rm.live) == 2
    run.check()


def test_ask_withdrawn_just_after_its_placement_was_confirmed(run: Run) -> None:
    """Pinned, the other order: the Placed reaches the application first and is confirmed, then the
    withdrawal: the allocation stays."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    place_held_at(run, "n1", "app", 1)
    with run.script.holding(pooled):
        run.tick()
        assert run.queued(to("app/app"), Placed)
    run.idle()  # the application confirms, then the withdrawal arrives
    run.core.update_allocation(run.withdraw("app", "app-k0"))
    run.idle()
    assert len(run.rm.live) == 1
    info = run.core.application(PARTITION, "app")
    assert info is not None and len(info.allocations) == 1 and not info.pending_asks
    run.check()


def test_ask_replaced_while_its_placement_is_in_flight(run: Run) -> None:
    """Pinned: the scheduler is deciding the old ask when the same key comes again with new resources
    and reaches the application first. The stale placement is refused; the new ask is placed once."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    run.idle()

    def replace(args: si.PredicatesArgs) -> None:
        run.core.update_allocation(run.asks("app", 1, {"memory": 200, "vcore": 200}))
        run.run_others()
        assert run.was_delivered("app/app", AddAsks)

    run.core.update_allocation(run.asks("app", 1))
    run.during_decision(replace)
    run.idle()
    assert run.acted is True, f"the decision the test pins never happened: {run.acted!r}"
    info = run.core.application(PARTITION, "app")
    assert info is not None
    assert [(a.allocation_key, a.resource) for a in info.allocations] == [
        ("app-k0", {"memory": 200, "vcore": 200})
    ], "the stale placement of the replaced ask was kept"
    assert [a.resource_per_alloc for a in run.rm.live.values()] == [{"memory": 200, "vcore": 200}]
    assert run.rm.allocated_total == 1
    run.check()


# ---- node decommissioned while allocations are placed on it ------------------------------------------------


def test_node_decommissioned_after_the_placements_were_confirmed(run: Run) -> None:
    """Pinned: the application confirmed its placements (the RM has them), then the node leaves: the
    scheduler's view, the record of what runs on the node, has the application release them all."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    place_held_at(run, "n1", "app", 5)
    run.tick()
    run.idle()
    assert len(run.rm.live) == 5
    node = run.core.node(PARTITION, "n1")
    assert node is not None and len(node.allocations) == 5, "the node shows what the view booked"
    with run.script.holding(to("app/app")):
        run.core.update_node(t.node_action(RM, "n1", si.NodeAction.DECOMISSION))
        run.idle()
        assert run.queued(to("app/app"), NodeRemoved)
    run.idle()
    assert run.core.node(PARTITION, "n1") is None
    assert not run.rm.live, "allocations on a decommissioned node live on"
    released = {r.allocation_key for r in run.rm.released}
    assert released == {f"app-k{i}" for i in range(5)}
    assert all(r.termination_type == si.TerminationType.STOPPED_BY_RM for r in run.rm.released)
    assert run.core.queue(PARTITION, "root.a").allocated == {}
    run.check()


def test_node_decommissioned_before_the_application_confirmed_the_placements(run: Run) -> None:
    """Pinned: the Placed waits at the application while the node is decommissioned; the scheduler's
    NodeRemoved queues behind it. The application confirms (the RM hears of them), then releases them
    with the node."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    place_held_at(run, "n1", "app", 3)
    with run.script.holding(to("app/app")):
        run.tick()
        assert run.queued(to("app/app"), Placed)
        run.core.update_node(t.node_action(RM, "n1", si.NodeAction.DECOMISSION))
        run.idle()
        queued = [p.message for p in run.simulation.queued() if to("app/app")(p)]
        kinds = [type(m) for m in queued]
        assert Placed in kinds and NodeRemoved in kinds
        assert kinds.index(Placed) < kinds.index(NodeRemoved), "the removal overtook the placements"
    run.idle()
    assert run.core.node(PARTITION, "n1") is None
    assert not run.rm.live, "allocations on a decommissioned node live on"
    assert {r.allocation_key for r in run.rm.released} == {f"app-k{i}" for i in range(3)}
    assert run.core.queue(PARTITION, "root.a").allocated == {}
    info = run.core.application(PARTITION, "app")
    assert info is not None and not info.allocations
    run.check()


def test_placeholder_node_decommissioned_as_the_rm_confirms_its_replacement(run: Run) -> None:
    """Pinned: a real ask replaced a placeholder on n1 (the placeholder released to the RM as
    PLACEHOLDER_REPLACED); the RM's confirmation of that release reaches the application before the
    scheduler's NodeRemoved for n1. The application swaps the real allocation in and then hears of
    the removal of a placeholder it no longer holds: the real allocation, which took the
    placeholder's place on n1, must still go with the node."""
    run.nodes(["n1"])
    run.core.update_application(
        si.ApplicationRequest(
            rm_id=RM,
            new=[
                si.AddApplicationRequest(
                    application_id="g",
                    queue_name="root.a",
                    ugi=si.UserGroupInformation(user="u"),
                    placeholder_ask=dict(SMALL),
                )
            ],
        )
    )

    def gang_ask(key: str, placeholder: bool) -> si.AllocationRequest:
        run.asked[("g", key)] = 1
        return si.AllocationRequest(
            rm_id=RM,
            asks=[
                si.AllocationAsk(
                    allocation_key=key,
                    application_id="g",
                    resource_ask=dict(SMALL),
                    max_allocations=1,
                    placeholder=placeholder,
                    task_group_name="tg",
                )
            ],
        )

    run.core.update_allocation(gang_ask("ph-0", True))
    run.idle()
    (placeholder,) = run.rm.live.values()
    run.core.update_allocation(gang_ask("real-0", False))
    run.idle()
    assert [(r.uuid, r.termination_type) for r in run.rm.to_confirm] == [
        (placeholder.uuid, si.TerminationType.PLACEHOLDER_REPLACED)
    ]
    with run.script.holding(to("app/g")):
        run.core.update_allocation(
            t.release(RM, "g", uuid=placeholder.uuid, termination=si.TerminationType.PLACEHOLDER_REPLACED)
        )
        run.idle()
        assert run.queued(to("app/g"), ReleaseAllocations)
        run.core.update_node(t.node_action(RM, "n1", si.NodeAction.DECOMISSION))
        run.idle()
        assert run.queued(to("app/g"), NodeRemoved)
    run.idle()
    assert run.core.node(PARTITION, "n1") is None
    assert not run.rm.live, "the real allocation outlived its placeholder's node"
    assert {(r.allocation_key, r.termination_type) for r in run.rm.released} >= {
        ("real-0", si.TerminationType.STOPPED_BY_RM)
    }
    info = run.core.application(PARTITION, "g")
    assert info is None or not info.allocations
    run.check()


def test_node_decommissioned_during_a_decision(run: Run) -> None:
    """Pinned: the scheduler has placed one ask on a node and is deciding the next when the node is
    removed and has handled its removal, the NodeGone still queued at the scheduler. What the view
    decided on the node before it heard is allocated, then released with the node (YuniKorn's order
    when an allocation comes just before a removal); nothing outlives the node, nothing is lost."""
    run.nodes(["n1"])
    run.nodes(["n2"])
    run.apps({"app": "root.a"})
    run.idle()

    def decommission_first(args: si.PredicatesArgs) -> None:
        first = run.passed[0]
        run.core.update_node(t.node_action(RM, first, si.NodeAction.DECOMISSION))
        run.run_others()
        assert run.queued(lambda p: p.actor == f"{PARTITION}/scheduler", NodeGone)

    run.during_decision(decommission_first, let_through=1)
    run.core.update_allocation(run.asks("app", 2))
    run.idle()
    assert run.acted is True, f"the decision the test pins never happened: {run.acted!r}"
    assert run.passed, "the scheduler never asked the predicate"
    first = run.passed[0]
    other = "n2" if first == "n1" else "n1"
    assert run.core.node(PARTITION, first) is None
    released = {r.allocation_key for r in run.rm.released}
    assert released, "the allocation decided on the leaving node was not released with it"
    assert all(a.node_id == other for a in run.rm.live.values())
    info = run.core.application(PARTITION, "app")
    assert info is not None
    assert not info.pending_asks or set(info.pending_asks).isdisjoint(released)
    assert {a.allocation_key for a in run.rm.live.values()} | released | set(info.pending_asks) == {
        "app-k0",
        "app-k1",
    }
    run.check()


def test_recovered_allocation_on_a_node_removed_before_it_was_booked(run: Run) -> None:
    """Pinned: a node comes with an existing allocation and leaves at once, before the application took
    the recovery in: the scheduler's NodeRemoved queues behind the partition's RecoverAllocations. The
    allocation must not outlive its node."""
    run.apps({"app": "root.b"})
    run.idle()
    existing = si.Allocation(
        allocation_key="running",
        uuid="rec-1",
        application_id="app",
        node_id="n1",
        resource_per_alloc={"memory": 500, "vcore": 500},
    )
    run.asked[("app", "running")] = 1
    with run.script.holding(pooled):
        run.core.update_node(t.nodes(RM, ["n1"], BIG, existing=[existing]))
        run.idle()
        assert run.queued(to("app/app"), RecoverAllocations)
        run.core.update_node(t.node_action(RM, "n1", si.NodeAction.DECOMISSION))
        run.idle()
        assert run.queued(to("app/app"), NodeRemoved)
    run.idle()
    assert run.core.node(PARTITION, "n1") is None
    info = run.core.application(PARTITION, "app")
    assert info is None or not info.allocations, "a recovered allocation outlived its node"
    assert "rec-1" not in run.rm.live
    assert run.core.queue(PARTITION, "root.b").allocated == {}
    run.check()


def test_recovered_allocation_for_an_application_completing_at_that_moment(run: Run) -> None:
    """Pinned: the application's completing timeout is queued just before a recovery for it (the
    partition has not yet heard that it completed): the recovery is refused, not booked on the node."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    run.core.update_allocation(run.asks("app", 1))
    run.idle()
    run.core.update_allocation(t.release(RM, "app"))  # -> Completing, the 0.2 s timer starts
    run.idle()
    assert run.core.application(PARTITION, "app").state == "Completing"
    existing = si.Allocation(
        allocation_key="running",
        uuid="rec-1",
        application_id="app",
        node_id="n2",
        resource_per_alloc={"memory": 500, "vcore": 500},
    )
    run.asked[("app", "running")] = 1
    with run.script.holding(to("app/app")):
        run.core.advance(SETTINGS["completing_timeout"])
        assert run.queued(to("app/app"), CompletingTimeout)
        run.core.update_node(t.nodes(RM, ["n2"], BIG, existing=[existing]))
        run.idle()
        assert run.queued(to("app/app"), RecoverAllocations)
    run.idle()
    info = run.core.application(PARTITION, "app")
    assert info is not None and info.state == "Completed"
    assert "rec-1" not in run.rm.live, "recovered onto a completed application"
    assert [r.allocation_key for r in run.rm.rejected_asks] == ["running"]
    node = run.core.node(PARTITION, "n2")
    assert node is not None and node.allocations == [], "the node books an allocation nobody owns"
    run.check()


def test_node_with_existing_allocations_gets_nothing_before_they_are_booked(run: Run) -> None:
    """Pinned: a node registers full of allocations the RM already runs while asks wait, and the
    scheduler decides while the recovery still waits at the application. YuniKorn adds the node and
    its existing allocations in one step, so nothing new goes there: a placement decided before the
    recovered allocations are booked would double-book the node."""
    run.apps({"old": "root.a", "new": "root.a"})
    run.core.update_allocation(run.asks("new", 5))  # waiting: no node yet
    run.idle()
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
    with run.script.holding(pooled):
        run.core.update_node(t.nodes(RM, ["n1"], BIG, existing=existing))  # exactly full
        run.tick()  # the scheduler decides on the node while the recovery waits
        assert run.queued(to("app/old"), RecoverAllocations)
    run.idle()
    info = run.core.node(PARTITION, "n1")
    assert info is not None
    assert sorted(a.uuid for a in info.allocations) == ["rec-0", "rec-1"], (
        f"placed on a node whose existing allocations fill it: {[a.allocation_key for a in info.allocations]}"
    )
    assert sorted(run.core.application(PARTITION, "new").pending_asks) == [f"new-k{i}" for i in range(5)]
    run.check()


# ---- application removed while being scheduled -----------------------------------------------------------


def test_application_removed_during_a_decision(run: Run) -> None:
    """Pinned: two asks placed, the scheduler deciding the third when the application is removed and
    has handled its removal. Its proposals are refused and undone; the node has its room back."""
    run.nodes(["n1"])
    run.apps({"app": "root.a", "other": "root.a"})
    run.idle()

    def remove(args: si.PredicatesArgs) -> None:
        run.remove_app("app")
        run.run_others()
        assert run.was_delivered("app/app", RemoveApplication)

    run.during_decision(remove, let_through=2)
    run.core.update_allocation(run.asks("app", 5))
    run.idle()
    assert run.acted is True, f"the decision the test pins never happened: {run.acted!r}"
    assert run.core.application(PARTITION, "app") is None
    assert not [a for a in run.rm.live.values() if a.application_id == "app"]
    node = run.core.node(PARTITION, "n1")
    assert node is not None and node.allocations == []
    run.core.update_allocation(run.asks("other", 3))
    run.idle()
    assert len(run.rm.live) == 3
    run.check()


def test_application_removed_with_placements_waiting_at_it(run: Run) -> None:
    """Pinned: the Placed waits at the application and its removal queues behind it: the placements
    are confirmed (the RM hears of them), then released with the application; the node ends empty."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    place_held_at(run, "n1", "app", 4)
    with run.script.holding(pooled):
        run.tick()
        assert run.queued(to("app/app"), Placed)
        run.remove_app("app")
        run.idle()
        assert run.queued(to("app/app"), RemoveApplication)
    run.idle()
    assert run.core.application(PARTITION, "app") is None
    assert not run.rm.live
    assert {r.allocation_key for r in run.rm.released} == {f"app-k{i}" for i in range(4)}
    node = run.core.node(PARTITION, "n1")
    assert node is not None and node.allocations == [] and node.allocated == {}
    run.check()


def test_application_removed_before_its_placements_are_booked(run: Run) -> None:
    """Pinned: the removal waits at the application while the scheduler, not told yet, proposes for it."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    place_held_at(run, "n1", "app", 4)
    with run.script.holding(pooled):
        run.remove_app("app")
        run.idle()
        assert run.queued(to("app/app"), RemoveApplication)
        run.tick()  # the scheduler has not heard of the removal yet: it proposes
        assert run.queued(to("app/app"), Placed)
    run.idle()
    assert not run.rm.live and run.rm.allocated_total == 0
    node = run.core.node(PARTITION, "n1")
    assert node is not None and node.allocations == []
    run.check()


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


def test_queue_removed_by_reload_while_applications_run(run: Run) -> None:
    """Any order: a reload removes a queue under a running application; it drains, then goes."""
    run.nodes(["n1"], {"memory": 1000, "vcore": 1000})
    run.apps({"app": "root.b", "keep": "root.a"})
    run.core.update_allocation(run.asks("keep", 1))
    run.idle()
    run.core.update_allocation(run.asks("app", 15))  # more than the node holds
    run.idle()
    assert len(run.rm.live) == 10
    run.core.update_configuration(si.UpdateConfigurationRequest(rm_id=RM, config=WITHOUT_B))
    run.idle()
    queue = run.core.queue(PARTITION, "root.b")
    assert queue is not None and queue.state == "Draining"
    assert queue.allocated == {"memory": 900, "vcore": 900}
    # no new applications in a draining queue; the running one goes on
    run.core.update_application(t.applications(RM, {"late": "root.b"}))
    run.idle()
    assert "late" in run.rm.rejected_apps
    run.check()
    # it finishes: allocations released, asks withdrawn -> completed -> the queue goes away
    run.core.update_allocation(t.release(RM, "app", allocation_key="app-k0"))
    run.idle()
    info = run.core.application(PARTITION, "app")
    assert info is not None and len(info.allocations) == 9, "the draining queue's app still gets room"
    for key in list(info.pending_asks):
        run.core.update_allocation(run.withdraw("app", key))
    run.core.update_allocation(t.release(RM, "app"))
    run.settle()
    assert run.core.queue(PARTITION, "root.b") is None, "the drained queue did not go"
    run.check()
    assert run.core.application(PARTITION, "app").state == "Completed"
    # the queue comes back with the next reload, and works
    run.core.update_configuration(si.UpdateConfigurationRequest(rm_id=RM, config=CONFIG))
    run.apps({"again": "root.b"})
    run.core.update_allocation(run.asks("again", 2))
    run.idle()
    assert len(run.core.application(PARTITION, "again").allocations) == 2
    run.check()


def test_queue_removed_and_restored_while_asks_are_in_flight(run: Run) -> None:
    """Any order: asks in flight while a reload removes their queue and the next restores it."""
    run.nodes(["n1"])
    run.apps({"app": "root.b"})
    run.idle()
    for index in range(20):
        run.core.update_allocation(run.asks("app", 1, start=index))
        if index == 5:
            run.core.update_configuration(si.UpdateConfigurationRequest(rm_id=RM, config=WITHOUT_B))
        if index == 12:
            run.core.update_configuration(si.UpdateConfigurationRequest(rm_id=RM, config=CONFIG))
    run.idle()
    queue = run.core.queue(PARTITION, "root.b")
    assert queue is not None and queue.state == "Active"
    assert len(run.rm.live) == 20
    run.check()


# ---- RM re-registered mid-stream ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_rm_reregistered_with_requests_in_flight(seed: int) -> None:
    """Any order: the registration comes in behind requests still in flight (none waited for)."""
    core = korral.start(runtime="simulated", seed=seed, **SETTINGS)
    try:
        old = t.RecordingRM(RM)
        core.register_resource_manager(t.register(RM, CONFIG), old)
        core.update_node(t.nodes(RM, [f"n{i}" for i in range(5)], BIG))
        core.update_application(t.applications(RM, {f"app{i}": "root.a" for i in range(5)}))
        for i in range(5):
            core.update_allocation(t.asks(RM, f"app{i}", 50, SMALL))
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
        assert {a.application_id for a in new.live.values()} == {"fresh"}, "old allocations leaked"
        assert not new.rejected_asks and not new.rejected_apps
        core.advance(2.0)
        assert core.tracker.in_flight() == 0, "a message count leaked for the stopped registration"
        assert len([p for p in core.partitions() if p.rm_id == RM]) == 1
    finally:
        core.stop()


def test_rm_reregistered_while_the_scheduler_is_mid_decision(run: Run) -> None:
    """Pinned: the RM registers again while the old partition's scheduler is inside a decision. The
    registration completes (the old scheduler's stop waits its bounded time, virtual here) and the
    old decision's placements are refused; the new registration works."""
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    run.idle()
    new = t.RecordingRM(RM)

    def reregister(args: si.PredicatesArgs) -> None:
        run.core.register_resource_manager(t.register(RM, CONFIG), new)

    run.during_decision(reregister, let_through=1)
    run.core.update_allocation(t.asks(RM, "app", 5, SMALL))
    run.idle()
    assert run.acted is True, f"the decision the test pins never happened: {run.acted!r}"
    assert run.passed, "the scheduler never asked the predicate"
    run.rm = new
    run.asked.clear()
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    run.core.update_allocation(run.asks("app", 2))
    run.idle()
    assert len(new.live) == 2
    run.check()


# ---- release racing the completing timeout -----------------------------------------------------------------


def test_release_then_new_ask_racing_the_completing_timeout(seed: int) -> None:
    """Pinned both ways: everything released (-> Completing), then at the application either the new
    ask before the completing timeout (it runs again) or the timeout first (Completed: the ask is
    rejected). A completed application's id can then be used again."""
    with running(seed, {"completing_timeout": 0.01}) as run:
        release_then_ask_racing_the_timeout(run)


def release_then_ask_racing_the_timeout(run: Run) -> None:
    run.nodes(["n1"])
    for round_, ask_first in enumerate([True, False, True, False]):
        app_id = f"app{round_}"
        run.apps({app_id: "root.a"})
        run.core.update_allocation(run.asks(app_id, 1))
        run.idle()
        assert len(run.core.application(PARTITION, app_id).allocations) == 1
        run.core.update_allocation(t.release(RM, app_id))  # -> Completing, the timer starts
        run.idle()
        with run.script.holding(to(f"app/{app_id}")):
            if ask_first:
                run.core.update_allocation(run.asks(app_id, 1, start=1))
                run.core.advance(0.01)
            else:
                run.core.advance(0.01)
                run.core.update_allocation(run.asks(app_id, 1, start=1))
                run.idle()
            order = [type(p.message) for p in run.simulation.queued() if to(f"app/{app_id}")(p)]
            timeout_at = order.index(CompletingTimeout)
            assert (order.index(AddAsks) < timeout_at) == ask_first, order
        run.idle()
        info = run.core.application(PARTITION, app_id)
        key = (app_id, f"{app_id}-k1")
        live = {(a.application_id, a.allocation_key) for a in run.rm.live.values()}
        rejected = {(r.application_id, r.allocation_key) for r in run.rm.rejected_asks}
        if ask_first:
            assert key in live and info is not None and info.state == "Running"
        else:
            assert key in rejected, "the ask for a completed application was neither allocated nor rejected"
            assert info is not None and info.state == "Completed" and not info.allocations
    run.check()
    run.apps({"app1": "root.a"})  # completed: its id can be used again
    run.core.update_allocation(run.asks("app1", 1, start=5))
    run.idle()
    info = run.core.application(PARTITION, "app1")
    assert info is not None and info.state in ("Starting", "Running") and len(info.allocations) == 1
    run.check()


def test_release_and_ask_in_one_request_with_an_instant_completing_timeout(seed: int) -> None:
    """Any order: everything released and a new ask in one request; the ask comes first, so the
    application never has nothing left and must not complete under the new ask."""
    with running(seed, {"completing_timeout": 0.0}) as run:
        release_and_ask_in_one_request(run)


def release_and_ask_in_one_request(run: Run) -> None:
    run.nodes(["n1"])
    run.apps({"app": "root.a"})
    run.core.update_allocation(run.asks("app", 1))
    run.idle()
    for index in range(1, 30):
        release = t.release(RM, "app")
        ask = run.asks("app", 1, start=index).asks[0]
        run.core.update_allocation(si.AllocationRequest(rm_id=RM, asks=[ask], releases=release.releases))
        run.core.advance(0.001)  # the instant timeout, if one was started, fires
        info = run.core.application(PARTITION, "app")
        assert info is not None and info.state == "Running", f"round {index}: {info and info.state}"
        assert [a.allocation_key for a in info.allocations] == [f"app-k{index}"]
    run.check()


# ---- a node fills up under a decision ----------------------------------------------------------------------


def test_node_fills_up_under_a_decision(run: Run) -> None:
    """Pinned: the scheduler has looked at the node (two placements passed) when the node's room shrinks
    (occupied by someone else) and the node has handled it. The view decided before it heard: what it
    placed stands and the node is over-committed, as YuniKorn's is when a node's occupied resources grow
    after its allocations (one writer of the node's free room, nothing checks it twice). Once the view
    hears of the change (NodeChanged), nothing more goes there."""
    run.nodes(["n1"], {"memory": 1000, "vcore": 1000})
    run.apps({"app": "root.a"})
    run.idle()

    def fill(args: si.PredicatesArgs) -> None:
        run.core.update_node(t.node_action(RM, "n1", si.NodeAction.UPDATE, occupied_resource={"memory": 600}))
        run.run_others()
        assert run.was_delivered("node/n1", UpdateNode)

    run.during_decision(fill, let_through=2)
    run.core.update_allocation(run.asks("app", 4, {"memory": 250, "vcore": 250}))
    run.idle()
    assert run.acted is True, f"the decision the test pins never happened: {run.acted!r}"
    assert run.rollbacks() == 0
    info = run.core.node(PARTITION, "n1")
    assert info is not None and len(info.allocations) == 4
    assert info.available == {"memory": -600}
    run.check(may_overcommit={"n1"})
    run.core.update_allocation(run.asks("app", 2, {"memory": 250, "vcore": 250}, start=4))
    run.nodes(["n2"], {"memory": 1000, "vcore": 1000})
    run.idle()
    assert len(run.rm.live) == 6
    assert sorted(a.node_id for a in run.rm.live.values()) == ["n1"] * 4 + ["n2"] * 2
    run.check(may_overcommit={"n1"})


# ---- application removed and added again ------------------------------------------------------------------


def test_application_removed_and_added_again_before_the_old_one_said_it_is_gone() -> None:
    """Found by seed search: the new incarnation's AppAdded (from the partition) reaches the scheduler
    before the old incarnation's AppGone (from the old application actor, once it handled its removal).
    The scheduler must not drop the new one when the old one's AppGone arrives: its asks get placed."""
    pinned = []
    for seed in range(20):
        with running(seed) as run:
            run.nodes(["n1"])
            run.apps({"x": "root.a"})
            run.core.update_allocation(run.asks("x", 3))
            run.remove_app("x")
            run.apps({"x": "root.a"})
            run.removed_apps.discard("x")
            run.asked.clear()  # the first incarnation's asks went with it
            run.core.update_allocation(run.asks("x", 2, prefix="again-"))
            run.idle()
            at_scheduler = [
                kind.__name__
                for actor, kind in run.delivered
                if actor == f"{PARTITION}/scheduler" and kind.__name__ in ("AppAdded", "AppGone")
            ]
            if at_scheduler == ["AppAdded", "AppAdded", "AppGone"]:
                pinned.append(seed)
            info = run.core.application(PARTITION, "x")
            assert info is not None and sorted(a.allocation_key for a in info.allocations) == [
                "again-0",
                "again-1",
            ], f"seed {seed} ({at_scheduler}): the re-added application's asks were not placed"
            run.check()
    assert pinned, "no seed delivered the new AppAdded before the old AppGone"
