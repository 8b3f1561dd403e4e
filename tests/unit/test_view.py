"""SchedulingView: the Scheduler actor's PartitionModel, fed by what the owners tell it.

The view accepts applications the partition already placed, asks as their owner built them (same key,
generation, repeats), rollbacks of proposals nobody confirmed, releases, recoveries and absolute node
facts; every one of those updates must be idempotent (docs/architecture.md, "One decision, end to
end"). Config quantities: ``vcore: 10`` in YAML is 10000; node, ask and allocation quantities are raw.
Every view is checked against the model's invariants (conftest.check_invariants: node capacity ==
allocated + occupied + available, queue usage == the sum over children / applications, ...) in the
middle of scenarios and again when its test ends.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import pytest

from korral import si
from korral.config import load_config
from korral.model import resource as res
from korral.model.allocation import Allocation
from korral.model.app_owner import build_ask
from korral.model.app_spec import AppSpec
from korral.model.application import Application, ApplicationState
from korral.model.node import NodeSpec
from korral.model.queue import Queue
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
    view.put_asks([ask("app-1", "k", repeat=repeat)])


def pending_of(view: SchedulingView, *paths: str) -> list[dict[str, int]]:
    return [res.prune(view.queues[p].pending) for p in paths]


def allocated_of(view: SchedulingView, *paths: str) -> list[dict[str, int]]:
    return [res.prune(view.queues[p].allocated) for p in paths]


# ---- insert_application ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("queue_path", "expected", "created"),
    [
        pytest.param("root.a", "root.a", [], id="configured-leaf-no-placement-rule"),
        pytest.param("root.A", "root.a", [], id="path-case-insensitive"),
        pytest.param("root.dyn", "root.dyn", ["root.dyn"], id="dynamic-leaf"),
        pytest.param("root.parent.dyn", "root.parent.dyn", ["root.parent.dyn"], id="dynamic-under-parent"),
        pytest.param("root.x.y", "root.x.y", ["root.x", "root.x.y"], id="dynamic-with-parents"),
    ],
)
def test_insert_application(view, clock, queue_path, expected, created):
    clock.now = 12.0
    before = set(view.queues)
    app = insert(
        view,
        "app-1",
        queue_path,
        user="alice",
        groups=("dev",),
        tags={"team": "x"},
        submission_seq=7,
        placeholder_ask={"vcore": 100, "memory": 0},
        execution_timeout_ms=500,
        gang_scheduling_style="Hard",
    )

    assert view.applications["app-1"] is app
    assert app.queue_path == expected
    assert view.queues[expected].applications["app-1"] is app
    assert sorted(set(view.queues) - before) == created
    for path in created:
        assert not view.queues[path].is_managed
    assert view.queues[expected].is_leaf
    assert app.state is S.NEW
    assert (app.user, app.groups, app.tags, app.submission_seq) == ("alice", ("dev",), {"team": "x"}, 7)
    assert app.placeholder_ask == {"vcore": 100}
    assert (app.execution_timeout_ms, app.gang_scheduling_style) == (500, "Hard")
    assert app.submission_time == 12.0 and app.partition == "[rm]default"


def test_insert_application_is_idempotent(view):
    first = insert(view, "app-1", "root.a", user="alice")
    view.put_asks([ask("app-1", "k")])
    again = insert(view, "app-1", "root.b", user="bob")

    assert again is first
    assert first.queue_path == "root.a" and first.user == "alice"
    assert "app-1" not in view.queues["root.b"].applications
    assert first.asks["k"].pending == 1, "a repeated add keeps what the application has"
    assert pending_of(view, "root.a", "root") == [{"vcore": 1000}, {"vcore": 1000}]


QUOTA = json.dumps({"resources": {"vcore": {"value": 3000}}})


@pytest.mark.parametrize(
    ("queue_path", "max_after"),
    [
        pytest.param("root.ns1", {"vcore": 3000}, id="dynamic-queue-takes-the-quota-tag"),
        pytest.param("root.a", {"vcore": 10000}, id="managed-queue-keeps-its-config"),
    ],
)
def test_insert_application_namespace_quota(view, queue_path, max_after):
    insert(view, "app-1", queue_path, tags={"namespace.resourcequota": QUOTA})
    assert view.queues[queue_path].max == max_after


# ---- put_asks ----------------------------------------------------------------------------------------


def test_put_asks_several_apps_aggregate_pending_with_one_rekey_per_app_and_queue(view, monkeypatch):
    insert(view, "app-1", "root.a")
    insert(view, "app-2", "root.b")
    insert(view, "app-3", "root.parent.dyn")
    insert(view, "app-4", "root.a")
    rekeys: Counter[str] = Counter()
    queue_rekeys: Counter[str] = Counter()
    original = Queue.update_apps

    def counting(queue, apps):
        apps = list(apps)
        rekeys.update(app.application_id for app in apps)
        queue_rekeys[queue.path] += 1
        original(queue, apps)

    monkeypatch.setattr(Queue, "update_apps", counting)
    view.put_asks(
        [
            ask("app-1", "k1", repeat=2),
            ask("app-2", "k1", {"memory": 64}, repeat=3),
            ask("app-1", "k2", {"memory": 10}, generation=2),
            ask("app-3", "k1", {"vcore": 250}, repeat=4),
            ask("app-1", "k3", generation=3),
            ask("ghost", "k1"),
            ask("app-4", "k1", {"memory": 5}),
        ]
    )
    monkeypatch.undo()

    assert rekeys == {"app-1": 1, "app-2": 1, "app-3": 1, "app-4": 1}
    # root.a holds two of them: re-keyed up the tree once for both
    assert queue_rekeys == {"root.a": 1, "root.b": 1, "root.parent.dyn": 1}
    apps = view.applications
    assert apps["app-1"].pending == {"vcore": 3000, "memory": 10}
    assert apps["app-2"].pending == {"memory": 192}
    assert apps["app-3"].pending == {"vcore": 1000}
    assert pending_of(view, "root.a", "root.b", "root.parent.dyn", "root.parent", "root") == [
        {"vcore": 3000, "memory": 15},
        {"memory": 192},
        {"vcore": 1000},
        {"vcore": 1000},
        {"vcore": 4000, "memory": 207},
    ]
    # both applications of root.a are in its order, in submission order (fifo)
    assert [app.application_id for app in view.queues["root.a"].order] == ["app-1", "app-4"]
    assert "ghost" not in apps, "asks of an unknown application are ignored"
    assert all(app.state is S.ACCEPTED for app in apps.values())


def test_put_asks_create_seq_keeps_request_order(view):
    view.add_node("n1", {"vcore": 10000})
    insert(view, "app-1", "root.b")
    view.put_asks([ask("app-1", "second-key"), ask("app-1", "first-key", generation=2)])
    view.put_asks([ask("app-1", "later", generation=3)])
    asks = view.applications["app-1"].asks
    seqs = [asks[k].create_seq for k in ("second-key", "first-key", "later")]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3

    placed = [a.allocation_key for a in view.schedule()]
    assert placed == ["second-key", "first-key", "later"]


def test_put_asks_priority_before_request_order(view):
    view.add_node("n1", {"vcore": 10000})
    insert(view, "app-1", "root.b")
    view.put_asks([ask("app-1", "low"), ask("app-1", "high", generation=2, priority=5)])
    assert [a.allocation_key for a in view.schedule()] == ["high", "low"]


@pytest.mark.parametrize(
    ("drop_first", "old_scheduled"),
    [
        pytest.param(False, 0, id="replace-without-drop"),
        pytest.param(True, 0, id="drop-then-put-as-the-owner-sends-it"),
        pytest.param(True, 1, id="replace-after-one-placed"),
    ],
)
def test_put_asks_replacing_a_key(view, invariants, drop_first, old_scheduled):
    one_app(view, repeat=3)
    for _ in range(old_scheduled):
        assert view.schedule_one() is not None
    if drop_first:
        view.drop_ask("app-1", "k", 1)
    view.put_asks([ask("app-1", "k", {"vcore": 500}, repeat=2, generation=2)])

    new = view.applications["app-1"].asks["k"]
    assert (new.generation, new.pending, new.resource) == (2, 2, {"vcore": 500})
    assert view.applications["app-1"].pending == {"vcore": 1000}
    assert pending_of(view, "root.a", "root") == [{"vcore": 1000}, {"vcore": 1000}]
    assert allocated_of(view, "root.a") == [res.prune({"vcore": 1000 * old_scheduled})]
    assert len(view.applications["app-1"].allocations) == old_scheduled, "allocations of the old ask stay"
    invariants(view)


# ---- drop_ask ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("app_id", "key", "generation", "dropped"),
    [
        pytest.param("app-1", "k", 2, True, id="matching-generation"),
        pytest.param("app-1", "k", 1, False, id="older-generation"),
        pytest.param("app-1", "k", 3, False, id="newer-generation"),
        pytest.param("app-1", "other", 2, False, id="unknown-key"),
        pytest.param("ghost", "k", 2, False, id="unknown-application"),
    ],
)
def test_drop_ask_only_for_the_matching_generation(view, app_id, key, generation, dropped):
    insert(view, "app-1", "root.a")
    view.put_asks([ask("app-1", "k", repeat=2, generation=1)])
    view.put_asks([ask("app-1", "k", repeat=2, generation=2)])

    view.drop_ask(app_id, key, generation)
    view.drop_ask(app_id, key, generation)  # idempotent

    app = view.applications["app-1"]
    assert ("k" not in app.asks) is dropped
    expected = {} if dropped else {"vcore": 2000}
    assert res.prune(app.pending) == expected
    assert pending_of(view, "root.a", "root") == [expected, expected]


ADMISSION = {
    "max-applications": """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: q
            maxapplications: 1
""",
    "stateaware": """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: q
            properties:
              application.sort.policy: stateaware
""",
}


@pytest.mark.parametrize("policy", list(ADMISSION))
def test_waiting_application_is_not_admitted(make_view, policy):
    view = make_view(ADMISSION[policy])
    view.add_node("n1", {"vcore": 8000})
    insert(view, "app-1", "root.q", submission_seq=1)
    insert(view, "app-2", "root.q", submission_seq=2)
    view.put_asks([ask("app-1", "k")])
    view.put_asks([ask("app-2", "k", repeat=2)])
    assert [a.application_id for a in view.schedule()] == ["app-1"]
    view.put_asks([ask("app-2", "other", generation=2)])  # a new ask changes nothing
    assert view.schedule() == []
    assert view.applications["app-2"].state is S.ACCEPTED


@pytest.mark.parametrize("policy", list(ADMISSION))
def test_replacing_an_ask_does_not_admit_a_waiting_application(make_view, policy):
    view = make_view(ADMISSION[policy])
    view.add_node("n1", {"vcore": 8000})
    insert(view, "app-1", "root.q", submission_seq=1)
    insert(view, "app-2", "root.q", submission_seq=2)
    view.put_asks([ask("app-1", "k")])
    view.put_asks([ask("app-2", "k", repeat=2)])
    assert [a.application_id for a in view.schedule()] == ["app-1"]

    # app-2's owner replaces its ask (ApplicationOwner.add_asks): one put of the new generation, which
    # the view applies in place
    view.put_asks([ask("app-2", "k", generation=2)])

    assert view.schedule() == []
    assert view.applications["app-2"].state is S.ACCEPTED


# ---- schedule, rollback, forget ------------------------------------------------------------------------


def _nothing(view, proposal):
    pass


def _ask_replaced(view, proposal):
    view.put_asks([ask("app-1", "k", repeat=2, generation=2)])


def _ask_dropped(view, proposal):
    view.drop_ask("app-1", "k", 1)


def _node_gone(view, proposal):
    view.discard_node("n1")


def _node_gone_twice(view, proposal):
    view.discard_node("n1")
    view.discard_node("n1")


def _app_gone(view, proposal):
    view.discard_application("app-1")


def _node_then_app_gone(view, proposal):
    view.discard_node("n1")
    view.discard_application("app-1")


@pytest.mark.parametrize(
    ("meanwhile", "ask_pending", "queue_pending"),
    [
        pytest.param(_nothing, 2, 2000, id="plain-rollback-gives-pending-back"),
        pytest.param(_ask_replaced, 2, 2000, id="stale-generation-no-extra-pending"),
        pytest.param(_ask_dropped, None, 0, id="ask-gone"),
        pytest.param(_node_gone, 2, 2000, id="node-removed-first-repeat-still-owed"),
        pytest.param(_node_gone_twice, 2, 2000, id="node-removed-twice"),
        pytest.param(_app_gone, None, 0, id="application-gone"),
        pytest.param(_node_then_app_gone, None, 0, id="node-then-application-gone"),
    ],
)
def test_schedule_then_rollback(view, invariants, meanwhile, ask_pending, queue_pending):
    one_app(view)
    proposal = view.schedule_one()
    assert proposal is not None and proposal.node_id == "n1" and proposal.ask_generation == 1
    assert view.applications["app-1"].asks["k"].pending == 1
    assert view.nodes["n1"].available == {"vcore": 3000}
    assert allocated_of(view, "root.a", "root") == [{"vcore": 1000}, {"vcore": 1000}]
    invariants(view)

    meanwhile(view, proposal)
    for _ in range(2):  # the second rollback is a no-op
        view.rollback(proposal)
        app = view.applications.get("app-1")
        if ask_pending is None:
            assert app is None or "k" not in app.asks
        else:
            assert app.asks["k"].pending == ask_pending
            assert proposal.uuid not in app.allocations
        assert pending_of(view, "root.a", "root") == [res.prune({"vcore": queue_pending})] * 2
        assert allocated_of(view, "root.a", "root") == [{}, {}]
        if "n1" in view.nodes:
            assert view.nodes["n1"].available == {"vcore": 4000}
            assert view.nodes["n1"].allocations == {}
        invariants(view)


def test_repeat_owed_after_node_removal_is_proposed_again_despite_quota_blocked_asks(view):
    """The returned repeat is new work: a queue or application the walk marked as having nothing
    schedulable (every ask over a limit) must be looked at again."""
    view.add_node("n1", {"vcore": 4000})
    view.add_node("n2", {"vcore": 8000})
    view.add_node("n3", {"vcore": 4000})
    insert(view, "app-2", "root.a")
    view.adopt_recovered(recovered("app-2", "r2", node="n2", resource={"vcore": 8000}))
    insert(view, "app-1", "root.a")
    view.put_asks([ask("app-1", "k"), ask("app-1", "big", {"vcore": 3000}, generation=2)])
    proposal = view.schedule_one()
    assert proposal.allocation_key == "k" and view.schedule_one() is None  # big: over root.a's max
    view.discard_node(proposal.node_id)
    assert view.schedule_one() is None  # k has nothing pending yet, big is still over the max

    view.rollback(proposal)

    again = view.schedule_one()
    assert again is not None and again.allocation_key == "k"
    assert again.node_id != proposal.node_id


STATE_AWARE = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: sa
            properties:
              application.sort.policy: stateaware
"""


def test_repeat_owed_after_node_removal_is_proposed_again_in_a_stateaware_queue(make_view):
    view = make_view(STATE_AWARE)
    view.add_node("n1", {"vcore": 4000})
    view.add_node("n2", {"vcore": 4000})
    insert(view, "app-1", "root.sa")
    view.put_asks([ask("app-1", "k")])
    proposal = view.schedule_one()
    view.discard_node(proposal.node_id)
    view.rollback(proposal)
    assert view.applications["app-1"].asks["k"].pending == 1

    again = view.schedule_one()
    assert again is not None and again.allocation_key == "k"


def test_rolled_back_repeat_is_proposed_again(view):
    one_app(view)
    first = view.schedule_one()
    view.rollback(first)
    again = view.schedule()
    assert len(again) == 2 and {a.uuid for a in again}.isdisjoint({first.uuid})


def test_forget_allocation_is_idempotent(view, invariants):
    one_app(view)
    proposal = view.schedule_one()
    for _ in range(2):
        view.forget_allocation(proposal)
        app = view.applications["app-1"]
        assert proposal.uuid not in app.allocations
        assert app.asks["k"].pending == 1, "a confirmed allocation's repeat is not given back"
        assert view.nodes["n1"].available == {"vcore": 4000}
        assert allocated_of(view, "root.a", "root") == [{}, {}]
        invariants(view)


def test_forget_after_node_removal_means_no_rollback_will_come(view):
    """Confirmed, its node gone, then released: a stray rollback must not give the repeat back."""
    one_app(view)
    proposal = view.schedule_one()
    view.discard_node("n1")
    view.forget_allocation(proposal)
    view.rollback(proposal)
    assert view.applications["app-1"].asks["k"].pending == 1
    assert pending_of(view, "root.a") == [{"vcore": 1000}]


def test_forget_of_the_last_allocation_completes_the_idle_application(view):
    one_app(view, repeat=1)
    proposal = view.schedule_one()
    view.forget_allocation(proposal)
    assert view.applications["app-1"].state.value == "Completing"


def test_the_views_effects_do_not_pile_up_once_taken(view):
    # the owners tell the RM of state changes; the scheduler takes the view's effects after each
    # batch and drops those, so nothing is kept from one batch to the next
    one_app(view, repeat=1)
    view.forget_allocation(view.schedule_one())
    assert [c.state for c in view.take_effects().state_changes][-1] == "Completing"
    assert not view.take_effects()


# ---- adopt_recovered ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("allocation", "adopted"),
    [
        pytest.param(recovered("app-1", "r1"), True, id="known-app-and-node"),
        pytest.param(recovered("app-1", "r1", resource={"vcore": 20000}), True, id="above-queue-max"),
        pytest.param(recovered("app-1", "r1", resource={"vcore": 9000}), True, id="above-node-capacity"),
        pytest.param(recovered("ghost", "r1"), False, id="unknown-application"),
        pytest.param(recovered("app-1", "r1", node="ghost"), False, id="unknown-node"),
        pytest.param(recovered("app-1", "r1", resource={"vcore": 0}), False, id="no-resources"),
        pytest.param(recovered("app-1", "r1", resource={"vcore": -5}), False, id="negative-resources"),
    ],
)
def test_adopt_recovered(view, invariants, allocation, adopted):
    view.add_node("n1", {"vcore": 4000})
    insert(view, "app-1", "root.a")
    for _ in range(2):  # a duplicate is ignored
        view.adopt_recovered(allocation)
        app = view.applications["app-1"]
        if adopted:
            assert list(app.allocations) == ["r1"] and app.allocations["r1"].recovered
            assert list(view.nodes["n1"].allocations) == ["r1"]
            assert allocated_of(view, "root.a", "root") == [allocation.resource] * 2
            assert app.state is S.RUNNING
        else:
            assert app.allocations == {} and view.nodes["n1"].allocations == {}
            assert allocated_of(view, "root.a", "root") == [{}, {}]
            assert app.state is S.NEW
        invariants(view)


def test_adopted_allocation_survives_node_removal_without_owing_a_repeat(view):
    one_app(view)
    view.adopt_recovered(recovered("app-1", "r1"))
    view.discard_node("n1")
    view.rollback(recovered("app-1", "r1"))
    assert view.applications["app-1"].asks["k"].pending == 2
    assert view.applications["app-1"].allocations == {}


# ---- set_node ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capacity", "occupied", "attributes", "schedulable", "available", "in_order"),
    [
        pytest.param({"vcore": 8000}, {}, {}, True, {"vcore": 7000}, True, id="capacity-grows"),
        pytest.param({"vcore": 2000}, {}, {}, True, {"vcore": 1000}, True, id="capacity-shrinks"),
        pytest.param({"vcore": 500}, {}, {}, True, {"vcore": -500}, False, id="capacity-below-allocated"),
        pytest.param({"vcore": 4000}, {"vcore": 2500}, {}, True, {"vcore": 500}, True, id="occupied"),
        pytest.param({"vcore": 4000}, {"vcore": 3000}, {}, True, {}, False, id="occupied-fills-node"),
        pytest.param({"vcore": 4000}, {}, {"si/zone": "z2"}, True, {"vcore": 3000}, True, id="attributes"),
        pytest.param({"vcore": 4000}, {}, {}, False, {"vcore": 3000}, False, id="unschedulable"),
    ],
)
def test_set_node_reflects_owner_facts(
    view, capacity, occupied, attributes, schedulable, available, in_order
):
    one_app(view, repeat=3)
    view.set_node(
        NodeSpec(
            node_id="n1",
            capacity={"vcore": 4000},
            occupied={},
            attributes={"si/zone": "z1"},
            schedulable=True,
        )
    )
    view.schedule_one()  # one allocation booked in the view: it stays the view's own

    view.set_node(
        NodeSpec(
            node_id="n1", capacity=capacity, occupied=occupied, attributes=attributes, schedulable=schedulable
        )
    )

    node = view.nodes["n1"]
    assert node.capacity == capacity and res.prune(node.occupied) == occupied
    assert res.prune(node.available) == available
    assert node.attributes == attributes and node.schedulable is schedulable
    assert len(node.allocations) == 1
    assert view.capacity == capacity
    assert ("n1" in view.node_order) is in_order
    view.refresh_limits()
    assert view.root.max == capacity


def test_set_node_unschedulable_and_back(view):
    one_app(view)
    view.set_node(
        NodeSpec(node_id="n1", capacity={"vcore": 4000}, occupied={}, attributes={}, schedulable=False)
    )
    assert view.schedule_one() is None
    view.set_node(
        NodeSpec(node_id="n1", capacity={"vcore": 4000}, occupied={}, attributes={}, schedulable=True)
    )
    assert view.schedule_one() is not None


def test_set_node_unchanged_values_are_a_no_op(view, monkeypatch):
    view.add_node("n1", {"vcore": 4000, "memory": 100}, occupied={"memory": 10}, attributes={"a": "1"})
    calls: list[str] = []
    monkeypatch.setattr(view, "update_node", lambda *a, **k: calls.append("update_node"))
    monkeypatch.setattr(view, "set_node_schedulable", lambda *a, **k: calls.append("set_node_schedulable"))
    epoch = view.registry.resource_epoch

    # the same facts, one with an explicit zero: nothing to change
    view.set_node(
        NodeSpec(
            node_id="n1",
            capacity={"vcore": 4000, "memory": 100, "gpu": 0},
            occupied={"memory": 10},
            attributes={"a": "1"},
            schedulable=True,
        )
    )

    assert calls == []
    assert view.registry.resource_epoch == epoch


def test_set_node_unknown_node_is_ignored(view):
    view.set_node(
        NodeSpec(node_id="ghost", capacity={"vcore": 1}, occupied={}, attributes={}, schedulable=True)
    )
    assert view.nodes == {} and view.capacity == {}


# ---- discard_node / discard_application ---------------------------------------------------------------


def test_discard_node_is_idempotent(view, invariants):
    one_app(view, repeat=3)
    view.add_node("n2", {"vcore": 1000})
    view.adopt_recovered(recovered("app-1", "r1", node="n1"))
    view.schedule()  # proposals on n1 and n2

    for _ in range(2):
        view.discard_node("n1")
        assert "n1" not in view.nodes and "n1" not in view.node_order
        assert view.capacity == {"vcore": 1000}
        app = view.applications["app-1"]
        assert all(a.node_id == "n2" for a in app.allocations.values())
        assert allocated_of(view, "root.a") == [{"vcore": 1000}]
        invariants(view)


def test_discard_node_names_everything_that_ran_there_by_application(view):
    one_app(view, repeat=3)
    view.add_node("n2", {"vcore": 1000})
    insert(view, "app-0", "root.b")
    view.adopt_recovered(recovered("app-0", "r0", node="n1"))
    view.schedule()  # app-1: two proposals on n1 (room for 3, one taken by r0), one on n2
    on_n1 = sorted(u for u, a in view.applications["app-1"].allocations.items() if a.node_id == "n1")
    assert len(on_n1) == 2

    gone = view.discard_node("n1")

    # proposals still on their way count: their owner confirms them first (its mailbox order)
    assert {app: sorted(uuids) for app, uuids in gone.items()} == {"app-0": ["r0"], "app-1": on_n1}
    assert view.discard_node("n1") == {}, "a second removal names nothing"


def test_the_view_notes_each_booking_and_freeing_on_a_node_in_order(view):
    one_app(view, repeat=2)
    first = view.schedule_one()
    second = view.schedule_one()
    assert first is not None and second is not None
    assert view.node_changes == [("n1", first.uuid, first), ("n1", second.uuid, second)]
    view.node_changes.clear()  # published (the scheduler clears the list in place)

    view.rollback(first)
    view.forget_allocation(second)
    view.adopt_recovered(recovered("app-1", "r1"))
    view.discard_node("n1")

    r1 = view.node_changes[2][2]
    assert r1 is not None and r1.uuid == "r1"
    assert view.node_changes == [
        ("n1", first.uuid, None),
        ("n1", second.uuid, None),
        ("n1", "r1", r1),
        ("n1", "r1", None),
        ("n1", "", None),  # the node left with whatever it held
    ]


def test_a_models_own_nodes_note_nothing(view):
    """Only the view's nodes keep notes (for the node board): the reference's model writes none."""
    from korral.model.partition import PartitionModel

    model = PartitionModel("[rm]default", load_config(CONFIG).partitions[0], rm_id="rm")
    node = model.add_node("n1", {"vcore": 4000})
    assert node.journal is None
    assert view.add_node("n1", {"vcore": 4000}).journal is view.node_changes


def test_discard_node_cancels_its_reservation(make_view, clock):
    view = make_view(reservation_delay=1.0)
    view.add_node("n1", {"vcore": 4000})
    view.add_node("n2", {"vcore": 2000})  # the cluster is large enough: the ask waits for a node
    insert(view, "app-0", "root.b")
    view.adopt_recovered(recovered("app-0", "r0", resource={"vcore": 2000}))
    insert(view, "app-1", "root.a")
    view.put_asks([ask("app-1", "big", {"vcore": 3000})])
    assert view.schedule_one() is None
    clock.advance(5.0)
    assert view.schedule_one() is None
    assert view.reservations == {("app-1", "big"): "n1"}

    view.discard_node("n1")
    assert view.reservations == {} and view.applications["app-1"].reservations == {}


def test_discard_application_is_idempotent(view, invariants):
    one_app(view, repeat=3)
    insert(view, "app-2", "root.a")
    view.put_asks([ask("app-2", "k", {"vcore": 500})])
    proposals = view.schedule()
    assert {a.application_id for a in proposals} == {"app-1", "app-2"}

    for _ in range(2):
        view.discard_application("app-1")
        assert "app-1" not in view.applications
        assert "app-1" not in view.queues["root.a"].applications
        assert pending_of(view, "root.a") == [{}]
        assert allocated_of(view, "root.a") == [{"vcore": 500}]
        assert view.nodes["n1"].available == {"vcore": 3500}
        assert all(a.application_id == "app-2" for a in view.nodes["n1"].allocations.values())
        invariants(view)

    for proposal in proposals:  # late messages about it change nothing
        if proposal.application_id == "app-1":
            view.rollback(proposal)
            view.forget_allocation(proposal)
    view.put_asks([ask("app-1", "again", generation=9)])
    view.drop_ask("app-1", "k", 1)
    assert "app-1" not in view.applications


def test_discard_application_forgets_what_its_removed_node_owed(view):
    one_app(view)
    proposal = view.schedule_one()
    view.discard_node("n1")
    view.discard_application("app-1")
    # the application comes back under the same id (a new submission): the old proposal owes it nothing
    insert(view, "app-1", "root.a")
    view.put_asks([ask("app-1", "k", repeat=2, generation=1)])
    view.rollback(proposal)
    assert view.applications["app-1"].asks["k"].pending == 2


# ---- has_timed_work ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "timed"),
    [
        pytest.param(None, False, id="nothing-pending"),
        pytest.param({"vcore": 1000}, False, id="fits-and-placed"),
        pytest.param({"vcore": 6000}, True, id="fits-no-node-unschedulable"),
        pytest.param({"vcore": 60000}, True, id="larger-than-the-cluster"),
        pytest.param({"memory": 1}, True, id="type-no-node-has"),
    ],
)
def test_has_timed_work(view, resource, timed):
    view.add_node("n1", {"vcore": 4000})
    view.add_node("n2", {"vcore": 4000})
    insert(view, "app-1", "root.b")
    if resource is not None:
        view.put_asks([ask("app-1", "k", resource)])
    view.schedule()
    assert view.has_timed_work() is timed
    view.drop_ask("app-1", "k", 1)
    assert view.has_timed_work() is False


def test_has_timed_work_with_a_reservation(make_view, clock):
    view = make_view(reservation_delay=1.0)
    view.add_node("n1", {"vcore": 4000})
    view.add_node("n2", {"vcore": 2000})
    insert(view, "app-1", "root.b")
    view.adopt_recovered(recovered("app-1", "r1", resource={"vcore": 2000}))
    view.put_asks([ask("app-1", "k", {"vcore": 3000})])
    view.schedule()
    clock.advance(2.0)
    view.schedule()
    assert view.reservations and view.has_timed_work()
    view.drop_ask("app-1", "k", 1)
    assert view.reservations == {} and not view.has_timed_work()


# ---- gang replacement in the view ---------------------------------------------------------------------


def gang_view(view: SchedulingView) -> tuple[Allocation, Allocation]:
    """A gang in root.b with one placeholder on n1 and a real ask the view decided to put in it."""
    view.add_node("n1", {"vcore": 4000})
    insert(view, "g", "root.b", placeholder_ask={"vcore": 1000})
    view.put_asks([ask("g", "ph", placeholder=True, task_group_name="tg")])
    placeholder = view.schedule_one()
    view.put_asks([ask("g", "real", task_group_name="tg")])
    real = view.schedule_one()
    assert placeholder is not None and real is not None and real.replaces == placeholder.uuid
    view.take_effects()
    return placeholder, real


def test_a_refused_replacement_frees_the_placeholder_and_the_repeat(view) -> None:
    placeholder, real = gang_view(view)
    app = view.applications["g"]
    assert app.pending == {} and placeholder.uuid in app.releasing
    view.undo_replacement(real)
    assert app.pending == {"vcore": 1000} and app.releasing == {}
    again = view.schedule_one()
    assert again is not None and again.replaces == placeholder.uuid  # decided again
    view.undo_replacement(real)  # a stale refusal changes nothing
    assert app.pending == {}


def test_a_timeout_overtaking_a_replacement_keeps_the_placeholder_released(view) -> None:
    placeholder, real = gang_view(view)
    view.mark_releasing("g", placeholder.uuid, int(si.TerminationType.TIMEOUT))
    view.undo_replacement(real)  # the owner refused: its placeholder had timed out
    app = view.applications["g"]
    assert app.releasing == {placeholder.uuid: si.TerminationType.TIMEOUT}
    assert app.pending == {"vcore": 1000}
    following = view.schedule_one()
    assert following is not None and not following.replaces  # no placeholder to replace any more


def test_a_replacement_whose_node_leaves_waits_for_the_owner(view) -> None:
    placeholder, _ = gang_view(view)
    app = view.applications["g"]
    view.discard_node("n1")
    assert app.pending == {}  # the owner has not given the repeat back yet
    view.forget_allocation(placeholder)  # the owner released the placeholder with its node
    assert app.pending == {"vcore": 1000}
    view.forget_allocation(placeholder)  # twice: nothing more
    assert app.pending == {"vcore": 1000}


def test_a_swap_for_a_placeholder_that_left_with_its_node_says_the_real_one_must_go(view) -> None:
    """The RM confirmed the placeholder's release to its owner before the owner heard its node left:
    the owner swaps the real allocation in, on a node that is gone. The view holds neither, and says
    so: the scheduler has the owner release the real allocation as the removal would have."""
    placeholder, real = gang_view(view)
    view.discard_node("n1")
    assert view.swap("g", placeholder.uuid, real) is True
    app = view.applications["g"]
    assert real.uuid not in app.allocations and app.pending == {}, "nothing booked, no repeat owed"
    assert allocated_of(view, "root.b") == [{}]


def test_a_confirmed_swap_moves_usage_by_the_difference(view) -> None:
    view.add_node("n1", {"vcore": 4000})
    insert(view, "g", "root.b", placeholder_ask={"vcore": 2000})
    view.put_asks([ask("g", "ph", {"vcore": 2000}, placeholder=True, task_group_name="tg")])
    placeholder = view.schedule_one()
    view.put_asks([ask("g", "real", {"vcore": 500}, task_group_name="tg")])
    real = view.schedule_one()
    assert placeholder is not None and real is not None
    assert view.swap("g", placeholder.uuid, real) is False
    assert view.swap("g", placeholder.uuid, real) is False  # idempotent
    assert allocated_of(view, "root.b", "root") == [{"vcore": 500}, {"vcore": 500}]
    assert view.nodes["n1"].available == {"vcore": 3500}
    assert view.take_effects().swapped_in == []  # the owner reports it, not the view


BATCH_CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: fair
            parent: true
            properties: {application.sort.policy: fair}
            queues:
              - name: x
                properties: {application.sort.policy: fair}
                resources: {guaranteed: {vcore: 20}}
              - name: y
                properties: {application.sort.policy: fair, application.sort.priority: disabled}
          - name: fifo
            parent: true
            properties: {priority.offset: "5"}
            queues:
              - name: x
              - name: y
                properties: {priority.policy: fence}
"""


@pytest.mark.parametrize("seed", range(8))
def test_put_asks_in_one_batch_orders_everything_as_one_at_a_time(make_view, seed):
    """A request's asks go in as one batch (each queue re-keyed once): every queue's order, pending and
    priority end as they would with the asks put one at a time."""
    rng = random.Random(seed)
    leaves = ["root.fair.x", "root.fair.y", "root.fifo.x", "root.fifo.y"]
    batched, single = make_view(BATCH_CONFIG), make_view(BATCH_CONFIG)
    apps = [(f"app-{index}", rng.choice(leaves)) for index in range(12)]
    asks = [
        (rng.choice(apps)[0], f"k{index}", rng.choice([1000, 2000, 4000]), rng.choice([0, 0, 3, 9]))
        for index in range(40)
    ]
    for view in (batched, single):
        view.add_node("n1", {"vcore": 100_000})
        for app_id, leaf in apps:
            insert(view, app_id, leaf)
        # allocations first, so that fair sorting's usage ratios differ between applications
        view.put_asks(
            [ask(app_id, "seed", {"vcore": 1000 * (1 + i % 3)}) for i, (app_id, _) in enumerate(apps)]
        )
        assert len(view.schedule()) == len(apps)
    batched.put_asks([ask(a, k, {"vcore": v}, priority=p) for a, k, v, p in asks])
    for a, k, v, p in asks:
        single.put_asks([ask(a, k, {"vcore": v}, priority=p)])

    for path, queue in single.queues.items():
        other = batched.queues[path]
        assert list(other.order.live_entries()) == list(queue.order.live_entries()), path
        assert (other.pending, other.priority) == (queue.pending, queue.priority), path
