"""The tools of the interleaving tests (test_interleavings_*.py): a scripted schedule, and the run it drives.

The tests are regression tests for the races YuniKorn users hit, each pinned to one interleaving on the
simulated runtime (``korral.start(runtime="simulated")``): no threads, no sleeps, no peeking into pykka.

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
