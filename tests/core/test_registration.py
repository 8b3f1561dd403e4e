"""Registration goes one way: ``Core`` asks once and waits for one answer; the registrar below it admits
the RM in the RMProxy, starts its partitions and installs them. Refused or accepted, the answer is the
caller's, and nothing of a refused or abandoned registration is left running."""

from __future__ import annotations

import gc
import threading

import pytest
from core_helpers import NODE, ROOT_ONLY, eventually

import korral
from korral import si
from korral import testing as t
from korral.actors.partition.actor import PartitionActor

WAIT = 120


def partitions(names: list[str]) -> str:
    lines = ["partitions:"]
    for name in names:
        lines += [f"  - name: {name}", "    queues:", "      - name: root"]
    return "\n".join(lines) + "\n"


def many_queues(count: int) -> str:
    lines = ["partitions:", "  - name: default", "    queues:", "      - name: root", "        queues:"]
    lines += [f"          - name: q{index}" for index in range(count)]
    return "\n".join(lines) + "\n"


def running_threads() -> int:
    return threading.active_count()


def live_partitions(core: korral.Core) -> list[str]:
    """The names of this core's partition actors that have not stopped."""
    return sorted(
        actor.name
        for actor in gc.get_objects()
        if isinstance(actor, PartitionActor)
        and actor.tracker is core.tracker
        and not actor.actor_stopped.is_set()
    )


def test_racing_registrations_of_many_rms_each_answer_and_each_rm_is_served() -> None:
    with korral.start() as core:
        rms = {f"rm{index}": t.RecordingRM(f"rm{index}") for index in range(8)}
        failures: list[BaseException] = []

        def register(rm_id: str) -> None:
            try:
                response = core.register_resource_manager(
                    t.register(rm_id, partitions(["default", "second"])), rms[rm_id]
                )
                assert isinstance(response, si.RegisterResourceManagerResponse)
            except BaseException as error:  # reported below
                failures.append(error)

        threads = [threading.Thread(target=register, args=(rm_id,)) for rm_id in rms]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
        assert not failures, failures
        assert len(core.partition_names()) == 16
        for rm_id, rm in rms.items():
            core.update_node(t.nodes(rm_id, [f"{rm_id}-n1"], NODE))
            assert rm.wait_for(lambda r, rm_id=rm_id: r.accepted_nodes == [f"{rm_id}-n1"])


def test_a_refused_reregistration_answers_the_caller_and_leaves_the_earlier_one_serving() -> None:
    with korral.start(max_partitions=2) as core:
        rm = t.RecordingRM("a")
        core.register_resource_manager(t.register("a", partitions(["default", "second"])), rm)
        with pytest.raises(korral.CapacityError, match="max_partitions"):
            core.register_resource_manager(
                t.register("a", partitions(["default", "second", "third"])), t.RecordingRM("a")
            )
        assert core.partition_names() == ["[a]default", "[a]second"]
        assert live_partitions(core) == ["[a]default", "[a]second"]  # nothing started for the refused one
        core.update_node(t.nodes("a", ["n1"], NODE))
        assert rm.wait_for(lambda r: r.accepted_nodes == ["n1"])


def test_a_registration_that_replaces_another_leaves_only_its_own_partitions_running() -> None:
    with korral.start() as core:
        core.register_resource_manager(
            t.register("a", partitions(["one", "two", "three"])), t.RecordingRM("a")
        )
        rm = t.RecordingRM("a")
        core.register_resource_manager(t.register("a", ROOT_ONLY), rm)
        assert core.partition_names() == ["[a]default"]
        assert live_partitions(core) == ["[a]default"]  # the replaced ones stopped before the answer
        core.update_node(t.nodes("a", ["n1"], NODE))
        assert rm.wait_for(lambda r: r.accepted_nodes == ["n1"])


def test_unregistering_stops_the_rms_partitions_before_it_returns() -> None:
    with korral.start() as core:
        core.register_resource_manager(t.register("a", ROOT_ONLY), t.RecordingRM("a"))
        core.register_resource_manager(t.register("b", partitions(["x", "y"])), t.RecordingRM("b"))
        core.wait_until_idle()
        assert live_partitions(core) == ["[a]default", "[b]x", "[b]y"]
        core.unregister_resource_manager("b")
        assert live_partitions(core) == ["[a]default"]
        assert core.partition_names() == ["[a]default"]
        with pytest.raises(korral.SchedulerError, match='RmID="b" not registered'):
            core.unregister_resource_manager("b")


@pytest.mark.slow
def test_stopping_the_core_during_a_registration_answers_the_caller_and_leaves_nothing_running() -> None:
    threads = running_threads()
    core = korral.start()
    outcome: list[object] = []

    def register() -> None:
        try:
            outcome.append(core.register_resource_manager(t.register("a", many_queues(20_000))))
        except korral.KorralError as error:
            outcome.append(error)

    thread = threading.Thread(target=register)
    thread.start()
    # admitted: the registrar is starting its partition
    assert eventually(lambda: "a" in core.configurations() or outcome, timeout=WAIT)
    core.stop()
    thread.join(WAIT)
    assert len(outcome) == 1, outcome
    assert eventually(lambda: running_threads() <= threads, timeout=WAIT), threading.enumerate()
    assert live_partitions(core) == []


def test_a_delivery_under_way_when_the_rm_registers_again_never_reaches_the_replaced_callback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The core counts a delivery (its metrics) before it calls the RM: a registration that ends
    meanwhile must still keep the call from the replaced callback object."""
    from korral.server.metrics import CoreMetrics

    counting, release = threading.Event(), threading.Event()
    original = CoreMetrics.delivered

    def held(self: CoreMetrics, rm_id: str, method: str, argument: object) -> None:
        if method == "update_node" and not release.is_set():
            counting.set()
            release.wait(timeout=120)
        original(self, rm_id, method, argument)

    monkeypatch.setattr(CoreMetrics, "delivered", held)

    class Replaced(t.RecordingRM):
        replaced = False
        called_after: list[str] = []

        def update_node(self, response: si.NodeResponse) -> None:
            if self.replaced:
                self.called_after.append("update_node")
            super().update_node(response)

    old, new = Replaced("rm"), t.RecordingRM("rm")
    with korral.start() as core:
        core.register_resource_manager(t.register("rm", ROOT_ONLY), old)
        core.update_node(t.nodes("rm", ["n1"], NODE))
        assert counting.wait(timeout=120)  # the answer to the node is being counted, not yet delivered
        core.register_resource_manager(t.register("rm", ROOT_ONLY), new)
        old.replaced = True
        release.set()
        core.wait_until_idle(timeout=120)
    assert old.called_after == []
