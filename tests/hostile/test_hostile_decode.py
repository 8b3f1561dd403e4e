"""A huge request cannot hold the gRPC event loop every RM's calls share. A request is decoded before
anything else of its call is known (its rmID, so its token, is in it): on the loop, one NodeRequest of
1,000,000 nodes, its last one malformed, held every other RM's calls for a minute (3 registrations of
another RM went through in 67 s). Big requests are decoded off the loop:
the other RM goes on registering while it is decoded (396 registrations meanwhile)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import grpc
from hostile_serve import WAIT, korral_serve

from korral.si import si_pb2

SERVICE = "/si.v1.Scheduler/"
TOKEN = "a-secret-of-the-probe-0123456789"
ATTACKER_TOKEN = "a-secret-of-the-attacker-0123456789"
NODES = 300_000  # ~6 MiB; the last one malformed, so the request is refused once decoded whole
PROBES_MEANWHILE = 20


def huge_node_request() -> bytes:
    nodes = [si_pb2.NodeInfo(nodeID=f"n{index}", action=si_pb2.NodeInfo.CREATE) for index in range(NODES)]
    nodes[-1].action = 99  # no such action: a ConversionError once everything before it was read
    return si_pb2.NodeRequest(rmID="attacker", nodes=nodes).SerializeToString()


def test_other_rms_are_served_while_a_huge_request_is_decoded(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"  # the attacker holds a token of its own: an RM gone bad
    tokens.write_text(json.dumps({"probe": TOKEN, "attacker": ATTACKER_TOKEN}))
    huge = huge_node_request()
    with korral_serve("--grpc-token-file", str(tokens)) as served:
        options = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_send_message_length", 64 << 20)]
        attacker = grpc.insecure_channel(served.grpc, options=options)
        probe = grpc.insecure_channel(served.grpc, options=options)
        refused = threading.Event()
        outcome: list[grpc.StatusCode] = []
        try:
            call = attacker.stream_stream(SERVICE + "UpdateNode")(
                iter([huge]), timeout=WAIT * 4, metadata=[("authorization", f"Bearer {ATTACKER_TOKEN}")]
            )

            def read() -> None:
                try:
                    for _ in call:
                        pass
                except grpc.RpcError as error:
                    outcome.append(error.code())
                refused.set()

            threading.Thread(target=read, daemon=True).start()
            register = probe.unary_unary(SERVICE + "RegisterResourceManager")
            request = si_pb2.RegisterResourceManagerRequest(rmID="probe").SerializeToString()
            metadata = [("authorization", f"Bearer {TOKEN}")]
            registered = 0
            while not refused.is_set() and registered < PROBES_MEANWHILE:
                register(request, timeout=WAIT, metadata=metadata, wait_for_ready=True)
                registered += 1
            assert registered >= PROBES_MEANWHILE, (
                f"the huge request held the event loop: {registered} registrations of another RM "
                "while it was decoded"
            )
            assert refused.wait(WAIT * 4)
            assert outcome == [grpc.StatusCode.INVALID_ARGUMENT]
        finally:
            attacker.close()
            probe.close()
        served.stop()


def test_with_tokens_a_stream_carrying_no_rms_token_is_refused_before_its_request_is_decoded(
    tmp_path: Path,
) -> None:
    """A client with no token (or one no RM has) gets UNAUTHENTICATED at once, not the decoder's
    INVALID_ARGUMENT after its request was read whole: korral decodes nothing of a stranger's."""
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"probe": TOKEN}))
    huge = huge_node_request()
    with korral_serve("--grpc-token-file", str(tokens)) as served:
        options = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_send_message_length", 64 << 20)]
        channel = grpc.insecure_channel(served.grpc, options=options)
        try:
            for metadata in ((), (("authorization", "Bearer not-a-token-of-any-rm-0123"),)):
                call = channel.stream_stream(SERVICE + "UpdateNode")(
                    iter([huge]), metadata=metadata, timeout=WAIT
                )
                try:
                    for _ in call:
                        pass
                except grpc.RpcError as refused:
                    assert refused.code() == grpc.StatusCode.UNAUTHENTICATED, refused.details()
                else:
                    raise AssertionError("a stream without a token of this server was served")
            # an RM's own token still opens a stream (its request is then checked for its own rmID)
            with_token = [("authorization", f"Bearer {TOKEN}")]
            node = si_pb2.NodeRequest(rmID="probe", nodes=[si_pb2.NodeInfo(nodeID="n1", action=1)])
            call = channel.stream_stream(SERVICE + "UpdateNode")(
                iter([node.SerializeToString()]), metadata=with_token, timeout=WAIT
            )
            try:
                for _ in call:
                    pass
            except grpc.RpcError as answered:  # not registered: the core's answer, past the token check
                assert answered.code() != grpc.StatusCode.UNAUTHENTICATED, answered.details()
        finally:
            channel.close()
        log = served.stop()
    assert "refused before its message was read" in log
