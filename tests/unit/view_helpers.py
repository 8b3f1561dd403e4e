"""SchedulingView test helpers (test_view_*.py): the Scheduler actor's PartitionModel, fed by the owners.

The view accepts applications the partition already placed, asks as their owner built them (same key,
generation, repeats), rollbacks of proposals nobody confirmed, releases, recoveries and absolute node
facts; every one of those updates must be idempotent (docs/architecture.md, "One decision, end to
end"). Config quantities: ``vcore: 10`` in YAML is 10000; node, ask and allocation quantities are raw.
Every view is checked against the model's invariants (conftest.check_invariants: node capacity ==
allocated + occupied + available, queue usage == the sum over children / applications, ...) in the
middle of scenarios and again when its test ends.
"""

from __future__ import annotations

from typing import Any

import pytest

from korral import resource as res
from korral import si
from korral.config import load_config
from korral.model.allocation import Allocation, AskSpec
from korral.model.app.application import Application, ApplicationEvent, ApplicationState
from korral.model.app.owner import build_ask
from korral.model.app.spec import AppSpec
from korral.model.app.state import RUN_ON_ASK, next_state
from korral.model.view import SchedulingView

S = ApplicationState

CONFIG = """
partitions:
  - name: default
    placementrules:
      - name: fixed
        value: root.b
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
            resources:
              max: {vcore: 10}
          - name: b
          - name: parent
            parent: true
"""


@pytest.fixture
def make_view(clock, invariants):
    made: list[SchedulingView] = []

    def make(text: str = CONFIG, **kwargs) -> SchedulingView:
        kwargs.setdefault("clock", clock)
        view = SchedulingView("[rm]default", load_config(text).partitions[0], rm_id="rm", **kwargs)
        made.append(view)
        return view

    yield make
    for view in made:
        invariants(view)


@pytest.fixture
def view(make_view) -> SchedulingView:
    return make_view()


def ask(
    app: str, key: str, resource: dict[str, int] | None = None, repeat: int = 1, generation: int = 1, **kw
):
    """An ask as the Scheduler actor builds it from an owner's put_ask (create_seq 0: the view numbers it)."""
    request = si.AllocationAsk(
        allocation_key=key,
        application_id=app,
        resource_ask={"vcore": 1000} if resource is None else resource,
        max_allocations=repeat,
        **kw,
    )
    return build_ask(request, create_seq=0, now=0.0, generation=generation).spec


def insert(view: SchedulingView, application_id: str, queue_path: str, **fields: Any) -> Application:
    """Add an application the partition placed, as the scheduler does: by its spec."""
    return view.insert_application(AppSpec(application_id=application_id, queue_path=queue_path, **fields))


def owner_puts(view: SchedulingView, asks: list[AskSpec]) -> None:
    """What the owners' bursts of new asks send the view: the state a new ask ran each application to,
    as its owner publishes it (``OwnerState``, ahead of the asks), then the asks (``PutAsks``)."""
    for application_id in dict.fromkeys(spec.application_id for spec in asks):
        app = view.applications.get(application_id)
        if app is not None and app.state in RUN_ON_ASK:
            view.take_state(application_id, next_state(app.state, ApplicationEvent.RUN))
    view.put_asks(asks)


def recovered(app: str, uuid: str, node: str = "n1", resource: dict[str, int] | None = None) -> Allocation:
    return Allocation(
        uuid=uuid,
        allocation_key=f"key-{uuid}",
        application_id=app,
        node_id=node,
        resource={"vcore": 1000} if resource is None else resource,
        recovered=True,
    )


def one_app(view: SchedulingView, repeat: int = 2, node_capacity: int = 4000) -> None:
    """Node n1, app-1 in root.a with ask k (1000 vcore x ``repeat``, generation 1)."""
    view.add_node("n1", {"vcore": node_capacity})
    insert(view, "app-1", "root.a")
    owner_puts(view, [ask("app-1", "k", repeat=repeat)])


def pending_of(view: SchedulingView, *paths: str) -> list[dict[str, int]]:
    return [res.prune(view.queues[p].pending) for p in paths]


def allocated_of(view: SchedulingView, *paths: str) -> list[dict[str, int]]:
    return [res.prune(view.queues[p].allocated) for p in paths]
