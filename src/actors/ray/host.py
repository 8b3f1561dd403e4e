"""engine="ray", inside a partition's process: the Ray actor that hosts one whole partition.

A ``PartitionHost`` holds a partition as with engine="threads": its Partition and Scheduler actors,
its pool of queue, application and node actors, and its own ``Tracker`` and ``TimerService``. What
the partition would tell the RM's dispatcher goes into the host's ``CallbackOutbox`` instead, numbered and
kept until the driver's poller acknowledges it. The RM's ``predicates`` callback lives in the driver:
the scheduler's calls go into the outbox too and wait (bounded) for the driver's answer.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import attrs
import ray

from korral import log_text, si
from korral.actors import gc_tuning
from korral.actors.base import Handle, Rank
from korral.actors.messages import Deliver
from korral.actors.partition.actor import PartitionActor, PartitionSettings
from korral.actors.ray.wire import decode_tells, encode_callbacks
from korral.actors.scheduler.actor import PredicatesForNodes
from korral.actors.timer import TimerService
from korral.actors.tracker import Tracker
from korral.callback import ResourceManagerCallback
from korral.config.schema import PartitionConfig
from korral.records import frozen

log = log_text.logger("korral.ray")

PREDICATES_TIMEOUT = 30.0  # a predicates call the driver has not answered by then refuses its nodes


@frozen
class PredicatesCall:
    """Host -> driver: the RM's ``predicates`` on the candidate nodes of one scheduling decision, in
    order (with ``first``: up to the first accepted); answered through ``PartitionHost.answer``."""

    call_id: int
    allocation_key: str
    node_ids: tuple[str, ...]
    allocate: bool
    first: bool


class CallbackOutbox:
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


class CallbackOutboxHandle:
    """Stands in for the RM's dispatcher handle inside the host: ``Deliver`` goes to the outbox."""

    rank = Rank.DISPATCHER
    name = "outbox"
    # no actor's mailbox behind it: a pooled actor's send is this call, at once (``ActorPool.send``)
    mailbox = False

    def __init__(self, outbox: CallbackOutbox) -> None:
        self.outbox = outbox
        self.actor_id = id(self)

    def tell(self, message: Deliver) -> bool:
        then = getattr(message, "then", None)
        if then is None:
            self.outbox.put(message)
            return True
        # the follow-up stays in this process (its target is an actor here): told once queued
        self.outbox.put(attrs.evolve(message, then=None))  # type: ignore[misc]  # (see ``frozen``)
        target, follow = then
        target.tell(follow)
        return True

    @property
    def is_alive(self) -> bool:
        return True


class ForwardedPredicates(PredicatesForNodes):
    """The RM's ``predicates`` seen from the host. The scheduler puts all the candidate nodes of one
    decision to it at once (``predicates_for_nodes``): one round trip through the driver, where the RM
    is asked node by node as with threads. An answer not back within ``PREDICATES_TIMEOUT`` refuses
    the nodes (the ask waits for a later decision)."""

    # the scheduler's view gathers this many candidates for its first call of a decision, then twice
    # as many each call: one round trip for most decisions, a few for an RM that refuses most nodes
    candidates_per_call = 64

    def __init__(self, outbox: CallbackOutbox) -> None:
        self.outbox = outbox
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._waiting: dict[int, tuple[threading.Event, list[tuple[bool, ...]]]] = {}

    def predicates(self, args: si.PredicatesArgs) -> bool:
        answers = self.predicates_for_nodes(args.allocation_key, (args.node_id,), args.allocate, True)
        return bool(answers) and answers[0]

    def predicates_for_nodes(
        self, allocation_key: str, node_ids: Sequence[str], allocate: bool, first: bool
    ) -> tuple[bool, ...]:
        call_id = next(self._ids)
        answered = threading.Event()
        answer: list[tuple[bool, ...]] = []
        with self._lock:
            self._waiting[call_id] = (answered, answer)
        self.outbox.put(
            PredicatesCall(
                call_id=call_id,
                allocation_key=allocation_key,
                node_ids=tuple(node_ids),
                allocate=allocate,
                first=first,
            )
        )
        try:
            if not answered.wait(PREDICATES_TIMEOUT):
                log.warning(
                    "predicates call %d (%d nodes) not answered in %.0fs: nodes refused",
                    call_id,
                    len(node_ids),
                    PREDICATES_TIMEOUT,
                )
                return ()
            return answer[0]
        finally:
            with self._lock:
                self._waiting.pop(call_id, None)

    def answer(self, call_id: int, answers: tuple[bool, ...]) -> None:
        with self._lock:
            waiting = self._waiting.get(call_id)
        if waiting is not None:
            waiting[1].append(answers)
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
        gc_tuning.tune()  # as korral.start(tune_gc=True), in the host's own process
        self.tracker = Tracker()
        self.timer = TimerService()
        self.outbox = CallbackOutbox()
        self.closed = threading.Event()
        self.forwarded = ForwardedPredicates(self.outbox) if predicates else None
        self.partition = Handle(
            PartitionActor.start(
                self.tracker,
                name,
                rm_id=rm_id,
                config=config,
                callback=self.forwarded or ResourceManagerCallback(),
                callback_closed=self.closed,
                dispatcher=CallbackOutboxHandle(self.outbox),
                timer=self.timer,
                # the host tunes its own process's collector, so its partition may collect too
                settings=attrs.evolve(settings, tune_gc=True),
                events=events,
            ),
            Rank.PARTITION,
            name,
            self.tracker,
        )

    def tell(self, payload: bytes) -> int:
        messages = decode_tells(payload)
        for message in messages:
            self.partition.tell(message)
        return len(messages)

    def ask(self, message: Any, timeout: float) -> Any:
        return self.partition.ask(message, caller=Rank.OUTSIDE, timeout=timeout)

    def poll(self, acked: int, timeout: float) -> bytes:
        return encode_callbacks(self.outbox.take(acked, timeout))

    def answer(self, call_id: int, answers: tuple[bool, ...]) -> None:
        if self.forwarded is not None:
            self.forwarded.answer(call_id, answers)

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
