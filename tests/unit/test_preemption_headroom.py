"""Headroom-driven preemption, the priority walk and YuniKorn 1.8's parent-guarantee rule, as tables
over ``korral.policies.preemption`` (issue 26).

Tree used below (memory only):

root
├── parent   max 600 (full: the borrower's usage), no guarantee
│   ├── short   guaranteed 300, using 0 (the preemptor's queue)
│   └── borrow  no guarantee, using 600
└── other    no guarantee, using 400
"""

from __future__ import annotations

import pytest

from korral.policies.preemption import (
    Candidate,
    Plan,
    Preemptor,
    QueueFacts,
    additional_victims,
    choose_victims,
    fence_root,
    priority_limits,
    shortfall,
    victim_queue_eligible,
)


def tree(**overrides: QueueFacts) -> dict[str, QueueFacts]:
    base = {
        "root": QueueFacts("root", None, {"memory": 1000}, max={"memory": 2000}, booked={"memory": 1000}),
        "root.parent": QueueFacts(
            "root.parent", None, {"memory": 600}, max={"memory": 600}, booked={"memory": 600}
        ),
        "root.parent.short": QueueFacts("root.parent.short", {"memory": 300}, {}),
        "root.parent.borrow": QueueFacts("root.parent.borrow", None, {"memory": 600}),
        "root.other": QueueFacts("root.other", None, {"memory": 400}),
    }
    base.update({facts.path: facts for facts in overrides.values()})
    return base


def ask(memory: int = 200, queue: str = "root.parent.short", priority: int = 0) -> Preemptor:
    return Preemptor("ask", "short-app", queue, {"memory": memory}, priority)


def alloc(uuid: str, queue: str, node: str, memory: int = 100, age: int = 0, **fields: object) -> Candidate:
    return Candidate(
        uuid,
        f"app-{queue}",
        queue,
        node,
        {"memory": memory},
        age=age,
        sequence=age,
        **fields,  # type: ignore[arg-type]
    )


# n1 has room (1000 free); the borrower's allocations are all on n2, with the other queue's
ROOM = {"n1": {"memory": 1000}, "n2": {"memory": 0}}
ON_N2 = [
    *(alloc(f"b{i}", "root.parent.borrow", "n2", age=i) for i in range(6)),
    *(alloc(f"o{i}", "root.other", "n2", age=10 + i) for i in range(4)),
]


@pytest.mark.parametrize(
    ("memory", "relief", "expected"),
    [
        # parent's max 600 is full: the ask of 200 passes it by 200
        (200, None, {"root.parent": {"memory": 200}}),
        (200, {"root.parent": {"memory": 100}}, {"root.parent": {"memory": 100}}),
        (200, {"root.parent": {"memory": 200}}, {}),
        # the ask's own guarantee (300) is passed too
        (400, {"root.parent": {"memory": 400}}, {"root.parent.short": {"memory": 100}}),
    ],
)
def test_shortfall_counts_a_parents_max_and_the_guarantees(memory, relief, expected) -> None:
    assert shortfall(ask(memory), tree(), relief) == expected


def test_the_root_max_is_no_limit_for_preemption() -> None:
    facts = tree(
        root=QueueFacts("root", None, {"memory": 1000}, max={"memory": 1000}, booked={"memory": 1000})
    )
    assert "root" not in shortfall(ask(), facts)


def test_a_node_that_fits_is_taken_and_the_headroom_freed_anywhere() -> None:
    # n1 fits the ask with no victim; the parent's headroom is freed on n2: the newest borrowers go
    plan = choose_victims(ask(), ON_N2, tree(), ROOM)
    assert plan == Plan("n1", ("b5", "b4"))
    assert plan is not None and plan.owners == ("app-root.parent.borrow",) * 2


def test_victims_outside_the_full_parent_never_free_its_headroom() -> None:
    # the other queue's allocations are newer but do not lower the parent's usage
    plan = choose_victims(ask(), ON_N2, tree(), ROOM)
    assert plan is not None and not any(uuid.startswith("o") for uuid in plan.victims)
    # a parent exactly at its max fences the victims in (YuniKorn's fence root)
    assert fence_root("root.parent.short", tree()) == "root.parent"
    roomy = QueueFacts("root.parent", None, {"memory": 500}, max={"memory": 600}, booked={"memory": 500})
    assert fence_root("root.parent.short", tree(p=roomy)) == "root"


def test_no_plan_when_the_headroom_cannot_be_freed_within_the_laws() -> None:
    # the borrower has a guarantee of 500: only 100 may go, the ask needs 200
    facts = tree(b=QueueFacts("root.parent.borrow", {"memory": 500}, {"memory": 600}))
    assert choose_victims(ask(), ON_N2, facts, ROOM) is None
    assert choose_victims(ask(100), ON_N2, facts, ROOM) == Plan("n1", ("b5",))


def test_a_node_that_needs_victims_to_fit_and_headroom_victims_elsewhere() -> None:
    # no node has room: n1 holds the other queue's allocations, n2 the borrower's
    allocations = [
        *(alloc(f"o{i}", "root.other", "n1", age=10 + i, memory=250) for i in range(4)),
        *(alloc(f"b{i}", "root.parent.borrow", "n2", age=i) for i in range(6)),
    ]
    # n2 has room (no victim to fit, where n1 needs one): its borrowers free the parent's headroom
    assert choose_victims(ask(), allocations, tree(), {"n1": {"memory": 0}, "n2": {"memory": 400}}) == Plan(
        "n2", ("b5", "b4")
    )
    # no room anywhere: the full parent fences the victims in, so n1's (other's) cannot make room
    plan = choose_victims(ask(), allocations, tree(), {"n1": {"memory": 0}, "n2": {"memory": 0}})
    assert plan == Plan("n2", ("b5", "b4"))
    # with the parent not full (no fence), n1 needs two victims to fit, and the headroom comes from n2
    roomy = tree(
        p=QueueFacts("root.parent", None, {"memory": 600}, max={"memory": 700}, booked={"memory": 600})
    )
    plan = choose_victims(ask(300), allocations, roomy, {"n1": {"memory": 0}, "n2": {"memory": 0}})
    assert plan == Plan("n1", ("o3", "o2", "b5", "b4"))


def test_additional_victims_keep_every_victim_queue_at_its_guarantee() -> None:
    facts = tree(b=QueueFacts("root.parent.borrow", {"memory": 450}, {"memory": 600}))
    pool = [alloc(f"b{i}", "root.parent.borrow", "n2", age=i) for i in range(6)]
    assert additional_victims(ask(100), facts, [], pool) == [pool[5]]
    assert additional_victims(ask(200), facts, [], pool) is None  # 600 - 200 < 450


def test_the_newest_go_first_and_opted_out_only_when_nothing_else_frees_enough() -> None:
    pool = [
        alloc("old", "root.parent.borrow", "n2", age=1),
        alloc("new", "root.parent.borrow", "n2", age=9),
        alloc("kept", "root.parent.borrow", "n2", age=20, allow_preempt_self=False),
        alloc("origin", "root.parent.borrow", "n2", age=30, originator=True),
    ]
    extra = additional_victims(ask(100), tree(), [], pool)
    assert [c.uuid for c in extra or []] == ["new"]
    extra = additional_victims(ask(300), tree(), [], pool)
    assert [c.uuid for c in extra or []] == ["new", "old", "origin"]


# ---- the priority walk (queue.go's findEligiblePreemptionVictims) -----------------------------------

PRIORITY_TREE = {
    "root": QueueFacts("root", None, {}),
    "root.a": QueueFacts("root.a", {"memory": 100}, {}),
    "root.b": QueueFacts("root.b", None, {}, priority_offset=5),
    "root.fenced": QueueFacts("root.fenced", None, {}, priority_offset=3, priority_fence=True),
    "root.fenced.x": QueueFacts("root.fenced.x", None, {}, priority_offset=100),
    "root.high": QueueFacts("root.high", None, {}, priority_offset=50, priority_fence=True),
    "root.high.y": QueueFacts("root.high.y", None, {}),
}


@pytest.mark.parametrize(
    ("priority", "expected"),
    [
        # b subtracts its offset; fenced (offset 3 <= 10) opens its whole subtree; high (50) is out of reach
        (10, {"root.b": 5, "root.fenced": None, "root.fenced.x": None}),
        # fenced's offset 3 is above an ask of priority 2: none of it may be taken
        (2, {"root.b": -3}),
    ],
)
def test_priority_limits_follow_yunikorns_walk(priority: int, expected: dict) -> None:
    limits = priority_limits(ask(queue="root.a", priority=priority), PRIORITY_TREE, "root")
    assert {path: limit for path, limit in limits.items() if path != "root.a"} == expected


def test_a_priority_fence_on_the_asks_path_replaces_its_priority() -> None:
    facts = {
        **PRIORITY_TREE,
        "root.p": QueueFacts("root.p", None, {}, priority_offset=7, priority_fence=True),
        "root.p.leaf": QueueFacts("root.p.leaf", {"memory": 100}, {}),
    }
    limits = priority_limits(ask(queue="root.p.leaf", priority=1000), facts, "root")
    # the ask counts as priority 7 from root.p up: root.b's victims need priority <= 2
    assert limits["root.b"] == 2
    assert "root.high" not in limits and limits["root.fenced"] is None


def test_victims_above_the_priority_limit_are_not_taken() -> None:
    facts = tree(o=QueueFacts("root.other", None, {"memory": 400}, priority_offset=5))
    pool = [
        alloc("o1", "root.other", "n1", memory=300, priority=0),
        alloc("o2", "root.other", "n1", memory=300, priority=-3),
    ]
    facts["root.parent"] = QueueFacts("root.parent", None, {"memory": 0}, max={"memory": 600}, booked={})
    free = {"n1": {"memory": 0}}
    # the ask (priority 0) may take from root.other (offset 5) only what has priority <= -5
    assert choose_victims(ask(300, priority=0), pool, facts, free) is None
    assert choose_victims(ask(300, priority=3), pool, facts, free) == Plan("n1", ("o2",))


# ---- YuniKorn 1.8's parent-guarantee rule ------------------------------------------------------------


@pytest.mark.parametrize(
    ("parent_guarantee", "parent_usage", "ask_queue", "eligible"),
    [
        # the borrower has no guarantee; its parent is within its guarantee: not a victim source
        ({"memory": 800}, {"memory": 600}, "root.other", False),
        # the parent is above its guarantee: the borrower gives victims
        ({"memory": 500}, {"memory": 600}, "root.other", True),
        # an ask under the same parent with a guarantee of its own: the parent's remainder is not
        # handed down, so the sibling gives victims
        ({"memory": 800}, {"memory": 600}, "root.parent.short", True),
        # no guarantee anywhere on the path: any usage is above it
        (None, {"memory": 600}, "root.other", True),
    ],
)
def test_parent_guarantee_rule(parent_guarantee, parent_usage, ask_queue, eligible) -> None:
    facts = tree(p=QueueFacts("root.parent", parent_guarantee, parent_usage))
    assert victim_queue_eligible(ask_queue, "root", "root.parent.borrow", facts) is eligible


def test_the_guarantee_floor_is_resource_wise() -> None:
    # the borrower is below its vcore guarantee but above its memory one: a memory-only victim may go
    facts = tree(
        b=QueueFacts("root.parent.borrow", {"memory": 100, "vcore": 10}, {"memory": 600, "vcore": 2})
    )
    pool = [alloc(f"b{i}", "root.parent.borrow", "n2", age=i) for i in range(6)]
    assert [c.uuid for c in additional_victims(ask(100), facts, [], pool) or []] == ["b5"]
    # one that frees vcore too would take it further below: not taken
    vcore = [c._replace(resource={"memory": 100, "vcore": 1}) for c in pool]
    assert additional_victims(ask(100), facts, [], vcore) is None
