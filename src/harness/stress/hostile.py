"""``HostileDriver``: invalid input, restarts with recovery, slow and re-registering RMs."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs

from korral import si
from korral import testing as t
from korral.core import Core
from korral.harness import invariants
from korral.harness.stress.common import Op, recovery_nodes
from korral.harness.stress.driver import Driver
from korral.harness.stress.hostile_rm import (
    BAD_QUANTITIES,
    EXTREME_QUANTITIES,
    REJECTION_ERRORS,
    SHADOW_CONFIG,
    HostileRM,
    UuidLedger,
)


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
        # replaced callback objects, watched for late callbacks until a check after their core stopped
        self.retired: list[HostileRM] = []
        self.retired_releases: Counter[str] = Counter()  # releases the core made, told to those
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
        self.ledger.new_registration(set())  # once it returned: the replaced partition tells no more
        if old is not self.rm:
            self.retired_releases += old.retire()
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
        self.ledger.new_registration(set(believed))
        self.retired_releases += self.retired[-1].retire()
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
        infos, by_node = recovery_nodes(self.node_capacity, believed)
        for node_id in sorted(by_node.keys() - self.node_capacity.keys()):
            self.problems.append(f"{self.rm_id}: believes allocations live on unknown node {node_id}")
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
        # a stopped core calls nothing: checked once since it stopped, a replaced object is done with
        self.retired = [rm for rm in self.retired if not rm.core_stopped]
        if state is not None:  # an application gone from the core is exempt again only once recovered
            present = {app.application_id for app in state.applications}
            self.recovered_apps &= present | self.apps
        with self.ledger._lock:
            collisions = list(self.ledger.collisions)
        if collisions:
            problems.append(f"{self.rm_id}: told of the same allocation uuid twice: {collisions[:5]}")
        return problems
