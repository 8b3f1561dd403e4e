"""``korral.Core``: the in-process scheduler interface (api.md), a facade over the actor system."""

from __future__ import annotations

import contextlib
import gc
import threading
from typing import Any

from korral import si
from korral.actors.base import Handle, HandlerError, Rank, Tracker, in_predicates, start_actor
from korral.actors.messages import Snapshot
from korral.actors.partition import PartitionSettings
from korral.actors.rmproxy import (
    FindPartitions,
    Register,
    RMProxyActor,
    Route,
    StopAll,
    UpdateConfiguration,
    stop_and_wait,
)
from korral.actors.timer import TimerService
from korral.callback import ResourceManagerCallback
from korral.errors import KorralError, SchedulerError
from korral.info import ApplicationInfo, NodeInfo, PartitionInfo, QueueInfo
from korral.si.validate import (
    Checked,
    check_allocation_request,
    check_application_request,
    check_node_request,
)

DEFAULT_SETTINGS: dict[str, float] = {
    "scheduling_interval": 0.1,
    "reservation_delay": 2.0,
    "completing_timeout": 30.0,
    "queue_cleanup_interval": 10.0,
    "placeholder_timeout": 900.0,
}
# korral's own settings (not YuniKorn's). tune_gc: raise the cyclic GC's generation-0 threshold while
# the core runs. A partition holds many long-lived objects (node actors, asks, allocations) and every
# allocation creates a few short-lived ones; at the default threshold (700) full collections keep
# traversing all of them: -35% throughput at 10,000 nodes. The previous thresholds are restored on stop.
KORRAL_SETTINGS: dict[str, bool] = {"tune_gc": True}
GC_GENERATION0_THRESHOLD = 10_000
REGISTRATION_TIMEOUT = 60.0
QUERY_TIMEOUT = 30.0
ENGINES = ("threads", "ray")


class Core:
    """The scheduler core: SI calls in, RM callbacks out, read-only snapshots on demand."""

    def __init__(self, engine: str = "threads", ray_address: str | None = None, **settings: float) -> None:
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        if ray_address is not None and engine != "ray":
            raise ValueError('ray_address is only meaningful with engine="ray"')
        unknown = set(settings) - set(DEFAULT_SETTINGS) - set(KORRAL_SETTINGS)
        if unknown:
            raise TypeError(f"unknown korral setting(s): {', '.join(sorted(unknown))}")
        tune_gc = bool(settings.pop("tune_gc", KORRAL_SETTINGS["tune_gc"]))
        values = {**DEFAULT_SETTINGS, **settings}
        for key, value in values.items():
            if not isinstance(value, int | float) or value < 0:
                raise ValueError(f"setting {key} must be a non-negative number of seconds, got {value!r}")
        self.settings = PartitionSettings(**{key: float(value) for key, value in values.items()})
        self.tracker = Tracker()
        self.engine = engine
        self._ray: Any = None
        if engine == "ray":
            self._ray = _start_ray_engine(ray_address, self.tracker)
        self._timer = TimerService()
        self._proxy: Handle = start_actor(
            RMProxyActor, self.tracker, "rmproxy", self._timer, self.settings, engine=self._ray
        )
        self._registered: set[str] = set()
        self._lock = threading.Lock()
        self._stopped = False
        self._gc_thresholds: tuple[int, int, int] | None = None
        if tune_gc:
            current = gc.get_threshold()
            if current[0] < GC_GENERATION0_THRESHOLD:
                self._gc_thresholds = current
                gc.set_threshold(GC_GENERATION0_THRESHOLD, current[1], current[2])

    # ---- lifecycle ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every actor; idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        # stopping must finish whatever state the actors are in
        with contextlib.suppress(Exception):
            self._proxy.ask(StopAll(), caller=Rank.OUTSIDE, timeout=REGISTRATION_TIMEOUT)
        stop_and_wait(self._proxy)
        self._timer.stop()
        if self._ray is not None:
            self._ray.stop()
        # restore the GC thresholds we raised, unless someone changed them since
        if self._gc_thresholds is not None and gc.get_threshold()[0] == GC_GENERATION0_THRESHOLD:
            gc.set_threshold(*self._gc_thresholds)

    def __enter__(self) -> Core:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _call(self, message: Any, timeout: float) -> Any:
        if self._stopped:
            raise SchedulerError("the core is stopped")
        result = self._proxy.ask(message, caller=Rank.OUTSIDE, timeout=timeout)
        if isinstance(result, KorralError):
            raise result
        if isinstance(result, HandlerError):
            raise SchedulerError(result.message)
        return result

    # ---- the SI ------------------------------------------------------------------------------------

    def register_resource_manager(
        self, request: si.RegisterResourceManagerRequest, callback: ResourceManagerCallback | None = None
    ) -> si.RegisterResourceManagerResponse:
        if type(request) is not si.RegisterResourceManagerRequest:
            raise TypeError(
                "register_resource_manager takes a korral.si.RegisterResourceManagerRequest, "
                f"got {type(request).__name__}"
            )
        if type(request.rm_id) is not str or type(request.config) is not str:
            raise SchedulerError("RegisterResourceManagerRequest: rm_id and config must be strings")
        response = self._call(
            Register(request=request, callback=callback or ResourceManagerCallback()), REGISTRATION_TIMEOUT
        )
        with self._lock:
            self._registered.add(request.rm_id)
        return response

    def _route(self, checked: Checked, kind: str) -> None:
        """Send a checked request on: its bad items are rejected through the RM's callback."""
        if self._stopped:
            raise SchedulerError("the core is stopped")
        rm_id = checked.request.rm_id
        with self._lock:
            registered = type(rm_id) is str and rm_id in self._registered
        if not registered:
            raise SchedulerError(f'received {kind}, but RmID="{rm_id}" not registered')
        self._proxy.tell(Route(request=checked.request, checked=checked))

    def update_allocation(self, request: si.AllocationRequest) -> None:
        self._route(check_allocation_request(request), "AllocationRequest")

    def update_application(self, request: si.ApplicationRequest) -> None:
        self._route(check_application_request(request), "ApplicationRequest")

    def update_node(self, request: si.NodeRequest) -> None:
        self._route(check_node_request(request), "NodeRequest")

    def update_configuration(self, request: si.UpdateConfigurationRequest) -> None:
        if type(request) is not si.UpdateConfigurationRequest:
            raise TypeError(
                "update_configuration takes a korral.si.UpdateConfigurationRequest, "
                f"got {type(request).__name__}"
            )
        if type(request.config) is not str:
            raise SchedulerError("UpdateConfigurationRequest: config must be a string")
        with self._lock:
            registered = type(request.rm_id) is str and request.rm_id in self._registered
        if not registered:
            raise SchedulerError(
                f'received UpdateConfigurationRequest, but RmID="{request.rm_id}" not registered'
            )
        self._call(UpdateConfiguration(request=request), REGISTRATION_TIMEOUT)

    # ---- waiting and reading state -----------------------------------------------------------------

    def wait_until_idle(self, timeout: float = 10.0) -> None:
        """Return once everything submitted so far is processed, its callbacks delivered, and the
        scheduler has made every allocation it can make now; raise TimeoutError otherwise."""
        if self._ray is not None:
            # engine="ray": what is in flight here, in every partition's process, and between them
            if not self._ray.wait_until_idle(timeout):
                raise TimeoutError(f"korral (engine=ray) not idle after {timeout}s")
            return
        if not self.tracker.wait_idle(timeout):
            raise TimeoutError(
                f"korral not idle after {timeout}s: {self.tracker.in_flight()} messages in flight"
            )

    def _partition_handles(self, name: str = "") -> dict[str, Handle]:
        return self._call(FindPartitions(name=name), QUERY_TIMEOUT)

    def _snapshot(self, partition: str, detail: str) -> Any:
        handle = self._partition_handles(partition).get(partition)
        if handle is None:
            return None
        result = handle.ask(Snapshot(detail=detail), caller=Rank.OUTSIDE, timeout=QUERY_TIMEOUT)
        if isinstance(result, HandlerError):
            raise SchedulerError(result.message)
        return result

    def partitions(self) -> list[PartitionInfo]:
        infos = []
        for name in sorted(self._partition_handles()):
            info = self._snapshot(name, "partition")
            if info is not None:
                infos.append(info)
        return infos

    def partition(self, partition: str) -> PartitionInfo | None:
        return self._snapshot(partition, "partition")

    def queue(self, partition: str, queue: str) -> QueueInfo | None:
        return self._snapshot(partition, f"queue:{queue}")

    def application(self, partition: str, application_id: str) -> ApplicationInfo | None:
        return self._snapshot(partition, f"app:{application_id}")

    def applications(self, partition: str) -> list[ApplicationInfo]:
        return self._snapshot(partition, "apps") or []

    def node(self, partition: str, node_id: str) -> NodeInfo | None:
        return self._snapshot(partition, f"node:{node_id}")

    def nodes(self, partition: str) -> list[NodeInfo]:
        return self._snapshot(partition, "nodes") or []

    def scheduler_stats(self, partition: str) -> dict[str, int] | None:
        """Counters of the partition's scheduler: cycles, proposals, rollbacks."""
        if in_predicates():
            # the scheduler is the caller, waiting on this very callback: asking it would deadlock
            raise SchedulerError("scheduler_stats cannot be read from inside the predicates callback")
        return self._snapshot(partition, "scheduler")


def _start_ray_engine(ray_address: str | None, tracker: Tracker) -> Any:
    try:
        from korral.actors.ray_engine import RayEngine
    except ImportError as error:
        raise SchedulerError(f'engine="ray" needs Ray: pip install "korral[ray]" ({error})') from error
    return RayEngine(ray_address, tracker)


def start(engine: str = "threads", ray_address: str | None = None, **settings: float) -> Core:
    """Start the actor system with YuniKorn's defaults for any setting not given.

    engine="threads" (the default) runs every actor in this process; engine="ray" runs each partition
    in its own Ray actor process, on a local Ray instance (``ray_address=None``, shut down on stop) or
    on the cluster at ``ray_address`` (left running).
    """
    return Core(engine=engine, ray_address=ray_address, **settings)
