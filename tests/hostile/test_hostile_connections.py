"""gRPC connections are bounded in number and in how long one may stay silent: a client that opens
sockets to the gRPC port and sends nothing (no credentials, no CPU) once held a descriptor each until
``korral serve`` ran out of them (21,000 sockets: a real RM could not connect, "connection attempt timed
out before receiving SETTINGS frame", and the REST server logged "socket.accept() out of system
resource" 13,000 times). Now past ``max_connections`` a new connection is closed at once, and a
connection that has not finished its handshake within 10 s is closed, so a real RM gets in."""

from __future__ import annotations

import os
import socket

import grpc
from core_helpers import eventually
from hostile_serve import korral_serve

import korral
from korral.server.fds import default_max_connections
from korral.si import si_pb2

SERVICE = "/si.v1.Scheduler/"
WAIT = 60
EXTRA = 200  # silent sockets past the bound


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def closed_by_server(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1 << 16) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset by the server
        return True


def test_silent_connections_past_the_bound_are_closed_and_a_real_rm_gets_in() -> None:
    bound = default_max_connections()  # korral serve's, whose RLIMIT_NOFILE is this process's
    with korral_serve(rest=True) as served:
        pid = served.process.pid
        before = descriptors(pid)
        host, port = served.grpc.rsplit(":", 1)
        silent = [socket.create_connection((host, int(port)), timeout=WAIT) for _ in range(bound + EXTRA)]
        try:
            # gRPC's core accepts each and closes those past the bound at once: the server never
            # holds a descriptor for more than `bound` of them (a few more for a moment: each one
            # past the bound is accepted, then closed)
            held = [descriptors(pid)]

            def past_bound_closed() -> bool:
                held.append(descriptors(pid))
                return sum(closed_by_server(s) for s in silent) >= EXTRA

            eventually(past_bound_closed, timeout=WAIT)
            assert max(held) <= before + bound + 8, f"{max(held) - before} descriptors for {bound} allowed"
            # the rest are closed once their handshake is overdue: a real RM then registers
            eventually(lambda: all(closed_by_server(s) for s in silent), timeout=WAIT)
            channel = grpc.insecure_channel(served.grpc, options=[("grpc.use_local_subchannel_pool", 1)])
            try:
                request = si_pb2.RegisterResourceManagerRequest(rmID="real")
                channel.unary_unary(SERVICE + "RegisterResourceManager")(
                    request.SerializeToString(), timeout=WAIT, wait_for_ready=True
                )
            finally:
                channel.close()
        finally:
            for sock in silent:
                sock.close()
        log = served.stop()
    assert "RmID=real registered" in log
    assert "out of system resource" not in log


def test_metadata_past_grpcs_bound_is_refused_before_korral_sees_the_call() -> None:
    """gRPC's own bound on a call's metadata (16 KiB) holds: a megabyte of headers is refused."""
    with korral.start() as core:
        address = core.serve_grpc("127.0.0.1:0")
        channel = grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
        register = channel.unary_unary(SERVICE + "RegisterResourceManager")
        try:
            request = si_pb2.RegisterResourceManagerRequest(rmID="rm").SerializeToString()
            for size in (64 * 1024, 1024 * 1024):
                try:
                    register(request, timeout=WAIT, metadata=[("x-junk", "a" * size)])
                except grpc.RpcError as refused:
                    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                    assert "metadata" in (refused.details() or "")
                else:
                    raise AssertionError(f"{size:,} bytes of metadata accepted")
            assert core.partition_names() == []
            register(request, timeout=WAIT)  # a call within the bound goes on
            assert core.partition_names() == ["[rm]default"]
        finally:
            channel.close()
