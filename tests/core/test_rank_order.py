"""Rank order for blocking calls (architecture.md): an ask may only go down the ranks.

Issue bar: "a test that fails when an actor makes a blocking ask against the rank order".

- unit level: ``Handle.ask`` raises ``RankViolation`` for an ask from a lower or equal rank, before
  anything is sent;
- actor level: an actor of rank NODE asking a PARTITION-rank actor fails in its handler (contained,
  logged, answered with ``HandlerError``), and the target never gets the message; a pooled actor may
  not block at all (an ask inside one pool would wait for its own worker);
- source level: every ``.ask(`` in ``src/actors`` goes through ``KorralActor.ask`` or ``Handle.ask``
  with a caller rank (no direct ``ref.ask(``), and pooled actors never ask;
- run level: in a real end-to-end run every blocking ask that reaches pykka comes from ``Handle.ask``
  and goes strictly down the ranks.
"""

from __future__ import annotations

import ast
import logging
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import pykka
import pytest

import korral
from korral import testing as t
from korral.actors import base
from korral.actors.application import ApplicationActor
from korral.actors.base import (
    TIER_OF_RANK,
    Handle,
    HandlerError,
    KorralActor,
    PoolActor,
    Rank,
    RankViolation,
    ServedActor,
    ThreadedActor,
    ask_all,
)
from korral.actors.dispatcher import CallbackDispatcher
from korral.actors.loop import KorralRef
from korral.actors.node import NodeActor
from korral.actors.partition.actor import PartitionActor
from korral.actors.queue import QueueActor
from korral.actors.rmproxy import RMProxyActor
from korral.actors.runtime import ActorPool
from korral.actors.scheduler.actor import SchedulerActor
from korral.actors.starting import start_actor
from korral.actors.tracker import Tracker

ACTORS_DIR = Path(korral.__file__).parent / "actors"
PYKKA_DIR = str(Path(pykka.__file__).parent)


# ---- test actors -------------------------------------------------------------------------------------


@attrs.frozen
class Ping:
    payload: str = "ping"


@attrs.frozen
class AskOther:
    """Ask ``target`` a Ping and return its answer (or let the violation escape the handler)."""

    target: Any


@attrs.frozen
class Received:
    pass


class Recorder:
    """What a target actor received, readable from the test thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.messages: list[Any] = []

    def add(self, message: Any) -> None:
        with self.lock:
            self.messages.append(message)

    def pings(self) -> int:
        with self.lock:
            return sum(isinstance(m, Ping) for m in self.messages)


class _Target:
    recorder: Recorder

    def on_Ping(self, message: Ping) -> str:
        self.recorder.add(message)
        return f"pong from {self.name}"  # type: ignore[attr-defined]


class PartitionRankTarget(_Target, ThreadedActor):
    rank = Rank.PARTITION

    def __init__(self, tracker: Tracker, name: str, recorder: Recorder) -> None:
        super().__init__(tracker, name)
        self.recorder = recorder


class NodeRankTarget(_Target, ThreadedActor):
    rank = Rank.NODE

    def __init__(self, tracker: Tracker, name: str, recorder: Recorder) -> None:
        super().__init__(tracker, name)
        self.recorder = recorder


class NodeRankAsker(ThreadedActor):
    """A threaded actor of rank NODE: the lowest real rank, so it may not block on anything above."""

    rank = Rank.NODE

    def on_AskOther(self, message: AskOther) -> Any:
        return self.ask(message.target, Ping(), timeout=2.0)


class PartitionRankAsker(ThreadedActor):
    rank = Rank.PARTITION

    def on_AskOther(self, message: AskOther) -> Any:
        return self.ask(message.target, Ping(), timeout=2.0)


class PooledAsker(PoolActor):
    """A pooled actor of rank QUEUE: above NODE, but on a pool, where no ask is allowed."""

    rank = Rank.QUEUE

    def on_AskOther(self, message: AskOther) -> Any:
        return self.ask(message.target, Ping(), timeout=2.0)


class PooledNodeTarget(_Target, PoolActor):
    rank = Rank.NODE

    def __init__(self, tracker: Tracker, name: str, recorder: Recorder, *, pool: ActorPool) -> None:
        super().__init__(tracker, name, pool=pool)
        self.recorder = recorder


@pytest.fixture
def stop_all():
    handles: list[Handle] = []
    pools: list[ActorPool] = []
    yield handles, pools
    for handle in handles:
        handle.stop()
    for handle in handles:
        if handle.ref.is_alive():
            handle.ref.stop(block=True, timeout=2.0)
    for pool in pools:
        pool.stop()


# ---- unit level ----------------------------------------------------------------------------------------


class _NeverRef:
    """A stand-in ActorRef: the rank check must refuse before anything reaches it."""

    def __init__(self) -> None:
        self.asked = 0

    def ask(self, message: Any, timeout: float | None = None) -> Any:
        self.asked += 1
        return "answered"

    def tell(self, message: Any) -> None:  # pragma: no cover - not used
        raise AssertionError("not expected")

    def is_alive(self) -> bool:
        return True


@pytest.mark.parametrize("target_rank", [r for r in Rank if r is not Rank.OUTSIDE])
def test_handle_ask_refuses_equal_and_lower_callers(target_rank: Rank) -> None:
    tracker = Tracker()
    for caller in Rank:
        ref = _NeverRef()
        handle = Handle(ref, target_rank, f"target-{target_rank.name}", tracker)  # type: ignore[arg-type]
        if caller <= target_rank:
            with pytest.raises(RankViolation, match="against the rank order"):
                handle.ask(Ping(), caller=caller, timeout=0.1)
            assert ref.asked == 0, f"{caller.name} -> {target_rank.name} reached the actor"
        else:
            assert handle.ask(Ping(), caller=caller, timeout=0.1) == "answered"
            assert ref.asked == 1
    # a refused ask is not counted as in flight (else wait_until_idle would hang)
    assert tracker.in_flight() == sum(1 for caller in Rank if caller > target_rank)


def test_ask_all_refuses_a_lower_caller_before_anything_is_sent() -> None:
    tracker = Tracker()
    below, above = _NeverRef(), _NeverRef()
    handles = [
        Handle(above, Rank.APPLICATION, "application", tracker),  # type: ignore[arg-type]
        Handle(below, Rank.PARTITION, "partition", tracker),  # type: ignore[arg-type]
    ]
    with pytest.raises(RankViolation, match="against the rank order"):
        ask_all([(handle, Ping()) for handle in handles], caller=Rank.SCHEDULER)
    assert below.asked == 0 and above.asked == 0 and tracker.in_flight() == 0


def test_rank_order_of_korral_actors() -> None:
    """RMProxy > Partition > Scheduler > Queue > Application > Node > Dispatcher; the caller's own
    thread (Core) is above all of them."""
    chain = [
        Rank.OUTSIDE,
        RMProxyActor.rank,
        PartitionActor.rank,
        SchedulerActor.rank,
        QueueActor.rank,
        ApplicationActor.rank,
        NodeActor.rank,
        CallbackDispatcher.rank,
    ]
    assert chain == sorted(chain, reverse=True)
    assert len(set(chain)) == len(chain), "ranks must be strictly ordered"
    for pooled in (QueueActor, ApplicationActor, NodeActor):
        assert issubclass(pooled, PoolActor)
    assert issubclass(RMProxyActor, ThreadedActor)
    # each alone in a pool of its own, on the workers of a tier of its own (each waits on lower ones)
    tiers = [TIER_OF_RANK[served.rank] for served in (PartitionActor, SchedulerActor, CallbackDispatcher)]
    for served in (PartitionActor, SchedulerActor, CallbackDispatcher):
        assert issubclass(served, ServedActor)
    assert len(set(tiers)) == len(tiers)


# ---- actor level ---------------------------------------------------------------------------------------


def test_node_rank_actor_asking_a_partition_rank_actor_is_refused(stop_all, caplog) -> None:
    handles, _ = stop_all
    tracker = Tracker()
    recorder = Recorder()
    target = start_actor(PartitionRankTarget, tracker, "partition-target", recorder)
    asker = start_actor(NodeRankAsker, tracker, "node-asker")
    handles += [target, asker]

    with caplog.at_level(logging.ERROR, logger="korral.actors"):
        answer = asker.ask(AskOther(target=target), caller=Rank.OUTSIDE, timeout=5.0)
    assert isinstance(answer, HandlerError), answer
    assert "against the rank order" in answer.message
    assert tracker.errors == 1, "the violation is counted"
    assert any("AskOther failed" in record.getMessage() for record in caplog.records), "and logged"
    assert tracker.wait_idle(2.0), "a refused ask leaves nothing in flight"
    assert recorder.pings() == 0, "the target never received the message"
    # the asker survived (the failure was contained) and still answers
    assert asker.is_alive
    again = asker.ask(AskOther(target=target), caller=Rank.OUTSIDE, timeout=5.0)
    assert isinstance(again, HandlerError)
    assert recorder.pings() == 0
    # a tell upwards is the sanctioned way, and it arrives
    target.tell(Ping(payload="told"))
    assert tracker.wait_idle(2.0)
    assert recorder.pings() == 1


def test_equal_rank_ask_is_refused_and_lower_rank_ask_is_answered(stop_all) -> None:
    handles, _ = stop_all
    tracker = Tracker()
    recorder = Recorder()
    sideways = start_actor(PartitionRankTarget, tracker, "peer", recorder)
    below = start_actor(NodeRankTarget, tracker, "below", recorder)
    asker = start_actor(PartitionRankAsker, tracker, "partition-asker")
    handles += [sideways, below, asker]

    refused = asker.ask(AskOther(target=sideways), caller=Rank.OUTSIDE, timeout=5.0)
    assert isinstance(refused, HandlerError) and "against the rank order" in refused.message
    assert recorder.pings() == 0
    answered = asker.ask(AskOther(target=below), caller=Rank.OUTSIDE, timeout=5.0)
    assert answered == "pong from below"
    assert recorder.pings() == 1
    assert tracker.errors == 1
    assert tracker.wait_idle(2.0)


def test_pooled_actor_may_not_ask_an_actor_of_its_pool(stop_all) -> None:
    handles, pools = stop_all
    tracker = Tracker()
    recorder = Recorder()
    pool = ActorPool("test-pool")
    pools.append(pool)
    asker = start_actor(PooledAsker, tracker, "pooled-asker", pool=pool)
    target = start_actor(PooledNodeTarget, tracker, "pooled-target", recorder, pool=pool)
    handles += [asker, target]

    # rank-wise QUEUE -> NODE is downwards, but the ask would wait for the very worker that runs it
    answer = asker.ask(AskOther(target=target), caller=Rank.OUTSIDE, timeout=5.0)
    assert isinstance(answer, HandlerError), answer
    assert "actor pool" in answer.message and "must not block" in answer.message
    assert tracker.errors == 1
    assert tracker.wait_idle(2.0)
    assert recorder.pings() == 0, "the target never received the message"
    # the pool is not wedged: the target still answers an ask from outside
    assert target.ask(Ping(), caller=Rank.OUTSIDE, timeout=2.0) == "pong from pooled-target"


def test_pooled_actor_may_not_ask_even_outside_its_pool(stop_all) -> None:
    handles, pools = stop_all
    tracker = Tracker()
    recorder = Recorder()
    pool = ActorPool("test-pool-2")
    pools.append(pool)
    asker = start_actor(PooledAsker, tracker, "pooled-asker", pool=pool)
    target = start_actor(NodeRankTarget, tracker, "threaded-target", recorder)
    handles += [asker, target]
    answer = asker.ask(AskOther(target=target), caller=Rank.OUTSIDE, timeout=5.0)
    assert isinstance(answer, HandlerError) and "must not block" in answer.message
    assert recorder.pings() == 0


def test_ask_from_outside_a_handler_uses_the_actors_own_rank() -> None:
    """``KorralActor.ask`` checks the actor's rank whatever thread calls it."""
    tracker = Tracker()
    ref = _NeverRef()
    target = Handle(ref, Rank.SCHEDULER, "scheduler", tracker)  # type: ignore[arg-type]

    class Fake:
        rank = Rank.APPLICATION
        name = "fake-app"
        never_blocks = False

    with pytest.raises(RankViolation):
        KorralActor.ask(Fake(), target, Ping())  # type: ignore[arg-type]
    assert ref.asked == 0


# ---- source level --------------------------------------------------------------------------------------


def _class_bases(tree: ast.Module) -> dict[str, set[str]]:
    bases: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            bases[node.name] = {ast.unparse(b) for b in node.bases}
    return bases


def _ask_calls(tree: ast.Module) -> list[tuple[ast.Call, str | None]]:
    """Every call of an attribute named ``ask``, with the class it is made in."""
    found: list[tuple[ast.Call, str | None]] = []

    def visit(node: ast.AST, cls: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, child.name)
                continue
            if (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Attribute)
                and child.func.attr == "ask"
            ):
                found.append((child, cls))
            visit(child, cls)

    visit(tree, None)
    return found


def test_every_ask_in_the_actors_goes_through_the_rank_checked_wrappers() -> None:
    # every actor module but Ray's (its own remote calls are not pykka asks)
    files = sorted(p for p in ACTORS_DIR.rglob("*.py") if "ray" not in p.relative_to(ACTORS_DIR).parts)
    assert {p.relative_to(ACTORS_DIR).as_posix() for p in files} >= {
        "scheduler/actor.py",
        "partition/actor.py",
        "node.py",
        "application.py",
    }
    problems: list[str] = []
    seen = Counter()
    for path in files:
        tree = ast.parse(path.read_text(), filename=str(path))
        bases = _class_bases(tree)
        for call, cls in _ask_calls(tree):
            where = f"{path.name}:{call.lineno}: {ast.unparse(call)[:80]}"
            receiver = ast.unparse(call.func.value)  # type: ignore[attr-defined]
            keywords = {k.arg for k in call.keywords}
            if receiver == "self":
                # KorralActor.ask(target, message): the actor's own rank is the caller rank
                seen["self.ask"] += 1
                if cls is not None and bases.get(cls, set()) & {"PoolActor"}:
                    problems.append(f"{where}: a pooled actor ({cls}) must never block")
                if not call.args:
                    problems.append(f"{where}: KorralActor.ask needs a target handle")
                continue
            if path.name == "base.py":
                continue  # the wrappers themselves: Handle.ask calls ref.ask after the rank check
            if receiver.endswith("ref") or receiver.endswith("actor_ref") or receiver.endswith("proxy()"):
                problems.append(f"{where}: direct pykka ask bypasses the rank check")
            elif "caller" not in keywords:
                problems.append(f"{where}: Handle.ask without a caller rank")
            else:
                seen["handle.ask"] += 1
            if any(k.arg == "timeout" and ast.unparse(k.value) == "None" for k in call.keywords):
                problems.append(f"{where}: an ask without a timeout")
        # pykka's other blocking forms: proxies (futures) and .get() on an ask future
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "proxy" and path.name != "runtime.py":
                problems.append(f"{path.name}:{node.lineno}: pykka proxy (blocking futures) used")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "ask"
                and any(k.arg == "block" for k in node.keywords)
                and path.name != "loop.py"  # KorralRef.stop: pykka's ActorRef.stop, korral's message
                # base.ask_all: the futures it makes are its own, each waited for with a timeout
                and path.name != "base.py"
            ):
                problems.append(f"{path.name}:{node.lineno}: ask(block=...) escapes the wrapper")
    assert not problems, "\n".join(problems)
    assert seen["self.ask"] > 0, "the scan found no asks at all: it is not looking at the right code"


def test_base_is_the_only_place_that_asks_pykka_directly() -> None:
    tree = ast.parse((ACTORS_DIR / "base.py").read_text())
    direct = [
        call
        for call, cls in _ask_calls(tree)
        if ast.unparse(call.func.value) != "self"  # type: ignore[attr-defined]
    ]
    owners = {cls for call, cls in _ask_calls(tree) if ast.unparse(call.func.value).endswith("ref")}  # type: ignore[attr-defined]
    assert direct, "base.py is expected to hold the one real ask"
    assert owners == {"Handle"}, f"only Handle.ask may call ref.ask, found in {owners}"


def test_the_scan_catches_a_violation() -> None:
    """The scanner itself: a direct ref.ask and a pooled actor's ask are both reported."""
    source = """
class Bad(PoolActor):
    def on_X(self, message):
        self.ask(self.partition, Snapshot())
        self.partition.ref.ask(Snapshot())
        self.scheduler.ask(Snapshot())
"""
    tree = ast.parse(source)
    bases = _class_bases(tree)
    calls = _ask_calls(tree)
    assert len(calls) == 3
    assert bases["Bad"] == {"PoolActor"}
    receivers = [ast.unparse(call.func.value) for call, _ in calls]  # type: ignore[attr-defined]
    assert receivers == ["self", "self.partition.ref", "self.scheduler"]
    assert "caller" not in {k.arg for k in calls[2][0].keywords}


# ---- run level -----------------------------------------------------------------------------------------


def test_every_blocking_ask_of_a_real_run_goes_down_the_ranks(monkeypatch) -> None:
    """Spy on pykka's ask during a full run: each one comes from Handle.ask, downwards."""
    calls: list[tuple[str, str]] = []
    lock = threading.Lock()
    real_ask = pykka.ActorRef.ask
    handle_ask_code = base.Handle.ask.__code__
    handle_ask_later_code = base.Handle._ask_later.__code__

    korral_stop_code = KorralRef.stop.__code__

    def spy(self: pykka.ActorRef, message: Any, *args: Any, **kwargs: Any) -> Any:
        frame = sys._getframe(1)
        with lock:
            calls.append((frame.f_code.co_name, type(message).__name__))
            # pykka's own stop() asks the actor to stop without blocking: not a blocking call; nor
            # is korral's KorralRef.stop, the same for actors on korral's own loop
            if (
                frame.f_code not in (handle_ask_code, handle_ask_later_code)
                and frame.f_code is not korral_stop_code
                and PYKKA_DIR not in frame.f_code.co_filename
            ):
                calls.append(("BYPASS", f"{frame.f_code.co_filename}:{frame.f_lineno}"))
        return real_ask(self, message, *args, **kwargs)

    monkeypatch.setattr(pykka.ActorRef, "ask", spy)

    ranks: list[tuple[Rank, Rank]] = []
    real_handle_ask = base.Handle.ask

    def rank_spy(self: Handle, message: Any, *, caller: Rank, timeout: float = base.DEFAULT_ASK_TIMEOUT):
        with lock:
            ranks.append((caller, self.rank))
        return real_handle_ask(self, message, caller=caller, timeout=timeout)

    real_handle_ask_later = base.Handle._ask_later

    def rank_spy_later(self: Handle, message: Any, *, caller: Rank):
        with lock:
            ranks.append((caller, self.rank))
        return real_handle_ask_later(self, message, caller=caller)

    # the real Handle.ask and _ask_later still run (called by these spies): their frames reach pykka
    monkeypatch.setattr(base.Handle, "ask", rank_spy)
    monkeypatch.setattr(base.Handle, "_ask_later", rank_spy_later)

    config = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
          - name: b
            resources: {max: {memory: 500}}
"""
    rm = t.RecordingRM("rm")
    with korral.start(completing_timeout=0.2, queue_cleanup_interval=0.2, scheduling_interval=0.02) as core:
        core.register_resource_manager(t.register("rm", config), rm)
        core.update_node(t.nodes("rm", ["n1", "n2"], {"memory": 1000, "vcore": 1000}))
        core.update_application(t.applications("rm", {"app1": "root.a", "app2": "root.b"}))
        core.update_allocation(t.asks("rm", "app1", 5, {"memory": 100, "vcore": 10}))
        core.update_allocation(t.asks("rm", "app2", 8, {"memory": 100, "vcore": 10}))
        core.wait_until_idle()
        for info in (
            core.partitions(),
            core.queue("[rm]default", "root.a"),
            core.applications("[rm]default"),
            core.nodes("[rm]default"),
            core.scheduler_stats("[rm]default"),
        ):
            assert info
        core.update_configuration(
            korral.si.UpdateConfigurationRequest(rm_id="rm", config=config.replace("500", "600"))
        )
        core.update_allocation(t.release("rm", "app1"))
        core.wait_until_idle()
        assert core.queue("[rm]default", "root.b").allocated == {"memory": 600, "vcore": 60}
        assert core.tracker.errors == 0
        # re-registering stops the old partitions with asks from the proxy
        core.register_resource_manager(t.register("rm", config), rm)
        core.wait_until_idle()
    bypasses = [c for c in calls if c[0] == "BYPASS"]
    assert not bypasses, f"asks that bypass Handle.ask: {bypasses}"
    assert calls, "the spy saw no asks"
    assert ranks, "the rank spy saw no asks"
    wrong = [(c.name, r.name) for c, r in ranks if c <= r]
    assert not wrong, f"asks against the rank order: {wrong}"
    # the real run used at least these downward edges
    edges = {(c, r) for c, r in ranks}
    assert (Rank.OUTSIDE, Rank.RM_PROXY) in edges
    assert (Rank.OUTSIDE, Rank.PARTITION) in edges
    assert (Rank.RM_PROXY, Rank.PARTITION) in edges
    # queue usage is read from the board the scheduler publishes, never asked of a queue; the reload
    # changes one queue (root.b's max) and only that queue's actor is asked for its new spec
    assert ranks.count((Rank.PARTITION, Rank.QUEUE)) == 1
    assert (Rank.PARTITION, Rank.APPLICATION) in edges
    assert (Rank.PARTITION, Rank.NODE) in edges
    assert (Rank.PARTITION, Rank.SCHEDULER) in edges
