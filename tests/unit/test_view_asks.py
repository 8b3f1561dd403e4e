"""SchedulingView: applications, asks, and the decisions it schedules, rolls back or forgets."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
import view_helpers
from view_helpers import S, allocated_of, ask, insert, one_app, owner_puts, pending_of, recovered

from korral import resource as res
from korral.model.queue import Queue

# the shared fixtures: pytest finds a fixture by its name in the test module
make_view = view_helpers.make_view
view = view_helpers.view


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
    owner_puts(view, [ask("app-1", "k")])
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
    owner_puts(
        view,
        [
            ask("app-1", "k1", repeat=2),
            ask("app-2", "k1", {"memory": 64}, repeat=3),
            ask("app-1", "k2", {"memory": 10}, generation=2),
            ask("app-3", "k1", {"vcore": 250}, repeat=4),
            ask("app-1", "k3", generation=3),
            ask("ghost", "k1"),
            ask("app-4", "k1", {"memory": 5}),
        ],
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
    owner_puts(view, [ask("app-1", "second-key"), ask("app-1", "first-key", generation=2)])
    owner_puts(view, [ask("app-1", "later", generation=3)])
    asks = view.applications["app-1"].asks
    seqs = [asks[k].create_seq for k in ("second-key", "first-key", "later")]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3

    placed = [a.allocation_key for a in view.schedule()]
    assert placed == ["second-key", "first-key", "later"]


def test_put_asks_priority_before_request_order(view):
    view.add_node("n1", {"vcore": 10000})
    insert(view, "app-1", "root.b")
    owner_puts(view, [ask("app-1", "low"), ask("app-1", "high", generation=2, priority=5)])
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
    owner_puts(view, [ask("app-1", "k", {"vcore": 500}, repeat=2, generation=2)])

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
    owner_puts(view, [ask("app-1", "k", repeat=2, generation=1)])
    owner_puts(view, [ask("app-1", "k", repeat=2, generation=2)])

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
    owner_puts(view, [ask("app-1", "k")])
    owner_puts(view, [ask("app-2", "k", repeat=2)])
    assert [a.application_id for a in view.schedule()] == ["app-1"]
    owner_puts(view, [ask("app-2", "other", generation=2)])  # a new ask changes nothing
    assert view.schedule() == []
    assert view.applications["app-2"].state is S.ACCEPTED


@pytest.mark.parametrize("policy", list(ADMISSION))
def test_replacing_an_ask_does_not_admit_a_waiting_application(make_view, policy):
    view = make_view(ADMISSION[policy])
    view.add_node("n1", {"vcore": 8000})
    insert(view, "app-1", "root.q", submission_seq=1)
    insert(view, "app-2", "root.q", submission_seq=2)
    owner_puts(view, [ask("app-1", "k")])
    owner_puts(view, [ask("app-2", "k", repeat=2)])
    assert [a.application_id for a in view.schedule()] == ["app-1"]

    # app-2's owner replaces its ask (ApplicationOwner.add_asks): one put of the new generation, which
    # the view applies in place
    owner_puts(view, [ask("app-2", "k", generation=2)])

    assert view.schedule() == []
    assert view.applications["app-2"].state is S.ACCEPTED


# ---- schedule, rollback, forget ------------------------------------------------------------------------


def _nothing(view, proposal):
    pass


def _ask_replaced(view, proposal):
    owner_puts(view, [ask("app-1", "k", repeat=2, generation=2)])


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
    owner_puts(view, [ask("app-1", "k"), ask("app-1", "big", {"vcore": 3000}, generation=2)])
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
    owner_puts(view, [ask("app-1", "k")])
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


def test_an_idle_application_completes_when_its_owner_publishes_it(view):
    """Completing is the owner's decision: the view's application, idle after its last allocation
    went, stays as it was until the owner's published state comes, and then frees its queue's
    running slot (maxapplications)."""
    one_app(view, repeat=1)
    proposal = view.schedule_one()
    assert view.applications["app-1"].state is S.STARTING
    assert view.queues["root.a"].running_apps == 1
    view.forget_allocation(proposal)
    assert view.applications["app-1"].state is S.STARTING
    view.take_state("app-1", S.COMPLETING)
    assert view.applications["app-1"].state is S.COMPLETING
    assert view.queues["root.a"].running_apps == view.root.running_apps == 0


def test_a_published_state_behind_the_views_bookings_does_not_take_them_back(view):
    """The owner ran the application on an ask (Accepted) while the view adopted a recovered
    allocation (Running): the owner gets there too as it books the recovery, publishing nothing."""
    view.add_node("n1", {"vcore": 4000})
    insert(view, "app-1", "root.a")
    view.adopt_recovered(recovered("app-1", "r1"))
    assert view.applications["app-1"].state is S.RUNNING
    view.take_state("app-1", S.ACCEPTED)
    view.take_state("app-1", S.STARTING)  # behind its bookings too (published as the owner caught up)
    assert view.applications["app-1"].state is S.RUNNING
    assert view.queues["root.a"].running_apps == 1
    view.take_state("app-1", S.FAILING)  # anything else the owner publishes, the view takes
    assert view.applications["app-1"].state is S.FAILING
    assert view.queues["root.a"].running_apps == 0


def test_the_view_records_no_state_changes(view):
    """The owners report every state change to the RM: the view, which moves states only as it books
    and as owners publish, records none for the scheduler to drop."""
    one_app(view, repeat=1)
    view.forget_allocation(view.schedule_one())
    view.take_state("app-1", S.COMPLETING)
    assert view.take_effects().state_changes == []


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
        owner_puts(
            view, [ask(app_id, "seed", {"vcore": 1000 * (1 + i % 3)}) for i, (app_id, _) in enumerate(apps)]
        )
        assert len(view.schedule()) == len(apps)
    batched.put_asks([ask(a, k, {"vcore": v}, priority=p) for a, k, v, p in asks])
    for a, k, v, p in asks:
        single.put_asks([ask(a, k, {"vcore": v}, priority=p)])

    for path, queue in single.queues.items():
        other = batched.queues[path]
        assert list(other.order.live_entries()) == list(queue.order.live_entries()), path
        assert (other.pending, other.priority) == (queue.pending, queue.priority), path


def test_the_view_keeps_no_record_its_owner_keeps_it(view):
    """The application's record is its owner's: its execution timeouts, state log and placeholder
    tallies. The view's bookings start no deadline and log nothing."""
    view.add_node("n1", {"vcore": 4000})
    insert(view, "app-1", "root.a", execution_timeout_ms=60_000)
    owner_puts(
        view,
        [
            ask("app-1", "k", repeat=2, execution_timeout_milliseconds=30_000),
            ask("app-1", "ph", generation=2, placeholder=True, task_group_name="tg"),
        ],
    )
    assert len(view.schedule()) == 3
    app = view.applications["app-1"]
    assert app.state is S.RUNNING
    assert app.run_deadline is None and app.allocation_deadlines == {} and app.next_deadline() is None
    assert app.state_log == [] and app.placeholder_data == {}


@pytest.mark.parametrize("new_app", [False, True], ids=["same-application", "another-in-the-queue"])
def test_a_batch_of_new_asks_reopens_what_a_limit_had_blocked(view, new_app):
    """The walk marks an application and its queues whose every pending ask is over a limit; a batch of
    new asks (one PutAsks) must have them looked at again, the queue path up to the root too."""
    view.add_node("n1", {"vcore": 40000})
    insert(view, "app-1", "root.a")
    insert(view, "app-2", "root.a")
    owner_puts(view, [ask("app-1", "big", {"vcore": 11000})])  # over root.a's max (10)
    assert view.schedule_one() is None
    assert view.schedule_one() is None  # skipped as blocked now
    app_id = "app-2" if new_app else "app-1"
    owner_puts(view, [ask(app_id, "small", generation=2), ask(app_id, "other", generation=3)])
    placed = [view.schedule_one(), view.schedule_one()]
    assert [(p.application_id, p.allocation_key) for p in placed if p] == [
        (app_id, "small"),
        (app_id, "other"),
    ]
    assert view.schedule_one() is None
