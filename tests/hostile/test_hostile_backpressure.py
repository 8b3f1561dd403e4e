"""An RM that sends requests faster than the core handles them waits; the server does not hold them.

With the REST API on, every ask makes an event and the core handles an RM's asks slower than one client
streams them: unbounded, what it sent waited in its application's mailbox (~1 GB more in 80 s from one
RM that read every response). Past ``korral.actors.in_flight.MAX_IN_FLIGHT`` items in flight for an
RM, the server takes that RM's next request off its stream only once the core has caught up: HTTP/2
flow control holds the client back, nothing is refused or lost, and another RM is served meanwhile.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from hostile_serve import korral_serve
from test_hostile_event_channel import CONFIG, flood

from korral.si import si_pb2

SERVICE = "/si.v1.Scheduler/"
WAIT = 120
REQUESTS = 300  # 1.5 million asks, the same 5,000 keys again and again
GROWTH_BOUND = 500 * 1024 * 1024


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/PID/status")


def _register(channel: grpc.Channel, rm_id: str) -> None:
    request = si_pb2.RegisterResourceManagerRequest(rmID=rm_id, config=CONFIG)
    channel.unary_unary(SERVICE + "RegisterResourceManager")(request.SerializeToString(), timeout=WAIT)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the server's RSS from /proc")
def test_an_rm_streaming_faster_than_the_core_waits_and_the_server_stays_flat() -> None:
    with korral_serve("--log-level", "info", rest=True) as served:
        channel = grpc.insecure_channel(served.grpc, options=[("grpc.use_local_subchannel_pool", 1)])
        other = grpc.insecure_channel(served.grpc, options=[("grpc.use_local_subchannel_pool", 1)])
        stop = threading.Event()
        sent = [0]

        def counted() -> Iterator[bytes]:
            for request in flood("flood", stop):
                sent[0] += 1
                if sent[0] > REQUESTS:
                    return
                yield request

        try:
            _register(channel, "flood")
            before = _peak_rss(served.process.pid)
            call = channel.stream_stream(SERVICE + "UpdateInOrder")(counted())

            def read_all() -> None:
                with contextlib.suppress(grpc.RpcError):  # its end: the cancel below
                    for _ in call:
                        pass

            reader = threading.Thread(target=read_all, daemon=True)
            reader.start()  # a well-behaved RM: it reads every response
            # another RM registers and is answered while the flood waits on the core
            _register(other, "quiet")
            while sent[0] <= REQUESTS and reader.is_alive():
                reader.join(1.0)
                assert _peak_rss(served.process.pid) - before < GROWTH_BOUND, (
                    f"the server grew by {(_peak_rss(served.process.pid) - before) >> 20} MiB after "
                    f"{sent[0]} requests of 5,000 asks"
                )
            growth = _peak_rss(served.process.pid) - before
            stop.set()
            call.cancel()
        finally:
            stop.set()
            channel.close()
            other.close()
        served.stop()
    assert growth < GROWTH_BOUND
