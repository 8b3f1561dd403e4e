"""Application actors own an application's asks, allocations and state (an ``ApplicationOwner``).

Outputs are buffered and sent once per burst of messages (at the end of the pool's turn, or by a
self-tell ``FlushOut`` queued behind whatever is already in the mailbox), so a thousand placements
and releases in a row cost one message to the scheduler's view and one callback to the RM, not a
thousand of each.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from korral import resource as res
from korral import si
from korral.actors.base import Handle, Rank, RetiringActor
from korral.actors.event_channel import deliver_events
from korral.actors.messages import (
    AddAsks,
    AppFinished,
    AppGone,
    CompletingTimeout,
    Deliver,
    FlushOut,
    NodeRemoved,
    Placed,
    Preempt,
    RecoverAllocations,
    RecoveredGone,
    ReleaseAllocations,
    RemoveApplication,
    RemoveAsks,
    Replace,
    Snapshot,
    TimeoutsDue,
    ViewOps,
)
from korral.actors.queue_board import QueueBoard
from korral.actors.runtime import ActorPool
from korral.actors.timer import TimerService
from korral.actors.tracker import Tracker
from korral.info import AllocationInfo, ApplicationInfo, AskInfo, PlaceholderDataInfo
from korral.model import events
from korral.model.app.application import Application, ApplicationState
from korral.model.app.owner import AppEffects, ApplicationOwner
from korral.model.app.summary import log_summary, rm_of, track_released
from korral.model.events import Wanted
from korral.model.naming import partition_without_rm
from korral.model.si_convert import to_si_allocations, to_si_release
from korral.model.view_ops import DropAsk, PutAsks

# once in one of these an application no longer counts anywhere (its board entry goes)
TERMINAL_STATES = frozenset(
    state.value
    for state in (
        ApplicationState.COMPLETED,
        ApplicationState.FAILED,
        ApplicationState.REJECTED,
        ApplicationState.EXPIRED,
    )
)


class ApplicationActor(RetiringActor):
    rank = Rank.APPLICATION

    def __init__(
        self,
        tracker: Tracker,
        name: str,
        app: Application,
        *,
        scheduler: Handle,
        partition: Handle,
        dispatcher: Handle,
        timer: TimerService,
        completing_timeout: float,
        pool: ActorPool,
        events: bool | Wanted = False,
        metrics: Any = None,
        board: QueueBoard | None = None,
    ) -> None:
        super().__init__(tracker, name, pool=pool)
        self.owner = ApplicationOwner(app)
        # the partition's board (QueueBoard.app_states): this application's entry is ours
        self.board = board
        if board is not None:
            board.claim_app(app.application_id, app.state.value, self.handle.actor_id)
        # the core's metrics, told of each state change; the state they last heard of
        self.metrics = metrics
        self._metric_state: str | None = None
        if metrics is not None:
            self._metric_state = metrics.app_states(app.partition, app.queue_path, None, (app.state.value,))
        self.scheduler = scheduler
        self.partition = partition
        self.dispatcher = dispatcher
        self.timer = timer
        self.completing_timeout = completing_timeout
        self.rm_partition = partition_without_rm(app.partition)
        self.events = events
        self.clock = tracker.clocks.clock
        # what the current burst of messages produced, sent at the end of the pool's turn: by a plain
        # call where the pool offers one (``ActorPool.flush_later``), else by a FlushOut self-tell
        # (the simulated runtime, which replays messages)
        self._effects: AppEffects | None = None
        # the in-flight receipts of the RM requests the burst handled: kept until what they produced is
        # sent, so a burst holds no more of an RM's work than its in-flight bound (korral.actors.in_flight)
        self._receipts: list[object] = []
        self._flush_later = getattr(pool, "flush_later", None)
        self._allocating = False  # as last published to the board (QueueBoard.allocating_accepted)

    def _collect(self, receipt: object = None) -> AppEffects:
        if receipt is not None:
            self._receipts.append(receipt)
        effects = self._effects
        if effects is None:
            effects = self._effects = AppEffects()
            if self._flush_later is not None:
                self._flush_later(self, self.tracker)
            else:
                self.kick(FlushOut())
        return effects

    # ---- handlers ----------------------------------------------------------------------------------

    def on_AddAsks(self, message: AddAsks) -> None:
        self.owner.add_asks(message.asks, self.clock(), self._collect(message.receipt))

    def on_RemoveAsks(self, message: RemoveAsks) -> None:
        self.owner.remove_asks(message.allocation_keys, self.clock(), self._collect(message.receipt))

    def on_Replace(self, message: Replace) -> None:
        now = self.clock()
        effects = self._collect()
        for allocation in message.allocations:
            self.owner.replace(allocation, now, effects)

    def on_Preempt(self, message: Preempt) -> None:
        self.owner.preempt(message.uuids, message.message, self.clock(), self._collect())

    def on_TimeoutsDue(self, message: TimeoutsDue) -> None:
        self.owner.expire(self.clock(), self._collect())

    def on_Placed(self, message: Placed) -> None:
        self.owner.confirm(message.allocations, self.clock(), self._collect())

    def on_RecoverAllocations(self, message: RecoverAllocations) -> None:
        self.owner.recover(message.allocations, self.clock(), self._collect())

    def on_ReleaseAllocations(self, message: ReleaseAllocations) -> None:
        self.owner.release(message.releases, self.clock(), self._collect(message.receipt))

    def on_NodeRemoved(self, message: NodeRemoved) -> None:
        self.owner.node_removed(message.node_id, message.uuids, message.reason, self.clock(), self._collect())

    def on_RemoveApplication(self, message: RemoveApplication) -> None:
        self.owner.remove(message.reason, self.clock(), self._collect())
        self._flush()
        if self.metrics is not None:  # it leaves: its state's counts go with it (Completing, Completed)
            app = self.owner.app
            self._metric_state = self.metrics.app_removed(app.partition, app.queue_path, self._metric_state)
        # removed in any state: its entry goes now (what it published since the partition dropped
        # the entry, from messages sent before the removal, must not stay behind)
        if self.board is not None:
            self.board.forget_app(self.owner.app.application_id, self.handle.actor_id)
        self.tell(self.scheduler, AppGone(application_id=self.owner.app.application_id, app=self.handle))

    def on_CompletingTimeout(self, message: CompletingTimeout) -> None:
        self.owner.completing_timeout(self.clock(), self.completing_timeout, self._collect())
        if self.owner.app.state is ApplicationState.COMPLETED:
            self._flush()
            log_summary(self.owner.app, self.tracker.clocks.wall_offset_ns(), rm_of(self.owner.app.partition))
            app_id = self.owner.app.application_id
            self.tell(self.scheduler, AppGone(application_id=app_id, app=self.handle))
            self.tell(
                self.partition,
                AppFinished(application_id=app_id, state=self.owner.app.state.value, info=self._info()),
            )

    def on_FlushOut(self, message: FlushOut) -> None:
        self._flush()

    def flush_due(self) -> None:
        """``flush_later``'s call: the flush, contained and timed as a FlushOut's handler would be."""
        timing = self.timing
        weight = timing.weight(FlushOut) if timing.on else 0
        started = time.thread_time() if weight else 0.0
        try:
            self._flush()
        except Exception as error:
            self.handler_failed("FlushOut", error)
        finally:
            if weight:
                timing.handled("FlushOut", (time.thread_time() - started) * weight)

    def quiet(self) -> bool:
        return self._effects is None

    def on_Snapshot(self, message: Snapshot) -> ApplicationInfo:
        return self._info()

    def _info(self) -> ApplicationInfo:
        app = self.owner.app
        offset_ns = self.tracker.clocks.wall_offset_ns()
        return ApplicationInfo(
            application_id=app.application_id,
            partition=app.partition,
            queue=app.queue_path,
            user=app.user,
            state=app.state.value,
            allocated=res.prune(app.allocated),
            pending=app.pending,
            placeholder=res.prune(app.placeholder_allocated),
            allocations=[
                AllocationInfo.of(a, app.releasing[a.uuid].name if a.uuid in app.releasing else "", offset_ns)
                for a in app.allocations.values()
            ],
            pending_asks=[ask.allocation_key for ask in app.asks.values() if ask.pending > 0],
            asks=self._ask_infos(),
            groups=list(app.groups),
            submission_time_ns=offset_ns + int(app.submission_time * 1e9),
            state_log=[(offset_ns + int(at * 1e9), state) for at, state in app.state_log],
            max_allocated=res.prune(app.max_allocated),
            resource_seconds={
                kind: {t: dict(r) for t, r in by_type.items()}
                for kind, by_type in app.resource_seconds.items()
            },
            placeholder_data=[
                PlaceholderDataInfo(
                    task_group_name=name,
                    count=tally.count,
                    min_resource=dict(tally.min_resource),
                    replaced=tally.replaced,
                    timed_out=tally.timed_out,
                )
                for name, tally in sorted(app.placeholder_data.items())
            ],
        )

    def _publish_allocating(self) -> None:
        """YuniKorn counts an Accepted application that got an allocation (its placeholders) as
        allocating, toward its queues' running applications, until it runs or ends."""
        board = self.board
        assert board is not None
        app = self.owner.app
        allocating = app.state is ApplicationState.ACCEPTED and bool(app.allocations)
        if allocating or self._allocating:  # (only this actor adds its entry: absent stays absent)
            self._allocating = allocating
            board.publish_allocating(app.application_id, allocating, self.handle.actor_id)

    def _publish_state(self, state: str) -> None:
        board = self.board
        if board is not None:
            app_id = self.owner.app.application_id
            if state in TERMINAL_STATES or self.owner.removed:
                board.forget_app(app_id, self.handle.actor_id)
            else:
                board.publish_app(app_id, state, self.handle.actor_id)

    def _ask_infos(self) -> list[AskInfo]:
        # an ask's create_time is on the core's clock: its wall time is that long before now (the
        # offset between the clocks taken once, so that every snapshot gives the same time)
        offset_ns = self.tracker.clocks.wall_offset_ns()
        return [
            AskInfo(
                allocation_key=ask.allocation_key,
                application_id=ask.application_id,
                resource=res.prune(ask.resource),
                pending=ask.pending,
                priority=ask.priority,
                tags=dict(ask.tags),
                required_node=ask.tags.get(si.KEY_REQUIRED_NODE, ""),
                placeholder=ask.placeholder,
                task_group_name=ask.task_group_name,
                originator=ask.originator,
                request_time_ns=offset_ns + int(ask.create_time * 1e9),
            )
            for ask in self.owner.app.asks.values()
            if ask.pending > 0
        ]

    # ---- effects ----------------------------------------------------------------------------------

    def _flush(self) -> None:
        """Send what the burst produced: to the partition, the view and the RM."""
        effects = self._effects
        if effects is None:
            return
        self._effects = None
        receipts, self._receipts = self._receipts, []
        app_id = self.owner.app.application_id
        if effects.recovered_gone:
            self.tell(self.partition, RecoveredGone(uuids=tuple(effects.recovered_gone)))
        # the queues' usage is the scheduler view's (its one owner): nothing to tell a queue here
        if effects.new_allocations:  # once per burst: the peak (only an allocation can raise it)
            peak = self.owner.app.max_allocated
            for name, value in self.owner.app.allocated.items():
                if value > peak.get(name, 0):
                    peak[name] = value
        if effects.view_ops:
            ops = tuple(effects.view_ops)
            self.tell(self.scheduler, ViewOps(application_id=app_id, ops=ops, app=self.handle))
        if effects.released:
            track_released(self.owner.app, effects.released, self.clock())
        if self.metrics is not None and (effects.new_allocations or effects.released):
            app = self.owner.app
            self.metrics.queue_containers(
                app.partition, app.queue_path, len(effects.new_allocations), len(effects.released)
            )
        if effects.new_allocations or effects.released or effects.rejected_asks or effects.released_asks:
            new = to_si_allocations(effects.new_allocations, self.rm_partition)
            released = [to_si_release(a, kind, text) for a, kind, text in effects.released]
            if new and released and not {r.uuid for r in released}.isdisjoint(a.uuid for a in new):
                # confirmed and released in one burst (a decision preempted before its owner had it):
                # the RM hears of the allocation first, in a response of its own, as YuniKorn's
                # scheduling cycle reports it before a later cycle preempts it
                self.tell(
                    self.dispatcher,
                    Deliver(argument=si.AllocationResponse(new=new)),
                )
                new = []
            self.tell(
                self.dispatcher,
                Deliver(
                    argument=si.AllocationResponse(
                        new=new,
                        released=released,
                        released_asks=[
                            si.AllocationAskRelease(
                                partition_name=self.rm_partition,
                                application_id=app_id,
                                allocation_key=key,
                                termination_type=si.TerminationType.TIMEOUT,
                                message=text,
                            )
                            for key, text in effects.released_asks
                        ],
                        rejected=[
                            si.RejectedAllocationAsk(allocation_key=key, application_id=app_id, reason=reason)
                            for key, reason in effects.rejected_asks
                        ],
                    ),
                ),
            )
        if self.board is not None and (effects.new_allocations or effects.state_changes):
            self._publish_allocating()
        if effects.state_changes:
            self._publish_state(effects.state_changes[-1][0])
            if self.metrics is not None:
                app = self.owner.app
                self._metric_state = self.metrics.app_states(
                    app.partition, app.queue_path, self._metric_state, [s for s, _ in effects.state_changes]
                )
            updated = [
                si.UpdatedApplication(
                    application_id=app_id,
                    state=state,
                    state_transition_timestamp=self.tracker.clocks.wall_offset_ns()
                    + int(when * 1e9),  # Unix ns
                )
                for state, when in effects.state_changes
            ]
            self.tell(
                self.dispatcher,
                Deliver(argument=si.ApplicationResponse(updated=updated)),
            )
        if self.events:
            self._send_events(effects)
        if effects.completing and self.owner.app.state is ApplicationState.COMPLETING:
            self.timer.once(self.completing_timeout, self.handle, CompletingTimeout(since=self.clock()))
        deadlines = self.owner.take_deadlines()
        if deadlines:
            now = self.clock()
            for deadline in deadlines:
                self.timer.once(max(0.0, deadline - now), self.handle, TimeoutsDue())
        if effects.failed and self.owner.app.state is ApplicationState.FAILED:
            # Failed is terminal, as Completed: the application leaves the partition
            self.tell(self.scheduler, AppGone(application_id=app_id, app=self.handle))
            self.tell(
                self.partition,
                AppFinished(application_id=app_id, state=self.owner.app.state.value, info=self._info()),
            )
        del receipts  # all is sent: the burst's requests leave their RMs' in-flight counts

    def _send_events(self, effects: AppEffects) -> None:
        app = self.owner.app
        records = [
            events.app_state(app.application_id, state, app.queue_path) for state, _ in effects.state_changes
        ]
        for op in effects.view_ops:
            if type(op) is PutAsks:
                records.extend(
                    events.request(
                        app.application_id,
                        ask.allocation_key,
                        events.Change.ADD,
                        "ask added",
                        resource=dict(ask.resource),
                    )
                    for ask in op.asks
                )
            elif type(op) is DropAsk:
                records.append(
                    events.request(app.application_id, op.allocation_key, events.Change.REMOVE, "ask removed")
                )
        records.extend(
            events.request(app.application_id, key, events.Change.REMOVE, text, events.Detail.REQUEST_TIMEOUT)
            for key, text in effects.released_asks
        )
        for allocation in effects.new_allocations:
            records.append(events.app_allocation(allocation, events.Change.ADD))
            records.append(events.node_allocation(allocation, events.Change.ADD))
        for allocation, kind, text in effects.released:
            records.append(
                events.app_allocation(
                    allocation, events.Change.REMOVE, text, kind, allocation.uuid in effects.node_removed
                )
            )
            records.append(events.node_allocation(allocation, events.Change.REMOVE))
        for allocation in effects.new_allocations:
            records.extend(events.user_group_usage(allocation, app.user, app.limit_group, events.Change.ADD))
        for allocation, _, _ in effects.released:
            records.extend(
                events.user_group_usage(allocation, app.user, app.limit_group, events.Change.REMOVE)
            )
        deliver_events(self.tracker, self.dispatcher, records, partial(self.tell, self.dispatcher))
