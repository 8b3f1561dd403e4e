"""A remote resource manager for korral: connects over gRPC, creates nodes, submits an application and asks,
and prints what korral allocates. Start a server first:

    korral serve                                  # gRPC SI on 127.0.0.1:9090
    python docs/remote-rm.py 127.0.0.1:9090
"""

from __future__ import annotations

import sys
import threading

import korral
from korral import si

CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: batch
"""


class PrintingRM(korral.ResourceManagerCallback):
    """Runs on korral's client thread, in the order korral sent the responses."""

    def __init__(self, expected: int) -> None:
        self.allocated = 0
        self.expected = expected
        self.done = threading.Event()

    def update_node(self, response: si.NodeResponse) -> None:
        print("nodes accepted:", [node.node_id for node in response.accepted])

    def update_application(self, response: si.ApplicationResponse) -> None:
        for app in response.accepted:
            print("application accepted:", app.application_id)
        for app in response.rejected:
            print("application rejected:", app.application_id, app.reason)
        for app in response.updated:
            print(f"application {app.application_id} is {app.state}")

    def update_allocation(self, response: si.AllocationResponse) -> None:
        for allocation in response.new:
            print(f"allocated {allocation.allocation_key} on {allocation.node_id}")
        for rejected in response.rejected:
            print(f"ask {rejected.allocation_key} rejected: {rejected.reason}")
        self.allocated += len(response.new)
        if self.allocated >= self.expected:
            self.done.set()


def main(address: str) -> None:
    rm = PrintingRM(expected=4)
    with korral.connect(address) as core:  # korral.RemoteCore: the SI calls of korral.Core
        core.register_resource_manager(si.RegisterResourceManagerRequest(rm_id="demo", config=CONFIG), rm)
        core.update_node(
            si.NodeRequest(
                rm_id="demo",
                nodes=[
                    si.NodeInfo(
                        node_id=f"node-{index}",
                        action=si.NodeAction.CREATE,
                        schedulable_resource={"memory": 4_000_000_000, "vcore": 4_000},
                    )
                    for index in range(2)
                ],
            )
        )
        core.update_application(
            si.ApplicationRequest(
                rm_id="demo",
                new=[
                    si.AddApplicationRequest(
                        application_id="app-1",
                        queue_name="root.batch",
                        ugi=si.UserGroupInformation(user="me"),
                    )
                ],
            )
        )
        # no need to wait for the application's acceptance: korral.connect sends an RM's requests on
        # one stream and the core takes them in the order sent, as in-process
        core.update_allocation(
            si.AllocationRequest(
                rm_id="demo",
                asks=[
                    si.AllocationAsk(
                        allocation_key=f"task-{index}",
                        application_id="app-1",
                        resource_ask={"memory": 1_000_000_000, "vcore": 1_000},
                        max_allocations=1,
                    )
                    for index in range(4)
                ],
            )
        )
        if not rm.done.wait(30):
            sys.exit(f"only {rm.allocated} of {rm.expected} allocations arrived")
    # the RM stays registered in korral with its allocations after it disconnects


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:9090")
