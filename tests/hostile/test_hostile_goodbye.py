"""A client's clean close reads as one in the log; a real break still asks the RM to resync."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
from hostile_serve import WAIT, korral_serve

from korral import si
from korral.si import si_pb2

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "remote-rm.py"
SERVICE = "/si.v1.Scheduler/"


def test_the_documented_remote_rm_exiting_normally_is_a_clean_close() -> None:
    with korral_serve() as served:
        finished = subprocess.run(
            [sys.executable, str(EXAMPLE), served.grpc], capture_output=True, text=True, timeout=WAIT
        )
        assert finished.returncode == 0, finished.stderr
        assert finished.stdout.count("allocated task-") == 4
        log = served.stop()
    assert "broke" not in log and "resync" not in log, log[-3000:]
    assert "RmID=demo closed its ordered stream" in log, log[-3000:]


def test_a_stream_cancelled_after_responses_still_asks_for_a_resync() -> None:
    with korral_serve() as served:
        channel = grpc.insecure_channel(served.grpc)
        try:
            register = channel.unary_unary(SERVICE + "RegisterResourceManager")
            register(si_pb2.RegisterResourceManagerRequest(rmID="rm").SerializeToString(), timeout=WAIT)
            node = si_pb2.NodeInfo(
                nodeID="n1",
                action=si.NodeAction.CREATE,
                schedulableResource=si_pb2.Resource(resources={"vcore": si_pb2.Quantity(value=1000)}),
            )
            request = si_pb2.NodeRequest(rmID="rm", nodes=[node]).SerializeToString()
            done = threading.Event()

            def requests() -> Iterator[bytes]:
                yield request
                done.wait(WAIT)  # no half-close: the requests never end before the call does

            call = channel.stream_stream(SERVICE + "UpdateNode")(requests(), timeout=WAIT)
            next(call)  # korral sent a response; the client then drops the call without a goodbye
            call.cancel()
            done.set()
            # the next stream on the same connection is told to register again (once korral saw the break)
            deadline = time.monotonic() + WAIT
            while True:
                again = channel.stream_stream(SERVICE + "UpdateNode")(iter([request]), timeout=WAIT)
                try:
                    next(again)
                except grpc.RpcError as refused:
                    assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION, refused
                    assert "register again" in (refused.details() or "")
                    break
                again.cancel()
                assert time.monotonic() < deadline, "korral never asked for a resync"
        finally:
            channel.close()
        log = served.stop()
    assert "RmID=rm: its node stream broke after korral had sent responses on it" in log, log[-3000:]
