"""``korral stress``: simulated RMs on threads hammering one core with random SI operations.

Each RM has its own configuration, nodes and applications and issues a seeded stream of operations:
node create / update / drain / decommission, application add / remove, asks added, updated and
released, allocations released, configuration reloads (valid and invalid), re-registration, and a
callback that sometimes raises or is slow. Every ``checkpoint`` seconds all RMs pause, the core is
waited on (a watchdog: no progress in time is a deadlock), and the invariants of
``korral.harness.invariants`` are checked, plus per-RM ones: every ask is pending, allocated, released or
rejected; no RM ever saw another RM's allocation.

The RMs are hostile (``HostileDriver``): they also send wrong-typed and extreme items, wrong message
types and names into another RM's namespace (each must be rejected with a reason), re-register with a
fresh callback object (the old one must hear nothing more), one has slow callbacks, and every fourth
checkpoint the core is restarted and each RM recovers exactly what it believes live. ``soak``
(``korral.harness.soak``) runs application cycles beside a never-idle second RM and samples RSS,
threads and live actors.

On a violation the run stops, prints the seed, and shrinks the recorded operations (delta debugging,
replaying them one at a time on a fresh core) to the shortest sequence that still shows it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import attrs

import korral
from korral import si
from korral import testing as t
from korral.core import Core
from korral.errors import ConfigError
from korral.harness import faults, invariants
from korral.model.naming import normalize_partition_name

# A shrunk sequence must fail on this many fresh replays in a row (see ``StressRun.reproduces``).
REPRODUCTIONS = 3

SETTINGS: dict[str, Any] = {
    "completing_timeout": 0.5,
    "queue_cleanup_interval": 0.5,
    "reservation_delay": 0.2,
    "scheduling_interval": 0.05,
    "placeholder_timeout": 1.0,
}


# User and group limits in every config (the same on every reload, so usage never ends up above one
# legitimately): at most 4 applications per user in the partition and 3 (and 20G memory) in root.a;
# group dev shares 40G and 6 applications. Users take turns by application (``USERS``).
ROOT_USER_LIMITS = """        limits:
          - limit: each user
            users: ["*"]
            maxapplications: 4
          - limit: dev group
            groups: [dev]
            maxresources: {memory: 40000}
            maxapplications: 6
"""
A_USER_LIMITS = """            limits:
              - limit: each user in a
                users: ["*"]
                maxresources: {memory: 20000}
                maxapplications: 3
"""
USERS: tuple[tuple[str, tuple[str, ...]], ...] = (("ann", ("dev",)), ("ben", ("dev", "ops")), ("cid", ()))
LIMITED_GROUPS = ("dev",)


def rm_config(
    variant: int, *, extra_queue: bool = False, binpacking: bool = False, guarantee: int = 20
) -> str:
    """A config per RM: two leaves with limits, a fair leaf, a parent with a child template."""
    extra = "          - name: d\n" if extra_queue else ""
    policy = "binpacking" if binpacking else "fair"
    return f"""
partitions:
  - name: default
    nodesortpolicy:
      type: {policy}
    placementrules:
      - name: provided
      - name: tag
        value: namespace
        create: true
        parent:
          name: fixed
          value: root.c
    queues:
      - name: root
        submitacl: "*"
{ROOT_USER_LIMITS}        queues:
          - name: a
            resources:
              guaranteed: {{memory: {guarantee}000, vcore: {guarantee // 2}}}
              max: {{memory: {60 + variant * 10}000, vcore: 40}}
{A_USER_LIMITS}          - name: b
            properties:
              application.sort.policy: fair
          - name: c
            parent: true
            childtemplate:
              resources:
                max: {{memory: 30000, vcore: 20}}
{extra}"""


INVALID_CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        resources:
          max: {memory: 1}
"""


@attrs.frozen(kw_only=True)
class Op:
    """One SI call, recorded in issue order so that a run can be replayed."""

    seq: int
    rm: int
    kind: str  # nodes | apps | allocations | config | register
    request: Any
    description: str
    expect_error: bool = False


class Violation(Exception):
    pass


class StressRM(t.RecordingRM):
    """Records like RecordingRM; sometimes raises after recording, sometimes is slow."""

    def __init__(self, rm_id: str, seed: int, misbehave: bool) -> None:
        super().__init__(rm_id)
        self._rng = random.Random(seed)
        self.misbehave = misbehave
        self.raised = 0
        # uuid -> (application, allocation key) of every allocation told of: a replay names it by key
        self.keys_of: dict[str, tuple[str, str]] = {}

    def update_allocation(self, response: si.AllocationResponse) -> None:
        with self.lock:
            for allocation in response.new:
                self.keys_of[allocation.uuid] = (allocation.application_id, allocation.allocation_key)
        super().update_allocation(response)
        self._misbehave()

    def update_application(self, response: si.ApplicationResponse) -> None:
        super().update_application(response)
        self._misbehave()

    def _misbehave(self) -> None:
        if not self.misbehave:
            return
        roll = self._rng.random()
        if roll < 0.01:
            time.sleep(0.005)
        elif roll < 0.03:
            self.raised += 1
            raise RuntimeError("simulated RM callback failure (after recording)")


class ReplayRM(t.RecordingRM):
    """The RM of a replay: the core's uuids differ from the recorded run's (a new token, another order),
    so a recorded release by uuid is sent for the allocation of the same application and key here."""

    def __init__(self, rm_id: str, recorded_keys: dict[str, tuple[str, str]]) -> None:
        super().__init__(rm_id)
        self.recorded_keys = recorded_keys
        self.uuid_of: dict[tuple[str, str], str] = {}

    def update_allocation(self, response: si.AllocationResponse) -> None:
        with self.lock:
            for allocation in response.new:
                self.uuid_of[(allocation.application_id, allocation.allocation_key)] = allocation.uuid
        super().update_allocation(response)

    def translate(self, request: Any) -> Any:
        """``request`` with each release by a recorded uuid naming this replay's uuid for the same
        allocation (a uuid never told of, such as a hostile one, is sent as recorded)."""
        if not isinstance(request, si.AllocationRequest) or request.releases is None:
            return request
        releases = request.releases.allocations_to_release
        if not isinstance(releases, list):
            return request
        translated = []
        for release in releases:
            if isinstance(release, si.AllocationRelease) and release.uuid in self.recorded_keys:
                with self.lock:
                    uuid = self.uuid_of.get(self.recorded_keys[release.uuid], release.uuid)
                release = attrs.evolve(release, uuid=uuid)
            translated.append(release)
        return attrs.evolve(
            request, releases=attrs.evolve(request.releases, allocations_to_release=translated)
        )


class Driver:
    """One simulated RM: chooses operations from its own seeded stream."""

    def __init__(self, index: int, seed: int, record: Callable[[Op], None], misbehave: bool) -> None:
        self.index = index
        self.rm_id = f"rm{index}"
        self.rng = random.Random(seed * 1000 + index)
        self.record = record
        self.rm = StressRM(self.rm_id, seed * 7 + index, misbehave)
        self.partition = normalize_partition_name("default", self.rm_id)
        self.config = rm_config(index)
        self.nodes: dict[str, bool] = {}  # node id -> schedulable
        self.apps: set[str] = set()
        self.node_seq = 0
        self.app_seq = 0
        self.ask_seq = 0
        # asks this RM submitted that must be accounted for: key -> application
        self.asks: dict[str, str] = {}
        self.asks_released: set[str] = set()
        self.generation = 0  # registrations so far
        # gang applications: app -> (placeholders asked, placeholder resource); real asks of task groups
        self.gangs: dict[str, tuple[int, dict[str, int]]] = {}
        self.gang_asks: set[str] = set()

    # ---- operations --------------------------------------------------------------------------------

    def register(self, core: Core) -> None:
        self.generation += 1
        self.record(
            Op(
                seq=0,
                rm=self.index,
                kind="register",
                request=t.register(self.rm_id, self.config),
                description=f"{self.rm_id}: register",
            )
        )
        core.register_resource_manager(t.register(self.rm_id, self.config), self.rm)
        with self.rm.lock:
            self.rm.live.clear()
            self.rm.to_confirm.clear()  # releases of the previous registration's partition
        self.nodes.clear()
        self.apps.clear()
        self.asks.clear()
        self.asks_released.clear()
        self.gangs.clear()
        self.gang_asks.clear()

    def step(self, core: Core) -> None:
        choices = self._choices()
        total = sum(weight for weight, _ in choices)
        roll = self.rng.random() * total
        for weight, action in choices:
            roll -= weight
            if roll <= 0:
                action(core)
                return

    def _choices(self) -> list[tuple[float, Callable[[Core], None]]]:
        """The operations this RM may issue next, each with its weight."""
        return [
            (8 if len(self.nodes) < 12 else 1, self._create_nodes),
            (3, self._update_node),
            (3, self._drain_node),
            (1.5, self._decommission_node),
            (7 if len(self.apps) < 10 else 1, self._add_app),
            (2.5, self._remove_app),
            (20, self._add_asks),
            (3, self._update_ask),
            (3, self._release_asks),
            (15, self._release_allocation),
            (1.5, self._release_app_allocations),
            (0.8, self._reload_config),
            (0.4, self._reload_invalid_config),
            (0.15, self.register),
            *self.gang_choices(),
        ]

    def _send(self, core: Core, kind: str, request: Any, description: str) -> None:
        self.record(Op(seq=0, rm=self.index, kind=kind, request=request, description=description))
        if kind == "nodes":
            core.update_node(request)
        elif kind == "apps":
            core.update_application(request)
        else:
            core.update_allocation(request)

    def _create_nodes(self, core: Core) -> None:
        ids = []
        for _ in range(self.rng.randint(1, 3)):
            self.node_seq += 1
            ids.append(f"{self.rm_id}-node-{self.node_seq}")
        capacity = {
            "memory": self.rng.choice([8000, 16000, 32000]),
            "vcore": self.rng.choice([4000, 8000, 16000]),
        }
        occupied = {"memory": 1000} if self.rng.random() < 0.2 else None
        for node_id in ids:
            self.nodes[node_id] = True
        self._send(
            core, "nodes", t.nodes(self.rm_id, ids, capacity, occupied=occupied), f"create nodes {ids}"
        )

    def _pick_node(self) -> str | None:
        return self.rng.choice(sorted(self.nodes)) if self.nodes else None

    def _update_node(self, core: Core) -> None:
        node_id = self._pick_node()
        if node_id is None:
            return
        capacity = {
            "memory": self.rng.choice([8000, 16000, 32000, 48000]),
            "vcore": self.rng.choice([4000, 16000]),
        }
        request = t.node_action(self.rm_id, node_id, si.NodeAction.UPDATE, schedulable_resource=capacity)
        self._send(core, "nodes", request, f"update {node_id} capacity {capacity}")

    def _drain_node(self, core: Core) -> None:
        node_id = self._pick_node()
        if node_id is None:
            return
        schedulable = not self.nodes[node_id]
        self.nodes[node_id] = schedulable
        action = si.NodeAction.DRAIN_TO_SCHEDULABLE if schedulable else si.NodeAction.DRAIN_NODE
        self._send(core, "nodes", t.node_action(self.rm_id, node_id, action), f"{action.name} {node_id}")

    def _decommission_node(self, core: Core) -> None:
        node_id = self._pick_node()
        if node_id is None:
            return
        del self.nodes[node_id]
        self._send(
            core,
            "nodes",
            t.node_action(self.rm_id, node_id, si.NodeAction.DECOMISSION),
            f"decommission {node_id}",
        )

    def _add_app(self, core: Core) -> None:
        self.app_seq += 1
        app_id = f"{self.rm_id}-app-{self.app_seq}"
        user, groups = USERS[self.app_seq % len(USERS)]  # by turn: the seeded stream stays as it was
        if self.rng.random() < 0.3:
            request = t.applications(
                self.rm_id,
                {app_id: ""},
                tags={"namespace": self.rng.choice(["x", "y"])},
                user=user,
                groups=groups,
            )
        else:
            request = t.applications(
                self.rm_id,
                {app_id: self.rng.choice(["root.a", "root.b", "root.d"])},
                user=user,
                groups=groups,
            )
        self.apps.add(app_id)
        self._send(core, "apps", request, f"add application {app_id}")

    def _pick_app(self) -> str | None:
        return self.rng.choice(sorted(self.apps)) if self.apps else None

    def _remove_app(self, core: Core) -> None:
        app_id = self._pick_app()
        if app_id is None:
            return
        self.apps.discard(app_id)
        for key, owner in list(self.asks.items()):
            if owner == app_id:
                del self.asks[key]
        self._send(core, "apps", t.remove_applications(self.rm_id, [app_id]), f"remove application {app_id}")

    def _add_asks(self, core: Core) -> None:
        app_id = self._pick_app()
        if app_id is None:
            return
        count = self.rng.randint(1, 5)
        resource = {
            "memory": self.rng.choice([500, 1000, 2000, 4000]),
            "vcore": self.rng.choice([250, 500, 1000, 2000]),
        }
        request = t.asks(
            self.rm_id,
            app_id,
            count,
            resource,
            prefix=f"{app_id}-ask-",
            start=self.ask_seq,
            priority=self.rng.choice([0, 0, 5]),
            max_allocations=self.rng.choice([1, 1, 2, 3]),
        )
        for index in range(self.ask_seq, self.ask_seq + count):
            self.asks[f"{app_id}-ask-{index}"] = app_id
        self.ask_seq += count
        self._send(core, "allocations", request, f"add {count} asks to {app_id}")

    def _pick_ask(self) -> tuple[str, str] | None:
        if not self.asks:
            return None
        key = self.rng.choice(sorted(self.asks))
        return key, self.asks[key]

    def _update_ask(self, core: Core) -> None:
        picked = self._pick_ask()
        if picked is None:
            return
        key, app_id = picked
        index = int(key.rsplit("-", 1)[1])
        request = t.asks(
            self.rm_id, app_id, 1, {"memory": 750, "vcore": 300}, prefix=f"{app_id}-ask-", start=index
        )
        self._send(core, "allocations", request, f"update ask {key}")

    def _release_asks(self, core: Core) -> None:
        picked = self._pick_ask()
        if picked is None:
            return
        key, app_id = picked
        self.asks_released.add(key)
        self._send(core, "allocations", t.release_asks(self.rm_id, app_id, key), f"release ask {key}")

    def _release_allocation(self, core: Core) -> None:
        with self.rm.lock:
            live = sorted(self.rm.live.values(), key=lambda a: a.uuid)
        if not live:
            return
        allocation = self.rng.choice(live)
        request = t.release(self.rm_id, allocation.application_id, uuid=allocation.uuid)
        self._send(core, "allocations", request, f"release allocation {allocation.uuid}")

    def _release_app_allocations(self, core: Core) -> None:
        app_id = self._pick_app()
        if app_id is not None:
            self._send(
                core, "allocations", t.release(self.rm_id, app_id), f"release all allocations of {app_id}"
            )

    def _reload_config(self, core: Core) -> None:
        self.config = rm_config(
            self.index,
            extra_queue=self.rng.random() < 0.5,
            binpacking=self.rng.random() < 0.3,
            guarantee=self.rng.choice([10, 20, 30]),
        )
        request = si.UpdateConfigurationRequest(rm_id=self.rm_id, config=self.config)
        self.record(
            Op(seq=0, rm=self.index, kind="config", request=request, description=f"{self.rm_id}: reload")
        )
        core.update_configuration(request)

    def _reload_invalid_config(self, core: Core) -> None:
        request = si.UpdateConfigurationRequest(rm_id=self.rm_id, config=INVALID_CONFIG)
        self.record(
            Op(
                seq=0,
                rm=self.index,
                kind="config",
                request=request,
                description=f"{self.rm_id}: invalid reload",
                expect_error=True,
            )
        )
        try:
            core.update_configuration(request)
        except ConfigError:
            return
        raise Violation(f"{self.rm_id}: an invalid configuration reload was accepted")

    # ---- gang scheduling and timeouts --------------------------------------------------------------

    def gang_choices(self) -> list[tuple[float, Callable[[Core], None]]]:
        return [
            (2 if len(self.gangs) < 4 else 0.3, self._add_gang_app),
            (4, self._add_gang_real_asks),
            (1.5, self._add_timed_asks),
            (0.8, self._add_timed_app),
            (6, self._confirm_releases),
        ]

    def _add_gang_app(self, core: Core) -> None:
        """A gang in root.a (FIFO, with a max): its placeholders, with a short placeholder timeout."""
        self.app_seq += 1
        app_id = f"{self.rm_id}-app-{self.app_seq}"
        count = self.rng.randint(1, 4)
        resource = {"memory": self.rng.choice([1000, 2000]), "vcore": self.rng.choice([500, 1000])}
        request = si.ApplicationRequest(
            rm_id=self.rm_id,
            new=[
                si.AddApplicationRequest(
                    application_id=app_id,
                    queue_name="root.a",
                    ugi=si.UserGroupInformation(user="user"),
                    placeholder_ask={name: quantity * count for name, quantity in resource.items()},
                    execution_timeout_milliseconds=self.rng.choice([0, 300, 1500]),
                    gang_scheduling_style=self.rng.choice(["Soft", "Hard", "bogus"]),
                )
            ],
        )
        self.apps.add(app_id)
        self.gangs[app_id] = (count, resource)
        self._send(core, "apps", request, f"add gang application {app_id} ({count} placeholders)")
        asks = [
            si.AllocationAsk(
                max_allocations=1,
                allocation_key=f"{app_id}-ph-{index}",
                application_id=app_id,
                resource_ask=dict(resource),
                placeholder=True,
                task_group_name="tg",
            )
            for index in range(count)
        ]
        for ask in asks:
            self.asks[ask.allocation_key] = app_id
        self._send(
            core,
            "allocations",
            si.AllocationRequest(rm_id=self.rm_id, asks=asks),
            f"placeholders of {app_id}",
        )

    def _add_gang_real_asks(self, core: Core) -> None:
        """Real asks of a gang's task group: most fit a placeholder (replaced), some are larger."""
        if not self.gangs:
            return
        app_id = self.rng.choice(sorted(self.gangs))
        count, resource = self.gangs[app_id]
        larger = self.rng.random() < 0.2
        real = {
            name: quantity * (2 if larger else 1) // (1 if larger else self.rng.choice([1, 2]))
            for name, quantity in resource.items()
        }
        asks = []
        for _ in range(self.rng.randint(1, count)):
            self.ask_seq += 1
            key = f"{app_id}-ask-{self.ask_seq}"
            asks.append(
                si.AllocationAsk(
                    max_allocations=1,
                    allocation_key=key,
                    application_id=app_id,
                    resource_ask=real,
                    task_group_name="tg",
                )
            )
            self.asks[key] = app_id
            self.gang_asks.add(key)
        self._send(
            core, "allocations", si.AllocationRequest(rm_id=self.rm_id, asks=asks), f"real asks of {app_id}"
        )

    def _add_timed_asks(self, core: Core) -> None:
        """Asks whose allocations the core releases (TIMEOUT) a short while after they are made."""
        app_id = self._pick_app()
        if app_id is None:
            return
        self.ask_seq += 1
        key = f"{app_id}-ask-{self.ask_seq}"
        ask = si.AllocationAsk(
            allocation_key=key,
            application_id=app_id,
            resource_ask={"memory": 500, "vcore": 250},
            max_allocations=self.rng.choice([1, 2]),
            execution_timeout_milliseconds=self.rng.choice([50, 200, 600]),
        )
        self.asks[key] = app_id
        self._send(
            core, "allocations", si.AllocationRequest(rm_id=self.rm_id, asks=[ask]), f"timed ask {key}"
        )

    def _add_timed_app(self, core: Core) -> None:
        """A plain application that fails a short while after it first runs (execution timeout)."""
        self.app_seq += 1
        app_id = f"{self.rm_id}-app-{self.app_seq}"
        request = si.ApplicationRequest(
            rm_id=self.rm_id,
            new=[
                si.AddApplicationRequest(
                    application_id=app_id,
                    queue_name=self.rng.choice(["root.a", "root.b"]),
                    ugi=si.UserGroupInformation(user="user"),
                    execution_timeout_milliseconds=self.rng.choice([100, 400, 1000]),
                )
            ],
        )
        self.apps.add(app_id)
        self._send(core, "apps", request, f"add timed application {app_id}")

    def _confirm_releases(self, core: Core) -> None:
        """Echo the releases the core made back to it, as a shim does once the containers stopped."""
        request = self.rm.take_confirmations()
        if request is not None:
            count = len(request.releases.allocations_to_release)  # type: ignore[union-attr]
            self._send(core, "allocations", request, f"confirm {count} core-made releases")

    # ---- checks ------------------------------------------------------------------------------------

    def check(self, state: invariants.PartitionState | None) -> list[str]:
        if state is None:
            return [f"{self.rm_id}: partition {self.partition} disappeared"]
        problems = invariants.check_rm_view(self.rm, [state])
        apps = {app.application_id: app for app in state.applications}
        for app_id in apps:
            if not app_id.startswith(self.rm_id + "-"):
                problems.append(f"{self.rm_id}: partition holds another RM's application {app_id}")
        with self.rm.lock:
            rejected = {r.allocation_key for r in self.rm.rejected_asks}
            released = {r.allocation_key for r in self.rm.released}
            released |= {r.allocation_key for r in self.rm.released_asks}
            rejected_apps = set(self.rm.rejected_apps)
        for key, app_id in self.asks.items():
            if app_id in rejected_apps or key in rejected or key in released or key in self.asks_released:
                continue
            app = apps.get(app_id)
            if app is None:
                continue  # completed: it had nothing pending
            if key in self.gang_asks and any(a.releasing == "PLACEHOLDER_REPLACED" for a in app.allocations):
                continue  # a replacement waiting for the RM's confirmation holds its repeat
            if key not in app.pending_asks and not any(a.allocation_key == key for a in app.allocations):
                problems.append(
                    f"{self.rm_id}: ask {key} of {app_id} is neither pending, allocated, released "
                    "nor rejected (lost)"
                )
        return problems


def delta_debug(items: list[Op], still_fails: Callable[[list[Op]], bool], budget: float) -> list[Op]:
    """Zeller's delta debugging: drop chunks of ``items`` while ``still_fails``, finer and finer, until
    no single item can go or ``budget`` seconds have passed. ``items`` must fail to begin with."""
    deadline = time.monotonic() + budget
    chunks = 2
    while len(items) >= 2 and time.monotonic() < deadline:
        size = max(1, len(items) // chunks)
        reduced = False
        for start in range(0, len(items), size):
            candidate = items[:start] + items[start + size :]
            if candidate and still_fails(candidate):
                items = candidate
                chunks = max(chunks - 1, 2)
                reduced = True
                break
            if time.monotonic() >= deadline:
                break
        if not reduced:
            if size == 1:
                break
            chunks = min(len(items), chunks * 2)
    return items


def core_release_counts(drivers: list[Driver]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for driver in drivers:
        # a driver that re-registered or restarted keeps its earlier callback objects as retired
        for rm in [*getattr(driver, "retired", ()), driver.rm]:
            with rm.lock:
                released = list(rm.released)
            for release in released:
                if release.termination_type in t.CORE_RELEASES:
                    name = release.termination_type.name
                    counts[name] = counts.get(name, 0) + 1
    return counts


@attrs.define
class StressResult:
    seed: int
    operations: int
    checkpoints: int
    violations: list[str]
    minimal: list[Op]
    callback_failures: int
    restarts: int = 0
    # whether ``minimal`` failed on each of REPRODUCTIONS fresh replays (False: a timing-dependent
    # race that one-at-a-time replays do not show; ``minimal`` is then every operation)
    reproduced: bool = False
    # releases the core made, by termination type name (placeholders replaced, timeouts)
    core_releases: dict[str, int] = attrs.Factory(dict)


class StressRun:
    def __init__(
        self,
        rms: int,
        duration: float,
        seed: int,
        checkpoint: float = 2.0,
        fault: str | None = None,
        progress: Callable[[float, int, int], None] | None = None,
        minimize_budget: float = 120.0,
        hostile: bool = True,
        restart_every: int = 4,
    ) -> None:
        self.hostile = hostile  # invalid items, slow and re-registering RMs, core restarts
        self.restart_every = restart_every  # checkpoints between core restarts (0: never)
        self.restarts = 0
        self.rm_count = rms
        self.duration = duration
        self.seed = seed
        self.checkpoint_interval = checkpoint
        self.fault = fault
        self.progress = progress
        self.minimize_budget = minimize_budget
        self.ops: list[Op] = []
        self._ops_lock = threading.Lock()
        self._seq = 0
        # uuid -> (application, allocation key) of every allocation the run's RMs were told of
        self.recorded_keys: dict[str, tuple[str, str]] = {}

    def _record(self, op: Op) -> None:
        with self._ops_lock:
            self._seq += 1
            self.ops.append(attrs.evolve(op, seq=self._seq))

    def run(self) -> StressResult:
        faults.disable_all()
        if self.fault:
            faults.enable(self.fault)
        drivers = self._drivers()
        checkpoints = 0
        violations: list[str] = []
        core = korral.start(**SETTINGS, **faults.start_options())
        try:
            for driver in drivers:
                driver.register(core)
            deadline = time.monotonic() + self.duration
            while time.monotonic() < deadline and not violations:
                window_end = min(deadline, time.monotonic() + self.checkpoint_interval)
                violations = self._run_window(core, drivers, window_end)
                if not violations:
                    violations = self._checkpoint(core, drivers)
                checkpoints += 1
                restart_due = self.restart_every and checkpoints % self.restart_every == 0
                if not violations and self.hostile and restart_due:
                    core, violations = self._restart(core, drivers)  # type: ignore[arg-type]
                if self.progress is not None:
                    self.progress(max(0.0, deadline - time.monotonic()), len(self.ops), checkpoints)
        finally:
            core.stop()
            faults.disable_all()
        for driver in drivers:
            self.recorded_keys.update(driver.rm.keys_of)
        minimal, reproduced = self.minimize(violations, self.minimize_budget) if violations else ([], False)
        return StressResult(
            seed=self.seed,
            operations=len(self.ops),
            checkpoints=checkpoints,
            violations=violations,
            minimal=minimal,
            reproduced=reproduced,
            callback_failures=sum(d.rm.raised for d in drivers),
            restarts=self.restarts,
            core_releases=core_release_counts(drivers),
        )

    def _drivers(self) -> list[Driver]:
        if not self.hostile:
            return [Driver(index, self.seed, self._record, misbehave=True) for index in range(self.rm_count)]
        # the last RM (of two or more) has slow callbacks: the others must not wait on it
        return [
            HostileDriver(
                index,
                self.seed,
                self._record,
                misbehave=True,
                slow=self.rm_count > 1 and index == self.rm_count - 1,
                rm_count=self.rm_count,
            )
            for index in range(self.rm_count)
        ]

    def _restart(self, core: Core, drivers: list[HostileDriver]) -> tuple[Core, list[str]]:
        """Stop the core and start a new one; every RM recovers what it believes live."""
        self.restarts += 1
        self._record(Op(seq=0, rm=0, kind="restart", request=None, description="core restart"))
        core.stop()
        for driver in drivers:
            # a stopped core delivers nothing more: a callback entered from now on is a violation
            driver.rm.retired = True
        core = korral.start(**SETTINGS, **faults.start_options())
        believed = {driver.rm_id: driver.recover(core) for driver in drivers}
        problems: list[str] = []
        try:
            core.wait_until_idle(timeout=60.0)
        except TimeoutError as error:
            return core, [f"no progress after the restart (deadlock watchdog): {error}"]
        for driver in drivers:
            state = invariants.stable_collect(core, driver.partition)
            problems.extend(driver.check_recovery(state, believed[driver.rm_id]))
        for driver in drivers:
            driver.resubmit(core)
        return core, problems

    def _run_window(self, core: Core, drivers: list[Driver], until: float) -> list[str]:
        errors: list[str] = []

        def drive(driver: Driver) -> None:
            try:
                while time.monotonic() < until:
                    driver.step(core)
            except Violation as violation:
                errors.append(str(violation))
            except Exception as error:  # an SI call the core should have taken
                errors.append(f"{driver.rm_id}: {type(error).__name__}: {error}")

        threads = [
            threading.Thread(target=drive, args=(driver,), name=f"stress-{driver.rm_id}")
            for driver in drivers
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return errors

    def _checkpoint(self, core: Core, drivers: list[Driver]) -> list[str]:
        try:
            core.wait_until_idle(timeout=60.0)
        except TimeoutError as error:
            return [f"no progress (deadlock watchdog): {error}"]
        problems: list[str] = []
        states = []
        for driver in drivers:
            state = invariants.stable_collect(core, driver.partition)
            if state is not None:
                # recovered allocations are booked even above a queue's max (YuniKorn's recovery)
                recovered: set[str] = getattr(driver, "recovered_apps", set())
                queues = {app.queue for app in state.applications if app.application_id in recovered}
                problems.extend(invariants.check_partition(state, recovered_queues=queues))
                states.append(state)
                # ... and above a user's or group's limits too: the owners of recovered work are exempt
                users = {app.user for app in state.applications if app.application_id in recovered}
                groups = {group for user, member_of in USERS if user in users for group in member_of}
                problems.extend(
                    invariants.check_user_limits(
                        core, state, LIMITED_GROUPS, recovered_users=users, recovered_groups=groups
                    )
                )
            problems.extend(driver.check(state))
        problems.extend(invariants.check_unique_uuids(states))
        if core.tracker.errors:
            problems.append(f"{core.tracker.errors} actor handler(s) failed (see the log)")
        return problems

    # ---- shrinking ---------------------------------------------------------------------------------

    def replay(self, ops: list[Op]) -> list[str]:
        """Replay operations one at a time on a fresh core; the violations found at the end."""
        faults.disable_all()
        if self.fault:
            faults.enable(self.fault)
        rms = {index: ReplayRM(f"rm{index}", self.recorded_keys) for index in range(self.rm_count)}
        try:
            with korral.start(**SETTINGS, **faults.start_options()) as core:
                for index, rm in rms.items():
                    core.register_resource_manager(t.register(rm.rm_id, rm_config(index)), rm)
                for op in ops:
                    try:
                        self._apply(core, rms[op.rm], op)
                    except Exception as error:
                        if not op.expect_error:
                            return [f"{op.description}: {type(error).__name__}: {error}"]
                    core.wait_until_idle(timeout=30.0)
                problems: list[str] = []
                # as in a run: the owners of recovered work may be above their limits
                recovered = {
                    allocation.application_id
                    for op in ops
                    if isinstance(op.request, si.NodeRequest)
                    for node in op.request.nodes
                    if isinstance(node, si.NodeInfo)
                    for allocation in node.existing_allocations
                    if isinstance(allocation, si.Allocation)
                }
                for index, rm in rms.items():
                    state = invariants.stable_collect(core, normalize_partition_name("default", f"rm{index}"))
                    if state is not None:
                        problems.extend(invariants.check_partition(state))
                        problems.extend(invariants.check_rm_view(rm, [state]))
                        users = {a.user for a in state.applications if a.application_id in recovered}
                        groups = {g for user, member_of in USERS if user in users for g in member_of}
                        problems.extend(
                            invariants.check_user_limits(
                                core, state, LIMITED_GROUPS, recovered_users=users, recovered_groups=groups
                            )
                        )
                if core.tracker.errors:
                    problems.append(f"{core.tracker.errors} actor handler(s) failed")
                return problems
        except TimeoutError as error:
            return [f"no progress (deadlock watchdog): {error}"]
        finally:
            faults.disable_all()

    @staticmethod
    def _apply(core: Core, rm: t.RecordingRM, op: Op) -> None:
        if op.kind == "register":
            core.register_resource_manager(op.request, rm)
            with rm.lock:
                rm.live.clear()
        elif op.kind == "nodes":
            core.update_node(op.request)
        elif op.kind == "apps":
            core.update_application(op.request)
        elif op.kind == "allocations":
            core.update_allocation(rm.translate(op.request) if isinstance(rm, ReplayRM) else op.request)
        elif op.kind == "config":
            core.update_configuration(op.request)

    def reproduces(self, ops: list[Op], times: int = REPRODUCTIONS) -> bool:
        """Whether ``ops`` fail on each of ``times`` fresh replays. The core's timers run on the wall
        clock (reservation delay, completing and placeholder timeouts), so a sequence may fail only when
        a replay is slow enough for one to fire; such a sequence is no reproduction to hand a person."""
        return all(self.replay(ops) for _ in range(times))

    def minimize(self, violations: list[str], budget: float = 120.0) -> tuple[list[Op], bool]:
        """Delta debugging over the recorded operations: the shortest sequence still failing every time,
        and whether there was one (False: the whole sequence, which replayed does not fail every time)."""
        ops = [op for op in self.ops if not (op.kind == "register" and op.seq <= self.rm_count)]
        if not self.replay(ops):  # (the whole run is replayed once here: it can take minutes)
            return ops, False
        minimal = delta_debug(ops, self.reproduces, budget)
        if len(minimal) == len(ops):  # nothing could go: held to the bar every candidate met
            return ops, self.reproduces(ops, REPRODUCTIONS - 1)
        return minimal, True


# ---- hostile RMs: invalid input, restarts with recovery, slow and re-registering RMs ---------------------

# Quantities no SI item may carry (korral checks types and int64 ranges at the door); each makes its
# item rejected with a reason while the good items of the same request are applied.
BAD_QUANTITIES: tuple[object, ...] = ("1000", None, 1.5, 0.1, True, 2**64, -(2**63) - 1, 10**30)
# Valid but extreme: accepted, or refused with a reason when a total could not stay exact.
EXTREME_QUANTITIES: tuple[int, ...] = (2**63 - 1, 2**62)
# Configs and rm ids that would name into another RM's partition namespace.
SHADOW_CONFIG = """
partitions:
  - name: "[{victim}]default"
    queues:
      - name: root
"""
REJECTION_ERRORS = (korral.KorralError, ValueError, TypeError)


class UuidLedger:
    """Every allocation uuid one RM was told of, across registrations and core restarts. Told of as
    new while still live (other than the echo of a recovered allocation) is a collision; so is a uuid
    of the core's own series told of twice ever (the core must never reuse one). A uuid the RM chose
    itself may come back after its release: the RM reused it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seen: set[str] = set()
        self.live: set[str] = set()
        self.released_ever: set[str] = set()
        self.expected_echo: set[str] = set()
        self.resent: set[str] = set()  # uuids the RM itself sent back as existing allocations
        self.collisions: list[str] = []

    def told(self, uuid: str) -> None:
        with self._lock:
            if uuid in self.expected_echo:
                self.expected_echo.discard(uuid)
            elif uuid in self.live:
                self.collisions.append(f"{uuid} (still live)")
            elif uuid in self.seen and uuid.startswith("[") and uuid not in self.resent:
                self.collisions.append(f"{uuid} (issued again by the core)")
            self.seen.add(uuid)
            self.live.add(uuid)

    def resend(self, uuid: str) -> None:
        with self._lock:
            self.resent.add(uuid)

    def released(self, uuid: str) -> None:
        with self._lock:
            self.live.discard(uuid)
            self.released_ever.add(uuid)

    def expect_recovery(self, uuids: set[str]) -> None:
        with self._lock:
            self.expected_echo |= uuids
            self.live = set(uuids)


class HostileRM(StressRM):
    """A StressRM that also checks what it is told: nothing of another RM, no uuid twice, and nothing
    at all once its registration was replaced. ``slow`` callbacks sometimes take a long time."""

    def __init__(
        self, rm_id: str, seed: int, misbehave: bool, *, ledger: UuidLedger, slow: bool = False
    ) -> None:
        super().__init__(rm_id, seed, misbehave)
        self.ledger = ledger
        self.slow = slow
        self.retired = False  # set once a later registration of this rm id returned
        self.after_retirement: list[str] = []
        self.crossed: list[str] = []

    def _entered(self, what: str) -> None:
        if self.retired:
            with self.lock:
                self.after_retirement.append(what)

    def _own(self, kind: str, object_id: object) -> None:
        if not (isinstance(object_id, str) and object_id.startswith(self.rm_id + "-")):
            with self.lock:
                self.crossed.append(f"{kind} {object_id!r}")

    def update_allocation(self, response: si.AllocationResponse) -> None:
        self._entered("update_allocation")
        for allocation in response.new:
            self._own("allocation of application", allocation.application_id)
            self.ledger.told(allocation.uuid)
        for release in response.released:
            self._own("release of application", release.application_id)
            self.ledger.released(release.uuid)
        super().update_allocation(response)

    def update_application(self, response: si.ApplicationResponse) -> None:
        self._entered("update_application")
        for accepted in response.accepted:
            self._own("accepted application", accepted.application_id)
        for updated in response.updated:
            self._own("updated application", updated.application_id)
        super().update_application(response)

    def update_node(self, response: si.NodeResponse) -> None:
        self._entered("update_node")
        for accepted in response.accepted:
            self._own("accepted node", accepted.node_id)
        super().update_node(response)

    def send_event(self, events: list[si.EventRecord]) -> None:
        self._entered("send_event")
        super().send_event(events)

    def _misbehave(self) -> None:
        if self.slow and self._rng.random() < 0.02:
            time.sleep(self._rng.uniform(0.05, 0.3))
        super()._misbehave()


class HostileDriver(Driver):
    """A Driver that also sends invalid and extreme items, wrong message types, names into another
    RM's namespace, re-registers with a fresh callback object, and recovers after a core restart.

    It keeps the RM's own model of what it sent (applications, node capacities, asks) so that after a
    restart it can do what YuniKorn's shim does: re-register, re-add its applications, then its nodes
    with ``existing_allocations`` holding exactly the allocations it believes live, then resubmit the
    asks still waiting.
    """

    rm: HostileRM

    def __init__(
        self,
        index: int,
        seed: int,
        record: Callable[[Op], None],
        misbehave: bool,
        *,
        slow: bool = False,
        rm_count: int = 2,
    ) -> None:
        super().__init__(index, seed, record, misbehave)
        self.misbehave = misbehave
        self.slow = slow
        self.rm_count = rm_count
        self.ledger = UuidLedger()
        self.rm = HostileRM(self.rm_id, seed * 7 + index, misbehave, ledger=self.ledger, slow=slow)
        self.retired: list[HostileRM] = []
        self.app_requests: dict[str, si.AddApplicationRequest] = {}
        self.node_capacity: dict[str, dict[str, int]] = {}
        self.ask_requests: dict[str, si.AllocationAsk] = {}
        self.bad_asks: dict[str, str] = {}  # key -> why it must be rejected
        self.bad_nodes: dict[str, str] = {}
        self.bad_apps: dict[str, str] = {}
        # recovered allocations copying the uuid of one this RM believed live: key -> uuid. Rejected,
        # unless a release of that uuid was on its way (then the RM merely reused its own uuid)
        self.twins: dict[str, str] = {}
        self.problems: list[str] = []  # found while issuing operations (an error the core should not raise)
        self.restarts = 0
        self.believed: dict[str, si.Allocation] = {}  # what this RM believed live at the last restart
        self._waiting: list[si.AllocationAsk] = []  # asks to resubmit once a recovery was checked
        self.recovered_apps: set[str] = set()  # applications that had allocations recovered

    # ---- model bookkeeping -------------------------------------------------------------------------

    def _send(self, core: Core, kind: str, request: Any, description: str) -> None:
        if kind == "apps":
            for new in request.new:
                if isinstance(new, si.AddApplicationRequest) and isinstance(new.application_id, str):
                    self.app_requests.setdefault(new.application_id, new)
        elif kind == "nodes":
            for info in request.nodes:
                if not isinstance(info, si.NodeInfo) or not isinstance(info.node_id, str):
                    continue
                if info.action in (si.NodeAction.CREATE, si.NodeAction.UPDATE) and info.schedulable_resource:
                    self.node_capacity[info.node_id] = dict(info.schedulable_resource)
                elif info.action == si.NodeAction.DECOMISSION:
                    self.node_capacity.pop(info.node_id, None)
        elif kind == "allocations":
            for ask in request.asks:
                if isinstance(ask, si.AllocationAsk) and isinstance(ask.allocation_key, str):
                    self.ask_requests[ask.allocation_key] = ask
        super()._send(core, kind, request, description)

    def _fresh_rm(self) -> None:
        old = self.rm
        rm = HostileRM(
            self.rm_id, self.rng.randrange(1 << 30), self.misbehave, ledger=self.ledger, slow=self.slow
        )
        rm.raised = old.raised
        self.rm = rm
        self.retired.append(old)

    def register(self, core: Core) -> None:
        """Re-register with a fresh callback object: the core wipes this RM's state, and the old
        object must never be called again once the registration returned."""
        old = self.rm
        if self.generation:
            self._fresh_rm()
        super().register(core)
        if old is not self.rm:
            old.retired = True
        self.app_requests.clear()
        self.node_capacity.clear()
        self.ask_requests.clear()
        self.bad_asks.clear()
        self.bad_nodes.clear()
        self.bad_apps.clear()
        self.twins.clear()

    def _choices(self) -> list[tuple[float, Callable[[Core], None]]]:
        return [
            *super()._choices(),
            (2, self._add_bad_asks),
            (1.5, self._create_bad_nodes),
            (1.5, self._add_bad_apps),
            (1, self._add_extreme_asks),
            (0.5, self._create_extreme_node),
            (0.3, self._wrong_message_type),
            (0.2, self._name_into_another_rm),
            (1, self._recover_onto_new_node),
            (0.5, self._reach_into_another_rm),
        ]

    def perform(self, core: Core, operation: str, seed: int) -> None:
        """One named operation with its own seed: the fuzz test's unit of work."""
        self.rng = random.Random(seed)
        getattr(self, operation)(core)

    # ---- invalid and extreme items -----------------------------------------------------------------

    def _good_ask(self, app_id: str) -> si.AllocationAsk:
        key = f"{app_id}-ask-{self.ask_seq}"
        self.ask_seq += 1
        self.asks[key] = app_id
        return si.AllocationAsk(
            allocation_key=key,
            application_id=app_id,
            resource_ask={"memory": self.rng.choice([500, 1000]), "vcore": 250},
            max_allocations=1,
        )

    def _add_bad_asks(self, core: Core) -> None:
        app_id = self._pick_app()
        if app_id is None:
            return
        items: list[Any] = [self._good_ask(app_id) for _ in range(self.rng.randint(0, 2))]
        for _ in range(self.rng.randint(1, 2)):
            key = f"{app_id}-ask-{self.ask_seq}"
            self.ask_seq += 1
            variant = self.rng.randrange(6)
            if variant == 0:
                items.append(None)
                continue
            fields: dict[str, Any] = {
                "allocation_key": key,
                "application_id": app_id,
                "resource_ask": {"memory": 1000, "vcore": 250},
                "max_allocations": 1,
            }
            if variant <= 2:
                bad = self.rng.choice(BAD_QUANTITIES)
                fields["resource_ask"] = {"memory": bad, "vcore": 250}
                why = f"quantity {bad!r}"
            elif variant == 3:
                bad = self.rng.choice(["2", None, 1.0, 2**64])
                fields["max_allocations"] = bad
                why = f"max_allocations {bad!r}"
            elif variant == 4:
                bad = self.rng.choice(["high", None, 2.5, 2**63])
                fields["priority"] = bad
                why = f"priority {bad!r}"
            else:
                fields["resource_ask"] = {"memory": None}
                why = "quantity None"
            items.append(si.AllocationAsk(**fields))
            self.bad_asks[key] = why
        self.rng.shuffle(items)
        request = si.AllocationRequest(rm_id=self.rm_id, asks=items)
        self._send(core, "allocations", request, f"add asks with invalid items to {app_id}")

    def _add_extreme_asks(self, core: Core) -> None:
        app_id = self._pick_app()
        if app_id is None:
            return
        items = [self._good_ask(app_id) for _ in range(self.rng.randint(1, 2))]
        quantity = self.rng.choice(EXTREME_QUANTITIES)
        items[-1] = attrs.evolve(items[-1], resource_ask={"memory": quantity, "vcore": 1})
        request = si.AllocationRequest(rm_id=self.rm_id, asks=items)
        self._send(core, "allocations", request, f"add extreme asks ({quantity}) to {app_id}")

    def _create_bad_nodes(self, core: Core) -> None:
        items: list[Any] = []
        for _ in range(self.rng.randint(0, 2)):
            self.node_seq += 1
            node_id = f"{self.rm_id}-node-{self.node_seq}"
            self.nodes[node_id] = True
            items.append(
                si.NodeInfo(
                    node_id=node_id,
                    action=si.NodeAction.CREATE,
                    schedulable_resource={"memory": 16000, "vcore": 8000},
                )
            )
        for _ in range(self.rng.randint(1, 2)):
            self.node_seq += 1
            node_id = f"{self.rm_id}-node-{self.node_seq}"
            variant = self.rng.randrange(4)
            if variant == 0:
                items.append(None)
            elif variant == 1:
                items.append(
                    si.NodeInfo(
                        node_id=self.rng.choice([self.node_seq, None, 1.5]),  # type: ignore[arg-type]
                        action=si.NodeAction.CREATE,
                        schedulable_resource={"memory": 16000},
                    )
                )
            else:
                bad = self.rng.choice(BAD_QUANTITIES)
                label = "schedulable_resource" if variant == 2 else "occupied_resource"
                fields: dict[str, Any] = {"schedulable_resource": {"memory": 16000, "vcore": 8000}}
                fields[label] = {"memory": bad}
                items.append(si.NodeInfo(node_id=node_id, action=si.NodeAction.CREATE, **fields))
                self.bad_nodes[node_id] = f"{label} {bad!r}"
        self.rng.shuffle(items)
        self._send(core, "nodes", si.NodeRequest(rm_id=self.rm_id, nodes=items), "create nodes, some invalid")

    def _create_extreme_node(self, core: Core) -> None:
        self.node_seq += 1
        node_id = f"{self.rm_id}-node-{self.node_seq}"
        self.nodes[node_id] = True
        capacity = {"memory": self.rng.choice(EXTREME_QUANTITIES), "vcore": 8000}
        self._send(core, "nodes", t.nodes(self.rm_id, [node_id], capacity), f"create extreme node {node_id}")

    def _add_bad_apps(self, core: Core) -> None:
        items: list[Any] = []
        if self.rng.random() < 0.7:
            self.app_seq += 1
            app_id = f"{self.rm_id}-app-{self.app_seq}"
            self.apps.add(app_id)
            items.append(
                si.AddApplicationRequest(
                    application_id=app_id,
                    queue_name="root.a",
                    ugi=si.UserGroupInformation(user="user"),
                )
            )
        self.app_seq += 1
        app_id = f"{self.rm_id}-app-{self.app_seq}"
        variant = self.rng.randrange(5)
        if variant == 0:
            items.append(None)
        elif variant == 1:
            bad_id = self.rng.choice([self.app_seq, None])  # deliberately not a string
            items.append(si.AddApplicationRequest(application_id=bad_id))  # type: ignore[arg-type]
        elif variant == 2:
            items.append(
                si.AddApplicationRequest(
                    application_id=app_id,
                    queue_name="root.a",
                    ugi={"user": "u"},  # type: ignore[arg-type]
                )
            )
            self.bad_apps[app_id] = "ugi is a dict"
        elif variant == 3:
            items.append(
                si.AddApplicationRequest(
                    application_id=app_id,
                    queue_name=7,  # type: ignore[arg-type]
                    ugi=si.UserGroupInformation(user="user"),
                )
            )
            self.bad_apps[app_id] = "queue name is an int"
        else:
            items.append(
                si.AddApplicationRequest(
                    application_id=app_id,
                    queue_name="root.a",
                    ugi=si.UserGroupInformation(user="user"),
                    placeholder_ask={"memory": self.rng.choice(BAD_QUANTITIES)},
                )
            )
            self.bad_apps[app_id] = "placeholder ask quantity"
        self.rng.shuffle(items)
        request = si.ApplicationRequest(rm_id=self.rm_id, new=items)
        self._send(core, "apps", request, "add applications, some invalid")

    def _wrong_message_type(self, core: Core) -> None:
        wrong: list[tuple[Callable[[Any], None], Any]] = [
            (core.update_node, si.ApplicationRequest(rm_id=self.rm_id)),
            (core.update_application, si.AllocationRequest(rm_id=self.rm_id)),
            (core.update_allocation, si.NodeRequest(rm_id=self.rm_id)),
        ]
        call, request = self.rng.choice(wrong)
        try:
            call(request)
        except TypeError:
            return
        self.problems.append(
            f"{self.rm_id}: {call.__name__}({type(request).__name__}) was taken (expected TypeError)"
        )

    def _name_into_another_rm(self, core: Core) -> None:
        victim = f"rm{(self.index + 1) % max(2, self.rm_count)}"
        if self.rng.random() < 0.5:
            request = si.UpdateConfigurationRequest(
                rm_id=self.rm_id, config=SHADOW_CONFIG.format(victim=victim)
            )
            try:
                core.update_configuration(request)
            except REJECTION_ERRORS:
                return
            self.problems.append(f"{self.rm_id}: a config naming partition [{victim}]default was accepted")
        else:
            bogus = f"{victim}]x" if self.rng.random() < 0.5 else f"[{victim}"
            try:
                core.register_resource_manager(t.register(bogus, ""), t.RecordingRM(bogus))
            except REJECTION_ERRORS:
                return
            self.problems.append(f"{self.rm_id}: rm id {bogus!r} was registered")

    def _update_ask(self, core: Core) -> None:
        # only asks this RM numbered itself (recovered allocations carry keys of another shape)
        numbered = sorted(key for key in self.asks if key.rsplit("-", 2)[-2:-1] == ["ask"])
        if numbered:
            key = self.rng.choice(numbered)
            app_id = self.asks[key]
            index = int(key.rsplit("-", 1)[1])
            request = t.asks(
                self.rm_id, app_id, 1, {"memory": 750, "vcore": 300}, prefix=f"{app_id}-ask-", start=index
            )
            self._send(core, "allocations", request, f"update ask {key}")

    def _recover_onto_new_node(self, core: Core) -> None:
        """A node that joins with work already on it (as after an RM restart): a uuid the RM chose, one
        without a uuid, and sometimes one whose uuid is already live (which must be rejected)."""
        app_id = self._pick_app()
        if app_id is None:
            return
        self.node_seq += 1
        node_id = f"{self.rm_id}-node-{self.node_seq}"
        self.nodes[node_id] = True
        tag = f"{self.node_seq}"
        items = [
            si.Allocation(
                allocation_key=f"{app_id}-recovered-{tag}",
                uuid=f"{self.rm_id}-recovered-{tag}",
                resource_per_alloc={"memory": 500, "vcore": 250},
                node_id=node_id,
                application_id=app_id,
            )
        ]
        if self.rng.random() < 0.3:
            items.append(attrs.evolve(items[0], allocation_key=f"{app_id}-recovered-{tag}-b", uuid=""))
        with self.rm.lock:
            live = sorted(self.rm.live.values(), key=lambda a: (a.application_id, a.allocation_key))
        if live and self.rng.random() < 0.6:
            twin = self.rng.choice(live)
            owner = self._pick_app() or app_id
            key = f"{owner}-twin-{tag}"
            items.append(attrs.evolve(twin, allocation_key=key, node_id=node_id, application_id=owner))
            self.twins[key] = twin.uuid
            self.ledger.resend(twin.uuid)
            self.recovered_apps.add(owner)  # if its release was on its way, the twin is recovered
        for item in items:
            if item.allocation_key not in self.twins:
                self.asks[item.allocation_key] = item.application_id
                self.recovered_apps.add(item.application_id)
        request = t.nodes(self.rm_id, [node_id], {"memory": 16000, "vcore": 8000}, existing=items)
        self._send(core, "nodes", request, f"create {node_id} with {len(items)} existing allocations")

    def _reach_into_another_rm(self, core: Core) -> None:
        """Requests that name the next RM's partition or applications: rejected, and that RM unharmed."""
        victim = f"rm{(self.index + 1) % max(2, self.rm_count)}"
        foreign_app = f"{victim}-app-{self.rng.randint(1, 5)}"
        key = f"{self.rm_id}-reach-{self.ask_seq}"
        self.ask_seq += 1
        partition = self.rng.choice(["", f"[{victim}]default"])
        ask = si.AllocationAsk(
            allocation_key=key,
            application_id=foreign_app,
            partition_name=partition,
            resource_ask={"memory": 500, "vcore": 250},
            max_allocations=1,
        )
        self.bad_asks[key] = f"ask for {victim}'s application {foreign_app} (partition {partition!r})"
        self._send(
            core, "allocations", si.AllocationRequest(rm_id=self.rm_id, asks=[ask]), f"reach: ask {key}"
        )
        self._send(
            core,
            "allocations",
            t.release(self.rm_id, foreign_app, partition=partition),
            f"reach: release all of {foreign_app} in {partition or 'own partition'}",
        )

    # ---- restart with recovery ---------------------------------------------------------------------

    def believed_live(self) -> dict[str, si.Allocation]:
        with self.rm.lock:
            return dict(self.rm.live)

    def recover(self, core: Core) -> set[str]:
        """Re-register on a restarted core, re-add applications, then nodes with the allocations this
        RM believes live. Returns the uuids that must come back; the asks still waiting are resubmitted
        by ``resubmit`` once the recovery was checked."""
        self.restarts += 1
        believed = self.believed = self.believed_live()
        with self.rm.lock:
            rejected = {r.allocation_key for r in self.rm.rejected_asks}
            released_keys = {r.allocation_key for r in self.rm.released}
            rejected_apps = set(self.rm.rejected_apps)
        apps = {
            app_id: self.app_requests[app_id]
            for app_id in sorted(self.apps | {a.application_id for a in believed.values()})
            if app_id in self.app_requests and app_id not in rejected_apps
        }
        live_keys = {a.allocation_key for a in believed.values()}
        self._waiting = [
            ask
            for key, ask in sorted(self.ask_requests.items())
            if key in self.asks
            and key not in live_keys
            and key not in rejected
            and key not in released_keys
            and key not in self.asks_released
            and ask.application_id in apps
        ]
        # the RM's model survives a core restart; only the callback object is new (the invalid items
        # sent so far were checked at the checkpoint before the restart: their rejections went to the
        # old object)
        self._fresh_rm()
        self.bad_asks.clear()
        self.bad_nodes.clear()
        self.bad_apps.clear()
        self.twins.clear()
        self.generation += 1
        request = t.register(self.rm_id, self.config)
        self.record(
            Op(seq=0, rm=self.index, kind="register", request=request, description="recover: register")
        )
        core.register_resource_manager(request, self.rm)
        self.retired[-1].retired = True
        self.ledger.expect_recovery(set(believed))
        self.recovered_apps |= {a.application_id for a in believed.values()}
        self.asks = {key: app for key, app in self.asks.items() if key in live_keys}
        self.asks.update({ask.allocation_key: ask.application_id for ask in self._waiting})
        self.apps = set(apps)
        if apps:
            self._send(
                core,
                "apps",
                si.ApplicationRequest(rm_id=self.rm_id, new=list(apps.values())),
                f"recover: re-add {len(apps)} applications",
            )
        by_node: dict[str, list[si.Allocation]] = {}
        for allocation in believed.values():
            by_node.setdefault(allocation.node_id, []).append(allocation)
        for node_id in sorted(by_node.keys() - self.node_capacity.keys()):
            self.problems.append(f"{self.rm_id}: believes allocations live on unknown node {node_id}")
        infos = [
            si.NodeInfo(
                node_id=node_id,
                action=si.NodeAction.CREATE,
                schedulable_resource=capacity,
                existing_allocations=by_node.get(node_id, []),
            )
            for node_id, capacity in sorted(self.node_capacity.items())
        ]
        self.nodes = {node_id: True for node_id in self.node_capacity}
        if infos:
            self._send(
                core,
                "nodes",
                si.NodeRequest(rm_id=self.rm_id, nodes=infos),
                f"recover: re-add {len(infos)} nodes with {len(believed)} allocations",
            )
        return set(believed)

    def resubmit(self, core: Core) -> None:
        waiting = self._waiting
        if waiting:
            self._send(
                core,
                "allocations",
                si.AllocationRequest(rm_id=self.rm_id, asks=waiting),
                f"recover: resubmit {len(waiting)} waiting asks",
            )
        self._waiting = []

    def check_recovery(self, state: invariants.PartitionState | None, believed: set[str]) -> list[str]:
        """Right after recovery (nothing resubmitted yet): the core holds exactly what the RM believed,
        except the allocations of an application the restarted core rejected with a reason (its queue
        left the config since it was placed): the RM drops those, as a shim fails their pods."""
        if state is None:
            return [f"{self.rm_id}: partition {self.partition} missing after the restart"]
        held = {a.uuid for app in state.applications for a in app.allocations}
        with self.rm.lock:
            reasons = {r.allocation_key: r.reason for r in self.rm.rejected_asks}
            rejected_apps = dict(self.rm.rejected_apps)
        problems = []
        for uuid in sorted(believed - held):
            allocation = self.believed.get(uuid)
            if allocation is None:
                problems.append(f"{self.rm_id}: allocation {uuid} lost in the restart")
                continue
            app_id = allocation.application_id
            if rejected_apps.get(app_id):
                self._forget_application(app_id)
                self.ledger.released(uuid)
                continue
            where = f"{app_id}/{allocation.allocation_key} on {allocation.node_id}"
            why = reasons.get(allocation.allocation_key) or "no reason given"
            readded = "re-added" if app_id in self.apps else "not re-added"
            problems.append(
                f"{self.rm_id}: allocation {uuid} lost in the restart ({where}: {why}; application {readded})"
            )
        problems += [f"{self.rm_id}: allocation {u} appeared from nowhere" for u in sorted(held - believed)]
        return problems

    def _forget_application(self, app_id: str) -> None:
        self.apps.discard(app_id)
        self.asks = {key: owner for key, owner in self.asks.items() if owner != app_id}
        self._waiting = [ask for ask in self._waiting if ask.application_id != app_id]

    # ---- checks ------------------------------------------------------------------------------------

    def check(self, state: invariants.PartitionState | None) -> list[str]:
        problems = list(self.problems)
        self.problems.clear()
        problems += super().check(state)
        with self.rm.lock:
            rejected_asks = {r.allocation_key: r.reason for r in self.rm.rejected_asks}
            rejected_nodes = dict(self.rm.rejected_nodes)
            rejected_apps = dict(self.rm.rejected_apps)
        for key, why in sorted(self.bad_asks.items()):
            if not rejected_asks.get(key):
                problems.append(f"{self.rm_id}: invalid ask {key} ({why}) was not rejected with a reason")
        with self.ledger._lock:
            released_ever = set(self.ledger.released_ever)
        for key, uuid in sorted(self.twins.items()):
            if not rejected_asks.get(key) and uuid not in released_ever:
                problems.append(f"{self.rm_id}: recovered {key} with live uuid {uuid} was not rejected")
        for node_id, why in sorted(self.bad_nodes.items()):
            if not rejected_nodes.get(node_id):
                problems.append(
                    f"{self.rm_id}: invalid node {node_id} ({why}) was not rejected with a reason"
                )
        for app_id, why in sorted(self.bad_apps.items()):
            if not rejected_apps.get(app_id):
                problems.append(f"{self.rm_id}: invalid application {app_id} ({why}) was not rejected")
        if state is not None:
            node_ids = {node.node_id for node in state.nodes}
            for node_id in sorted(node_ids & self.bad_nodes.keys()):
                problems.append(f"{self.rm_id}: invalid node {node_id} is in the partition")
            for node in state.nodes:
                if not isinstance(node.node_id, str) or not node.node_id.startswith(self.rm_id + "-"):
                    problems.append(f"{self.rm_id}: partition holds node {node.node_id!r}")
        for rm in [*self.retired, self.rm]:
            with rm.lock:
                crossed, late = list(rm.crossed), list(rm.after_retirement)
            problems += [f"{self.rm_id}: told of an object not its own: {what}" for what in crossed[:5]]
            if late:
                problems.append(
                    f"{self.rm_id}: {len(late)} callback(s) delivered to a replaced registration: {late[:3]}"
                )
        with self.ledger._lock:
            collisions = list(self.ledger.collisions)
        if collisions:
            problems.append(f"{self.rm_id}: told of the same allocation uuid twice: {collisions[:5]}")
        return problems


# ---- soak: korral.harness.soak (``korral stress --soak``) ---------------------------------------------


# ---- korral stress --simulated: korral.harness.stress_simulated (SimulatedStress) -----------------------

SIMULATED_SETTLE = 3.0  # virtual seconds at the end: completing timeouts, queue cleanup, retries


# ---- korral stress --preemption: guaranteed queues, borrowers, urgent asks that preempt ---------------

PREEMPTION_DELAY = "100ms"
# queue -> the priority.offset of its path (the effective priority of an ask is its own plus this)
PREEMPTION_OFFSETS = {"root.boosted": 20}
PREEMPTION_LAWS = invariants.QueueLaws(disabled=frozenset({"root.protected"}), fences=("root.fenced",))
# queues whose asks preempt (allow_preempt_other): they are starved below their guarantee; the
# capped parent's max is full of its borrowing child, so its short child preempts for headroom
PREEMPTOR_QUEUES = ("root.urgent", "root.fenced.inner1", "root.capped.short")
# quota preemption: the shrink queue's max is lowered below its usage now and then (and raised again)
QUOTA_QUEUE = "root.shrink"
QUOTA_MESSAGE = "preempting allocations to enforce new max quota for queue : "
SHRINK_MAX = (4000, 48000)  # lowered, raised (memory)
# queues that borrow above their guarantee (or have none): the victims come from these
BORROWER_QUEUES = (
    "root.batch",
    "root.spare",
    "root.protected",
    "root.boosted",
    "root.fenced.inner2",
    "root.urgent",
    "root.fenced.inner1",
    "root.capped.borrow",
    "root.shrink",
)
# memory, as in the config
PREEMPTOR_GUARANTEES = {"root.urgent": 32000, "root.fenced.inner1": 16000, "root.capped.short": 8000}
DAEMON_QUEUE = "root.daemon"
# pending asks per RM and kind before it stops adding more of that kind
OUTSTANDING_LIMITS = {"borrower": 40, "preemptor": 16, "daemon": 6}
PREEMPTOR_GRACE = 10.0
FINISHED_STATES = frozenset(
    {"Completed", "Failed", "Rejected", "Expired"}
)  # seconds an allocated preemptor still justifies victims heard of late
PREEMPTION_NODE = {"memory": 16000, "vcore": 16000}
PREEMPTION_NODES = 6


def preemption_config(delay: str = PREEMPTION_DELAY, shrink_max: int = SHRINK_MAX[1]) -> str:
    """Guarantees summing to less than the cluster (6 nodes x 16000 memory), a fenced parent, a queue
    whose allocations are never victims, one whose priority offset lifts its asks above the urgent ones,
    a short ``preemption.delay`` on the queues that preempt, a parent whose max its borrowing child
    fills (its other child preempts for headroom), and a queue whose max the driver lowers and raises
    (quota preemption after a 1 s ``quota.preemption.delay``)."""
    return f"""
partitions:
  - name: default
    preemption:
      quotapreemptionenabled: true
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: urgent
            resources:
              guaranteed: {{memory: 32000}}
            properties:
              preemption.delay: {delay}
          - name: batch
            resources:
              guaranteed: {{memory: 12000}}
          - name: spare
          - name: protected
            properties:
              preemption.policy: disabled
          - name: boosted
            properties:
              priority.offset: "20"
          - name: fenced
            parent: true
            resources:
              guaranteed: {{memory: 24000}}
            properties:
              preemption.policy: fence
            queues:
              - name: inner1
                resources:
                  guaranteed: {{memory: 16000}}
                properties:
                  preemption.delay: {delay}
              - name: inner2
                resources:
                  guaranteed: {{memory: 6000}}
          - name: capped
            parent: true
            resources:
              max: {{memory: 20000}}
            queues:
              - name: short
                resources:
                  guaranteed: {{memory: 8000}}
                properties:
                  preemption.delay: {delay}
              - name: borrow
          - name: shrink
            resources:
              max: {{memory: {shrink_max}}}
            properties:
              quota.preemption.delay: 1s
          - name: daemon
"""


def effective_priority(queue: str, priority: int) -> int:
    return priority + sum(
        offset for path, offset in PREEMPTION_OFFSETS.items() if queue == path or queue.startswith(path + ".")
    )


class PreemptionRM(StressRM):
    """Checks each victim the moment it hears of it: some pending preemptor may take it by the laws;
    and each required-node allocation lands on its node. Collects the releases to confirm."""

    def __init__(self, rm_id: str, seed: int, driver: PreemptionDriver) -> None:
        super().__init__(rm_id, seed, misbehave=False)
        self.driver = driver
        self.violations: list[str] = []
        self.victims = 0
        self.preemptions = 0  # responses carrying victims (one decision's victims travel together)
        self.preemptors_allocated = 0
        self.required_node_allocated = 0

    def update_allocation(self, response: si.AllocationResponse) -> None:
        driver = self.driver
        with self.lock:
            victims = [
                (release, self.live.get(release.uuid))
                for release in response.released
                if release.termination_type == si.TerminationType.PREEMPTED_BY_SCHEDULER
            ]
            for key in (
                *(a.allocation_key for a in response.new),
                *(r.allocation_key for r in response.released_asks),
                *(r.allocation_key for r in response.rejected),
            ):
                driver.outstanding.pop(key, None)
            for allocation in response.new:
                required = driver.required_nodes.get(allocation.allocation_key)
                if required is not None:
                    self.required_node_allocated += 1
                    if allocation.node_id != required:
                        self.violations.append(
                            f"{self.rm_id}: required-node ask {allocation.allocation_key} placed on "
                            f"{allocation.node_id}, not {required}"
                        )
                party = driver.preemptors.pop(allocation.allocation_key, None)
                if party is not None:
                    self.preemptors_allocated += 1
                    # still a candidate a while: a victim chosen for it may reach this RM after its
                    # allocation elsewhere (the two come from different application actors)
                    driver.recently_allocated[allocation.allocation_key] = (party, driver.clock())
            if victims:
                self.preemptions += 1
            for release, victim in victims:
                self.victims += 1
                driver.on_victim(release, victim, self.violations)
        super().update_allocation(response)


class PreemptionDriver(Driver):
    """One RM of ``korral stress --preemption``: fills the cluster with low-priority borrowers, then keeps
    submitting high-priority asks that may preempt in starved queues, required-node asks, and churn.

    Its confirmation style is per victim: most promptly, some late (held a while), some confirmed
    with the victim's ask submitted again (it must not take the freed room back)."""

    def __init__(
        self, index: int, seed: int, record: Callable[[Op], None], clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(index, seed, record, misbehave=False)
        self.clock = clock
        self.config = preemption_config()
        self.rm: PreemptionRM = PreemptionRM(self.rm_id, seed * 7 + index, self)
        self.node_ids = [f"{self.rm_id}-node-{n}" for n in range(PREEMPTION_NODES)]
        self.late_node = f"{self.rm_id}-node-late"  # required-node asks wait for it until it exists
        self.app_queue: dict[str, str] = {}
        self.ask_info: dict[str, tuple[int, dict[str, int]]] = {}  # key -> (priority, resource)
        # pending asks that may preempt: key -> who they are (popped by the RM when allocated)
        self.preemptors: dict[str, invariants.PreemptionParty] = {}
        self.required_nodes: dict[str, str] = {}  # required-node ask -> its node
        self.recently_allocated: dict[str, tuple[invariants.PreemptionParty, float]] = {}
        # asks submitted and not yet allocated, released or rejected: the backlog stays bounded, so
        # a long run measures the core and not an ever longer queue walk
        self.outstanding: dict[str, str] = {}  # key -> borrower | preemptor | daemon
        # victims heard of, not confirmed yet: uuid -> (release, when to confirm, resubmit)
        self.awaiting: dict[str, tuple[si.AllocationRelease, float, bool]] = {}
        self.confirmed: set[str] = set()  # confirmed since the last check (must be gone by then)
        self.released_by_rm: set[str] = set()
        self.victims_seen: set[str] = set()
        self.required_node_asks = True
        # since the last quiescent check: queues that lost victims, and what they lost otherwise
        self.victim_queues: set[str] = set()
        self.unbounded: set[str] = set()
        self.removed: dict[str, dict[str, int]] = {}
        self.resubmitted = 0
        self.quota_lowered = False  # the shrink queue's max is the lowered one
        self.quota_raised_at = -1e9

    # ---- the RM's side of a victim (called by PreemptionRM under its lock) ------------------------

    def on_victim(
        self, release: si.AllocationRelease, allocation: si.Allocation | None, violations: list[str]
    ) -> None:
        queue = self.app_queue.get(release.application_id, "")
        priority = allocation.priority if allocation is not None else 0
        if allocation is not None and allocation.allocation_key in self.ask_info:
            priority = self.ask_info[allocation.allocation_key][0]
        victim = invariants.PreemptionParty(
            key=release.uuid,
            application_id=release.application_id,
            queue=queue,
            priority=effective_priority(queue, priority),
            raw_priority=priority,
            node_id=allocation.node_id if allocation is not None else "",
        )
        if allocation is None:
            if release.uuid in self.victims_seen:
                violations.append(
                    f"{self.rm_id}: victim {release.uuid} released as {invariants.PREEMPTED} a second time "
                    f"({release.message})"
                )
            elif release.uuid not in self.released_by_rm:
                violations.append(f"{self.rm_id}: victim {release.uuid} was never allocated to this RM")
            return
        self.victims_seen.add(release.uuid)
        now = self.clock()
        for key, (_, allocated_at) in list(self.recently_allocated.items()):
            if now - allocated_at > PREEMPTOR_GRACE:
                del self.recently_allocated[key]
        if release.message.startswith(QUOTA_MESSAGE):
            problems = self._quota_victim_problems(victim, release, allocation.allocation_key)
            violations.extend(f"{self.rm_id}: {problem}" for problem in problems)
            self.victim_queues.add(queue)
            self.awaiting[release.uuid] = (release, self.clock(), False)
            return
        candidates = [*self.preemptors.values(), *(party for party, _ in self.recently_allocated.values())]
        # the release names the ask it makes room for (YuniKorn's "... to run ask: KEY"): that one
        named = release.message.rsplit(": ", 1)[-1].strip() if ": " in release.message else ""
        exact = [party for party in candidates if party.key == named]
        if exact:
            candidates = exact
        violations.extend(
            f"{self.rm_id}: {problem}"
            for problem in invariants.check_victim_justified(victim, candidates, PREEMPTION_LAWS)
        )
        self.victim_queues.add(queue)
        if any(
            p.required_node == victim.node_id
            and not invariants.victim_law_breaches(victim, p, PREEMPTION_LAWS)
            for p in candidates
        ):
            # a required-node ask may take a queue below its guarantee (a daemon set must run): no
            # floor to check for this queue until the next check
            self.unbounded.add(queue)
        roll = self.rng.random()
        delay = 0.0 if roll < 0.6 else self.rng.uniform(0.2, 1.5)
        self.awaiting[release.uuid] = (release, self.clock() + delay, roll > 0.85)

    def _quota_victim_problems(
        self, victim: invariants.PreemptionParty, release: si.AllocationRelease, key: str
    ) -> list[str]:
        """A quota preemption victim: below the queue whose max was lowered (lately: the victim may
        reach the RM after the max went up again), not a daemon-set allocation."""
        named = release.message[len(QUOTA_MESSAGE) :].strip()
        problems = []
        lowered = self.quota_lowered or self.clock() - self.quota_raised_at < PREEMPTOR_GRACE
        if named != QUOTA_QUEUE or not lowered:
            problems.append(f"victim {victim.key} taken for the quota of {named}, whose max was not lowered")
        if not (victim.queue == named or victim.queue.startswith(named + ".")):
            problems.append(f"quota victim {victim.key} in {victim.queue}, outside {named}")
        if key in self.required_nodes:
            problems.append(f"quota victim {victim.key} is a daemon-set allocation")
        return problems

    def _change_quota(self, core: Core) -> None:
        """Lower the shrink queue's max below its usage, or raise it again (cancelling a pending run)."""
        self.quota_lowered = not self.quota_lowered
        if not self.quota_lowered:
            self.quota_raised_at = self.clock()
        shrink_max = SHRINK_MAX[0] if self.quota_lowered else SHRINK_MAX[1]
        self.config = preemption_config(shrink_max=shrink_max)
        request = si.UpdateConfigurationRequest(rm_id=self.rm_id, config=self.config)
        description = f"{self.rm_id}: {QUOTA_QUEUE} max {shrink_max}"
        self.record(Op(seq=0, rm=self.index, kind="config", request=request, description=description))
        core.update_configuration(request)

    def _removed(self, queue: str, resource: dict[str, int]) -> None:
        bucket = self.removed.setdefault(queue, {})
        for name, quantity in resource.items():
            bucket[name] = bucket.get(name, 0) + quantity

    # ---- operations --------------------------------------------------------------------------------

    def register(self, core: Core) -> None:
        super().register(core)
        with self.rm.lock:
            self.preemptors.clear()
            self.awaiting.clear()
        self.required_nodes.clear()
        self.app_queue.clear()
        for node_id in self.node_ids:
            self.nodes[node_id] = True
        self._send(
            core,
            "nodes",
            t.nodes(self.rm_id, self.node_ids, PREEMPTION_NODE),
            f"create {len(self.node_ids)} nodes",
        )
        for queue in BORROWER_QUEUES + PREEMPTOR_QUEUES + (DAEMON_QUEUE,):
            self._new_app(core, queue)
        # the cluster full of borrowers from the start: a short scenario gets to preempting at once
        for _ in range(12):
            self._add_borrowers(core)

    def _choices(self) -> list[tuple[float, Callable[[Core], None]]]:
        with self.rm.lock:
            backlog = dict.fromkeys(OUTSTANDING_LIMITS, 0)
            for kind in self.outstanding.values():
                backlog[kind] += 1
            used: dict[str, int] = {}
            for allocation in self.rm.live.values():
                queue = self.app_queue.get(allocation.application_id, "")
                used[queue] = used.get(queue, 0) + allocation.resource_per_alloc.get("memory", 0)
        # urgent work finishes faster once its queue nears its guarantee: the queue is starved again
        # and must preempt to get back (above its guarantee it may not)
        nearly_served = any(
            used.get(queue, 0) > 0.6 * PREEMPTOR_GUARANTEES[queue] for queue in PREEMPTOR_QUEUES
        )
        return [
            *(
                (weight if backlog[kind] < OUTSTANDING_LIMITS[kind] else 0, action)
                for weight, kind, action in (
                    (25, "borrower", self._add_borrowers),
                    (6, "preemptor", self._add_preemptors),
                    (2 if self.required_node_asks else 0, "daemon", self._add_required_node_ask),
                )
            ),
            (12, self._release_allocation),
            (25 if nearly_served else 2, self._release_preemptor_allocation),
            (3, self._release_asks),
            (1.5, self._new_app_op),
            (0.3, self._create_late_node),
            (20, self._confirm_due),
            (0.6, self._change_quota),
        ]

    def _new_app(self, core: Core, queue: str) -> str:
        self.app_seq += 1
        app_id = f"{self.rm_id}-app-{self.app_seq}"
        self.apps.add(app_id)
        self.app_queue[app_id] = queue
        self._send(
            core, "apps", t.applications(self.rm_id, {app_id: queue}), f"add application {app_id} in {queue}"
        )
        return app_id

    def _new_app_op(self, core: Core) -> None:
        self._new_app(core, self.rng.choice(BORROWER_QUEUES + PREEMPTOR_QUEUES))

    def _apps_in(self, queues: Iterable[str]) -> list[str]:
        """The applications in ``queues`` that can still take asks (an application with nothing left
        completes, and a completed one takes no more asks)."""
        wanted = set(queues)
        with self.rm.lock:
            finished = {
                app for app, states in self.rm.app_states.items() if states and states[-1] in FINISHED_STATES
            } | set(self.rm.rejected_apps)
        return sorted(
            app
            for app, queue in self.app_queue.items()
            if queue in wanted and app in self.apps and app not in finished
        )

    def _apps_or_new(self, core: Core, queues: tuple[str, ...]) -> list[str]:
        apps = self._apps_in(queues)
        return apps or [self._new_app(core, self.rng.choice(queues))]

    def _ask(
        self,
        app_id: str,
        resource: dict[str, int],
        priority: int,
        *,
        preempt_other: bool | None = None,
        preempt_self: bool = True,
        required_node: str = "",
        kind: str = "borrower",
    ) -> si.AllocationAsk:
        self.ask_seq += 1
        key = f"{app_id}-ask-{self.ask_seq}"
        self.asks[key] = app_id
        self.ask_info[key] = (priority, resource)
        with self.rm.lock:
            self.outstanding[key] = kind
        policy = (
            None
            if preempt_other is None
            else si.PreemptionPolicy(allow_preempt_self=preempt_self, allow_preempt_other=preempt_other)
        )
        tags = {si.DOMAIN_YUNIKORN + si.KEY_REQUIRED_NODE: required_node} if required_node else {}
        return si.AllocationAsk(
            max_allocations=1,
            allocation_key=key,
            application_id=app_id,
            resource_ask=resource,
            priority=priority,
            preemption_policy=policy,
            originator=self.rng.random() < 0.1,
            tags=tags,
        )

    def _add_borrowers(self, core: Core) -> None:
        """Low-priority work, far more than fits: queues borrow above their guarantees."""
        apps = self._apps_or_new(core, BORROWER_QUEUES)
        if not apps:
            return
        app_id = self.rng.choice(apps)
        asks = [
            self._ask(
                app_id,
                {"memory": self.rng.choice([1000, 2000, 4000]), "vcore": self.rng.choice([500, 1000])},
                self.rng.choice([0, 0, 0, 5, 20]),
                # most victims may be preempted; some opted out (taken only when nothing else frees enough)
                preempt_other=False,
                preempt_self=self.rng.random() < 0.85,
            )
            for _ in range(self.rng.randint(1, 4))
        ]
        self._send(
            core,
            "allocations",
            si.AllocationRequest(rm_id=self.rm_id, asks=asks),
            f"{len(asks)} borrowers for {app_id}",
        )

    def _add_preemptors(self, core: Core) -> None:
        """High-priority asks in a starved queue that may preempt (some without a policy: they wait)."""
        apps = self._apps_or_new(core, PREEMPTOR_QUEUES)
        if not apps:
            return
        app_id = self.rng.choice(apps)
        queue = self.app_queue[app_id]
        priority = self.rng.choice([10, 10, 10, 3])
        may_preempt = self.rng.random() < 0.85
        asks = [
            self._ask(
                app_id,
                {"memory": self.rng.choice([2000, 4000]), "vcore": 1000},
                priority,
                preempt_other=True if may_preempt else None,
                kind="preemptor",
            )
            for _ in range(self.rng.randint(1, 3))
        ]
        with self.rm.lock:
            for ask in asks:
                self.preemptors[ask.allocation_key] = invariants.PreemptionParty(
                    key=ask.allocation_key,
                    application_id=app_id,
                    queue=queue,
                    priority=effective_priority(queue, priority),
                    raw_priority=priority,
                )
        self._send(
            core,
            "allocations",
            si.AllocationRequest(rm_id=self.rm_id, asks=asks),
            f"{len(asks)} preemptors for {app_id}",
        )

    def _add_required_node_ask(self, core: Core) -> None:
        """A daemon-set style ask pinned to one node (sometimes one that does not exist yet)."""
        apps = self._apps_or_new(core, (DAEMON_QUEUE,))
        if not apps:
            return
        app_id = apps[0]
        node_id = self.late_node if self.rng.random() < 0.1 else self.rng.choice(self.node_ids)
        priority = self.rng.choice([15, 15, 0])
        ask = self._ask(
            app_id, {"memory": 1000, "vcore": 500}, priority, required_node=node_id, kind="daemon"
        )
        self.required_nodes[ask.allocation_key] = node_id
        with self.rm.lock:
            self.preemptors[ask.allocation_key] = invariants.PreemptionParty(
                key=ask.allocation_key,
                application_id=app_id,
                queue=DAEMON_QUEUE,
                priority=effective_priority(DAEMON_QUEUE, priority),
                raw_priority=priority,
                required_node=node_id,
            )
        self._send(
            core,
            "allocations",
            si.AllocationRequest(rm_id=self.rm_id, asks=[ask]),
            f"required-node ask {ask.allocation_key} on {node_id}",
        )

    def _create_late_node(self, core: Core) -> None:
        if self.late_node in self.nodes:
            return
        self.nodes[self.late_node] = True
        self._send(
            core, "nodes", t.nodes(self.rm_id, [self.late_node], PREEMPTION_NODE), f"create {self.late_node}"
        )

    def _release(self, core: Core, allocation: si.Allocation) -> None:
        with self.rm.lock:
            self.released_by_rm.add(allocation.uuid)
            self._removed(self.app_queue.get(allocation.application_id, ""), allocation.resource_per_alloc)
        request = t.release(self.rm_id, allocation.application_id, uuid=allocation.uuid)
        self._send(core, "allocations", request, f"release allocation {allocation.uuid}")

    def _release_allocation(self, core: Core) -> None:
        """Borrowers finish now and then (what leaves a queue other than by preemption is counted).
        Half the time one no urgent ask may take (disabled, lifted by an offset, high priority): those
        would otherwise pile up, as preemption only ever takes the others."""
        with self.rm.lock:
            live = sorted(self.rm.live.values(), key=lambda a: a.uuid)
        kept = [a for a in live if self._never_a_victim(a)]
        if kept and self.rng.random() < 0.5:
            live = kept
        if live:
            self._release(core, self.rng.choice(live))

    def _never_a_victim(self, allocation: si.Allocation) -> bool:
        queue = self.app_queue.get(allocation.application_id, "")
        priority = self.ask_info.get(allocation.allocation_key, (allocation.priority, {}))[0]
        return PREEMPTION_LAWS.is_disabled(queue) or effective_priority(queue, priority) > 10

    def _release_preemptor_allocation(self, core: Core) -> None:
        """Urgent work finishes too, so its queue is starved again and preempts again."""
        with self.rm.lock:
            live = sorted(
                (
                    a
                    for a in self.rm.live.values()
                    if self.app_queue.get(a.application_id) in PREEMPTOR_QUEUES
                ),
                key=lambda a: a.uuid,
            )
        if live:
            self._release(core, self.rng.choice(live))

    def _release_asks(self, core: Core) -> None:
        """Withdraw a pending ask (a pod deleted before it ran)."""
        with self.rm.lock:
            pending = sorted(self.outstanding)
        if not pending:
            return
        key = self.rng.choice(pending)
        app_id = self.asks[key]
        self.asks_released.add(key)
        with self.rm.lock:
            self.outstanding.pop(key, None)
        # a released preemptor stays a candidate: a victim chosen for it may be on its way already
        self._send(core, "allocations", t.release_asks(self.rm_id, app_id, key), f"release ask {key}")

    def _confirm_due(self, core: Core) -> None:
        """Confirm the victims whose time has come; some are then submitted again (a new ask)."""
        now = self.clock()
        with self.rm.lock:
            due = [(uuid, entry) for uuid, entry in self.awaiting.items() if entry[1] <= now]
            for uuid, _ in due:
                del self.awaiting[uuid]
                self.confirmed.add(uuid)
            # the RM takes its own confirmations from here, not from the recorder's list
            self.rm.to_confirm.clear()
        if not due:
            return
        releases = [release for _, (release, _, _) in due]
        request = si.AllocationRequest(
            rm_id=self.rm_id, releases=si.AllocationReleasesRequest(allocations_to_release=releases)
        )
        self._send(core, "allocations", request, f"confirm {len(releases)} victims")
        for release, _, resubmit in (entry for _, entry in due):
            if resubmit and release.application_id in self.apps and release.allocation_key in self.ask_info:
                priority, resource = self.ask_info[release.allocation_key]
                ask = self._ask(release.application_id, resource, priority, preempt_other=False)
                self.resubmitted += 1
                self._send(
                    core,
                    "allocations",
                    si.AllocationRequest(rm_id=self.rm_id, asks=[ask]),
                    f"victim {release.uuid} submitted again as {ask.allocation_key}",
                )

    def confirm_all(self, core: Core) -> None:
        """At the end: every victim confirmed (late ones too), so nothing stays half released."""
        with self.rm.lock:
            self.awaiting = {uuid: (release, 0.0, False) for uuid, (release, _, _) in self.awaiting.items()}
        self._confirm_due(core)

    # ---- checks at a quiescent point ---------------------------------------------------------------

    def take_window(self) -> PreemptionWindow:
        """What happened since the last check, taken (and reset) before the core's state is read: a
        victim chosen while it is read is then left for the next check, never half seen."""
        with self.rm.lock:
            window = PreemptionWindow(
                awaiting=frozenset(set(self.awaiting) - self.released_by_rm),
                confirmed=frozenset(self.confirmed),
                victim_queues=frozenset(self.victim_queues - self.unbounded),
                removed={queue: dict(resource) for queue, resource in self.removed.items()},
                violations=tuple(self.rm.violations),
            )
            self.rm.violations.clear()
            self.confirmed.clear()
            self.victim_queues.clear()
            self.unbounded.clear()
            self.removed = {}
        return window

    def check_window(self, state: invariants.PartitionState | None, window: PreemptionWindow) -> list[str]:
        problems = self.check(state)
        problems.extend(window.violations)
        if state is not None:
            problems.extend(invariants.check_guarantee_floor(state, window.victim_queues, window.removed))
            problems.extend(invariants.check_victims_booked(state, window.awaiting, window.confirmed))
            problems.extend(invariants.check_nodes_not_overcommitted(state))
        return problems


@attrs.frozen(kw_only=True)
class PreemptionWindow:
    awaiting: frozenset[str]
    confirmed: frozenset[str]
    victim_queues: frozenset[str]
    removed: dict[str, dict[str, int]]
    violations: tuple[str, ...]


@attrs.define
class PreemptionResult:
    seed: int
    operations: int
    checkpoints: int
    violations: list[str]
    victims: int = 0
    preemptions: int = 0
    preemptors_allocated: int = 0
    required_node_allocated: int = 0
    resubmitted: int = 0
    seeds: int = 0  # simulated: the seeds run


def _preemption_totals(result: PreemptionResult, drivers: Iterable[PreemptionDriver]) -> PreemptionResult:
    for driver in drivers:
        result.victims += driver.rm.victims
        result.preemptions += driver.rm.preemptions
        result.preemptors_allocated += driver.rm.preemptors_allocated
        result.required_node_allocated += driver.rm.required_node_allocated
        result.resubmitted += driver.resubmitted
    return result


class PreemptionStress:
    """``korral stress --preemption``: RMs on threads (``run``) or seeds on the simulated runtime
    (``run_seeds``), checking the preemption laws as each victim is heard of and at every quiescent
    point, with the invariants of every stress run (nothing lost, nothing booked twice)."""

    def __init__(
        self,
        rms: int = 2,
        seed: int = 1,
        checkpoint: float = 2.0,
        pause: float = 0.002,
        required_node_asks: bool = True,
    ) -> None:
        self.required_node_asks = required_node_asks
        self.rm_count = rms
        self.seed = seed
        self.checkpoint_interval = checkpoint
        self.pause = pause  # between one RM's operations: a shim's pace, and room for the core
        self.ops: list[Op] = []
        self._lock = threading.Lock()

    def _record(self, op: Op) -> None:
        with self._lock:
            self.ops.append(attrs.evolve(op, seq=len(self.ops) + 1))

    def _check(
        self,
        core: Core,
        drivers: list[PreemptionDriver],
        collect: Callable[[Core, str], invariants.PartitionState | None] = invariants.stable_collect,
    ) -> list[str]:
        """The laws over each RM's window and the invariants of every partition. On the simulated
        runtime the state is collected once (``invariants.collect``): the run is already quiescent."""
        problems: list[str] = []
        states = []
        windows = [driver.take_window() for driver in drivers]
        for driver, window in zip(drivers, windows, strict=True):
            state = collect(core, driver.partition)
            if state is not None:
                # a lowered max may stand below the usage until quota preemption has brought it down
                problems.extend(invariants.check_partition(state, recovered_queues=(QUOTA_QUEUE,)))
                states.append(state)
            problems.extend(driver.check_window(state, window))
        problems.extend(invariants.check_unique_uuids(states))
        if core.tracker.errors:
            problems.append(f"{core.tracker.errors} actor handler(s) failed (see the log)")
        return problems

    def run(
        self, duration: float, progress: Callable[[float, PreemptionResult], None] | None = None
    ) -> PreemptionResult:
        """RMs on threads for ``duration`` seconds, checked every ``checkpoint`` seconds and at the end."""
        drivers = [PreemptionDriver(index, self.seed, self._record) for index in range(self.rm_count)]
        for driver in drivers:
            driver.required_node_asks = self.required_node_asks
        result = PreemptionResult(seed=self.seed, operations=0, checkpoints=0, violations=[])
        core = korral.start(**SETTINGS)
        try:
            for driver in drivers:
                driver.register(core)
            deadline = time.monotonic() + duration
            while time.monotonic() < deadline and not result.violations:
                until = min(deadline, time.monotonic() + self.checkpoint_interval)
                result.violations = self._window(core, drivers, until)
                if not result.violations:
                    try:
                        core.wait_until_idle(timeout=60.0)
                        result.violations = self._check(core, drivers)
                    except TimeoutError as error:
                        result.violations = [f"no progress (deadlock watchdog): {error}"]
                result.checkpoints += 1
                if progress is not None:
                    progress(
                        max(0.0, deadline - time.monotonic()),
                        _preemption_totals(attrs.evolve(result), drivers),
                    )
            if not result.violations:
                # the end: every late victim confirmed; then nothing may remain awaiting
                for driver in drivers:
                    driver.confirm_all(core)
                core.wait_until_idle(timeout=60.0)
                result.violations = self._check(core, drivers)
                result.checkpoints += 1
        finally:
            core.stop()
        result.operations = len(self.ops)
        return _preemption_totals(result, drivers)

    def _window(self, core: Core, drivers: list[PreemptionDriver], until: float) -> list[str]:
        errors: list[str] = []

        def drive(driver: PreemptionDriver) -> None:
            try:
                while time.monotonic() < until:
                    driver.step(core)
                    time.sleep(self.pause)
            except Exception as error:  # an SI call the core should have taken
                errors.append(f"{driver.rm_id}: {type(error).__name__}: {error}")

        threads = [threading.Thread(target=drive, args=(d,), name=f"preempt-{d.rm_id}") for d in drivers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return errors

    def run_seed(self, seed: int, operations: int = 60) -> PreemptionResult:
        """One seed on the simulated runtime: operations, with virtual time passing between them (so
        preemption delays expire), checked at every quiescent point and after the victims are confirmed."""
        self.ops = []
        rng = random.Random(seed)
        core = korral.start(runtime="simulated", seed=seed, **SETTINGS)
        simulation = core.simulation
        assert simulation is not None
        drivers = [
            PreemptionDriver(index, seed, self._record, clock=lambda: simulation.now)
            for index in range(self.rm_count)
        ]
        for driver in drivers:
            driver.required_node_asks = self.required_node_asks
        result = PreemptionResult(seed=seed, operations=0, checkpoints=0, violations=[], seeds=1)
        try:
            simulation.perturb()
            for driver in drivers:
                driver.register(core)
            for _ in range(operations):
                try:
                    rng.choice(drivers).step(core)
                except Exception as error:
                    result.violations = [f"{type(error).__name__}: {error}"]
                    break
                if rng.random() < 0.5:
                    core.advance(round(rng.uniform(0.0, 0.4), 3))
                core.wait_until_idle()  # a quiescent point: what was sent before is taken in
                result.violations = self._check(core, drivers, invariants.collect)
                result.checkpoints += 1
                if result.violations:
                    break
            if not result.violations:
                for driver in drivers:
                    driver.confirm_all(core)
                core.advance(SIMULATED_SETTLE)
                result.violations = self._check(core, drivers, invariants.collect)
                result.checkpoints += 1
        finally:
            core.stop()
        result.operations = len(self.ops)
        return _preemption_totals(result, drivers)

    def run_seeds(
        self, seeds: Iterable[int], *, operations: int = 60, budget: float = 60.0
    ) -> PreemptionResult:
        """Seeds until one violates or ``budget`` wall seconds are spent; totals over the seeds run."""
        deadline = time.monotonic() + budget
        total = PreemptionResult(seed=0, operations=0, checkpoints=0, violations=[])
        for seed in seeds:
            outcome = self.run_seed(seed, operations)
            total.seed = seed
            total.seeds += 1
            total.operations += outcome.operations
            total.checkpoints += outcome.checkpoints
            total.victims += outcome.victims
            total.preemptions += outcome.preemptions
            total.preemptors_allocated += outcome.preemptors_allocated
            total.required_node_allocated += outcome.required_node_allocated
            total.resubmitted += outcome.resubmitted
            if outcome.violations:
                total.violations = outcome.violations
                break
            if time.monotonic() >= deadline:
                break
        return total


def __getattr__(name: str) -> Any:
    """``SimulatedStress`` and ``SimulatedOutcome`` live in ``korral.harness.stress_simulated`` (which
    imports this module); still importable from here."""
    if name in ("SimulatedStress", "SimulatedOutcome"):
        from korral.harness import stress_simulated

        return getattr(stress_simulated, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
