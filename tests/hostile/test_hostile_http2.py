"""HTTP/2 rapid reset (CVE-2023-44487's shape) on one connection leaves every other RM's calls alone.

A raw HTTP/2 client (the ``h2`` package, a test dependency) opens gRPC streams and resets each at once,
as fast as it can, bounded in count and time, while RMs on their own connections register, send nodes
and hear back; none of their calls may fail.
"""

from __future__ import annotations

import threading

import pytest
from core_helpers import NODE

import korral
from korral import testing as t

pytest.importorskip("h2")
from http2_attacker import rapid_reset  # after the skip: it needs h2

RESETS = 30_000
SECONDS = 30.0
WAIT = 60


def test_rapid_reset_on_one_connection_does_not_fail_other_rms_calls() -> None:
    with korral.start() as core:
        address = core.serve_grpc("127.0.0.1:0")
        attacking = threading.Event()
        attack_over = threading.Event()
        failures: list[str] = []
        served_during_attack: list[int] = [0]

        def rms() -> None:
            index = 0
            while not attack_over.is_set() or served_during_attack[0] < 2:
                index += 1
                rm_id = f"victim-{index}"
                during = attacking.is_set() and not attack_over.is_set()
                try:
                    with korral.connect(address, call_timeout=WAIT) as remote:
                        rm = t.RecordingRM(rm_id)
                        remote.register_resource_manager(t.register(rm_id), rm)
                        remote.update_node(t.nodes(rm_id, ["n1"], NODE))
                        if not rm.wait_for(lambda r: r.accepted_nodes == ["n1"], WAIT):
                            failures.append(f"{rm_id}: node not accepted")
                        elif during:
                            served_during_attack[0] += 1
                except Exception as error:
                    failures.append(f"{rm_id}: {error!r}")
                if len(failures) > 5 or index > 500:
                    return

        victims = threading.Thread(target=rms)
        victims.start()
        attacking.set()
        try:
            outcome = rapid_reset(address, max_resets=RESETS, max_seconds=SECONDS)
        finally:
            attack_over.set()
            victims.join(WAIT * 3)
        assert not victims.is_alive()
        assert outcome.resets > 1000, outcome
        assert failures == [], (outcome, failures)
        assert served_during_attack[0] >= 1, outcome
