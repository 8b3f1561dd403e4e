"""With tokens configured, a call without a valid token is refused before its message is read.

gRPC holds a unary call's whole message before its handler runs; a check of the token there lets every
open call of a client with no token make the server hold up to 64 MiB. A dozen 40 MiB registrations
without a token at once took ``korral serve`` past a gigabyte; refused on their metadata alone, they
leave it where it was.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from hostile_serve import WAIT, korral_serve

from korral.si import si_pb2

SERVICE = "/si.v1.Scheduler/"
TOKENS = {"rm-a": "a-secret-of-rm-a-0123456789"}
CALLS = 12
MESSAGE_BYTES = 40 * 1024 * 1024
# what the server may grow by while refusing them all: far below one message per call
GROWTH_BOUND = 200 * 1024 * 1024


def _peak_rss(pid: int) -> int:
    """The process's peak resident memory so far, in bytes (Linux: VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/PID/status")


def _code(call: object) -> grpc.StatusCode:
    try:
        call()  # type: ignore[operator]
    except grpc.RpcError as error:
        return error.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the server's RSS from /proc")
def test_large_unauthenticated_registrations_are_refused_before_they_are_read(tmp_path: Path) -> None:
    token_file = tmp_path / "tokens.json"
    token_file.write_text(json.dumps(TOKENS))
    payload = si_pb2.RegisterResourceManagerRequest(
        rmID="rm-a", config="x" * MESSAGE_BYTES
    ).SerializeToString()
    with korral_serve("--grpc-token-file", str(token_file)) as served:
        before = _peak_rss(served.process.pid)
        channels = [
            grpc.insecure_channel(served.grpc, options=[("grpc.use_local_subchannel_pool", 1)])
            for _ in range(CALLS)
        ]
        try:
            calls = [
                (
                    lambda channel=channel: channel.unary_unary(SERVICE + "RegisterResourceManager")(
                        payload, timeout=WAIT
                    )
                )
                for channel in channels
            ]
            with ThreadPoolExecutor(CALLS) as pool:
                codes = list(pool.map(_code, calls))
            growth = _peak_rss(served.process.pid) - before
            # a stream without a token ends the same way, before its first request is read
            stream = channels[0].stream_stream(SERVICE + "UpdateInOrder")
            stream_code = _code(lambda: list(stream(iter([b"\x0a\x00"]), timeout=WAIT)))
        finally:
            for channel in channels:
                channel.close()
        log = served.stop()
    assert codes == [grpc.StatusCode.UNAUTHENTICATED] * CALLS
    assert stream_code == grpc.StatusCode.UNAUTHENTICATED
    assert growth < GROWTH_BOUND, f"the server grew by {growth >> 20} MiB refusing {CALLS} calls"
    assert "refused before its message was read" in log


def test_a_call_with_another_rms_token_is_still_refused_by_its_rm(tmp_path: Path) -> None:
    """The gate lets through a call carrying some RM's token; its handler checks it is its RM's."""
    tokens = {**TOKENS, "rm-b": "b-secret-of-rm-b-0123456789"}
    token_file = tmp_path / "tokens.json"
    token_file.write_text(json.dumps(tokens))
    with korral_serve("--grpc-token-file", str(token_file)) as served:
        channel = grpc.insecure_channel(served.grpc)
        try:
            register = channel.unary_unary(SERVICE + "RegisterResourceManager")
            request = si_pb2.RegisterResourceManagerRequest(rmID="rm-a", config="").SerializeToString()
            with pytest.raises(grpc.RpcError) as refused:
                register(request, timeout=WAIT, metadata=(("authorization", "Bearer " + tokens["rm-b"]),))
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "wrong token" in (refused.value.details() or "")
            register(request, timeout=WAIT, metadata=(("authorization", "Bearer " + tokens["rm-a"]),))
        finally:
            channel.close()
        served.stop()
