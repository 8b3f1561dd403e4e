"""Served korral over loopback sockets (issue 22, point 3): who may speak for an RM (TLS, per-RM tokens)."""

from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
import sys

import grpc
import grpc_trust_helpers
import pytest
from core_helpers import FAST, NODE, SMALL, TWO_LEAVES, eventually, part
from grpc_trust_helpers import _asks, _booked, _node, _register, _resyncing_rm, _stub
from tls_certs import Pki, make_pki

import korral
from korral import testing as t
from korral.server.auth import ServerTls, load_tokens
from korral.server.chaos import ResyncingRM
from korral.si import si_pb2

# the shared fixture: pytest finds a fixture by its name in the test module
served = grpc_trust_helpers.served


TOKENS = {"rm-a": "secret-of-rm-a-0123456789", "rm-b": "secret-of-rm-b-0123456789"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


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
