"""Table-driven tests of the victim policy (korral.policies.preemption): each law, fence and disabled,
priorities and the order of victims. Plain code, no threads."""

from __future__ import annotations

import pytest

from korral.policies.preemption import (
    Candidate,
    Plan,
    Preemptor,
    QueueFacts,
    ancestors,
    choose_on_nodes,
    choose_victims,
    fence_root,
    law_1_possible,
    preemptor_may_preempt,
    required_node_victims,
    victim_order,
    victim_queue_eligible,
)

# root
# ├── prod   guaranteed 10 (the preemptor's queue)
# ├── test   guaranteed 4, using 10 (above its guarantee by 6)
# └── tenant (fence)
#     ├── t1  guaranteed 2, using 6
#     └── t2  no guarantee, using 2


def queues(**overrides: QueueFacts) -> dict[str, QueueFacts]:
    base = {
        "root": QueueFacts("root", None, {"vcore": 18}),
        "root.prod": QueueFacts("root.prod", {"vcore": 10}, {"vcore": 0}),
        "root.test": QueueFacts("root.test", {"vcore": 4}, {"vcore": 10}),
        "root.tenant": QueueFacts("root.tenant", None, {"vcore": 8}, "fence"),
        "root.tenant.t1": QueueFacts("root.tenant.t1", {"vcore": 2}, {"vcore": 6}),
        "root.tenant.t2": QueueFacts("root.tenant.t2", None, {"vcore": 2}),
    }
    base.update({facts.path: facts for facts in overrides.values()})
    return base


def victim(uuid: str, queue: str = "root.test", node: str = "n1", vcore: int = 2, **fields) -> Candidate:
    return Candidate(
        uuid=uuid,
        application_id=fields.pop("app", f"app-{queue}"),
        queue_path=queue,
        node_id=node,
        resource={"vcore": vcore},
        **fields,
    )


def ask(vcore: int = 2, queue: str = "root.prod", priority: int = 0, app: str = "prod-app") -> Preemptor:
    return Preemptor("ask", app, queue, {"vcore": vcore}, priority)


FULL = {"n1": {"vcore": 0}, "n2": {"vcore": 0}}


def test_ancestors_walk_leaf_to_root():
    assert ancestors("root.a.b") == ["root.a.b", "root.a", "root"]


@pytest.mark.parametrize(
    ("preemptor", "facts", "expected"),
    [
        pytest.param(ask(2), queues(), True, id="under-guarantee"),
        pytest.param(ask(11), queues(), False, id="would-exceed-guarantee"),
        pytest.param(
            ask(2), queues(p=QueueFacts("root.prod", {"vcore": 10}, {"vcore": 9})), False, id="at-guarantee"
        ),
        pytest.param(ask(2, queue="root.tenant.t2"), queues(), False, id="no-guarantee-on-the-path"),
        pytest.param(
            ask(2, queue="root.tenant.t2"),
            queues(t=QueueFacts("root.tenant", {"vcore": 20}, {"vcore": 8}, "fence")),
            True,
            id="guarantee-on-a-parent",
        ),
        pytest.param(
            ask(2),
            queues(r=QueueFacts("root", {"vcore": 19}, {"vcore": 18})),
            False,
            id="a-parent-guarantee-exceeded",
        ),
    ],
)
def test_law_1_the_preemptors_queue_must_stay_within_its_guarantee(preemptor, facts, expected):
    assert preemptor_may_preempt(preemptor, facts) is expected


@pytest.mark.parametrize(
    ("candidates", "expected"),
    [
        pytest.param([victim("v1")], Plan("n1", ("v1",)), id="basic"),
        pytest.param([victim("v1", app="prod-app")], None, id="law-2-never-the-same-application"),
        pytest.param([victim("v1", queue="root.prod", app="other")], None, id="law-2-never-the-same-queue"),
        pytest.param([victim("v1", priority=1)], None, id="law-4-never-a-higher-priority"),
        pytest.param([victim("v1", priority=0)], Plan("n1", ("v1",)), id="law-4-equal-priority-allowed"),
        pytest.param([victim("v1", priority=-5)], Plan("n1", ("v1",)), id="law-4-lower-priority"),
        pytest.param([victim("v1", vcore=8)], None, id="law-3-never-below-the-victims-guarantee"),
        pytest.param([victim("v1", required_node=True)], None, id="daemon-set-allocations-are-left-alone"),
        pytest.param(
            [victim("big", vcore=8), victim("small", vcore=2)],
            Plan("n1", ("small",)),
            id="law-3-skips-the-victim-that-would-go-below",
        ),
    ],
)
def test_laws_2_to_4(candidates, expected):
    assert choose_victims(ask(2), candidates, queues(), FULL) == expected


def test_law_3_takes_only_what_the_victims_queue_has_above_its_guarantee():
    # test: guaranteed 4, using 10: 6 above. Asking for 8 on one full node with 2-vcore victims: three
    # victims (6) leave test at its guarantee; a fourth would go below, so 8 cannot be freed.
    candidates = [victim(f"v{i}", sequence=i) for i in range(5)]
    assert choose_victims(ask(8), candidates, queues(), FULL) is None
    plan = choose_victims(ask(6), candidates, queues(), FULL)
    assert plan is not None and len(plan.victims) == 3


def test_a_victims_queue_below_its_guarantee_gives_nothing():
    facts = queues(t=QueueFacts("root.test", {"vcore": 20}, {"vcore": 10}))
    assert choose_victims(ask(2), [victim("v1")], facts, FULL) is None


def test_a_queue_without_guarantee_is_above_it_with_any_usage():
    plan = choose_victims(ask(2), [victim("v1", queue="root.tenant.t2")], queues(), FULL)
    assert plan == Plan("n1", ("v1",))


# ---- fence and disabled ------------------------------------------------------------------------------


def test_fence_keeps_victims_inside_the_fenced_subtree():
    facts = queues(t1=QueueFacts("root.tenant.t1", {"vcore": 10}, {"vcore": 0}))
    inside = victim("inside", queue="root.tenant.t2", app="t2-app")
    outside = victim("outside", queue="root.test")
    preemptor = ask(2, queue="root.tenant.t1", app="t1-app")
    assert fence_root("root.tenant.t1", facts) == "root.tenant"
    assert choose_victims(preemptor, [outside, inside], facts, FULL) == Plan("n1", ("inside",))
    assert choose_victims(preemptor, [outside], facts, FULL) is None


def test_a_fence_stops_going_out_not_coming_in():
    # prod is outside the tenant's fence: it may still take victims inside it
    plan = choose_victims(ask(2), [victim("t2", queue="root.tenant.t2")], queues(), FULL)
    assert plan == Plan("n1", ("t2",))


def test_a_fence_on_the_leaf_itself_leaves_no_victims():
    facts = queues(p=QueueFacts("root.prod", {"vcore": 10}, {"vcore": 0}, "fence"))
    assert choose_victims(ask(2), [victim("v1")], facts, FULL) is None


def test_disabled_queues_allocations_are_not_victims():
    facts = queues(t=QueueFacts("root.test", {"vcore": 4}, {"vcore": 10}, "disabled"))
    assert choose_victims(ask(2), [victim("v1")], facts, FULL) is None
    plan = choose_victims(ask(2), [victim("v1"), victim("v2", queue="root.tenant.t2")], facts, FULL)
    assert plan == Plan("n1", ("v2",))


# ---- which victims, which node ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("candidates", "expected"),
    [
        pytest.param([victim("old", sequence=1), victim("new", sequence=2)], ("new",), id="newest-first"),
        pytest.param(
            [victim("origin", sequence=2, originator=True), victim("worker", sequence=1)],
            ("worker",),
            id="non-originators-before-originators",
        ),
        pytest.param(
            [victim("keep", sequence=2, allow_preempt_self=False), victim("ok", sequence=1)],
            ("ok",),
            id="preemptable-before-opted-out",
        ),
        pytest.param(
            [victim("keep", sequence=2, allow_preempt_self=False)],
            ("keep",),
            id="opted-out-only-when-nothing-else-frees-enough",
        ),
    ],
)
def test_victim_order(candidates, expected):
    plan = choose_victims(ask(2), candidates, queues(), FULL)
    assert plan is not None and plan.victims == expected


def test_victim_order_key():
    a = victim("a", sequence=1)
    b = victim("b", sequence=2, originator=True)
    c = victim("c", sequence=3, allow_preempt_self=False)
    assert sorted([c, b, a], key=victim_order) == [a, b, c]


def test_the_node_needing_fewest_victims_wins():
    candidates = [
        victim("n1-a", node="n1", vcore=1, sequence=1),
        victim("n1-b", node="n1", vcore=1, sequence=2),
        victim("n2-a", node="n2", vcore=2, sequence=3),
    ]
    assert choose_victims(ask(2), candidates, queues(), FULL) == Plan("n2", ("n2-a",))


def test_free_room_on_a_node_counts():
    available = {"n1": {"vcore": 1}, "n2": {"vcore": 0}}
    candidates = [victim("n1-a", node="n1", vcore=1), victim("n2-a", node="n2", vcore=1)]
    assert choose_victims(ask(2), candidates, queues(), available) == Plan("n1", ("n1-a",))


def test_victims_never_span_nodes():
    candidates = [victim("a", node="n1", vcore=1), victim("b", node="n2", vcore=1)]
    assert choose_victims(ask(2), candidates, queues(), FULL) is None


def test_unknown_or_unschedulable_nodes_are_not_considered():
    assert choose_victims(ask(2), [victim("v1", node="gone")], queues(), FULL) is None


def test_a_victim_that_frees_nothing_the_ask_lacks_is_not_taken():
    memory_only = Candidate("mem", "app-test", "root.test", "n1", {"memory": 5})
    plan = choose_victims(ask(2), [memory_only, victim("v1", sequence=-1)], queues(), FULL)
    assert plan == Plan("n1", ("v1",))


# ---- required-node asks ------------------------------------------------------------------------------------


def test_required_node_takes_the_lowest_priority_first_own_application_included():
    candidates = [
        victim("high", priority=5, vcore=2),
        victim("own", app="prod-app", queue="root.prod", priority=-1, vcore=2),
        victim("other-node", node="n2", priority=-10, vcore=2),
    ]
    plan = required_node_victims(ask(2, priority=10), candidates, "n1", {"vcore": 0})
    assert plan == Plan("n1", ("own",))


def test_required_node_never_takes_another_required_node_allocation_nor_a_higher_priority():
    candidates = [victim("daemon", required_node=True), victim("vip", priority=20)]
    assert required_node_victims(ask(2, priority=10), candidates, "n1", {"vcore": 0}) is None


def test_required_node_takes_opted_out_allocations_only_as_a_last_resort():
    candidates = [victim("keep", allow_preempt_self=False), victim("ok", vcore=1)]
    plan = required_node_victims(ask(1), candidates, "n1", {"vcore": 0})
    assert plan == Plan("n1", ("ok",))
    plan = required_node_victims(ask(3), candidates, "n1", {"vcore": 0})
    assert plan is not None and set(plan.victims) == {"keep", "ok"}


# ---- more laws: parents, eligibility of a victim's queue ---------------------------------------------


def test_law_1_holds_on_every_guaranteed_queue_above_the_preemptor():
    # t1 has room under its own guarantee, but its parent's guarantee (9) would be passed at 8 + 2
    facts = queues(
        t1=QueueFacts("root.tenant.t1", {"vcore": 10}, {"vcore": 6}),
        t=QueueFacts("root.tenant", {"vcore": 9}, {"vcore": 8}, "fence"),
    )
    preemptor = ask(2, queue="root.tenant.t1", app="t1-app")
    assert not preemptor_may_preempt(preemptor, facts)
    assert preemptor_may_preempt(ask(1, queue="root.tenant.t1", app="t1-app"), facts)
    # victims inside the parent bring it back within its guarantee (YuniKorn's snapshot removes them)
    assert preemptor_may_preempt(preemptor, facts, {"root.tenant": {"vcore": 2}})
    assert law_1_possible(preemptor, facts)
    assert not law_1_possible(ask(5, queue="root.tenant.t1", app="t1-app"), facts)  # t1 itself: 6 + 5 > 10
    inside = victim("t2", queue="root.tenant.t2", app="t2-app")
    assert choose_victims(preemptor, [inside], facts, {"n1": {"vcore": 0}}) == Plan("n1", ("t2",))
    # room on a node but the parent still over: a victim inside the parent is taken to bring it back
    assert choose_victims(preemptor, [inside], facts, {"n1": {"vcore": 2}}) == Plan("n1", ("t2",))


def test_law_3_also_guards_the_victims_parent_unless_the_preemptor_shares_it():
    # t2 has no guarantee (any usage is above it) but its parent, tenant, is guaranteed 8 of its 8
    facts = queues(
        t=QueueFacts("root.tenant", {"vcore": 8}, {"vcore": 8}, "default"),
        t1=QueueFacts("root.tenant.t1", {"vcore": 10}, {"vcore": 0}),
    )
    t2_victim = victim("v", queue="root.tenant.t2", app="t2-app")
    assert choose_victims(ask(2), [t2_victim], facts, FULL) is None
    # inside tenant the parent's usage does not change: a sibling may take it
    sibling = ask(2, queue="root.tenant.t1", app="t1-app")
    assert choose_victims(sibling, [t2_victim], facts, FULL) == Plan("n1", ("v",))


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param("root.test", True, id="above-its-guarantee"),
        pytest.param("root.prod", False, id="the-preemptors-own-queue"),
        pytest.param("root.tenant.t2", True, id="no-guarantee-and-in-use"),
        pytest.param("root.missing", False, id="unknown-queue"),
    ],
)
def test_victim_queue_eligible(path, expected):
    assert victim_queue_eligible("root.prod", "root", path, queues()) is expected


def test_victim_queue_eligible_respects_fence_and_disabled():
    facts = queues(t=QueueFacts("root.test", {"vcore": 4}, {"vcore": 10}, "disabled"))
    assert not victim_queue_eligible("root.prod", "root", "root.test", facts)
    assert victim_queue_eligible("root.tenant.t1", "root.tenant", "root.tenant.t2", queues())
    assert not victim_queue_eligible("root.tenant.t1", "root.tenant", "root.test", queues())


def test_patience_bounds_the_search_after_the_first_plan():
    # n1 needs two victims, n2 one; with no patience left after n1's plan, n2 is never looked at
    def room(node_id, candidates):
        return (node_id, {"vcore": 0}, candidates.__iter__)

    n1 = [victim("a", node="n1", vcore=1), victim("b", node="n1", vcore=1, sequence=1)]
    n2 = [victim("c", node="n2", vcore=2)]
    nodes = [room("n1", n1), room("n2", n2)]
    assert choose_on_nodes(ask(2), queues(), nodes) == Plan("n2", ("c",))
    assert choose_on_nodes(ask(2), queues(), nodes, patience=1) == Plan("n2", ("c",))
    assert choose_on_nodes(ask(2), queues(), nodes, patience=0) == Plan("n1", ("b", "a"))
