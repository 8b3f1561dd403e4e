"""Shared helpers for the end-to-end tests of ``korral.Core`` (tests/core and tests/cli).

Everything here goes through the public API only: ``korral.start``, the SI calls, the snapshot queries
and a ``korral.testing.RecordingRM`` callback. ``running(...)`` starts a core with short timings,
registers one RM and, when the block ends, checks that the core logged no error and counted none.
``check_invariants(...)`` checks the books through snapshots after a scenario that allocates.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import korral
from korral import si
from korral import testing as t

# Short timings so the scenarios run fast (api.md: korral.start settings).
FAST: dict[str, float] = {
    "completing_timeout": 0.2,
    "queue_cleanup_interval": 0.2,
    "reservation_delay": 0.05,
    "scheduling_interval": 0.02,
}

MB = 1_000_000
# YuniKorn's smoke-test node: 100M memory, 20 vcores.
NODE = {"memory": 100 * MB, "vcore": 20_000}
# YuniKorn's smoke-test ask: 10M memory, 1 vcore.
SMALL = {"memory": 10 * MB, "vcore": 1_000}

SINGLE_LEAF = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: singleleaf
            resources:
              max:
                memory: 150M
                vcore: 20
"""

TWO_LEAVES = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
          - name: b
"""

ROOT_ONLY = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
"""


# The engine ``running(...)`` starts: "threads", or "ray" while a test runs under the ``engine`` fixture
# (conftest.py) with its "ray" parameter.
ENGINE: dict[str, str] = {"name": "threads"}


def part(rm_id: str = "rm", name: str = "default") -> str:
    """The core's name of an RM's partition: ``[rm]default``."""
    return f"[{rm_id}]{name}"


class LogCollector(logging.Handler):
    """Keeps every ERROR (or worse) record logged under the ``korral`` loggers."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self) -> list[str]:
        return [record.getMessage() for record in self.records]


@contextmanager
def collect_errors() -> Iterator[LogCollector]:
    collector = LogCollector()
    logger = logging.getLogger("korral")
    logger.addHandler(collector)
    try:
        yield collector
    finally:
        logger.removeHandler(collector)


@contextmanager
def running(
    config: str = ROOT_ONLY,
    *,
    rm_id: str = "rm",
    rm: t.RecordingRM | None = None,
    allow_errors: bool = False,
    **settings: float,
) -> Iterator[tuple[korral.Core, t.RecordingRM]]:
    """A started core with one registered RM; checks for contained errors when the block ends."""
    rm = rm if rm is not None else t.RecordingRM(rm_id)
    timings = dict(FAST)
    if ENGINE["name"] == "ray":
        # A tick wakes the scheduler while an ask waits for room, and with engine="ray" each
        # predicates call is a round trip to the driver: at 20 ms ticks on a loaded machine there is
        # always one in flight, so the core is never seen idle. Ticks 10x slower leave idle moments.
        timings["scheduling_interval"] = 0.2
    with (
        collect_errors() as errors,
        korral.start(**{"engine": ENGINE["name"], **timings, **settings}) as core,
    ):
        if ENGINE["name"] == "ray":
            # every answer crosses a process boundary through Ray: on a loaded machine (CI beside
            # other work) going idle takes longer than the in-process default allows
            wait = core.wait_until_idle

            def patient(timeout: float = 60.0) -> None:
                wait(timeout)

            core.wait_until_idle = patient  # type: ignore[method-assign]
        core.register_resource_manager(t.register(rm_id, config), rm)
        yield core, rm
        core.wait_until_idle()
        if not allow_errors:
            assert core.tracker.errors == 0, errors.messages()
            assert errors.messages() == []


def add_nodes(
    core: korral.Core, rm: t.RecordingRM, node_ids: list[str], capacity=NODE, **kwargs: Any
) -> None:
    """Create nodes and wait until the RM has been told they were accepted."""
    core.update_node(t.nodes(rm.rm_id, node_ids, capacity, **kwargs))
    core.wait_until_idle()
    assert set(node_ids) <= set(rm.accepted_nodes), rm.rejected_nodes


def add_apps(core: korral.Core, rm: t.RecordingRM, app_queues: dict[str, str], **kwargs: Any) -> None:
    """Add applications and wait until the RM has been told they were accepted."""
    core.update_application(t.applications(rm.rm_id, app_queues, **kwargs))
    core.wait_until_idle()
    assert set(app_queues) <= set(rm.accepted_apps), rm.rejected_apps


def eventually(condition: Callable[[], Any], timeout: float = 20.0, interval: float = 0.02) -> Any:
    """Poll ``condition`` (something only time changes: timers) until it is truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def wait_app_state(core: korral.Core, partition: str, app_id: str, state: str, timeout: float = 5.0) -> None:
    def reached() -> bool:
        info = core.application(partition, app_id)
        return info is not None and info.state == state

    eventually(reached, timeout)


def mem(resource: dict[str, int]) -> int:
    return resource.get("memory", 0)


def add(*resources: dict[str, int]) -> dict[str, int]:
    total: dict[str, int] = {}
    for resource in resources:
        for name, quantity in resource.items():
            total[name] = total.get(name, 0) + quantity
    return {name: quantity for name, quantity in total.items() if quantity}


def same(left: dict[str, int], right: dict[str, int]) -> bool:
    """Equal resources, a missing type counting as 0."""
    return add(left) == add(right)


def queue_tree(core: korral.Core, partition: str, path: str = "root") -> list[korral.QueueInfo]:
    info = core.queue(partition, path)
    assert info is not None, f"queue {path} missing in {partition}"
    infos = [info]
    for child in info.children:
        infos.extend(queue_tree(core, partition, child))
    return infos


def check_invariants(core: korral.Core, partition: str, rm: t.RecordingRM | None = None) -> None:
    """The books balance, as a user sees them through snapshots (call after wait_until_idle)."""
    core.wait_until_idle()
    nodes = core.nodes(partition)
    for node in nodes:
        total = add(node.allocated, node.occupied, node.available)
        assert same(node.capacity, total), (
            f"node {node.node_id}: capacity != allocated + occupied + available"
        )
        assert same(node.allocated, add(*(a.resource for a in node.allocations))), (
            f"node {node.node_id}: allocated != its allocations"
        )
    info = core.partition(partition)
    assert info is not None
    assert same(info.capacity, add(*(n.capacity for n in nodes))), "partition capacity != sum of nodes"
    node_allocated = add(*(n.allocated for n in nodes))
    assert same(info.allocated, node_allocated), "partition allocated != sum of node allocations"
    apps = {app.application_id: app for app in core.applications(partition)}
    for queue in queue_tree(core, partition):
        if queue.is_leaf:
            members = [apps[a] for a in queue.applications if a in apps]
        else:
            members = [core.queue(partition, child) for child in queue.children]
        assert same(queue.allocated, add(*(m.allocated for m in members))), (
            f"queue {queue.path}: allocated != sum of its members"
        )
        assert same(queue.pending, add(*(m.pending for m in members))), (
            f"queue {queue.path}: pending != sum of its members"
        )
    root = core.queue(partition, "root")
    assert same(root.allocated, node_allocated), "root allocated != sum of node allocations"
    for app in apps.values():
        assert same(app.allocated, add(*(a.resource for a in app.allocations))), (
            f"app {app.application_id}: allocated != its allocations"
        )
    if rm is not None:
        # the RM's view of this partition: allocations name the partition without the [rm] prefix
        short = partition.split("]", 1)[-1]
        live: dict[str, dict[str, int]] = {}
        with rm.lock:
            mine = [a for a in rm.live.values() if (a.partition_name or "default") == short]
        for allocation in mine:
            live[allocation.application_id] = add(
                live.get(allocation.application_id, {}), allocation.resource_per_alloc
            )
        for app_id in set(live) | set(apps):
            core_view = apps[app_id].allocated if app_id in apps else {}
            assert same(live.get(app_id, {}), core_view), f"RM view of {app_id} != core's"


def release_kinds(rm: t.RecordingRM) -> list[si.TerminationType]:
    return [kind for _, kind, _ in rm.release_reasons()]


ACTOR_THREAD_PREFIXES = (
    "korral",
    "Registrar",
    "RMProxyActor",
    "PartitionActor",
    "SchedulerActor",
    "CallbackDispatcher",
)


def korral_threads() -> list[str]:
    """Names of live threads that belong to a korral core (its actors, pools and timer)."""
    return [
        thread.name
        for thread in threading.enumerate()
        if thread.name.startswith(ACTOR_THREAD_PREFIXES) or "korral" in thread.name.lower()
    ]
