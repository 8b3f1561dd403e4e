"""Served korral over loopback sockets (issue 22, points 1, 2, 6): one RM a stream, resyncs, the backlog."""

from __future__ import annotations

import contextlib
import importlib.resources
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import grpc_trust_helpers
import pytest
from core_helpers import FAST, NODE, TWO_LEAVES, eventually, part
from grpc_trust_helpers import _asks, _booked, _node, _register, _resyncing_rm, _stub

import korral
from korral import testing as t
from korral.server.chaos import CuttingProxy
from korral.server.grpc_server import GrpcServer
from korral.si import si_pb2

# the shared fixture: pytest finds a fixture by its name in the test module
served = grpc_trust_helpers.served


class _Requests:
    """A request iterator the test feeds one message at a time."""

    def __init__(self) -> None:
        import queue

        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()

    def put(self, message: object) -> None:
        self._queue.put(message)

    def __iter__(self) -> Iterator[object]:
        while True:
            item = self._queue.get()
            if item is None:
                return
            yield item


# ---- 1: a stream carries one RM ----------------------------------------------------------------------------


def test_a_stream_naming_another_rm_is_refused_and_changes_nothing(served) -> None:
    core, address = served
    with grpc.insecure_channel(address) as channel_a, grpc.insecure_channel(address) as channel_b:
        stub_a, stub_b = _stub(channel_a), _stub(channel_b)
        _register(stub_a, "a")
        _register(stub_b, "b")
        b_requests = _Requests()
        b_stream = stub_b.UpdateNode(iter(b_requests), timeout=60)
        b_requests.put(_node("b", "b1"))
        assert [n.nodeID for n in next(b_stream).accepted] == ["b1"]

        a_requests = _Requests()
        a_stream = stub_a.UpdateNode(iter(a_requests), timeout=60)
        a_requests.put(_node("a", "a1"))
        assert [n.nodeID for n in next(a_stream).accepted] == ["a1"]
        a_requests.put(_node("b", "stolen"))  # the same stream now names RM b
        with pytest.raises(grpc.RpcError) as refused:
            next(a_stream)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "this stream carries RmID=a: a NodeRequest for RmID=b is refused" in refused.value.details()
        core.wait_until_idle()
        # nothing changed: b has no such node, and b's answers still come on b's own stream
        assert core.node(part("b"), "stolen") is None
        b_requests.put(_node("b", "b2"))
        assert [n.nodeID for n in next(b_stream).accepted] == ["b2"]
        # RM a lost nothing (korral ended its stream, nothing was in flight): a new stream serves it
        a_again = _Requests()
        a_stream = stub_a.UpdateNode(iter(a_again), timeout=60)
        a_again.put(_node("a", "a2"))
        assert [n.nodeID for n in next(a_stream).accepted] == ["a2"]
        for requests in (a_again, b_requests):
            requests.put(None)


# ---- 2: a broken stream never loses what the core booked ---------------------------------------------------


def test_after_a_broken_stream_raw_stubs_are_told_to_resync_until_they_register_again(served) -> None:
    core, address = served
    with grpc.insecure_channel(address) as channel:
        stub = _stub(channel)
        _register(stub, "raw")
        requests = _Requests()
        stream = stub.UpdateNode(iter(requests), timeout=60)
        requests.put(_node("raw", "n1"))
        assert [n.nodeID for n in next(stream).accepted] == ["n1"]
        stream.cancel()  # the RM's end of the stream breaks after korral wrote on it
        core.update_node(t.nodes("raw", ["n2"], NODE))  # the core goes on deciding for the RM

        def told() -> grpc.RpcError | None:
            try:
                next(stub.UpdateNode(iter([_node("raw", "n3")]), timeout=30))
            except grpc.RpcError as error:
                return error
            return None

        refused = eventually(told, timeout=30)
        assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "register again to resync" in refused.details()
        assert ("korral-resync", "1") in tuple(refused.trailing_metadata())
        # every call for the RM says so, the configuration update too, and changes nothing
        with pytest.raises(grpc.RpcError) as config_refused:
            stub.UpdateConfiguration(si_pb2.UpdateConfigurationRequest(rmID="raw", config=TWO_LEAVES))
        assert config_refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert core.node(part("raw"), "n3") is None
        # the SI's recovery: register again, re-declare the nodes; then it is served as before
        _register(stub, "raw")
        requests = _Requests()
        stream = stub.UpdateNode(iter(requests), timeout=60)
        requests.put(_node("raw", "n1"))
        assert [n.nodeID for n in next(stream).accepted] == ["n1"]
        requests.put(None)
        core.wait_until_idle()
        assert core.node(part("raw"), "n2") is None  # the re-registration started the RM's books afresh


def test_korral_connect_tells_the_rm_to_resync_after_a_cut_and_it_ends_with_the_core_books(served) -> None:
    core, address = served
    proxy = CuttingProxy(address).start()
    rm = _resyncing_rm()
    try:
        with korral.connect(proxy.address) as remote:
            rm.resync(remote)  # the first registration is a resync from nothing
            rm.ask(remote, _asks(rm, 0, 20))
            eventually(lambda: len(rm.live) == 20, timeout=30)
            assert proxy.cut() >= 1
            # korral.connect tells the RM once, on its callback thread, after what came before the cut
            eventually(lambda: rm.told_to_resync == 1, timeout=30)
            # until it registers again every call for it says so (the ask stays pending in its books)
            with pytest.raises(korral.ResyncRequired, match="register again to resync"):
                rm.ask(remote, _asks(rm, 20, 1))
            assert issubclass(korral.ResyncRequired, korral.SchedulerError)
            rm.resync(remote)  # re-declares the 20 allocations and re-sends the pending ask
            rm.ask(remote, _asks(rm, 21, 9))
            eventually(lambda: not rm.pending and len(rm.live) == 30, timeout=30)
            core.wait_until_idle()
            assert _booked(core, "rm") == set(rm.live)
    finally:
        proxy.close()


def test_a_release_lost_to_a_cut_keeps_the_rm_out_of_step_until_it_resyncs(served) -> None:
    core, address = served
    proxy = CuttingProxy(address).start()
    rm = _resyncing_rm()
    try:
        with korral.connect(proxy.address) as remote:
            rm.resync(remote)
            rm.ask(remote, _asks(rm, 0, 10))
            eventually(lambda: len(rm.live) == 10 and rm.in_step, timeout=30)
            rm.release(remote, sorted(rm.live)[:3])
            eventually(lambda: rm.in_step, timeout=30)  # korral confirmed the three releases
            assert proxy.cut() >= 1
            with contextlib.suppress(korral.SchedulerError):  # onto the broken stream, or refused: lost
                rm.release(remote, sorted(rm.live)[:4])
            # nothing confirms the four: the RM is out of step until it is told to resync and does
            assert not rm.in_step
            eventually(lambda: rm.must_resync, timeout=30)
            assert not rm.in_step
            rm.resync(remote)
            eventually(lambda: rm.in_step, timeout=30)
            core.wait_until_idle()
            assert len(rm.live) == 3 and _booked(core, "rm") == set(rm.live)
    finally:
        proxy.close()


def test_korral_connect_comes_up_when_its_first_connection_drops_as_it_opens(served) -> None:
    core, address = served
    # the first connection closes as the server's first bytes reach the client: grpc then often leaves
    # the channel idle, and a single readiness watch waited out the whole connect timeout. Five RMs,
    # each on a proxy of its own, so that the race is met.
    for index in range(5):
        proxy = CuttingProxy(address, drop_at_first_reply=1).start()
        rm = _resyncing_rm(f"rm{index}")
        try:
            with korral.connect(proxy.address, connect_timeout=20) as remote:
                rm.resync(remote)
                rm.ask(remote, _asks(rm, 0, 2))
                eventually(lambda: len(rm.live) == 2, timeout=30)  # noqa: B023 - checked before the next
            core.wait_until_idle()
            assert _booked(core, f"rm{index}") == set(rm.live)
            assert proxy.connections >= 2
        finally:
            proxy.close()


def test_cuts_while_the_core_allocates_lose_nothing_once_the_rm_resyncs(served) -> None:
    core, address = served
    proxy = CuttingProxy(address).start()
    rm = _resyncing_rm()
    next_ask = 0
    try:
        with korral.connect(proxy.address) as remote:
            rm.resync(remote)
            for _ in range(5):
                known = len(rm.live)
                rm.ask(remote, _asks(rm, next_ask, 400))
                next_ask += 400
                eventually(lambda: len(rm.live) > known, timeout=30)  # noqa: B023 - responses are flowing
                proxy.cut()  # while the core may still be writing
                eventually(lambda: rm.must_resync, timeout=30)
                rm.resync(remote)
                # release some of what the RM knows: the releases go to the new registration
                rm.release(remote, sorted(rm.live)[:50])
            eventually(lambda: not rm.pending, timeout=60)
            # the last releases are on their way over the network: the books converge, or the test fails
            eventually(lambda: _booked(core, "rm") == set(rm.live), timeout=60)
            assert rm.told_to_resync == 5 and rm.resyncs == 6 and rm.rejected == []
            assert len(rm.live) == 5 * 400 - 5 * 50
    finally:
        proxy.close()


# ---- 6: the backlog is bounded in bytes --------------------------------------------------------------------


def test_many_unread_large_responses_are_bounded_in_bytes_and_the_rm_must_resync() -> None:
    cap = 2 * 1024 * 1024
    with korral.start(**FAST) as core:
        server = GrpcServer(core, "127.0.0.1:0", max_backlog=1_000_000, max_backlog_bytes=cap)
        address = server.start()
        try:
            with grpc.insecure_channel(address) as channel:
                stub = _stub(channel)
                _register(stub, "deaf")
                core.update_node(t.nodes("deaf", ["n1"], {"memory": 10**12, "vcore": 10**9}))
                core.update_application(t.applications("deaf", {"app": "root.a"}))
                core.wait_until_idle()
                # 2,000 allocations of 20 KB each (the ask's tags come back on its allocation): 40 MB
                tags = {f"tag-{index}": "x" * 1_000 for index in range(20)}
                asks = si_pb2.AllocationRequest(rmID="deaf")
                for index in range(2_000):
                    ask = asks.asks.add(allocationKey=f"k{index}", applicationID="app", maxAllocations=1)
                    ask.resourceAsk.resources["memory"].value = 1
                    ask.tags.update(tags)
                requests = _Requests()
                call = stub.UpdateAllocation(iter(requests), timeout=120)  # and never read
                requests.put(asks)
                largest = 0
                deadline = time.monotonic() + 120
                while server.must_resync("deaf") is None:
                    largest = max(largest, server.backlog("deaf")[1])
                    assert time.monotonic() < deadline, "the deaf RM was never cut off"
                    time.sleep(0.01)
                assert largest <= cap
                assert server.backlog("deaf") == (0, 0)  # nothing held for it any more
                # Responses the transport took before the cut reach the RM first (a loaded machine makes
                # smaller batches, some written before the backlog grew); then the call ends with the cut.
                with pytest.raises(grpc.RpcError) as cut:
                    for _ in call:
                        pass
                assert cut.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert f"more than {cap} bytes of responses not read" in cut.value.details()
                with pytest.raises(grpc.RpcError) as refused:
                    next(stub.UpdateNode(iter([_node("deaf", "n2")]), timeout=30))
                assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                requests.put(None)
        finally:
            server.close()


# ---- another language: a Node.js RM on @grpc/grpc-js (skipped where node or the package is missing) -----

NODE_CLIENT = Path(__file__).parent / "node" / "si_client.js"


def _node_with_grpc_js() -> bool:
    node = shutil.which("node")
    if node is None:
        return False
    probe = subprocess.run(
        [node, "-e", "require('@grpc/grpc-js'); require('@grpc/proto-loader')"],
        capture_output=True,
        cwd=NODE_CLIENT.parent,
        timeout=60,
    )
    return probe.returncode == 0


# CI installs the two npm packages and sets KORRAL_REQUIRE_NODE, so there a missing client fails the run
@pytest.mark.skipif(
    not _node_with_grpc_js() and not os.environ.get("KORRAL_REQUIRE_NODE"),
    reason="node with @grpc/grpc-js and @grpc/proto-loader (NODE_PATH)",
)
def test_a_node_grpc_js_rm_registers_streams_and_is_refused_when_it_names_another_rm(served) -> None:
    core, address = served
    proto_dir = Path(str(importlib.resources.files("korral.si")))
    finished = subprocess.run(
        ["node", str(NODE_CLIENT), str(proto_dir), address], capture_output=True, text=True, timeout=120
    )
    assert finished.returncode == 0, finished.stderr
    result = json.loads(finished.stdout)
    assert result["register"] == "ok" and result["accepted"] == ["n1"]
    assert result["refused"]["code"] == "PERMISSION_DENIED"
    assert "this stream carries RmID=js-a" in result["refused"]["details"]
    # the application and its ask, back to back on the ordered stream: the ask is placed, not refused
    assert result["allocated"] == ["k1"], result
    assert result["ordered"][0] == "application"
    core.wait_until_idle()
    assert core.node(part("js-a"), "n1") is not None and core.partition_names() == [part("js-a")]


# ---- the chaos run stays runnable ------------------------------------------------------------------------


@pytest.mark.slow
def test_the_grpc_chaos_run_cuts_and_ends_with_the_books_in_agreement(tmp_path) -> None:
    script = Path(__file__).resolve().parents[2] / "bench" / "grpc_chaos.py"
    figures_file = tmp_path / "chaos.json"
    finished = subprocess.run(
        # the run gives up within the test's timeout and says which RM is stuck where
        [
            sys.executable,
            str(script),
            "--cuts",
            "40",
            "--rms",
            "2",
            "--budget",
            "80",
            "--json",
            str(figures_file),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    figures = json.loads(figures_file.read_text())
    assert figures["cuts"] == 40 and figures["violations"] == 0
    assert figures["told_to_resync"] > 0 and figures["resyncs"] > 0 and figures["asks"] > 0
