"""The threads korral runs do not grow with what configs and clients name: 60 RMs with 200 partitions
between them leave the process at the fixed bound (every actor but the RMProxy on four tiers of
``actor_threads`` workers), and every partition still schedules."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from core_helpers import eventually

import korral
from korral import testing as t

WAIT = 120
RMS = 60
PARTITIONS = 200
NODE = {"memory": 4_000, "vcore": 4_000}
TASK = {"memory": 100, "vcore": 100}


def partitions(names: list[str]) -> str:
    lines = ["partitions:"]
    for name in names:
        lines += [
            f"  - name: {name}",
            "    queues:",
            "      - name: root",
            '        submitacl: "*"',
            "        queues:",
            "          - name: a",
        ]
    return "\n".join(lines) + "\n"


def partitions_of_each_rm() -> list[list[str]]:
    """PARTITIONS partition names spread over RMS RMs (some RMs run more than others)."""
    names: list[list[str]] = [[] for _ in range(RMS)]
    for index in range(PARTITIONS):
        names[index % RMS].append(f"p{index}")
    return names


def schedule_everywhere(core: object, rms: dict[str, t.RecordingRM], spread: list[list[str]]) -> None:
    """One node, one application and two asks in every partition of every RM; each RM hears of all
    its allocations."""
    for rm_id, names in zip(rms, spread, strict=True):
        for name in names:
            core.update_node(t.nodes(rm_id, [f"{name}-n1"], NODE, partition=name))  # type: ignore[attr-defined]
            core.update_application(  # type: ignore[attr-defined]
                t.applications(rm_id, {f"{name}-app": "root.a"}, partition=name)
            )
            core.update_allocation(t.asks(rm_id, f"{name}-app", 2, TASK, partition=name))  # type: ignore[attr-defined]
    for (rm_id, rm), names in zip(rms.items(), spread, strict=True):
        assert rm.wait_for_allocations(2 * len(names), WAIT), (rm_id, rm.allocated_total)
        placed = {allocation.partition_name for allocation in rm.live.values()}
        assert placed == set(names), rm_id


def test_many_partitions_and_rms_leave_the_threads_at_the_fixed_bound() -> None:
    threads_before = threading.active_count()
    with korral.start(actor_threads=3) as core:
        idle_core = threading.active_count() - threads_before  # registrar, RMProxy, timer, history
        spread = partitions_of_each_rm()
        rms: dict[str, t.RecordingRM] = {}
        for index, names in enumerate(spread):
            rm_id = f"rm{index}"
            rms[rm_id] = t.RecordingRM(rm_id)
            core.register_resource_manager(t.register(rm_id, partitions(names)), rms[rm_id])
        assert len(core.partition_names()) == PARTITIONS
        schedule_everywhere(core, rms, spread)
        core.wait_until_idle()
        # four tiers of at most actor_threads workers each, whatever the RMs and partitions
        assert threading.active_count() <= threads_before + idle_core + 4 * 3, [
            thread.name for thread in threading.enumerate()
        ]
    eventually(lambda: threading.active_count() <= threads_before, timeout=WAIT)


def _process_threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/PID/status")
def test_korral_serve_threads_stay_fixed_as_rms_register_over_grpc() -> None:
    from hostile_serve import korral_serve

    spread = partitions_of_each_rm()
    # (its log is read only once it stops: debug lines for 60 RMs would fill the pipe meanwhile)
    with korral_serve("--actor-threads", "2", "--log-level", "warning") as served:
        pid = served.process.pid
        remotes = []
        try:
            rms: dict[str, t.RecordingRM] = {}
            first = korral.connect(served.grpc, call_timeout=WAIT)
            remotes.append(first)
            rms["rm0"] = t.RecordingRM("rm0")
            first.register_resource_manager(t.register("rm0", partitions(spread[0])), rms["rm0"])
            schedule_everywhere(first, {"rm0": rms["rm0"]}, spread[:1])
            # one RM's partition on each tier's workers: the fixed part, whatever comes next
            one_rm = _process_threads(pid)
            for index in range(1, RMS):
                rm_id = f"rm{index}"
                remote = korral.connect(served.grpc, call_timeout=WAIT)
                remotes.append(remote)
                rms[rm_id] = t.RecordingRM(rm_id)
                remote.register_resource_manager(t.register(rm_id, partitions(spread[index])), rms[rm_id])
            for index, (rm_id, rm) in enumerate(rms.items()):
                if index:
                    schedule_everywhere(remotes[index], {rm_id: rm}, spread[index : index + 1])
            # at most the workers not started yet (4 tiers x 2, less the one each started already)
            # and gRPC's own pool, which grows with load to a size of its own, never with the RMs
            assert _process_threads(pid) <= one_rm + 4 + 8, (one_rm, _process_threads(pid))
        finally:
            for remote in remotes:
                remote.close()
        served.stop()


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "4"])
def test_actor_threads_must_be_a_positive_whole_number(value: object) -> None:
    with pytest.raises(ValueError, match="actor_threads must be a positive whole number"):
        korral.start(actor_threads=value)
