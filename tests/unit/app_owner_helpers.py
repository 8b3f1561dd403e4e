"""Helpers of the ApplicationOwner tests (test_app_owner_*.py): owners, asks and placements to feed them.

Each operation writes what others must learn into an ``AppEffects``: the queue (pending / allocated
deltas), the RM (new, released, rejected, state changes), the scheduler's view (``view_ops`` in the
order things happened: the view is also the record of what runs on each node) and the partition.
The scenarios follow docs/architecture.md ("One decision, end to end") and the reference 2.14-2.17:
asks, confirmation of placements the scheduler's view decided, recovery, releases, node and
application removal, completing timeout.
"""

from __future__ import annotations

from korral import resource as res
from korral import si
from korral.model.allocation import Allocation
from korral.model.app.application import Application, ApplicationEvent, ApplicationState
from korral.model.app.owner import AppEffects, ApplicationOwner
from korral.model.view_ops import AdoptRecovered, DropAsk, Forget, OwnerState, PutAsks, RollBack
from korral.resource import Resource

S = ApplicationState
E = ApplicationEvent
T = si.TerminationType
APP = "app-1"
QUEUE = "root.a"
CPU = {"vcore": 1000}


# ---- helpers -----------------------------------------------------------------------------------------


def new_owner(**app_kwargs) -> ApplicationOwner:
    app_kwargs.setdefault("partition", "[rm]default")
    app_kwargs.setdefault("queue_path", QUEUE)
    app_kwargs.setdefault("user", "alice")
    return ApplicationOwner(Application.new(APP, **app_kwargs))


def si_ask(key: str = "k1", resource: dict[str, int] | None = None, max_allocations: int = 1, **kw):
    return si.AllocationAsk(
        allocation_key=key,
        application_id=APP,
        resource_ask=CPU if resource is None else resource,
        max_allocations=max_allocations,
        **kw,
    )


def placed(owner: ApplicationOwner, key: str, uuid: str, node: str = "n1", generation: int | None = None):
    """What the scheduler's view decides for the ask ``key`` and sends to the application (``Placed``)."""
    ask = owner.app.asks[key]
    return Allocation(
        uuid=uuid,
        allocation_key=key,
        application_id=APP,
        node_id=node,
        resource=dict(ask.resource),
        queue_path=QUEUE,
        ask_generation=ask.generation if generation is None else generation,
    )


def release(uuid: str = "", key: str = "", termination: T = T.UNKNOWN_TERMINATION_TYPE, message: str = ""):
    return si.AllocationRelease(
        application_id=APP, uuid=uuid, allocation_key=key, termination_type=termination, message=message
    )


def owner_in(state: ApplicationState) -> ApplicationOwner:
    """An owner driven into ``state`` through its own operations where the state machine allows it."""
    owner = new_owner()
    if state is S.NEW:
        return owner
    if state in (S.REJECTED, S.RESUMING):
        owner.app.handle(E.REJECT if state is S.REJECTED else E.RESUME, 0.0)
        return owner
    owner.add_asks([si_ask("k1", max_allocations=3)], 0.0)
    if state is S.ACCEPTED:
        return owner
    owner.confirm([placed(owner, "k1", "u1")], 0.0)
    if state is S.STARTING:
        return owner
    owner.confirm([placed(owner, "k1", "u2")], 0.0)
    if state is S.RUNNING:
        return owner
    if state in (S.FAILING, S.FAILED):
        owner.app.handle(E.FAIL, 0.0)
        if state is S.FAILED:
            owner.app.handle(E.FAIL, 0.0)
        return owner
    owner.remove_asks(["k1"], 0.0)
    owner.release([release()], 0.0)
    assert owner.app.state is S.COMPLETING
    if state is S.COMPLETING:
        return owner
    owner.completing_timeout(100.0, 30.0)
    assert owner.app.state is S.COMPLETED
    if state is S.EXPIRED:
        owner.app.handle(E.EXPIRE, 100.0)
    return owner


def pruned(resource: dict[str, int]) -> dict[str, int]:
    return res.prune(resource)


def resource_change(now: Resource, before: Resource) -> Resource:
    """``now`` less ``before``, without zero entries."""
    return pruned({name: now.get(name, 0) - before.get(name, 0) for name in now.keys() | before.keys()})


def pending_change(owner: ApplicationOwner, before: Resource) -> Resource:
    """What the owner holds pending now less ``before`` (its own count: asks' pending repeats)."""
    return resource_change(owner.app.pending, before)


def ops(effects: AppEffects) -> list[tuple[str, object]]:
    """view_ops with allocations shown by uuid and asks by (key, generation): readable comparisons."""
    shown: list[tuple[str, object]] = []
    for op in effects.view_ops:
        if isinstance(op, PutAsks):
            shown.extend(("put_ask", (ask.allocation_key, ask.generation)) for ask in op.asks)
        elif isinstance(op, DropAsk):
            shown.append(("drop_ask", (op.allocation_key, op.generation)))
        elif isinstance(op, OwnerState):
            shown.append(("state", op.state.value))
        else:
            shown.append((VIEW_OP_NAMES[type(op)], op.allocation.uuid))
    return shown


VIEW_OP_NAMES = {RollBack: "rollback", Forget: "forget", AdoptRecovered: "recover"}
