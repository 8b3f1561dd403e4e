"""The SI over gRPC end to end, over real loopback sockets: korral.connect, raw stubs compiled from the
shipped proto, isolation between RMs, disconnects, and hostile input."""

from __future__ import annotations

import asyncio
import importlib.resources
import json
import logging
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from core_helpers import FAST, NODE, SMALL, TWO_LEAVES, collect_errors, eventually, korral_threads, part

import korral
from korral import si
from korral import testing as t
from korral.server.grpc_server import MAX_STREAMS_PER_CONNECTION
from korral.si import si_pb2

SERVICE = "/si.v1.Scheduler/"


@pytest.fixture
def served() -> Iterator[tuple[korral.Core, str]]:
    with korral.start(**FAST) as core:
        yield core, core.serve_grpc("127.0.0.1:0")


def _scenario(sink: korral.Core | korral.RemoteCore, rm: t.RecordingRM) -> None:
    """Three nodes, two applications in two queues, 40 asks of which 30 fit."""
    sink.register_resource_manager(t.register(rm.rm_id, TWO_LEAVES), rm)
    sink.update_node(t.nodes(rm.rm_id, ["n1", "n2", "n3"], NODE))
    assert rm.wait_for(lambda r: len(r.accepted_nodes) == 3)
    sink.update_application(t.applications(rm.rm_id, {"app-a": "root.a", "app-b": "root.b"}))
    assert rm.wait_for(lambda r: len(r.accepted_apps) == 2)
    # one request: the core takes it whole, so both cores see the same asks at once
    both = t.asks(rm.rm_id, "app-a", 20, SMALL).asks + t.asks(rm.rm_id, "app-b", 20, SMALL).asks
    sink.update_allocation(si.AllocationRequest(rm_id=rm.rm_id, asks=both))


def _allocated(rm: t.RecordingRM) -> list[tuple[str, str, tuple]]:
    with rm.lock:
        return sorted(
            (a.application_id, a.allocation_key, tuple(sorted(a.resource_per_alloc.items())))
            for a in rm.live.values()
        )


def _raw_channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address)


def _open_stream(channel: grpc.Channel, method: str, requests: list[bytes]) -> grpc.Future:
    call = channel.stream_stream(SERVICE + method)
    return call(iter(requests), timeout=30)


# ---- korral.connect -------------------------------------------------------------------------------------


def test_a_remote_rm_gets_the_same_allocations_as_an_in_process_one() -> None:
    with korral.start(**FAST) as core:
        local = t.RecordingRM("rm")
        _scenario(core, local)
        core.wait_until_idle()
        assert local.allocated_total == 30
        expected = _allocated(local)
        expected_usage = core.queue(part("rm"), "root").allocated

    with collect_errors() as errors, korral.start(**FAST) as core:
        address = core.serve_grpc("127.0.0.1:0")
        assert address.startswith("127.0.0.1:")
        remote_rm = t.RecordingRM("rm")
        with korral.connect(address) as remote:
            _scenario(remote, remote_rm)
            assert remote_rm.wait_for_allocations(30)
            core.wait_until_idle()
            assert _allocated(remote_rm) == expected
            assert core.queue(part("rm"), "root").allocated == expected_usage
            assert remote_rm.foreign == [] and remote_rm.allocated_total == 30
            # app state changes come back on the application stream
            assert remote_rm.wait_for(lambda r: "Running" in r.app_states["app-a"])
            # releases go over the wire both ways
            uuid = next(iter(remote_rm.live))
            remote.update_allocation(t.release("rm", remote_rm.live[uuid].application_id, uuid=uuid))
            assert remote_rm.wait_for(lambda r: uuid not in r.live)
            assert remote_rm.released[-1].termination_type == si.TerminationType.STOPPED_BY_RM
        assert errors.messages() == []


def test_remote_config_errors_and_unregistered_rms_raise_as_in_process(served) -> None:
    core, address = served
    with korral.connect(address) as remote:
        with pytest.raises(korral.ConfigError, match="invalid YAML"):
            remote.register_resource_manager(t.register("rm", "partitions: [broken"))
        remote.register_resource_manager(t.register("rm", TWO_LEAVES), t.RecordingRM("rm"))
        with pytest.raises(korral.ConfigError):
            remote.update_configuration(si.UpdateConfigurationRequest(rm_id="rm", config="partitions: [x"))
        with pytest.raises(korral.SchedulerError, match='RmID="ghost" not registered'):
            remote.update_allocation(t.asks("ghost", "app", 1, SMALL))
        with pytest.raises(korral.SchedulerError, match="not registered"):
            remote.update_configuration(si.UpdateConfigurationRequest(rm_id="ghost", config=TWO_LEAVES))
        # a valid update goes through and changes the core's queues
        remote.update_configuration(
            si.UpdateConfigurationRequest(rm_id="rm", config=TWO_LEAVES.replace("- name: b", "- name: c"))
        )
        assert core.queue(part("rm"), "root.c") is not None
    with pytest.raises(korral.SchedulerError, match="closed"):
        remote.update_node(t.nodes("rm", ["n"], NODE))


def test_remote_items_of_a_bad_shape_are_rejected_one_by_one_as_in_process(served) -> None:
    _, address = served
    rm = t.RecordingRM("rm")
    with korral.connect(address) as remote:
        remote.register_resource_manager(t.register("rm", TWO_LEAVES), rm)
        remote.update_node(t.nodes("rm", ["n1"], NODE))
        remote.update_application(t.applications("rm", {"app": "root.a"}))
        assert rm.wait_for(lambda r: r.accepted_apps == ["app"])
        good = si.AllocationAsk(
            allocation_key="good", application_id="app", resource_ask=SMALL, max_allocations=1
        )
        bad = si.AllocationAsk(allocation_key="bad", application_id="app", resource_ask={"memory": "10M"})
        remote.update_allocation(si.AllocationRequest(rm_id="rm", asks=[good, bad]))
        assert rm.wait_for(lambda r: r.allocated_total == 1 and len(r.rejected_asks) == 1)
        assert rm.rejected_asks[0].allocation_key == "bad" and rm.rejected_asks[0].reason
        assert [a.allocation_key for a in rm.live.values()] == ["good"]


def test_two_rms_over_grpc_are_isolated(served) -> None:
    core, address = served
    rm1, rm2 = t.RecordingRM("rm1"), t.RecordingRM("rm2")
    with korral.connect(address) as first, korral.connect(address) as second:
        for remote, rm, count in ((first, rm1, 5), (second, rm2, 7)):
            remote.register_resource_manager(t.register(rm.rm_id, TWO_LEAVES), rm)
            remote.update_node(t.nodes(rm.rm_id, ["n1"], NODE))  # the same node and app ids for both
            remote.update_application(t.applications(rm.rm_id, {"app": "root.a"}))
            assert rm.wait_for(lambda r: r.accepted_apps == ["app"] and r.accepted_nodes == ["n1"])
            remote.update_allocation(t.asks(rm.rm_id, "app", count, SMALL))
        assert rm1.wait_for_allocations(5) and rm2.wait_for_allocations(7)
        core.wait_until_idle()
        assert rm1.allocated_total == 5 and rm2.allocated_total == 7
        assert {a.node_id for a in rm1.live.values()} == {"n1"}
        assert core.application(part("rm1"), "app").allocated["memory"] == 5 * SMALL["memory"]
        assert core.application(part("rm2"), "app").allocated["memory"] == 7 * SMALL["memory"]


def test_one_remote_core_serves_several_rms_on_their_own_streams(served) -> None:
    core, address = served
    rms = [t.RecordingRM(f"rm{index}") for index in range(3)]
    with korral.connect(address) as remote:
        for index, rm in enumerate(rms):
            remote.register_resource_manager(t.register(rm.rm_id, TWO_LEAVES), rm)
            remote.update_node(t.nodes(rm.rm_id, ["n1"], NODE))
            remote.update_application(t.applications(rm.rm_id, {"app": "root.b"}))
            assert rm.wait_for(lambda r: r.accepted_apps == ["app"])
            remote.update_allocation(t.asks(rm.rm_id, "app", index + 1, SMALL))
        for index, rm in enumerate(rms):
            assert rm.wait_for_allocations(index + 1)
        core.wait_until_idle()
        assert [rm.allocated_total for rm in rms] == [1, 2, 3]


def test_a_client_that_disconnects_mid_stream_leaves_the_core_and_other_rms_unaffected(served) -> None:
    core, address = served
    other = t.RecordingRM("other")
    with korral.connect(address) as remote:
        remote.register_resource_manager(t.register("other", TWO_LEAVES), other)
        remote.update_node(t.nodes("other", ["n1"], NODE))
        remote.update_application(t.applications("other", {"app": "root.a"}))
        assert other.wait_for(lambda r: r.accepted_apps == ["app"])

        leaving = t.RecordingRM("leaving")
        gone = korral.connect(address)
        gone.register_resource_manager(t.register("leaving", TWO_LEAVES), leaving)
        gone.update_node(t.nodes("leaving", ["n1", "n2"], NODE))
        gone.update_application(t.applications("leaving", {"app": "root.a"}))
        assert leaving.wait_for(lambda r: r.accepted_apps == ["app"])
        gone.update_allocation(t.asks("leaving", "app", 25, SMALL))  # more than fits: some stay pending
        assert leaving.wait_for(lambda r: r.allocated_total > 0)
        gone.close()  # the streams go away while the core is still scheduling for it
        core.wait_until_idle()

        # the leaving RM stays registered with its allocations
        app = core.application(part("leaving"), "app")
        assert app is not None and app.allocated["memory"] == 20 * SMALL["memory"]
        # the other RM is served as before
        remote.update_allocation(t.asks("other", "app", 4, SMALL))
        assert other.wait_for_allocations(4)
        core.wait_until_idle()
        assert other.allocated_total == 4

        # the leaving RM comes back on a new connection: its streams broke after korral wrote on them,
        # so it registers again (resyncs) and is served as before
        back = t.RecordingRM("leaving")
        with korral.connect(address) as returning:
            with pytest.raises(korral.ResyncRequired, match="register again to resync"):
                returning.update_configuration(
                    si.UpdateConfigurationRequest(rm_id="leaving", config=TWO_LEAVES)
                )
            returning.register_resource_manager(t.register("leaving", TWO_LEAVES), back)
            returning.update_node(t.nodes("leaving", ["n1"], NODE))
            assert back.wait_for(lambda r: r.accepted_nodes == ["n1"])


# ---- raw gRPC from the shipped proto ----------------------------------------------------------------------

RAW_CLIENT = textwrap.dedent(
    """
    import json, queue, sys
    import grpc
    from grpc_tools import protoc
    import importlib.resources as resources

    out, proto, address = sys.argv[1:4]
    well_known = str(resources.files("grpc_tools") / "_proto")
    assert protoc.main(["protoc", f"-I{proto}", f"-I{well_known}", f"--python_out={out}",
                        f"--grpc_python_out={out}", "si.proto"]) == 0
    sys.path.insert(0, out)
    import si_pb2, si_pb2_grpc  # compiled just now from the shipped proto, not korral's copy

    assert "korral" not in sys.modules
    stub = si_pb2_grpc.SchedulerStub(grpc.insecure_channel(address))
    result = {}
    try:
        bad = si_pb2.RegisterResourceManagerRequest(rmID="raw", config="partitions: [")
        stub.RegisterResourceManager(bad)
    except grpc.RpcError as error:
        result["bad_config"] = [error.code().name, error.details()]
    config = ("partitions:\\n  - name: default\\n    queues:\\n      - name: root\\n"
              "        submitacl: '*'\\n        queues:\\n          - name: a\\n")
    stub.RegisterResourceManager(si_pb2.RegisterResourceManagerRequest(rmID="raw", config=config))

    def stream(method, request):
        requests = queue.Queue()
        requests.put(request)
        call = method(iter(requests.get, None), timeout=30)
        return call

    node = si_pb2.NodeInfo(nodeID="n1", action=si_pb2.NodeInfo.CREATE)
    node.schedulableResource.resources["memory"].value = 100
    node.schedulableResource.resources["vcore"].value = 10
    nodes = stream(stub.UpdateNode, si_pb2.NodeRequest(rmID="raw", nodes=[node]))
    result["nodes"] = [n.nodeID for n in next(nodes).accepted]
    apps = stream(stub.UpdateApplication, si_pb2.ApplicationRequest(rmID="raw", new=[
        si_pb2.AddApplicationRequest(applicationID="app", queueName="root.a", partitionName="default",
                                     ugi=si_pb2.UserGroupInformation(user="u"))]))
    result["apps"] = [a.applicationID for a in next(apps).accepted]
    asks = []
    for index in range(12):
        ask = si_pb2.AllocationAsk(allocationKey=f"k{index}", applicationID="app", maxAllocations=1)
        ask.resourceAsk.resources["memory"].value = 10
        asks.append(ask)
    allocations = stream(stub.UpdateAllocation, si_pb2.AllocationRequest(rmID="raw", asks=asks))
    new = []
    while len(new) < 10:
        response = next(allocations)
        assert not response.rejected, response.rejected
        new.extend(response.new)
    result["allocated"] = sorted(a.allocationKey for a in new)
    result["uuids"] = len({a.UUID for a in new})
    result["nodes_used"] = sorted({a.nodeID for a in new})
    for call in (nodes, apps, allocations):
        call.cancel()
    print(json.dumps(result))
    """
)


def test_raw_grpc_from_stubs_compiled_from_the_shipped_proto(served, tmp_path: Path) -> None:
    core, address = served
    proto_dir = Path(str(importlib.resources.files("korral.si")))
    assert (proto_dir / "si.proto").is_file()
    script = tmp_path / "raw_rm.py"
    script.write_text(RAW_CLIENT)
    (tmp_path / "out").mkdir()
    finished = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "out"), str(proto_dir), address],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=tmp_path,
    )
    assert finished.returncode == 0, finished.stderr
    result = json.loads(finished.stdout)
    assert result["bad_config"][0] == "INVALID_ARGUMENT" and "invalid YAML" in result["bad_config"][1]
    assert result["nodes"] == ["n1"] and result["apps"] == ["app"]
    # 100 memory on the node, 12 asks of 10: ten fit
    assert len(result["allocated"]) == 10 and result["uuids"] == 10 and result["nodes_used"] == ["n1"]
    core.wait_until_idle()
    assert core.application(part("raw"), "app").allocated["memory"] == 100


# ---- held responses and the backlog policy ----------------------------------------------------------------


def _node_request(rm_id: str, node_id: str = "n9") -> bytes:
    return si_pb2.NodeRequest(
        rmID=rm_id, nodes=[si_pb2.NodeInfo(nodeID=node_id, action=si_pb2.NodeInfo.CREATE)]
    ).SerializeToString()


def test_responses_wait_for_the_rms_next_stream(served) -> None:
    core, address = served
    channel = _raw_channel(address)
    channel.unary_unary(SERVICE + "RegisterResourceManager")(
        si_pb2.RegisterResourceManagerRequest(rmID="rm", config=TWO_LEAVES).SerializeToString(), timeout=30
    )
    # the core answers before the RM has any node stream: the answer is held for it
    core.update_node(t.nodes("rm", ["early"], NODE))
    core.wait_until_idle()
    call = _open_stream(channel, "UpdateNode", [_node_request("rm", "late")])
    first = si_pb2.NodeResponse.FromString(next(call))
    second = si_pb2.NodeResponse.FromString(next(call))
    assert [n.nodeID for n in first.accepted] == ["early"]
    assert [n.nodeID for n in second.accepted] == ["late"]
    call.cancel()
    channel.close()


def test_an_rm_that_does_not_take_its_responses_is_cut_off_until_it_registers_again() -> None:
    with korral.start(**FAST) as core:
        address = core.serve_grpc("127.0.0.1:0", max_backlog=3)
        channel = _raw_channel(address)
        register = channel.unary_unary(SERVICE + "RegisterResourceManager")
        register(si_pb2.RegisterResourceManagerRequest(rmID="rm", config=TWO_LEAVES).SerializeToString())
        for index in range(5):  # five node answers, no stream to take them: more than the backlog
            core.update_node(t.nodes("rm", [f"n{index}"], NODE))
            core.wait_until_idle()
        with pytest.raises(grpc.RpcError) as refused:
            next(_open_stream(channel, "UpdateNode", [_node_request("rm")]))
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "register again to resync" in refused.value.details()
        # the core kept its state; registering again resyncs and the RM is served again
        assert core.node(part("rm"), "n4") is not None
        register(si_pb2.RegisterResourceManagerRequest(rmID="rm", config=TWO_LEAVES).SerializeToString())
        call = _open_stream(channel, "UpdateNode", [_node_request("rm", "fresh")])
        assert [n.nodeID for n in si_pb2.NodeResponse.FromString(next(call)).accepted] == ["fresh"]
        call.cancel()
        channel.close()


def test_an_rm_that_never_reads_its_stream_does_not_hold_up_the_core() -> None:
    with korral.start(**FAST) as core:
        address = core.serve_grpc("127.0.0.1:0")
        channel = _raw_channel(address)
        channel.unary_unary(SERVICE + "RegisterResourceManager")(
            si_pb2.RegisterResourceManagerRequest(rmID="deaf", config=TWO_LEAVES).SerializeToString()
        )
        core.update_node(t.nodes("deaf", ["n1"], {"memory": 10**12, "vcore": 10**9}))
        core.update_application(t.applications("deaf", {"app": "root.a"}))
        core.wait_until_idle()
        # thousands of allocations, hundreds of KB of responses, and the client reads none of them
        asks = convert_asks("deaf", "app", 4_000)
        call = _open_stream(channel, "UpdateAllocation", [asks])
        local = t.RecordingRM("local")
        core.register_resource_manager(t.register("local", TWO_LEAVES), local)
        core.update_node(t.nodes("local", ["n1"], NODE))
        core.update_application(t.applications("local", {"app": "root.b"}))
        core.update_allocation(t.asks("local", "app", 3, SMALL))

        def all_allocated() -> bool:  # the asks cross the network before the core sees them
            app = core.application(part("deaf"), "app")
            return app is not None and app.allocated.get("memory", 0) == 4_000 * SMALL["memory"]

        eventually(all_allocated, timeout=60)
        core.wait_until_idle(timeout=60)  # every callback handed over: nothing waits on the deaf RM
        assert local.allocated_total == 3
        call.cancel()
        channel.close()


def convert_asks(rm_id: str, app_id: str, count: int) -> bytes:
    from korral.server.convert import to_pb

    return to_pb(t.asks(rm_id, app_id, count, SMALL)).SerializeToString()


# ---- hostile input ---------------------------------------------------------------------------------------


def _healthy(address: str, rm_id: str) -> None:
    """A well-behaved RM can still register and get an answer on a stream."""
    channel = _raw_channel(address)
    channel.unary_unary(SERVICE + "RegisterResourceManager")(
        si_pb2.RegisterResourceManagerRequest(rmID=rm_id, config=TWO_LEAVES).SerializeToString(), timeout=30
    )
    call = _open_stream(channel, "UpdateNode", [_node_request(rm_id)])
    assert [n.nodeID for n in si_pb2.NodeResponse.FromString(next(call)).accepted] == ["n9"]
    call.cancel()
    channel.close()


@pytest.mark.parametrize(
    ("method", "payload", "reason"),
    [
        ("RegisterResourceManager", b"\xff\xff\xff\xff", "malformed RegisterResourceManagerRequest"),
        ("RegisterResourceManager", b"\x0a\x10short", "malformed RegisterResourceManagerRequest"),
        (
            "RegisterResourceManager",
            si_pb2.RegisterResourceManagerRequest(rmID="x", config="partitions: 7").SerializeToString(),
            "partitions",
        ),
        ("RegisterResourceManager", b"\x08\x05", "RegisterResourceManagerRequest.rmID: wrong wire type"),
        ("UpdateConfiguration", b"\x12\x80", "malformed UpdateConfigurationRequest"),
        ("UpdateAllocation", b"\xff\xff\xff", "malformed AllocationRequest"),
        ("UpdateApplication", b"\x0a\x7f\x0a", "malformed ApplicationRequest"),
        (
            "UpdateNode",
            si_pb2.NodeRequest(
                rmID="good", nodes=[si_pb2.NodeInfo(nodeID="n", action=77)]
            ).SerializeToString(),
            "NodeRequest.nodes[0].action: unknown NodeAction value 77",
        ),
        (
            "UpdateAllocation",
            si_pb2.AllocationRequest(
                rmID="good",
                releases=si_pb2.AllocationReleasesRequest(
                    allocationsToRelease=[si_pb2.AllocationRelease(terminationType=12)]
                ),
            ).SerializeToString(),
            "unknown TerminationType value 12",
        ),
    ],
)
def test_malformed_input_is_invalid_argument_for_that_call_only(served, method, payload, reason) -> None:
    core, address = served
    good = t.RecordingRM("good")
    with korral.connect(address) as remote:
        remote.register_resource_manager(t.register("good", TWO_LEAVES), good)
        remote.update_node(t.nodes("good", ["n1"], NODE))
        assert good.wait_for(lambda r: r.accepted_nodes == ["n1"])
        channel = _raw_channel(address)
        with pytest.raises(grpc.RpcError) as failed:
            if method in ("RegisterResourceManager", "UpdateConfiguration"):
                channel.unary_unary(SERVICE + method)(payload, timeout=30)
            else:
                next(_open_stream(channel, method, [payload]))
        channel.close()
        assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert reason in failed.value.details()
        # the good RM, on its own streams, is served as before
        remote.update_node(t.nodes("good", ["n2"], NODE))
        assert good.wait_for(lambda r: r.accepted_nodes == ["n1", "n2"])
    _healthy(address, "after")
    assert core.tracker.errors == 0


def test_an_unregistered_rm_on_a_stream_is_failed_precondition(served) -> None:
    _, address = served
    channel = _raw_channel(address)
    with pytest.raises(grpc.RpcError) as failed:
        next(_open_stream(channel, "UpdateNode", [_node_request("nobody")]))
    assert failed.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert 'RmID="nobody" not registered' in failed.value.details()
    channel.close()
    _healthy(address, "after")


def test_an_oversized_message_is_refused_and_the_server_keeps_serving() -> None:
    with korral.start(**FAST) as core:
        address = core.serve_grpc("127.0.0.1:0", max_message_bytes=64 * 1024)
        channel = _raw_channel(address)
        huge = si_pb2.RegisterResourceManagerRequest(rmID="big", config="#" * 200_000).SerializeToString()
        with pytest.raises(grpc.RpcError) as failed:
            channel.unary_unary(SERVICE + "RegisterResourceManager")(huge, timeout=30)
        assert failed.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        with pytest.raises(grpc.RpcError) as failed_stream:
            next(_open_stream(channel, "UpdateAllocation", [b"\x1a" + b"\xff\xff\x3f" + b"x" * 1_100_000]))
        assert failed_stream.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        channel.close()
        _healthy(address, "after")


@pytest.mark.no_cover  # a long run over code other tests cover (pyproject.toml: no_cover)
@pytest.mark.slow
def test_ten_thousand_concurrent_stream_opens_are_bounded_and_the_server_keeps_serving() -> None:
    with korral.start(**FAST) as core:
        address = core.serve_grpc("127.0.0.1:0", max_concurrent_rpcs=200)
        # an RM whose stream is open before the flood is served during it
        steady = t.RecordingRM("steady")
        remote = korral.connect(address)
        remote.register_resource_manager(t.register("steady", TWO_LEAVES), steady)
        remote.update_node(t.nodes("steady", ["n1"], NODE))
        assert steady.wait_for(lambda r: r.accepted_nodes == ["n1"])

        async def flood(opens: int, during: Callable[[], None]) -> tuple[int, int, set[str]]:
            # a connection holds at most MAX_STREAMS_PER_CONNECTION streams at once: the flood comes
            # over as many connections as it takes to open them all together
            per_channel = MAX_STREAMS_PER_CONNECTION
            channels = [
                grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(-(-opens // per_channel))
            ]
            try:
                calls = [
                    channels[index // per_channel].stream_stream(SERVICE + "UpdateNode")()
                    for index in range(opens)
                ]
                codes = [asyncio.ensure_future(call.code()) for call in calls]
                # wait for state: every open beyond the bound is answered (time bounds the loop only)
                deadline = asyncio.get_running_loop().time() + 90
                while sum(code.done() for code in codes) < opens - 200:
                    assert asyncio.get_running_loop().time() < deadline, "opens not answered"
                    await asyncio.sleep(0.05)
                during()  # while up to 200 are held open
                answered = [code.result().name for code in codes if code.done()]
                for call in calls:
                    call.cancel()
                return answered.count("RESOURCE_EXHAUSTED"), len(answered), set(answered)
            finally:
                for channel in channels:
                    await channel.close()

        # past the bound gRPC answers "Concurrent RPC limit exceeded!" or, under the flood, resets the
        # stream (CANCELLED): an error either way, and nothing else
        refused, answered, seen = asyncio.run(
            flood(10_000, lambda: remote.update_node(t.nodes("steady", ["n2"], NODE)))
        )
        assert answered >= 10_000 - 200 and refused > 0, seen
        assert seen <= {"RESOURCE_EXHAUSTED", "CANCELLED"}, seen
        # the bound still holds once the first flood's calls have ended (no count drifts)
        refused, answered, seen = asyncio.run(flood(2_000, lambda: None))
        assert answered >= 2_000 - 200 and refused > 0 and seen <= {"RESOURCE_EXHAUSTED", "CANCELLED"}, seen
        assert steady.wait_for(lambda r: r.accepted_nodes == ["n1", "n2"])
        remote.close()
        _healthy(address, "after")
        assert core.tracker.errors == 0


def test_a_remote_rm_hears_of_a_stream_korral_ended_with_an_error() -> None:
    with korral.start(**FAST) as core:
        address = core.serve_grpc("127.0.0.1:0", max_backlog=2)
        rm = t.RecordingRM("rm")
        with korral.connect(address) as remote:
            remote.register_resource_manager(t.register("rm", TWO_LEAVES), rm)
            for index in range(3):  # answers with no node stream to take them: past the backlog
                core.update_node(t.nodes("rm", [f"n{index}"], NODE))
                core.wait_until_idle()
            remote.update_node(t.nodes("rm", ["n9"], NODE))  # korral refuses this stream

            def refused() -> bool:
                try:
                    remote.update_node(t.nodes("rm", ["n10"], NODE))
                except korral.SchedulerError as error:
                    assert "register again to resync" in str(error)
                    return True
                return False

            eventually(refused, timeout=30)
            remote.register_resource_manager(t.register("rm", TWO_LEAVES), rm)  # resync
            remote.update_node(t.nodes("rm", ["n11"], NODE))
            assert rm.wait_for(lambda r: "n11" in r.accepted_nodes)


def test_stopping_the_core_stops_its_grpc_server() -> None:
    core = korral.start(**FAST)
    address = core.serve_grpc("127.0.0.1:0")
    remote = korral.connect(address)
    rm = t.RecordingRM("rm")
    remote.register_resource_manager(t.register("rm", TWO_LEAVES), rm)
    remote.update_node(t.nodes("rm", ["n1"], NODE))
    assert rm.wait_for(lambda r: r.accepted_nodes == ["n1"])
    core.stop()
    remote.close()
    assert korral_threads() == []  # the server's loop thread and the client's threads are gone
    with pytest.raises(korral.SchedulerError, match="cannot reach"):
        korral.connect(address, connect_timeout=0.5)
    with pytest.raises(korral.SchedulerError, match="stopped"):
        core.serve_grpc("127.0.0.1:0")


def test_a_registration_slower_than_call_timeout_fails_with_deadline_exceeded(served) -> None:
    _, address = served
    hurried = korral.connect(address, call_timeout=1e-6)
    with hurried, pytest.raises(korral.SchedulerError, match="DEADLINE_EXCEEDED"):
        hurried.register_resource_manager(t.register("rm", TWO_LEAVES), t.RecordingRM("rm"))
    with korral.connect(address, call_timeout=120) as patient:  # the same call, given the time
        rm = t.RecordingRM("rm")
        patient.register_resource_manager(t.register("rm", TWO_LEAVES), rm)
        patient.update_node(t.nodes("rm", ["n1"], NODE))
        assert rm.wait_for(lambda r: r.accepted_nodes == ["n1"], timeout=120)
    for wrong in (0, -1.0):
        with pytest.raises(ValueError, match="call_timeout must be a positive number"):
            korral.connect(address, call_timeout=wrong)


def test_a_registration_its_caller_gave_up_on_never_lands_over_a_later_one(
    served, monkeypatch, caplog
) -> None:
    """The first registration's core call is held past its caller's leaving; the same RM then registers
    from a new connection. The later registration is the one the core keeps: its node is answered."""
    core, address = served
    caplog.set_level(logging.DEBUG, logger="korral.grpc")
    register = core.register_resource_manager
    started: list[str] = []
    first_may_end, first_ended = threading.Event(), threading.Event()

    def held_first(request: si.RegisterResourceManagerRequest, callback: object = None) -> object:
        started.append(request.rm_id)
        if len(started) > 1:
            return register(request, callback)
        assert first_may_end.wait(120)
        try:
            return register(request, callback)
        finally:
            first_ended.set()

    monkeypatch.setattr(core, "register_resource_manager", held_first)
    gone = korral.connect(address, call_timeout=120)

    def register_gone() -> None:
        with pytest.raises(korral.SchedulerError):
            gone.register_resource_manager(t.register("rm", TWO_LEAVES))

    caller = threading.Thread(target=register_gone)
    caller.start()
    eventually(lambda: started, timeout=60)  # its core call runs, held
    gone.close()  # the caller gives up: its call is cancelled
    caller.join(60)
    rm = t.RecordingRM("rm")
    with korral.connect(address, call_timeout=120) as later:
        registered = threading.Event()

        def register_later() -> None:
            later.register_resource_manager(t.register("rm", TWO_LEAVES), rm)
            registered.set()

        second = threading.Thread(target=register_later)
        second.start()
        eventually(lambda: registered.is_set() or "waits for the one before it" in caplog.text, timeout=60)
        first_may_end.set()
        assert first_ended.wait(120)
        second.join(120)
        assert registered.is_set()
        later.update_node(t.nodes("rm", ["n1"], NODE))
        assert rm.wait_for(lambda r: r.accepted_nodes == ["n1"], timeout=30)
