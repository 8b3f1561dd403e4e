"""What the served-korral trust tests (test_grpc_trust_*.py) share: a served core, raw SI stubs.

Served korral as trustworthy as in-process korral (issue 22, points 1, 2, 3 and 6), over real loopback
sockets: a stream carries one RM, a broken stream makes the RM resync and nothing is lost, who may speak
for an RM (TLS with certificates made at test time, per-RM tokens), the backlog bounded in bytes.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from core_helpers import FAST, NODE, TWO_LEAVES, part

import korral
from korral import si
from korral.server.chaos import ResyncingRM
from korral.si import si_pb2, si_pb2_grpc


@pytest.fixture
def served() -> Iterator[tuple[korral.Core, str]]:
    with korral.start(**FAST) as core:
        yield core, core.serve_grpc("127.0.0.1:0")


def _stub(channel: grpc.Channel) -> si_pb2_grpc.SchedulerStub:
    return si_pb2_grpc.SchedulerStub(channel)


def _register(stub: si_pb2_grpc.SchedulerStub, rm_id: str, **call: object) -> None:
    stub.RegisterResourceManager(
        si_pb2.RegisterResourceManagerRequest(rmID=rm_id, config=TWO_LEAVES), timeout=30, **call
    )


def _node(rm_id: str, node_id: str) -> si_pb2.NodeRequest:
    return si_pb2.NodeRequest(
        rmID=rm_id,
        nodes=[
            si_pb2.NodeInfo(
                nodeID=node_id,
                action=si_pb2.NodeInfo.CREATE,
                schedulableResource=si_pb2.Resource(
                    resources={"memory": si_pb2.Quantity(value=NODE["memory"])}
                ),
            )
        ],
    )


def _resyncing_rm(rm_id: str = "rm") -> ResyncingRM:
    return ResyncingRM(rm_id, TWO_LEAVES, {"n1": NODE, "n2": NODE}, {"app": "root.a"})


def _asks(
    rm: ResyncingRM, start: int, count: int, tags: dict[str, str] | None = None
) -> list[si.AllocationAsk]:
    return [
        si.AllocationAsk(
            allocation_key=f"{rm.rm_id}-ask-{index}",
            application_id="app",
            resource_ask={"memory": 1_000},
            max_allocations=1,
        )
        for index in range(start, start + count)
    ]


def _booked(core: korral.Core, rm_id: str) -> set[str]:
    app = core.application(part(rm_id), "app")
    return {a.uuid for a in app.allocations} if app is not None else set()
