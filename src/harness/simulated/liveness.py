"""Liveness of ``korral stress --simulated``, judged from the published state at the end of a run.

With every RM quiet (its last confirmations sent) and the virtual clock moved past every pending
deadline, a fresh computation decides what could still be placed: the sequential reference scheduler
(``korral.harness.reference``) is loaded with what the partition publishes (its queues, nodes with
their allocations and reservations, applications and their pending asks) and schedules once. It
keeps none of the scheduler's memos (asks that fit no node, quota-blocked applications, backoff), so
an ask it places now is work the product left stuck. Applications are also checked for a state that
time should have ended: Completing past its timeout, placeholders held past the placeholder timeout.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from korral import si
from korral.actors.partition.actor import PartitionActor
from korral.actors.scheduler.actor import SchedulerActor
from korral.actors.simulated import Simulation, SimulationError
from korral.core import Core
from korral.harness import invariants
from korral.harness.reference import ReferenceScheduler
from korral.harness.simulated import checks as simulated_checks
from korral.harness.simulated.workloads import SPARE_PARTITION
from korral.model.naming import normalize_partition_name
from korral.model.partition.composed import ModelError, PartitionModel

if TYPE_CHECKING:
    from korral.harness.simulated.scenarios import ScenarioDriver

# the reference's reason for a gang whose request is over its queue's max
LARGER_THAN_MAX = "larger than max queue allocation"

# states whose pending asks the scheduler still serves
SCHEDULED_STATES = frozenset({"New", "Accepted", "Starting", "Running"})
FAR = 1e9  # a delay never reached in the fresh computation: no reservation, no placeholder timeout


def advance_past_deadlines(core: Core, rounds: int = 20) -> None:
    """Move the virtual clock past every pending one-shot timer (timeouts, delays, backoffs) and run
    to quiescence, again while firing them sets new ones (at most ``rounds`` times). The clock jumps:
    every timer due by then fires, a periodic one once, rather than tick by tick. A round that left
    every scheduler's view, every partition's members and the pending one-shot timers as they were
    (an application backing off again and again: its ask fits nowhere) ends it: another round would
    only do the same."""
    simulation = core.simulation
    assert simulation is not None
    before: tuple[object, ...] | None = None
    for _ in range(rounds):
        simulation.run_until_idle()  # what is queued may set a timer (a completing timeout, say)
        last = simulation.last_one_shot_deadline()
        if last is None:
            return
        now = _progress(simulation)
        if now == before:
            return
        before = now
        # at once, as a stalled process's clock does (the ``jumps`` fault): every timer due by then
        # fires, a periodic one once, rather than tick by tick through an idle stretch
        simulation.jump(max(last - simulation.now, 0.0) + 0.001)


def _progress(simulation: Simulation) -> tuple[object, ...]:
    """What a round past the deadlines may change: each scheduler's view of its applications (their
    states, allocations, pending asks and reservations), each partition's applications, nodes and
    queues, and which one-shot timers are pending for whom (not when: a backoff re-armed is the
    same)."""
    views = []
    members = []
    for name, actor in simulation.actors.items():
        if actor.actor_stopped.is_set():
            continue
        if isinstance(actor, SchedulerActor):
            views.append(
                (
                    name,
                    tuple(
                        (
                            app_id,
                            len(app.state_log),
                            tuple(app.allocations),
                            tuple((key, ask.pending) for key, ask in app.asks.items()),
                            tuple(app.reservations.items()),
                        )
                        for app_id, app in actor.view.applications.items()
                    ),
                )
            )
        elif isinstance(actor, PartitionActor):
            members.append((name, tuple(actor.apps), tuple(actor.nodes), tuple(actor.queues)))
    timers = Counter(
        (target.name, type(message))
        for _, _, target, message, interval in simulation._timers
        if interval <= 0
    )
    return (tuple(views), tuple(members), timers)


def _allocation(info: Any) -> si.Allocation:
    return si.Allocation(
        allocation_key=info.allocation_key,
        uuid=info.uuid,
        resource_per_alloc=dict(info.resource),
        node_id=info.node_id,
        application_id=info.application_id,
        priority=info.priority,
        placeholder=info.placeholder,
        task_group_name=info.task_group_name,
        allocation_tags=dict(info.tags),
    )


def load_reference(
    state: invariants.PartitionState,
    config: str,
    rm_id: str,
    now: float,
    app_requests: dict[str, si.AddApplicationRequest],
) -> tuple[ReferenceScheduler, PartitionModel, list[str]]:
    """The reference scheduler holding the partition's published state; the problems loading it."""
    reference = ReferenceScheduler(
        config, rm_id=rm_id, reservation_delay=FAR, clock=lambda: now, placeholder_timeout=FAR
    )
    partition = reference.partition()
    assert partition is not None
    problems: list[str] = []
    # the published leaves the configuration does not have (placement rules made them), each with
    # its parents: a parent created on its own would be a leaf
    for path in sorted(path for path, queue in state.queues.items() if queue.is_leaf):
        if path not in partition.queues:
            try:
                partition.create_queue(path)
            except ModelError as error:
                problems.append(
                    f"{state.info.name}: the reference cannot hold published queue {path}: {error}"
                )
    new = []
    for app in state.applications:
        sent = app_requests.get(app.application_id)
        base = sent if sent is not None else si.AddApplicationRequest(application_id=app.application_id)
        new.append(
            si.AddApplicationRequest(
                application_id=app.application_id,
                queue_name=app.queue,
                partition_name="default",
                ugi=si.UserGroupInformation(user=app.user, groups=tuple(app.groups)),
                placeholder_ask=base.placeholder_ask,
                gang_scheduling_style=base.gang_scheduling_style,
            )
        )
    answer = reference.update_application(si.ApplicationRequest(rm_id=rm_id, new=new))
    # a gang admitted before a reload lowered its queue's max under the gang's request stays (the
    # check is at submission): loaded again without the request the reference would refuse now
    lowered = {r.application_id for r in answer.rejected if LARGER_THAN_MAX in r.reason}
    if lowered:
        again = [
            attrs.evolve(request, placeholder_ask=None)
            for request in new
            if request.application_id in lowered
        ]
        retried = reference.update_application(si.ApplicationRequest(rm_id=rm_id, new=again))
        answer = attrs.evolve(
            answer,
            rejected=[r for r in answer.rejected if r.application_id not in lowered] + list(retried.rejected),
        )
    for rejected in answer.rejected:
        problems.append(
            f"{state.info.name}: the reference refuses published application {rejected.application_id}: "
            f"{rejected.reason}"
        )
    nodes = [
        si.NodeInfo(
            node_id=node.node_id,
            action=si.NodeAction.CREATE if node.schedulable else si.NodeAction.CREATE_DRAIN,
            attributes={k: v for k, v in node.attributes.items() if k != si.NODE_PARTITION},
            schedulable_resource=dict(node.capacity),
            occupied_resource=dict(node.occupied),
            existing_allocations=[_allocation(a) for a in node.allocations],
        )
        for node in sorted(state.nodes, key=lambda n: n.node_id)
    ]
    node_answer, recovered = reference.update_node(si.NodeRequest(rm_id=rm_id, nodes=nodes))
    for refused in node_answer.rejected:
        problems.append(f"{state.info.name}: the reference refuses published node {refused.node_id}")
    for refused_allocation in recovered.rejected:
        problems.append(
            f"{state.info.name}: the reference refuses published allocation "
            f"{refused_allocation.allocation_key} of {refused_allocation.application_id}: "
            f"{refused_allocation.reason}"
        )
    asks = [
        si.AllocationAsk(
            allocation_key=ask.allocation_key,
            application_id=app.application_id,
            resource_ask=dict(ask.resource),
            max_allocations=ask.pending,
            priority=ask.priority,
            tags=dict(ask.tags),
            placeholder=ask.placeholder,
            task_group_name=ask.task_group_name,
        )
        for app in state.applications
        if app.state in SCHEDULED_STATES
        for ask in app.asks
        if ask.pending > 0
    ]
    if asks:
        refused_asks = reference.update_allocation(si.AllocationRequest(rm_id=rm_id, asks=asks)).rejected
        for refused_ask in refused_asks:
            problems.append(
                f"{state.info.name}: the reference refuses published ask {refused_ask.allocation_key} of "
                f"{refused_ask.application_id}: {refused_ask.reason}"
            )
    for node in state.nodes:
        for app_id, key in zip(node.reservations, node.reserved_asks, strict=False):
            app_model = partition.applications.get(app_id)
            ask_model = app_model.asks.get(key) if app_model is not None else None
            node_model = partition.nodes.get(node.node_id)
            if app_model is not None and ask_model is not None and node_model is not None:
                partition.reserve(app_model, ask_model, node_model)
    return reference, partition, problems


def check_placeable(
    state: invariants.PartitionState,
    config: str,
    rm_id: str,
    now: float,
    app_requests: dict[str, si.AddApplicationRequest],
) -> list[str]:
    """What the reference, loaded with the published state, places now: stuck work."""
    reference, _, problems = load_reference(state, config, rm_id, now, app_requests)
    made = reference.schedule(limit=20)
    if made:
        placed = ", ".join(sorted(f"{a.application_id}/{a.allocation_key} on {a.node_id}" for a in made))
        problems.append(
            f"{state.info.name}: stuck work: with every deadline past and the RMs quiet, the reference "
            f"scheduler loaded with the published state places {len(made)} allocation(s): {placed}"
        )
    return problems


def check_timed_states(state: invariants.PartitionState, now: float, timeouts: dict[str, float]) -> list[str]:
    """No application in a state that time should have ended, with every deadline past."""
    problems = []
    for app in sorted(state.applications, key=lambda a: a.application_id):
        if app.state == "Completing":
            problems.append(
                f"{state.info.name} application {app.application_id}: still Completing with its "
                f"completing timeout ({timeouts['completing']:g}s) past"
            )
        live_placeholders = [a for a in app.allocations if a.placeholder and not a.releasing]
        entered = [when for when, name in app.state_log if name in ("Accepted", "Running")]
        if live_placeholders and app.state == "Accepted" and entered:
            problems.append(
                f"{state.info.name} application {app.application_id}: holds "
                f"{len(live_placeholders)} placeholder(s) in state Accepted with the placeholder "
                f"timeout ({timeouts['placeholder']:g}s) past"
            )
    return problems


def check_drained_partitions_gone(core: Core, drivers: Sequence[ScenarioDriver]) -> list[str]:
    """A partition a reload dropped drains and goes once it holds no application: with the RMs
    quiet and the clock past the queue cleanup that removes it, none is left, empty, draining."""
    simulation = core.simulation
    assert simulation is not None

    def empty_draining() -> list[str]:
        found = []
        with simulation.frozen():
            for driver in drivers:
                name = normalize_partition_name(SPARE_PARTITION, driver.rm_id)
                if simulated_checks.live_partition(core, name) is None:
                    continue
                state = simulated_checks.collect_direct(core, name)
                if state is not None and state.info.state == "Draining" and not state.applications:
                    found.append(name)
        return found

    if not drivers or not empty_draining():
        return []
    try:
        core.advance(2 * drivers[0].settings.queue_cleanup_interval)
    except SimulationError as error:
        return [f"livelock: {error}"]
    return [
        f"partition {name}: dropped by a reload and holding no application, still live past the queue cleanup"
        for name in empty_draining()
    ]
