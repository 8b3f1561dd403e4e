"""engine="ray": partitions in Ray actor processes behind the same korral.Core.

The tests shared with engine="threads" are the ones parametrized over the ``engine`` fixture
(test_core_scheduling.py, test_core_config.py, the predicates tests). Here: what only the Ray engine
has -- a partition's process that dies, placement on a multi-node cluster, and that the threads
engine never needs Ray.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from core_helpers import (
    FAST,
    NODE,
    SMALL,
    TWO_LEAVES,
    add_apps,
    add_nodes,
    check_invariants,
    collect_errors,
    eventually,
    part,
)

import korral
from korral import si
from korral import testing as t


def test_threads_engine_never_imports_ray():
    script = (
        "import sys, korral\n"
        "core = korral.start()\n"
        "core.stop()\n"
        "assert 'ray' not in sys.modules, 'engine=threads imported ray'\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


def test_unknown_engine_and_stray_ray_address_are_refused():
    with pytest.raises(ValueError, match="engine must be one of"):
        korral.start(engine="processes")
    with pytest.raises(ValueError, match="ray_address"):
        korral.start(ray_address="127.0.0.1:6379")


OWN_INSTANCE_SCRIPT = textwrap.dedent(
    """
    import korral
    from korral import testing as t

    config = (
        'partitions:\\n  - name: default\\n    queues:\\n      - name: root\\n        submitacl: "*"\\n'
        '        queues:\\n          - name: a\\n'
    )
    rm = t.RecordingRM("rm")
    with korral.start(engine="ray") as core:
        core.register_resource_manager(t.register("rm", config), rm)
        core.update_node(t.nodes("rm", ["n1"], {"memory": 100, "vcore": 10}))
        core.update_application(t.applications("rm", {"app": "root.a"}))
        core.update_allocation(t.asks("rm", "app", 2, {"memory": 10, "vcore": 1}))
        assert rm.wait_for_allocations(2, timeout=120), (rm.rejected_apps, rm.rejected_asks)
    print("allocated:", rm.allocated_total)
    """
)


@pytest.mark.slow
@pytest.mark.xdist_group("ray")  # a Ray instance of its own: not beside the session's, on the other worker
@pytest.mark.timeout(360)
def test_without_an_address_korral_starts_a_ray_instance_of_its_own_whatever_the_environment_names():
    # api.md: ray_address=None starts a local Ray instance. Ray's own default would join the cluster
    # RAY_ADDRESS names (or the last one started on the machine): here nothing listens there.
    pytest.importorskip("ray", reason='engine="ray" tests need Ray: pip install "korral[ray]"')
    environment = {**os.environ, "RAY_ADDRESS": "127.0.0.1:9"}
    result = subprocess.run(
        [sys.executable, "-c", OWN_INSTANCE_SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "allocated: 2" in result.stdout


def _allocate(core: korral.Core, rm: t.RecordingRM, app: str, count: int, prefix: str) -> None:
    before = rm.allocated_total
    core.update_allocation(t.asks(rm.rm_id, app, count, SMALL, prefix=prefix))
    assert rm.wait_for_allocations(before + count, timeout=60), rm.rejected_asks


@pytest.mark.usefixtures("ray_session")
def test_a_killed_partition_process_is_reported_and_rebuilt_by_reregistration():
    killed, other = t.RecordingRM("killed"), t.RecordingRM("other")
    with collect_errors(), korral.start(engine="ray", **FAST) as core:
        for rm in (killed, other):
            core.register_resource_manager(t.register(rm.rm_id, TWO_LEAVES), rm)
            add_nodes(core, rm, ["n1", "n2"], NODE)
            add_apps(core, rm, {"app1": "root.a", "app2": "root.a"})
            _allocate(core, rm, "app1", 3, "first-")
            _allocate(core, rm, "app2", 2, "first-")
        core.wait_until_idle(60)
        assert len(killed.live) == 5 and len(other.live) == 5

        host = next(p for p in core._ray.partitions() if p.name == part("killed"))
        _, pid = host.where()
        assert pid != os.getpid()
        os.kill(pid, signal.SIGKILL)

        # the killed RM is told: every live allocation released, its applications failed, nodes gone
        assert killed.wait_for(lambda r: not r.live, timeout=60), killed.live
        assert killed.wait_for(lambda r: {"n1", "n2"} <= set(r.rejected_nodes), timeout=60)
        assert all(killed.app_states[app][-1] == "Failed" for app in ("app1", "app2"))
        assert all("lost" in message for _, _, message in killed.release_reasons())
        assert "lost" in killed.rejected_nodes["n1"]

        # the other RM keeps scheduling meanwhile, and the core still becomes idle
        _allocate(core, other, "app1", 4, "after-")
        core.wait_until_idle(60)
        check_invariants(core, part("other"), other)
        # the lost partition reads as absent; its requests are rejected item by item, with the reason
        assert core.partition(part("killed")) is None
        assert [p.name for p in core.partitions()] == [part("other")]
        core.update_allocation(t.asks("killed", "app1", 1, SMALL, prefix="late-"))
        eventually(lambda: "late-0" in killed.rejected_asks_by_key(), timeout=60)
        assert "lost" in killed.rejected_asks_by_key()["late-0"]

        # re-registering the RM rebuilds its partition in a new process
        reborn = t.RecordingRM("killed")
        core.register_resource_manager(t.register("killed", TWO_LEAVES), reborn)
        add_nodes(core, reborn, ["n1", "n2"], NODE)
        add_apps(core, reborn, {"app1": "root.a"})
        _allocate(core, reborn, "app1", 3, "again-")
        core.wait_until_idle(60)
        check_invariants(core, part("killed"), reborn)
        check_invariants(core, part("other"), other)
        assert len(reborn.live) == 3 and len(other.live) == 9
        assert not other.released and not other.foreign and not reborn.foreign
        new_host = next(p for p in core._ray.partitions() if p.name == part("killed"))
        assert new_host.where()[1] != pid


@pytest.mark.usefixtures("ray_session")
def test_each_rm_partition_runs_in_its_own_process_and_stop_removes_them():
    with korral.start(engine="ray", **FAST) as core:
        rms = [t.RecordingRM(f"rm{i}") for i in range(2)]
        for rm in rms:
            core.register_resource_manager(t.register(rm.rm_id, TWO_LEAVES), rm)
        pids = {p.where()[1] for p in core._ray.partitions()}
        assert len(pids) == 2 and os.getpid() not in pids
        hosts = core._ray.partitions()
    assert core._ray.partitions() == []
    assert all(not host.is_alive for host in hosts)


@pytest.mark.usefixtures("ray_session")
def test_predicates_cross_to_the_driver_once_per_decision_with_every_candidate_node():
    asked: list[str] = []

    def only_n6(args: si.PredicatesArgs) -> bool:
        asked.append(args.node_id)
        return args.node_id == "n6"

    rm = t.RecordingRM("rm", predicate=only_n6)
    with collect_errors() as errors, korral.start(engine="ray", **FAST) as core:
        core.register_resource_manager(t.register("rm", TWO_LEAVES), rm)
        add_nodes(core, rm, [f"n{i}" for i in range(8)], NODE)
        add_apps(core, rm, {"app1": "root.a"})
        _allocate(core, rm, "app1", 1, "x-")
        core.wait_until_idle(60)
        host = core._ray.partitions()[0]
        # one decision, one round trip; behind it the RM was asked node by node up to the one it took
        assert host.predicates_calls == 1
        assert asked[-1] == "n6" and len(set(asked)) == len(asked), asked
        assert [a.node_id for a in rm.live.values()] == ["n6"]
        assert errors.messages() == []


@pytest.mark.usefixtures("ray_session")
def test_a_partition_ray_could_not_place_where_asked_runs_elsewhere_and_says_so(monkeypatch, caplog):
    import ray

    from korral.actors.ray import engine as ray_engine

    # a node the cluster lists as alive but Ray cannot schedule on (one that has only just joined)
    unknown = "ab" * 28
    monkeypatch.setattr(ray_engine.ray, "nodes", lambda: [{"NodeID": unknown, "Alive": True}])
    rm = t.RecordingRM("rm")
    with caplog.at_level("WARNING", logger="korral.ray"), korral.start(engine="ray", **FAST) as core:
        core.register_resource_manager(t.register("rm", TWO_LEAVES), rm)
        add_nodes(core, rm, ["n1"], NODE)
        add_apps(core, rm, {"app1": "root.a"})
        _allocate(core, rm, "app1", 2, "x-")
        node_id, _ = core._ray.partitions()[0].where()
        assert node_id == ray.get_runtime_context().get_node_id() != unknown
    warnings = [r.getMessage() for r in caplog.records if r.name == "korral.ray"]
    assert len(warnings) == 1 and unknown in warnings[0] and node_id in warnings[0], warnings


CLUSTER_SCRIPT = textwrap.dedent(
    """
    import korral
    from korral import testing as t
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    # The driver's raylet learns of a new node a little after the cluster does; until then a soft
    # affinity to it falls back to the local node. Wait until a hard affinity to each node runs there.
    import time
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)

    @ray.remote(num_cpus=0)
    def node_id():
        return ray.get_runtime_context().get_node_id()

    deadline = time.monotonic() + 120
    for node in [n["NodeID"] for n in ray.nodes() if n.get("Alive")]:
        strategy = NodeAffinitySchedulingStrategy(node, soft=False)
        while True:
            try:
                if ray.get(node_id.options(scheduling_strategy=strategy).remote(), timeout=30) == node:
                    break
            except Exception:
                pass
            assert time.monotonic() < deadline, "node never schedulable: " + node
            time.sleep(0.2)
    config = (
        'partitions:\\n  - name: default\\n    queues:\\n      - name: root\\n        submitacl: "*"\\n'
        '        queues:\\n          - name: a\\n'
    )
    import logging

    misplaced = []

    class Misplaced(logging.Handler):
        def emit(self, record):
            misplaced.append(record.getMessage())

    logging.getLogger("korral.ray").addHandler(Misplaced(logging.WARNING))
    try:
        # Even after that wait, Ray's soft affinity sometimes still puts a partition on another node
        # than korral chose (seen in about 1 run of 10): korral must then say so. The spread itself
        # is asked of up to three fresh starts.
        for _ in range(3):
            misplaced.clear()
            with korral.start(engine="ray", ray_address=cluster.address) as core:
                rms = [t.RecordingRM(f"rm{i}") for i in range(4)]
                for rm in rms:
                    core.register_resource_manager(t.register(rm.rm_id, config), rm)
                    core.update_node(t.nodes(rm.rm_id, ["n1"], {"memory": 100, "vcore": 10}))
                    core.update_application(t.applications(rm.rm_id, {"app": "root.a"}))
                    core.update_allocation(t.asks(rm.rm_id, "app", 3, {"memory": 10, "vcore": 1}))
                core.wait_until_idle(60)
                assert all(len(rm.live) == 3 for rm in rms), [len(rm.live) for rm in rms]
                nodes = {p.where()[0] for p in core._ray.partitions()}
            print("partition nodes:", len(nodes))
            if len(nodes) == 2:
                break
            # korral placed two partitions on each node in turn: the two Ray moved were reported
            assert len(misplaced) == 2, misplaced
    finally:
        ray.shutdown()
        cluster.shutdown()
    """
)


@pytest.mark.slow
@pytest.mark.xdist_group("ray")  # a second Ray cluster: never beside the session's, on the other worker
@pytest.mark.timeout(360)  # its subprocess may take its own 300 s on a slow, loaded machine
def test_partitions_are_placed_on_every_node_of_a_cluster():
    pytest.importorskip("ray", reason='engine="ray" tests need Ray: pip install "korral[ray]"')
    # its own process: a second Ray cluster cannot share this one's driver connection
    result = subprocess.run(
        [sys.executable, "-c", CLUSTER_SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "partition nodes: 2" in result.stdout


# ---- the plain parts of the engine, without a Ray instance ---------------------------------------------


def test_outbox_keeps_callbacks_until_acknowledged_and_says_when_drained():
    ray_host = pytest.importorskip("korral.actors.ray.host", reason="needs Ray: pip install korral[ray]")
    outbox = ray_host.CallbackOutbox()
    assert outbox.take(0, timeout=0.0) == [] and outbox.wait_drained(0.0)
    outbox.put("a")
    outbox.put("b")
    assert outbox.take(0, timeout=0.0) == [(1, "a"), (2, "b")]
    assert not outbox.wait_drained(0.0)  # taken, not yet acknowledged: a poll can fail on its way back
    assert outbox.take(1, timeout=0.0) == [(2, "b")]
    assert outbox.take(2, timeout=0.0) == [] and outbox.wait_drained(0.0)


def test_ledger_knows_what_is_live_from_callbacks_and_routed_releases():
    from korral.actors.messages import (
        Deliver,
        RouteAllocationRequest,
        RouteApplicationRequest,
        RouteNodeRequest,
    )
    from korral.actors.ray.ledger import Ledger

    ledger = Ledger()
    allocations = [
        si.Allocation(allocation_key=f"k{i}", application_id="app", uuid=f"u{i}") for i in range(3)
    ]
    ledger.delivered(Deliver(argument=si.AllocationResponse(new=allocations)))
    ledger.delivered(Deliver(argument=si.AllocationResponse(released=[si.AllocationRelease(uuid="u0")])))
    ledger.routed(RouteAllocationRequest(request=t.release("rm", "app", uuid="u1")))
    assert set(ledger.allocations) == {"u2"}
    ledger.delivered(Deliver(argument=si.NodeResponse(accepted=[si.AcceptedNode(node_id="n1")])))
    ledger.routed(RouteNodeRequest(request=t.node_action("rm", "n2", si.NodeAction.DECOMISSION)))
    assert ledger.nodes == {"n1"}
    ledger.routed(RouteNodeRequest(request=t.node_action("rm", "n1", si.NodeAction.DECOMISSION)))
    assert ledger.nodes == set()
    accepted = si.ApplicationResponse(
        accepted=[si.AcceptedApplication(application_id=a) for a in ("a1", "a2", "a3")]
    )
    ledger.delivered(Deliver(argument=accepted))
    done = si.ApplicationResponse(updated=[si.UpdatedApplication(application_id="a1", state="Completed")])
    ledger.delivered(Deliver(argument=done))
    ledger.routed(RouteApplicationRequest(request=t.remove_applications("rm", ["a2"])))
    assert ledger.applications == {"a3"}


def test_the_wire_carries_asks_and_allocations_as_records_and_rebuilds_them_equal():
    from korral.actors.messages import ApplyConfig, Deliver, RouteAllocationRequest, RouteNodeRequest
    from korral.actors.ray.wire import decode_callbacks, decode_tells, encode_callbacks, encode_tells

    asks = [
        si.AllocationAsk(
            allocation_key=f"k{i}",
            application_id="app",
            partition_name="default",
            resource_ask={"memory": 10 + i, "vcore": 1},
            max_allocations=1 + i,
            priority=-i,
            execution_timeout_milliseconds=i * 1000,
            tags={"kubernetes.io/meta/namespace": f"ns{i}"},
            task_group_name="tg" if i else "",
            placeholder=bool(i % 2),
            originator=not i % 2,
            preemption_policy=si.PreemptionPolicy(allow_preempt_self=True) if i else None,
        )
        for i in range(3)
    ]
    releases = si.AllocationReleasesRequest(
        allocations_to_release=[si.AllocationRelease(application_id="app", uuid="u9")]
    )
    config = ApplyConfig(config=None)  # type: ignore[arg-type]
    tells = [
        RouteNodeRequest(request=t.node_action("rm", "n1", si.NodeAction.DRAIN_NODE)),
        RouteAllocationRequest(request=si.AllocationRequest(asks=asks, releases=releases, rm_id="rm")),
        config,
        RouteAllocationRequest(request=si.AllocationRequest(releases=releases, rm_id="rm")),
    ]
    rebuilt = decode_tells(encode_tells(tells))
    assert rebuilt == tells
    assert all(type(a) is si.AllocationAsk for a in rebuilt[1].request.asks)
    assert rebuilt[1].request.asks[1].resource_ask == {"memory": 11, "vcore": 1}

    allocations = [
        si.Allocation(
            allocation_key=f"k{i}",
            allocation_tags={"a": str(i)},
            uuid=f"u{i}",
            resource_per_alloc={"memory": 10},
            priority=i,
            node_id="n1",
            application_id="app",
            partition_name="[rm]default",
            task_group_name="tg",
            placeholder=bool(i),
        )
        for i in range(2)
    ]
    response = si.AllocationResponse(
        new=allocations,
        released=[si.AllocationRelease(uuid="u7", termination_type=si.TerminationType.TIMEOUT)],
        rejected=[si.RejectedAllocationAsk(allocation_key="k9", reason="no")],
    )
    callbacks = [
        (1, Deliver(argument=response)),
        (2, Deliver(argument=si.AllocationResponse(rejected=response.rejected))),
        (3, Deliver(argument=si.NodeResponse(accepted=[si.AcceptedNode(node_id="n")]))),
    ]
    assert decode_callbacks(encode_callbacks(callbacks)) == callbacks
