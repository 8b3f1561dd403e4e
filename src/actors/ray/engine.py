"""engine="ray": each partition runs in a Ray actor process; RMProxy and the RMs' dispatchers stay here.

The pieces, by where they run:
- ``host``: inside a partition's process, the Ray actor that hosts the whole partition and keeps
  its callbacks in an outbox until the driver has them;
- ``partition``: in the driver, where the partition's ``Handle`` would be: batches tells to the host,
  long-polls its outbox into the RM's dispatcher, notices the host's loss;
- ``ledger``: in the driver, what the RM was told is live in a partition, and what it is told when
  the partition is lost;
- ``predicates``: in the driver, the RM's ``predicates`` callback answered for a host;
- ``wire``: the compact records that cross between the two;
- here: ``RayEngine``, which owns the Ray connection and starts, places and stops the hosts.

Ray is imported only by these modules, and they only when engine="ray" is asked for.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from typing import Any

import attrs
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from korral import log_text
from korral.actors.base import Handle
from korral.actors.partition.actor import PartitionSettings
from korral.actors.ray.host import PartitionHost
from korral.actors.ray.partition import CALL_TIMEOUT, RayPartition
from korral.actors.tracker import Tracker
from korral.callback import ResourceManagerCallback
from korral.config.schema import PartitionConfig
from korral.model import events

log = log_text.logger("korral.ray")


class RayEngine:
    """Starts partitions as Ray actors and owns the Ray connection (a local instance or a cluster's)."""

    # how long starting one partition may take (its process up and answering, ``start_partition``):
    # a registration's caller waits this much longer per partition (Core)
    start_timeout = CALL_TIMEOUT

    def __init__(self, address: str | None, tracker: Tracker) -> None:
        self.tracker = tracker
        self.owns_ray = False
        if not ray.is_initialized():
            if address is None:
                # "local": a new instance of its own, as api.md says, even where RAY_ADDRESS or a cluster
                # another process started on this machine (Ray's default) would have it join that
                ray.init(
                    address="local", include_dashboard=False, log_to_driver=False, configure_logging=False
                )
            else:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
            self.owns_ray = True
        self._host_class = ray.remote(PartitionHost)
        # partitions go round the cluster's live nodes in turn: Ray's SPREAD is best effort, and with
        # num_cpus=0 it often leaves every partition on the node that asked
        self._placement = itertools.count()
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
        dispatcher: Handle,
    ) -> RayPartition:
        nodes = sorted(node["NodeID"] for node in ray.nodes() if node.get("Alive"))
        strategy: Any = "SPREAD"
        target: str | None = None
        if nodes:
            target = nodes[next(self._placement) % len(nodes)]
            strategy = NodeAffinitySchedulingStrategy(target, soft=True)
        host = self._host_class.options(num_cpus=0, max_concurrency=16, scheduling_strategy=strategy).remote(
            name,
            rm_id=rm_id,
            config=config,
            # the core's metrics live in this process: a partition's process does not feed them
            settings=attrs.evolve(settings, metrics=None),
            # taken by the RM, or logged in this process for a REST server serving it now
            events=bool(events.wanted(callback, settings.metrics)),
            predicates=type(callback).predicates is not ResourceManagerCallback.predicates,
        )
        # wait until it is up, so that a registration that returned has its partitions running
        node_id, _ = ray.get(host.where.remote(), timeout=self.start_timeout)  # type: ignore[attr-defined]
        if target is not None and node_id != target:
            # A soft affinity falls back when Ray cannot place on the node yet (one that has just
            # joined the cluster): the partition works, but the cluster's partitions are not spread.
            log.warning(
                "partition %s runs on Ray node %s, not on node %s where it was placed: Ray could not "
                "schedule it there (a node that has only just joined?)",
                name,
                node_id,
                target,
            )
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
