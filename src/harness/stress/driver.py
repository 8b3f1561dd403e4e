"""``Driver``: one simulated RM issuing a seeded stream of SI operations, and its own checks."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from korral import si
from korral import testing as t
from korral.core import Core
from korral.errors import ConfigError
from korral.harness import invariants
from korral.harness.stress.common import INVALID_CONFIG, USERS, Op, StressRM, Violation, rm_config
from korral.model.naming import normalize_partition_name


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
        # the RM's partitions besides ``partition`` as read at a check (their allocations are its too)
        self.other_states: list[invariants.PartitionState] = []

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
            (self._create_nodes_weight(), self._create_nodes),
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
        keys = self.rm.released_keys(request) if kind == "allocations" else ()
        self.record(
            Op(seq=0, rm=self.index, kind=kind, request=request, description=description, released_keys=keys)
        )
        if kind == "nodes":
            core.update_node(request)
        elif kind == "apps":
            core.update_application(request)
        else:
            core.update_allocation(request)

    # what a scenario of its own (simulated.scenarios.ScenarioDriver) varies: the config a reload sends,
    # how many nodes one call may create, and the nodes' memory sizes
    make_config: Callable[..., str] = staticmethod(rm_config)

    def _create_nodes_weight(self) -> float:
        """How likely creating nodes is next: likely until the RM has a dozen, rare after."""
        return 8 if len(self.nodes) < 12 else 1

    def _node_batch_limit(self) -> int:
        return 3

    def _node_memory_choices(self) -> Sequence[int]:
        return (8000, 16000, 32000)

    def _create_nodes(self, core: Core) -> None:
        ids = []
        for _ in range(self.rng.randint(1, self._node_batch_limit())):
            self.node_seq += 1
            ids.append(f"{self.rm_id}-node-{self.node_seq}")
        capacity = {
            "memory": self.rng.choice(self._node_memory_choices()),
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
        self.config = self.make_config(
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
        problems = invariants.check_rm_view(self.rm, [state, *self.other_states])
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
