"""``PreemptionDriver``: borrowers, urgent asks that preempt them, and the laws every victim keeps."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from korral import si
from korral import testing as t
from korral.core import Core
from korral.harness import invariants
from korral.harness.stress.common import Op
from korral.harness.stress.driver import Driver
from korral.harness.stress.preemption.setup import (
    BORROWER_QUEUES,
    DAEMON_QUEUE,
    FINISHED_STATES,
    OUTSTANDING_LIMITS,
    PREEMPTION_LAWS,
    PREEMPTION_NODE,
    PREEMPTION_NODES,
    PREEMPTOR_GRACE,
    PREEMPTOR_GUARANTEES,
    PREEMPTOR_QUEUES,
    QUOTA_MESSAGE,
    QUOTA_QUEUE,
    SHRINK_MAX,
    PreemptionRM,
    PreemptionWindow,
    effective_priority,
    preemption_config,
)


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
