"""Queue actors: each owns its queue's configuration and lifecycle, one ``QueueSpec``.

A queue actor is the only writer of its queue's spec (``korral.model.queue_spec``): its limits
(guaranteed, max, maxapplications), ACLs, own properties, child template, and its state (Active;
Draining once the configuration drops it; created by placement from its parent's template; removed by
queue cleanup, which retires the actor). It replaces the lock YuniKorn's ``objects.Queue`` takes around
those. Every change is a message to it, answered with the new value; the partition's registry (placement
and admission: leaf, state, ACLs, maxapplications, the gang's max) and, through the partition, the
scheduler's view and the queue board read the values it answered, by reference.

What changes with every decision is not here: a queue's usage, its order, its running applications
(maxapplications is checked against them at each allocation) are the scheduler's view's, published on
the queue board once per batch.

The partition asks (its rank is above a queue's, and it is not on the pool): a change takes effect
before the partition places the next application. It asks only when something changes (a reload that
changes the queue or drops it, namespace tags that change a dynamic queue), so the ask path and an
unchanged reload send a queue nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from korral.actors.base import DEFAULT_ASK_TIMEOUT, Handle, Rank, RetiringActor, ask_all
from korral.actors.messages import ConfigureQueue, DrainQueue, TagQueue
from korral.actors.runtime import ActorPool
from korral.actors.tracker import Tracker
from korral.config.schema import QueueConfig
from korral.model.partition.registry import ModelError
from korral.model.queue_spec import (
    QueueSpec,
    configured,
    configured_queues,
    drained,
    own_config,
    tagged,
)


class QueueActor(RetiringActor):
    rank = Rank.QUEUE
    # only its partition sends it anything (no SchedulerDone to wait for)
    scheduler_sends = False

    def __init__(self, tracker: Tracker, name: str, spec: QueueSpec, *, pool: ActorPool) -> None:
        super().__init__(tracker, name, pool=pool)
        # what the queue is, as made when it was (by the configuration or by placement)
        self.spec = spec

    def on_ConfigureQueue(self, message: ConfigureQueue) -> QueueSpec:
        self.spec = configured(self.spec.path, message.config, self.spec)
        return self.spec

    def on_DrainQueue(self, message: DrainQueue) -> QueueSpec:
        self.spec = drained(self.spec)
        return self.spec

    def on_TagQueue(self, message: TagQueue) -> QueueSpec:
        self.spec = tagged(self.spec, dict(message.tags))
        return self.spec


# how long a partition waits for its queue actors before it logs that it still waits (and waits again)
ANSWER_WAIT = DEFAULT_ASK_TIMEOUT


class QueueActorSpecs:
    """The partition's registry's ``QueueSpecWriter``: a queue with an actor gets its next spec from
    it; a queue still being made (its actor starts once the registry has it) gets its first one from
    the rules, which its actor then holds. A configuration's changes are asked of all the queues it
    changes at once (``prepare``): their pool answers them in one run, not one hand-off each."""

    def __init__(self, actors: Mapping[str, Handle], caller: Rank) -> None:
        self.actors = actors  # the partition's queue actors by path (its own dict, read here)
        self.caller = caller
        # path -> the next spec its actor answered for the configuration being applied
        self.answers: dict[str, QueueSpec] = {}

    def _asked(self, asks: list[tuple[Handle, Any]]) -> list[QueueSpec]:
        # a queue actor never blocks: its answer comes once its pool gets to it, so a configuration
        # change waits for it however loaded the machine is, rather than failing half applied
        answers = ask_all(asks, caller=self.caller, timeout=ANSWER_WAIT, until_answered=True)
        for (handle, _), answer in zip(asks, answers, strict=True):
            if not isinstance(answer, QueueSpec):
                raise ModelError(f"queue {handle.name} did not answer: {answer!r}")
        return answers

    def prepare(self, root: QueueConfig, current: Mapping[str, QueueSpec]) -> None:
        asks: list[tuple[Handle, Any]] = []
        configured_paths: set[str] = set()
        for path, config in configured_queues(root):
            configured_paths.add(path)
            handle, spec = self.actors.get(path), current.get(path)
            if handle is not None and spec is not None and not _configured_as(spec, config):
                asks.append((handle, ConfigureQueue(config=own_config(config))))
        for path, spec in current.items():
            handle = self.actors.get(path)
            if path not in configured_paths and handle is not None and spec.managed and spec.is_active:
                asks.append((handle, DrainQueue()))
        self.answers = {spec.path: spec for spec in self._asked(asks)} if asks else {}

    def configure(self, path: str, config: QueueConfig, current: QueueSpec | None) -> QueueSpec:
        answer = self.answers.pop(path, None)
        if answer is not None:
            return answer
        handle = self.actors.get(path)
        if handle is None:
            return configured(path, config, current)
        if current is not None and _configured_as(current, config):
            return current  # configured as it is: nothing to tell
        return self._asked([(handle, ConfigureQueue(config=own_config(config)))])[0]

    def drain(self, current: QueueSpec) -> QueueSpec:
        answer = self.answers.pop(current.path, None)
        if answer is not None:
            return answer
        handle = self.actors.get(current.path)
        if handle is None:
            return drained(current)
        return self._asked([(handle, DrainQueue())])[0]

    def tag(self, current: QueueSpec, tags: Mapping[str, str]) -> QueueSpec:
        # the rule says whether the tags change anything: only then is the queue told
        if tagged(current, tags) is current:
            return current
        handle = self.actors.get(current.path)
        if handle is None:
            return tagged(current, tags)
        return self._asked([(handle, TagQueue(tags=tuple(tags.items())))])[0]


def _configured_as(spec: QueueSpec, config: QueueConfig) -> bool:
    """Whether configuring the queue so would leave its spec as it is."""
    return spec.is_active and spec.managed and spec.source == own_config(config)
