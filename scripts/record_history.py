"""Record a small cluster's history from korral's own event stream: src/examples/history.jsonl.

A core on threads serves its REST API; a reader takes ``/ws/v1/events/stream`` (JSON lines, as YuniKorn
writes them) into the output file while an RM in this process plays a small workload in real time on
the bundled example's queues: applications arrive in its three leaves, their asks are allocated as the
cluster has room, each allocation runs a few seconds and is released. ``korral simulate --replay``
then replays the recording against other configs. Takes about ``--seconds`` of wall time.

    .venv/bin/python scripts/record_history.py [--seconds 20] [--seed 3] [--out src/examples/history.jsonl]
"""

from __future__ import annotations

import argparse
import random
import threading
import time
import urllib.request
from pathlib import Path

import korral
from korral import si
from korral.harness.simulate.cluster import GiB, bundled_config

ROOT = Path(__file__).resolve().parent.parent
# the configured leaves only: the stream names the queue an application was placed in, not the tags a
# placement rule chose it by, so a replay submits to the queue itself
QUEUES = ["root.production", "root.development", "root.production", "root.development", "root.default"]


class RM(korral.ResourceManagerCallback):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.allocations: list[si.Allocation] = []

    def update_allocation(self, response: si.AllocationResponse) -> None:
        with self.lock:
            self.allocations.extend(response.new)

    def take(self) -> list[si.Allocation]:
        with self.lock:
            taken, self.allocations = self.allocations, []
            return taken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "src" / "examples" / "history.jsonl")
    options = parser.parse_args()
    rng = random.Random(options.seed)
    rm = RM()
    with korral.start() as core:
        url = core.serve_rest("127.0.0.1:0")
        stream = urllib.request.urlopen(f"{url}/ws/v1/events/stream", timeout=120)
        lines: list[bytes] = []
        done = threading.Event()

        def read() -> None:
            while not done.is_set():
                line = stream.readline()
                if not line:
                    return
                lines.append(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        core.register_resource_manager(
            si.RegisterResourceManagerRequest(rm_id="rm", config=bundled_config()), rm
        )
        core.update_node(
            si.NodeRequest(
                rm_id="rm",
                nodes=[
                    si.NodeInfo(
                        node_id=f"node-{i}",
                        action=si.NodeAction.CREATE,
                        schedulable_resource={"memory": 64 * GiB, "vcore": 16_000},
                    )
                    for i in range(2)
                ],
            )
        )
        start = time.monotonic()
        ends: list[tuple[float, si.Allocation]] = []
        tasks: dict[str, int] = {}
        finished: dict[str, int] = {}
        next_app, seq = 0.0, 0
        while time.monotonic() - start < options.seconds or ends:
            now = time.monotonic() - start
            if now >= next_app and now < options.seconds * 0.7:
                seq += 1
                app_id = f"app-{seq:03d}"
                queue = rng.choice(QUEUES)
                count = rng.choice([1, 2, 4, 6])
                vcore, memory = rng.choice([(2, 4), (4, 8), (8, 16)])
                tasks[app_id] = count
                core.update_application(
                    si.ApplicationRequest(
                        rm_id="rm",
                        new=[
                            si.AddApplicationRequest(
                                application_id=app_id,
                                queue_name=queue,
                                ugi=si.UserGroupInformation(user=rng.choice(["ana", "bo", "cy"])),
                            )
                        ],
                    )
                )
                core.update_allocation(
                    si.AllocationRequest(
                        rm_id="rm",
                        asks=[
                            si.AllocationAsk(
                                allocation_key=f"{app_id}-ask-{i}",
                                application_id=app_id,
                                resource_ask={"memory": memory * GiB, "vcore": vcore * 1000},
                                max_allocations=1,
                            )
                            for i in range(count)
                        ],
                    )
                )
                next_app = now + rng.expovariate(1.2)
            for allocation in rm.take():
                ends.append((now + rng.uniform(1.0, 4.0), allocation))
            due = [(end, a) for end, a in ends if end <= now]
            ends = [(end, a) for end, a in ends if end > now]
            if due:
                core.update_allocation(
                    si.AllocationRequest(
                        rm_id="rm",
                        releases=si.AllocationReleasesRequest(
                            allocations_to_release=[
                                si.AllocationRelease(
                                    application_id=a.application_id,
                                    uuid=a.uuid,
                                    termination_type=si.TerminationType.STOPPED_BY_RM,
                                )
                                for _, a in due
                            ]
                        ),
                    )
                )
                for _, a in due:
                    finished[a.application_id] = finished.get(a.application_id, 0) + 1
            time.sleep(0.05)
        core.wait_until_idle()
        time.sleep(1.0)  # the stream's last events reach the reader
        done.set()
    options.out.write_bytes(b"".join(lines))
    print(f"{options.out}: {len(lines)} events, {seq} applications")


if __name__ == "__main__":
    main()
