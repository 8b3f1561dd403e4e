"""``korral stress --preemption``: its queues, laws and the RM that records victims."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from korral import si
from korral.harness import invariants
from korral.harness.stress.common import StressRM

if TYPE_CHECKING:
    from korral.harness.stress.preemption.driver import PreemptionDriver


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


@attrs.frozen(kw_only=True)
class PreemptionWindow:
    awaiting: frozenset[str]
    confirmed: frozenset[str]
    victim_queues: frozenset[str]
    removed: dict[str, dict[str, int]]
    violations: tuple[str, ...]
