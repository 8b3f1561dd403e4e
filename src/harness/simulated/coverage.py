"""What a range of ``korral stress --simulated`` seeds reached, and what it never did.

Counted per seed and summed over a range (``--jobs`` workers' counts add up the same):

- **message kinds** each actor kind was delivered (a periodic tick counts as the message it carries),
  and so the **handlers** run: every ``on_X`` of the product's actor classes is listed, reached or not;
- **application states** the RMs were told of (an update; a rejection is told as one) or a check saw
  (every ``ApplicationState``), and **queue states** seen at the checks (every ``QueueState``);
- **SI operations** the RMs sent, by kind and the parts that matter (node actions, applications
  added or removed, asks of each sort, releases by termination type, the final confirmations of the
  core's releases, reloads, registrations and departures, core restarts and recoveries), and the
  reads made through ``korral.Core``'s queries, against the list of those the scenario can send.

A blind spot shows as a name in a "never" list before a bug hides in it. What no SI or API input can
reach (``UNREACHABLE``: a handler inherited but never sent to that kind, a state nothing enters) is
listed apart, with why.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import attrs

from korral import si
from korral.actors.application import ApplicationActor
from korral.actors.base import Periodic
from korral.actors.dispatch import handler_table
from korral.actors.dispatcher import CallbackDispatcher
from korral.actors.loop import Stop
from korral.actors.messages import Deliver
from korral.actors.node import NodeActor
from korral.actors.partition.actor import PartitionActor
from korral.actors.queue import QueueActor
from korral.actors.registrar import Registrar
from korral.actors.rmproxy import RMProxyActor
from korral.actors.scheduler.actor import SchedulerActor
from korral.harness.invariants import PartitionState
from korral.harness.simulated.queries import READS
from korral.harness.simulated.workloads import DENIED_USER, RELOAD_CHANGES
from korral.model.app.state import ApplicationState
from korral.model.queue import QueueState
from korral.model.quota_preempting import QUOTA_MESSAGE

# the product's actor classes a simulated core runs, by the name the report gives them
ACTOR_KINDS: tuple[tuple[str, type], ...] = (
    ("registrar", Registrar),
    ("rmproxy", RMProxyActor),
    ("partition", PartitionActor),
    ("scheduler", SchedulerActor),
    ("application", ApplicationActor),
    ("node", NodeActor),
    ("queue", QueueActor),
    ("callbacks", CallbackDispatcher),
)

_NODE_ACTIONS = [
    f"nodes {action.name}" for action in si.NodeAction if action is not si.NodeAction.UNKNOWN_ACTION_FROM_RM
]
SI_OPERATIONS: tuple[str, ...] = (
    "register",
    "register again",
    *_NODE_ACTIONS,
    "nodes CREATE with existing allocations",
    "apps add",
    "apps add with placeholders (gang)",
    "apps add with execution timeout",
    "apps add to a placement rule's queue",
    "apps add with namespace quota tags",
    "apps add by a user the ACLs deny",
    "apps remove",
    "asks add",
    "asks placeholder",
    "asks task group (real)",
    "asks required node",
    "asks may preempt",
    "asks with execution timeout",
    "asks sent again (update or resend)",
    "release asks",
    "release allocation by uuid",
    "release all of an application",
    *(
        f"confirm {kind.name}"
        for kind in (
            si.TerminationType.TIMEOUT,
            si.TerminationType.PREEMPTED_BY_SCHEDULER,
            si.TerminationType.PLACEHOLDER_REPLACED,
        )
    ),
    "config reload",
    "config reload invalid",
    *(f"config reload that {change}" for change in RELOAD_CHANGES),
    "apps add to a dropped partition (refused)",
    "apps remove from a dropped partition (it drains)",
    "core restart",
    "recover",
    "clock jump",
    "unregister",
    *(f"read {what}" for what in READS),
)
# what no SI or API input reaches, and why (the report lists these apart, never as blind spots)
UNREACHABLE: dict[str, str] = {
    "node: SchedulerDone": "the scheduler sends a node actor nothing (its partition alone does)",
    "queue: SchedulerDone": "the scheduler sends a queue actor nothing (its partition alone does)",
    "partition: QueueTreeQuery": "Core.queues() reads the tree the partition published; the tree is "
    "asked of a partition only where it publishes none (the Ray engine); the checks read it directly",
    "rmproxy: Withdraw": "sent only when starting a registration's partitions raises (an internal "
    "failure: the configuration was validated before)",
    "Expired": "a terminated application leaves the completed list 3 days after it ended; the RM is "
    "told of no Expired state",
    "Stopped": "no configuration, SI or API input stops a queue",
}
# a partition's states at the checks (the partition a reload drops drains, then goes)
PARTITION_STATES = ("Active", "Draining")
# what the core did on its own that a workload is there to reach
QUOTA_PREEMPTED = "quota preemption released an allocation (a lowered max enforced)"
OUTCOMES = (QUOTA_PREEMPTED,)


_kinds: dict[type, str] = {}  # an actor class's kind, found once
_names: dict[tuple[type, type], str] = {}  # "actor kind: Message" of an actor class and a message class


def _actor_kind(actor: Any) -> str:
    kind = _kinds.get(type(actor))
    if kind is None:
        found = (name for name, actor_class in ACTOR_KINDS if isinstance(actor, actor_class))
        kind = _kinds[type(actor)] = next(found, type(actor).__name__)
    return kind


@attrs.define
class Coverage:
    """Counts of what seeds reached (see the module's docstring); ``+`` adds two ranges' counts."""

    messages: Counter[str] = attrs.field(factory=Counter)  # "actor kind: Message"
    app_states: Counter[str] = attrs.field(factory=Counter)
    queue_states: Counter[str] = attrs.field(factory=Counter)
    operations: Counter[str] = attrs.field(factory=Counter)
    partition_states: Counter[str] = attrs.field(factory=Counter)
    outcomes: Counter[str] = attrs.field(factory=Counter)
    seeds: int = 0

    def __add__(self, other: Coverage) -> Coverage:
        return Coverage(
            messages=self.messages + other.messages,
            app_states=self.app_states + other.app_states,
            queue_states=self.queue_states + other.queue_states,
            operations=self.operations + other.operations,
            partition_states=self.partition_states + other.partition_states,
            outcomes=self.outcomes + other.outcomes,
            seeds=self.seeds + other.seeds,
        )

    # ---- counting ----------------------------------------------------------------------------------

    def delivered(self, actor: Any, message: Any) -> None:
        """A message delivered to an actor (the simulation's hook: once per step)."""
        if type(message) is Periodic:
            message = message.message
        elif type(message) is Stop:
            return  # pykka's, every actor's
        key = (type(actor), type(message))
        name = _names.get(key)
        if name is None:
            name = _names[key] = f"{_actor_kind(actor)}: {type(message).__name__}"
        self.messages[name] += 1
        if type(message) is Deliver:
            argument = message.argument
            if isinstance(argument, si.ApplicationResponse):
                for updated in argument.updated:
                    self.app_states[updated.state] += 1
                if argument.rejected:  # told as a rejection, never as an update (as YuniKorn does)
                    self.app_states["Rejected"] += len(argument.rejected)
            elif isinstance(argument, si.AllocationResponse):
                for released in argument.released:
                    if released.message.startswith(QUOTA_MESSAGE):
                        self.outcomes[QUOTA_PREEMPTED] += 1

    def state_seen(self, state: PartitionState) -> None:
        """A partition as a check read it: its state, its queues' and its applications' (an
        application waiting for its first ask is New, a state no update tells)."""
        self.partition_states[state.info.state] += 1
        self.queue_states.update(queue.state for queue in state.queues.values())
        self.app_states.update(app.state for app in state.applications)

    def operation(self, kind: str, request: Any, description: str) -> None:
        """An operation a run recorded (``Op``'s kind, request and description)."""
        self.operations.update(operation_names(kind, request, description))

    # ---- the report --------------------------------------------------------------------------------

    def report(self, counts: bool = False) -> list[str]:
        """Lines: per part, how many of the known names were reached, and those never reached (with
        ``counts``, every name reached and how often)."""
        handlers = sorted(
            f"{name}: {message.__name__}"
            for name, actor_class in ACTOR_KINDS
            for message in handler_table(actor_class)
        )
        parts = [
            ("handlers", handlers, self.messages),
            ("application states", [state.value for state in ApplicationState], self.app_states),
            ("queue states", [state.value for state in QueueState], self.queue_states),
            ("SI operations", list(SI_OPERATIONS), self.operations),
            ("partition states", list(PARTITION_STATES), self.partition_states),
            ("outcomes", list(OUTCOMES), self.outcomes),
        ]
        lines = [f"coverage of {self.seeds:,} seeds:"]
        unreachable: list[str] = []
        for title, known, seen in parts:
            reached = [name for name in known if seen[name]]
            never = [name for name in known if not seen[name] and name not in UNREACHABLE]
            unreachable += [name for name in known if not seen[name] and name in UNREACHABLE]
            lines.append(f"  {title}: {len(reached)} of {len(reached) + len(never)} reached")
            if counts:
                lines.extend(f"      {seen[name]:>9,}  {name}" for name in reached)
            if never:
                lines.append(f"    never: {', '.join(never)}")
        if unreachable:
            lines.append("  unreachable by any SI or API input (not counted above):")
            lines.extend(f"    {name}: {UNREACHABLE[name]}" for name in unreachable)
        unknown = sorted(set(self.messages) - set(handlers))
        if unknown:  # delivered to no handler of the product's classes (a test's own actor, say)
            lines.append(f"  other deliveries: {', '.join(unknown)}")
        return lines


def operation_names(kind: str, request: Any, description: str) -> list[str]:
    """The ``SI_OPERATIONS`` names one recorded operation counts as."""
    names: list[str] = []
    if kind == "register":
        names.append("register")
    elif kind == "recover":
        names.append("recover")
    elif kind == "restart":
        names.append("core restart")
    elif kind == "unregister":
        names.append("unregister")
    elif kind == "read":
        names.append(f"read {request[0]}")
    elif kind == "run":
        if isinstance(request, tuple) and request and request[0] == "jump":
            names.append("clock jump")
    elif kind == "config":
        names.append("config reload invalid" if "invalid" in description else "config reload")
        names.extend(f"config reload that {change}" for change in RELOAD_CHANGES if change in description)
    elif isinstance(request, si.NodeRequest):
        for info in request.nodes:
            names.append(f"nodes {info.action.name}")
            if info.existing_allocations:
                names.append("nodes CREATE with existing allocations")
    elif isinstance(request, si.ApplicationRequest):
        for app in request.new:
            names.append("apps add")
            if app.placeholder_ask:
                names.append("apps add with placeholders (gang)")
            if app.execution_timeout_milliseconds:
                names.append("apps add with execution timeout")
            if not app.queue_name:
                names.append("apps add to a placement rule's queue")
            if "namespace.resourcequota" in app.tags:
                names.append("apps add with namespace quota tags")
            if app.ugi is not None and app.ugi.user == DENIED_USER:
                names.append("apps add by a user the ACLs deny")
        names.extend("apps remove" for _ in request.remove)
        if "dropped partition" in description:
            dropped = "remove from a dropped partition (it drains)" if request.remove else None
            names.append(f"apps {dropped or 'add to a dropped partition (refused)'}")
    elif isinstance(request, si.AllocationRequest):
        names.extend(_allocation_names(request, description))
    return names


def _allocation_names(request: si.AllocationRequest, description: str) -> list[str]:
    names: list[str] = []
    for ask in request.asks:
        names.append("asks add")
        if ask.placeholder:
            names.append("asks placeholder")
        elif ask.task_group_name:
            names.append("asks task group (real)")
        if si.DOMAIN_YUNIKORN + si.KEY_REQUIRED_NODE in ask.tags:
            names.append("asks required node")
        if ask.preemption_policy is not None and ask.preemption_policy.allow_preempt_other:
            names.append("asks may preempt")
        if ask.execution_timeout_milliseconds:
            names.append("asks with execution timeout")
    if description.startswith(("update ask", "resend")) and request.asks:
        names.append("asks sent again (update or resend)")
    releases = request.releases
    if releases is not None:
        names.extend("release asks" for _ in releases.allocation_asks_to_release)
        for release in releases.allocations_to_release:
            if release.termination_type in (
                si.TerminationType.TIMEOUT,
                si.TerminationType.PREEMPTED_BY_SCHEDULER,
                si.TerminationType.PLACEHOLDER_REPLACED,
            ):
                names.append(f"confirm {release.termination_type.name}")
            elif release.uuid:
                names.append("release allocation by uuid")
            else:
                names.append("release all of an application")
    return names
