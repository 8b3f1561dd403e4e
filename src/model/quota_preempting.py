"""Quota preemption (YuniKorn 1.8) over a ``PartitionModel``: when a queue's max is lowered below its
usage, allocations below it are preempted once the queue's ``quota.preemption.delay`` has passed.

The rules (yunikorn-site user_guide/quota_preemption.md and design/quota_preemptor.md):

- On only with the partition's ``preemption.quotapreemptionenabled``, and only for a managed queue
  whose own ``quota.preemption.delay`` (a Go duration, not inherited, default 0) is above 0 and that
  has a max. A dynamic queue never triggers it.
- A change of the queue's config that lowers its max (a type newly limited counts) while its usage
  is over the new max starts a timer at now + delay; so does setting the delay from 0 while over.
- Consecutive changes: a further lowering keeps the earlier start; a changed delay shifts the start
  by the difference; a change that only raises the max, removes it, sets the delay to 0, turns the
  switch off or removes the queue cancels it.
- When the timer runs out, the queue's usage (what is being released already left out) is compared
  with its max then: within it, nothing happens; else victims below the queue free the difference
  (``policies.quota_preemption``), released with PREEMPTED_BY_SCHEDULER and YuniKorn's message. No
  pending ask is needed.
- Top down: while a queue's quota preemption has victims still being released, no queue below it
  (nor itself) starts another; a parent due at the same time as its child goes first.
- A restart resets the timer: an allocation recovered into a queue over its max starts one at
  now + delay when none runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from korral import resource as res
from korral import si
from korral.model.allocation import TAG_REQUIRED_NODE
from korral.model.deadlines import reached
from korral.model.preempting import allocation_age, queue_facts, victim_flags
from korral.model.queue import Queue, QueueState
from korral.policies import quota_preemption as policy
from korral.resource import Resource

if TYPE_CHECKING:
    from korral.model.partition.composed import PartitionModel

QUOTA_MESSAGE = "preempting allocations to enforce new max quota for queue : "
_PREEMPTED = si.TerminationType.PREEMPTED_BY_SCHEDULER

# queue path -> (its max, its quota.preemption.delay) before a config change
Limits = dict[str, tuple[Resource | None, float]]


def limits_before(model: PartitionModel) -> Limits:
    return {
        path: (dict(queue.max) if queue.max else None, queue.quota_preemption_delay)
        for path, queue in model.queues.items()
        if queue.is_managed
    }


def _lowered(old: Resource | None, new: Resource) -> bool:
    """Does ``new`` lower some type of ``old`` (a type newly limited counts)?"""
    if old is None:
        return True
    return any(name not in old or quantity < old[name] for name, quantity in new.items())


def _over(queue: Queue) -> bool:
    return bool(policy.preemptable(queue.max, queue.allocated))


def _event(model: PartitionModel, path: str, message: str) -> None:
    model.effects.queue_event(path, message)


def _start(model: PartitionModel, queue: Queue, now: float) -> None:
    due = now + queue.quota_preemption_delay
    model.quota_timers[queue.path] = due
    _event(
        model,
        queue.path,
        f"quota preemption of queue {queue.path} due in {queue.quota_preemption_delay:g}s: usage "
        f"{res.to_string(queue.allocated)} is over max {res.to_string(queue.max)}",
    )
    _note_due(model, due)


def _cancel(model: PartitionModel, path: str, why: str) -> None:
    if model.quota_timers.pop(path, None) is not None:
        _event(model, path, f"quota preemption of queue {path} cancelled: {why}")


def _note_due(model: PartitionModel, due: float) -> None:
    model.effects.wake_by(due)


def after_config(model: PartitionModel, before: Limits, now: float) -> None:
    """Start, shift or cancel each queue's timer after a config change (the rules above)."""
    enabled = model.config.preemption.quota_preemption_enabled
    for path, queue in model.queues.items():
        at = model.quota_timers.get(path)
        if not enabled or not queue.is_managed or queue.state is QueueState.DRAINING:
            if at is not None:
                _cancel(model, path, "quota preemption is off for the queue")
            continue
        delay, maximum = queue.quota_preemption_delay, queue.max
        if delay <= 0 or not maximum:
            if at is not None:
                _cancel(model, path, "its delay is 0" if delay <= 0 else "its max was removed")
            continue
        old_max, old_delay = before.get(path, (None, 0.0))
        lowered = _lowered(old_max, maximum)
        if at is not None:
            if old_max is not None and maximum != old_max and not lowered:
                _cancel(model, path, "its max was raised")
                continue
            if delay != old_delay:
                at = model.quota_timers[path] = at + delay - old_delay
                _note_due(model, at)
            continue
        if _over(queue) and ((lowered and maximum != old_max) or old_delay <= 0):
            _start(model, queue, now)


def after_recovery(model: PartitionModel, queue: Queue | None, now: float) -> None:
    """A recovered allocation took a queue over its max: its timer starts now (a restart resets it)."""
    if not model.config.preemption.quota_preemption_enabled:
        return
    while queue is not None:
        if (
            queue.is_managed
            and queue.quota_preemption_delay > 0
            and queue.max
            and queue.path not in model.quota_timers
            and queue.path not in model.quota_running
            and _over(queue)
        ):
            _start(model, queue, now)
        queue = queue.parent


def _still_releasing(model: PartitionModel, victims: tuple[tuple[str, str], ...]) -> bool:
    for application_id, uuid in victims:
        app = model.applications.get(application_id)
        if app is not None and app.releasing.get(uuid) is _PREEMPTED:
            return True
    return False


def step(model: PartitionModel, now: float) -> None:
    """The scheduling cycle's quota step: finished runs end, due queues run top down."""
    for path, victims in list(model.quota_running.items()):
        if not _still_releasing(model, victims):
            del model.quota_running[path]
    due = sorted(
        (path for path, at in model.quota_timers.items() if reached(now, at)), key=lambda p: p.count(".")
    )
    for path in due:
        if any(running == path or path.startswith(running + ".") for running in model.quota_running):
            continue  # a run above (or here) is still going: top down, this one waits
        del model.quota_timers[path]
        queue = model.queues.get(path)
        if queue is not None:
            _run(model, queue)
    if model.quota_timers:
        upcoming = [at for at in model.quota_timers.values() if not reached(now, at)]
        if upcoming:
            _note_due(model, min(upcoming))


def _run(model: PartitionModel, queue: Queue) -> None:
    facts = queue_facts(model)  # usage with what is being released already left out
    amount = policy.preemptable(queue.max, facts[queue.path].allocated)
    if not amount:
        _event(model, queue.path, f"quota preemption of queue {queue.path}: usage within max, nothing to do")
        return
    usages: dict[str, policy.QuotaQueue] = {}
    for below in queue.walk():
        usages[below.path] = policy.QuotaQueue(
            below.path,
            below.guaranteed,
            facts[below.path].allocated,
            tuple(child.path for child in below.children.values()),
        )
    message = QUOTA_MESSAGE + queue.path
    released: list[tuple[str, str]] = []
    taken: dict[str, Resource] = {}
    for leaf_path, target in sorted(policy.distribute(queue.path, amount, usages).items()):
        leaf = model.queues.get(leaf_path)
        if leaf is None or not leaf.applications:
            continue
        floors = []
        step_queue: Queue | None = leaf
        while step_queue is not None:
            usage = usages[step_queue.path]
            floors.append(usage._replace(allocated=res.sub(usage.allocated, taken.get(usage.path, {}))))
            if step_queue is queue:
                break
            step_queue = step_queue.parent
        candidates = []
        for app in leaf.applications.values():
            for uuid, allocation in app.allocations.items():
                if (app.releasing and uuid in app.releasing) or allocation.tags.get(TAG_REQUIRED_NODE):
                    continue
                allow_self, originator = victim_flags(app, allocation)
                candidates.append(
                    policy.QuotaCandidate(
                        uuid,
                        app.application_id,
                        allocation.resource,
                        allocation.priority,
                        allow_self,
                        originator,
                        allocation_age(uuid),
                    )
                )
        for victim in policy.choose_quota_victims(leaf_path, target, candidates, floors):
            if model.core_release(victim.application_id, victim.uuid, _PREEMPTED, message) is not None:
                released.append((victim.application_id, victim.uuid))
                for floor in floors:
                    taken[floor.path] = res.add(taken.get(floor.path, {}), victim.resource)
    if released:
        model.quota_running[queue.path] = tuple(released)
        _event(
            model,
            queue.path,
            f"quota preemption of queue {queue.path}: preempting {len(released)} allocations to free "
            f"{res.to_string(amount)}",
        )
    else:
        _event(model, queue.path, f"quota preemption of queue {queue.path}: no victim found within the laws")


class QuotaPreemption:
    """Quota preemption as a part of a partition, with its own state: each queue's timer, and the
    victims of each run still being released. The partition calls it when a config change or a
    recovered allocation may start, shift or cancel a timer (the rules above); its scheduling cycle
    runs the timers (``step``). A partition nothing schedules (the Partition actor's registry) has
    none: the Scheduler's view decides quota preemption."""

    def __init__(self) -> None:
        # queue path -> when its lowered max is enforced
        self.timers: dict[str, float] = {}
        # queue path -> the victims of its run still being released
        self.running: dict[str, tuple[tuple[str, str], ...]] = {}

    def limits_before(self, model: PartitionModel) -> Limits:
        return limits_before(model)

    def after_config(self, model: PartitionModel, before: Limits, now: float) -> None:
        after_config(model, before, now)

    def after_recovery(self, model: PartitionModel, queue: Queue | None, now: float) -> None:
        after_recovery(model, queue, now)

    def step(self, model: PartitionModel, now: float) -> None:
        step(model, now)
