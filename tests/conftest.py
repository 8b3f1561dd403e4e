"""Shared fixtures: a fake clock, partition / reference scheduler factories, and model invariants.

Every partition built through ``make_partition`` and every reference scheduler built through
``make_reference`` is checked against the model's invariants when the test ends, so each scenario
also proves the books still balance afterwards.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator

import pytest

# Ray on a loaded machine (make test-ray beside CPU hogs): a worker process may take more than Ray's
# default 60 s to start and register, and the GCS to answer; Ray reads these from the environment, in
# this process and in the Ray processes it starts, the test scripts' subprocesses too. (The raylet's
# own 30 s to register is fixed in Ray; make test-ray runs these tests alone so nothing competes.)
os.environ.setdefault("RAY_worker_register_timeout_seconds", "300")
os.environ.setdefault("RAY_gcs_server_request_timeout_seconds", "300")

# Hypothesis fails an example that runs past 200 ms by default: beside two CPU hogs a sound example can,
# so no property test may depend on how fast the machine is.
try:
    from hypothesis import settings as hypothesis_settings
except ImportError:  # no hypothesis: its tests are not collected either
    hypothesis_settings = None
if hypothesis_settings is not None:
    hypothesis_settings.register_profile("korral", deadline=None)
    hypothesis_settings.load_profile("korral")

try:
    import coverage
except ImportError:  # pytest without pytest-cov: nothing measures
    coverage = None

from korral import resource as res
from korral.config import load_config
from korral.harness.reference import ReferenceScheduler
from korral.model.app.application import MAX_PRIORITY, MIN_PRIORITY, RUNNING_STATES
from korral.model.partition.composed import PartitionModel
from korral.model.queue import Queue, QueueState
from korral.policies.sorting import node_usage_score


@pytest.fixture(autouse=True)
def _korral_log_level_restored() -> Iterator[None]:
    """The command line run in-process (click's CliRunner) silences the "korral" logger for a stress
    run's duration and a process's life: a later test that reads korral's log must still see it."""
    logger = logging.getLogger("korral")
    level = logger.level
    yield
    logger.setLevel(level)


@pytest.fixture
def quiet_simulation() -> Iterator[None]:
    """For the simulated stress's tests (``pytestmark = pytest.mark.usefixtures("quiet_simulation")``):
    its RMs do things the core rejects on purpose, so korral's log is kept to CRITICAL; and no planted
    fault stays enabled after a test."""
    from korral.harness import faults

    logger = logging.getLogger("korral")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)
    faults.disable_all()


class FakeClock:
    """A clock tests move by hand: ``clock.now = 5.0`` or ``clock.advance(2.0)``."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _total(resources) -> dict[str, int]:
    total: dict[str, int] = {}
    for resource in resources:
        res.add_into(total, resource)
    return total


def check_invariants(partition: PartitionModel) -> None:
    """The model's books balance: nodes, applications, queues, reservations and the partition total."""
    nodes = partition.nodes
    assert res.equals(partition.capacity, _total(n.capacity for n in nodes.values())), "partition capacity"
    for node in nodes.values():
        allocated = _total(a.resource for a in node.allocations.values())
        assert res.equals(res.add(res.add(allocated, node.occupied), node.available), node.capacity), (
            f"node {node.node_id}: capacity != allocated + occupied + available"
        )
        assert res.equals(node.allocated, allocated), f"node {node.node_id} allocated"
        for uuid, allocation in node.allocations.items():
            app = partition.applications.get(allocation.application_id)
            assert app is not None and uuid in app.allocations, f"orphan allocation {uuid} on {node.node_id}"
        for holder in node.reservations:
            assert partition.reservations.get(holder) == node.node_id, "node reservation"
        if len(node.reservations) > 1:  # several only when each requires this node (YUNIKORN-2976)
            for app_id, key in node.reservations:
                ask = partition.applications[app_id].asks.get(key)
                assert ask is not None and ask.required_node == node.node_id, "shared normal reservation"
    for app in partition.applications.values():
        assert res.equals(app.allocated, _total(a.resource for a in app.allocations.values())), (
            "app allocated"
        )
        for uuid, allocation in app.allocations.items():
            assert uuid in nodes[allocation.node_id].allocations, f"allocation {uuid} missing on its node"
        queue = partition.queues[app.queue_path]
        assert queue.applications.get(app.application_id) is app, "application not in its queue"
        check_gang_books(app)
    for (app_id, key), node_id in partition.reservations.items():
        assert (app_id, key) in nodes[node_id].reservations, "reservation not on its node"
        assert partition.applications[app_id].reservations.get(key) == node_id, "reservation not on its app"
    for queue in partition.queues.values():
        if queue.is_leaf:
            members = list(queue.applications.values())
            running = sum(1 for app in members if app.state in RUNNING_STATES)
        else:
            members = list(queue.children.values())
            running = sum(child.running_apps for child in members)
        assert res.equals(queue.allocated, _total(m.allocated for m in members)), f"{queue.path} allocated"
        assert res.equals(queue.pending, _total(m.pending for m in members)), f"{queue.path} pending"
        assert queue.running_apps == running, f"{queue.path} running applications"
    root_used = _total(a.resource for n in nodes.values() for a in n.allocations.values())
    assert res.equals(partition.root.allocated, root_used), "root allocated != sum of node allocations"
    check_user_group_usage(partition)
    check_orders(partition)


def check_gang_books(app) -> None:
    """Placeholder usage is the sum of allocated placeholders; the free-placeholder index, the
    releasing marks and the waiting replacements all refer to allocations the application holds."""
    placeholders = [a for a in app.allocations.values() if a.placeholder]
    assert res.equals(app.placeholder_allocated, _total(a.resource for a in placeholders)), (
        f"app {app.application_id} placeholder usage"
    )
    indexed = {uuid for group in app.placeholders.values() for uuid in group}
    free = {a.uuid for a in placeholders if a.uuid not in app.releasing}
    assert indexed == free, f"app {app.application_id}: placeholders free for replacement"
    assert set(app.releasing) <= set(app.allocations), f"app {app.application_id}: releasing unknown"
    for uuid in app.replacements:
        assert app.releasing.get(uuid) is not None, f"app {app.application_id}: replacement not releasing"


def check_user_group_usage(partition: PartitionModel) -> None:
    """User and group usage, where the tracker keeps it, equals a recount from the applications'
    allocations; every limited application counts into it, and only those hold a tracking."""
    expected: dict[tuple[str, str, str], dict[str, int]] = {}
    running: dict[tuple[str, str, str], set[str]] = {}
    for app in partition.applications.values():
        owners = [("user", app.user)] + ([("group", app.limit_group)] if app.limit_group else [])
        parts = app.queue_path.split(".")
        for depth in range(len(parts)):
            path = ".".join(parts[: depth + 1])
            for kind, name in owners:
                key = (kind, name, path)
                res.add_into(expected.setdefault(key, {}), app.allocated)
                if app.allocations:
                    running.setdefault(key, set()).add(app.application_id)
    tracker = partition.ugm
    for kind, table in (("user", tracker.users), ("group", tracker.groups)):
        for name, by_path in table.items():
            for path, usage in by_path.items():
                key = (kind, name, path)
                assert res.equals(usage.resource, expected.get(key, {})), f"{kind} {name} usage at {path}"
                assert usage.running == running.get(key, set()), f"{kind} {name} running apps at {path}"
    for app in partition.applications.values():
        tracking = tracker.apps.get(app.application_id)
        assert tracking is not None, f"{app.application_id} not tracked"
        assert (app.user_limits is tracking) if tracking.usages else app.user_limits is None
        if tracking.usages:
            assert tracking.allocations == len(app.allocations), f"{app.application_id} allocations counted"


def _live(order) -> list[tuple]:
    return list(order.live_entries())


def _expected_priority(queue: Queue) -> int:
    """A queue's priority from scratch: its members' highest, then the queue's offset or fence."""
    members = list(queue.order)
    highest = max((m.priority for m in members), default=MIN_PRIORITY)
    if highest == MIN_PRIORITY:
        return MIN_PRIORITY
    if queue.priority_fence:
        return queue.priority_offset
    if queue.priority_offset:
        return max(MIN_PRIORITY, min(MAX_PRIORITY, highest + queue.priority_offset))
    return highest


def check_orders(partition: PartitionModel) -> None:
    """Every incrementally kept order equals sorting from scratch, and every queue priority equals its
    recomputation: the scheduler's shortcuts (re-keying only what moved) never leave one stale."""
    if partition.registry.limits_dirty:
        return  # orders are rebuilt before the next scheduling cycle
    for app in partition.applications.values():
        expected = sorted(
            (-a.priority, a.create_time, a.create_seq, a.allocation_key)
            for a in app.asks.values()
            if a.pending
        )
        assert _live(app.pending_asks) == expected, f"{app.application_id}: ask order"
    for queue in partition.queues.values():
        if queue.is_leaf:
            expected = sorted(
                (*queue.app_key(app), app.application_id)
                for app in queue.applications.values()
                if app.pending_asks
            )
        else:
            expected = sorted(
                (*queue.child_key(child), child.name)
                for child in queue.children.values()
                if child.pending and child.state is not QueueState.STOPPED
            )
        assert _live(queue.order) == expected, f"{queue.path}: order of its members"
    for queue in sorted(partition.queues.values(), key=lambda q: -q.path.count(".")):
        assert queue.priority == _expected_priority(queue), f"{queue.path}: priority"
    expected_nodes = []
    for node in partition.nodes.values():
        if (
            node.schedulable
            and node.reservation is None
            and any(quantity > 0 for quantity in node.available.values())
        ):
            score = node_usage_score(node, partition.resource_weights)
            if partition.node_sort_policy == "binpacking":
                score = 1.0 - score
            expected_nodes.append((score, node.node_id))
    assert _live(partition.node_order) == sorted(expected_nodes), "node order"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def invariants() -> Callable[[PartitionModel], None]:
    """``invariants(partition)``: assert the books balance in the middle of a scenario."""
    return check_invariants


@pytest.fixture
def make_partition(clock: FakeClock) -> Iterator[Callable[..., PartitionModel]]:
    """``make_partition(yaml_text, **kwargs)``: the config's first partition on the fake clock."""
    made: list[PartitionModel] = []

    def make(config_text: str, **kwargs) -> PartitionModel:
        kwargs.setdefault("clock", clock)
        config = load_config(config_text)
        partition = PartitionModel("[rm]default", config.partitions[0], rm_id="rm", **kwargs)
        made.append(partition)
        return partition

    yield make
    for partition in made:
        check_invariants(partition)


@pytest.fixture
def make_reference(clock: FakeClock) -> Iterator[Callable[..., ReferenceScheduler]]:
    """``make_reference(yaml_text, **kwargs)``: a reference scheduler on the fake clock."""
    made: list[ReferenceScheduler] = []

    def make(config_text: str = "", **kwargs) -> ReferenceScheduler:
        kwargs.setdefault("clock", clock)
        scheduler = ReferenceScheduler(config_text, **kwargs)
        made.append(scheduler)
        return scheduler

    yield make
    for scheduler in made:
        for partition in scheduler.partitions.values():
            check_invariants(partition)


# ---- engines: the end-to-end tests that make sense for both run against both ---------------------------


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """One local Ray instance for the whole session (it takes seconds to start); shut down at the end."""
    ray = pytest.importorskip("ray", reason='engine="ray" tests need Ray: pip install "korral[ray]"')
    started = False
    if not ray.is_initialized():
        # "local": never the cluster a timed-out test_ray_engine subprocess may have left behind
        ray.init(
            address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False
        )
        started = True
    yield
    if started:
        ray.shutdown()


@pytest.fixture(params=["threads", "ray"])
def engine(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs the test once per engine: ``core_helpers.running(...)`` starts the core on it."""
    from core_helpers import ENGINE

    if request.param == "ray":
        request.getfixturevalue("ray_session")
    ENGINE["name"] = request.param
    try:
        yield request.param
    finally:
        ENGINE["name"] = "threads"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that starts Ray is marked ``ray`` and ``slow``, every ``no_cover`` one ``slow`` (the
    second tier, make test-all); first among the hooks, so that ``-m`` sees these marks.

    Under pytest-xdist (make test: ``-n 2 --dist loadgroup``) every test on the Ray engine runs on one
    worker, which starts the session's one local Ray instance; two would compete for its ports and CPUs.

    First among the hooks: xdist reads the ``xdist_group`` mark in its own ``pytest_collection_modifyitems``
    (to suffix the test's id with its group), and it is registered after this file, so it runs before
    an ordinary hook here would have added the mark: the Ray tests were spread over both workers, each
    starting a Ray instance, and a loaded machine's second one could time out starting."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_ray = callspec is not None and callspec.params.get("engine") == "ray"
        starts_ray = on_ray or "ray_session" in getattr(item, "fixturenames", ())
        if starts_ray:
            item.add_marker(pytest.mark.xdist_group("ray"))
        if starts_ray or any(mark.args == ("ray",) for mark in item.iter_markers("xdist_group")):
            # the second tier, on their own (make test-ray): a Ray instance starting beside other
            # tests on a loaded machine can miss Ray's own start-up deadline (pyproject.toml: ray)
            item.add_marker(pytest.mark.ray)
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("no_cover") is not None:
            item.add_marker(pytest.mark.slow)  # a long run by definition (pyproject.toml: no_cover)
        if on_ray and item.get_closest_marker("timeout") is None:
            # a registration on Ray starts a process per partition and may wait 60 s plus 60 s for each
            # (api.md): beside CPU hogs that outgrew pytest's 120 s, which a hang still reaches at 300
            item.add_marker(pytest.mark.timeout(300))


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A ``no_cover`` test runs untraced under pytest-xdist too.

    pytest-cov pauses its own measurement for it (a wrapper around this one), but an xdist worker is a
    subprocess of a measured process and so runs a second ``coverage.Coverage`` from its start-up
    (coverage's subprocess support), which kept tracing: the marked tests took as long as before. Inside
    pytest-cov's pause, whatever still measures is stopped here and started again after the test,
    innermost last, so the measurements stack as they were."""
    if coverage is None or item.get_closest_marker("no_cover") is None:
        yield
        return
    stopped: list[coverage.Coverage] = []
    while (running := coverage.Coverage.current()) is not None:
        running.stop()
        stopped.append(running)
    try:
        yield
    finally:
        for measurement in reversed(stopped):
            measurement.start()


class _GroupingCheck:
    """Fails the run at collection when ``--dist loadgroup`` did not group a test with an
    ``xdist_group`` mark: pytest 9.2 moved a node's id where pytest-xdist 3.8 does not look, and the
    grouping stopped without a word (the Ray tests then flaked on loaded machines)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not getattr(config.option, "loadgroup", False):
            return
        for item in items:
            if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid:
                raise pytest.UsageError(
                    f"--dist loadgroup did not group {item.nodeid}: this pytest and pytest-xdist disagree "
                    "on where a test's id is kept (see the pytest pin in pyproject.toml)"
                )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_GroupingCheck(), "korral-grouping-check")
