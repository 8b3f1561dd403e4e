"""Operations of ``korral stress --simulated`` that reach further than the threaded stress's:

- **ids reused after removal**: an application removed and added again under the same id (with asks
  under the keys it had), an ask released and sent again under its key, a node decommissioned and
  created again under its id;
- **nodes that join drained** (``CREATE_DRAIN``), and **reloads that drop a queue** holding work
  (``root.b`` drains) and later bring it back;
- **queues placement rules create two and three levels deep**: applications with no queue and the
  tags the scenario's rules place by (``namespace``, and ``team`` for a third level), under ``root.c``.

Each is drawn from the RM's seeded stream like the others (``ScenarioDriver._choices``); the mix is
``Workloads``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from korral import si
from korral import testing as t
from korral.harness.stress import USERS

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
