"""engine="ray", in the driver: a ``RayPartition`` stands where a partition's ``Handle`` would.

Its sender thread forwards tells (and asks, in the same order) to the partition's host in batches; its
poller thread long-polls the host's outbox and tells each callback, in order, to the RM's own
dispatcher, answering the host's predicates calls on the way. Only a Ray error that says the host's
process is gone counts as its loss (or a poll not answered for ``HEALTH_TIMEOUT``): a slow answer on a
loaded machine is waited for. On loss, the RM is told from the ledger (``ledger``) and the
partition's requests are refused item by item.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import ray
from ray.exceptions import GetTimeoutError, RayError

from korral import log_text
from korral.actors.base import Handle, HandlerError, Rank, RankViolation, in_predicates
from korral.actors.messages import ApplyConfig, PartitionQuery, SchedulerStatsQuery, StopPartition
from korral.actors.ray.host import PredicatesCall
from korral.actors.ray.ledger import ROUTED, Ledger, loss_notices, refusal
from korral.actors.ray.predicates import answer_predicates
from korral.actors.ray.wire import decode_callbacks, encode_tells
from korral.actors.tracker import Tracker
from korral.errors import SchedulerError
from korral.records import frozen

if TYPE_CHECKING:
    from korral.actors.ray.engine import RayEngine

log = log_text.logger("korral.ray")

POLL_SECONDS = 0.5  # how long one poll waits for callbacks before returning empty
HEALTH_TIMEOUT = 120.0  # a poll not answered by then: the host is hung, counted as lost
CALL_TIMEOUT = 60.0  # a call for information (where, cpu_seconds)
WAIT_SLICE = 5.0  # a call's answer is waited for in slices, so that a stop is noticed


@frozen
class _Ask:
    message: Any
    timeout: float
    answer: Future[Any]


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
        dispatcher: Handle,
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
        # Ray calls made and callbacks received (the benchmark reports them per allocation)
        self.tell_calls = 0
        self.polls = 0
        self.callbacks = 0
        self.predicates_calls = 0  # round trips for the RM's predicates: one per scheduling decision
        self._ledger_lock = threading.Lock()
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
            with self._ledger_lock:
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
        answer: Future[Any] = Future()
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
        # what PartitionHost.where returns (Ray's calls are untyped)
        host_port: tuple[str, int] = ray.get(self.host.where.remote(), timeout=CALL_TIMEOUT)
        return host_port

    def cpu_seconds(self) -> float:
        seconds: float = ray.get(self.host.cpu_seconds.remote(), timeout=CALL_TIMEOUT)  # PartitionHost's
        return seconds

    def wait_remote_idle(self, timeout: float) -> bool:
        if self.lost.is_set() or self._stopping:
            return True
        try:
            idle: bool
            errors: int
            # what PartitionHost.idle returns (Ray's calls are untyped)
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

    def _wait(self, ref: Any, limit: float | None) -> Any:
        """The answer of one call to the host, waited for in slices: a RayError (the process is gone)
        is raised; GetTimeoutError only past ``limit`` (None: wait as long as the host lives)."""
        deadline = None if limit is None else time.monotonic() + limit
        while True:
            slice_ = (
                WAIT_SLICE if deadline is None else max(0.0, min(WAIT_SLICE, deadline - time.monotonic()))
            )
            try:
                return ray.get(ref, timeout=slice_)
            except GetTimeoutError:
                if self._stopping or (deadline is not None and time.monotonic() >= deadline):
                    raise

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
                self.tell_calls += 1
                self._wait(self.host.tell.remote(encode_tells(batch)), None)
        except GetTimeoutError:  # stopping: what was not taken is dropped with the process
            pass
        except RayError as error:
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
            ask.answer.set_result(self._wait(self.host.ask.remote(ask.message, ask.timeout), ask.timeout))
        except GetTimeoutError:
            ask.answer.set_result(HandlerError(f"{self.name}: {type(ask.message).__name__} timed out"))
        except RayError as error:
            self._lose(type(error).__name__)
            ask.answer.set_result(self._lost_answer(ask.message))

    def _poll_loop(self) -> None:
        acked = 0
        while not self._stopping and not self.lost.is_set():
            try:
                self.polls += 1
                items = decode_callbacks(
                    self._wait(self.host.poll.remote(acked, POLL_SECONDS), HEALTH_TIMEOUT)
                )
            except (RayError, GetTimeoutError) as error:
                if not self._stopping:
                    self._lose(type(error).__name__)
                return
            for seq, item in items:
                if type(item) is PredicatesCall:
                    self.predicates_calls += 1
                    answers = answer_predicates(
                        self.callback,
                        self.closed,
                        item.allocation_key,
                        item.node_ids,
                        item.allocate,
                        item.first,
                        self.name,
                    )
                    with contextlib.suppress(RayError):
                        self.host.answer.remote(item.call_id, answers)
                elif not self.closed.is_set():
                    self.callbacks += 1
                    with self._ledger_lock:
                        self.ledger.delivered(item)
                    self.dispatcher.tell(item)
                acked = seq

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
        if not self.closed.is_set():
            with self._ledger_lock:
                ledger, self.ledger = self.ledger, Ledger()
            for notice in loss_notices(ledger, self.name, self.loss_reason):
                self.dispatcher.tell(notice)
        with contextlib.suppress(Exception):
            ray.kill(self.host)

    def _refuse(self, message: Any) -> None:
        """A request for a lost partition: each item rejected, with the reason, through the RM's callback."""
        if self.closed.is_set():
            return
        reason = self.loss_reason or f"partition {self.name} is stopping"
        notice = refusal(message, reason)
        if notice is not None:
            self.dispatcher.tell(notice)
        elif not isinstance(message, (*ROUTED, ApplyConfig)):
            log.warning("%s: %s dropped: %s", self.name, type(message).__name__, reason)

    def _lost_answer(self, message: Any) -> Any:
        if isinstance(message, PartitionQuery) or type(message) is StopPartition:
            return None  # a lost partition reads as absent until its RM re-registers
        return HandlerError(self.loss_reason)

    def __repr__(self) -> str:
        return f"<RayPartition {self.name}>"
