"""The preemption harness (issue 10): the law checks of ``korral.invariants`` on hand-made states and
parties (no threads), ``korral stress --preemption`` catching a core that breaks a law, and what the
stress run found in the product."""

from __future__ import annotations

import logging

import attrs
import pytest
from core_helpers import FAST, add_apps, add_nodes, part

import korral
from korral import si
from korral import testing as t
from korral.harness import invariants
from korral.harness.invariants import PreemptionParty, QueueLaws
from korral.info import AllocationInfo, ApplicationInfo, NodeInfo, PartitionInfo, QueueInfo

LAWS = QueueLaws(disabled=frozenset({"root.protected"}), fences=("root.fenced",))


def party(key: str, app: str, queue: str, priority: int = 0, **kwargs: object) -> PreemptionParty:
    return PreemptionParty(key=key, application_id=app, queue=queue, priority=priority, **kwargs)  # type: ignore[arg-type]


URGENT = party("u-1", "urgent-app", "root.urgent", 10, raw_priority=10)


@pytest.mark.parametrize(
    ("victim", "preemptor", "breach"),
    [
        (party("v", "low", "root.batch", 5), URGENT, None),
        (party("v", "low", "root.batch", 10), URGENT, None),  # equal priority may go
        (party("v", "low", "root.batch", 11), URGENT, "above the preemptor's 10"),
        (party("v", "urgent-app", "root.batch"), URGENT, "own application"),
        (party("v", "other", "root.urgent"), URGENT, "own queue"),
        (party("v", "low", "root.protected"), URGENT, "preemption disabled"),
        (party("v", "low", "root.protected.child"), URGENT, "preemption disabled"),  # inherited
        (party("v", "low", "root.fenced.inner2"), URGENT, None),  # a fence keeps victims in, not out
        (party("v", "low", "root.batch"), party("f", "f", "root.fenced.inner1", 10), "outside"),
        (party("v", "low", "root.fenced.inner2"), party("f", "f", "root.fenced.inner1", 10), None),
        # required-node asks: only on their node, own application allowed, raw priorities compared
        (
            party("v", "ds", "root.daemon", 0, node_id="n1"),
            party("d", "ds", "root.daemon", 5, required_node="n1", raw_priority=5),
            None,
        ),
        (
            party("v", "low", "root.batch", 0, node_id="n2"),
            party("d", "ds", "root.daemon", 5, required_node="n1", raw_priority=5),
            "requires n1",
        ),
        (
            party("v", "low", "root.batch", 20, raw_priority=7, node_id="n1"),
            party("d", "ds", "root.daemon", 5, required_node="n1", raw_priority=5),
            "above the required-node ask's 5",
        ),
    ],
)
def test_victim_laws(victim: PreemptionParty, preemptor: PreemptionParty, breach: str | None) -> None:
    reasons = invariants.victim_law_breaches(victim, preemptor, LAWS)
    if breach is None:
        assert reasons == []
    else:
        assert any(breach in reason for reason in reasons), reasons


def test_a_victim_is_justified_by_any_pending_preemptor_and_reported_when_none() -> None:
    victim = party("v", "low", "root.batch", 11)
    assert invariants.check_victim_justified(victim, [URGENT], LAWS) != []
    assert invariants.check_victim_justified(victim, [URGENT, attrs.evolve(URGENT, priority=20)], LAWS) == []
    assert "none pending" in invariants.check_victim_justified(victim, [], LAWS)[0]


def _state(queue_allocated: dict[str, int], allocations: list[AllocationInfo]) -> invariants.PartitionState:
    """One leaf root.batch (guaranteed 4000 memory) holding ``allocations`` on node n1."""
    used = invariants._sum(a.resource for a in allocations)
    batch = QueueInfo(
        path="root.batch",
        is_leaf=True,
        is_managed=True,
        state="Active",
        guaranteed={"memory": 4000},
        max={},
        allocated=queue_allocated,
        pending={},
        max_applications=0,
        properties={},
        children=[],
        applications=["low"],
    )
    app = ApplicationInfo(
        application_id="low",
        partition="p",
        queue="root.batch",
        user="u",
        state="Running",
        allocated=used,
        pending={},
        placeholder={},
        allocations=allocations,
        pending_asks=[],
    )
    node = NodeInfo(
        node_id="n1",
        partition="p",
        capacity={"memory": 8000},
        allocated=used,
        occupied={},
        available={"memory": 8000 - used.get("memory", 0)},
        schedulable=True,
        allocations=allocations,
        attributes={},
        reservations=[],
    )
    info = PartitionInfo(
        name="p",
        rm_id="rm",
        state="Active",
        capacity={"memory": 8000},
        allocated=used,
        node_sort_policy="fair",
        node_count=1,
        application_count=1,
    )
    return invariants.PartitionState(
        info=info, nodes=[node], applications=[app], queues={"root.batch": batch}
    )


def _allocation(uuid: str, memory: int, releasing: str = "") -> AllocationInfo:
    return AllocationInfo(
        allocation_key=uuid,
        uuid=uuid,
        application_id="low",
        node_id="n1",
        resource={"memory": memory},
        releasing=releasing,
    )


def test_the_guarantee_floor_counts_victims_awaiting_confirmation_as_gone() -> None:
    running = [_allocation("a", 2000), _allocation("b", 2000)]
    # 6000 used, 2000 of it a victim: 4000 left, exactly the guarantee
    state = _state({"memory": 6000}, [*running, _allocation("v", 2000, invariants.PREEMPTED)])
    assert invariants.check_guarantee_floor(state, ["root.batch"], {}) == []
    # two victims: 2000 left, below the guarantee of 4000 ...
    state = _state(
        {"memory": 6000},
        [
            running[0],
            _allocation("v", 2000, invariants.PREEMPTED),
            _allocation("w", 2000, invariants.PREEMPTED),
        ],
    )
    assert "below its guarantee 4000" in invariants.check_guarantee_floor(state, ["root.batch"], {})[0]
    # ... unless the RM released 2000 of it itself since the last check
    assert invariants.check_guarantee_floor(state, ["root.batch"], {"root.batch": {"memory": 2000}}) == []
    # a queue that lost no victim since the last check is not judged
    assert invariants.check_guarantee_floor(state, [], {}) == []


def test_victims_stay_booked_until_confirmed_and_go_after() -> None:
    state = _state({"memory": 4000}, [_allocation("a", 2000), _allocation("v", 2000, invariants.PREEMPTED)])
    assert invariants.check_victims_booked(state, {"v"}, set()) == []
    assert "booked as running" in invariants.check_victims_booked(state, {"a"}, set())[0]
    assert "no longer booked" in invariants.check_victims_booked(state, {"gone"}, set())[0]
    assert "still booked after the RM confirmed" in invariants.check_victims_booked(state, set(), {"v"})[0]


def test_an_overcommitted_node_is_reported() -> None:
    state = _state({"memory": 4000}, [_allocation("a", 2000)])
    assert invariants.check_nodes_not_overcommitted(state) == []
    node = attrs.evolve(state.nodes[0], allocated={"memory": 9000})
    assert invariants.check_nodes_not_overcommitted(attrs.evolve(state, nodes=[node]))


# ---- korral stress --preemption, end to end -----------------------------------------------------------


@pytest.fixture
def quiet_core():
    logger = logging.getLogger("korral")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def _break_priorities(monkeypatch: pytest.MonkeyPatch, policy: object) -> None:
    """Every allocation on a node is gathered as a candidate and looks lowest in priority (this
    reaches into the product's candidate gathering: the priority cap is applied there)."""
    from korral.model import preempting

    honest = preempting._node_candidates

    def lowest(model: object, node: object, allowed: dict | None) -> list:
        if allowed is not None:
            allowed = dict.fromkeys(allowed)  # any priority
        return [c._replace(priority=-1000) for c in honest(model, node, allowed)]  # type: ignore[arg-type]

    monkeypatch.setattr(preempting, "_node_candidates", lowest)


def _break_guarantees(monkeypatch: pytest.MonkeyPatch, policy: object) -> None:
    monkeypatch.setattr(policy, "_above", lambda guaranteed, usage: True)
    monkeypatch.setattr(policy, "_stays_at_or_above", lambda guaranteed, usage: True)


def _break_disabled(monkeypatch: pytest.MonkeyPatch, policy: object) -> None:
    monkeypatch.setattr(policy, "POLICY_DISABLED", "no such policy")


def _break_fence(monkeypatch: pytest.MonkeyPatch, policy: object) -> None:
    monkeypatch.setattr(policy, "fence_root", lambda queue_path, queues: "root")


@pytest.mark.timeout(180)
@pytest.mark.usefixtures("quiet_core")
@pytest.mark.parametrize(
    ("breakage", "caught"),
    [
        (_break_priorities, "above the preemptor"),
        (_break_guarantees, "below its guarantee"),
        (_break_disabled, "has preemption disabled"),
        (_break_fence, "outside the preemptor's fence"),
    ],
)
@pytest.mark.no_cover  # a long run over code other tests cover (pyproject.toml: no_cover)
def test_stress_preemption_catches_a_core_breaking_a_law(monkeypatch, breakage, caught: str) -> None:
    """The laws are checked for real: with one law of the victim policy switched off, seeds on the
    simulated runtime find a victim (or a queue) that shows it."""
    from korral.harness.stress import PreemptionStress
    from korral.policies import preemption as policy

    breakage(monkeypatch, policy)
    result = PreemptionStress(rms=1).run_seeds(range(1, 400), operations=40, budget=90.0)
    assert any(caught in violation for violation in result.violations), (result.seeds, result.violations)


# ---- found by korral stress --preemption ---------------------------------------------------------------

REQUIRED_NODE = si.DOMAIN_YUNIKORN + si.KEY_REQUIRED_NODE
TWO_QUEUES = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: low
          - name: daemon
"""


def test_each_victim_release_names_the_ask_it_makes_room_for() -> None:
    """Two required-node asks preempt in the same batch, each on its own node, their victims in one
    application: each victim's release must name the ask on its node (YuniKorn's message), not the
    first preemptor of the batch."""
    rm = t.RecordingRM("rm")
    with korral.start(**FAST) as core:
        core.register_resource_manager(t.register("rm", TWO_QUEUES), rm)
        add_nodes(core, rm, ["n1", "n2"], {"memory": 1000})
        # a drained node: room under root's max (the cluster's size), none to place on
        add_nodes(core, rm, ["n3"], {"memory": 1000}, action=si.NodeAction.CREATE_DRAIN)
        add_apps(core, rm, {"low-app": "root.low", "ds": "root.daemon"})
        core.update_allocation(t.asks("rm", "low-app", 4, {"memory": 500}))
        assert rm.wait_for_allocations(4)
        core.wait_until_idle()
        core.update_allocation(
            si.AllocationRequest(
                rm_id="rm",
                asks=[
                    si.AllocationAsk(
                        max_allocations=1,
                        allocation_key=f"ds-{node}",
                        application_id="ds",
                        resource_ask={"memory": 500},
                        priority=10,
                        tags={REQUIRED_NODE: node},
                    )
                    for node in ("n1", "n2")
                ],
            )
        )
        assert rm.wait_for(
            lambda r: (
                sum(x.termination_type == si.TerminationType.PREEMPTED_BY_SCHEDULER for x in r.released) == 2
            )
        )
        with rm.lock:
            node_of = {a.uuid: a.node_id for a in rm.live.values()}
            victims = [
                r for r in rm.released if r.termination_type == si.TerminationType.PREEMPTED_BY_SCHEDULER
            ]
        state = core.application(part(), "low-app")
        assert state is not None
        node_of.update({a.uuid: a.node_id for a in state.allocations})
        for victim in victims:
            assert victim.message.endswith(f"ask: ds-{node_of[victim.uuid]}"), (
                victim.message,
                node_of[victim.uuid],
            )
