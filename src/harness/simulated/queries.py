"""Reads of ``korral stress --simulated``: a client reading through ``korral.Core``'s query API between the
RMs' calls, as the REST routes (/ws/v1) and a dashboard do, and what such a read must hold.

An RM's seeded stream now and then reads its partition: one of ``READS`` (the partition, its queues,
applications, completed applications, nodes, the scheduler's counters, user and group usage), each
through the public method a route calls, so the query travels the RM proxy, the partition and the
owners it asks, as messages.

- **Amid work in flight** (the core not quiet: the last pause ended mid-way), the read is answered
  between the deliveries still due, in the schedule's order: it reaches the interleavings a real
  reader makes. A read that breaks what it reads shows at the next check.
- **On a quiet core** the read is made with virtual time frozen (nothing else runs), between two reads
  of the same partition from its actors (``simulated.checks.collect_direct``, ``read_usage``; what the
  books checks judge): the answer must agree with those books, and the state after the read must
  be the state before it (a read changes nothing).

A read is an ``Op`` of kind ``"read"`` whose request is plain data (``Read``'s fields as a tuple), so
a replay and a printed case make the same read at the same point.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from korral.actors.messages import CompletedApplicationsQuery, Snapshot
from korral.core import Core
from korral.harness.simulated import checks as simulated_checks
from korral.harness.stress import LIMITED_GROUPS, USERS, Op, Violation

if TYPE_CHECKING:
    from korral.harness.simulated.scenarios import ScenarioDriver

# what a read may ask for, each by the Core method a REST route calls
READS = (
    "partitions",
    "partition",
    "queue",
    "application",
    "applications",
    "completed applications",
    "node",
    "nodes",
    "scheduler stats",
    "user usage",
    "group usage",
    "users usage",
    "groups usage",
)
READ_QUEUES = ("root", "root.a", "root.b", "root.c", "root.p", "root.c.x")


def choose(driver: ScenarioDriver) -> tuple[str, str, str]:
    """A read of the RM's default partition drawn from its stream: (what, partition, subject)."""
    rng = driver.rng
    what = READS[rng.randrange(len(READS))]
    subject = ""
    if what == "queue":
        subject = READ_QUEUES[rng.randrange(len(READ_QUEUES))]
    elif what == "application":  # a live one, one that left (completed), or one never known
        known = sorted(driver.apps | set(driver.removed_apps))
        subject = rng.choice(known) if known and rng.random() < 0.9 else f"{driver.rm_id}-app-0"
    elif what == "node":
        known = sorted(set(driver.nodes) | driver.removed_nodes)
        subject = rng.choice(known) if known and rng.random() < 0.9 else f"{driver.rm_id}-node-0"
    elif what == "user usage":
        subject = USERS[rng.randrange(len(USERS))][0]
    elif what == "group usage":
        subject = rng.choice([*LIMITED_GROUPS, "ops"])
    return (what, driver.partition, subject)


def read_op(driver: ScenarioDriver, core: Core) -> None:
    """The RM's next operation is a read (recorded, then made; a broken read raises ``Violation``)."""
    request = choose(driver)
    what, _, subject = request
    description = f"{driver.rm_id}: read {what}" + (f" {subject}" if subject else "")
    driver.record(Op(seq=0, rm=driver.index, kind="read", request=request, description=description))
    problems = read(core, request)
    if problems:
        raise Violation(problems[0])


def _answer(core: Core, request: tuple[str, str, str]) -> Any:
    """The read through ``korral.Core``'s public query API."""
    what, partition, subject = request
    calls: dict[str, Callable[[], Any]] = {
        "partitions": core.partitions,
        "partition": lambda: core.partition(partition),
        "queue": lambda: core.queue(partition, subject),
        "application": lambda: core.application(partition, subject),
        "applications": lambda: core.applications(partition),
        "completed applications": lambda: core.completed_applications(partition),
        "node": lambda: core.node(partition, subject),
        "nodes": lambda: core.nodes(partition),
        "scheduler stats": lambda: core.scheduler_stats(partition),
        "user usage": lambda: core.user_usage(partition, subject),
        "group usage": lambda: core.group_usage(partition, subject),
        "users usage": lambda: core.users_usage(partition),
        "groups usage": lambda: core.groups_usage(partition),
    }
    return calls[what]()


def read(core: Core, request: tuple[str, str, str]) -> list[str]:
    """Make the read (see the module's docstring); on a quiet core, what it must hold."""
    simulation = core.simulation
    assert simulation is not None
    if simulation.queued():
        _answer(core, request)  # amid the deliveries still due
        return []
    what, partition, subject = request
    with simulation.frozen():
        before = _books(core, partition, what)
        answer = _answer(core, request)
        after = _books(core, partition, what)
    if before is None:
        return []  # the partition is gone (an RM between registrations): nothing to agree with
    problems = []
    if after != before:
        problems.append(f"{partition}: reading {what} changed what the partition holds")
    if what == "partitions":  # every RM's: this one's is judged
        answer = next((info for info in answer if info.name == partition), None)
    expected = _expected(what, subject, before)
    if answer != expected:
        problems.append(
            f"{partition}: read {what}{' ' + subject if subject else ''} disagrees with the books: "
            f"answered {_short(answer)}, the partition holds {_short(expected)}"
        )
    return problems


class _Books:
    """A partition as its actors hold it, read directly (what the books checks judge)."""

    def __init__(self, core: Core, partition: str, what: str) -> None:
        state = simulated_checks.collect_direct(core, partition)
        assert state is not None
        self.state = state
        self.usage = simulated_checks.read_usage(core, partition)
        actor = simulated_checks.live_partition(core, partition)
        assert actor is not None
        self.completed = actor.on_CompletedApplicationsQuery(CompletedApplicationsQuery())
        self.stats: Any = None  # the scheduler's counters, read only for the read of them
        if what == "scheduler stats":
            simulation = core.simulation
            assert simulation is not None
            self.stats = simulation.actors[f"{partition}/scheduler"].on_Snapshot(Snapshot())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Books) and self._key() == other._key()

    def __hash__(self) -> int:  # pragma: no cover (never hashed: compared)
        return id(self)

    def _key(self) -> tuple[Any, ...]:
        state = self.state
        return (
            state.info,
            state.nodes,
            state.applications,
            state.queues,
            self.usage.users,
            self.usage.groups,
            self.completed,
            self.stats,
        )


def _books(core: Core, partition: str, what: str) -> _Books | None:
    if simulated_checks.live_partition(core, partition) is None:
        return None
    return _Books(core, partition, what)


def _expected(what: str, subject: str, books: _Books) -> Any:
    """What the read must answer, from the books read directly."""
    state = books.state
    if what in ("partitions", "partition"):
        return state.info
    if what == "queue":
        return state.queues.get(subject)
    if what == "application":
        live = {app.application_id: app for app in state.applications}
        completed = {app.application_id: app for app in books.completed}
        return live.get(subject, completed.get(subject))
    if what == "applications":
        return state.applications
    if what == "completed applications":
        return books.completed
    if what == "node":
        return next((node for node in state.nodes if node.node_id == subject), None)
    if what == "nodes":
        return state.nodes
    if what == "scheduler stats":
        return books.stats
    if what == "user usage":
        return next((user for user in books.usage.users if user.user == subject), None)
    if what == "group usage":
        return next((group for group in books.usage.groups if group.group == subject), None)
    if what == "users usage":
        return books.usage.users
    return books.usage.groups  # "groups usage"


def _short(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
