"""Operations of ``korral stress --simulated`` that reach further than the threaded stress's:

- **ids reused after removal**: an application removed and added again under the same id (with asks
  under the keys it had), an ask released and sent again under its key, a node decommissioned and
  created again under its id;
- **nodes that join drained** (``CREATE_DRAIN``), and **reloads that drop a queue** holding work
  (``root.b`` drains) and later bring it back;
- **queues placement rules create two and three levels deep**: applications with no queue and the
  tags the scenario's rules place by (``namespace``, and ``team`` for a third level), under ``root.c``;
- **reloads that add and drop a whole partition** (``spare``): while the RM's configuration has it,
  the RM gives it nodes and applications with asks; a reload without it drains it (it refuses new
  applications, keeps what runs booked) until the RM removes its applications, and then it goes;
- **quota preemption**: the default partition has ``preemption.quotapreemptionenabled`` and root.a
  a ``quota.preemption.delay``; a reload lowers root.a's max (and guarantee) under what it uses, and
  once the clock passes the delay the core preempts down to the new max.

Each is drawn from the RM's seeded stream like the others (``ScenarioDriver._choices``); the mix is
``Workloads``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from korral import si
from korral import testing as t
from korral.actors.loop import Stop
from korral.harness.simulated import queries as simulated_queries
from korral.harness.stress import USERS, Op, Violation

if TYPE_CHECKING:
    from korral.core import Core
    from korral.harness.simulated.scenarios import ScenarioDriver

NAMESPACES = ("x", "y")
TEAMS = ("red", "blue")


@attrs.frozen(kw_only=True)
class Workloads:
    """Which of this module's operations are in the mix (all by default; ``korral stress --simulated
    --no-deep-queues`` leaves the three-level placement queues out)."""

    reuse_ids: bool = True
    deep_queues: bool = True
    drop_queues: bool = True  # reloads that drop queue root.b (it drains) and bring it back
    partitions: bool = True  # reloads that add and drop partition ``spare`` (it drains)
    quota_preemption: bool = True  # reloads that lower root.a's max under its usage
    reads: bool = True  # a client reads through korral.Core's query API (simulated.queries)
    leaves: bool = True  # an RM unregisters (it leaves) and registers again
    denied: bool = True  # applications of a user the root's submit ACL does not name (rejected)


ALL_WORKLOADS = Workloads()


def placement_rules() -> str:
    """The scenario's placement rules: the queue the RM names; else, for an application tagged with a
    team, ``root.c.<team>.<namespace>`` (three levels below root); else ``root.c.<namespace>``."""
    return """    placementrules:
      - name: provided
      - name: tag
        value: namespace
        create: true
        parent:
          name: tag
          value: team
          create: true
          parent:
            name: fixed
            value: root.c
      - name: tag
        value: namespace
        create: true
        parent:
          name: fixed
          value: root.c
"""


# a namespace's quota tags (a Kubernetes namespace's annotations): on a dynamic queue they set its max
# and guarantee. Both keep root.c's child template's memory max (never lowered under what a queue
# uses); they differ in the guarantee, so an application with the other one re-tags the queue.
NAMESPACE_QUOTAS: tuple[dict[str, str], ...] = (
    {"namespace.resourcequota": '{"resources": {"memory": {"value": 30000}}}'},
    {
        "namespace.resourcequota": '{"resources": {"memory": {"value": 30000}}}',
        "namespace.resourceguaranteed": '{"resources": {"memory": {"value": 1000}}}',
    },
)

QUEUE_B = """          - name: b
            properties:
              application.sort.policy: fair
"""
# root.b's applications back off (YUNIKORN-3115) once two asks in a row fit no node: a timed state
BACKOFF_DELAY = 0.2
QUEUE_B_BACKING_OFF = (
    QUEUE_B
    + f"""              application.unschedasks.backoff: "2"
              application.unschedasks.backoff.delay: {int(BACKOFF_DELAY * 1000)}ms
"""
)


def with_backoff(config: str) -> str:
    """The scenario's configuration with root.b's applications backing off (``QUEUE_B_BACKING_OFF``)."""
    assert QUEUE_B in config
    return config.replace(QUEUE_B, QUEUE_B_BACKING_OFF)


def without_queue_b(config: str) -> str:
    """The scenario's configuration without queue ``root.b``: a reload with it drains the queue."""
    assert QUEUE_B_BACKING_OFF in config
    return config.replace(QUEUE_B_BACKING_OFF, "")


def create_drained_node(driver: ScenarioDriver, core: Core) -> None:
    """A node that joins unschedulable (``CREATE_DRAIN``); a later drain toggle may open it."""
    if len(driver.nodes) >= driver.settings.max_nodes:
        return
    driver.node_seq += 1
    node_id = f"{driver.rm_id}-node-{driver.node_seq}"
    driver.nodes[node_id] = False
    capacity = {"memory": driver.rng.choice(driver.settings.node_memory), "vcore": 8000}
    request = t.nodes(driver.rm_id, [node_id], capacity, action=si.NodeAction.CREATE_DRAIN)
    driver.send_request(core, "nodes", request, f"create {node_id} drained")


def remember_removed(driver: ScenarioDriver, app_id: str) -> None:
    """An application the RM removes: its id and its asks' keys (as the RM sent them), for a reuse."""
    keys = tuple(sorted(key for key, ask in driver.ask_requests.items() if ask.application_id == app_id))
    driver.removed_apps[app_id] = keys


def readd_removed_app(driver: ScenarioDriver, core: Core) -> None:
    """An application removed before comes back under the same id, with asks under its old keys."""
    candidates = sorted(app for app in driver.removed_apps if app not in driver.apps)
    if not candidates:
        return
    app_id = driver.rng.choice(candidates)
    keys = driver.removed_apps.pop(app_id)
    user, groups = USERS[driver.rng.randrange(len(USERS))]
    queue = driver.rng.choice(["root.a", "root.b"])
    driver.apps.add(app_id)
    request = t.applications(driver.rm_id, {app_id: queue}, user=user, groups=groups)
    driver.send_request(core, "apps", request, f"add application {app_id} again (its id reused)")
    if not keys:
        return
    asks = [
        si.AllocationAsk(
            allocation_key=key,
            application_id=app_id,
            resource_ask={"memory": driver.rng.choice([500, 1000, 2000]), "vcore": 250},
            max_allocations=1,
        )
        for key in keys[: driver.rng.randint(1, 3)]
    ]
    for ask in asks:
        driver.asks[ask.allocation_key] = app_id
        driver.asks_released.discard(ask.allocation_key)
    allocation = si.AllocationRequest(rm_id=driver.rm_id, asks=asks)
    driver.send_request(core, "allocations", allocation, f"asks of {app_id} again under their old keys")


def resend_released_ask(driver: ScenarioDriver, core: Core) -> None:
    """An ask the RM released is sent again under the same key (a pod recreated with its name)."""
    candidates = sorted(key for key in driver.asks_released if driver.asks.get(key) in driver.apps)
    if not candidates:
        return
    key = driver.rng.choice(candidates)
    app_id = driver.asks[key]
    driver.asks_released.discard(key)
    ask = si.AllocationAsk(
        allocation_key=key,
        application_id=app_id,
        resource_ask={"memory": driver.rng.choice([500, 1000]), "vcore": 250},
        max_allocations=1,
    )
    request = si.AllocationRequest(rm_id=driver.rm_id, asks=[ask])
    driver.send_request(core, "allocations", request, f"ask {key} again after its release (key reused)")


def recreate_node(driver: ScenarioDriver, core: Core) -> None:
    """A node decommissioned before joins again under the same id."""
    candidates = sorted(node for node in driver.removed_nodes if node not in driver.nodes)
    if not candidates or len(driver.nodes) >= driver.settings.max_nodes:
        return
    node_id = driver.rng.choice(candidates)
    driver.removed_nodes.discard(node_id)
    driver.nodes[node_id] = True
    capacity = {"memory": driver.rng.choice(driver.settings.node_memory), "vcore": 8000}
    request = t.nodes(driver.rm_id, [node_id], capacity)
    driver.send_request(core, "nodes", request, f"create {node_id} again (its id reused)")


def add_placed_app(driver: ScenarioDriver, core: Core) -> None:
    """An application with no queue: the placement rules create ``root.c.<namespace>`` for it, or,
    tagged with a team too, ``root.c.<team>.<namespace>``."""
    driver.app_seq += 1
    app_id = f"{driver.rm_id}-app-{driver.app_seq}"
    user, groups = USERS[driver.app_seq % len(USERS)]
    tags = {"namespace": driver.rng.choice(NAMESPACES)}
    deep = driver.rng.random() < 0.5
    if deep:
        tags["team"] = driver.rng.choice(TEAMS)
    if driver.rng.random() < 0.5:
        tags.update(NAMESPACE_QUOTAS[driver.rng.randrange(len(NAMESPACE_QUOTAS))])
    request = t.applications(driver.rm_id, {app_id: ""}, tags=tags, user=user, groups=groups)
    driver.apps.add(app_id)
    where = f"root.c.{tags['team']}.{tags['namespace']}" if deep else f"root.c.{tags['namespace']}"
    driver.send_request(core, "apps", request, f"add application {app_id} placed in {where}")
    count = driver.rng.randint(1, 3)
    asks = t.asks(
        driver.rm_id,
        app_id,
        count,
        {"memory": driver.rng.choice([500, 1000, 2000]), "vcore": 250},
        prefix=f"{app_id}-ask-",
        start=driver.ask_seq,
    )
    for index in range(driver.ask_seq, driver.ask_seq + count):
        driver.asks[f"{app_id}-ask-{index}"] = app_id
    driver.ask_seq += count
    driver.send_request(core, "allocations", asks, f"add {count} asks to {app_id}")


# ---- a partition reloads add and drop ------------------------------------------------------------

SPARE_PARTITION = "spare"
SPARE = """  - name: spare
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: s
"""
SPARE_QUEUE = "root.s"
SPARE_APPS = 3  # at most, at a time
# what a reload's description says it changed (the coverage counts each)
ADDS_PARTITION = "adds partition spare"
DROPS_PARTITION = "drops partition spare: it drains"
LOWERS_MAX = "lowers root.a's max: quota preemption"
RELOAD_CHANGES = (ADDS_PARTITION, DROPS_PARTITION, LOWERS_MAX)


def has_spare(config: str) -> bool:
    """Whether a configuration has partition ``spare``."""
    return SPARE in config


def with_spare(config: str) -> str:
    return config if has_spare(config) else config + SPARE


def spare_work(driver: ScenarioDriver, core: Core) -> None:
    """While the RM's configuration has partition ``spare``: a node there (the first time), and an
    application with one or two asks (sent as the RM sends any request; not re-sent by a restart's
    recovery, which drops the spare partition's work with its nodes)."""
    partition = SPARE_PARTITION
    if not driver.spare_nodes:
        driver.node_seq += 1
        node_id = f"{driver.rm_id}-node-{driver.node_seq}"
        driver.spare_nodes.add(node_id)
        capacity = {"memory": driver.rng.choice(driver.settings.node_memory), "vcore": 8000}
        request = t.nodes(driver.rm_id, [node_id], capacity, partition=partition)
        driver.send_plain(core, "nodes", request, f"create {node_id} in partition {partition}")
    if len(driver.spare_apps) >= SPARE_APPS:
        return
    driver.app_seq += 1
    app_id = f"{driver.rm_id}-app-{driver.app_seq}"
    user, groups = USERS[driver.app_seq % len(USERS)]
    driver.spare_apps.add(app_id)
    adding = t.applications(
        driver.rm_id, {app_id: SPARE_QUEUE}, user=user, groups=groups, partition=partition
    )
    driver.send_plain(core, "apps", adding, f"add application {app_id} in partition {partition}")
    count = driver.rng.randint(1, 2)
    asks = t.asks(
        driver.rm_id,
        app_id,
        count,
        {"memory": driver.rng.choice([1000, 2000]), "vcore": 100},
        prefix=f"{app_id}-ask-",
        start=driver.ask_seq,
        partition=partition,
    )
    driver.ask_seq += count
    driver.ask_rules.sent("allocations", asks)
    driver.send_plain(core, "allocations", asks, f"add {count} asks to {app_id} in partition {partition}")


def drain_spare(driver: ScenarioDriver, core: Core) -> None:
    """Partition ``spare`` was dropped by a reload and drains while it holds applications: the RM
    removes them (their allocations are released; the partition goes once it holds none, its nodes
    with it), or now and then adds one more, which the dropped partition refuses."""
    partition = SPARE_PARTITION
    if driver.spare_apps and driver.rng.random() < 0.7:
        apps = sorted(driver.spare_apps)
        forget_spare(driver)
        request = t.remove_applications(driver.rm_id, apps, partition=partition)
        driver.send_plain(
            core, "apps", request, f"remove {len(apps)} applications of dropped partition {partition}"
        )
        return
    if not driver.spare_apps:
        forget_spare(driver)  # it held none: gone at the reload, its nodes with it
    driver.app_seq += 1
    app_id = f"{driver.rm_id}-app-{driver.app_seq}"
    user, groups = USERS[driver.app_seq % len(USERS)]
    adding = t.applications(
        driver.rm_id, {app_id: SPARE_QUEUE}, user=user, groups=groups, partition=partition
    )
    driver.send_plain(
        core, "apps", adding, f"add application {app_id} to dropped partition {partition} (refused)"
    )


def forget_spare(driver: ScenarioDriver) -> None:
    """A registration or a restart: the RM's spare partition starts afresh (or is gone)."""
    driver.spare_apps.clear()
    driver.spare_nodes.clear()


# ---- quota preemption ----------------------------------------------------------------------------

QUOTA_PREEMPTION = """    preemption:
      quotapreemptionenabled: true
"""
QUOTA_DELAY = 0.1  # root.a's quota.preemption.delay
_QUEUE_A_LIMITS = """            limits:
              - limit: each user in a
"""
_QUEUE_A_QUOTA = f"""            properties:
              quota.preemption.delay: {int(QUOTA_DELAY * 1000)}ms
"""
LOWERED_QUEUE = "root.a"
LOWERED_MAX = "max: {memory: 1000, vcore: 40}  # lowered"
LOWERED_USER_MAX = "maxresources: {memory: 1000}"


def with_quota_preemption(config: str) -> str:
    """The default partition with quota preemption on, and root.a with a quota preemption delay."""
    head = "  - name: default\n"
    assert head in config and _QUEUE_A_LIMITS in config
    config = config.replace(head, head + QUOTA_PREEMPTION, 1)
    return config.replace(_QUEUE_A_LIMITS, _QUEUE_A_QUOTA + _QUEUE_A_LIMITS, 1)


def lowers_max(config: str) -> bool:
    """Whether a configuration has root.a's lowered max."""
    return LOWERED_MAX in config


def with_lowered_max(config: str) -> str:
    """root.a's max lowered to what a few allocations use, its guarantee dropped (quota preemption
    never takes a queue below it) and its user limit lowered (it may not exceed the max)."""
    start = config.index("          - name: a\n")
    end = config.index("          - name: ", start + 1)  # the next queue of root (root.p is last)
    block = config[start:end]
    lines = []
    for line in block.splitlines(keepends=True):
        stripped = line.strip()
        indent = line[: len(line) - len(line.lstrip())]
        if stripped.startswith("max:"):
            line = f"{indent}{LOWERED_MAX}\n"
        elif stripped.startswith("guaranteed:"):
            continue  # none: quota preemption never takes a queue below its guarantee, in any type
        elif stripped.startswith("maxresources:"):  # a user limit may not exceed its queue's max
            line = f"{indent}{LOWERED_USER_MAX}\n"
        lines.append(line)
    return config[:start] + "".join(lines) + config[end:]


# ---- an RM that leaves, a user the ACLs deny -----------------------------------------------------

# the root's submit ACL names the scenario's users (USERS, and "user" of the gangs and timed apps)
SUBMIT_ACL = '        submitacl: "user,ann,ben,cid"\n'
DENIED_USER = "eve"  # in no ACL: every application of hers is rejected


def with_submit_acl(config: str) -> str:
    """The default partition's root open to the scenario's users only (``SUBMIT_ACL``)."""
    anyone = '        submitacl: "*"\n'
    assert anyone in config
    return config.replace(anyone, SUBMIT_ACL, 1)


def add_denied_app(driver: ScenarioDriver, core: Core) -> None:
    """An application of a user the ACLs do not name: rejected with its reason, never held."""
    driver.app_seq += 1
    app_id = f"{driver.rm_id}-app-{driver.app_seq}"
    queue = driver.rng.choice(["root.a", "root.b", ""])
    tags = {} if queue else {"namespace": driver.rng.choice(NAMESPACES)}
    request = t.applications(driver.rm_id, {app_id: queue}, tags=tags, user=DENIED_USER, groups=("guests",))
    driver.send_plain(
        core, "apps", request, f"add application {app_id} of {DENIED_USER} (denied by the ACLs)"
    )


def leave_and_return(driver: ScenarioDriver, core: Core) -> None:
    """The RM unregisters (its partitions stop; it is called no more), then registers again as it
    does at the start: a new registration with its nodes."""
    description = f"{driver.rm_id}: unregister"
    driver.record(
        Op(seq=0, rm=driver.index, kind="unregister", request=driver.rm_id, description=description)
    )
    problems = leave(core, driver.rm_id)
    if problems:
        raise Violation(problems[0])
    driver.register(core)


def leave(core: Core, rm_id: str) -> list[str]:
    """The RM unregisters; once the call returned, its partitions have stopped and every actor of
    theirs has stopped or has its stop on the way (the partition tells them; they go once they
    handled what came before), and the core names none of its partitions."""
    core.unregister_resource_manager(rm_id)
    simulation = core.simulation
    assert simulation is not None
    prefix = f"[{rm_id}]"
    running = sorted(
        name
        for name, actor in simulation.actors.items()
        if name.startswith(prefix)
        and not actor.actor_stopped.is_set()
        and not any(type(envelope.message) is Stop for envelope in actor.actor_inbox.messages)
    )
    named = [name for name in core.partition_names() if name.startswith(prefix)]
    problems = []
    if running:
        problems.append(f"{rm_id} unregistered, and its actors still run: {', '.join(running[:5])}")
    if named:
        problems.append(f"{rm_id} unregistered, and the core still names its partitions {named}")
    return problems


def apply_op(core: Core, op: Op) -> list[str]:
    """A replay's operation of this module's own kinds (``OWN_KINDS``): the violations it shows."""
    if op.kind == "unregister":
        return leave(core, op.request)
    return simulated_queries.read(core, op.request)


OWN_KINDS = ("read", "unregister")
