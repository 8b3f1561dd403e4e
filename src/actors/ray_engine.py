"""engine="ray": each partition runs in a Ray actor process; RMProxy and the RMs' dispatchers stay here.

A ``PartitionHost`` (the Ray actor) holds one whole partition as with engine="threads": its Partition
and Scheduler actors, its pool of queue, application and node actors, and its own ``Tracker`` and
``TimerService``. What the partition would tell the RM's dispatcher goes into the host's ``Outbox``
instead. In the driver, a ``RayPartition`` stands where the partition's ``Handle`` would: its sender
thread forwards tells (and asks, in the same order) to the host in batches, and its poller thread
long-polls the host's outbox and tells each callback, in order, to the RM's own dispatcher.

The driver keeps a ledger of what the RM was told is live in the partition (allocations, nodes,
applications), so that when the host's process dies it can tell the RM what was lost.

Ray is imported only here, and this module only when engine="ray" is asked for.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import logging
import os
import pickle
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Any

import attrs
import ray
from ray.exceptions import GetTimeoutError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from korral import si
from korral.actors.base import Handle as LocalHandle
from korral.actors.base import HandlerError, Rank, RankViolation, Tracker, in_predicates, inside_predicates
from korral.actors.messages import (
    ApplyConfig,
    Deliver,
    PartitionQuery,
    RouteAllocationRequest,
    RouteApplicationRequest,
    RouteNodeRequest,
    SchedulerStatsQuery,
    StopPartition,
)
from korral.actors.partition import PartitionActor, PartitionSettings
from korral.actors.timer import TimerService
from korral.callback import ResourceManagerCallback
from korral.config.schema import PartitionConfig
from korral.errors import SchedulerError

log = logging.getLogger("korral.ray")

POLL_SECONDS = 0.5  # how long one poll waits for callbacks before returning empty
HEALTH_TIMEOUT = 30.0  # a poll that has not come back by then: the host is considered lost
PREDICATES_TIMEOUT = 10.0  # a predicates call the driver has not answered by then counts as False
CALL_TIMEOUT = 60.0  # any other call to a host
GC_GENERATION0_THRESHOLD = 10_000  # as korral.core's tune_gc, in the host's process
TERMINAL_APP_STATES = frozenset({"Completed", "Failed", "Rejected", "Expired"})


def wire(messages: list[Any]) -> bytes:
    """Batches cross the process boundary pickled by the C pickler: Ray's cloudpickle runs a Python
    hook for every object, twice as slow on a batch of thousands of asks or allocations."""
    return pickle.dumps(messages, pickle.HIGHEST_PROTOCOL)


# ---- inside the host's process ------------------------------------------------------------------------


@attrs.frozen(slots=True)
class PredicatesCall:
    """Host -> driver: ask the RM's ``predicates`` callback; answered through ``PartitionHost.answer``."""

    call_id: int
    args: si.PredicatesArgs


class Outbox:
    """What the partition sends its RM, numbered, kept until the driver acknowledges it."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._items: deque[tuple[int, Any]] = deque()
        self._last = 0
        self._acked = 0

    def put(self, item: Any) -> None:
        with self._changed:
            self._last += 1
            self._items.append((self._last, item))
            self._changed.notify_all()

    def take(self, acked: int, timeout: float) -> list[tuple[int, Any]]:
        """Forget what is acknowledged; wait (bounded) for anything newer and return it."""
        with self._changed:
            self._acked = max(self._acked, acked)
            while self._items and self._items[0][0] <= self._acked:
                self._items.popleft()
            self._changed.notify_all()
            self._changed.wait_for(lambda: bool(self._items), timeout)
            return list(self._items)

    def wait_drained(self, timeout: float) -> bool:
        """True once the driver has acknowledged everything put so far."""
        with self._changed:
            return self._changed.wait_for(lambda: self._acked >= self._last, timeout)


class OutboxHandle:
    """Stands in for the RM's dispatcher handle inside the host: ``Deliver`` goes to the outbox."""

    rank = Rank.DISPATCHER
    name = "outbox"

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.actor_id = id(self)

    def tell(self, message: Deliver) -> bool:
        self.outbox.put(message)
        return True

    @property
    def is_alive(self) -> bool:
        return True


class ForwardedPredicates(ResourceManagerCallback):
    """The RM's ``predicates`` seen from the host: each call goes to the driver and waits for its answer."""

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._waiting: dict[int, tuple[threading.Event, list[bool]]] = {}

    def predicates(self, args: si.PredicatesArgs) -> bool:
        call_id = next(self._ids)
        answered = threading.Event()
        answer: list[bool] = []
        with self._lock:
            self._waiting[call_id] = (answered, answer)
        self.outbox.put(PredicatesCall(call_id=call_id, args=args))
        try:
            if not answered.wait(PREDICATES_TIMEOUT):
                log.warning(
                    "predicates call %d not answered in %.0fs: node refused", call_id, PREDICATES_TIMEOUT
                )
                return False
            return answer[0]
        finally:
            with self._lock:
                self._waiting.pop(call_id, None)

    def answer(self, call_id: int, result: bool) -> None:
        with self._lock:
            waiting = self._waiting.get(call_id)
        if waiting is not None:
            waiting[1].append(result)
            waiting[0].set()


class PartitionHost:
    """The body of the Ray actor that hosts one partition (see the module's docstring)."""

    def __init__(
        self,
        name: str,
        *,
        rm_id: str,
        config: PartitionConfig,
        settings: PartitionSettings,
        events: bool,
        predicates: bool,
    ) -> None:
        current = gc.get_threshold()
        if current[0] < GC_GENERATION0_THRESHOLD:
            gc.set_threshold(GC_GENERATION0_THRESHOLD, current[1], current[2])
        self.tracker = Tracker()
        self.timer = TimerService()
        self.outbox = Outbox()
        self.closed = threading.Event()
        self.forwarded = ForwardedPredicates(self.outbox) if predicates else None
        self.partition = LocalHandle(
            PartitionActor.start(
                self.tracker,
                name,
                rm_id=rm_id,
                config=config,
                callback=self.forwarded or ResourceManagerCallback(),
                callback_closed=self.closed,
                dispatcher=OutboxHandle(self.outbox),
                timer=self.timer,
                settings=settings,
                events=events,
            ),
            Rank.PARTITION,
            name,
            self.tracker,
        )

    def tell(self, payload: bytes) -> int:
        messages = pickle.loads(payload)
        for message in messages:
            self.partition.tell(message)
        return len(messages)

    def ask(self, message: Any, timeout: float) -> Any:
        return self.partition.ask(message, caller=Rank.OUTSIDE, timeout=timeout)

    def poll(self, acked: int, timeout: float) -> bytes:
        return wire(self.outbox.take(acked, timeout))

    def answer(self, call_id: int, result: bool) -> None:
        if self.forwarded is not None:
            self.forwarded.answer(call_id, result)

    def idle(self, timeout: float) -> tuple[bool, int]:
        """Whether nothing is in flight here and the driver has taken every callback; handler errors."""
        deadline = time.monotonic() + timeout
        while True:
            sent_before = self.tracker.sent_total
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.tracker.wait_idle(remaining):
                return False, self.tracker.errors
            if not self.outbox.wait_drained(max(0.0, deadline - time.monotonic())):
                return False, self.tracker.errors
            # nothing moved meanwhile: idle at one moment, not at two different ones
            if self.tracker.in_flight() == 0 and self.tracker.sent_total == sent_before:
                return True, self.tracker.errors

    def where(self) -> tuple[str, int]:
        """The Ray node id and process id hosting this partition."""
        return ray.get_runtime_context().get_node_id(), os.getpid()

    def cpu_seconds(self) -> float:
        """CPU time this host's process has used (the benchmarks' cost per allocation)."""
        return time.process_time()


# ---- in the driver ------------------------------------------------------------------------------------


@attrs.define
class Ledger:
    """What the RM was told is live in one partition: what it must hear about if the partition is lost."""

    allocations: dict[str, si.Allocation] = attrs.Factory(dict)  # uuid -> allocation
    nodes: set[str] = attrs.Factory(set)
    applications: set[str] = attrs.Factory(set)

    def delivered(self, message: Deliver) -> None:
        argument = message.argument
        if message.method == "update_allocation":
            for allocation in argument.new:
                self.allocations[allocation.uuid] = allocation
            for release in argument.released:
                self.allocations.pop(release.uuid, None)
        elif message.method == "update_node":
            self.nodes.update(node.node_id for node in argument.accepted)
        elif message.method == "update_application":
            self.applications.update(app.application_id for app in argument.accepted)
            for updated in argument.updated:
                if updated.state in TERMINAL_APP_STATES:
                    self.applications.discard(updated.application_id)

    def routed(self, message: Any) -> None:
        if isinstance(message, RouteAllocationRequest) and message.request.releases is not None:
            for release in message.request.releases.allocations_to_release:
                if release.uuid:
                    self.allocations.pop(release.uuid, None)
                else:  # no uuid: every allocation of the application
                    for uuid, live in list(self.allocations.items()):
                        if live.application_id == release.application_id:
                            del self.allocations[uuid]
        elif isinstance(message, RouteNodeRequest):
            for node in message.request.nodes:
                if node.action == si.NodeAction.DECOMISSION:
                    self.nodes.discard(node.node_id)
        elif isinstance(message, RouteApplicationRequest):
            for removal in message.request.remove:
                self.applications.discard(removal.application_id)


@attrs.frozen(slots=True)
class _Ask:
    message: Any
    timeout: float
    answer: Future


class RayPartition:
    """The driver's handle on a partition hosted by a Ray actor: tells, asks, callbacks, loss."""

    rank = Rank.PARTITION

    def __init__(
        self,
        engine: RayEngine,
        host: Any,
        name: str,
        *,
        tracker: Tracker,
        callback: Any,
        closed: threading.Event,
        dispatcher: LocalHandle,
    ) -> None:
        self.engine = engine
        self.host = host
        self.name = name
        self.actor_id = id(self)
        self.tracker = tracker
        self.callback = callback
        self.closed = closed
        self.dispatcher = dispatcher
        self.ledger = Ledger()
        self.errors = 0
        self._lock = threading.Condition()
        self._outgoing: deque[Any] = deque()
        self._stopping = False
        self.lost = threading.Event()
        self.loss_reason = ""
        self._sender = threading.Thread(target=self._send_loop, name=f"{name}-send", daemon=True)
        self._poller = threading.Thread(target=self._poll_loop, name=f"{name}-poll", daemon=True)
        self._sender.start()
        self._poller.start()

    # ---- what RMProxy and Core call ----------------------------------------------------------------

    def tell(self, message: Any) -> bool:
        if self.lost.is_set():
            self._refuse(message)
            return False
        with self._lock:
            if self._stopping:  # the sender may be gone: nothing would ever count this message done
                return False
            self.tracker.sent(self.actor_id)
            with self.engine.ledger_lock:
                self.ledger.routed(message)
            self._outgoing.append(message)
            self._lock.notify()
        return True

    def ask(self, message: Any, *, caller: Rank, timeout: float = CALL_TIMEOUT) -> Any:
        if caller <= self.rank:
            raise RankViolation(
                f"blocking ask from rank {caller.name} to {self.name} goes against the rank order"
            )
        if self.lost.is_set():
            return self._lost_answer(message)
        if type(message) is SchedulerStatsQuery and in_predicates():
            raise SchedulerError("scheduler_stats cannot be read from inside the predicates callback")
        answer: Future = Future()
        with self._lock:
            self._outgoing.append(_Ask(message=message, timeout=timeout, answer=answer))
            self._lock.notify()
        try:
            return answer.result(timeout + 5.0)
        except TimeoutError:
            return HandlerError(f"{self.name}: {type(message).__name__} not answered in {timeout}s")

    @property
    def is_alive(self) -> bool:
        return not self._stopping and not self.lost.is_set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the partition and its host process (bounded); what is still queued is dropped."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
            dropped = 0
            for queued in self._outgoing:
                if isinstance(queued, _Ask):
                    queued.answer.set_result(HandlerError(f"{self.name}: stopped"))
                else:
                    dropped += 1
            self._outgoing.clear()
            self._lock.notify_all()
        for _ in range(dropped):
            self.tracker.done(self.actor_id)
        # The process goes with everything in it: nothing there is kept, the RM's callbacks are closed
        # (or the partition was dropped from its config), so there is nothing to stop gracefully first.
        with contextlib.suppress(Exception):
            ray.kill(self.host, no_restart=True)
        self.engine.forget(self)

    def where(self) -> tuple[str, int]:
        return ray.get(self.host.where.remote(), timeout=CALL_TIMEOUT)

    def cpu_seconds(self) -> float:
        return ray.get(self.host.cpu_seconds.remote(), timeout=CALL_TIMEOUT)

    def wait_remote_idle(self, timeout: float) -> bool:
        if self.lost.is_set() or self._stopping:
            return True
        try:
            idle, errors = ray.get(self.host.idle.remote(timeout), timeout=timeout + 5.0)
        except GetTimeoutError:
            return False
        except RayError as error:
            self._lose(f"{type(error).__name__}")
            return True
        for _ in range(errors - self.errors):
            self.tracker.record_error()  # the host's contained handler failures count as the core's
        self.errors = max(self.errors, errors)
        return idle

    # ---- threads -----------------------------------------------------------------------------------

    def _send_loop(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._outgoing or self._stopping)
                if self._stopping and not self._outgoing:
                    return
                batch: list[Any] = []
                while self._outgoing and not isinstance(self._outgoing[0], _Ask):
                    batch.append(self._outgoing.popleft())
                ask = self._outgoing.popleft() if not batch and self._outgoing else None
            if batch:
                self._send(batch)
            if ask is not None:
                self._ask(ask)

    def _send(self, batch: list[Any]) -> None:
        try:
            if not self.lost.is_set():
                ray.get(self.host.tell.remote(wire(batch)), timeout=CALL_TIMEOUT)
        except (RayError, GetTimeoutError) as error:
            self._lose(type(error).__name__)
            for message in batch:
                self._refuse(message)
        finally:
            for _ in batch:
                self.tracker.done(self.actor_id)

    def _ask(self, ask: _Ask) -> None:
        if self.lost.is_set():
            ask.answer.set_result(self._lost_answer(ask.message))
            return
        try:
            ask.answer.set_result(
                ray.get(self.host.ask.remote(ask.message, ask.timeout), timeout=ask.timeout)
            )
        except GetTimeoutError:
            ask.answer.set_result(HandlerError(f"{self.name}: {type(ask.message).__name__} timed out"))
        except RayError as error:
            self._lose(type(error).__name__)
            ask.answer.set_result(self._lost_answer(ask.message))

    def _poll_loop(self) -> None:
        acked = 0
        while not self._stopping and not self.lost.is_set():
            try:
                items = pickle.loads(
                    ray.get(self.host.poll.remote(acked, POLL_SECONDS), timeout=HEALTH_TIMEOUT)
                )
            except (RayError, GetTimeoutError) as error:
                if not self._stopping:
                    self._lose(type(error).__name__)
                return
            for seq, item in items:
                if type(item) is PredicatesCall:
                    self._answer_predicates(item)
                elif not self.closed.is_set():
                    with self.engine.ledger_lock:
                        self.ledger.delivered(item)
                    self.dispatcher.tell(item)
                acked = seq

    def _answer_predicates(self, call: PredicatesCall) -> None:
        result = False
        if not self.closed.is_set():
            try:
                with inside_predicates():
                    result = bool(self.callback.predicates(call.args))
            except Exception as error:  # a failing RM plugin means "not this node", as with threads
                log.warning("%s: predicates callback raised %r: node refused", self.name, error)
        with contextlib.suppress(RayError):
            self.host.answer.remote(call.call_id, result)

    # ---- loss --------------------------------------------------------------------------------------

    def _lose(self, cause: str) -> None:
        """The host's process is gone: tell the RM everything it had live there is gone too (once)."""
        with self._lock:
            if self.lost.is_set() or self._stopping:
                return
            self.loss_reason = (
                f"partition {self.name} lost: its process died ({cause}); re-register the RM to rebuild it"
            )
            self.lost.set()
        log.error("%s", self.loss_reason)
        if self.closed.is_set():
            return
        with self.engine.ledger_lock:
            allocations = list(self.ledger.allocations.values())
            nodes = sorted(self.ledger.nodes)
            applications = sorted(self.ledger.applications)
            self.ledger = Ledger()
        reason = self.loss_reason
        if allocations:
            released = [
                si.AllocationRelease(
                    partition_name=allocation.partition_name or self.name,
                    application_id=allocation.application_id,
                    uuid=allocation.uuid,
                    allocation_key=allocation.allocation_key,
                    termination_type=si.TerminationType.UNKNOWN_TERMINATION_TYPE,
                    message=reason,
                )
                for allocation in allocations
            ]
            self.dispatcher.tell(
                Deliver(method="update_allocation", argument=si.AllocationResponse(released=released))
            )
        if applications:
            updated = [
                si.UpdatedApplication(
                    application_id=app_id,
                    state="Failed",
                    state_transition_timestamp=time.time_ns(),
                    message=reason,
                )
                for app_id in applications
            ]
            self.dispatcher.tell(
                Deliver(method="update_application", argument=si.ApplicationResponse(updated=updated))
            )
        if nodes:
            rejected = [si.RejectedNode(node_id=node_id, reason=reason) for node_id in nodes]
            self.dispatcher.tell(Deliver(method="update_node", argument=si.NodeResponse(rejected=rejected)))
        with contextlib.suppress(Exception):
            ray.kill(self.host)

    def _refuse(self, message: Any) -> None:
        """A request for a lost partition: each item rejected, with the reason, through the RM's callback."""
        if self.closed.is_set():
            return
        reason = self.loss_reason or f"partition {self.name} is stopping"
        if isinstance(message, RouteNodeRequest):
            rejected = [
                si.RejectedNode(node_id=node.node_id, reason=reason) for node in message.request.nodes
            ]
            if rejected:
                self.dispatcher.tell(
                    Deliver(method="update_node", argument=si.NodeResponse(rejected=rejected))
                )
        elif isinstance(message, RouteApplicationRequest):
            rejected_apps = [
                si.RejectedApplication(application_id=add.application_id, reason=reason)
                for add in message.request.new
            ]
            if rejected_apps:
                self.dispatcher.tell(
                    Deliver(
                        method="update_application", argument=si.ApplicationResponse(rejected=rejected_apps)
                    )
                )
        elif isinstance(message, RouteAllocationRequest):
            rejected_asks = [
                si.RejectedAllocationAsk(
                    allocation_key=ask.allocation_key, application_id=ask.application_id, reason=reason
                )
                for ask in message.request.asks
            ]
            if rejected_asks:
                self.dispatcher.tell(
                    Deliver(
                        method="update_allocation", argument=si.AllocationResponse(rejected=rejected_asks)
                    )
                )
        elif not isinstance(message, ApplyConfig):
            log.warning("%s: %s dropped: %s", self.name, type(message).__name__, reason)

    def _lost_answer(self, message: Any) -> Any:
        if isinstance(message, PartitionQuery):
            return None  # a lost partition reads as absent until its RM re-registers
        if type(message) is StopPartition:
            return None
        return HandlerError(self.loss_reason)

    def __repr__(self) -> str:
        return f"<RayPartition {self.name}>"


class RayEngine:
    """Starts partitions as Ray actors and owns the Ray connection (a local instance or a cluster's)."""

    def __init__(self, address: str | None, tracker: Tracker) -> None:
        self.tracker = tracker
        self.owns_ray = False
        if not ray.is_initialized():
            if address is None:
                ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
            else:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
            self.owns_ray = True
        self._host_class = ray.remote(PartitionHost)
        # partitions go round the cluster's live nodes in turn: Ray's SPREAD is best effort, and with
        # num_cpus=0 it often leaves every partition on the node that asked
        self._placement = itertools.count()
        self.ledger_lock = threading.Lock()
        self._lock = threading.Lock()
        self._partitions: dict[int, RayPartition] = {}

    def start_partition(
        self,
        name: str,
        *,
        rm_id: str,
        config: PartitionConfig,
        settings: PartitionSettings,
        callback: Any,
        closed: threading.Event,
        dispatcher: LocalHandle,
    ) -> RayPartition:
        nodes = sorted(node["NodeID"] for node in ray.nodes() if node.get("Alive"))
        strategy: Any = "SPREAD"
        if nodes:
            strategy = NodeAffinitySchedulingStrategy(nodes[next(self._placement) % len(nodes)], soft=True)
        host = self._host_class.options(num_cpus=0, max_concurrency=16, scheduling_strategy=strategy).remote(
            name,
            rm_id=rm_id,
            config=config,
            # the core's metrics live in this process: a partition's process does not feed them
            settings=attrs.evolve(settings, metrics=None),
            events=type(callback).send_event is not ResourceManagerCallback.send_event,
            predicates=type(callback).predicates is not ResourceManagerCallback.predicates,
        )
        # wait until it is up, so that a registration that returned has its partitions running
        ray.get(host.where.remote(), timeout=CALL_TIMEOUT)  # type: ignore[attr-defined]
        partition = RayPartition(
            self, host, name, tracker=self.tracker, callback=callback, closed=closed, dispatcher=dispatcher
        )
        with self._lock:
            self._partitions[partition.actor_id] = partition
        return partition

    def forget(self, partition: RayPartition) -> None:
        with self._lock:
            self._partitions.pop(partition.actor_id, None)

    def partitions(self) -> list[RayPartition]:
        with self._lock:
            return list(self._partitions.values())

    def errors(self) -> int:
        return sum(partition.errors for partition in self.partitions())

    def wait_until_idle(self, timeout: float) -> bool:
        """Idle here and in every host at one moment: nothing moved between the two while looking."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sent_before = self.tracker.sent_total
            if not self.tracker.wait_idle(max(0.0, deadline - time.monotonic())):
                return False
            remote_idle = all(
                partition.wait_remote_idle(max(0.01, deadline - time.monotonic()))
                for partition in self.partitions()
            )
            if remote_idle and self.tracker.in_flight() == 0 and self.tracker.sent_total == sent_before:
                return True
        return False

    def stop(self) -> None:
        for partition in self.partitions():
            partition.stop()
        if self.owns_ray:
            with contextlib.suppress(Exception):
                ray.shutdown()
