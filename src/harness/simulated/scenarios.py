"""The workload of ``korral stress --simulated``: the threaded RMs' operations plus what the windows need.

``ScenarioDriver`` is a ``korral.harness.stress.Driver`` (node, application, ask and release
operations, gangs with placeholder timeouts, timed asks, config reloads, re-registration) with more:

- **preemption**: a guaranteed queue ``root.p`` whose high-priority asks may preempt others (a short
  ``preemption.delay``), mixed with application removal, drains and decommissions;
- **recovery**: nodes that join with allocations already running on them (an RM restart), and the
  decommission of such a node soon after;
- **reservations**: asks larger than any node's free room but within a node's size, on a cluster kept
  small by the seed, so they wait past the reservation delay and reserve a node;
- **required-node asks** pinned to one node;
- **settings varied per seed** (``SeedSettings``): the scheduling interval, reservation delay,
  placeholder and completing timeouts, queue cleanup, node sort policy, cluster size, node sizes.

User limits come from the threaded stress's configuration (``rm_config``). Everything is drawn from the
workload seed: the same seed gives the same settings and the same operations (given the same answers).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from korral import si
from korral import testing as t
from korral.core import Core
from korral.harness import invariants
from korral.harness.simulated import queries as simulated_queries
from korral.harness.simulated import restart as simulated_restart
from korral.harness.simulated import workloads as simulated_workloads
from korral.harness.simulated.ask_rules import AskRules
from korral.harness.simulated.faults import CALLBACK_FAILURE, FailingCallbackRM
from korral.harness.simulated.workloads import (
    ADDS_PARTITION,
    ALL_WORKLOADS,
    DROPS_PARTITION,
    LOWERS_MAX,
    Workloads,
    has_spare,
    lowers_max,
)
from korral.harness.stress import USERS, Driver, Op, StressRM, rm_config

PREEMPTOR_QUEUE = "root.p"
BORROWER_QUEUE = "root.b"


@attrs.frozen(kw_only=True)
class SeedSettings:
    """What a workload seed sets besides its operations: the core's intervals and delays (virtual
    seconds) and the shape of its cluster."""

    scheduling_interval: float = 0.05
    reservation_delay: float = 0.2
    placeholder_timeout: float = 1.0
    completing_timeout: float = 0.5
    queue_cleanup_interval: float = 0.5
    binpacking: bool = False
    max_nodes: int = 12  # per RM
    node_memory: tuple[int, ...] = (8000, 16000, 32000)
    spare_partition: bool = False  # the RMs' configurations have partition spare from the start

    @classmethod
    def of(cls, seed: int) -> SeedSettings:
        rng = random.Random(f"settings-{seed}")
        return cls(
            scheduling_interval=rng.choice([0.02, 0.05, 0.1]),
            reservation_delay=rng.choice([0.05, 0.2, 0.5]),
            placeholder_timeout=rng.choice([0.5, 1.0, 2.0]),
            completing_timeout=rng.choice([0.2, 0.5, 1.0]),
            queue_cleanup_interval=rng.choice([0.3, 0.5, 1.0]),
            binpacking=rng.random() < 0.3,
            max_nodes=rng.choice([2, 3, 6, 12]),
            node_memory=rng.choice([(8000, 16000), (8000, 16000, 32000), (16000,)]),
            spare_partition=rng.random() < 0.5,
        )

    def core_settings(self) -> dict[str, Any]:
        """The ``korral.start`` settings of the seed."""
        return {
            "completing_timeout": self.completing_timeout,
            "queue_cleanup_interval": self.queue_cleanup_interval,
            "reservation_delay": self.reservation_delay,
            "scheduling_interval": self.scheduling_interval,
            "placeholder_timeout": self.placeholder_timeout,
        }


def scenario_config(
    variant: int,
    *,
    extra_queue: bool = False,
    binpacking: bool = False,
    guarantee: int = 20,
    deep_queues: bool = True,
    quota_preemption: bool = True,
    submit_acl: bool = True,
) -> str:
    """The threaded stress's configuration (limits, placement rules, a child template) plus the
    preemptor queue: guaranteed memory, a short preemption delay; root.b's applications back off
    (``simulated.workloads.with_backoff``); with ``deep_queues``, placement
    rules that also create queues three levels deep (``simulated.workloads.placement_rules``); with
    ``quota_preemption``, quota preemption on and root.a's delay (``with_quota_preemption``); with
    ``submit_acl``, the root open to the scenario's users only (``with_submit_acl``)."""
    text = rm_config(variant, extra_queue=extra_queue, binpacking=binpacking, guarantee=guarantee)
    if deep_queues:
        start, end = text.index("    placementrules:\n"), text.index("    queues:\n")
        text = text[:start] + simulated_workloads.placement_rules() + text[end:]
    if quota_preemption:
        text = simulated_workloads.with_quota_preemption(text)
    if submit_acl:
        text = simulated_workloads.with_submit_acl(text)
    return (
        simulated_workloads.with_backoff(text)
        + """          - name: p
            resources:
              guaranteed: {memory: 16000}
            properties:
              preemption.delay: 50ms
"""
    )


class ScenarioDriver(Driver):
    """One RM of a simulated seed: ``Driver``'s operations and the windows' scenarios."""

    def __init__(
        self,
        index: int,
        seed: int,
        record: Callable[[Op], None],
        misbehave: bool = False,
        settings: SeedSettings | None = None,
        env_faults: frozenset[str] = frozenset(),
        rm_seed: int | None = None,
        workloads: Workloads = ALL_WORKLOADS,
    ) -> None:
        super().__init__(index, seed, record, misbehave)
        self.env_faults = env_faults
        self.workloads = workloads
        # ids the RM let go, for a reuse (simulated.workloads): application -> its asks' keys; nodes
        self.removed_apps: dict[str, tuple[str, ...]] = {}
        self.removed_nodes: set[str] = set()
        self.rm_seed = seed if rm_seed is None else rm_seed
        self.raised_before = 0  # RM callback failures of the callback objects a restart replaced
        self.fresh_rm()
        self.sent: deque[tuple[str, Any, str]] = deque(maxlen=3)  # the last requests, for a resend
        self.settings = settings if settings is not None else SeedSettings()
        self.config = scenario_config(
            index,
            binpacking=self.settings.binpacking,
            deep_queues=workloads.deep_queues,
            quota_preemption=workloads.quota_preemption,
            submit_acl=workloads.denied,
        )
        if workloads.partitions and self.settings.spare_partition:
            self.config = simulated_workloads.with_spare(self.config)
        # partition spare's work (simulated.workloads.spare_work): its nodes and live applications
        self.spare_nodes: set[str] = set()
        self.spare_apps: set[str] = set()

        self.preemptor_app: str | None = None
        self.borrowers: dict[str, str] = {}  # application -> queue, of the borrowers' applications
        self.recovered_seq = 0
        self.just_recovered: str | None = None  # a node that joined with work on it, last operation
        self.leaving: str | None = None  # that node, while the next operation is chosen
        # what a core restart's recovery re-sends (simulated.restart): as the RM last sent each
        self.app_requests: dict[str, si.AddApplicationRequest] = {}
        self.node_capacity: dict[str, dict[str, int]] = {}
        self.ask_requests: dict[str, si.AllocationAsk] = {}
        self.believed: dict[str, si.Allocation] | None = None  # recovered, checked at the next check
        self.ask_rules = AskRules()  # per-ask rules: maxAllocations, nothing after a release

    def fresh_rm(self) -> None:
        """A new callback object (at the start, and after a core restart: the RM's model survives the
        restart, its connection does not). Seeded by the workload: a replay's RM fails where the
        run's did."""
        self.raised_before += self.rm.raised
        if "callbacks" in self.env_faults:
            self.rm = FailingCallbackRM(self.rm_id, self.rm_seed * 7 + self.index, CALLBACK_FAILURE)
        else:
            self.rm = StressRM(self.rm_id, self.rm_seed * 7 + self.index, misbehave=False)

    def check(self, state: invariants.PartitionState | None) -> list[str]:
        recovered = simulated_restart.check_recovered(self) if self.believed is not None else []
        return recovered + super().check(state) + self.ask_rules.check(self.rm)

    def _create_nodes_weight(self) -> float:
        return 8 if len(self.nodes) < self.settings.max_nodes else 0.3

    def _choices(self) -> list[tuple[float, Callable[[Core], None]]]:
        choices = [
            *super()._choices(),
            (3, self._add_preemptor_asks),
            (3, self._add_borrower_asks),
            (2, self._recover_onto_new_node),
            (3, self._add_large_ask),
            (1.5, self._add_required_node_ask),
        ]
        if "duplicates" in self.env_faults:
            choices.append((1.5, self._resend_after_reconnect))
        if self.workloads.reuse_ids:
            choices += [
                (2, lambda core: simulated_workloads.readd_removed_app(self, core)),
                (2, lambda core: simulated_workloads.resend_released_ask(self, core)),
                (1.5, lambda core: simulated_workloads.recreate_node(self, core)),
            ]
        choices.append((1, lambda core: simulated_workloads.create_drained_node(self, core)))
        if self.workloads.deep_queues:
            choices.append((3, lambda core: simulated_workloads.add_placed_app(self, core)))
        if self.workloads.partitions or self.workloads.quota_preemption:
            choices.append((1.5, self._reload_config))  # reloads add and drop spare, lower root.a's max
        if self.workloads.partitions:
            if has_spare(self.config):
                choices.append((6, lambda core: simulated_workloads.spare_work(self, core)))
                if self.spare_apps:  # a reload that may drop the partition while it holds work
                    choices.append((3, self._reload_config))
            elif self.spare_apps or self.spare_nodes:
                choices.append((8, lambda core: simulated_workloads.drain_spare(self, core)))
        if self.workloads.reads:
            choices.append((3, lambda core: simulated_queries.read_op(self, core)))
        if self.workloads.leaves:
            choices.append((0.3, lambda core: simulated_workloads.leave_and_return(self, core)))
        if self.workloads.denied:
            choices.append((0.5, lambda core: simulated_workloads.add_denied_app(self, core)))
        self.leaving, self.just_recovered = self.just_recovered, None
        if self.leaving is not None and self.leaving in self.nodes:
            choices.append((40, self._decommission_recovered))
        return choices

    def gang_choices(self) -> list[tuple[float, Callable[[Core], None]]]:
        """``Driver``'s, with the RM confirming the core's releases (as a shim does once the container
        stopped) soon after it is told of them, and never while there is none to confirm."""
        with self.rm.lock:
            waiting = bool(self.rm.to_confirm)
        confirm = self._confirm_releases
        return [
            ((12 if waiting else 0) if action == confirm else weight, action)
            for weight, action in super().gang_choices()
        ]

    def register(self, core: Core) -> None:
        super().register(core)
        self.preemptor_app = None
        self.borrowers.clear()
        self.app_requests.clear()
        self.node_capacity.clear()
        self.ask_requests.clear()
        self.ask_rules.reset(self.rm)
        simulated_workloads.forget_spare(self)
        self._create_nodes(core)  # an RM registers, then reports its nodes

    def _send(self, core: Core, kind: str, request: Any, description: str) -> None:
        if isinstance(request, si.ApplicationRequest):
            for removed in request.remove:
                simulated_workloads.remember_removed(self, removed.application_id)
        elif isinstance(request, si.NodeRequest):
            self.removed_nodes.update(
                info.node_id for info in request.nodes if info.action is si.NodeAction.DECOMISSION
            )
        self.sent.append((kind, request, description))
        simulated_restart.remember(self, kind, request)
        super()._send(core, kind, request, description)

    def send_request(self, core: Core, kind: str, request: Any, description: str) -> None:
        """Send and record one SI request (a restart's recovery sends its own)."""
        self._send(core, kind, request, description)

    def send_plain(self, core: Core, kind: str, request: Any, description: str) -> None:
        """Send and record one SI request a restart's recovery does not send again."""
        super()._send(core, kind, request, description)

    def _resend_after_reconnect(self, core: Core) -> None:
        """A reconnect: the last one to three requests again, verbatim (their answers were lost)."""
        again = list(self.sent)[-self.rng.randint(1, 3) :]
        for kind, request, description in again:
            simulated_restart.remember(self, kind, request)
            super()._send(core, kind, request, f"resend after reconnect: {description}")

    def make_config(self, variant: int, **settings: Any) -> str:
        """A reload's configuration: the scenario's, with the placement rules of its workloads; now and
        then without queue root.b (``Workloads.drop_queues``); partition spare added or dropped
        (``Workloads.partitions``: kept otherwise); root.a's max lowered now and then
        (``Workloads.quota_preemption``)."""
        workloads = self.workloads
        config = scenario_config(
            variant,
            deep_queues=workloads.deep_queues,
            quota_preemption=workloads.quota_preemption,
            submit_acl=workloads.denied,
            **settings,
        )
        if workloads.drop_queues and self.rng.random() < 0.3:
            config = simulated_workloads.without_queue_b(config)
        if workloads.partitions:
            spare = has_spare(self.config)
            if self.rng.random() < 0.5:
                spare = not spare
            if spare:
                config = simulated_workloads.with_spare(config)
        # lowered, it mostly stays so: a reload raising it again cancels the quota preemption's timer
        if workloads.quota_preemption and self.rng.random() < (0.8 if lowers_max(self.config) else 0.5):
            config = simulated_workloads.with_lowered_max(config)
        return config

    def _reload_config(self, core: Core) -> None:
        """``Driver``'s reload, described by what it changes (the coverage counts each)."""
        before = self.config
        self.config = self.make_config(
            self.index,
            extra_queue=self.rng.random() < 0.5,
            binpacking=self.rng.random() < 0.3,
            guarantee=self.rng.choice([10, 20, 30]),
        )
        changes = [
            change
            for change, made in (
                (ADDS_PARTITION, not has_spare(before) and has_spare(self.config)),
                (DROPS_PARTITION, has_spare(before) and not has_spare(self.config)),
                (LOWERS_MAX, lowers_max(self.config)),
            )
            if made
        ]
        request = si.UpdateConfigurationRequest(rm_id=self.rm_id, config=self.config)
        description = f"{self.rm_id}: reload" + (f" ({'; '.join(changes)})" if changes else "")
        self.record(Op(seq=0, rm=self.index, kind="config", request=request, description=description))
        core.update_configuration(request)

    def _node_batch_limit(self) -> int:
        return min(3, max(1, self.settings.max_nodes - len(self.nodes)))

    def _node_memory_choices(self) -> Sequence[int]:
        return self.settings.node_memory

    # ---- preemption ----------------------------------------------------------------------------------

    def _add_preemptor_asks(self, core: Core) -> None:
        """High-priority asks in the guaranteed queue that may preempt the others' allocations."""
        app_id = self.preemptor_app
        if app_id is None or app_id not in self.apps:
            self.app_seq += 1
            app_id = self.preemptor_app = f"{self.rm_id}-app-{self.app_seq}"
            user, groups = USERS[self.app_seq % len(USERS)]
            self.apps.add(app_id)
            request = t.applications(self.rm_id, {app_id: PREEMPTOR_QUEUE}, user=user, groups=groups)
            self._send(core, "apps", request, f"add preemptor application {app_id}")
        asks = []
        for _ in range(self.rng.randint(1, 3)):
            self.ask_seq += 1
            key = f"{app_id}-ask-{self.ask_seq}"
            asks.append(
                si.AllocationAsk(
                    allocation_key=key,
                    application_id=app_id,
                    resource_ask={"memory": self.rng.choice([2000, 4000, 8000]), "vcore": 100},
                    priority=10,
                    max_allocations=1,
                    preemption_policy=si.PreemptionPolicy(allow_preempt_self=False, allow_preempt_other=True),
                )
            )
            self.asks[key] = app_id
        self._send(
            core,
            "allocations",
            si.AllocationRequest(rm_id=self.rm_id, asks=asks),
            f"add {len(asks)} preemptor asks to {app_id}",
        )

    def _add_borrower_asks(self, core: Core) -> None:
        """Low-priority work in a queue without a guarantee (root.b): the preemptors' victims."""
        borrowers = sorted(app for app, queue in self.borrowers.items() if app in self.apps)
        if borrowers and self.rng.random() < 0.7:
            app_id = self.rng.choice(borrowers)
        else:
            self.app_seq += 1
            app_id = f"{self.rm_id}-app-{self.app_seq}"
            user, groups = USERS[self.app_seq % len(USERS)]
            self.apps.add(app_id)
            self.borrowers[app_id] = BORROWER_QUEUE
            adding = t.applications(self.rm_id, {app_id: BORROWER_QUEUE}, user=user, groups=groups)
            self._send(core, "apps", adding, f"add borrower application {app_id}")
        count = self.rng.randint(2, 4)
        request = t.asks(
            self.rm_id,
            app_id,
            count,
            {"memory": self.rng.choice([2000, 4000]), "vcore": 100},
            prefix=f"{app_id}-ask-",
            start=self.ask_seq,
        )
        for index in range(self.ask_seq, self.ask_seq + count):
            self.asks[f"{app_id}-ask-{index}"] = app_id
        self.ask_seq += count
        self._send(core, "allocations", request, f"add {count} borrower asks to {app_id}")

    # ---- recovery ----------------------------------------------------------------------------------

    def _recover_onto_new_node(self, core: Core) -> None:
        """A node that joins with allocations already running on it (an RM that restarted)."""
        app_id = self._pick_app()
        if app_id is None:
            return
        self.node_seq += 1
        node_id = f"{self.rm_id}-node-{self.node_seq}"
        self.nodes[node_id] = True
        items = []
        for _ in range(self.rng.randint(1, 2)):
            self.recovered_seq += 1
            items.append(
                si.Allocation(
                    allocation_key=f"{app_id}-recovered-{self.recovered_seq}",
                    uuid=f"{self.rm_id}-recovered-{self.recovered_seq}",
                    resource_per_alloc={"memory": self.rng.choice([500, 1000]), "vcore": 250},
                    node_id=node_id,
                    application_id=app_id,
                )
            )
        capacity = {"memory": self.rng.choice(self.settings.node_memory), "vcore": 8000}
        request = t.nodes(self.rm_id, [node_id], capacity, existing=items)
        self.just_recovered = node_id
        self._send(core, "nodes", request, f"create {node_id} with {len(items)} existing allocations")

    def _decommission_recovered(self, core: Core) -> None:
        """The node that just joined with work on it leaves again (a node flapping after a restart)."""
        node_id = self.leaving
        if node_id is None or node_id not in self.nodes:
            return
        del self.nodes[node_id]
        self._send(
            core,
            "nodes",
            t.node_action(self.rm_id, node_id, si.NodeAction.DECOMISSION),
            f"decommission {node_id}",
        )

    # ---- reservations and required nodes -----------------------------------------------------------

    def _add_large_ask(self, core: Core) -> None:
        """One ask within a node's size but larger than most nodes' free room: it waits, and past the
        reservation delay reserves a node."""
        app_id = self._pick_app()
        if app_id is None:
            return
        self.ask_seq += 1
        key = f"{app_id}-ask-{self.ask_seq}"
        largest = max(self.settings.node_memory)
        memory = self.rng.choice([largest // 2, largest * 3 // 4, largest - 1000])
        ask = si.AllocationAsk(
            allocation_key=key,
            application_id=app_id,
            resource_ask={"memory": memory, "vcore": 1000},
            max_allocations=1,
        )
        self.asks[key] = app_id
        self._send(
            core, "allocations", si.AllocationRequest(rm_id=self.rm_id, asks=[ask]), f"large ask {key}"
        )

    def _add_required_node_ask(self, core: Core) -> None:
        """A daemon-set style ask pinned to one of this RM's nodes."""
        app_id = self._pick_app()
        node_id = self._pick_node()
        if app_id is None or node_id is None:
            return
        self.ask_seq += 1
        key = f"{app_id}-ask-{self.ask_seq}"
        ask = si.AllocationAsk(
            allocation_key=key,
            application_id=app_id,
            resource_ask={"memory": self.rng.choice([1000, 4000]), "vcore": 500},
            max_allocations=1,
            priority=self.rng.choice([0, 15]),
            tags={si.DOMAIN_YUNIKORN + si.KEY_REQUIRED_NODE: node_id},
        )
        self.asks[key] = app_id
        self._send(
            core,
            "allocations",
            si.AllocationRequest(rm_id=self.rm_id, asks=[ask]),
            f"required-node ask {key} on {node_id}",
        )
