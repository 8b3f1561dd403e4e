"""``korral.Core``: the in-process scheduler interface (api.md), a facade over the actor system."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import attrs
import pykka

from korral import extras, si
from korral.actors import gc_tuning
from korral.actors.base import Handle, HandlerError, KorralActor, Rank, in_predicates
from korral.actors.clocks import Clocks
from korral.actors.in_flight import MAX_IN_FLIGHT, InFlight
from korral.actors.messages import (
    Answer,
    ApplicationQuery,
    ApplicationsQuery,
    CompletedApplicationsQuery,
    GroupsUsageQuery,
    GroupUsageQuery,
    NodeQuery,
    NodesQuery,
    PartitionQuery,
    PartitionSummary,
    QueueQuery,
    QueueTreeQuery,
    SchedulerStatsQuery,
    UsersUsageQuery,
    UserUsageQuery,
)
from korral.actors.partition.actor import PartitionSettings
from korral.actors.registrar import Registrar
from korral.actors.registration import STOP_TIMEOUT, build_placements, stop_and_wait
from korral.actors.rm_messages import (
    FindPartitions,
    Register,
    Route,
    StopAll,
    Unregister,
    UpdateConfiguration,
)
from korral.actors.rmproxy import PartitionBoard, RMProxyActor
from korral.actors.setup import ActorSetup
from korral.actors.simulated import SimulatedTimer, Simulation
from korral.actors.simulated_trace import DeliveryTrace
from korral.actors.starting import start_actor
from korral.actors.timer import TimerService
from korral.actors.tracker import SimulatedTracker, Tracker
from korral.actors.workers import DEFAULT_ACTOR_THREADS, ActorThreads
from korral.callback import ResourceManagerCallback
from korral.config import load_config
from korral.config.defaulted import log_defaulted_values
from korral.config.schema import SchedulerConfig
from korral.errors import (
    CallTimeoutError,
    InvalidRequestError,
    KorralError,
    SchedulerError,
)
from korral.info import (
    ApplicationInfo,
    GroupUsageInfo,
    NodeInfo,
    PartitionInfo,
    QueueInfo,
    UserUsageInfo,
)
from korral.server.metrics import CoreMetrics
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
# korral's own settings (not YuniKorn's). tune_gc: raise the cyclic GC's thresholds while the core runs
# (korral.actors.gc_tuning says why), restored on stop; off by default, since the thresholds are the
# whole process's (``korral serve`` and ``korral bench`` turn it on).
# metrics: feed YuniKorn's Prometheus metrics from the actors (False: Core.metrics stays empty).
# log_events: once a REST server serves the core, make events for every RM (gRPC RMs too) for its
# event log; False: only for RMs whose callback takes them (~10 us of CPU an allocation saved).
KORRAL_SETTINGS: dict[str, bool] = {"tune_gc": False, "metrics": True, "log_events": True}
# what clients may make the core hold (docs/security.md): registered RMs, partitions over all RMs, the
# threads of each tier of workers (korral.actors.workers), each RM's items in flight (actors.in_flight)
KORRAL_LIMITS: dict[str, int] = {
    "max_rms": 64,
    "max_partitions": 256,
    "actor_threads": DEFAULT_ACTOR_THREADS,
    "max_in_flight": MAX_IN_FLIGHT,
}
REGISTRATION_TIMEOUT = 60.0
QUERY_TIMEOUT = 30.0
ENGINES = ("threads", "ray")


class Core:
    """The scheduler core: SI calls in, RM callbacks out, read-only snapshots on demand."""

    def __init__(
        self,
        *,
        engine: str = "threads",
        ray_address: str | None = None,
        runtime: str = "threads",
        seed: int = 0,
        setup: ActorSetup | None = None,
        **settings: Any,
    ) -> None:
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        if ray_address is not None and engine != "ray":
            raise ValueError('ray_address is only meaningful with engine="ray"')
        if engine == "ray" and runtime != "threads":
            raise ValueError('engine="ray" runs its partitions on threads in their processes: no runtime')
        # the clock of the core's timers and actors (timeouts, ages, ticks): tests may drive one; the
        # setting is the short form of setup=ActorSetup(clock=...)
        setup = setup if setup is not None else ActorSetup()
        if not isinstance(setup, ActorSetup):
            raise TypeError(f"setup must be a korral.actors.setup.ActorSetup, got {type(setup).__name__}")
        clock = settings.pop("clock", None)
        if clock is not None:
            if setup.clock is not None:
                raise ValueError("clock is given twice: as the clock setting and in setup")
            setup = attrs.evolve(setup, clock=clock)
        unknown = set(settings) - set(DEFAULT_SETTINGS) - set(KORRAL_SETTINGS) - set(KORRAL_LIMITS)
        if unknown:
            raise TypeError(f"unknown korral setting(s): {', '.join(sorted(unknown))}")
        tune_gc = bool(settings.pop("tune_gc", KORRAL_SETTINGS["tune_gc"]))
        measured = bool(settings.pop("metrics", KORRAL_SETTINGS["metrics"]))
        log_events = bool(settings.pop("log_events", KORRAL_SETTINGS["log_events"]))
        limits = {key: settings.pop(key, default) for key, default in KORRAL_LIMITS.items()}
        for key, limit in limits.items():
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                raise ValueError(f"setting {key} must be a positive whole number, got {limit!r}")
        values = {**DEFAULT_SETTINGS, **settings}
        for key, value in values.items():
            if not isinstance(value, int | float) or value < 0:
                raise ValueError(f"setting {key} must be a non-negative number of seconds, got {value!r}")
        # YuniKorn's metrics of this core (its own registry), fed by the actors; served at /ws/v1/metrics
        self.metrics = CoreMetrics()
        self.metrics.log_events = log_events
        seconds: dict[str, Any] = {key: float(value) for key, value in values.items()}
        self.settings = PartitionSettings(
            **seconds,
            metrics=self.metrics if measured else None,
            tune_gc=tune_gc,
            actors=setup,
        )
        self.simulation: Simulation | None = None
        self.tracker, self._timer = self._start_runtime(runtime, seed, setup.clock)
        self.tracker.use_workers(ActorThreads(limits.pop("actor_threads")))
        self._in_flight = InFlight(limits.pop("max_in_flight"), blocking=self.simulation is None)
        self.metrics.event_channel = self.tracker.event_channel
        if measured:  # YuniKorn's metrics history (/ws/v1/history/*); a simulated core's: its first record
            self.metrics.start_history(self.tracker.clocks.wall_clock_ns, sampler=runtime == "threads")
        self.engine = engine
        self._ray: Any = None
        if engine == "ray":
            self._ray = extras.ray_engine(ray_address, self.tracker)
        # the partitions as the RMProxy last published them: partition_names() and queues() read it
        self._board = PartitionBoard()
        self._proxy: Handle = start_actor(
            RMProxyActor,
            self.tracker,
            "rmproxy",
            self.settings,
            board=self._board,
            engine=self._ray,
            **limits,
        )
        # registers, updates and unregisters RMs, one at a time, off the RMProxy and the caller
        self._registrar: Handle = start_actor(
            Registrar, self.tracker, "registrar", self._proxy, self._timer, self.settings, engine=self._ray
        )
        self._lock = threading.Lock()
        self._stopped = False
        self._servers: list[Any] = []  # network servers in front of this core (each has close())
        self._gc_thresholds = gc_tuning.tune() if tune_gc else None

    # ---- lifecycle ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every actor; idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            servers, self._servers = self._servers, []
        for server in servers:  # no new requests while the actors stop
            with contextlib.suppress(Exception):
                server.close()
        # stopping must finish whatever state the actors are in: a registration under way finds the
        # RMProxy stopped, and stops what it started
        with contextlib.suppress(Exception):
            self._proxy.ask(StopAll(), caller=Rank.OUTSIDE, timeout=REGISTRATION_TIMEOUT)
        stop_and_wait(self._proxy)
        stop_and_wait(self._registrar)
        self.tracker.join_threads(STOP_TIMEOUT)
        self._timer.stop()
        self.metrics.close()
        if self._ray is not None:
            self._ray.stop()
        gc_tuning.restore(self._gc_thresholds)

    def __enter__(self) -> Core:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _call(self, message: Any, timeout: float, *, to: Handle | None = None) -> Any:
        """Ask the RMProxy (or ``to``) and return its answer; what it answers as a failure is raised."""
        if self._stopped:
            raise SchedulerError("the core is stopped")
        try:
            result = (to or self._proxy).ask(message, caller=Rank.OUTSIDE, timeout=timeout)
        except pykka.Timeout:
            raise CallTimeoutError(
                f"the core did not answer {type(message).__name__} within {timeout:g}s "
                "(it may still carry it out)"
            ) from None
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
        if not request.rm_id:
            raise InvalidRequestError("RegisterResourceManagerRequest needs an rmID: it is empty")
        # parsed on this thread, its partitions started by the registrar: never on the RMProxy (it
        # routes every RM)
        config = load_config(request.config)
        callback = callback or ResourceManagerCallback()
        # the registrar's answer once the partitions run (an error is raised by _call)
        response: si.RegisterResourceManagerResponse = self._call(
            Register(request=request, callback=callback, config=config),
            self._starting_timeout(config),
            to=self._registrar,
        )
        log_defaulted_values(config, request.rm_id)
        self._in_flight.registered(request.rm_id, callback)
        return response

    def unregister_resource_manager(self, rm_id: str) -> None:
        """The RM leaves: its partitions (nodes, applications, allocations) stop and its callback is
        called no more; it may register again later. ``SchedulerError`` if it is not registered."""
        if type(rm_id) is not str:
            raise TypeError(f"rm_id must be a string, got {type(rm_id).__name__}")
        self._call(Unregister(rm_id=rm_id), REGISTRATION_TIMEOUT, to=self._registrar)

    def _route(self, checked: Checked, kind: str) -> None:
        """Send a checked request on: its bad items are rejected through the RM's callback."""
        if self._stopped:
            raise SchedulerError("the core is stopped")
        rm_id = checked.request.rm_id
        if rm_id == "":
            raise InvalidRequestError(f"{kind} needs an rmID: it is empty")
        if not self._registered(rm_id):
            raise SchedulerError(f'received {kind}, but RmID="{rm_id}" not registered')
        receipt = self._in_flight.receipt(checked.request)  # let go once the core has handled it
        self._proxy.tell(Route(request=checked.request, checked=checked, receipt=receipt))
        del receipt  # held while waiting below, it would keep this request in flight: a wait on itself
        self._in_flight.wait_below(rm_id, lambda: not self._stopped)  # the RM waits while the core catches up

    def update_allocation(self, request: si.AllocationRequest) -> None:
        self._route(check_allocation_request(request), "AllocationRequest")

    def _update_allocation_typed(self, request: si.AllocationRequest) -> None:
        """``update_allocation`` for a request the gRPC server decoded with the plain reader
        (``korral.server.convert.parse_ordered_typed``): every field already has its type and range,
        all that ``check_allocation_request`` checks, so its per-ask pass (~0.5-1 µs an ask, on the
        server's loop under the lock the actors share) is not run again."""
        self._route(Checked(request), "AllocationRequest")

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
        if request.rm_id == "":
            raise InvalidRequestError("UpdateConfigurationRequest needs an rmID: it is empty")
        if not self._registered(request.rm_id):
            raise SchedulerError(
                f'received UpdateConfigurationRequest, but RmID="{request.rm_id}" not registered'
            )
        config = load_config(request.config)  # on this thread, as for a registration
        placements = build_placements(config, request.rm_id)
        update = UpdateConfiguration(request=request, config=config, placements=placements)
        self._call(update, self._starting_timeout(config), to=self._registrar)
        log_defaulted_values(config, request.rm_id)

    def _registered(self, rm_id: object) -> bool:
        """Whether the RMProxy has this RM registered: its board, the one record of registrations."""
        return type(rm_id) is str and rm_id in self._board.configs

    def _starting_timeout(self, config: SchedulerConfig) -> float:
        """How long a registration or update of ``config`` may take: with engine="ray" the registrar
        starts each partition's process itself, waiting up to the engine's ``start_timeout`` for
        each, so the caller waits that much longer per partition rather than give up on work that
        goes on."""
        if self._ray is None:
            return REGISTRATION_TIMEOUT
        per_partition: float = self._ray.start_timeout
        return REGISTRATION_TIMEOUT + per_partition * len(config.partitions)

    # ---- waiting and reading state -----------------------------------------------------------------

    def wait_until_idle(self, timeout: float = 10.0) -> None:
        """Return once everything submitted so far is processed, its callbacks delivered, and the
        scheduler has made every allocation it can make now; raise TimeoutError otherwise.
        (Simulated: run the simulation to quiescence; the virtual clock does not move.)"""
        if self.simulation is not None:
            self.simulation.run_until_idle()
            return
        if self._ray is not None:
            # engine="ray": what is in flight here, in every partition's process, and between them
            if not self._ray.wait_until_idle(timeout):
                raise TimeoutError(f"korral (engine=ray) not idle after {timeout}s")
            return
        if not self.tracker.wait_idle(timeout):
            raise TimeoutError(
                f"korral not idle after {timeout}s: {self.tracker.in_flight()} messages in flight"
                f" ({self._in_flight_receivers()})"
            )

    def _in_flight_receivers(self) -> str:
        """Who has messages in flight, named where an actor of this process is behind the id."""
        names: dict[int, str] = {}
        for ref in pykka.ActorRegistry.get_all():
            inbox = ref.actor_inbox
            actor = getattr(inbox, "_actor", None)  # a pooled actor (its own handle's id)
            if isinstance(actor, KorralActor):
                # what tells a message that waits unseen from a count without a message
                queued = len(getattr(inbox, "_messages", None) or ())
                state = "stopped" if ref.actor_stopped.is_set() else "alive"
                names[actor.handle.actor_id] = f"{actor.name} ({state}, {queued} in its mailbox)"
            else:
                names[id(ref)] = ref.actor_class.__name__
        waiting = self.tracker.in_flight_by_receiver()
        # a stopped actor is no longer registered: its id is known here no better than a batch's
        unknown = "no running actor (one that stopped, or a pool's outbox or batch)"
        return ", ".join(f"{names.get(key, unknown)}: {count}" for key, count in waiting.items())

    def _partition_handles(self, name: str = "") -> dict[str, Handle]:
        handles: dict[str, Handle] = self._call(FindPartitions(name=name), QUERY_TIMEOUT)
        return handles

    def _snapshot(self, partition: str, query: PartitionQuery[Answer]) -> Answer | None:
        """The partition's answer to the query, of the query's answer type; None: no such partition."""
        handle = self._partition_handles(partition).get(partition)
        if handle is None:
            return None
        result = handle.ask(query, caller=Rank.OUTSIDE, timeout=QUERY_TIMEOUT)
        if isinstance(result, HandlerError):
            raise SchedulerError(result.message)
        answer: Answer = result  # what the partition's handler for this query returns (messages.py)
        return answer

    def partitions(self) -> list[PartitionInfo]:
        infos = []
        for name in sorted(self._partition_handles()):
            info = self._snapshot(name, PartitionSummary())
            if info is not None:
                infos.append(info)
        return infos

    def partition(self, partition: str) -> PartitionInfo | None:
        return self._snapshot(partition, PartitionSummary())

    def queue(self, partition: str, queue: str) -> QueueInfo | None:
        return self._snapshot(partition, QueueQuery(path=queue))

    def application(self, partition: str, application_id: str) -> ApplicationInfo | None:
        return self._snapshot(partition, ApplicationQuery(application_id=application_id))

    def applications(self, partition: str) -> list[ApplicationInfo]:
        return self._snapshot(partition, ApplicationsQuery()) or []

    def node(self, partition: str, node_id: str) -> NodeInfo | None:
        return self._snapshot(partition, NodeQuery(node_id=node_id))

    def nodes(self, partition: str) -> list[NodeInfo]:
        return self._snapshot(partition, NodesQuery()) or []

    def poke_timers(self) -> None:
        """The clock given to ``start(clock=...)`` moved: deliver the timers now due."""
        self._timer.poke()

    def scheduler_stats(self, partition: str) -> dict[str, int] | None:
        """Counters of the partition's scheduler: cycles, proposals, rollbacks."""
        if in_predicates():
            # the scheduler is the caller, waiting on this very callback: asking it would deadlock
            raise SchedulerError("scheduler_stats cannot be read from inside the predicates callback")
        return self._snapshot(partition, SchedulerStatsQuery())

    def user_usage(self, partition: str, user: str) -> UserUsageInfo | None:
        """What is tracked for the user under user/group limits, per queue path; None if unknown."""
        return self._snapshot(partition, UserUsageQuery(user=user))

    def group_usage(self, partition: str, group: str) -> GroupUsageInfo | None:
        """What is tracked for the group under user/group limits, per queue path; None if untracked."""
        return self._snapshot(partition, GroupUsageQuery(group=group))

    def users_usage(self, partition: str) -> list[UserUsageInfo]:
        """``user_usage`` of every user with an application in the partition, by name."""
        return self._snapshot(partition, UsersUsageQuery()) or []

    def groups_usage(self, partition: str) -> list[GroupUsageInfo]:
        """``group_usage`` of every group tracked in the partition (a group limit applies), by name."""
        return self._snapshot(partition, GroupsUsageQuery()) or []

    def partition_names(self) -> list[str]:
        """The core's names of every partition (``[rm1]default``), sorted, as of the last registration or
        configuration change that returned: read without a round trip through the core."""
        return sorted(self._board.handles)

    def queues(self, partition: str) -> list[QueueInfo]:
        """Every queue of the partition, parents before children, each with the usage it last published
        (once per burst). For monitoring: read from what the partition published (asked of it where it
        runs in another process), it is not ordered after SI requests still on their way to it
        (``queue()`` is); once the core is idle it is up to date."""
        if self._stopped:
            raise SchedulerError("the core is stopped")
        published = self.published_queues(partition)
        if published is not None:
            return published
        handle = self._board.handles.get(partition)
        if handle is None:
            return []
        query = QueueTreeQuery()
        try:
            result = handle.ask(query, caller=Rank.OUTSIDE, timeout=QUERY_TIMEOUT)
        except pykka.ActorDeadError:  # removed since it was published
            return []
        if isinstance(result, HandlerError):
            raise SchedulerError(result.message)
        tree: list[QueueInfo] = result  # a QueueTreeQuery's answer
        return tree

    def configurations(self) -> dict[str, SchedulerConfig]:
        """The configuration each registered RM runs (as parsed and validated), by rm_id."""
        return dict(self._board.configs)

    def build_information(self) -> dict[str, dict[str, str]]:
        """The build information each registered RM registered with, by rm_id."""
        return {rm_id: dict(info) for rm_id, info in self._board.build_infos.items()}

    def published_queues(self, partition: str) -> list[QueueInfo] | None:
        """``queues()`` as the partition's actors last published it, read without any message or wait;
        None when the partition publishes nothing here (unknown, or engine="ray": use ``queues()``)."""
        board = self._board.queue_boards.get(partition)
        return board.queues() if board is not None else None

    def completed_applications(self, partition: str) -> list[ApplicationInfo]:
        """Applications of the partition that completed and left it (as YuniKorn keeps them)."""
        return self._snapshot(partition, CompletedApplicationsQuery()) or []

    # ---- serving -----------------------------------------------------------------------------------

    def serve_grpc(self, address: str = "127.0.0.1:0", **options: Any) -> str:
        """Serve the SI over gRPC (si.v1.Scheduler) at address (port 0: any free one); returns
        "HOST:PORT". options: max_concurrent_rpcs, max_message_bytes, max_backlog, max_backlog_bytes,
        max_connections, default_config, tls, tokens (korral.server.grpc_server.GrpcServer). Stopped
        by stop()."""
        from korral.server.grpc_server import GrpcServer

        if self._stopped:
            raise SchedulerError("the core is stopped")
        server = GrpcServer(self, address, **options)
        bound = server.start()
        with self._lock:
            self._servers.append(server)
        return bound

    def serve_rest(self, address: str = "127.0.0.1:0", **options: Any) -> str:
        """Serve YuniKorn's REST API (read-only) and metrics at ``host:port`` (port 0 picks one);
        returns the base URL. Needs the ``serve`` extra (aiohttp). options: tls, switch_interval and
        the bounds (korral.server.rest.limits.RestLimits; docs/api.md). Stopped by ``stop()``.
        Raises MissingExtraError, naming the pip install, when aiohttp is not installed."""
        extras.require_serve_extra()
        from korral.server.rest.server import RestServer  # the serve extra: imported only when serving

        if self._stopped:
            raise SchedulerError("the core is stopped")
        server = RestServer(self, address, **options)
        url = server.start()
        with self._lock:
            stopped = self._stopped
            if not stopped:
                self._servers.append(server)
        if stopped:  # stopped while starting: nothing may keep serving a stopped core
            server.close()
            raise SchedulerError("the core is stopped")
        return url

    # ---- the runtime: threads (the default) or a deterministic simulation --------------------------

    def _start_runtime(
        self, runtime: str, seed: int, clock: Callable[[], float] | None
    ) -> tuple[Tracker, TimerService | SimulatedTimer]:
        """The core's tracker, carrying its clocks, and its timers: on threads or simulated."""
        if runtime == "threads":
            tracker = Tracker(Clocks(clock=clock) if clock is not None else Clocks())
            return tracker, TimerService(tracker.clocks.clock)
        if runtime != "simulated":
            raise ValueError(f"unknown runtime {runtime!r}: threads or simulated")
        if clock is not None:
            raise ValueError("the simulated runtime runs on its own virtual clock: no clock setting")
        simulation = self.simulation = Simulation(seed)
        self._trace = DeliveryTrace(simulation)  # what it delivers (trace())
        return SimulatedTracker(Clocks.simulated(simulation)), SimulatedTimer(simulation)

    def _simulated(self) -> Simulation:
        if self.simulation is None:
            raise SchedulerError('only a simulated core (korral.start(runtime="simulated")) has this')
        return self.simulation

    def advance(self, seconds: float) -> None:
        """Simulated: move the virtual clock on by ``seconds``, running what falls due on the way."""
        self._simulated().advance(seconds)

    def trace(self, *, full: bool = False) -> list[str]:
        """Simulated: every RM callback delivered so far, in order (step, virtual time, dispatcher,
        method, argument). ``full=True``: every message delivered since ``record_full_trace()``."""
        self._simulated()
        return self._trace.lines(full=full)

    def record_full_trace(self) -> None:
        """Simulated: from now on record every delivery, not only callbacks (slower: a replay)."""
        self._simulated()
        self._trace.full = []


def start(
    *,
    engine: str = "threads",
    ray_address: str | None = None,
    runtime: str = "threads",
    seed: int = 0,
    setup: ActorSetup | None = None,
    **settings: Any,
) -> Core:
    """Start the actor system with YuniKorn's defaults for any setting not given.

    engine="threads" (the default) runs every actor in this process; engine="ray" runs each partition
    in its own Ray actor process, on a local Ray instance (``ray_address=None``, shut down on stop) or
    on the cluster at ``ray_address`` (left running). ``runtime="simulated"``: every actor runs on the
    calling thread, in the order a ``seed``-ed RNG picks, on a virtual clock (api.md, Deterministic
    simulation). ``setup``: how the actors are made and which clock they read (``ActorSetup``: for the
    harness and tests, not for an RM)."""
    return Core(engine=engine, ray_address=ray_address, runtime=runtime, seed=seed, setup=setup, **settings)
