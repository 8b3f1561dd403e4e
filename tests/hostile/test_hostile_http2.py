"""HTTP/2 rapid reset (CVE-2023-44487's shape): the abuser's connection ends, every other RM's calls go on.

A raw HTTP/2 client (the ``h2`` package, a test dependency) opens gRPC streams and resets each at once,
as fast as it can; each time its connection is closed it connects again and goes on. Meanwhile RMs on
their own connections register, send nodes and hear back, and an RM connected before the attack
keeps its connection and streams: none of their calls may fail.
"""

from __future__ import annotations

import threading
import time

import pytest
from core_helpers import NODE

import korral
from korral import testing as t

pytest.importorskip("h2")
from http2_attacker import Outcome, rapid_reset  # after the skip: it needs h2

from korral.server.resets import MAX_RESETS

RESETS = 30_000  # on one connection, at most (it is closed long before)
SECONDS = 20.0  # one connection's attack, at most
ATTACK_SECONDS = 6.0  # the abuser connects again and again for this long (and until victims were served)
WAIT = 60


def test_rapid_reset_ends_the_abusers_connection_and_no_other_rms_call_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with korral.start() as core:
        address = core.serve_grpc("127.0.0.1:0")
        attacking = threading.Event()
        attack_over = threading.Event()
        failures: list[str] = []
        served_during_attack: list[int] = [0]

        def rms() -> None:
            index = 0
            while not attack_over.is_set():
                index += 1
                rm_id = f"victim-{index}"
                during = attacking.is_set()
                try:
                    with korral.connect(address, call_timeout=WAIT) as remote:
                        rm = t.RecordingRM(rm_id)
                        remote.register_resource_manager(t.register(rm_id), rm)
                        remote.update_node(t.nodes(rm_id, ["n1"], NODE))
                        if not rm.wait_for(lambda r: r.accepted_nodes == ["n1"], WAIT):
                            failures.append(f"{rm_id}: node not accepted")
                        elif during and not attack_over.is_set():
                            served_during_attack[0] += 1
                except Exception as error:
                    failures.append(f"{rm_id}: {error!r}")
                if len(failures) > 5 or index > 500:
                    return

        with korral.connect(address, call_timeout=WAIT) as resident:
            # connected, registered and streaming before the attack: its connection must survive it
            rm = t.RecordingRM("resident")
            resident.register_resource_manager(t.register("resident"), rm)
            resident.update_node(t.nodes("resident", ["r1"], NODE))
            assert rm.wait_for(lambda r: r.accepted_nodes == ["r1"], WAIT)
            victims = threading.Thread(target=rms)
            victims.start()
            outcomes: list[Outcome] = []
            began = time.monotonic()
            attacking.set()
            try:
                while time.monotonic() - began < WAIT and (
                    time.monotonic() - began < ATTACK_SECONDS or served_during_attack[0] < 2
                ):
                    outcomes.append(rapid_reset(address, max_resets=RESETS, max_seconds=SECONDS))
                    if not (outcomes[-1].closed or outcomes[-1].goaway):
                        break  # the server let it run to its own bounds: no use going on
            finally:
                attack_over.set()
                victims.join(WAIT * 3)
            assert not victims.is_alive()
            # every connection of the abuser was ended by the server, well before its own bounds
            assert outcomes and all(o.closed or o.goaway for o in outcomes), outcomes
            assert all(o.resets < RESETS and o.seconds < SECONDS for o in outcomes), outcomes
            assert failures == [], (outcomes, failures)
            assert served_during_attack[0] >= 1, outcomes
            # the resident RM's connection and streams were left alone
            resident.update_node(t.nodes("resident", ["r2"], NODE))
            assert rm.wait_for(lambda r: r.accepted_nodes == ["r1", "r2"], WAIT), rm.accepted_nodes
    # one WARNING line per connection closed, naming it
    assert caplog.text.count("HTTP/2 rapid reset") >= len(outcomes)
    assert "closed the connection from ipv4:127.0.0.1:" in caplog.text


def test_an_rm_that_cancels_its_streams_after_using_them_keeps_its_connection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only streams reset before their first request count: an RM that registers, opens a stream,
    sends on it, hears back and cancels it, more often than an abuser's bound allows within its window,
    all on one connection, is not taken for an abuser."""
    import grpc

    from korral.server.convert import to_pb
    from korral.si import si_pb2

    with korral.start() as core:
        address = core.serve_grpc("127.0.0.1:0")
        channel = grpc.insecure_channel(address)
        try:
            register = channel.unary_unary("/si.v1.Scheduler/RegisterResourceManager")
            update_node = channel.stream_stream("/si.v1.Scheduler/UpdateNode")
            for index in range(300):
                # (again each time: a stream cut after korral answered on it asks for a resync)
                registration = si_pb2.RegisterResourceManagerRequest(rmID="busy", config="")
                register(registration.SerializeToString(), timeout=WAIT)
                request = to_pb(t.nodes("busy", [f"n{index}"], NODE)).SerializeToString()
                call = update_node(iter([request]), timeout=WAIT, wait_for_ready=True)
                answer = si_pb2.NodeResponse.FromString(next(call))
                assert [node.nodeID for node in answer.accepted] == [f"n{index}"]
                call.cancel()
            assert MAX_RESETS < 300  # more cancelled streams than an abuser may reset
        finally:
            channel.close()
    # never closed (nor was closing tried): the log says so for every connection it closes
    assert "rapid reset" not in caplog.text
