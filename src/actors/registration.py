"""Starting and stopping an RM's partitions, and building its placement rules: the work of a registration
or configuration update that costs in proportion to the configuration, done by the ``Registrar``
(korral.actors.registrar) and, for the placement rules, by the caller, never by the RMProxy."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from korral.actors.base import Handle, Rank
from korral.actors.messages import StopPartition
from korral.actors.partition.actor import PartitionActor, PartitionSettings
from korral.actors.queue_board import QueueBoard
from korral.actors.rm_messages import RMConnection
from korral.actors.starting import start_actor
from korral.actors.tracker import Tracker
from korral.config.schema import PartitionConfig, SchedulerConfig
from korral.errors import ConfigError
from korral.model.events import wanted as wanted_events
from korral.model.naming import normalize_partition_name
from korral.policies.placement import PlacementManager, PlacementRuleError

STOP_TIMEOUT = 5.0


def stop_and_wait(handle: Handle, timeout: float = STOP_TIMEOUT) -> None:
    """Stop an actor and wait (bounded) until it has stopped: a stopped core leaves nothing running."""
    with contextlib.suppress(Exception):
        if handle.is_alive:
            handle.ref.stop(block=True, timeout=timeout)


def build_placements(config: SchedulerConfig, rm_id: str) -> Mapping[str, PlacementManager]:
    """Each partition's placement rules, built (by the caller of an update): a rule that cannot be is a
    ConfigError, before anything changes."""
    placements: dict[str, PlacementManager] = {}
    for partition_config in config.partitions:
        try:
            placements[normalize_partition_name(partition_config.name, rm_id)] = PlacementManager.build(
                partition_config.placement_rules
            )
        except PlacementRuleError as error:
            raise ConfigError(
                f"partition {partition_config.name}: placement rules rejected: {error}"
            ) from None
    return MappingProxyType(placements)


def start_partition(
    rm: RMConnection,
    partition_config: PartitionConfig,
    *,
    tracker: Tracker,
    timer: Any,
    settings: PartitionSettings,
    engine: Any = None,
) -> tuple[str, Handle, QueueBoard | None]:
    """Start one partition of an RM (on whichever thread calls): its name, handle and queue board."""
    name = normalize_partition_name(partition_config.name, rm.rm_id)
    if engine is not None:
        handle = engine.start_partition(
            name,
            rm_id=rm.rm_id,
            config=partition_config,
            settings=settings,
            callback=rm.callback,
            closed=rm.closed,
            dispatcher=rm.dispatcher,
        )
        return name, handle, None
    queue_board = QueueBoard()
    handle = start_actor(
        PartitionActor,
        tracker,
        name,
        rm_id=rm.rm_id,
        config=partition_config,
        callback=rm.callback,
        callback_closed=rm.closed,
        dispatcher=rm.dispatcher,
        timer=timer,
        settings=settings,
        events=wanted_events(rm.callback, settings.metrics),
        queue_board=queue_board,
    )
    return name, handle, queue_board


def stop_partition(handle: Handle, caller: Rank, *, ray: bool = False) -> None:
    if ray:
        handle.stop(timeout=STOP_TIMEOUT)  # type: ignore[call-arg]  # a RayPartition: stops its host
        return
    # a partition that cannot answer is stopped all the same
    with contextlib.suppress(Exception):
        handle.ask(StopPartition(), caller=caller)
    stop_and_wait(handle)


__all__ = ["STOP_TIMEOUT", "build_placements", "start_partition", "stop_and_wait", "stop_partition"]
