"""Served korral as trustworthy as in-process korral (issue 22, points 1, 2, 3 and 6), over real loopback
sockets: a stream carries one RM, a broken stream makes the RM resync and nothing is lost, who may speak
for an RM (TLS with certificates made at test time, per-RM tokens), the backlog bounded in bytes."""

from __future__ import annotations

import importlib.resources
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from core_helpers import FAST, NODE, SMALL, TWO_LEAVES, eventually, part
from tls_certs import Pki, make_pki

import korral
from korral import si
from korral import testing as t
from korral.server.auth import ServerTls, load_tokens
from korral.server.chaos import CuttingProxy, ResyncingRM
from korral.server.grpc_server import GrpcServer
from korral.si import si_pb2, si_pb2_grpc

TOKENS = {"rm-a": "secret-of-rm-a-0123456789", "rm-b": "secret-of-rm-b-0123456789"}


@pytest.fixture
def served() -> Iterator[tuple[korral.Core, str]]:
    with korral.start(**FAST) as core:
        yield core, core.serve_grpc("127.0.0.1:0")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _stub(channel: grpc.Channel) -> si_pb2_grpc.SchedulerStub:
    return si_pb2_grpc.SchedulerStub(channel)


def _register(stub: si_pb2_grpc.SchedulerStub, rm_id: str, **call: object) -> None:
    stub.RegisterResourceManager(
        si_pb2.RegisterResourceManagerRequest(rmID=rm_id, config=TWO_LEAVES), timeout=30, **call
    )


def _node(rm_id: str, node_id: str) -> si_pb2.NodeRequest:
    return si_pb2.NodeRequest(
        rmID=rm_id,
        nodes=[
            si_pb2.NodeInfo(
                nodeID=node_id,
                action=si_pb2.NodeInfo.CREATE,
                schedulableResource=si_pb2.Resource(
                    resources={"memory": si_pb2.Quantity(value=NODE["memory"])}
                ),
            )
        ],
    )


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


def _resyncing_rm(rm_id: str = "rm") -> ResyncingRM:
    return ResyncingRM(rm_id, TWO_LEAVES, {"n1": NODE, "n2": NODE}, {"app": "root.a"})


def _asks(
    rm: ResyncingRM, start: int, count: int, tags: dict[str, str] | None = None
) -> list[si.AllocationAsk]:
    return [
        si.AllocationAsk(
            allocation_key=f"{rm.rm_id}-ask-{index}",
            application_id="app",
            resource_ask={"memory": 1_000},
            max_allocations=1,
        )
        for index in range(start, start + count)
    ]


def _booked(core: korral.Core, rm_id: str) -> set[str]:
    app = core.application(part(rm_id), "app")
    return {a.uuid for a in app.allocations} if app is not None else set()


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
            try:  # onto the broken stream, or refused at once: either way lost
                rm.release(remote, sorted(rm.live)[:4])
            except korral.SchedulerError:
                pass
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


# ---- 3: who may speak for an RM ----------------------------------------------------------------------------


def test_a_live_rm_cannot_be_registered_over_from_another_connection(served) -> None:
    core, address = served
    owner = t.RecordingRM("rm")
    with korral.connect(address) as remote, korral.connect(address) as intruder:
        remote.register_resource_manager(t.register("rm", TWO_LEAVES), owner)
        remote.update_node(t.nodes("rm", ["n1"], NODE))
        remote.update_application(t.applications("rm", {"app": "root.a"}))
        assert owner.wait_for(lambda r: r.accepted_apps == ["app"])
        remote.update_allocation(t.asks("rm", "app", 3, SMALL))
        assert owner.wait_for_allocations(3)
        with pytest.raises(korral.SchedulerError, match="PERMISSION_DENIED: RmID=rm is live on another"):
            intruder.register_resource_manager(t.register("rm", TWO_LEAVES), t.RecordingRM("rm"))
        # the owner's books are intact and it is served as before
        core.wait_until_idle()
        assert len(_booked_app(core, "rm")) == 3
        remote.update_allocation(t.asks("rm", "app", 2, SMALL, prefix="more-"))
        assert owner.wait_for_allocations(5)
    # once the owner's streams are gone it is not live: an RM coming back may register again
    with korral.connect(address) as returning:
        returning.register_resource_manager(t.register("rm", TWO_LEAVES), t.RecordingRM("rm"))


def test_an_rm_registered_over_from_another_connection_is_told_to_resync(served) -> None:
    core, address = served
    options = [("grpc.use_local_subchannel_pool", 1)]  # two connections, not one shared
    with (
        grpc.insecure_channel(address, options=options) as mine,
        grpc.insecure_channel(address, options=options) as other,
    ):
        _register(_stub(mine), "rm")  # registered, no stream open yet: not live
        _register(_stub(other), "rm")  # allowed (an RM may come back on a new connection): wipes its books
        with pytest.raises(grpc.RpcError) as told:
            next(_stub(mine).UpdateNode(iter([_node("rm", "n1")]), timeout=30))
        assert told.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "RmID=rm was registered on another connection: register again" in told.value.details()
        assert ("korral-resync", "1") in tuple(told.value.trailing_metadata())
        core.wait_until_idle()
        assert core.node(part("rm"), "n1") is None
        _register(_stub(mine), "rm")  # registering again from this connection takes the RM back
        back = next(_stub(mine).UpdateNode(iter([_node("rm", "n1")]), timeout=30))
        assert [n.nodeID for n in back.accepted] == ["n1"]


def _booked_app(core: korral.Core, rm_id: str) -> list[str]:
    app = core.application(part(rm_id), "app")
    return [a.uuid for a in app.allocations] if app is not None else []


def test_with_tokens_a_client_without_the_rms_token_cannot_register_stream_or_reregister(tmp_path) -> None:
    token_file = tmp_path / "tokens.yaml"
    token_file.write_text("".join(f"{rm}: {secret}\n" for rm, secret in TOKENS.items()))
    with korral.start(**FAST) as core:
        address = core.serve_grpc("127.0.0.1:0", tokens=token_file)
        for token, rm_id, reason in (
            (None, "rm-a", "no token"),
            ("wrong-wrong-wrong-wrong", "rm-a", "wrong token"),
            (TOKENS["rm-b"], "rm-a", "wrong token"),
            (TOKENS["rm-a"], "rm-c", "RmID=rm-c has no token"),
        ):
            with (
                korral.connect(address, token=token) as remote,
                pytest.raises(korral.SchedulerError, match=f"UNAUTHENTICATED: .*{reason}"),
            ):
                remote.register_resource_manager(t.register(rm_id, TWO_LEAVES))
        assert core.partition_names() == []

        owner = ResyncingRM("rm-a", TWO_LEAVES, {"n1": NODE}, {"app": "root.a"})
        with korral.connect(address, token=TOKENS) as remote:
            owner.resync(remote)
            owner.ask(remote, _asks(owner, 0, 3))
            eventually(lambda: len(owner.live) == 3, timeout=30)
            with grpc.insecure_channel(address) as channel:
                stub = _stub(channel)
                # a stream for rm-a without its token, or with rm-b's, is refused before it names anything
                for metadata in ((), (("authorization", "Bearer " + TOKENS["rm-b"]),)):
                    with pytest.raises(grpc.RpcError) as refused:
                        next(stub.UpdateNode(iter([_node("rm-a", "evil")]), metadata=metadata, timeout=30))
                    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
                with pytest.raises(grpc.RpcError) as refused:
                    stub.UpdateConfiguration(
                        si_pb2.UpdateConfigurationRequest(rmID="rm-a", config=TWO_LEAVES)
                    )
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
                core.wait_until_idle()
                assert core.node(part("rm-a"), "evil") is None and len(_booked(core, "rm-a")) == 3
                # with rm-a's token, another connection may register over the live RM: its credentials
                _register(stub, "rm-a", metadata=(("authorization", "Bearer " + TOKENS["rm-a"]),))
            # the first connection's RM is told its session ended
            eventually(lambda: owner.told_to_resync == 1, timeout=30)
            owner.resync(remote)
            core.wait_until_idle()
            assert _booked(core, "rm-a") == set(owner.live) and len(owner.live) == 3


def test_a_token_file_is_checked_entry_by_entry(tmp_path) -> None:
    bad = tmp_path / "tokens.yaml"
    bad.write_text("rm-a: short\nrm-b: 12\nrm-c: ' padded-secret-0123456789'\nrm-d: good-secret-0123456789\n")
    with pytest.raises(ValueError) as failed:
        load_tokens(bad)
    message = str(failed.value)
    assert "rm-a: the secret is shorter than 16" in message
    assert "rm-b: the secret must be a string" in message
    assert "rm-c: the secret must be printable ASCII" in message
    assert "rm-d" not in message
    for text, reason in (("[a, b]", "mapping"), ("{}", "mapping"), ("a: [", "not YAML")):
        bad.write_text(text)
        with pytest.raises(ValueError, match=reason):
            load_tokens(bad)
    with pytest.raises(ValueError, match="cannot read the token file"):
        load_tokens(tmp_path / "missing.yaml")


def test_an_open_server_says_once_that_any_local_process_may_act_as_any_rm(caplog, tmp_path, pki) -> None:
    warning = "any process that can reach it may act as any RM"
    with caplog.at_level(logging.WARNING, logger="korral.grpc"), korral.start(**FAST) as core:
        address = core.serve_grpc("127.0.0.1:0")
        with korral.connect(address) as remote:
            remote.register_resource_manager(t.register("rm", TWO_LEAVES))
        assert sum(warning in record.getMessage() for record in caplog.records) == 1
        caplog.clear()
        core.serve_grpc("127.0.0.1:0", tokens=TOKENS)
        core.serve_grpc("127.0.0.1:0", tls=ServerTls(cert_file=pki.server_cert, key_file=pki.server_key))
        assert not any(warning in record.getMessage() for record in caplog.records)


def test_tls_with_certificates_made_at_test_time(pki) -> None:
    tls = ServerTls(cert_file=pki.server_cert, key_file=pki.server_key)
    with korral.start(**FAST) as core:
        address = core.serve_grpc("127.0.0.1:0", tls=tls)
        rm = t.RecordingRM("rm")
        with korral.connect(address, root_cert=pki.ca) as remote:
            remote.register_resource_manager(t.register("rm", TWO_LEAVES), rm)
            remote.update_node(t.nodes("rm", ["n1"], NODE))
            assert rm.wait_for(lambda r: r.accepted_nodes == ["n1"])
        with pytest.raises(korral.SchedulerError, match="cannot reach"):
            korral.connect(address, connect_timeout=2)  # plaintext to a TLS server
        with pytest.raises(korral.SchedulerError, match="cannot reach"):
            korral.connect(address, root_cert=pki.stranger_ca, connect_timeout=2)  # not the server's CA
        # the same settings as serve_rest takes them; bad ones are named
        plain = core.serve_grpc("127.0.0.1:0", tls={"cert": pki.server_cert, "key": pki.server_key})
        with korral.connect(plain, root_cert=pki.ca) as remote:
            remote.register_resource_manager(t.register("rm2", TWO_LEAVES))
        for bad, reason in (
            ({"cert": pki.server_cert}, "needs both a certificate"),
            ({"cert": pki.server_cert, "key": pki.server_key, "ca": pki.ca}, "unknown TLS setting"),
            ({"cert": pki.server_cert, "key": pki.ca.parent / "missing.key"}, "cannot read the TLS key"),
            ({"cert": pki.ca.parent / "stranger.key", "key": pki.server_key}, "TLS certificate is not PEM"),
        ):
            with pytest.raises(ValueError, match=reason):
                core.serve_grpc("127.0.0.1:0", tls=bad)
        with pytest.raises(OSError, match="TLS certificate and key are not a pair"):
            core.serve_grpc("127.0.0.1:0", tls={"cert": pki.server_cert, "key": pki.stranger[1]})


def test_mutual_tls_needs_a_client_certificate_and_binds_a_live_rm_to_it(pki) -> None:
    tls = ServerTls(cert_file=pki.server_cert, key_file=pki.server_key, client_ca_file=pki.ca)
    cert_a, key_a = pki.client_certs["rm-a"]
    cert_b, key_b = pki.client_certs["rm-b"]
    with korral.start(**FAST) as core:
        address = core.serve_grpc("127.0.0.1:0", tls=tls)
        for client in ({}, {"client_cert": pki.stranger[0], "client_key": pki.stranger[1]}):
            with pytest.raises(korral.SchedulerError, match="cannot reach"):
                korral.connect(address, root_cert=pki.ca, connect_timeout=2, **client)
        owner = _resyncing_rm("rm-a")
        with korral.connect(address, root_cert=pki.ca, client_cert=cert_a, client_key=key_a) as remote:
            owner.resync(remote)
            owner.ask(remote, _asks(owner, 0, 2))
            eventually(lambda: len(owner.live) == 2, timeout=30)
            # another connection with another RM's certificate may not register over the live RM
            with (
                korral.connect(address, root_cert=pki.ca, client_cert=cert_b, client_key=key_b) as other,
                pytest.raises(korral.SchedulerError, match="PERMISSION_DENIED"),
            ):
                other.register_resource_manager(t.register("rm-a", TWO_LEAVES))
            core.wait_until_idle()
            assert _booked(core, "rm-a") == set(owner.live)
            # one with the same certificate carries its credentials: the owner is told to resync
            with korral.connect(address, root_cert=pki.ca, client_cert=cert_a, client_key=key_a) as same:
                same.register_resource_manager(t.register("rm-a", TWO_LEAVES))
                eventually(lambda: owner.told_to_resync == 1, timeout=30)


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
                with pytest.raises(grpc.RpcError) as cut:
                    next(call)
                assert cut.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert f"more than {cap} bytes of responses not read" in cut.value.details()
                with pytest.raises(grpc.RpcError) as refused:
                    next(stub.UpdateNode(iter([_node("deaf", "n2")]), timeout=30))
                assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                requests.put(None)
        finally:
            server.close()


# ---- korral serve's flags --------------------------------------------------------------------------------

KORRAL = [sys.executable, "-c", "from korral.cli import main; main()"]


def test_korral_serve_with_tls_and_tokens(tmp_path, pki) -> None:
    token_file = tmp_path / "tokens.json"
    token_file.write_text(json.dumps(TOKENS))
    process = subprocess.Popen(
        [
            *KORRAL,
            "serve",
            "--grpc",
            "127.0.0.1:0",
            "--grpc-tls-cert",
            str(pki.server_cert),
            "--grpc-tls-key",
            str(pki.server_key),
            "--grpc-token-file",
            str(token_file),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        found = re.search(r"gRPC SI listening on (\S+)", line)
        assert found, line + process.stderr.read()
        address = found.group(1)
        with korral.connect(address, root_cert=pki.ca, token=TOKENS["rm-a"]) as remote:
            rm = t.RecordingRM("rm-a")
            remote.register_resource_manager(t.register("rm-a", TWO_LEAVES), rm)
            remote.update_node(t.nodes("rm-a", ["n1"], NODE))
            assert rm.wait_for(lambda r: r.accepted_nodes == ["n1"])
        with (
            korral.connect(address, root_cert=pki.ca) as tokenless,
            pytest.raises(korral.SchedulerError, match="UNAUTHENTICATED"),
        ):
            tokenless.register_resource_manager(t.register("rm-b", TWO_LEAVES))
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        assert "may act as any RM" not in err
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--grpc-tls-cert", "{cert}"], "--grpc-tls-cert and --grpc-tls-key go together"),
        (["--grpc-tls-cert", "{cert}", "--grpc-tls-key", "{missing}"], "cannot read the TLS key"),
        (["--grpc-token-file", "{bad_tokens}"], "rm-a: the secret is shorter than 16 characters"),
    ],
)
def test_korral_serve_refuses_bad_security_flags_with_one_line(tmp_path, pki, flags, message) -> None:
    bad_tokens = tmp_path / "tokens.yaml"
    bad_tokens.write_text("rm-a: short\n")
    values = {"cert": pki.server_cert, "missing": tmp_path / "missing.key", "bad_tokens": bad_tokens}
    finished = subprocess.run(
        [*KORRAL, "serve", "--grpc", "127.0.0.1:0", *(flag.format(**values) for flag in flags)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode == 1
    assert message in finished.stderr and len(finished.stderr.strip().splitlines()) == 1, finished.stderr


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
