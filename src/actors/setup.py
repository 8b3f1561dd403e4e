"""``ActorSetup``: how a core makes its actors and which clock they read, in one typed record.

Not a setting of YuniKorn's and not for an RM: the harness builds one (``korral.harness.faults.
start_options()`` puts deliberately broken actor subclasses in it) and tests do (a clock they drive,
node actors left unstarted), and hand it to ``korral.start(setup=...)``. The core passes it to the
partitions whole; nothing else reaches the actors from outside.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from korral.actors.application import ApplicationActor
from korral.actors.node import NodeActor
from korral.actors.scheduler.actor import SchedulerActor

# node actors a partition starts per step once it has answered a node request (StartNodeActors)
DEFAULT_NODE_ACTOR_WARMUP = 500


@attrs.define(frozen=True, kw_only=True)
class ActorSetup:
    """``clock``: seconds, the clock of the core's timers and actors (None: ``time.monotonic``; the
    simulated runtime has its own virtual clock and takes none). ``node_actor``, ``application_actor``,
    ``scheduler_actor``: the classes a partition starts for nodes, applications and its scheduler.
    ``node_actor_warmup``: node actors a partition starts per step after answering a node request (0:
    each on its first message only)."""

    clock: Callable[[], float] | None = None
    node_actor: type[NodeActor] = NodeActor
    application_actor: type[ApplicationActor] = ApplicationActor
    scheduler_actor: type[SchedulerActor] = SchedulerActor
    node_actor_warmup: int = DEFAULT_NODE_ACTOR_WARMUP

    def __attrs_post_init__(self) -> None:
        bases: tuple[tuple[str, type], ...] = (
            ("node_actor", NodeActor),
            ("application_actor", ApplicationActor),
            ("scheduler_actor", SchedulerActor),
        )
        for name, base in bases:
            value = getattr(self, name)
            if not (isinstance(value, type) and issubclass(value, base)):
                raise TypeError(f"ActorSetup.{name} must be {base.__name__} or a subclass, got {value!r}")
        warmup = self.node_actor_warmup
        if type(warmup) is not int or warmup < 0:
            raise ValueError(f"ActorSetup.node_actor_warmup must be an int >= 0, got {warmup!r}")
        if self.clock is not None and not callable(self.clock):
            raise TypeError(f"ActorSetup.clock must be callable (seconds), got {self.clock!r}")
