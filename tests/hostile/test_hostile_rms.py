"""Registered RMs and their partitions are bounded: past ``max_rms`` RMs or ``max_partitions``
partitions a registration or a configuration update is refused (``RESOURCE_EXHAUSTED`` over gRPC) and
the threads korral runs stop growing with what clients name."""

from __future__ import annotations

import threading

import grpc
import pytest
from core_helpers import TWO_LEAVES, eventually

import korral
from korral import testing as t
from korral.si import si_pb2

SERVICE = "/si.v1.Scheduler/"
WAIT = 60


def partitions(count: int) -> str:
    lines = ["partitions:"]
    for index in range(count):
        lines += [f"  - name: p{index}", "    queues:", "      - name: root"]
    return "\n".join(lines) + "\n"


def korral_threads() -> int:
    """Threads other than the gRPC loop's default executor, which grows on demand to a fixed size of
    its own (asyncio's, by CPU count) whatever the clients name."""
    return sum(1 for thread in threading.enumerate() if not thread.name.startswith("asyncio_"))


def _register(channel: grpc.Channel, rm_id: str, config: str = "") -> None:
    request = si_pb2.RegisterResourceManagerRequest(rmID=rm_id, config=config)
    channel.unary_unary(SERVICE + "RegisterResourceManager")(request.SerializeToString(), timeout=WAIT)


def test_registrations_past_max_rms_are_refused_and_threads_stop_growing() -> None:
    with korral.start(max_rms=8, actor_threads=2) as core:
        address = core.serve_grpc("127.0.0.1:0")
        channel = grpc.insecure_channel(address)
        threads = korral_threads()
        try:
            for index in range(8):
                _register(channel, f"rm{index}")
            for index in range(8, 40):  # unauthenticated ids, each new
                with pytest.raises(grpc.RpcError) as refused:
                    _register(channel, f"intruder-{index}")
                assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert "max_rms" in (refused.value.details() or "")
            # the actors' workers, started as first needed: four tiers of actor_threads
            assert korral_threads() <= threads + 4 * 2
            _register(channel, "rm3", TWO_LEAVES)  # a registered RM may still register again
        finally:
            channel.close()
        assert len(core.partition_names()) == 8


def test_a_config_past_max_partitions_is_refused_at_registration_and_update() -> None:
    with korral.start(max_partitions=20) as core:
        address = core.serve_grpc("127.0.0.1:0")
        with korral.connect(address) as remote:
            rm = t.RecordingRM("rm")
            remote.register_resource_manager(t.register("rm", partitions(15)), rm)
            threads = threading.active_count()
            with pytest.raises(korral.SchedulerError, match=r"RESOURCE_EXHAUSTED.*max_partitions"):
                remote.register_resource_manager(t.register("other", partitions(6)), t.RecordingRM("other"))
            with pytest.raises(korral.SchedulerError, match=r"RESOURCE_EXHAUSTED.*max_partitions"):
                remote.update_configuration(
                    korral.si.UpdateConfigurationRequest(rm_id="rm", config=partitions(1200))
                )
            # within the bound an update still goes through
            remote.update_configuration(
                korral.si.UpdateConfigurationRequest(rm_id="rm", config=partitions(20))
            )
            eventually(lambda: len(core.partition_names()) == 20, timeout=WAIT)
            assert threading.active_count() <= threads + 5 * 3


TOKENS = {"rm-a": "a-secret-of-rm-a-0123456789", "rm-b": "b-secret-of-rm-b-0123456789"}


def _leave_raw(address: str, rm_id: str, token: str | None = None) -> None:
    channel = grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
    metadata = [("korral-leave", "1")] + ([("authorization", f"Bearer {token}")] if token else [])
    try:
        request = si_pb2.UpdateConfigurationRequest(rmID=rm_id)
        channel.unary_unary(SERVICE + "UpdateConfiguration")(
            request.SerializeToString(), timeout=WAIT, metadata=metadata
        )
    finally:
        channel.close()


def test_an_rm_leaves_only_with_its_credentials_and_leaves_no_thread_behind() -> None:
    with korral.start() as core:
        address = core.serve_grpc("127.0.0.1:0", tokens=TOKENS)
        with korral.connect(address, token=TOKENS) as remote:
            rm = t.RecordingRM("rm-a")
            remote.register_resource_manager(t.register("rm-a", TWO_LEAVES), rm)
            remote.update_node(t.nodes("rm-a", ["n1"], {"vcore": 1000}))
            assert rm.wait_for(lambda r: r.accepted_nodes == ["n1"])
            for token in (None, TOKENS["rm-b"]):  # no token, another RM's token: refused, nothing changes
                with pytest.raises(grpc.RpcError) as refused:
                    _leave_raw(address, "rm-a", token)
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert core.partition_names() == ["[rm-a]default"]
            remote.unregister_resource_manager("rm-a")  # with its own token
            assert core.partition_names() == []
            # the core's workers (a fixed number, started as first needed) stay; nothing of the RM's
            settled = threading.active_count()
            with pytest.raises(korral.SchedulerError, match="not registered"):
                core.update_node(t.nodes("rm-a", ["n2"], {"vcore": 1000}))
            # it may come back, and leaves nothing running when it goes again
            remote.register_resource_manager(t.register("rm-a", TWO_LEAVES), t.RecordingRM("rm-a"))
            remote.unregister_resource_manager("rm-a")
            eventually(lambda: threading.active_count() <= settled, timeout=WAIT)


def test_without_tokens_a_live_rm_cannot_be_made_to_leave_from_another_connection() -> None:
    with korral.start() as core:
        address = core.serve_grpc("127.0.0.1:0")
        with korral.connect(address) as remote:
            rm = t.RecordingRM("rm")
            remote.register_resource_manager(t.register("rm", TWO_LEAVES), rm)
            remote.update_node(t.nodes("rm", ["n1"], {"vcore": 1000}))
            assert rm.wait_for(lambda r: r.accepted_nodes == ["n1"])
            with pytest.raises(grpc.RpcError) as refused:
                _leave_raw(address, "rm")
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert core.partition_names() == ["[rm]default"]
