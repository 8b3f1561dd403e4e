"""``korral stress --simulated``'s workload reaches what a real RM or user does beyond the SI calls of a
scheduling run: a client reading through ``korral.Core``'s query API (checked against the books and for
changing nothing), an RM unregistering, applications the ACLs deny, namespace quota tags on dynamic
queues, and the RM confirming the core's preemptions. Each check catches a deliberately broken variant,
and the case a run prints replays it. All on the virtual clock: nothing depends on the machine's speed.
"""

from __future__ import annotations

from typing import Any

import pytest

from korral.actors.dispatch import ensure_handlers
from korral.actors.messages import Snapshot
from korral.actors.partition.queries import PartitionQueries
from korral.actors.rm_messages import Detach
from korral.actors.rmproxy import RMProxyActor
from korral.actors.scheduler.actor import SchedulerActor
from korral.harness import faults, faults_planted, repro
from korral.harness.simulated.coverage import Coverage
from korral.harness.simulated.queries import READS
from korral.harness.simulated.stress import SimulatedOutcome, SimulatedStress
from korral.harness.simulated.workloads import Workloads
from korral.info import UserUsageInfo

SEEDS = 120  # a broken variant is found within these (each at its first seed that reaches it)


pytestmark = pytest.mark.usefixtures("quiet_simulation")


@pytest.fixture(scope="module")
def default_mix() -> Coverage:
    """What seeds 1..80 of the default mix reach (all clean)."""
    harness = SimulatedStress(rms=2, operations=30)
    harness.coverage = Coverage()
    for seed in range(1, 81):
        assert harness.run_seed(seed).violations == (), seed
    return harness.coverage


@pytest.mark.timeout(900)  # 80 seeds: minutes beside CPU hogs, not a hang
def test_the_default_mix_reads_every_query_through_the_core(default_mix: Coverage) -> None:
    for what in READS:
        assert default_mix.operations[f"read {what}"], what
    queries = (
        "PartitionSummary",
        "QueueQuery",
        "ApplicationQuery",
        "ApplicationsQuery",
        "CompletedApplicationsQuery",
        "NodeQuery",
        "NodesQuery",
        "SchedulerStatsQuery",
        "UserUsageQuery",
        "GroupUsageQuery",
        "UsersUsageQuery",
        "GroupsUsageQuery",
    )
    for query in queries:  # as messages: through the RM proxy to the partition and the owners it asks
        assert default_mix.messages[f"partition: {query}"], query
    assert default_mix.messages["rmproxy: FindPartitions"]
    assert default_mix.messages["scheduler: Snapshot"]


@pytest.mark.timeout(900)
def test_the_default_mix_unregisters_denies_tags_and_confirms_preemption(default_mix: Coverage) -> None:
    assert default_mix.operations["unregister"]
    assert default_mix.messages["registrar: Unregister"] and default_mix.messages["rmproxy: Detach"]
    # a user no ACL names: rejected, which the RM is told as a rejection (no state update)
    assert default_mix.operations["apps add by a user the ACLs deny"]
    assert default_mix.app_states["Rejected"]
    assert default_mix.app_states["New"]  # an application waiting for its first ask, seen at a check
    # an application's namespace quota tags change its dynamic queue's limits: the queue is told
    assert default_mix.operations["apps add with namespace quota tags"]
    assert default_mix.messages["queue: TagQueue"]
    assert default_mix.operations["confirm PREEMPTED_BY_SCHEDULER"]
    report = "\n".join(default_mix.report())
    assert "handlers: 77 of 77 reached" in report, report


def test_without_them_the_mix_neither_reads_nor_leaves_nor_is_denied() -> None:
    harness = SimulatedStress(
        rms=2, operations=30, workloads=Workloads(reads=False, leaves=False, denied=False)
    )
    harness.coverage = Coverage()
    for seed in range(1, 11):
        assert harness.run_seed(seed).violations == (), seed
    seen = harness.coverage
    assert not any(name.startswith("read ") for name in seen.operations)
    assert not seen.operations["unregister"] and not seen.operations["apps add by a user the ACLs deny"]


def plant(monkeypatch: pytest.MonkeyPatch, name: str, key: str, actor_class: type) -> None:
    """Make ``name`` a known fault that starts ``actor_class`` as the partition's ``key`` actor."""
    monkeypatch.setitem(faults.KNOWN, name, f"test-only: {actor_class.__doc__}")
    monkeypatch.setitem(faults_planted.CLASSES, name, (key, actor_class))


def first_violation(fault: str | None, wanted: str) -> SimulatedOutcome:
    """The first seed that violates (with ``fault`` planted, if any), showing ``wanted``; its recorded
    operations replayed show the same violation (the case the command line prints fails)."""
    harness = SimulatedStress(rms=2, operations=30, fault=fault)
    found, _, _ = harness.search(range(1, SEEDS + 1), budget=None)
    assert found is not None, f"no violation in seeds 1..{SEEDS}"
    first = found.violations[0]
    assert wanted in first, found.violations
    replayed = harness.replay(found.seed, found.ops, schedule_seed=found.schedule_seed)
    assert repro.shows(replayed.violations, first), replayed.violations
    return found


class StatsReadCountsItself(SchedulerActor):
    """the scheduler counts a read of its counters as a cycle: a read that changes what it reads"""

    def on_Snapshot(self, message: Snapshot) -> Any:
        self.cycles += 1
        return super().on_Snapshot(message)


def test_a_read_that_changes_what_it_reads_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    plant(monkeypatch, "stats-read-counts-itself", "scheduler_actor", StatsReadCountsItself)
    found = first_violation("stats-read-counts-itself", "reading scheduler stats changed what the partition")
    clean = SimulatedStress(rms=2, operations=30).run_seed(found.seed)
    assert clean.violations == (), clean.violations


def test_a_read_that_disagrees_with_the_books_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # a user's usage answered from the first user's (the user asked for is not looked up)
    original = PartitionQueries._user_infos

    def any_user(self: PartitionQueries, only: str | None = None) -> list[UserUsageInfo]:
        return original(self)

    monkeypatch.setattr(PartitionQueries, "_user_infos", any_user)
    found = first_violation(None, "disagrees with the books")
    assert "read user usage" in found.violations[0], found.violations
    monkeypatch.undo()
    clean = SimulatedStress(rms=2, operations=30).run_seed(found.seed)
    assert clean.violations == (), clean.violations


def test_an_unregistered_rm_whose_partitions_keep_running_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # a broken routing actor: it lets the RM go but hands the registrar none of its partitions to stop
    ensure_handlers(RMProxyActor)
    handlers = dict(RMProxyActor.handlers)
    detach = handlers[Detach]

    def keeps_partitions(actor: Any, message: Detach) -> Any:
        answer = detach(actor, message)
        return () if isinstance(answer, tuple) else answer

    handlers[Detach] = keeps_partitions
    monkeypatch.setattr(RMProxyActor, "handlers", handlers)
    found = first_violation(None, "unregistered, and its actors still run")
    monkeypatch.undo()
    clean = SimulatedStress(rms=2, operations=30).run_seed(found.seed)
    assert clean.violations == (), clean.violations
